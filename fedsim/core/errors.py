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


class Interrupted(KeyboardInterrupt):
  """The run stopped on SIGINT or SIGTERM at the end of a chunk (:mod:`fedsim.interrupts`).

  A ``KeyboardInterrupt`` (so ``except Exception`` does not swallow it). Every record up to
  ``round`` is kept; with checkpointing on, a checkpoint at ``round`` was saved first.

  Attributes:
    round: the last round run (and recorded) of the algorithm that was running.
    checkpoint_round: the round a resume continues from, or None (no checkpoint).
    signum: the signal (``signal.SIGINT``, ``signal.SIGTERM``), or None.
    label: the algorithm that was running; output_dir: the run's folder (or None).
    exit_status: 128 + signum (130 for SIGINT, 143 for SIGTERM), the shells' convention.
  """

  def __init__(self, round: int, checkpoint_round: int | None, signum: int | None = None,
               label: str | None = None, output_dir: str | None = None):
    super().__init__()
    self.round, self.checkpoint_round, self.signum = round, checkpoint_round, signum
    self.label, self.output_dir = label, output_dir

  @property
  def exit_status(self) -> int:
    return 128 + (self.signum or 2)

  def message(self, flags: bool = False) -> str:
    """One line: where it stopped and how to continue (``--resume`` with ``flags``)."""
    import signal
    name = signal.Signals(self.signum).name if self.signum else "interrupt"
    who = f" ({self.label})" if self.label else ""
    head = f"interrupted ({name}) at round {self.round}{who}"
    if self.checkpoint_round is not None:
      how = "--resume" if flags else "resume=True"
      return f"{head}; {how} continues from round {self.checkpoint_round}"
    how = "--checkpoint_every=K" if flags else "checkpoint_every=K"
    where = f" in {self.output_dir}" if self.output_dir else ""
    return f"{head}; records so far are kept{where}; no checkpoint to resume from (add {how} to resume after an " \
           "interruption)"

  def __str__(self) -> str:
    return self.message()
