"""Random Fourier features of the SE kernel (FZooS, seed 000 §4.2.1, App. B, eqs. 6-7;
specs/fzoos.md §2.4.2).

    v_j ~ N(0, I / l^2),  b_j ~ U[0, 2 pi],  j = 1..M      (one draw shared by all parties)
    phi(x) = sqrt(2/M) [cos(v_j^T x + b_j)]_j              (App. B; its "2/sqrt(M)" is a typo)
    w = Phi^T (Phi Phi^T + sigma^2 I_n)^{-1} y              (eq. 6; Phi (n, M) rows phi(x_tau)^T)
    grad muhat(x) = grad phi(x)^T w = -sqrt(2/M) V^T (w * sin(V x + b))    (eq. 7)

With sigma^2 -> 0 the weight fit is the minimum-norm least-squares solution of
the authors' ``Ridge(alpha=0)``.

The shared draw: algorithms only receive their init key, so the features come
from ``shared_key(init_key) = fold_in(init_key, SHARED_FOLD)``, a fixed
derivation that every client and the server reproduce (the authors'
``RBFSampler(random_state=0)`` plays the same role).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

# fold_in constant of the shared RFF key ("RFF" in ASCII).
SHARED_FOLD = 0x524646


class RFF(NamedTuple):
  """A shared random-feature draw.

  Attributes:
    V: (M, d) frequencies, rows ~ N(0, I / l^2).
    b: (M,) phases ~ U[0, 2 pi].
  """
  V: jax.Array
  b: jax.Array


def shared_key(init_key: jax.Array) -> jax.Array:
  """The key of the shared feature draw, derived deterministically from the init key."""
  return jax.random.fold_in(init_key, SHARED_FOLD)


def draw(key: jax.Array, num_features: int, dim: int, lengthscale=1.0, dtype=jnp.float32) -> RFF:
  """Draws M features of the SE kernel with lengthscale l (App. B).

  Args:
    key: PRNG key (use :func:`shared_key` so every party gets the same draw).
    num_features: M (static).
    dim: d (static).
    lengthscale: l > 0.
    dtype: float dtype.

  Returns:
    :class:`RFF` with V (M, d) and b (M,).
  """
  kv, kb = jax.random.split(key)
  V = jax.random.normal(kv, (num_features, dim), dtype) / lengthscale
  b = jax.random.uniform(kb, (num_features,), dtype, 0.0, 2.0 * jnp.pi)
  return RFF(V=V, b=b)


def features(rff: RFF, x):
  """phi(x) = sqrt(2/M) cos(V x + b); x (..., d) -> (..., M)."""
  M = rff.V.shape[0]
  return jnp.sqrt(2.0 / M).astype(rff.V.dtype) * jnp.cos(x @ rff.V.T + rff.b)


def gradient(rff: RFF, w, x):
  """grad (phi(x)^T w) = -sqrt(2/M) V^T (w * sin(V x + b)) (eq. 7); w (M,), x (d,) -> (d,).

  One O(M d) matvec pair; pass ``w = w_global - w_local`` for the correction of eq. 8.
  """
  M = rff.V.shape[0]
  s = jnp.sin(rff.V @ x + rff.b)
  return -jnp.sqrt(2.0 / M).astype(rff.V.dtype) * (rff.V.T @ (w * s))


def fit_weights(rff: RFF, X, y, mask, ridge=1e-8):
  """The RFF weights w = Phi^T (Phi Phi^T + sigma^2 I)^{-1} y (eq. 6) on a masked window.

  Args:
    rff: the shared draw.
    X: (n, d) inputs.
    y: (n,) targets.
    mask: (n,) bool valid rows (invalid rows get phi = 0, unit diagonal, y = 0,
      so they do not change w).
    ridge: sigma^2 (the code's 0, numerically ~1e-8 in float64, specs §6).

  Returns:
    (M,) weights. Cost O(n M d + n^2 M).
  """
  m = mask.astype(rff.V.dtype)
  Phi = features(rff, X) * m[:, None]                          # (n, M)
  A = Phi @ Phi.T + jnp.diag(ridge * m + (1.0 - m))            # Khat + sigma^2 I (eq. 6)
  # A is PD for ridge > 0; only where its factor is not finite (round-off), redo with
  # extra jitter (sequential, see fedsim.estimators.gp._cholesky_retry).
  eye = jnp.eye(A.shape[0], dtype=A.dtype)
  L1 = jnp.linalg.cholesky(A)
  extra = jnp.where(jnp.all(jnp.isfinite(L1)), 0.0, 1e-6 + 100.0 * ridge)
  L = jnp.linalg.cholesky(A + extra * eye)
  beta = jax.scipy.linalg.cho_solve((L, True), jnp.where(mask, y, 0.0).astype(A.dtype))
  return Phi.T @ beta


def kernel_se(x, xp, lengthscale=1.0):
  """The exact SE kernel exp(-||x - x'||^2 / (2 l^2)) (s^2 = 1) that phi approximates."""
  return jnp.exp(-0.5 * jnp.sum((x - xp) ** 2, axis=-1) / lengthscale ** 2)
