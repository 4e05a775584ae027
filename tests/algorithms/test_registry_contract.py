"""Registry-wide contract test (issue 16 item 5).

Every name in ``fedsim.algorithms.REGISTRY`` (the tests are parametrized over
it, so a new registry line is covered with no edit here), on a small task its
family runs on (:data:`TASK_OF`: the tiny least-squares task by default), must:

* build from its defaults, plus only what the task needs (FZooS's ``rounds``,
  :data:`REQUIRED`);
* compile one round once: rounds 0, 1, 2 through one ``jax.jit`` leave one
  cache entry (``_cache_size``; ``test_compile_counter_catches_a_recompile``
  shows the counter sees a state dtype drift);
* leave only finite floating leaves in the state after :data:`ROUNDS` rounds;
* give bitwise-identical states and stats from two fresh builds with one seed;
* keep ledgers (``RoundStats.exact``) that are non-negative Python ints equal
  to the per-round counts its module documents (:data:`EXPECTED`, written from
  the docstrings with the built config's values, not from the ledger code) or,
  without a documented count, constant over the rounds after the first;
* reject an unknown hyperparameter with ``ConfigError``.

``test_toy_algorithm_needs_one_registry_line`` registers :func:`make_toy_gd`
(a new algorithm written as a new file would be: a config dataclass with
``hparam`` fields and a builder) with one ``REGISTRY`` line and runs it through
the same checks and ``fedsim.core.engine.simulate``.

Speed: FFGB and FZooS run with their iteration counts and widths shrunk
(:data:`SPEED`; their pure defaults are still built, and their init traced, in
``test_builds_from_defaults``), the round compiles with XLA's CPU optimisation
off (:data:`FAST_XLA`), and the second build of the determinism check traces
its round and reuses the first build's executable when the two are one program
(the same jaxpr and bitwise the same constants; it compiles its own otherwise).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from fedsim import algorithms
from fedsim.algorithms.fedave import FedAveConfig, GDConfig
from fedsim.algorithms.fedlrgd import FedLRGDConfig
from fedsim.algorithms.ffgb import FFGBConfig
from fedsim.algorithms.fzoos import FZooSConfig
from fedsim.algorithms.zo_baselines import ZOBaselineConfig
from fedsim.config import hparam, validate
from fedsim.core import rng, simulate
from fedsim.core.errors import ConfigError
from fedsim.core.types import LEDGERS, FederatedAlgorithm, RoundStats, make_stats
from fedsim.tasks import make_task
from fedsim.tasks.functional import make_shift_task
from fedsim.tasks.logistic_soft import make_smooth_erm_task
from tests.algorithms import tiny_problem as tp

ROOT = jax.random.key(11)
ROUNDS = 3
BYTES = 4  # a float32 real on the wire (every module's BYTES_PER_REAL)
# Compile time dominates this file; the contract does not depend on XLA's CPU optimisation.
FAST_XLA = ({"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}
            if jax.default_backend() == "cpu" else {})

# ------------------------------------------------------------------ tasks per family

# Config class -> task fixture; anything else runs on the tiny least-squares task.
TASK_OF = {FFGBConfig: "shift_task", FZooSConfig: "quad_task", ZOBaselineConfig: "quad_task",
           FedLRGDConfig: "erm_task", FedAveConfig: "erm_task", GDConfig: "erm_task"}
# What the task needs beyond the defaults: FZooS sizes its history from the run's length.
REQUIRED = {FZooSConfig: {"rounds": ROUNDS}}
# Speed only: iteration counts, RFF features and GP window / candidate sizes that set the run
# time; everything else stays at the defaults (FFGB's learner stays d -> 32 -> 32 -> C; FZooS
# keeps its RFF window and server-side active queries, where KNOWN's non-finite weights arise).
SPEED = {FFGBConfig: {"oracle_steps": 4},
         FZooSConfig: {"num_rff": 256, "gp_window": 20, "local_steps": 3, "local_candidates": 10}}


@pytest.fixture(scope="module")
def tiny_task():
  return tp.make_tiny_task(4, 4)


@pytest.fixture(scope="module")
def quad_task():
  # d >= 20: the FD baselines' default Q = 20 orthonormal directions need Q <= d.
  return make_task("quadratic", num_clients=3, dim=20, heterogeneity=1.0)


@pytest.fixture(scope="module")
def erm_task():
  return make_smooth_erm_task("logistic_soft", num_clients=3, samples_per_client=4, num_features=2,
                              server_samples=3, max_rank=3)


@pytest.fixture(scope="module")
def shift_task():
  # Square loss and info["lip_L"]: every FFGB variant (ffgb_l needs both) runs on it.
  return make_shift_task(3, 6, 2, kind="w1", loss="square", num_test=8, measure=False)


def config_class(name):
  return algorithms.REGISTRY[name][0]


def task_for(request, name):
  return request.getfixturevalue(TASK_OF.get(config_class(name), "tiny_task"))


def run_hparams(name) -> dict:
  cls = config_class(name)
  return {**REQUIRED.get(cls, {}), **SPEED.get(cls, {})}


# ------------------------------------------------------------------ running and checking


def round_key(r):
  return rng.round_key(rng.stream(ROOT, "rounds"), r)


@dataclasses.dataclass
class Run:
  """ROUNDS jitted rounds of one build: states[0] is the init, stats[r] round r's."""
  name: str
  task: Any
  hparams: dict
  alg: FederatedAlgorithm
  step: Any
  states: list
  stats: list
  cache_size: int
  program: Any  # the round's ClosedJaxpr


def initial_state(alg: FederatedAlgorithm):
  """``init`` and then the host-side ``setup`` (FedLRGD's float32 set-up), as the engine does."""
  state = alg.init(*rng.init_keys(ROOT))
  return state if alg.setup is None else alg.setup(state)


def make_run(name, task, hparams) -> Run:
  alg = algorithms.build(name, task, **hparams)
  step = jax.jit(alg.round, compiler_options=FAST_XLA)
  state = initial_state(alg)
  states, stats = [state], []
  for r in range(ROUNDS):
    state, st = step(state, round_key(r), task.data)
    states.append(state)
    stats.append(st)
  jax.block_until_ready((states, stats))
  program = step.trace(states[0], round_key(0), task.data).jaxpr  # the cached trace
  return Run(name, task, hparams, alg, step, states, stats, step._cache_size(), program)


@pytest.fixture(scope="module")
def runs():
  """name -> Run, made on first use and shared by the module's tests."""
  return {}


def get_run(request, name) -> Run:
  cache = request.getfixturevalue("runs")
  if name not in cache:
    cache[name] = make_run(name, task_for(request, name), run_hparams(name))
  return cache[name]


def leaves_as_bytes(tree):
  """(treedef, [(dtype, shape, raw bytes)]) with PRNG keys as their key data."""
  out = []
  flat, treedef = jax.tree_util.tree_flatten(tree)
  for leaf in flat:
    a = jnp.asarray(leaf)
    if jnp.issubdtype(a.dtype, jax.dtypes.prng_key):
      a = jax.random.key_data(a)
    a = np.asarray(a)
    out.append((a.dtype, a.shape, a.tobytes()))
  return treedef, out


def assert_bitwise(a, b, what):
  ta, la = leaves_as_bytes(a)
  tb, lb = leaves_as_bytes(b)
  assert ta == tb, f"{what}: tree structures differ"
  bad = [i for i, (x, y) in enumerate(zip(la, lb)) if x != y]
  assert not bad, f"{what}: leaves {bad} differ"


def same_program(a, b) -> bool:
  """Two ClosedJaxprs are one program: the same equations and bitwise the same constants."""
  if str(a.jaxpr) != str(b.jaxpr) or len(a.consts) != len(b.consts):
    return False
  try:
    assert_bitwise(list(a.consts), list(b.consts), "constants")
  except AssertionError:
    return False
  return True


def check_compiles_once(run: Run):
  assert run.cache_size == 1, (
      f"{run.name}: rounds 0..{ROUNDS - 1} compiled {run.cache_size} programs (the round's output "
      "state must have the input's shapes, dtypes and weak types)")


def check_finite(run: Run):
  bad = []
  for path, leaf in jax.tree_util.tree_leaves_with_path(run.states[-1]):
    a = jnp.asarray(leaf)
    if jnp.issubdtype(a.dtype, jnp.inexact) and not np.all(np.isfinite(np.asarray(a))):
      bad.append(jax.tree_util.keystr(path))
  assert not bad, f"{run.name}: non-finite state leaves after {ROUNDS} rounds: {bad}"


def check_same_seed(run: Run):
  alg = algorithms.build(run.name, run.task, **run.hparams)
  state = initial_state(alg)
  assert_bitwise(state, run.states[0], f"{run.name} init")
  step = jax.jit(alg.round, compiler_options=FAST_XLA)
  if same_program(step.trace(state, round_key(0), run.task.data).jaxpr, run.program):
    step = run.step  # the same program: run it with the executable compiled once already
  for r in range(ROUNDS):
    state, st = step(state, round_key(r), run.task.data)
    assert_bitwise(st, run.stats[r], f"{run.name} round {r} stats")
    assert_bitwise(state, run.states[r + 1], f"{run.name} round {r} state")


def ledgers_of(st: RoundStats) -> dict:
  return {led: st.exact(led) for led in LEDGERS}


def check_ledgers(run: Run, expected: Callable | None):
  got = []
  for r, st in enumerate(run.stats):
    assert all(type(u) is int and u >= 0 for u in st.units), (run.name, r, st.units)
    row = ledgers_of(st)
    for led, v in row.items():
      assert type(v) is int and v >= 0, f"{run.name} round {r}: {led} = {v!r}"
    assert st.totals() == row
    got.append(row)
  if expected is not None:
    want = [expected(run.alg.hparams, run.task, r) for r in range(ROUNDS)]
    assert got == want, f"{run.name}: ledgers {got} != documented {want}"
  else:  # no documented count: at least the same every round after the first
    assert all(row == got[1] for row in got[1:]), f"{run.name}: ledgers vary over rounds: {got}"


# ------------------------------------------------------------------ documented counts
# Each entry writes the count its module docstring states, with the built
# config's hyperparameters; ``r`` is the round index.


def row(queries, up, down, participants, empty=0):
  return dict(zip(LEDGERS, (queries, up, down, participants, empty)))


def _m(cfg, task):
  return cfg.clients_per_round or task.num_clients


def fedavg_counts(cfg, task, r):
  """fedavg.py: local_steps * batch_size per-example gradients per client; d reals each way."""
  m, d = _m(cfg, task), task.dim
  return row(m * cfg.local_steps * cfg.batch_size, m * d * BYTES, m * d * BYTES, m)


def fedzo_counts(cfg, task, r):
  """fedzo.py: b1 (b2 + 1) queries per client step, H steps; d reals each way (local.py)."""
  m, d = _m(cfg, task), task.dim
  return row(m * cfg.local_steps * cfg.batch_size * (cfg.fd_directions + 1), m * d * BYTES,
             m * d * BYTES, m)


def dzopa_counts(cfg, task, r):
  """dzopa.py: N local_steps b1 (b2 + 1) (local_steps None: 1 paper, 5 code); d reals each way."""
  n, d = task.num_clients, task.dim
  h = cfg.local_steps or {"paper": 1, "code": 5}[cfg.variant]
  b1 = cfg.batch_size if task.stochastic else 1
  return row(n * h * b1 * (cfg.fd_directions + 1), n * d * BYTES, n * d * BYTES, n)


def zone_s_counts(cfg, task, r):
  """zone_s.py: J b1 (b2 + 1) from the one active client; d reals each way; 1 participant."""
  b1 = cfg.batch_size if task.stochastic else 1
  return row(cfg.local_steps * b1 * (cfg.fd_directions + 1), task.dim * BYTES, task.dim * BYTES, 1)


def hiso_counts(cfg, task, r):
  """hiso.py: tau (P + 1) (forward) or tau 2P (central) evaluations of b samples per client;
  client_state=none: tau P scalars up and down per participating client."""
  assert cfg.client_state == "none"
  m, tau, p = _m(cfg, task), cfg.local_steps, cfg.num_perturbations
  evals = p + 1 if cfg.fd_scheme == "forward" else 2 * p
  b = cfg.batch_size if task.stochastic else 1
  return row(m * tau * evals * b, m * tau * p * BYTES, m * tau * p * BYTES, m)


def fzoos_counts(cfg, task, r):
  """fzoos.py: 1 + T + 5 (T - 1) + 1 + 50 per client (local / server active queries), plus
  init_queries in round 1; (d + M) reals each way per client."""
  n, t = task.num_clients, cfg.local_steps
  per_client = 1 + t + cfg.local_active * (t - 1) + 1 + cfg.server_active
  per_client += cfg.init_queries if r == 0 else 0
  b = n * (task.dim + cfg.num_rff) * BYTES
  return row(n * per_client, b, b, n)


def zo_baseline_counts(cfg, task, r):
  """zo_baselines.py: 1 + T (Q + 1) per client (times b1 on sampled tasks; 0 for the true
  gradient); d reals each way, plus the control variates' d reals each way for SCAFFOLD
  (I: the extra exchange; II: eq. 93's c_i up, c down)."""
  n, d = task.num_clients, task.dim
  b1 = cfg.batch_size if task.stochastic else 1
  q = 0 if cfg.estimator == "true" else b1 * (1 + cfg.local_steps * (cfg.fd_directions + 1))
  b = n * d * BYTES * (2 if cfg.correction in ("scaffold1", "scaffold2") else 1)
  return row(n * q, b, b, n)


def fedlrgd_counts(cfg, task, r):
  """fedlrgd.py, module doc: round 1 charges the set-up, r^2 + sum_c r s_c (+ r) queries,
  m r p reals up, m (r p + p r^2) down, m r client-epochs; later rounds r queries, no bytes."""
  m, s, rank, p = task.num_clients, task.info["samples_per_client"], task.info["server_samples"], task.dim
  if r == 0:
    return row(rank * rank + m * rank * s + rank, m * rank * p * BYTES,
               m * (rank * p + p * rank * rank) * BYTES, m * rank)
  return row(rank, 0, 0, 0)


def fedave_counts(cfg, task, r):
  """fedave.py: b * batch_size gradients per active client; one p-vector up (QSGD: a 32-bit norm
  and a sign and a level per coordinate) and the model down."""
  m, p = _m(cfg, task), task.dim
  up = p * BYTES if cfg.quantizer == "none" else math.ceil(
      (32 + p * (1 + math.ceil(math.log2(cfg.qsgd_levels + 1)))) / 8)
  return row(m * cfg.local_steps * cfg.batch_size, m * up, m * p * BYTES, m)


def gd_counts(cfg, task, r):
  """fedave.py: exact GD on the pooled n = m s + r samples; one p-vector each way per client."""
  m, p = task.num_clients, task.dim
  n = m * task.info["samples_per_client"] + task.info["server_samples"]
  return row(n, m * p * BYTES, m * p * BYTES, m)


def ffgb_counts(cfg, task, r):
  """ffgb.py: K sum_{i in S} n_i queries; m K learners up, (N - 1) m K down (specs §1.4); the
  learner is weak_learners' MLP d -> 32 -> 32 -> C (App. B.1)."""
  n_clients = task.num_clients
  m, k = _m(cfg, task), cfg.local_steps
  assert m == n_clients and not cfg.one_shot  # full participation: S is every client
  assert cfg.weak_learner == "mlp" or (cfg.weak_learner in ("wo_inf", "wo_lip") and cfg.wo_family == "mlp")
  x = task.client_data["x"]
  d_in, c = int(np.prod(x.shape[2:])), task.info["num_outputs"]
  params = (d_in * 32 + 32) + (32 * 32 + 32) + (32 * c + c)
  q = k * int(np.sum(np.asarray(task.client_data["mask"])))
  return row(q, m * k * params * BYTES, (n_clients - 1) * m * k * params * BYTES, m)


EXPECTED = {
    **dict.fromkeys(["fedavg", "fedadam", "fedyogi", "fedadagrad"], fedavg_counts),
    "fedzo": fedzo_counts, "dzopa": dzopa_counts, "zone_s": zone_s_counts,
    **dict.fromkeys(["decomfl", "hiso", "hiso_code", "decomfl_code"], hiso_counts),
    "fedlrgd": fedlrgd_counts, "fedave": fedave_counts, "gd": gd_counts,
    **dict.fromkeys(["ffgb", "ffgb_nores", "ffgb_code", "ffgb_nores_code", "ffgb_c", "ffgb_l"],
                    ffgb_counts),
    "fzoos": fzoos_counts,
    **dict.fromkeys(["fedzo_fd", "fedprox_zo", "scaffold_zo1", "scaffold_zo2", "fedavg_true_grad"],
                    zo_baseline_counts),
}

# ------------------------------------------------------------------ known failures

# (check, name) -> reason. strict: the case fails today; fixing it turns the xfail into an error.
KNOWN: dict[tuple[str, str], str] = {}


def names(check):
  out = []
  for n in algorithms.REGISTRY:
    reason = KNOWN.get((check, n))
    out.append(pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=reason)) if reason else n)
  return out


# ------------------------------------------------------------------ the registry-wide tests


@pytest.mark.parametrize("name", names("defaults"))
def test_builds_from_defaults(request, name):
  """Builds with the defaults (+ REQUIRED); its init state has the run's structure."""
  task = task_for(request, name)
  cls = config_class(name)
  alg = algorithms.build(name, task, **REQUIRED.get(cls, {}))
  assert isinstance(alg, FederatedAlgorithm) and alg.name == name
  assert isinstance(alg.hparams, cls)
  state = jax.eval_shape(alg.init, *rng.init_keys(ROOT))  # abstract: nothing compiles
  run = get_run(request, name)
  assert jax.tree_util.tree_structure(state) == jax.tree_util.tree_structure(run.states[0])


@pytest.mark.slow  # long; .ci/run runs it (pytest -m slow)
@pytest.mark.parametrize("name", names("compile"))
def test_round_compiles_once(request, name):
  check_compiles_once(get_run(request, name))


@pytest.mark.slow  # long; .ci/run runs it (pytest -m slow)
@pytest.mark.parametrize("name", names("finite"))
def test_state_is_finite(request, name):
  check_finite(get_run(request, name))


@pytest.mark.slow  # long; .ci/run runs it (pytest -m slow)
@pytest.mark.parametrize("name", names("seed"))
def test_same_seed_same_stats_and_state(request, name):
  check_same_seed(get_run(request, name))


@pytest.mark.slow  # long; .ci/run runs it (pytest -m slow)
@pytest.mark.parametrize("name", names("ledgers"))
def test_ledgers_are_documented_counts(request, name):
  check_ledgers(get_run(request, name), EXPECTED.get(name))


@pytest.mark.parametrize("name", names("unknown"))
def test_unknown_hyperparameter_raises(request, name):
  with pytest.raises(ConfigError, match="not_a_field"):
    algorithms.build(name, task_for(request, name), not_a_field=1)


def test_every_documented_count_is_a_registered_algorithm():
  assert set(EXPECTED) <= set(algorithms.REGISTRY)


# ------------------------------------------------------------------ a new algorithm: one file + one line
# What follows is the whole of a new algorithm module (it would live in
# fedsim/algorithms/toy_gd.py); registering it is the one ``REGISTRY`` line below.


@chex.dataclass(frozen=True)
class ToyGDConfig:
  """Federated full-batch gradient descent (a demonstration, not shipped).

  Attributes:
    lr: server step size eta.
  """
  lr: float = hparam(0.1, help="step size eta", low=0, low_open=True, finite=True)

  def __post_init__(self):
    validate(self)


def make_toy_gd(task, cfg: ToyGDConfig, name: str = "toy_gd") -> FederatedAlgorithm:
  """x <- x - lr (1/N) sum_i grad f_i(x), every client on its whole local set.

  Queries: n_i per-example gradients per client (sum_i n_i a round). Bytes: d float32 down and
  d up per client. State: {"x": (d,) float32, "t": () int32}.
  """
  _, unravel = ravel_pytree(task.init_params(jax.random.key(0)))
  n, d = task.num_clients, task.dim

  def local_loss(x, client):
    return task.loss(unravel(x), task.full_batch(client))

  def init(key, shared_key):
    del shared_key
    return {"x": ravel_pytree(task.init_params(key))[0], "t": jnp.zeros((), jnp.int32)}

  def round_fn(state, key, data):
    del key
    grads = jax.vmap(jax.grad(local_loss), in_axes=(None, 0))(state["x"], data["clients"])
    stats = make_stats(queries=jnp.sum(data["sizes"]), bytes_up=n * d * 4, bytes_down=n * d * 4,
                       participants=n)
    return {"x": state["x"] - cfg.lr * jnp.mean(grads, 0), "t": state["t"] + 1}, stats

  return FederatedAlgorithm(name=name, init=init, round=round_fn, solution=lambda s: unravel(s["x"]),
                            hparams=cfg, metrics=lambda s: {"rounds_done": s["t"]})


def toy_counts(cfg, task, r):
  n, d = task.num_clients, task.dim
  return row(int(np.sum(np.asarray(task.client_sizes))), n * d * 4, n * d * 4, n)


def test_toy_algorithm_needs_one_registry_line(monkeypatch, tiny_task):
  monkeypatch.setitem(algorithms.REGISTRY, "toy_gd", (ToyGDConfig, {}, make_toy_gd))  # the one line

  run = make_run("toy_gd", tiny_task, {})
  check_compiles_once(run)
  check_finite(run)
  check_same_seed(run)
  check_ledgers(run, toy_counts)
  with pytest.raises(ConfigError, match="not_a_field"):
    algorithms.build("toy_gd", tiny_task, not_a_field=1)
  with pytest.raises(ConfigError, match="lr"):
    algorithms.build("toy_gd", tiny_task, lr=-1.0)
  # Round 0 against NumPy: x1 = x0 - lr (1/N) sum_i (1/n_i) A_i^T (A_i x0 - y_i).
  x0 = np.asarray(run.states[0]["x"], np.float64)
  grads = [tp.batch_grad(*tp.client_arrays(tiny_task, i), x0) for i in range(tiny_task.num_clients)]
  np.testing.assert_allclose(run.states[1]["x"], x0 - 0.1 * np.mean(grads, 0), rtol=1e-5, atol=1e-6)
  # The engine runs it: cumulative ledgers, the algorithm's metric, the same final state.
  state, records = simulate(algorithms.build("toy_gd", tiny_task), tiny_task, ROUNDS, 2, ROOT)
  q = toy_counts(None, tiny_task, 0)["queries"]
  assert [(rec["round"], rec["queries"], rec["rounds_done"]) for rec in records] == [
      (0, 0, 0.0), (2, 2 * q, 2.0), (3, 3 * q, 3.0)]
  assert records[-1]["objective"] < records[0]["objective"]
  np.testing.assert_allclose(state["x"], run.states[-1]["x"], rtol=1e-6, atol=1e-7)


def test_compile_counter_catches_a_recompile(monkeypatch, tiny_task):
  """The negative example: a round whose counter drifts from int32 to float32 compiles twice."""

  def make_drifting(task, cfg, name="toy_drift"):
    alg = make_toy_gd(task, cfg, name)

    def round_fn(state, key, data):
      new, stats = alg.round(state, key, data)
      return {**new, "t": new["t"].astype(jnp.float32)}, stats
    return alg._replace(round=round_fn)

  monkeypatch.setitem(algorithms.REGISTRY, "toy_drift", (ToyGDConfig, {}, make_drifting))
  run = make_run("toy_drift", tiny_task, {})
  assert run.cache_size == 2
  with pytest.raises(AssertionError, match="compiled 2 programs"):
    check_compiles_once(run)


def test_the_checks_fail_on_bad_runs(tiny_task):
  """Each check rejects a run that breaks it: a NaN leaf, a 1-ulp difference, a wrong ledger,
  a ledger that varies over rounds."""
  x = jnp.ones((3,), jnp.float32)
  st = make_stats(queries=5, bytes_up=8, bytes_down=8, participants=2)
  good = Run("fake", tiny_task, {}, FederatedAlgorithm("fake", None, None, None), None,
             [{"x": x}] * (ROUNDS + 1), [st] * ROUNDS, 1, None)
  check_finite(good)
  check_ledgers(good, None)
  check_ledgers(good, lambda cfg, task, r: row(5, 8, 8, 2))
  with pytest.raises(AssertionError, match="non-finite"):
    check_finite(dataclasses.replace(good, states=good.states[:-1] + [{"x": x.at[1].set(jnp.nan)}]))
  with pytest.raises(AssertionError, match="differ"):
    assert_bitwise({"x": x}, {"x": x.at[0].set(jnp.nextafter(x[0], 2.0))}, "one ulp")
  with pytest.raises(AssertionError, match="documented"):
    check_ledgers(good, lambda cfg, task, r: row(5, 8, 8, 3))
  varying = make_stats(queries=6, bytes_up=8, bytes_down=8, participants=2)
  with pytest.raises(AssertionError, match="vary"):
    check_ledgers(dataclasses.replace(good, stats=[st] * (ROUNDS - 1) + [varying]), None)
