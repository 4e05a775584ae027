"""DZOPA and ZONE-S, the FedZO paper's attack baselines (seed 001 §V-A;
specs/fedzo.md §2.4 (b), (c)).

* One iteration of each variant equals its equations, with the keys reproduced
  from the key hierarchy (fedsim/core/rng.py), as in test_reductions.py.
* DZOPA with N = 1 and no consensus / dual terms is one step of sphere ZO-SGD
  (= FedZO with N = M = H = 1).
* ZONE-S changes only the active client's state.
* Ledgers, state shapes, and a decrease of the quadratic's objective.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from fedsim import algorithms
from fedsim.algorithms.dzopa import DZOPAConfig, make_dzopa
from fedsim.algorithms.zone_s import ZONESConfig, make_zone_s
from fedsim.core import ConfigError, rng, simulate
from fedsim.core.sampling import sample_clients
from fedsim.estimators import fd_gradient
from fedsim.tasks import make_task
from tests.conftest import assert_close, digits_task

ROOT = jax.random.key(11)


@pytest.fixture(scope="module")
def digits1():
  """Digits softmax, one client."""
  return digits_task(1)


@pytest.fixture(scope="module")
def digits4():
  """Digits softmax, 4 clients (d = 650)."""
  return digits_task(4)


def _round_keys(r=0):
  return rng.round_subkeys(rng.round_key(rng.stream(ROOT, "rounds"), r))


def _one_round(alg, task, **replace):
  state = alg.init(*rng.init_keys(ROOT))._replace(**replace)
  k_round = rng.round_key(rng.stream(ROOT, "rounds"), 0)
  new_state, stats = jax.jit(alg.round)(state, k_round, task.data)
  return state, new_state, stats


def _flat_loss(task):
  _, unravel = ravel_pytree(task.init_params(jax.random.key(0)))
  return lambda x, b: task.loss(unravel(x), b)


def _row(task, i):
  return jax.tree_util.tree_map(lambda a: a[i], task.client_data)


@functools.partial(jax.jit, static_argnums=(0, 4, 5, 6, 7))
def _estimate(task, x, client, k_step, b1, b2, mu, law):
  """One eq.-2 estimate with the step key k_step = fold_in(client key, h)."""
  k_data, k_dir = jax.random.split(k_step)
  batch = task.sample_batch(client, k_data, b1)
  loss = _flat_loss(task)
  return fd_gradient(lambda z: loss(z, batch), x, k_dir, b2, mu, law)


def _mean_estimate(task, x, client, ck, J, b1, b2, mu, law="sphere"):
  """(1/J) sum_h eq.-2 estimate at the same x, estimate h keyed by fold_in(ck, h)."""
  total = 0.0
  for h in range(J):
    total = total + _estimate(task, x, client, jax.random.fold_in(ck, h), b1, b2, mu, law)
  return total / J


def _perturbed(shape, seed, scale):
  return scale * jax.random.normal(jax.random.key(seed), shape)


# ----------------------------------------------------------------------------- DZOPA


def test_dzopa_paper_one_iteration(digits4):
  task, n, d = digits4, 4, digits4.dim
  hp = dict(lr=0.05, smoothing=1.0, batch_size=5, fd_directions=3, local_steps=2, alpha=0.7, beta=0.3)
  alg = make_dzopa(task, DZOPAConfig(**hp))
  x = _perturbed((n, d), 1, 0.1)
  v = _perturbed((n, d), 2, 0.05)
  _, new, stats = _one_round(alg, task, x=x, v=v)
  _, k_clients, _ = _round_keys()
  g = jnp.stack([_mean_estimate(task, x[i], _row(task, i), rng.client_key(k_clients, i), 2, 5, 3, 1.0)
                 for i in range(n)])
  xs, vs, gs = (np.asarray(a, np.float64) for a in (x, v, g))
  lx = n * xs - xs.sum(0, keepdims=True)  # sum_j L_ij x_j, L = N I - 1 1^T
  assert_close(new.x, xs - 0.05 * (0.7 * lx + 0.3 * vs + gs), rtol=1e-5, atol=1e-6)
  assert_close(new.v, vs + 0.05 * 0.3 * lx, rtol=1e-5, atol=1e-7)
  assert int(stats.queries) == n * 2 * 5 * (3 + 1)
  assert int(stats.bytes_up) == int(stats.bytes_down) == n * d * 4
  assert int(stats.participants) == n
  # solution = mean of the x_i
  sol, _ = ravel_pytree(alg.solution(new))
  assert_close(sol, np.asarray(new.x, np.float64).mean(0), rtol=1e-5, atol=1e-7)


def test_dzopa_code_one_iteration(digits4):
  task, n, d = digits4, 4, digits4.dim
  hp = dict(lr=0.05, smoothing=1.0, batch_size=5, fd_directions=3, variant="code")
  alg = make_dzopa(task, DZOPAConfig(**hp))  # local_steps None -> local_ep = 5, gamma_c = 0.01
  x = _perturbed((n, d), 3, 0.1)
  state, new, stats = _one_round(alg, task, x=x)
  _, k_clients, _ = _round_keys()
  g = jnp.stack([_mean_estimate(task, x[i], _row(task, i), rng.client_key(k_clients, i), 5, 5, 3, 1.0)
                 for i in range(n)])
  xs, gs = np.asarray(x, np.float64), np.asarray(g, np.float64)
  lx = n * xs - xs.sum(0, keepdims=True)
  assert_close(new.x, xs - 0.01 * lx - 0.05 * gs, rtol=1e-5, atol=1e-6)
  assert np.array_equal(np.asarray(new.v), np.zeros((n, d)))  # no dual variable
  assert int(stats.queries) == n * 5 * 5 * (3 + 1)  # FedZO's budget with H = 5


def test_dzopa_paper_with_alpha_gamma_over_eta_and_no_dual_is_code():
  task = make_task("quadratic", num_clients=4, dim=6, heterogeneity=1.0)
  common = dict(lr=0.05, smoothing=0.1, fd_directions=3, local_steps=2)
  x = 0.5 + _perturbed((4, 6), 4, 0.1)
  _, paper, _ = _one_round(make_dzopa(task, DZOPAConfig(alpha=0.01 / 0.05, beta=0.0, **common)), task, x=x)
  _, code, _ = _one_round(make_dzopa(task, DZOPAConfig(variant="code", **common)), task, x=x)
  assert_close(paper.x, code.x, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("coupling", [{}, {"alpha": 0.0, "beta": 0.0}])
def test_dzopa_one_client_is_zo_sgd(coupling, digits1):
  task = digits1
  hp = dict(lr=0.05, smoothing=1.0, batch_size=7, fd_directions=4)
  alg = make_dzopa(task, DZOPAConfig(**hp, **coupling))  # paper form, one estimate
  x_start = _perturbed((1, task.dim), 3, 0.1)
  _, new, stats = _one_round(alg, task, x=x_start)
  _, k_clients, _ = _round_keys()
  k_data, k_dir = jax.random.split(jax.random.fold_in(rng.client_key(k_clients, 0), 0))
  batch = task.sample_batch(_row(task, 0), k_data, 7)
  loss = _flat_loss(task)
  expected = x_start[0] - 0.05 * fd_gradient(lambda z: loss(z, batch), x_start[0], k_dir, 4, 1.0, "sphere")
  assert_close(new.x[0], expected, rtol=1e-5, atol=1e-6)
  assert not np.any(np.asarray(new.v))  # L = 0 for one client: the dual never moves
  assert int(stats.queries) == 7 * (4 + 1)
  # ... and the same step as FedZO with N = M = H = 1 (same key scheme).
  fedzo = algorithms.build("fedzo", task, local_steps=1, **hp)
  f_state = fedzo.init(*rng.init_keys(ROOT))._replace(x=x_start[0])
  f_new, _ = jax.jit(fedzo.round)(f_state, rng.round_key(rng.stream(ROOT, "rounds"), 0), task.data)
  assert_close(new.x[0], f_new.x, rtol=1e-6, atol=1e-7)


def test_dzopa_state_shapes_and_quadratic_ledger():
  task = make_task("quadratic", num_clients=3, dim=6, heterogeneity=1.0)
  for variant, h in (("paper", 1), ("code", 5)):
    alg = make_dzopa(task, DZOPAConfig(variant=variant))
    state = alg.init(*rng.init_keys(ROOT))
    assert state.x.shape == state.v.shape == (3, 6)
    assert state.x.dtype == state.v.dtype == jnp.float32
    # every client starts at the same x^0
    assert np.array_equal(np.asarray(state.x), np.broadcast_to(np.asarray(state.x[0]), (3, 6)))
    _, new, stats = _one_round(alg, task)
    assert new.x.shape == (3, 6)
    # no samples: one query per point, b2 + 1 points per estimate
    assert int(stats.queries) == 3 * h * (20 + 1)
    assert int(stats.bytes_up) == int(stats.bytes_down) == 3 * 6 * 4


def test_dzopa_defaults_are_the_papers():
  cfg = DZOPAConfig()
  assert (cfg.lr, cfg.smoothing, cfg.batch_size, cfg.fd_directions) == (0.005, 0.001, 25, 20)
  assert (cfg.variant, cfg.direction, cfg.consensus_weight) == ("paper", "sphere", 0.01)
  with pytest.raises(ConfigError, match="variant"):
    make_dzopa(make_task("quadratic", num_clients=2, dim=3), DZOPAConfig(variant="nope"))
  with pytest.raises(ConfigError, match="direction"):
    make_dzopa(make_task("quadratic", num_clients=2, dim=3), DZOPAConfig(direction="nope"))


# ----------------------------------------------------------------------------- ZONE-S


def _zone_s_reference(task, state, g_fn, rho, alpha):
  """The equations of specs/fedzo.md §2.4 (c) in float64, for the active client of round 0."""
  k_sample, k_clients, _ = _round_keys()
  n = task.num_clients
  i = int(sample_clients(k_sample, n, 1)[0])
  g = np.asarray(g_fn(state.x0, _row(task, i), rng.client_key(k_clients, i)), np.float64)
  x0, lam = np.asarray(state.x0, np.float64), np.asarray(state.lam, np.float64)
  x_i = x0 - (lam[i] + g) / (alpha * rho)
  x = np.broadcast_to(x0, lam.shape).copy()
  x[i] = x_i
  lam_new = lam.copy()
  lam_new[i] = lam[i] + alpha * rho * (x_i - x0)
  x0_new = (rho * x + lam).sum(0) / (n * rho)  # lambda^prev: every dual before the update
  return i, g, x, lam_new, x0_new


def test_zone_s_paper_one_iteration(digits4):
  task, n, d = digits4, 4, digits4.dim
  hp = dict(rho=200.0, smoothing=1.0, local_steps=3, batch_size=5, fd_directions=2)
  alg = make_zone_s(task, ZONESConfig(**hp))
  state, new, stats = _one_round(alg, task, x0=_perturbed((d,), 5, 0.1), x=_perturbed((n, d), 6, 1.0),
                                 lam=_perturbed((n, d), 7, 0.05))
  def g_fn(x, c, k):
    return _mean_estimate(task, x, c, k, 3, 5, 2, 1.0, "sphere")
  i, _, x, lam, x0 = _zone_s_reference(task, state, g_fn, rho=200.0, alpha=1.0 / n)
  assert_close(new.x, x, rtol=1e-5, atol=1e-6)
  assert_close(new.lam, lam, rtol=1e-4, atol=1e-5)
  assert_close(new.x0, x0, rtol=1e-5, atol=1e-6)
  # Only the active client's state changes: other duals bit-identical, other copies = old x0.
  others = [j for j in range(n) if j != i]
  assert np.array_equal(np.asarray(new.lam)[others], np.asarray(state.lam)[others])
  assert np.array_equal(np.asarray(new.x)[others], np.broadcast_to(np.asarray(state.x0), (n - 1, d)))
  assert not np.array_equal(np.asarray(new.lam)[i], np.asarray(state.lam)[i])
  assert int(stats.queries) == 3 * 5 * (2 + 1)
  assert int(stats.bytes_up) == int(stats.bytes_down) == d * 4
  assert int(stats.participants) == 1
  sol, _ = ravel_pytree(alg.solution(new))
  assert np.array_equal(np.asarray(sol), np.asarray(new.x0))


def test_zone_s_code_one_iteration_gaussian_times_d(digits4):
  task, n, d = digits4, 4, digits4.dim
  hp = dict(smoothing=1.0, local_steps=2, batch_size=5, fd_directions=2, variant="code")
  alg = make_zone_s(task, ZONESConfig(**hp))  # rho = 1/lr = 5e5, Gaussian directions
  state, new, _ = _one_round(alg, task, x0=_perturbed((d,), 8, 0.1), lam=_perturbed((n, d), 9, 0.05))
  loss = _flat_loss(task)

  def g_fn(x, client, ck):  # the authors' GradEst(form='gaussian'): (d/(mu b2)) sum u (F(x+mu u) - F(x))
    total = 0.0
    for h in range(2):
      k_data, k_dir = jax.random.split(jax.random.fold_in(ck, h))
      batch = task.sample_batch(client, k_data, 5)
      u = jax.random.normal(k_dir, (2, d))
      df = jnp.stack([loss(x + 1.0 * u[n_], batch) - loss(x, batch) for n_ in range(2)])
      total = total + d / (1.0 * 2) * (u.T @ df)
    return total / 2

  rho, alpha = 5e5, 1.0 / n
  i, g, _, _, _ = _zone_s_reference(task, state, g_fn, rho, alpha)
  # rho = 5e5 makes x_i - x0 tiny: compare the scaled step, not x_i itself.
  step = -(alpha * rho) * (np.asarray(new.x[i], np.float64) - np.asarray(state.x0, np.float64))
  lam_i = np.asarray(state.lam[i], np.float64)
  scale = np.max(np.abs(lam_i + g))
  np.testing.assert_allclose(step, lam_i + g, rtol=1e-3, atol=1e-3 * scale)
  np.testing.assert_allclose(np.asarray(new.lam[i]), -g, rtol=1e-3, atol=1e-3 * scale)
  # x0 <- x0 + (rho (x_i - x0) + sum_j lambda_j^prev) / (N rho)
  x0_step = (np.asarray(new.x0, np.float64) - np.asarray(state.x0, np.float64)) * (n * rho)
  expected = -(lam_i + g) / alpha + np.asarray(state.lam, np.float64).sum(0)
  np.testing.assert_allclose(x0_step, expected, rtol=1e-2, atol=1e-2 * np.max(np.abs(expected)))


def test_zone_s_only_the_active_client_changes_over_rounds():
  task = make_task("quadratic", num_clients=5, dim=4, heterogeneity=1.0)
  alg = make_zone_s(task, ZONESConfig(rho=50.0, local_steps=2, fd_directions=2))
  state = alg.init(*rng.init_keys(ROOT))
  assert state.x.shape == state.lam.shape == (5, 4) and state.x0.shape == (4,)
  round_fn = jax.jit(alg.round)
  rounds = rng.stream(ROOT, "rounds")
  for r in range(6):
    key = rng.round_key(rounds, r)
    i = int(sample_clients(rng.round_subkeys(key)[0], 5, 1)[0])
    new, stats = round_fn(state, key, task.data)
    changed = np.flatnonzero(np.any(np.asarray(new.lam) != np.asarray(state.lam), axis=1))
    assert changed.tolist() == [i]
    off = np.asarray(new.x)[np.arange(5) != i]
    assert np.array_equal(off, np.broadcast_to(np.asarray(state.x0), off.shape))
    assert int(stats.queries) == 2 * (2 + 1)  # no samples: b1 -> 1
    state = new


def test_zone_s_defaults():
  cfg = ZONESConfig()
  assert (cfg.rho, cfg.smoothing, cfg.local_steps, cfg.batch_size, cfg.fd_directions) == (None, 1e-3, 100, 25, 1)
  task = make_task("quadratic", num_clients=2, dim=3)
  _, _, stats = _one_round(make_zone_s(task, cfg), task)
  assert int(stats.queries) == 100 * 2
  with pytest.raises(ConfigError, match="rho"):
    make_zone_s(task, ZONESConfig(rho=-1.0))
  with pytest.raises(ConfigError, match="variant"):
    make_zone_s(task, ZONESConfig(variant="nope"))


def test_zone_s_paper_rho_500_step_is_one_over_rho():
  # alpha = 1/N, lambda = 0: the first server step is x0 - G / rho (rho = 500, seed 001 §V-A).
  task = make_task("quadratic", num_clients=3, dim=5, heterogeneity=1.0)
  alg = make_zone_s(task, ZONESConfig(local_steps=1, fd_directions=3))
  state, new, _ = _one_round(alg, task)
  k_sample, k_clients, _ = _round_keys()
  i = int(sample_clients(k_sample, 3, 1)[0])
  g = _mean_estimate(task, state.x0, _row(task, i), rng.client_key(k_clients, i), 1, 25, 3, 1e-3)
  assert_close(new.x0, state.x0 - g / 500.0, rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------- both


@pytest.mark.parametrize("name,builder", [
    ("dzopa", lambda t: make_dzopa(t, DZOPAConfig(lr=0.01, smoothing=1e-2, fd_directions=5))),
    ("dzopa_code", lambda t: make_dzopa(t, DZOPAConfig(lr=0.01, smoothing=1e-2, fd_directions=5,
                                                       variant="code"))),
    ("zone_s", lambda t: make_zone_s(t, ZONESConfig(rho=50.0, smoothing=1e-2, local_steps=4,
                                                     fd_directions=5))),
    ("zone_s_code", lambda t: make_zone_s(t, ZONESConfig(rho=500.0, smoothing=1e-2, local_steps=4,
                                                          fd_directions=5, variant="code"))),
])
def test_decreases_the_quadratic(name, builder):
  task = make_task("quadratic", num_clients=5, dim=10, heterogeneity=1.0)
  _, recs = simulate(builder(task), task, 40, 40, jax.random.key(0))
  first, last = recs[0]["optimality_gap"], recs[-1]["optimality_gap"]
  assert np.isfinite(last)
  assert last < 0.3 * first, (name, first, last)


# ----------------------------------------------------------------------------- NumPy references
# Tiny least-squares task (tests/algorithms/tiny_problem.py), N = 4, d = 4, two iterations
# from a perturbed state; the estimator (seed 001 eq. 2) is written out in NumPy
# (tiny_problem.zo_estimate), not taken from fedsim.

from tests.algorithms import tiny_problem as tp  # noqa: E402

TN, TD = 4, 4


@pytest.fixture(scope="module")
def tiny():
  return tp.make_tiny_task(TN, TD)


def _np_mean_estimate(task, x, r, i, J, b1, b2, mu, law="sphere", scale=None):
  """G_i = (1/J) sum_h e_h, all J estimates at the same x; estimate h uses the step keys
  (data, directions) = split(fold_in(client key, h))."""
  a_all, y_all = tp.client_arrays(task, i)
  total = np.zeros_like(x)
  for h in range(J):
    k_data, k_dir = tp.client_step_keys(r, i, h)
    j = tp.batch_index(task, i, k_data, b1)
    total = total + tp.zo_estimate(a_all[j], y_all[j], x, k_dir, b2, mu, law, scale)
  return total / J


def _run_from(alg, task, rounds, **replace):
  state = alg.init(*rng.init_keys(tp.ROOT))._replace(**replace)
  states, stats = [state], []
  step = jax.jit(alg.round)
  for r in range(rounds):
    state, st = step(state, rng.round_key(rng.stream(tp.ROOT, "rounds"), r), task.data)
    states.append(state)
    stats.append(st)
  return states, stats


@pytest.mark.parametrize("variant, law", [("paper", "sphere"), ("code", "sphere"), ("code", "gaussian")])
def test_dzopa_two_iterations_match_numpy(tiny, variant, law):
  lr, mu, b1, b2, alpha, beta, gamma_c = 0.05, 0.5, 3, 2, 0.7, 0.4, 0.03
  J = 2 if variant == "paper" else 5          # local_steps None: paper 1 ... code local_ep = 5
  hp = dict(lr=lr, smoothing=mu, batch_size=b1, fd_directions=b2, direction=law, variant=variant,
            alpha=alpha, beta=beta, consensus_weight=gamma_c)
  if variant == "paper":
    hp["local_steps"] = J
  alg = make_dzopa(tiny, DZOPAConfig(**hp))
  x = np.asarray(tp.X0[:TD], np.float64) + 0.3 * np.random.default_rng(1).normal(size=(TN, TD))
  v = 0.2 * np.random.default_rng(2).normal(size=(TN, TD))
  states, stats = _run_from(alg, tiny, 2, x=jnp.asarray(x, jnp.float32), v=jnp.asarray(v, jnp.float32))
  # The code's GradEst scales by d whatever the law: Gaussians get d / mu (not 1 / mu).
  scale = TD if variant == "code" else None
  for r in range(2):
    g = np.stack([_np_mean_estimate(tiny, x[i], r, i, J, b1, b2, mu, law, scale) for i in range(TN)])
    lx = np.stack([sum((TN - 1 if j == i else -1) * x[j] for j in range(TN)) for i in range(TN)])  # L x
    if variant == "paper":
      x, v = x - lr * (alpha * lx + beta * v + g), v + lr * beta * lx
    else:
      x = x - gamma_c * lx - lr * g
    np.testing.assert_allclose(np.asarray(states[r + 1].x), x, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(states[r + 1].v), v, rtol=1e-5, atol=1e-6)
    assert tp.ledger(stats[r], "queries") == TN * J * b1 * (b2 + 1)
    assert tp.ledger(stats[r], "bytes_up") == tp.ledger(stats[r], "bytes_down") == TN * TD * 4
    assert tp.ledger(stats[r], "participants") == TN
  sol = np.asarray(alg.solution(states[-1]))
  np.testing.assert_allclose(sol, x.mean(0), rtol=1e-5, atol=1e-6)   # the mean of the x_i


@pytest.mark.parametrize("variant, law", [("paper", "sphere"), ("code", "gaussian")])
def test_zone_s_two_iterations_match_numpy(tiny, variant, law):
  rho, mu, J, b1, b2 = 40.0, 0.5, 2, 3, 2
  alg = make_zone_s(tiny, ZONESConfig(rho=rho, smoothing=mu, local_steps=J, batch_size=b1,
                                      fd_directions=b2, variant=variant))   # direction: the variant's
  alpha = 1.0 / TN
  x0 = np.asarray(tp.X0[:TD], np.float64)
  lam = 0.3 * np.random.default_rng(3).normal(size=(TN, TD))
  states, stats = _run_from(alg, tiny, 2, lam=jnp.asarray(lam, jnp.float32))
  scale = TD if variant == "code" else None   # code: Gaussian directions times d / mu
  active = []
  for r in range(2):
    i = tp.participants(tiny, r, 1)[0]        # i_r uniform over the N clients
    active.append(i)
    g = _np_mean_estimate(tiny, x0, r, i, J, b1, b2, mu, law, scale)      # G at x0
    x = np.broadcast_to(x0, (TN, TD)).copy()
    x[i] = x0 - (lam[i] + g) / (alpha * rho)
    lam_prev = lam.copy()
    lam[i] = lam[i] + alpha * rho * (x[i] - x0)
    x0 = (rho * x + lam_prev).sum(0) / (TN * rho)                          # lambda^prev
    np.testing.assert_allclose(np.asarray(states[r + 1].x), x, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(states[r + 1].lam), lam, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(states[r + 1].x0), x0, rtol=1e-5, atol=1e-5)
    assert tp.ledger(stats[r], "queries") == J * b1 * (b2 + 1)
    assert tp.ledger(stats[r], "bytes_up") == tp.ledger(stats[r], "bytes_down") == TD * 4
    assert tp.ledger(stats[r], "participants") == 1
  assert np.max(np.abs(x0 - tp.X0[:TD])) > 1e-3   # the server point moved
