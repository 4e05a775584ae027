"""A no-progress watchdog: a run that stops making progress says where it is stuck and exits.

``fedsim.run`` (``ExperimentConfig.watchdog_s``, ``--watchdog_s``) holds one around a run and
calls :meth:`Watchdog.beat` at each step of set-up, before each algorithm compiles and at each
evaluation record. When no beat comes for ``timeout_s`` seconds, a daemon thread prints ONE line
to stderr summarising every thread's innermost frames::

  watchdog: no progress for 30 s (last: fedavg round 20); threads: MainThread at engine.py:171 simulate
  <- api.py:640 run <- run.py:60 main; Thread-2 at fedlrgd.py:88 host <- ...

writes the full ``faulthandler`` dump of all threads to ``dump_path`` (if given), and ends the
process with ``os._exit(exit_code)`` (stderr flushed first): the main thread may be stuck inside a
compiled call that no exception can interrupt. Standard library only.

Example::

  with Watchdog(30.0, dump_path="runs/x/watchdog.txt") as wd:
    for chunk in chunks:
      run(chunk)
      wd.beat(f"round {chunk.end}")
"""

from __future__ import annotations

import faulthandler
import os
import sys
import threading
import time
import traceback
from typing import TextIO

from fedsim.results import EXIT_HUNG

FRAMES = 3  # innermost frames named per thread in the one-line summary


def thread_summary(skip: int | None = None, frames: int = FRAMES) -> str:
  """``"NAME at FILE:LINE FUNC <- FILE:LINE FUNC; NAME at ..."``: each live thread's innermost
  ``frames`` frames (file base names), the main thread first, then by name.

  Args:
    skip: a thread ident to leave out (the watchdog's own).
    frames: frames per thread, innermost first.
  """
  names = {t.ident: t.name for t in threading.enumerate()}
  main = threading.main_thread().ident
  parts = []
  for ident, frame in sys._current_frames().items():
    if ident == skip:
      continue
    stack = traceback.extract_stack(frame)[-frames:][::-1]
    where = " <- ".join(f"{os.path.basename(f.filename)}:{f.lineno} {f.name}" for f in stack)
    name = names.get(ident, f"thread-{ident}")
    parts.append((ident != main, name, f"{name} at {where}"))
  return "; ".join(text for _, _, text in sorted(parts))


class Watchdog:
  """Ends the process when :meth:`beat` is not called for ``timeout_s`` seconds (a context manager).

  Args:
    timeout_s: seconds without a beat before it fires (float, > 0; 0 or less: a no-op watchdog).
    dump_path: file for the full ``faulthandler`` stack dump of every thread (None: none).
    exit_code: the process's exit status when it fires (:data:`fedsim.results.EXIT_HUNG`, 4).
    stream: where the one-line summary goes (default ``sys.stderr`` at firing time).
    guard_error_exit: when the block ends with an exception, keep watching (one more
      ``timeout_s``) instead of stopping: the process must end by then. A multi-process
      run whose peer died gets an error from its collective and then waits forever in the
      distributed runtime's shutdown; a single process in an interactive session must not
      be ended, so the default is False.

  The clock starts at ``__enter__``; ``__exit__`` stops the thread (unless ``guard_error_exit``
  and an exception). Not re-entrant.
  """

  def __init__(self, timeout_s: float, *, dump_path: str | os.PathLike | None = None,
               exit_code: int = EXIT_HUNG, stream: TextIO | None = None, guard_error_exit: bool = False):
    self.guard_error_exit = guard_error_exit
    self.timeout_s = float(timeout_s)
    self.dump_path = os.fspath(dump_path) if dump_path is not None else None
    self.exit_code = exit_code
    self.stream = stream
    self._last = time.monotonic()
    self._what = "start"
    self._stop = threading.Event()
    self._thread: threading.Thread | None = None

  @property
  def enabled(self) -> bool:
    return self.timeout_s > 0

  def beat(self, what: str = "") -> None:
    """Marks progress (cheap; any thread): the timeout restarts. ``what`` names it in the message."""
    self._last = time.monotonic()
    if what:
      self._what = what

  def __enter__(self) -> Watchdog:
    if self.enabled:
      self._last = time.monotonic()
      self._stop.clear()
      self._thread = threading.Thread(target=self._watch, name="fedsim-watchdog", daemon=True)
      self._thread.start()
    return self

  def __exit__(self, exc_type, exc, tb) -> None:
    if exc_type is not None and self.guard_error_exit and self._thread is not None:
      self.beat(f"ending on {exc_type.__name__}")  # the process must end within timeout_s
      return
    self._stop.set()
    if self._thread is not None:
      self._thread.join()
      self._thread = None

  def _watch(self) -> None:
    poll = min(1.0, self.timeout_s / 4)
    while not self._stop.wait(poll):
      idle = time.monotonic() - self._last
      if idle >= self.timeout_s:
        self._fire(idle)

  def _fire(self, idle: float) -> None:
    took = f"{idle:.0f}" if idle >= 10 else f"{idle:.1f}"
    line = (f"watchdog: no progress for {took} s (last: {self._what}); "
            f"threads: {thread_summary(skip=threading.get_ident())}")
    if self.dump_path is not None:
      try:
        with open(self.dump_path, "w") as f:
          f.write(line + "\n\n")
          f.flush()
          faulthandler.dump_traceback(file=f, all_threads=True)
        line += f" (all stacks: {self.dump_path})"
      except OSError:
        pass
    stream = self.stream or sys.stderr
    try:
      print(line + f"; exiting with status {self.exit_code}", file=stream, flush=True)
      sys.stdout.flush()
    finally:
      os._exit(self.exit_code)
