"""FedLRGD (seed 004 Alg. 1), FedAve (App. D) and exact GD pinned against plain-NumPy
references on tiny cases (3 clients, p = 2 features, r = 3 server samples padded to R = 5,
a few steps); plus the precision contract of fedsim/algorithms/fedlrgd.py.

Every reference below writes the paper's equations out in float64 NumPy, with the
closed-form per-sample gradient of App. A's soft-label logistic loss (eq. (66)):

    g(x, y; theta) = (sigma(theta^T x) - y) x + mu theta.

The code under test supplies only its inputs: the data, theta^(0), the anchors it drew, and
the keys its random draws come from.

* Alg. 1: G^(i)[j,k] = g_i(x^(0,j); vartheta^(k)) (34); (G^(i))^T v^(i,c) = h^(i,c) (35);
  W = 1 + sum_c v (line 10); theta <- theta - (1/L1) (1/n) sum_k g(x^(0,k); theta) W[:, k]
  (41)-(42), n = m s + r; Definition 1's ledger r^2 + r s + r S + phi m r; bytes.
* FedAve (App. D / FedPAQ Alg. 1): tau m clients without replacement, b local SGD steps
  with eta_t = 4 / (mu ((t + T0) b + 1)), theta + (1/(tau m)) sum Delta; QSGD.
* Exact GD: theta - (1/L1) grad F over the pooled n = m s + r samples (eq. (3)).
* Precision: at r = 16 (cond(G) ~ 1e9, where a float32 solve is off by O(1)) the weights
  of a float32 run match the float64 NumPy reference; ``--x64`` (here the scoped
  ``jax.enable_x64``) leaves every random draw unchanged.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedsim import algorithms
from fedsim.algorithms import fedave as fa
from fedsim.algorithms import fedlrgd as fl
from fedsim.core import engine, rng
from fedsim.core.sampling import sample_clients
from fedsim.tasks.logistic_soft import LOSSES, make_smooth_erm_task

MU = 0.1


def make(r=3, R=5, m=3, s=4, p=2, seed=0, **kw):
  return make_smooth_erm_task("logistic_soft", num_clients=m, samples_per_client=s, num_features=p,
                              server_samples=r, max_rank=R, mu=MU, heterogeneity=0.5, seed=seed, **kw)


def host(task):
  """The task's data as float64 numpy (exact upcast of whatever precision it has)."""
  def f(a):
    return np.asarray(a).astype(np.float64) if np.asarray(a).dtype.kind == "f" else np.asarray(a)
  return jax.tree_util.tree_map(f, task.data)


def g_np(theta, x, y):
  """App. A: (sigma(theta^T x) - y) x + mu theta, float64; x (..., p) -> (..., p)."""
  z = x @ theta
  return (1.0 / (1.0 + np.exp(-z)) - y)[..., None] * x + MU * theta


def alg1_weights_np(d, anchors, r):
  """Alg. 1 lines 2-10, written out: W (p, r) = 1 + sum_c v^(i,c), (G^(i))^T v^(i,c) = h^(i,c)."""
  xs, ys = d["server"]["x"][:r], d["server"]["y"][:r]
  xc, yc = d["clients"]["x"], d["clients"]["y"]
  m, s, p = xc.shape
  W = np.zeros((p, r))
  for i in range(p):
    G = np.array([[g_np(anchors[k], xs[j], ys[j])[i] for k in range(r)] for j in range(r)])   # (34)
    v_sum = np.zeros(r)
    for c in range(m):
      h = np.array([sum(g_np(anchors[k], xc[c, j], yc[c, j])[i] for j in range(s))
                    for k in range(r)])                                                    # line 6
      v_sum += np.linalg.solve(G.T, h)                                                     # (35)
    W[i] = 1.0 + v_sum                                                                     # line 10
  return W


def alg1_step_np(theta, d, W, r, n, step):
  """Eqs. (41)-(42): theta - step * (1/n) sum_k g(x^(0,k); theta) * W[:, k]."""
  xs, ys = d["server"]["x"][:r], d["server"]["y"][:r]
  ghat = sum(g_np(theta, xs[k], ys[k]) * W[:, k] for k in range(r)) / n
  return theta - step * ghat


# ------------------------------------------------------------------------------------------
# FedLRGD, Algorithm 1.
# ------------------------------------------------------------------------------------------

def test_fedlrgd_alg1_weights_steps_and_ledger():
  r, R, m, s, p, S, phi = 3, 5, 3, 4, 2, 3, 7.0
  with jax.enable_x64(True):
    task = make(r=r, R=R, m=m, s=s, p=p)
    alg = algorithms.build("fedlrgd", task, phi=phi)
    state = engine.init_state(alg, jax.random.key(3))
    round_fn = jax.jit(alg.round)
    d = host(task)
    A = np.asarray(state.anchors)[:r]
    W = alg1_weights_np(d, A, r)
    np.testing.assert_allclose(np.asarray(state.weights)[:, :r], W, rtol=1e-10, atol=1e-12)
    assert np.all(np.asarray(state.weights)[:, r:] == 0)            # padded anchors: v_pad = 0
    n, L1 = m * s + r, p / 2 + MU                                   # n = m s + r; L1 of eq. (68)
    assert task.info["L1"] == L1
    theta = np.asarray(state.theta)
    for t in range(1, S + 1):
      state, stats = round_fn(state, jax.random.key(t), task.data)
      theta = alg1_step_np(theta, d, W, r, n, 1.0 / L1)
      np.testing.assert_allclose(state.theta, theta, rtol=1e-12, atol=1e-14)
      first = t == 1
      # RoundStats: the set-up's r^2 + m r s gradients, m uploads of p reals in each of the
      # r epochs, the broadcast of the anchors (r p) and the p r x r factors, then r a step.
      assert int(stats.queries) == (r * r + m * r * s if first else 0) + r
      assert int(stats.bytes_up) == (m * r * p * 4 if first else 0)
      assert int(stats.bytes_down) == (m * (r * p + p * r * r) * 4 if first else 0)
      assert int(stats.participants) == (m * r if first else 0)
      # Definition 1: b_1 = r^2, b_2 = r s, b = r per GD step; r communication epochs of m uploads.
      led = jax.device_get(state.ledger)
      assert (int(led.compute), int(led.uploads)) == (r * r + r * s + r * t, m * r)
      assert (int(led.epochs), int(led.comm_epochs)) == (r + 2, r)
    assert fl.oracle_complexity(state.ledger, phi) == r * r + r * s + r * S + phi * m * r
    theta0 = np.asarray(engine.init_state(alg, jax.random.key(3)).theta)
    assert float(np.linalg.norm(theta - theta0)) > 1e-3                  # the iterates moved


def test_fedlrgd_step_size_and_projection():
  r, m, s = 3, 3, 4
  with jax.enable_x64(True):
    task = make(r=r, R=r, m=m, s=s)
    d = host(task)
    for hp, clip in [(dict(step_size=0.37), None), (dict(project_box=0.05), 0.05)]:
      alg = algorithms.build("fedlrgd", task, **hp)
      st = engine.init_state(alg, jax.random.key(5))
      W = alg1_weights_np(d, np.asarray(st.anchors), r)
      new, _ = jax.jit(alg.round)(st, jax.random.key(0), task.data)
      ref = alg1_step_np(np.asarray(st.theta), d, W, r, m * s + r, hp.get("step_size", 1.0 / task.info["L1"]))
      if clip is not None:
        assert np.abs(ref).max() > clip                                   # the box does clip
        ref = np.clip(ref, -clip, clip)
      np.testing.assert_allclose(new.theta, ref, rtol=1e-12, atol=1e-14)


# ------------------------------------------------------------------------------------------
# Precision: the weight solve is float64 whatever --x64 says.
# ------------------------------------------------------------------------------------------

def test_float32_init_alone_leaves_nan_weights_that_setup_fills():
  """In float32 the set-up is the host-side ``setup`` (no JAX inside a callback, issue 35): ``init``
  alone gives NaN placeholders, so a caller that forgets it diverges visibly at the first step."""
  task = make(r=3, R=4, m=3, s=4, seed=0)
  alg = algorithms.build("fedlrgd", task)
  bare = jax.jit(alg.init)(*rng.init_keys(jax.random.key(0)))
  assert np.isnan(np.asarray(bare.weights)).all() and np.isnan(np.asarray(bare.cond)).all()
  full = engine.init_state(alg, jax.random.key(0))
  assert np.isfinite(np.asarray(full.weights)).all()
  np.testing.assert_array_equal(full.anchors, bare.anchors)
  np.testing.assert_array_equal(full.theta, bare.theta)


def test_float32_run_gets_float64_weights_at_ill_conditioned_rank():
  r, m, s = 16, 6, 5
  task = make(r=r, R=r, m=m, s=s, seed=0)                      # x64 off: float32 data
  assert task.data["server"]["x"].dtype == jnp.float32
  alg = algorithms.build("fedlrgd", task)
  state = engine.init_state(alg, jax.random.key(0))
  assert state.weights.dtype == jnp.float32
  d = host(task)                                               # the float32 data, upcast exactly
  A = np.asarray(state.anchors).astype(np.float64)
  W = alg1_weights_np(d, A, r)
  scale = np.abs(W).max()
  # The run's weights are the float64 solution rounded to float32.
  np.testing.assert_allclose(np.asarray(state.weights, np.float64), W, rtol=0, atol=1e-6 * scale)
  assert float(jnp.max(state.cond)) > 1e8
  # At this rank a float32 solve of the same system is off by O(1): what the float64 set-up avoids.
  grad32 = jax.grad(lambda th, ex: LOSSES["logistic_soft"](th, ex, MU))
  W32 = np.asarray(jax.jit(lambda dd, a: fl.setup(grad32, dd, a).weights)(task.data, state.anchors))
  assert np.abs(W32.astype(np.float64) - W).max() > 1e-2 * scale
  # One float32 GD step with those weights follows the float64 reference step.
  new, _ = jax.jit(alg.round)(state, jax.random.key(0), task.data)
  ref = alg1_step_np(np.asarray(state.theta, np.float64), d, W, r, m * s + r, 1.0 / task.info["L1"])
  np.testing.assert_allclose(np.asarray(new.theta, np.float64), ref, rtol=0, atol=1e-5)


def test_x64_run_weights_match_reference():
  r, m, s = 16, 6, 5
  with jax.enable_x64(True):
    task = make(r=r, R=r, m=m, s=s, seed=0)
    state = engine.init_state(algorithms.build("fedlrgd", task), jax.random.key(0))
    W = alg1_weights_np(host(task), np.asarray(state.anchors), r)
    np.testing.assert_allclose(state.weights, W, rtol=0, atol=1e-6 * np.abs(W).max())


def _draws():
  """Everything random in a small FedLRGD / FedAve experiment, in the current precision."""
  task = make(r=3, R=4, m=4, s=5, seed=2)
  out = {"x": np.asarray(task.data["clients"]["x"]), "y": np.asarray(task.data["server"]["y"])}
  init_keys = rng.init_keys(jax.random.key(7))
  lr = algorithms.build("fedlrgd", task)
  st = engine.init_state(lr, jax.random.key(7))
  out["theta0"], out["anchors_uniform"] = np.asarray(st.theta), np.asarray(st.anchors)
  out["anchors"] = np.asarray(fl.draw_anchors(jax.random.key(3), st.theta, 4, "gaussian", 0.5))
  fave = algorithms.build("fedave", task, clients_per_round=2, local_steps=2, batch_size=3,
                          lr_schedule="constant", lr=0.5, quantizer="qsgd", qsgd_levels=2)
  sf = jax.jit(fave.init)(*init_keys)
  out["fedave_theta0"] = np.asarray(sf.theta)
  round_lr, round_fa = jax.jit(lr.round), jax.jit(fave.round)
  keys = [jax.random.key(100 + t) for t in range(4)]
  for key in keys:
    st, _ = round_lr(st, key, task.data)
    sf, _ = round_fa(sf, key, task.data)
  client = jax.tree_util.tree_map(lambda a: a[1], task.data["clients"])
  draw = jax.jit(jax.vmap(lambda k: (sample_clients(rng.round_subkeys(k)[0], 4, 2),
                                     task.sample_batch(client, k, 3)["y"])))
  picks, batch_y = draw(jax.random.split(jax.random.key(11), 6))
  out.update(fedlrgd_theta=np.asarray(st.theta), fedave_theta=np.asarray(sf.theta),
             picks=np.sort(np.asarray(picks), axis=1), batch_y=np.asarray(batch_y))
  return out


def test_x64_leaves_the_random_draws_unchanged():
  a = _draws()
  with jax.enable_x64(True):
    b = _draws()
  assert a["theta0"].dtype == np.float32 and b["theta0"].dtype == np.float64
  for k in ("x", "y", "theta0", "anchors", "anchors_uniform", "fedave_theta0", "batch_y"):
    np.testing.assert_array_equal(b[k].astype(np.float32), a[k], err_msg=k)   # same draws, rounded once
  for k in ("theta0", "anchors_uniform", "fedave_theta0"):                    # drawn in float32
    np.testing.assert_array_equal(b[k], a[k].astype(np.float64), err_msg=k)
  np.testing.assert_array_equal(b["picks"], a["picks"])                       # the same clients
  assert len({tuple(p) for p in a["picks"]}) > 1
  # Four rounds later the two precisions are still the same experiment.
  np.testing.assert_allclose(b["fedlrgd_theta"], a["fedlrgd_theta"], rtol=0, atol=1e-5)
  np.testing.assert_allclose(b["fedave_theta"], a["fedave_theta"], rtol=0, atol=1e-5)


# ------------------------------------------------------------------------------------------
# FedAve (App. D, FedPAQ Alg. 1) and QSGD.
# ------------------------------------------------------------------------------------------

def _fedave_round_np(theta, t, key, d, m, M, b, bs, eta_of):
  """One FedAve epoch in NumPy; the random choices are re-derived from the round key."""
  k_sample, k_clients, _ = jax.random.split(key, 3)
  u = np.asarray(jax.random.uniform(k_sample, (m,), jnp.float32))
  chosen = np.argsort(-u)[:M]                                       # tau m clients, no replacement
  eta = eta_of(t)
  deltas = []
  for c in chosen:
    ck = jax.random.fold_in(k_clients, int(c))
    x = theta.copy()
    s = d["clients"]["x"].shape[1]
    for ell in range(b):                                            # b local SGD steps
      ub = np.asarray(jax.random.uniform(jax.random.fold_in(ck, ell), (bs,), jnp.float32))
      idx = np.minimum(np.floor(ub * np.float32(s)).astype(int), s - 1)
      g = g_np(x, d["clients"]["x"][c, idx], d["clients"]["y"][c, idx]).mean(0)
      x = x - eta * g
    deltas.append(x - theta)                                        # Delta^c_t (Q = identity)
  return theta + sum(deltas) / M, set(chosen.tolist())              # 1/(tau m) sum over S_t


@pytest.mark.parametrize("schedule", ["fedpaq", "constant"])
def test_fedave_partial_participation_local_steps_and_schedule(schedule):
  m, M, s, b, bs, T = 4, 2, 5, 3, 2, 3
  with jax.enable_x64(True):
    task = make(r=2, R=2, m=m, s=s, seed=1)
    hp = dict(clients_per_round=M, local_steps=b, batch_size=bs, lr_schedule=schedule, lr=0.7)
    alg = algorithms.build("fedave", task, phi=3.0, **hp)
    kappa = task.info["kappa"]
    T0 = math.ceil(4 * kappa)
    eta_of = (lambda t: 4.0 / (MU * ((t + T0) * b + 1.0))) if schedule == "fedpaq" else (lambda t: 0.7)
    state = engine.init_state(alg, jax.random.key(4))
    round_fn = jax.jit(alg.round)
    d = host(task)
    theta = np.asarray(state.theta)
    seen = set()
    for t in range(T):
      key = jax.random.key(50 + t)
      state, stats = round_fn(state, key, task.data)
      theta, chosen = _fedave_round_np(theta, t, key, d, m, M, b, bs, eta_of)
      seen |= chosen
      np.testing.assert_allclose(state.theta, theta, rtol=1e-12, atol=1e-14)
      assert int(stats.queries) == M * b * bs and int(stats.participants) == M
      assert int(stats.bytes_up) == M * 2 * 4 and int(stats.bytes_down) == M * 2 * 4
    assert len(seen) > M                                            # different clients over rounds
    led = jax.device_get(state.ledger)
    assert (int(led.compute), int(led.uploads), int(led.epochs), int(led.comm_epochs)) == (T * b * bs, T * M, T, T)
    assert fl.oracle_complexity(state.ledger, 3.0) == T * (b * bs + 3.0 * M)


def test_qsgd_formula():
  x = jnp.array([0.3, -1.2, 0.0, 2.5, -0.05], jnp.float32)
  key, s = jax.random.key(9), 3
  q = np.asarray(fa.qsgd(x, key, s), np.float64)
  xn = np.asarray(x, np.float64)
  norm = np.linalg.norm(xn)
  a = s * np.abs(xn) / norm
  u = np.asarray(jax.random.uniform(key, x.shape, jnp.float32), np.float64)
  xi = (np.floor(a) + (u < a - np.floor(a))) / s
  np.testing.assert_allclose(q, norm * np.sign(xn) * xi, rtol=1e-6)
  assert np.all(fa.qsgd(jnp.zeros(3), key, s) == 0)


# ------------------------------------------------------------------------------------------
# Exact GD on the pooled data.
# ------------------------------------------------------------------------------------------

def test_gd_pooled_steps_and_ledger():
  r, R, m, s, p, T = 2, 4, 3, 4, 2, 2
  with jax.enable_x64(True):
    task = make(r=r, R=R, m=m, s=s, p=p, seed=3)
    alg = algorithms.build("gd", task, phi=5.0)
    state = engine.init_state(alg, jax.random.key(2))
    d = host(task)
    x = np.concatenate([d["server"]["x"][:r], d["clients"]["x"].reshape(-1, p)])   # eq. (3): n = m s + r
    y = np.concatenate([d["server"]["y"][:r], d["clients"]["y"].reshape(-1)])
    theta = np.asarray(state.theta)
    for t in range(T):
      state, stats = jax.jit(alg.round)(state, jax.random.key(t), task.data)
      theta = theta - g_np(theta, x, y).mean(0) / (p / 2 + MU)
      np.testing.assert_allclose(state.theta, theta, rtol=1e-12, atol=1e-14)
      assert int(stats.queries) == m * s + r and int(stats.participants) == m
      assert int(stats.bytes_up) == m * p * 4
    led = jax.device_get(state.ledger)
    assert (int(led.compute), int(led.uploads), int(led.epochs)) == (T * s, T * m, T)
    assert fl.oracle_complexity(state.ledger, 5.0) == T * (s + 5.0 * m)
