"""Every algorithm on every task, at its defaults (issue 36 item 7).

Each registered algorithm runs on each task of ``fedsim.tasks.TASKS`` through the
public API (``fedsim.run(fedsim.ExperimentConfig(...))``, what a user calls), at
small sizes (:data:`TASK_OPTIONS`, 3 clients, :data:`ROUNDS` rounds, evaluated at
round 0 and at the end), in float32 and with ``jax.enable_x64`` (the CLI's
``--x64``), with every hyperparameter at its default. Each pair either

* ends with every number of every record finite (no divergence, no NaN metric), or
* is refused before the algorithm compiles (``fedsim.core.engine.simulate`` is
  never reached) with a :class:`ConfigError` naming the setting and what would
  work: exactly the pairs of :data:`REFUSED`, with their flag and message, so a
  new refusal (or a refusal that went away) fails here.

The default suite runs :data:`HOME` (one task per algorithm, float32; but for
:data:`SLOW_HOME`); the whole matrix (every task, both precisions) is ``slow``. Tasks are built once per
precision (``api.build_task`` memoised; the trained models of the attack,
metric-optimisation and fine-tuning tasks in a shared cache folder), and the
engine's programs compile with XLA's CPU optimisation off (compile time dominates).

Measured on the 2-core machine while another job loaded it (load average ~5): the
default subset, 25 pairs, 30 s in-process (-n 0), 40 s wall with -n 2; the slow matrix,
756 pairs (248 of them refusals: 124 listed pairs x 2 precisions), 21.6 min wall with -n 2 (20 CPU min), FZooS on the
CNN tasks the slowest (140-200 s: d = 14,538 with M = 10,000 features).
"""

from __future__ import annotations

import math

import jax
import pytest

import fedsim
from fedsim import algorithms, api
from fedsim.core import compile_options, engine
from fedsim.core.errors import ConfigError
from fedsim.tasks import TASKS

ROUNDS = 2
NUM_CLIENTS = 3
FAST_XLA = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}
# Small instances. The synthetic tasks keep d = 20: the FD baselines' default Q = 20 orthonormal
# directions need Q <= d (refused below on the d = 2 tasks).
TASK_OPTIONS: dict[str, dict] = {
    "softmax": {}, "cnn": {}, "lenet": {},
    "mlp": {"hidden_width": 16}, "finetune": {"hidden_width": 16},
    "quadratic": {"dim": 20}, "illcond_quadratic": {"dim": 20}, "ackley": {"dim": 20}, "levy": {"dim": 20},
    "logistic_soft": {"samples_per_client": 10}, "ridge": {"samples_per_client": 10},  # rank 8, p = 2
    "shift_tabular": {"samples_per_client": 10},                                       # square loss
    "attack": {"model_train_steps": 20}, "metric_opt": {"model_train_steps": 20}, "attack_cw": {},
}
MODEL_TASKS = ("attack", "attack_cw", "metric_opt", "finetune")  # train a model at set-up (cached)

FFGB = ("ffgb", "ffgb_nores", "ffgb_code", "ffgb_nores_code", "ffgb_c", "ffgb_l")
FD_BASELINES = ("fedzo_fd", "fedprox_zo", "scaffold_zo1", "scaffold_zo2")
FUNCTION_SPACE = ("shift_tabular",)                        # value caches, no parameter vector: FFGB only
SERVER_DATA = ("logistic_soft", "ridge")                   # the only tasks with a server dataset, mu, kappa, L1
UNLABELLED = ("quadratic", "illcond_quadratic", "ackley", "levy", "attack", "attack_cw")  # no (x, y) samples
UNCLASSED = ("logistic_soft", "ridge", "metric_opt")       # (x, y) samples, but no class labels / num_classes
SQUARE_LOSS = ("shift_tabular",)
PARAMETRIC = [a for a in algorithms.REGISTRY if a not in FFGB]

# (algorithm, task) -> (ConfigError.flag, regex of its message): the pairs refused before compiling; those
# of fedsim.algorithms.TASK_NEEDS (and function-space tasks) when the ExperimentConfig is made.
REFUSED: dict[tuple[str, str], tuple[str, str]] = {
    # A function-space task has no parameter vector to optimise.
    **{(a, t): ("algorithms", rf"{t} is a function-space task .*FFGB family \(ffgb, .*\), not {a}")
       for a in PARAMETRIC for t in FUNCTION_SPACE},
    # FedLRGD interpolates from the server's samples: only the smooth-ERM tasks have them.
    **{("fedlrgd", t): ("task", r"fedlrgd needs a task with server data: one of logistic_soft, ridge")
       for t in TASKS if t not in (*SERVER_DATA, *FUNCTION_SPACE)},
    # ridge has exact rank p + 1 = 3 < the default rank 8: every G^(i) is singular (test_default_refusals).
    ("fedlrgd", "ridge"): ("rank", r"must be <= p \+ 1 = 3 .*weights_solver=pinv"),
    # FedAve's default FedPAQ schedule needs the task's strong convexity mu and condition number kappa.
    **{("fedave", t): ("task", r"fedave with lr_schedule='fedpaq' needs a task that reports mu and kappa.*"
                               r"lr_schedule=constant")
       for t in TASKS if t not in (*SERVER_DATA, *FUNCTION_SPACE)},
    # Exact GD's default step 1 / L1 needs the task's smoothness constant.
    **{("gd", t): ("task", r"gd with step_size=None needs a task that reports L1.*a step_size")
       for t in TASKS if t not in (*SERVER_DATA, *FUNCTION_SPACE)},
    # Functional boosting fits weak learners to labelled samples under the cross-entropy of class
    # labels or the square loss ...
    **{(a, t): ("task", rf"{a} needs a task whose clients hold labelled samples \(x, y\) with class labels")
       for a in FFGB if a != "ffgb_l" for t in (*UNLABELLED, *UNCLASSED)},
    # ... and FFGB.L solves the square-loss problem (14).
    **{("ffgb_l", t): ("task", r"ffgb_l needs a square-loss task .*tabular_loss='square'")
       for t in TASKS if t not in SQUARE_LOSS},
    # Q = 20 orthonormal directions need Q <= d (d = 2 on the smooth-ERM tasks).
    **{(a, t): ("fd_directions", r"fd_directions <= dim = 2 .*direction=sphere")
       for a in FD_BASELINES for t in SERVER_DATA},
}

# The default suite's pairs: one task per algorithm (its paper's, at the smallest cost), float32.
HOME = {
    **dict.fromkeys(["fedavg", "fedadam", "fedyogi", "fedadagrad"], "softmax"),
    **dict.fromkeys(["fedzo", "dzopa", "zone_s", "fzoos", *FD_BASELINES, "fedavg_true_grad"], "quadratic"),
    **dict.fromkeys(["decomfl", "hiso", "hiso_code", "decomfl_code"], "illcond_quadratic"),
    **dict.fromkeys(["fedlrgd", "fedave", "gd"], "logistic_soft"),
    **dict.fromkeys(FFGB, "shift_tabular"),
}
# Home pairs left to the slow matrix: the authors'-code presets of ffgb / ffgb_nores (the same
# algorithms, 2000 oracle Adam steps: 6 s a pair, a quarter of the default subset's time).
SLOW_HOME = ("ffgb_code", "ffgb_nores_code")


def _pairs(slow: bool):
  out = []
  for name in algorithms.REGISTRY:
    for task in TASKS:
      for x64 in (False, True):
        home = HOME.get(name) == task and not x64 and name not in SLOW_HOME
        if home != slow:
          out.append(pytest.param(name, task, x64, id=f"{name}-{task}-{'x64' if x64 else 'f32'}"))
  return out


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
  """(task name, x64) -> the built task; the model tasks' trained models in one cache folder."""
  return {"cache_dir": str(tmp_path_factory.mktemp("models"))}


def _config(name: str, task: str, cache_dir: str) -> fedsim.ExperimentConfig:
  options = {**TASK_OPTIONS[task], **({"cache_dir": cache_dir} if task in MODEL_TASKS else {})}
  return fedsim.ExperimentConfig(task=task, num_clients=NUM_CLIENTS, clients_per_round=NUM_CLIENTS,
                                 task_options=options, algorithms=name, rounds=ROUNDS, eval_every=ROUNDS,
                                 progress=False, compilation_cache="")


def _run(name: str, task: str, x64: bool, tasks: dict, monkeypatch):
  # Compile time dominates (2-7 s a pair at XLA's defaults): the engine's programs compile with
  # XLA's CPU optimisation off, as test_registry_contract's rounds do (FAST_XLA there).
  monkeypatch.setitem(compile_options.EMITTERS, "classic", {**compile_options.EMITTERS["classic"], **FAST_XLA})
  build = api.build_task

  def memo(config):
    key = (config.task, x64)
    if key not in tasks:
      tasks[key] = build(config)
    return tasks[key]

  monkeypatch.setattr(api, "build_task", memo)
  with jax.enable_x64(x64):
    if (name, task) in REFUSED:
      flag, message = REFUSED[name, task]

      def compiled(*args, **kwargs):
        raise AssertionError(f"{name} on {task}: compiled before it was refused")

      monkeypatch.setattr(engine, "simulate", compiled)
      with pytest.raises(ConfigError, match=message) as e:
        fedsim.run(_config(name, task, tasks["cache_dir"]))
      assert e.value.flag == flag, str(e.value)
      return
    histories = fedsim.run(_config(name, task, tasks["cache_dir"]))
  (records,) = histories.values()
  where = f"{name} on {task} ({'x64' if x64 else 'float32'})"
  assert [r["round"] for r in records] == [0, ROUNDS], f"{where}: stopped early: {records[-1]}"
  assert all(math.isfinite(r["objective"]) for r in records), f"{where}: objectives {records}"
  # The last record: every number finite. (Round 0's may hold a diagnostic no round has made yet:
  # FFGB's gamma_hat_min_all = inf, the empty min, and FFGB.C / FFGB.L's diagnostics NaN.)
  bad = {k: v for k, v in records[-1].items() if isinstance(v, (int, float)) and not math.isfinite(v)}
  assert not bad, f"{where}: non-finite metrics after {ROUNDS} rounds: {bad}"


@pytest.mark.parametrize("name, task, x64", _pairs(slow=False))
def test_runs_on_its_home_task(name, task, x64, tasks, monkeypatch):
  _run(name, task, x64, tasks, monkeypatch)


@pytest.mark.slow  # the whole matrix; .ci/run runs it (pytest -m slow)
@pytest.mark.parametrize("name, task, x64", _pairs(slow=True))
def test_runs_on_every_task_or_is_refused(name, task, x64, tasks, monkeypatch):
  _run(name, task, x64, tasks, monkeypatch)


def test_every_algorithm_has_a_home_task_it_runs_on():
  assert set(HOME) == set(algorithms.REGISTRY)
  assert not [(a, t) for a, t in HOME.items() if (a, t) in REFUSED]
  assert set(TASK_OPTIONS) == set(TASKS)
  assert {a for a, _ in REFUSED} <= set(algorithms.REGISTRY) and {t for _, t in REFUSED} <= set(TASKS)
