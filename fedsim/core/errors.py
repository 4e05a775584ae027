"""Errors raised on bad configuration or bad input data.

Every error that the experiment binaries turn into "exit status 2 and one line"
derives from :class:`ConfigError`; its message names the flag (or file) and what
is accepted, so the binaries can print ``str(err)`` verbatim.
"""


class ConfigError(ValueError):
  """A flag value or a combination of flag values is invalid.

  Attributes:
    flag: the name of the offending flag (without ``--``), or the offending
      file path for data errors.
  """

  def __init__(self, flag: str, message: str):
    super().__init__(f"--{flag}: {message}" if not flag.startswith("/") else f"{flag}: {message}")
    self.flag = flag


class DataError(ConfigError):
  """A data file is missing or corrupt. ``flag`` and ``path`` hold the file path.

  The loaders raise it naming the path; :func:`fedsim.data.load_dataset` re-raises it as a
  :class:`fedsim.config.DataFieldError` (a DataError too) naming the setting, ``data_dir``.
  """

  def __init__(self, path: str, message: str):
    ValueError.__init__(self, f"{path}: {message}")
    self.flag = str(path)
    self.path = str(path)


class OutputError(ConfigError):
  """An output file under the output directory cannot be written (disk full, read-only, ...).

  ``flag`` is ``output_dir``; the message names the file, the OS error and what is kept.
  """

  def __init__(self, message: str):
    super().__init__("output_dir", message)


class DivergenceError(RuntimeError):
  """The objective became NaN or infinite; the run stops (metrics so far are on disk)."""
