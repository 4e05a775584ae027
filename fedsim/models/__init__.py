"""Models shared by tasks and weak learners.

``CNN`` and ``MLP`` (flax modules, ``fedsim.models.cnn`` / ``fedsim.models.mlp``) are imported on
first use, so that a run that needs no flax module (the ``softmax`` task's ``Softmax``:
``fedsim.models.linear``, written without flax) does not import flax. The option values below are declared here, without
flax, for the tasks' and algorithms' settings.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the lazy names, for type checkers
  from fedsim.models.cnn import CNN
  from fedsim.models.linear import Softmax
  from fedsim.models.mlp import MLP

ACTIVATIONS = ("relu", "leaky_relu")  # hidden activations of fedsim.models.mlp.MLP
# fedsim.models.weak_learners: oracle names, and the learner classes trained by wo_inf / wo_lip.
WEAK_ORACLES = ("scaled", "rf_ridge", "mlp", "cnn", "wo_inf", "wo_lip")
WEAK_FAMILIES = ("linear", "rf", "mlp", "cnn")

__all__ = ["ACTIVATIONS", "CNN", "MLP", "WEAK_FAMILIES", "WEAK_ORACLES", "Softmax"]

_LAZY = {"CNN": "fedsim.models.cnn", "MLP": "fedsim.models.mlp", "Softmax": "fedsim.models.linear"}


def __getattr__(name: str):
  if name in _LAZY:
    value = getattr(importlib.import_module(_LAZY[name]), name)
  elif name in ("cnn", "linear", "mlp", "training", "weak_learners"):  # submodules, as attributes
    value = importlib.import_module(f"fedsim.models.{name}")
  else:
    raise AttributeError(f"module 'fedsim.models' has no attribute {name!r}")
  globals()[name] = value
  return value


def __dir__():
  return sorted(set(globals()) | set(_LAZY))
