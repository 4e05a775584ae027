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
