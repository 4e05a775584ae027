"""Weak-learning oracles (seed 002 App. B.3; specs/ffgb.md §2.5, §4.2, §7.10)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedsim.models.weak_learners import gamma_hat, make_oracle

RS = np.random.default_rng(0)
X = jnp.asarray(RS.uniform(size=(40, 3)), jnp.float32)
PHI = jnp.asarray(np.stack([np.sin(3 * X[:, 0]), X[:, 1] * X[:, 2]], -1), jnp.float32)
MASK = jnp.arange(40) < 30  # 10 padded rows


def test_scaled_oracle_is_exactly_gamma_phi_on_support():
  o = make_oracle("scaled", num_outputs=2, feature_shape=(3,), gamma=0.4)
  p = o.fit(jax.random.key(0), X, PHI, MASK, jnp.int32(30))
  h = o.apply(p, X[:30])
  np.testing.assert_array_equal(np.asarray(h), np.asarray(0.4 * PHI[:30]))
  np.testing.assert_allclose(float(gamma_hat(h, PHI[:30], MASK[:30])), 0.4, rtol=1e-6)


def test_rf_ridge_fits_and_ignores_padding():
  o = make_oracle("rf_ridge", num_outputs=2, feature_shape=(3,), rf_features=128, ridge=1e-6)
  garbage = PHI.at[30:].set(1e3)
  p = o.fit(jax.random.key(0), X, garbage, MASK, jnp.int32(30))
  p2 = o.fit(jax.random.key(0), X, PHI, MASK, jnp.int32(30))
  np.testing.assert_allclose(np.asarray(p["beta"]), np.asarray(p2["beta"]), rtol=1e-4, atol=1e-5)
  assert float(gamma_hat(o.apply(p, X), PHI, MASK)) > 0.9


def test_mlp_oracle_vmapped_over_clients_has_positive_gamma_hat():
  o = make_oracle("mlp", num_outputs=2, feature_shape=(3,), steps=200, lr=0.005, batch=32)
  keys = jax.random.split(jax.random.key(1), 3)
  fit = jax.jit(jax.vmap(o.fit, in_axes=(0, None, None, None, None)))
  ps = fit(keys, X, PHI, MASK, jnp.int32(30))
  hs = jax.vmap(o.apply, (0, None))(ps, X)
  g = jax.vmap(gamma_hat, (0, None, None))(hs, PHI, MASK)
  assert np.all(np.asarray(g) > 0.0), g
  assert not np.allclose(np.asarray(hs[0]), np.asarray(hs[1]))  # fresh init per call


def test_fedavg_mlp_task_is_the_ffgb_weak_learner_network():
  # specs/ffgb.md §3.1: "The FedAvg model is the same network as the weak learner"
  # (App. B.1 MLP d -> 32 -> 32 -> C, leaky ReLU 0.01). --task=mlp --hidden_width=32
  # --hidden_layers=2 --activation=leaky_relu builds it.
  import optax

  from fedsim.algorithms import ffgb
  from fedsim.tasks import make_task
  task = make_task("mlp", num_clients=4, dataset="digits", partition="homo_ratio", homo_ratio=0.3,
                   hidden_width=32, hidden_layers=2, activation="leaky_relu")
  cfg = ffgb.FFGBConfig(weak_learner="mlp", oracle_steps=1)
  oracle = ffgb.build_oracle(task, cfg)
  cd = task.client_data
  theta = oracle.fit(jax.random.key(0), cd["x"][0], jnp.zeros(cd["x"].shape[1:2] + (10,)),
                     cd["mask"][0], task.client_sizes[0])
  params = task.init_params(jax.random.key(1))
  def shapes(t):
    return jax.tree_util.tree_map(lambda a: a.shape, t)
  assert shapes(theta) == shapes(params)
  assert [v.shape for v in jax.tree_util.tree_leaves(params)] == \
      [(32,), (64, 32), (32,), (32, 32), (10,), (32, 10)]
  # Same activation: the weak learner's forward pass with FedAvg's parameters gives
  # FedAvg's loss, and leaky ReLU differs from ReLU on these parameters.
  batch = {"x": cd["x"][0], "y": cd["y"][0], "mask": cd["mask"][0]}
  logits = oracle.apply(params, batch["x"])
  ce = optax.softmax_cross_entropy_with_integer_labels(logits, batch["y"])
  expected = jnp.sum(jnp.where(batch["mask"], ce, 0.0)) / jnp.sum(batch["mask"])
  np.testing.assert_allclose(float(task.loss(params, batch)), float(expected), rtol=1e-6)
  relu_task = make_task("mlp", num_clients=4, dataset="digits", partition="homo_ratio",
                        homo_ratio=0.3, hidden_width=32, hidden_layers=2, activation="relu")
  assert abs(float(relu_task.loss(params, batch)) - float(expected)) > 1e-6


@pytest.mark.slow  # long; .ci/run runs it (pytest -m slow)
def test_cnn_oracle_trains_and_vmaps_over_clients():
  # App. B.1 CIFAR weak learner (tutorial CNN, FC 32-32, leaky ReLU), trained like the mlp
  # oracle (App. B.3): Adam from a fresh init; vmapped over clients as in FFGB's round.
  from fedsim.models.weak_learners import WeakLearnerCNN
  rs = np.random.default_rng(2)
  x = jnp.asarray(rs.uniform(size=(3, 24, 8, 8)), jnp.float32)  # 3 clients of 8x8 images
  phi = jnp.stack([x[..., :4, :].mean((-1, -2)), x[..., 4:, :].mean((-1, -2))], -1) * 4.0
  mask = jnp.arange(24) < 20
  n = jnp.full((3,), 20, jnp.int32)
  keys = jax.random.split(jax.random.key(5), 3)
  o = make_oracle("cnn", num_outputs=2, feature_shape=(8, 8), steps=60, lr=0.01, batch=16)
  o0 = make_oracle("cnn", num_outputs=2, feature_shape=(8, 8), steps=0)
  masks = jnp.broadcast_to(mask, (3, 24))

  @jax.jit
  def run(keys, x, phi):
    ps = jax.vmap(o.fit)(keys, x, phi, masks, n)
    p0 = jax.vmap(o0.fit)(keys, x, phi, masks, n)  # 0 Adam steps: the fresh init
    h, h0 = jax.vmap(o.apply)(ps, x), jax.vmap(o0.apply)(p0, x)
    return h, h0, o.apply(o.fit(keys[1], x[1], phi[1], mask, n[1]), x[1])  # one client alone
  h, h0, h1 = run(keys, x, phi)
  def err(hh):
    return np.asarray(jnp.sum(jnp.where(masks[..., None], (hh - phi) ** 2, 0.0), (1, 2)))
  assert np.all(err(h) < 0.25 * err(h0)), (err(h0), err(h))  # the fit loss decreases
  g = jax.vmap(gamma_hat)(h, phi, masks)
  assert np.all(np.asarray(g) > 0.0), g
  # vmapped fit == the same client's fit alone (same key): the vmap only batches.
  np.testing.assert_allclose(np.asarray(h1), np.asarray(h[1]), rtol=1e-3, atol=1e-4)
  # The paper's size on 32x32x3 CIFAR images ('VALID' padding): 17,090 parameters (specs §3.1).
  v = WeakLearnerCNN(10).init(jax.random.key(0), jnp.zeros((1, 32, 32, 3)))
  assert sum(a.size for a in jax.tree_util.tree_leaves(v)) == 17090


# ----------------------------------------------------------------- WO^inf / WO^lip (App. B.3)
def _power_mean_np(r, p):
  """NumPy reference of the smooth max of eq. (24): ((1/n) sum_j r_j^p)^{1/p}."""
  r = np.asarray(r, np.float64)
  return np.mean(r ** p) ** (1.0 / p)


def test_wo_inf_loss_is_the_power_mean_and_weighs_the_hardest_points():
  from fedsim.models.weak_learners import wo_inf_loss
  r = np.array([0.1, 2.0, 0.5, 7.0, 3.0, 123.0], np.float32)  # last row is padding
  mask = np.array([True] * 5 + [False])
  for p in (1.0, 3.0, 8.0):
    got = float(wo_inf_loss(jnp.asarray(r), jnp.asarray(mask), p))
    np.testing.assert_allclose(got, _power_mean_np(r[:5], p), rtol=1e-5)
  # p = 1 is eq. 23's mean; n^{-1/p} max <= loss <= max, and the loss -> max as p grows.
  np.testing.assert_allclose(float(wo_inf_loss(jnp.asarray(r), jnp.asarray(mask), 1.0)), r[:5].mean(), rtol=1e-6)
  vals = [float(wo_inf_loss(jnp.asarray(r), jnp.asarray(mask), p)) for p in (2.0, 8.0, 32.0)]
  assert all(5 ** (-1 / p) * 7.0 - 1e-5 <= v <= 7.0 + 1e-5 for v, p in zip(vals, (2.0, 8.0, 32.0)))
  assert vals[0] < vals[1] < vals[2]
  # d loss / d r_j = (1/n) r_j^{p-1} loss^{1-p}: weight grows as r_j^{p-1} (hardest point first).
  p = 8.0
  g = np.asarray(jax.grad(lambda rr: wo_inf_loss(rr, jnp.asarray(mask), p))(jnp.asarray(r)))
  lp = _power_mean_np(r[:5], p)
  ref = (1 / 5) * r[:5].astype(np.float64) ** (p - 1) * lp ** (1 - p)
  np.testing.assert_allclose(g[:5], ref, rtol=1e-4, atol=1e-12)
  assert g[5] == 0.0 and int(np.argmax(g)) == 3
  assert g[3] > 0.9 * g.sum()  # the hardest point carries (nearly) all the weight at p = 8
  # All residuals zero: loss 0 with a finite (zero) gradient.
  z = jax.grad(lambda rr: wo_inf_loss(rr, jnp.asarray(mask), p))(jnp.zeros(6))
  assert float(wo_inf_loss(jnp.zeros(6), jnp.asarray(mask), p)) == 0.0 and np.all(np.asarray(z) == 0)


def test_wo_inf_oracle_fits_the_smooth_minimax_not_the_mean():
  # A constant learner (linear family on x = 0) fit to phi = (0, 0, 0, 10) on 4 real rows.
  # L2 (eq. 23): c = 2.5, worst error 7.5. Power mean p (eq. 24 smoothed): minimise
  # (3 c^{2p} + (10 - c)^{2p}) => 3 c^{2p-1} = (10 - c)^{2p-1}, c = 10 a/(1 + a), a = 3^{-1/(2p-1)}.
  x = jnp.zeros((5, 1))
  phi = jnp.array([[0.0], [0.0], [0.0], [10.0], [-50.0]])  # last row padding
  mask = jnp.arange(5) < 4
  o = make_oracle("wo_inf", num_outputs=1, feature_shape=(1,), family="linear", steps=3000, lr=0.01,
                  wo_p=8.0)
  h = np.asarray(o.apply(o.fit(jax.random.key(0), x, phi, mask, jnp.int32(4)), x))[:4, 0]
  a = 3.0 ** (-1.0 / 15.0)
  np.testing.assert_allclose(h, 10 * a / (1 + a), atol=0.03)
  assert np.max(np.abs(h - np.array([0, 0, 0, 10]))) < 5.3 < 7.5
  o1 = make_oracle("wo_inf", num_outputs=1, feature_shape=(1,), family="linear", steps=3000, lr=0.01,
                   wo_p=1.0)
  h1 = np.asarray(o1.apply(o1.fit(jax.random.key(0), x, phi, mask, jnp.int32(4)), x))[:4, 0]
  np.testing.assert_allclose(h1, 2.5, atol=0.03)  # p = 1: the L2 fit (eq. 23)


def test_wo_lip_sobolev_term_fits_the_query_gradient():
  # Every real point at x = 0 with phi = 1: the values fix b = 1 only; eq. 25's gradient term
  # with grad phi = (3, -2) at the Monte-Carlo points fixes W = (3, -2)^T (both terms 0).
  x = jnp.zeros((6, 2))
  phi = jnp.ones((6, 1))
  mask = jnp.arange(6) < 5
  z = jnp.asarray(RS.uniform(size=(7, 2)), jnp.float32)
  dphi = jnp.broadcast_to(jnp.array([[3.0, -2.0]]), (7, 1, 2))
  kw = dict(num_outputs=1, feature_shape=(2,), family="linear", steps=2000, lr=0.01)
  o = make_oracle("wo_lip", sobolev_weight=1.0, **kw)
  assert o.sobolev
  p = o.fit(jax.random.key(0), x, phi, mask, jnp.int32(5), z, dphi)
  np.testing.assert_allclose(np.asarray(p["train"]["w"])[:, 0], [3.0, -2.0], atol=0.03)
  np.testing.assert_allclose(np.asarray(p["train"]["b"]), [1.0], atol=0.03)
  p0 = make_oracle("wo_lip", sobolev_weight=0.0, **kw).fit(jax.random.key(0), x, phi, mask,
                                                          jnp.int32(5), z, dphi)
  np.testing.assert_allclose(np.asarray(p0["train"]["w"]), 0.0, atol=1e-6)  # no gradient term


def test_input_jacobian_and_mcshane_grad_match_finite_differences():
  from fedsim.models.weak_learners import input_jacobian, learner_family
  from fedsim.tasks.functional import mcshane_grad
  rs = np.random.default_rng(4)
  # MLP learner: the Jacobian (S, C, d) vs central differences.
  fam = learner_family("mlp", num_outputs=2, feature_shape=(3,))
  params = jax.jit(fam.init)(jax.random.key(2))
  z = rs.uniform(size=(4, 3))
  J = np.asarray(jax.jit(lambda p, q: input_jacobian(fam.apply, p, q))(params, jnp.asarray(z, jnp.float32)))
  eps = 1e-3
  e = np.eye(3) * eps  # all 2 x 3 shifted copies of z in one forward pass
  zz = np.concatenate([z[:, None, :] + e[None], z[:, None, :] - e[None]], 1).reshape(-1, 3)
  out = np.asarray(jax.jit(fam.apply)(params, jnp.asarray(zz, jnp.float32))).reshape(4, 2, 3, 2)
  fd = (out[:, 0] - out[:, 1]) / (2 * eps)  # (S, d, C)
  np.testing.assert_allclose(J, fd.transpose(0, 2, 1), atol=2e-3)
  # McShane u_i (eq. 17, per output) in NumPy, float64; its gradient by central differences.
  xi = rs.uniform(size=(6, 2))
  yi = rs.normal(size=(6, 2))
  L = 2.5
  mask = np.array([True] * 5 + [False])
  def u(q):
    return np.min(yi[None, :5, :] + L * np.linalg.norm(q[:, None, :] - xi[None, :5, :], axis=-1)[..., None], 1)
  zq = rs.uniform(size=(9, 2))
  got = np.asarray(jax.jit(mcshane_grad, static_argnums=2)(
      jnp.asarray(xi, jnp.float32), jnp.asarray(yi, jnp.float32), L, jnp.asarray(zq, jnp.float32),
      jnp.asarray(mask)))
  assert got.shape == (9, 2, 2)
  for j in range(2):
    e = np.zeros(2)
    e[j] = 1e-6
    np.testing.assert_allclose(got[:, :, j], (u(zq + e) - u(zq - e)) / 2e-6, atol=1e-3)
  np.testing.assert_allclose(np.linalg.norm(got, axis=-1), L, rtol=1e-5)  # |grad u| = L a.e.


def test_empirical_lip_and_gamma_hat_inf_against_numpy():
  from fedsim.models.weak_learners import empirical_lip, gamma_hat_inf
  rs = np.random.default_rng(5)
  x = rs.uniform(size=(7, 2))
  x[3] = x[1]  # an exact duplicate is skipped
  v = rs.normal(size=(7, 2))
  v[3] = v[1] + 5.0
  x[6] = x[0] + 0.01
  v[6] = v[0] + 100.0  # a padded row (quotient 1e4) is ignored
  mask = np.array([True] * 6 + [False])
  ref = 0.0
  for a in range(6):
    for b in range(6):
      d = np.linalg.norm(x[a] - x[b])
      if d > 0:
        ref = max(ref, np.linalg.norm(v[a] - v[b]) / d)
  got = float(empirical_lip(jnp.asarray(v, jnp.float32), jnp.asarray(x, jnp.float32), jnp.asarray(mask)))
  np.testing.assert_allclose(got, ref, rtol=1e-5)
  h = v + rs.normal(size=v.shape) * 0.3
  num = np.max(np.linalg.norm((h - v)[:6], axis=-1))
  den = np.max(np.linalg.norm(v[:6], axis=-1))
  np.testing.assert_allclose(float(gamma_hat_inf(jnp.asarray(h, jnp.float32), jnp.asarray(v, jnp.float32),
                                                 jnp.asarray(mask))), 1 - num / den, rtol=1e-5)
