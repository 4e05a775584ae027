"""How fedsim writes its files, so that a kill at any moment leaves the last complete state readable.

* :func:`atomic_write` / :func:`atomic_open`: a whole file (``config.json``,
  ``results.csv``, plots) is written to a temporary file beside it, flushed,
  fsynced and renamed over the target (``os.replace``, atomic on POSIX): a
  reader sees the old file or the new one, never a part.
* :class:`LineAppender`: ``metrics.jsonl`` grows one complete line per
  ``append`` (one ``os.write`` of the whole line); a failed write (disk full)
  is cut back to the previous length, so the file never ends in a partial line.
* :func:`strict_record` / :func:`restore_record`: strict JSON for records whose
  values may be NaN or infinite (``json.loads`` with ``parse_constant`` raising,
  pandas, jq all read it): a non-finite value is written as ``null`` and listed
  in the record's ``nonfinite`` field (``{"objective": "nan"}``);
  :func:`restore_record` gives the float back.

Checkpoints are orbax's (``fedsim.core.checkpoint``): orbax writes each step to
a temporary folder in its background threads and renames it when complete.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import tempfile
from collections.abc import Iterator
from typing import IO, Any

NONFINITE = "nonfinite"  # the record field listing the keys written as null (strict_record)


def _fsync_dir(path: str) -> None:
  try:
    fd = os.open(path or ".", os.O_RDONLY)
  except OSError:
    return
  try:
    os.fsync(fd)
  except OSError:
    pass
  finally:
    os.close(fd)


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w") -> Iterator[IO[Any]]:
  """A file object on a temporary file beside ``path``, renamed over ``path`` when the block ends.

  Nothing of ``path`` changes if the block raises (the temporary file is removed).

  Args:
    path: the target file.
    mode: ``"w"`` (text, UTF-8) or ``"wb"``.
  """
  path = os.fspath(path)
  folder = os.path.dirname(path)
  fd, tmp = tempfile.mkstemp(dir=folder or ".", prefix=f".{os.path.basename(path)}.", suffix=".tmp")
  try:
    f: IO[Any] = os.fdopen(fd, mode) if "b" in mode else os.fdopen(fd, mode, encoding="utf-8")
    with f:
      yield f
      f.flush()
      os.fsync(f.fileno())
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
  except BaseException:
    with contextlib.suppress(OSError):
      os.unlink(tmp)
    raise
  _fsync_dir(folder)
  _remove_stale_temporaries(path)


def _remove_stale_temporaries(path: str) -> None:
  """Removes the temporary files of earlier writes of ``path`` that a kill left behind
  (``.NAME.*.tmp`` beside it; fedsim has one writer per file)."""
  import glob
  folder, name = os.path.split(path)
  for stale in glob.glob(os.path.join(glob.escape(folder or "."), f".{glob.escape(name)}.*.tmp")):
    with contextlib.suppress(OSError):
      os.unlink(stale)


def atomic_write(path: str | os.PathLike, data: str | bytes) -> None:
  """Writes ``data`` to ``path`` atomically (:func:`atomic_open`)."""
  with atomic_open(path, "wb" if isinstance(data, bytes) else "w") as f:
    f.write(data)


class LineAppender:
  """Appends complete lines to a file; a failed append leaves the file as it was.

  Each :meth:`append` writes the whole line with ``os.write`` on a file opened
  with ``O_APPEND`` (a short write is continued); if a write fails, the file is
  truncated back to its previous length and the ``OSError`` is raised.
  """

  def __init__(self, path: str | os.PathLike, lines: list[str] | None = None):
    """Makes ``path`` hold exactly ``lines`` (atomically; None: keep an existing file, else empty)
    and opens it for appending."""
    self.path = os.fspath(path)
    if lines is not None or not os.path.exists(self.path):
      atomic_write(self.path, "".join(line + "\n" for line in lines or ()))
    self.fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND)

  def append(self, line: str) -> None:
    """Appends ``line`` and a newline (one write, flushed to the OS)."""
    if self.fd is None:
      raise ValueError(f"{self.path} is closed")
    data = (line + "\n").encode("utf-8")
    size = os.fstat(self.fd).st_size
    try:
      done = 0
      while done < len(data):  # a short write is retried: the next one succeeds or gives the error
        n = os.write(self.fd, data[done:])
        if n <= 0:
          raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), self.path)
        done += n
    except OSError:
      with contextlib.suppress(OSError):
        os.ftruncate(self.fd, size)
      raise

  def close(self) -> None:
    if self.fd is not None:
      with contextlib.suppress(OSError):
        os.fsync(self.fd)
      os.close(self.fd)
      self.fd = None


def _nonfinite(v) -> bool:
  return isinstance(v, float) and not math.isfinite(v)


def strict_record(rec: dict) -> dict:
  """``rec`` with each non-finite float replaced by None and listed under ``nonfinite``
  (``{key: "nan" | "inf" | "-inf"}``); ``rec`` itself when every value is finite."""
  bad = {k: repr(v) for k, v in rec.items() if _nonfinite(v)}
  if not bad:
    return rec
  return {**{k: (None if k in bad else v) for k, v in rec.items()}, NONFINITE: bad}


def restore_record(rec: dict) -> dict:
  """The inverse of :func:`strict_record`: the ``nonfinite`` keys get their float back."""
  bad = rec.get(NONFINITE)
  if not isinstance(bad, dict):
    return rec
  out = {k: v for k, v in rec.items() if k != NONFINITE}
  for k, v in bad.items():
    out[k] = float(v)
  return out


def strict_json(value):
  """``value`` (nested dicts/lists/scalars) with non-finite floats as the strings ``"nan"``,
  ``"inf"``, ``"-inf"`` (for ``json.dump(..., allow_nan=False)`` of configs)."""
  if isinstance(value, dict):
    return {k: strict_json(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [strict_json(v) for v in value]
  if _nonfinite(value):
    return repr(value)
  return value
