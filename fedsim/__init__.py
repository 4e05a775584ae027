"""fedsim: federated optimisation (first- and zeroth-order) simulated in JAX.

The public surface:

  ExperimentConfig, run   describe and run an experiment (fedsim/api.py)
  simulate                the round engine (fedsim.core.engine.simulate)
  ConfigError             raised on a bad setting, naming it
  Interrupted             raised when SIGINT / SIGTERM stopped a run at a chunk's end (a KeyboardInterrupt)
  algorithms, tasks       the registries: ``algorithms.REGISTRY``, ``tasks.TASKS``

``simulate``, ``algorithms`` and ``tasks`` are imported on first use, so
``import fedsim`` stays cheap.
"""

from __future__ import annotations

import importlib

from fedsim.api import ExperimentConfig, run
from fedsim.core.errors import ConfigError, Interrupted

__all__ = ["ConfigError", "ExperimentConfig", "Interrupted", "algorithms", "run", "simulate", "tasks"]

_LAZY = {"simulate": ("fedsim.core.engine", "simulate"), "algorithms": ("fedsim.algorithms", None),
         "tasks": ("fedsim.tasks", None)}


def __getattr__(name: str):
  if name not in _LAZY:
    raise AttributeError(f"module 'fedsim' has no attribute {name!r}")
  module, attr = _LAZY[name]
  value = importlib.import_module(module)
  if attr is not None:
    value = getattr(value, attr)
  globals()[name] = value
  return value


def __dir__():
  return sorted(set(globals()) | set(_LAZY))
