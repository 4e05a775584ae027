"""The FedZO estimator (seed 001 eq. 2): mean, variance, direction laws.

Closed forms (specs/fedzo.md §2.1, §7.1): for quadratics the sphere estimator is
exactly unbiased for the gradient at any mu; for linear f = g^T x,
E||e - g||^2 = (d - 1) ||g||^2 / b2.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedsim.estimators import directions, fd_gradient

D, B2, DRAWS = 20, 20, 20000


def _draws(f, x, law, mu, n=DRAWS, b2=B2):
  keys = jax.random.split(jax.random.key(1), n)
  return np.asarray(jax.jit(jax.vmap(lambda k: fd_gradient(f, x, k, b2, mu, law)))(keys), np.float64)


@pytest.mark.parametrize("law", ["sphere", "orthogonal", "gaussian"])
@pytest.mark.parametrize("mu", [0.1, 1.0])
def test_unbiased_on_quadratic(law, mu):
  rng = np.random.default_rng(0)
  m = rng.normal(size=(D, D)) / np.sqrt(D)
  a = jnp.asarray(m @ m.T + np.eye(D), jnp.float32)
  b = jnp.asarray(rng.normal(size=D), jnp.float32)
  x = jnp.asarray(rng.normal(size=D), jnp.float32)
  def f(z):
    return 0.5 * z @ a @ z + b @ z
  e = _draws(f, x, law, mu)
  grad = np.asarray(a @ x + b, np.float64)
  se = e.std(0) / np.sqrt(len(e))
  z = np.abs(e.mean(0) - grad) / se
  # d coordinates, each within ~3 standard errors; max over 20 coordinates < 4.5.
  assert z.max() < 4.5, (z.max(), e.mean(0), grad)
  # And a tight aggregate check: relative error of the mean vector.
  assert np.linalg.norm(e.mean(0) - grad) < 5 * np.sqrt(np.sum(se ** 2))


@pytest.mark.parametrize("law", ["sphere", "orthogonal"])
def test_variance_closed_form_linear(law):
  g = jnp.asarray(np.random.default_rng(2).normal(size=D), jnp.float32)
  b2 = 5  # < d, so the orthonormal law is not the exact full basis
  e = _draws(lambda z: g @ z, jnp.zeros(D), law, 1.0, b2=b2)
  sq = np.sum((e - np.asarray(g, np.float64)) ** 2, axis=1)
  gn = float(np.sum(np.asarray(g, np.float64) ** 2))
  if law == "sphere":
    expected = (D - 1) * gn / b2              # specs/fedzo.md §2.1
  else:
    expected = (D - b2) * gn / b2             # orthonormal: e = (d/b2) P g, P a rank-b2 projector
  se = sq.std() / np.sqrt(len(sq))
  assert abs(sq.mean() - expected) < 3.5 * se + 1e-9 * expected, (sq.mean(), expected, se)


def test_sphere_directions_unit_and_isotropic():
  v = np.asarray(directions(jax.random.key(3), 200000, 5, "sphere"), np.float64)
  np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
  np.testing.assert_allclose(v.T @ v / len(v), np.eye(5) / 5, atol=4e-3)


def test_orthogonal_directions_orthonormal():
  v = np.asarray(directions(jax.random.key(4), 7, 30, "orthogonal"), np.float64)
  np.testing.assert_allclose(v @ v.T, np.eye(7), atol=1e-5)
  with pytest.raises(ValueError, match="fd_directions <= dim"):
    directions(jax.random.key(4), 31, 30, "orthogonal")


def test_unknown_law():
  with pytest.raises(ValueError, match="accepted: sphere, gaussian, orthogonal"):
    directions(jax.random.key(0), 2, 3, "cauchy")


@pytest.mark.parametrize("law", ["sphere", "gaussian", "orthogonal"])
@pytest.mark.parametrize("b2, mu", [(1, 0.3), (3, 0.05)])
def test_estimate_equals_eq2_written_out(law, b2, mu):
  """One draw, d = 5: e = (s / (mu b2)) sum_n v_n (f(x + mu v_n) - f(x)) with s = d for the
  sphere and orthonormal laws and s = 1 for Gaussians (seed 001 eq. 2); the directions are
  rebuilt in NumPy from the key's standard normals g (b2, d): sphere v = g / ||g||, gaussian
  v = g, orthogonal v = rows of Q of g^T = QR with diag(R) > 0."""
  d = 5
  x = np.array([0.3, -0.2, 0.5, 0.1, -0.4])
  def f_np(z):
    return float(np.sum(np.sin(z)) + 0.5 * z @ z + z[0] * z[1] ** 2)   # not quadratic
  def f(z):
    return jnp.sum(jnp.sin(z)) + 0.5 * z @ z + z[0] * z[1] ** 2
  key = jax.random.key(17)
  g = np.asarray(jax.random.normal(key, (b2, d)), np.float64)
  if law == "sphere":
    v, s = g / np.linalg.norm(g, axis=1, keepdims=True), d
  elif law == "gaussian":
    v, s = g, 1.0
  else:
    q, r = np.linalg.qr(g.T)
    v, s = (q * np.sign(np.diag(r))).T, d
  expected = s / (mu * b2) * sum(v[n] * (f_np(x + mu * v[n]) - f_np(x)) for n in range(b2))
  got = np.asarray(fd_gradient(f, jnp.asarray(x, jnp.float32), key, b2, mu, law), np.float64)
  np.testing.assert_allclose(got, expected, rtol=2e-4, atol=2e-4 * np.max(np.abs(expected)))
