"""Federated algorithms: one module per family; ``REGISTRY`` maps names to builders.

Each entry is ``(config_class, default_overrides, builder)``: the algorithm's own
defaults are the config class's (paper) defaults updated by the overrides, and
``build(name, task, **hparams)`` makes the :class:`FederatedAlgorithm`. Each config
class declares its fields with :func:`fedsim.config.hparam` (help, accepted values or
range, paper source) and validates itself on construction, so an unknown or invalid
hyperparameter raises ``ConfigError`` before anything is built or compiled.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from fedsim import config
from fedsim.algorithms.dzopa import DZOPAConfig, make_dzopa
from fedsim.algorithms.fedave import FedAveConfig, GDConfig, make_fedave, make_gd
from fedsim.algorithms.fedavg import FedAvgConfig, make_fedavg
from fedsim.algorithms.fedlrgd import FedLRGDConfig, make_fedlrgd
from fedsim.algorithms.fedzo import FedZOConfig, make_fedzo
from fedsim.algorithms.ffgb import FFGB_CODE, FFGBConfig, make_ffgb
from fedsim.algorithms.hiso import DECOMFL_CODE, HISO_CODE, DeComFLConfig, HiSoConfig, make_decomfl, make_hiso
from fedsim.algorithms.zone_s import ZONESConfig, make_zone_s
from fedsim.config import did_you_mean
from fedsim.core.types import FederatedAlgorithm

# name -> (config_class, default_overrides, builder(task, cfg, name=...)).
REGISTRY: dict[str, tuple[type[Any], dict[str, Any], Callable[..., FederatedAlgorithm]]] = {
    "fedavg": (FedAvgConfig, {}, make_fedavg),
    # Reddi et al. 2021 §5 / App. D: beta1 = 0.9, beta2 = 0.99, tau = 1e-3.
    "fedadam": (FedAvgConfig, {"server_optimizer": "adam", "server_lr": 1e-2}, make_fedavg),
    "fedyogi": (FedAvgConfig, {"server_optimizer": "yogi", "server_lr": 1e-2}, make_fedavg),
    "fedadagrad": (FedAvgConfig, {"server_optimizer": "adagrad", "server_lr": 1e-1}, make_fedavg),
    "fedzo": (FedZOConfig, {}, make_fedzo),
    # The FedZO paper's attack baselines (Fang et al. 2022, §V-A); variant=code for the authors' code.
    "dzopa": (DZOPAConfig, {}, make_dzopa),
    "zone_s": (ZONESConfig, {}, make_zone_s),
    # Scalar-only ZO from shared seeds (Li et al. 2025); DeComFL is HiSo with H = I.
    "decomfl": (DeComFLConfig, {}, make_decomfl),
    "hiso": (HiSoConfig, {}, make_hiso),
    # The authors' code settings (ZidongLiu/DeComFL, adam_forward.py on MNIST; see
    # fedsim/algorithms/hiso.py): eps 0, P = 1, b = 8, SGD weight decay 1e-5 (DeComFL: central FD).
    "hiso_code": (HiSoConfig, HISO_CODE, make_hiso),
    "decomfl_code": (DeComFLConfig, DECOMFL_CODE, make_decomfl),
    # Low-rank gradient approximation (Jadbabaie et al. 2023, Alg. 1), its FedPAQ baseline (App. D)
    # and exact GD on the pooled data (the reference); specs/fedlrgd.md.
    "fedlrgd": (FedLRGDConfig, {}, make_fedlrgd),
    "fedave": (FedAveConfig, {}, make_fedave),
    "gd": (GDConfig, {}, make_gd),
    # Federated functional gradient boosting (Shen et al. 2022; specs/ffgb.md): Alg. 2, its
    # no-residual ablation (Fig. 2a), Alg. 5 (corrected FFGB.C) and Alg. 4 (sign-fixed FFGB.L).
    # FFGB.C / FFGB.L use the oracles their theorems assume: WO^inf (eq. 13 / 24) and the
    # Sobolev WO^lip (eqs. 19-20 / 25); FFGB.C's gamma of (13) is 0.5, not the exact-oracle
    # 1 that zeroes the residual (G1 = 0; ffgb.FFGBConfig.gamma).
    "ffgb": (FFGBConfig, {}, make_ffgb),
    "ffgb_nores": (FFGBConfig, {}, make_ffgb),
    # The authors' code (shenzebang/fed_functional_gradient f555c72, script/mnist_batch_ffgd.sh;
    # fedsim/algorithms/ffgb.py FFGB_CODE): code step schedule, N(0, 1/fan_in^2) weights, leaky
    # ReLU on the output, de-duplicated minibatches <= 128, 2000 Adam steps.
    "ffgb_code": (FFGBConfig, FFGB_CODE, make_ffgb),
    "ffgb_nores_code": (FFGBConfig, FFGB_CODE, make_ffgb),
    "ffgb_c": (FFGBConfig, {"weak_learner": "wo_inf", "gamma": 0.5}, make_ffgb),
    "ffgb_l": (FFGBConfig, {"weak_learner": "wo_lip"}, make_ffgb),
}


@dataclasses.dataclass(frozen=True)
class TaskNeed:
  """What an algorithm needs of its task, checked when a ``fedsim.ExperimentConfig`` is made (before any
  task is built) by :func:`unmet_need`; the builders check the built task again.

  Attributes:
    tasks: the names of ``fedsim.tasks.TASKS`` that have it.
    what: it, in words (``"a task with server data"``).
    options: task options those tasks need (``{"tabular_loss": "square"}``).
    when: the hyperparameter values under which the need holds (``{"step_size": None}``: only
      while ``step_size`` is None); empty: always.
    instead: the hyperparameter setting that lifts it (``"step_size=..."``), or "".
  """

  tasks: tuple[str, ...]
  what: str
  options: dict[str, Any] = dataclasses.field(default_factory=dict)
  when: dict[str, Any] = dataclasses.field(default_factory=dict)
  instead: str = ""


_SAMPLES = TaskNeed(("softmax", "mlp", "cnn", "lenet", "finetune", "shift_tabular"),
                    "a task whose clients hold labelled samples (x, y) with class labels or a square loss "
                    "(seed 002)")
_SMOOTH = ("logistic_soft", "ridge")  # seed 004 App. A: server data, mu, kappa, L1
# Algorithm name -> what it needs of its task (fedsim/algorithms/ffgb.py make_ffgb, fedlrgd.py, fedave.py);
# an algorithm not named runs on every task with a parameter vector (not fedsim.tasks.FUNCTION_SPACE,
# which only algorithms with an FFGBConfig run).
TASK_NEEDS: dict[str, TaskNeed] = {
    **dict.fromkeys(("ffgb", "ffgb_nores", "ffgb_code", "ffgb_nores_code", "ffgb_c"), _SAMPLES),
    "ffgb_l": TaskNeed(("shift_tabular",), "a square-loss task (problem (14))", {"tabular_loss": "square"}),
    "fedlrgd": TaskNeed(_SMOOTH, "a task with server data"),
    "fedave": TaskNeed(_SMOOTH, "a task that reports mu and kappa", when={"lr_schedule": "fedpaq"},
                       instead="lr_schedule=constant"),
    "gd": TaskNeed(_SMOOTH, "a task that reports L1", when={"step_size": None}, instead="a step_size"),
}


def unmet_need(name: str, hparams: dict, task: str, options: dict) -> tuple[TaskNeed, str | None] | None:
  """What algorithm ``name`` (with hyperparameters ``hparams``) needs that task ``task`` (with every
  task option, ``options``) lacks, without building either.

  Returns:
    None when it runs there; else ``(need, option)``: the unmet :class:`TaskNeed` and the task option
    that differs from ``need.options`` (None: the task is not one of ``need.tasks``). An algorithm
    without an FFGBConfig on a task of ``fedsim.tasks.FUNCTION_SPACE`` is ``(TaskNeed((), "a task with a
    parameter vector"), None)``.
  """
  from fedsim.tasks import FUNCTION_SPACE
  if task in FUNCTION_SPACE and REGISTRY[name][0] is not FFGBConfig:
    return TaskNeed((), "a task with a parameter vector"), None
  need = TASK_NEEDS.get(name)
  if need is None or any(hparams.get(k) != v for k, v in need.when.items()):
    return None
  if task not in need.tasks:
    return need, None
  for key, value in need.options.items():
    if options.get(key) != value:
      return need, key
  return None


def config_fields(name: str) -> list[str]:
  """Hyperparameter names of algorithm ``name``."""
  return [f.name for f in dataclasses.fields(REGISTRY[name][0])]


def default_config(name: str) -> dict:
  """The algorithm's own defaults (paper defaults plus registry overrides)."""
  cls, overrides, _ = REGISTRY[name]
  out = {f.name: f.default for f in dataclasses.fields(cls)}
  out.update(overrides)
  return out


def make_config(name: str, **hparams):
  """Algorithm ``name``'s config: its defaults (:func:`default_config`) updated by ``hparams``.

  Raises:
    ConfigError: unknown algorithm name; an unknown hyperparameter (with a "did
      you mean" suggestion); a value outside the field's accepted values or
      range (:mod:`fedsim.config`). Nothing is built or compiled.
  """
  if name not in REGISTRY:
    raise config.FieldError("algorithm", f"unknown {name!r}{did_you_mean(name, REGISTRY)}; "
                                         f"accepted: {', '.join(REGISTRY)}")
  cls = REGISTRY[name][0]
  config.check_keys(cls, hparams, owner=name)
  return cls(**{**default_config(name), **hparams})


def build(name: str, task, **hparams):
  """Builds algorithm ``name`` on ``task`` with ``hparams`` over its defaults.

  Raises:
    ConfigError: unknown algorithm name, unknown hyperparameter (with a "did
      you mean" suggestion) or an invalid value, before anything compiles
      (:func:`make_config`); a function-space task (``task.info["function_space"]``,
      e.g. shift_tabular) for an algorithm outside the FFGB family (flag ``task``).
  """
  cfg = make_config(name, **hparams)
  if task.info.get("function_space") and not isinstance(cfg, FFGBConfig):
    family = [n for n, (cls, _, _) in REGISTRY.items() if cls is FFGBConfig]
    raise config.FieldError("task", f"{task.name} is a function-space task (value caches, no parameter vector): "
                                    f"it runs the FFGB family ({', '.join(family)}), not {name}")
  return REGISTRY[name][2](task, cfg, name=name)


# FZooS and its finite-difference baselines (Shu et al. 2023; specs/fzoos.md §2.3-2.4).
from fedsim.algorithms.fzoos import FZooSConfig, make_fzoos  # noqa: E402
from fedsim.algorithms.zo_baselines import ZOBaselineConfig, make_zo_baseline  # noqa: E402

REGISTRY.update({
    "fzoos": (FZooSConfig, {}, make_fzoos),
    # FedZO with the FZooS paper's settings (orthogonal directions, Q = 20, lambda = 0.01, Adam).
    "fedzo_fd": (ZOBaselineConfig, {}, make_zo_baseline),
    "fedprox_zo": (ZOBaselineConfig, {"correction": "prox"}, make_zo_baseline),
    "scaffold_zo1": (ZOBaselineConfig, {"correction": "scaffold1"}, make_zo_baseline),
    "scaffold_zo2": (ZOBaselineConfig, {"correction": "scaffold2"}, make_zo_baseline),
    # [code] gd_opt: FedAvg with exact local gradients and the same Adam loop (an oracle).
    "fedavg_true_grad": (ZOBaselineConfig, {"estimator": "true"}, make_zo_baseline),
})
