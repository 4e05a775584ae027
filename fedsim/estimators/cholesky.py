"""The Cholesky factor with one retry that the GP (eq. 4-5) and the RFF fit (eq. 6) of FZooS share."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def cholesky_retry(A, first, second):
  """The lower Cholesky factor of A + first I, or of A + second I where that one is not finite.

  The retry is a loop of 0 or 1 steps: it runs only when a factor is not finite (round-off
  on a near-singular A), so the common case costs one factorisation; under ``vmap`` it runs
  when any batch member needs it and keeps the others' first factors (``while_loop``'s
  batching selects per member). The two factorisations are sequential on purpose: two
  concurrent batched LAPACK Cholesky kernels can deadlock jaxlib's CPU thread pool on a
  2-core machine.

  Args:
    A: (n, n) symmetric float matrix.
    first, second: diagonal shifts (scalars) of the factorisation and of its retry.

  Returns:
    (n, n) lower-triangular L with L L^T = A + s I, s = first where that factor is
    finite, else second (NaN entries if both fail).
  """
  eye = jnp.eye(A.shape[0], dtype=A.dtype)
  L = jnp.linalg.cholesky(A + first * eye)

  def retry(carry):
    A_, _ = jax.lax.optimization_barrier((A, carry))   # not hoisted out of the loop
    return jnp.linalg.cholesky(A_ + second * eye), jnp.bool_(True)

  L, _ = jax.lax.while_loop(lambda c: ~c[1] & ~jnp.all(jnp.isfinite(c[0])), retry, (L, jnp.bool_(False)))
  return L
