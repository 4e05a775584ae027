"""FZooS and its FD baselines (seed 000; specs/fzoos.md §7 checks 4, reductions of App. D)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedsim import algorithms
from fedsim.algorithms import fzoos, zo_baselines
from fedsim.core import rng
from fedsim.tasks import make_task
from fedsim.tasks import synthetic

ROOT = jax.random.key(3)
SMALL = dict(num_rff=64, history_size=160, gp_window=40, rff_window=80)


def _run(alg, task, rounds):
  state = jax.jit(alg.init)(*rng.init_keys(ROOT))
  step = jax.jit(alg.round)
  stats = []
  for r in range(rounds):
    state, s = step(state, rng.round_key(rng.stream(ROOT, "rounds"), r), task.data)
    stats.append(s)
  return state, stats


@pytest.mark.slow  # long; .ci/run runs it (pytest -m slow)
def test_query_ledger_per_client_round():
  """T = 10, Q = 20: FZooS 6T + 47 = 107 (+10 initial in round 1), FD baselines 1 + T(Q+1) = 211,
  SCAFFOLD I's extra Q + 1 at x_r counted separately."""
  assert fzoos.queries_per_client_round(fzoos.FZooSConfig()) == 107
  assert zo_baselines.queries_per_client_round(zo_baselines.ZOBaselineConfig()) == 211
  task = make_task("quadratic", num_clients=3, dim=25, heterogeneity=5.0, seed=0)
  _, stats = _run(algorithms.build("fzoos", task, **SMALL), task, 2)
  assert [int(s.queries) for s in stats] == [3 * (107 + 10), 3 * 107]
  assert int(stats[0].bytes_up) == 3 * (25 + 64) * 4
  state, stats = _run(algorithms.build("scaffold_zo1", task), task, 2)
  assert [int(s.queries) for s in stats] == [3 * 211] * 2
  alg = algorithms.build("scaffold_zo1", task)
  assert int(alg.metrics(state)["extra_queries"]) == 2 * 3 * 21


def test_fedzo_fd_is_fedzo_with_the_fzoos_baseline_settings():
  task = make_task("quadratic", num_clients=4, dim=30, heterogeneity=5.0, seed=1)
  hp = dict(direction="orthogonal", fd_directions=20, smoothing=0.01, local_optimizer="adam",
            lr=0.01, local_steps=10, batch_size=1)
  a, _ = _run(algorithms.build("fedzo", task, **hp), task, 2)
  b, _ = _run(algorithms.build("fedzo_fd", task, fd_normalization="unbiased"), task, 2)
  np.testing.assert_allclose(a.x, b.x, rtol=1e-5, atol=1e-6)


@pytest.mark.slow  # 25-50 s: the default suite's 15-minute budget
def test_corrections_reduce_to_fedzo_when_zero():
  """FedProx with gamma = 0, and SCAFFOLD I/II with one client (c = c_i), are FedZO-FD exactly;
  FedProx's first round has no prox term ([code])."""
  task = make_task("quadratic", num_clients=3, dim=30, heterogeneity=50.0, seed=2)
  ref, _ = _run(algorithms.build("fedzo_fd", task), task, 3)
  prox0, _ = _run(algorithms.build("fedprox_zo", task, prox_gamma=0.0), task, 3)
  np.testing.assert_array_equal(ref.x, prox0.x)
  ref1, _ = _run(algorithms.build("fedzo_fd", task), task, 1)
  prox1, _ = _run(algorithms.build("fedprox_zo", task), task, 1)
  np.testing.assert_array_equal(ref1.x, prox1.x)
  prox, _ = _run(algorithms.build("fedprox_zo", task), task, 3)
  assert not np.allclose(ref.x, prox.x)
  one = make_task("quadratic", num_clients=1, dim=30, heterogeneity=5.0, seed=2)
  ref, _ = _run(algorithms.build("fedzo_fd", one), one, 3)
  for name in ("scaffold_zo1", "scaffold_zo2"):
    s, _ = _run(algorithms.build(name, one), one, 3)
    # c - c_i = 0 exactly; float32 fusion of the extra (zero) term moves x by ~1e-6
    np.testing.assert_allclose(s.x, ref.x, rtol=0, atol=5e-5)


@pytest.mark.slow  # long; .ci/run runs it (pytest -m slow)
def test_fzoos_one_client_correction_vanishes_and_f_decreases():
  """With N = 1, w_r = w_{r,T}^(1), so eq. 8's correction is 0: the inv_t run equals the
  no-correction ablation. FZooS lowers F on the quadratic."""
  with jax.enable_x64(True):
    one = make_task("quadratic", num_clients=1, dim=20, heterogeneity=5.0, seed=0)
    kw = dict(SMALL, local_steps=4)
    a, _ = _run(algorithms.build("fzoos", one, **kw), one, 2)
    b, _ = _run(algorithms.build("fzoos", one, gamma_schedule="zero", **kw), one, 2)
    np.testing.assert_allclose(a.x, b.x, rtol=0, atol=1e-10)
    task = make_task("quadratic", num_clients=3, dim=20, heterogeneity=5.0, seed=0)
    alg = algorithms.build("fzoos", task, **kw)
    s, _ = _run(alg, task, 3)
    f0 = task.evaluate(alg.solution(alg.init(*rng.init_keys(ROOT))), task.data)["objective"]
    f3 = task.evaluate(alg.solution(s), task.data)["objective"]
    assert float(f3) < 0.8 * float(f0)
    assert bool(jnp.all(jnp.isfinite(s.w_global)))


def test_ackley_levy_tasks():
  for name in synthetic.FUNCTIONS:
    task = make_task(name, num_clients=4, dim=8, heterogeneity=5.0, seed=0)
    x = jax.random.uniform(jax.random.key(0), (8,))
    per = jnp.stack([task.loss(x, jax.tree_util.tree_map(lambda a: a[i], task.client_data))
                     for i in range(4)])
    np.testing.assert_allclose(task.evaluate(x, task.data)["objective"], jnp.mean(per), rtol=1e-6)
    homo = make_task(name, num_clients=4, dim=8, heterogeneity=0.0, seed=0)
    np.testing.assert_allclose(homo.client_data["c1"], 0.1)
  np.testing.assert_allclose(synthetic.ackley(jnp.zeros(5)), 0.0, atol=1e-6)
  np.testing.assert_allclose(synthetic.levy(jnp.ones(5)), 0.0, atol=1e-6)


def test_track_cosine_is_exact_for_a_full_orthonormal_fd_basis():
  """Fig. 4 metric. With Q = d orthonormal directions the FD estimate (eq. 3) is grad f + O(lambda),
  and with N = 1, F = f_1, so every local step's cosine to grad F is 1 - O(lambda). Tracking is
  measurement only: the iterates are bit-identical with and without it."""
  with jax.enable_x64(True):
    one = make_task("quadratic", num_clients=1, dim=12, heterogeneity=5.0, seed=0)
    kw = dict(fd_directions=12, smoothing=1e-6, local_steps=3)
    a, _ = _run(algorithms.build("fedzo_fd", one, track_cosine=1, **kw), one, 2)
    b, _ = _run(algorithms.build("fedzo_fd", one, **kw), one, 2)
    np.testing.assert_array_equal(a.x, b.x)
    m = algorithms.build("fedzo_fd", one, track_cosine=1, **kw).metrics(a)
    np.testing.assert_allclose(np.asarray(a.cosine), 1.0, atol=1e-6)
    np.testing.assert_allclose(float(m["grad_cosine"]), 1.0, atol=1e-6)
    # A 1-direction estimate is a projection: its cosine is |u^T g| / |g| < 1 in general.
    c, _ = _run(algorithms.build("fedzo_fd", one, track_cosine=1, fd_directions=1, smoothing=1e-6,
                                 local_steps=3), one, 1)
    assert float(jnp.max(c.cosine)) < 0.99


@pytest.mark.slow  # long; .ci/run runs it (pytest -m slow)
def test_fzoos_track_cosine_does_not_change_iterates():
  with jax.enable_x64(True):
    task = make_task("quadratic", num_clients=3, dim=20, heterogeneity=5.0, seed=0)
    kw = dict(SMALL, local_steps=4)
    alg = algorithms.build("fzoos", task, track_cosine=1, **kw)
    a, _ = _run(alg, task, 2)
    b, _ = _run(algorithms.build("fzoos", task, **kw), task, 2)
    np.testing.assert_array_equal(a.x, b.x)
    m = alg.metrics(a)
    assert set(m) == {"grad_cosine", "grad_cosine_early", "grad_cosine_late", "history_overwritten"}
    np.testing.assert_allclose(float(m["grad_cosine"]), float(jnp.mean(a.cosine)))
    np.testing.assert_allclose(float(m["grad_cosine_early"]), float(jnp.mean(a.cosine[:2])))
    assert bool(jnp.all(jnp.abs(a.cosine) <= 1.0)) and float(m["grad_cosine"]) > 0.0


@pytest.mark.slow  # long; .ci/run runs it (pytest -m slow)
def test_accept_if_improves_keeps_the_previous_point_exactly_when_F_does_not_improve():
  """[code] reject-if-not-improving (specs §2.1): x_r = x_{r-1} iff F(x_r^avg) >= F(x_{r-1});
  otherwise the averaged point, exactly as without the flag; F is then non-increasing. A small
  step (0.01) improves F, a huge one (Adam lr 2 across the unit box) does not: both branches run."""
  task = make_task("quadratic", num_clients=3, dim=30, heterogeneity=5.0, seed=0)
  F = lambda x: float(task.evaluate(x, task.data)["objective"])
  seen = set()
  for name, kw in (("fedzo_fd", dict(local_steps=3, lr=0.01)), ("fedzo_fd", dict(local_steps=3, lr=2.0)),
                   ("fzoos", dict(SMALL, local_steps=2))):
    plain = jax.jit(algorithms.build(name, task, **kw).round)
    acc = algorithms.build(name, task, accept_if_improves=1, **kw)
    step = jax.jit(acc.round)
    state = jax.jit(acc.init)(*rng.init_keys(ROOT))
    for r in range(2):
      key = rng.round_key(rng.stream(ROOT, "rounds"), r)
      cand, _ = plain(state, key, task.data)
      new, _ = step(state, key, task.data)
      improves = F(cand.x) < F(state.x)
      np.testing.assert_array_equal(new.x, cand.x if improves else state.x)
      assert F(new.x) <= F(state.x)
      seen.add(improves)
      state = new
  assert seen == {True, False}


def test_true_gradient_oracle_local_step_is_exact_gradient_and_reaches_the_optimum_at_small_C():
  """``fedavg_true_grad`` ([code] gd_opt): one local Adam step from x_0 moves every coordinate by
  -lr sign(grad f_i(x_0)) (Adam's first step), so the client's direction is the exact gradient;
  at C = 0.5, d = 300, N = 5 it reaches F < F* + 0.01 within 10 rounds (specs §7 check 5's
  sanity bound: the farthest coordinate needs ~53 steps of 0.01) and counts no queries."""
  task = make_task("quadratic", num_clients=5, dim=300, heterogeneity=0.5, seed=0)
  one = make_task("quadratic", num_clients=1, dim=300, heterogeneity=0.5, seed=0)
  alg = algorithms.build("fedavg_true_grad", one, local_steps=1)
  state = jax.jit(alg.init)(*rng.init_keys(ROOT))
  new, stats = jax.jit(alg.round)(state, rng.round_key(rng.stream(ROOT, "rounds"), 0), one.data)
  row = jax.tree.map(lambda a: a[0], one.data["clients"])
  g = jax.grad(one.loss)(state.x, row)
  np.testing.assert_allclose(new.x - state.x, -0.01 * np.sign(g), rtol=1e-5, atol=1e-7)
  assert int(stats.queries) == 0
  state, stats = _run(algorithms.build("fedavg_true_grad", task), task, 10)
  gap = float(task.evaluate(state.x, task.data)["optimality_gap"])
  assert gap < 0.01, gap
  assert sum(int(s.queries) for s in stats) == 0
