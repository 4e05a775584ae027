"""SIGINT and SIGTERM stop a run cleanly: at the end of the current chunk, records and a checkpoint kept.

A cluster scheduler sends SIGTERM before it preempts a job; Ctrl-C sends SIGINT. Inside
:func:`fedsim.run`, :class:`GracefulStop` turns the first of either into a request that the engine
reads at every chunk boundary (:func:`fedsim.core.engine.simulate` ``stop``): it saves a
checkpoint when checkpointing is on and raises :class:`fedsim.core.errors.Interrupted`, which
``experiments.run`` prints as one line and turns into exit status 130 (SIGINT) or 143 (SIGTERM).
A second signal acts at once (the handler that was there before). Handlers are installed only
in the main thread of a single-process run (a multi-process run needs every process to stop at
the same chunk; there the signals keep their usual effect).

Example::

  with GracefulStop() as stop:
    ...                     # long work that polls stop.requested at safe points
"""

from __future__ import annotations

import signal
import sys
import threading
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class GracefulStop:
  """Records the first SIGINT/SIGTERM while active (``requested``: its number, else None).

  Args:
    enabled: False installs nothing (``requested`` stays None).
    echo: print one line to stderr when a signal arrives.
  """

  def __init__(self, enabled: bool = True, echo: bool = False):
    self.enabled = enabled and threading.current_thread() is threading.main_thread()
    self.echo = echo
    self.requested: int | None = None
    self._previous: dict[int, Any] = {}

  def __call__(self) -> bool:
    """Whether a stop was requested (the engine's ``stop`` callable)."""
    return self.requested is not None

  def _handle(self, signum, frame) -> None:
    self.requested = signum
    for s, previous in self._previous.items():  # a second signal acts at once
      signal.signal(s, previous)
    if self.echo:
      print(f"{signal.Signals(signum).name}: stopping at the end of the current chunk "
            "(send it again to stop at once)", file=sys.stderr, flush=True)

  def __enter__(self) -> GracefulStop:
    if self.enabled:
      for s in SIGNALS:
        previous = signal.getsignal(s)
        self._previous[s] = previous if previous is not None else signal.SIG_DFL
        signal.signal(s, self._handle)
    return self

  def __exit__(self, *exc) -> None:
    for s, previous in self._previous.items():
      if signal.getsignal(s) == self._handle:
        signal.signal(s, previous)
    self._previous = {}
