"""fedsim.estimators.cholesky: one factorisation when it is finite, the retry's where it is not."""

import jax
import jax.numpy as jnp
import numpy as np

from fedsim.estimators.cholesky import cholesky_retry


def test_the_first_factor_when_finite_and_the_retry_only_where_it_is_not():
  """A PD matrix gets chol(A + first I) to the last bit; an indefinite one (first factor NaN) gets
  chol(A + second I); under vmap a batch mixing the two gets each its own (the retry runs for the
  batch but keeps the finite member's first factor). Swapping first and second, or returning the
  first factor unconditionally, fails it."""
  with jax.enable_x64(True):
    rs = np.random.default_rng(0)
    B = rs.normal(size=(6, 6))
    eye = jnp.eye(6)
    pd = jnp.asarray(B @ B.T + 0.1 * np.eye(6))
    bad = pd - 2.0 * float(np.linalg.eigvalsh(np.asarray(pd)).min()) * eye   # indefinite
    first, second = 1e-3, 10.0
    assert not bool(jnp.all(jnp.isfinite(jnp.linalg.cholesky(bad + first * eye))))  # the first fails
    f = jax.jit(lambda A: cholesky_retry(A, first, second))
    np.testing.assert_array_equal(f(pd), jnp.linalg.cholesky(pd + first * eye))
    np.testing.assert_array_equal(f(bad), jnp.linalg.cholesky(bad + second * eye))
    Lb = jax.jit(jax.vmap(lambda A: cholesky_retry(A, first, second)))(jnp.stack([pd, bad]))
    np.testing.assert_array_equal(Lb[0], jnp.linalg.cholesky(pd + first * eye))
    np.testing.assert_array_equal(Lb[1], jnp.linalg.cholesky(bad + second * eye))
