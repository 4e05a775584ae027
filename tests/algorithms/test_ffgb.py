"""FFGB / FFGB.C / FFGB.L mathematics (seed 002; specs/ffgb.md §4.3, §7).

Closed-form limits use the ``scaled`` oracle (h = gamma phi exactly) on tabular
functions over a grid shared by every client (semi-heterogeneous, §4.3).
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedsim import algorithms
from fedsim.algorithms import ffgb
from fedsim.core import rng, simulate
from fedsim.tasks.functional import cache_view, make_tabular_task, mcshane

N, M, MU = 8, 12, 0.1
ROOT = jax.random.key(3)


def _grid_task(shift=0.0, labels=None, n=N, m=M, seed=0):
  base = np.linspace(0.0, 1.0, m)
  x = np.stack([base + shift * i / n for i in range(n)])[..., None]
  y = (np.random.default_rng(seed).normal(size=(n, m, 1)) if labels is None else labels(x))
  return make_tabular_task(x, y), x, y


def _errors(alg, task, T, target):
  """Relative ||f^t - target||^2 per round, all rounds in one lax.scan."""
  k_rounds = rng.stream(ROOT, "rounds")

  @jax.jit
  def run(state, data):
    def body(s, r):
      s, _ = alg.round(s, rng.round_key(k_rounds, r), data)
      return s, jnp.sum((s.f_train - target) ** 2)
    return jax.lax.scan(body, state, jnp.arange(T))
  state, errs = run(alg.init(ROOT), task.data)
  return state, np.asarray(errs) / float(jnp.sum(target ** 2))


def _theory(name, task, **kw):
  hp = dict(weak_learner="scaled", gamma=1.0, mu=MU, local_steps=5, eta_schedule="theory",
            eta_cap=1.0 / (1.0 + MU))
  hp.update(kw)
  return algorithms.build(name, task, **hp)


def test_semi_heterogeneous_square_loss_converges_to_mean_over_one_plus_mu():
  # §7.1: f* = mean_i ybar_i / (1 + mu); error <= 1e-3 of the initial (f^0 = 0) by T = 2000.
  task, _, y = _grid_task()
  fstar = jnp.broadcast_to(y.mean(0) / (1 + MU), y.shape)
  _, errs = _errors(_theory("ffgb", task), task, 2000, fstar)
  assert errs[-1] <= 1e-3
  # Thm 3.1 rate O(1/(KT)) or faster: with square loss and an exact oracle the local
  # map is affine in ybar_i with client-independent coefficients, so there is no
  # client drift and the decay is geometric (steeper than any power law): check
  # the log-log slope over the first rounds with a small step cap is <= -1.
  _, slow = _errors(_theory("ffgb", task, eta_cap=0.01, local_steps=1), task, 400, fstar)
  ts = np.array([50, 100, 200, 400])
  slope = np.polyfit(np.log(ts), np.log(slow[ts - 1]), 1)[0]
  assert slope <= -1.0, slope


def test_no_residual_limit_is_biased_and_residual_error_falls_with_k():
  # §4.3: without the residual, gamma (f - ybar) + mu f = 0  =>  f = gamma ybar / (gamma + mu).
  task, _, y = _grid_task()
  ybar = y.mean(0)
  g = 0.5
  lim = jnp.broadcast_to(g * ybar / (g + MU), y.shape)
  for K in (1, 5):
    _, errs = _errors(_theory("ffgb_nores", task, gamma=g, local_steps=K), task, 3000, lim)
    assert math.sqrt(errs[-1]) <= 1e-3
  fstar = jnp.broadcast_to(ybar / (1 + MU), y.shape)
  finals = [_errors(_theory("ffgb", task, gamma=g, local_steps=K), task, 300, fstar)[1][-1]
            for K in (1, 2, 5, 10, 20)]
  assert all(a > b for a, b in zip(finals, finals[1:])), finals
  _, nores = _errors(_theory("ffgb_nores", task, gamma=g, local_steps=20), task, 300, fstar)
  assert finals[-1] < 0.1 * nores[-1]


@pytest.mark.parametrize("gamma", [0.3, 0.7])
def test_lemma_d_bounds_hold_and_ffgb_c_clips_are_inactive_on_support(gamma):
  # Lemmas D.1-D.2 (CE, G = sqrt 2): |Delta| <= (1-g)G/g, |h| <= (2-g)G/g, |g| <= 2G/(g mu).
  from fedsim.data import load_digits
  ds = load_digits()
  n = 6
  xs = np.asarray(ds.x_train[:n * 20]).reshape(n, 20, -1)
  ys = np.asarray(ds.y_train[:n * 20]).reshape(n, 20)
  from fedsim.core.types import Task
  base = make_tabular_task(xs, np.zeros((n, 20, 10)))
  data = {"clients": {"x": jnp.asarray(xs), "y": jnp.asarray(ys), "mask": jnp.ones((n, 20), bool)},
          "sizes": jnp.full((n,), 20, jnp.int32), "eval": {}}
  import dataclasses
  task = cache_view(dataclasses.replace(base, data=data, info={"loss": "ce", "num_outputs": 10}))
  G = math.sqrt(2)
  cfg = ffgb.FFGBConfig(weak_learner="scaled", gamma=gamma, mu=MU, local_steps=4, eta_schedule="theory")
  oracle = ffgb.build_oracle(task, cfg)
  client = jax.jit(ffgb.make_client_round(task, cfg, "ffgb_c", oracle))
  plain = jax.jit(ffgb.make_client_round(task, cfg, "ffgb", oracle))
  alg = ffgb.make_ffgb(task, cfg, "ffgb_c")
  state = alg.init(ROOT)
  rnd = jax.jit(alg.round)
  for t in range(6):
    etas = ffgb.step_sizes(cfg, "ffgb_c", t)
    assert float(jnp.max(etas * MU)) <= 1.0 + 1e-6
    for i in range(n):
      args = (jax.random.key(i), data["clients"]["x"][i], data["clients"]["y"][i],
              data["clients"]["mask"][i], jnp.int32(20), state.f_train[i], etas)
      _, aux = client(*args)
      _, aux_plain = plain(*args)
      tol = 1e-5
      assert float(jnp.max(jnp.abs(aux["delta"]))) <= (1 - gamma) * G / gamma + tol
      assert float(jnp.max(jnp.abs(aux["h"]))) <= (2 - gamma) * G / gamma + tol
      assert float(jnp.max(jnp.abs(aux["g"]))) <= 2 * G / (gamma * MU) + tol
      assert float(jnp.max(aux["clip_change"])) == 0.0
      np.testing.assert_array_equal(np.asarray(aux["g"]), np.asarray(aux_plain["g"]))
    state, _ = rnd(state, rng.round_key(rng.stream(ROOT, "rounds"), t), task.data)


def test_ffgb_l_sign_fix_one_shot_and_interpolation():
  task, x, y = _grid_task(labels=lambda x: np.sin(3 * x) + 0.1 * np.arange(N)[:, None, None])
  fstar = jnp.broadcast_to(y.mean(0), y.shape)  # problem (14), shared points: f* = mean_i y_i
  hp = dict(weak_learner="scaled", gamma=1.0, local_steps=3, eta_schedule="theory")
  s_rounds, errs = _errors(algorithms.build("ffgb_l", task, **hp), task, 400, fstar)
  assert errs[-1] < 1e-3
  _, errs_printed = _errors(algorithms.build("ffgb_l", task, ffgb_l_query="printed", **hp), task, 400, fstar)
  assert errs_printed[-1] > 1.0  # Alg. 4 as printed (Delta - u) runs away from f*
  # Remark 3.1: one-shot (learners of round 0 reused) == T-round mode, deterministic oracle.
  s_one, _ = _errors(algorithms.build("ffgb_l", task, one_shot=True, **hp), task, 400, fstar)
  np.testing.assert_allclose(np.asarray(s_one.f_train), np.asarray(s_rounds.f_train), rtol=1e-5, atol=1e-6)
  # eq. (17): u_i interpolates L-Lipschitz data.
  xi = jnp.asarray(x[0]); yi = jnp.asarray(np.sin(3 * x[0]))
  np.testing.assert_allclose(np.asarray(mcshane(xi, yi, 3.0, xi)), np.asarray(yi), atol=1e-6)


def test_ffgb_l_radius_grows_with_feature_shift_and_is_zero_without():
  hp = dict(weak_learner="scaled", gamma=1.0, local_steps=3, eta_schedule="theory")
  losses = []
  # Shifts below half the grid spacing, so the 1-NN extension keeps the same neighbours.
  for shift in (0.0, 0.01, 0.02, 0.04):
    task, x, y = _grid_task(shift=shift, labels=lambda x: np.sin(3 * x))
    _, rec = simulate(algorithms.build("ffgb_l", task, **hp), task, 300, 300, ROOT)
    losses.append(rec[-1]["objective"])
  assert losses[0] < 1e-6
  assert all(a <= b + 1e-7 for a, b in zip(losses, losses[1:])), losses


def test_partial_participation_full_equals_and_subsets_are_unbiased():
  task, _, y = _grid_task()
  hp = dict(weak_learner="scaled", gamma=0.5, mu=MU, local_steps=3, eta_schedule="theory",
            eta_cap=1 / (1 + MU))
  full = algorithms.build("ffgb", task, **hp)
  same = algorithms.build("ffgb", task, clients_per_round=N, **hp)
  k0 = rng.round_key(rng.stream(ROOT, "rounds"), 0)
  s0 = full.init(ROOT)
  s0 = s0._replace(f_train=jnp.asarray(y) * 0.3)
  a, _ = full.round(s0, k0, task.data)
  b, _ = same.round(s0, k0, task.data)
  np.testing.assert_allclose(np.asarray(a.f_train), np.asarray(b.f_train), rtol=1e-6, atol=1e-7)
  part = algorithms.build("ffgb", task, clients_per_round=3, **hp)
  draws = jax.jit(jax.vmap(lambda k: part.round(s0, k, task.data)[0].f_train))(
      jax.random.split(jax.random.key(11), 2000))
  mean, se = np.asarray(draws.mean(0)), np.asarray(draws.std(0)) / math.sqrt(2000)
  # The state is shared by every client's row, so compare where the spread is non-zero.
  assert np.all(np.abs(mean - np.asarray(a.f_train)) <= 3 * se + 1e-5)


def test_learners_written_per_round_reload_to_the_test_cache(tmp_path):
  rs = np.random.default_rng(1)
  x = rs.uniform(size=(4, 10, 2)); y = np.sin(x.sum(-1, keepdims=True) * 3)
  xt = rs.uniform(size=(7, 2))
  task = make_tabular_task(x, y, x_test=xt, y_test=np.zeros((7, 1)))
  for variant in ("ffgb", "ffgb_c"):
    cfg = ffgb.FFGBConfig(weak_learner="rf_ridge", rf_features=32, local_steps=2, eta0=1.0,
                          mu=0.5, gamma=0.9, store_learners=2)
    alg = ffgb.make_ffgb(task, cfg, variant)
    out = tmp_path / variant
    alg = ffgb.attach_learner_writer(alg, str(out), cfg, variant)
    state, _ = simulate(alg, task, 5, 2, ROOT)
    assert len(list(out.glob("round_*.npz"))) == 5
    pred = ffgb.predict_saved(str(out), task, cfg, jnp.asarray(xt, jnp.float32))
    np.testing.assert_allclose(np.asarray(pred), np.asarray(alg.solution(state)["test"]),
                               rtol=1e-4, atol=1e-5)


def test_step_size_schedules():
  cfg = ffgb.FFGBConfig(eta0=20.0, local_steps=2)
  np.testing.assert_allclose(ffgb.step_sizes(cfg, "ffgb", 3), 20.0 / (6 + np.array([1, 2]) + 1))
  code = cfg.replace(eta_schedule="code", eta_decay_p=0.5) if hasattr(cfg, "replace") else \
      ffgb.FFGBConfig(eta0=20.0, local_steps=2, eta_schedule="code", eta_decay_p=0.5)
  np.testing.assert_allclose(ffgb.step_sizes(code, "ffgb", 3), 20.0 / (4 * 2 + np.array([0, 1]) + 1) ** 0.5,
                             rtol=1e-6)
  th = ffgb.FFGBConfig(mu=0.5, local_steps=2, eta_schedule="theory")
  # 4/(mu (k+1)) = 4, 2.67 for k = 1, 2, both clamped to mu*eta <= 1 (specs §2.3 pitfall).
  np.testing.assert_allclose(ffgb.step_sizes(th, "ffgb_c", 0), [2.0, 2.0], rtol=1e-6)
  rho, w = ffgb.combine_weights(jnp.array([0.3, 0.2]), 0.5)
  np.testing.assert_allclose([rho, *w], [0.85 * 0.9, -0.3 * 0.9, -0.2], rtol=1e-6)
