"""Weak-learning oracles (seed 002 App. B.3; specs/ffgb.md §2.5, §4.2, §7.10)."""

import jax
import jax.numpy as jnp
import numpy as np

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
  np.testing.assert_allclose(np.asarray(p), np.asarray(p2), rtol=1e-4, atol=1e-5)
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
  shapes = lambda t: jax.tree_util.tree_map(lambda a: a.shape, t)
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
  err = lambda hh: np.asarray(jnp.sum(jnp.where(masks[..., None], (hh - phi) ** 2, 0.0), (1, 2)))
  assert np.all(err(h) < 0.25 * err(h0)), (err(h0), err(h))  # the fit loss decreases
  g = jax.vmap(gamma_hat)(h, phi, masks)
  assert np.all(np.asarray(g) > 0.0), g
  # vmapped fit == the same client's fit alone (same key): the vmap only batches.
  np.testing.assert_allclose(np.asarray(h1), np.asarray(h[1]), rtol=1e-3, atol=1e-4)
  # The paper's size on 32x32x3 CIFAR images ('VALID' padding): 17,090 parameters (specs §3.1).
  v = WeakLearnerCNN(10).init(jax.random.key(0), jnp.zeros((1, 32, 32, 3)))
  assert sum(a.size for a in jax.tree_util.tree_leaves(v)) == 17090
