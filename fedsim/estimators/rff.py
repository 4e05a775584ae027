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

import functools
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
    ridge: sigma^2 (the code's 0, numerically ~1e-8 in float64, specs §6); a float32 fit
      adds :func:`float32_jitter` (u tr(Phi Phi^T)) to it.

  Returns:
    (M,) weights. Cost O(n M d + n^2 M).
  """
  m = mask.astype(rff.V.dtype)
  Phi = features(rff, X) * m[:, None]                          # (n, M)
  return _weights_from_gram(Phi, Phi @ Phi.T, y, mask, ridge)


def _weights_from_gram(Phi, G, y, mask, ridge):
  """w = Phi^T (G + sigma^2 I)^{-1} y (eq. 6) from the masked features Phi (n, M) and
  their Gram G = Phi Phi^T (n, n); invalid rows: phi = 0, unit diagonal, y = 0."""
  m = mask.astype(Phi.dtype)
  if Phi.dtype == jnp.float32:
    ridge = ridge + float32_jitter(G, m)
  A = G + jnp.diag(ridge * m + (1.0 - m))                      # Khat + sigma^2 I (eq. 6)
  # A is PD for ridge > 0; only where its factor is not finite (round-off), redo with
  # extra jitter (sequential, see fedsim.estimators.gp._cholesky_retry).
  eye = jnp.eye(A.shape[0], dtype=A.dtype)
  L1 = jnp.linalg.cholesky(A)
  extra = jnp.where(jnp.all(jnp.isfinite(L1)), 0.0, 1e-6 + 100.0 * ridge)
  L = jnp.linalg.cholesky(A + extra * eye)
  beta = jax.scipy.linalg.cho_solve((L, True), jnp.where(mask, y, 0.0).astype(A.dtype))
  return Phi.T @ beta


def float32_jitter(G, m):
  """The float32 floor added to the fit's sigma^2: u tr(G) over the valid rows (u = 2^-23, float32's eps).

  FZooS's windows are near-singular: queries within 0.01 of x_r under an SE kernel with l = 1
  leave G = Phi Phi^T (n, n) with eigenvalues down to ~1e-16 of its largest (some negative after
  round-off), so with the code's sigma^2 = 1e-8 (and the 1e-6 retry) the float32 Cholesky
  fails and w is NaN by round 2 (issue 36 item 7). A float32 Cholesky of A is exact for some
  A + dA with |dA| <= gamma_{n+1} |R^T| |R| (Higham, Accuracy and Stability of Numerical
  Algorithms, Thm. 10.3), i.e. of order n u max_i A_ii = u tr(G) here (diag(G) ~ k(x, x) = 1):
  eigenvalues below u tr(G) are not resolved in float32, and a ridge of that size regularises
  only those, so the factorisation succeeds. Measured on FZooS-like windows (n = 20-500,
  M = 256-10,000, radius 0.01-1 around x_r): finite w, eq. 7's gradient at x_r within 2% of
  the float64 fit (with 0.1 u tr(G): NaN or 7% off; with 10 u tr(G): 2.5-6% off); one diagonal
  sum per fit, no SVD. Float64 (--x64) fits keep sigma^2 as given, bit for bit.
  """
  return jnp.finfo(jnp.float32).eps * jnp.sum(jnp.diag(G) * m)


class FitCache(NamedTuple):
  """The features and Gram of the last window :func:`fit_weights_cached` fitted.

  Attributes:
    ids: (n,) int32 identity of each row's point (the caller's unique id of a
      query, e.g. its write index in a history); -1 for a masked row or none.
    Phi: (n, M) features phi(x) of those rows (0 where ids = -1).
    G: (n, n) their Gram Phi Phi^T (0 in rows / columns where ids = -1).
  """
  ids: jax.Array
  Phi: jax.Array
  G: jax.Array


def empty_cache(n: int, num_features: int, dtype=jnp.float32) -> FitCache:
  """A :class:`FitCache` of n rows that matches nothing (every id -1)."""
  return FitCache(ids=jnp.full((n,), -1, jnp.int32), Phi=jnp.zeros((n, num_features), dtype),
                  G=jnp.zeros((n, n), dtype))


def fit_weights_cached(rff: RFF, X, y, mask, ids, cache: FitCache, ridge=1e-8, chunk=None):
  """:func:`fit_weights` (eq. 6) reusing the features and Gram of the rows it shares with the
  previously fitted window: w = Phi^T (Phi Phi^T + sigma^2 I)^{-1} y.

  A row whose id is in ``cache.ids`` takes its phi(x) and its Gram entries with the
  other cached rows from the cache; only the m new rows get features phi(x) (m d M)
  and Gram rows against the whole window (m n M), in chunks of ``chunk`` rows (a
  loop of ceil(m / chunk) steps). The ids must identify the points: equal ids, equal
  x (a history's write index does; a slot index does not once a ring wraps).
  Mathematically the same w as :func:`fit_weights` on (X, y, mask); the Gram entries
  and features come from products of other shapes, so they may differ in the last
  bits (tests/estimators/test_rff.py pins the agreement).

  Args:
    rff: the shared draw.
    X: (n, d) inputs; y: (n,) targets; mask: (n,) bool valid rows.
    ids: (n,) int32 ids of the rows (ignored where ``mask`` is False).
    cache: the previous call's cache (:func:`empty_cache` at first), n' rows.
    ridge: sigma^2 (float32: plus :func:`float32_jitter`, as in :func:`fit_weights`).
    chunk: rows per step of the new-row loop (static); default n.

  Returns:
    ((M,) weights, the :class:`FitCache` of this window). Cost O(m (d + n) M + n^3)
    plus O(n M) copies. Not for ``vmap``: a batched loop bound runs every client to
    the largest m and selects the (n, M) features at every step (use ``lax.map``).
  """
  n = X.shape[0]
  c = n if chunk is None else max(1, min(int(chunk), n))
  dt = rff.V.dtype
  ids = jnp.where(mask, ids, -1).astype(jnp.int32)
  eq = (ids[:, None] == cache.ids[None, :]) & (ids[:, None] >= 0)  # (n, n')
  hit = jnp.any(eq, axis=1)
  pos = jnp.argmax(eq, axis=1)
  both = hit[:, None] & hit[None, :]
  Phi = jnp.where(hit[:, None], cache.Phi[pos], 0.0).astype(dt)   # (n, M) cached phi(x)
  G = jnp.where(both, cache.G[pos][:, pos], 0.0).astype(dt)       # cached Phi Phi^T entries
  new = mask & ~hit
  num_new = jnp.sum(new.astype(jnp.int32))
  steps = (num_new + c - 1) // c
  pad = (-n) % c
  # The new rows first (stable), then the rest; padded to whole chunks with n (dropped).
  order = jnp.concatenate([jnp.argsort(~new, stable=True).astype(jnp.int32),
                           jnp.full((pad,), n, jnp.int32)])

  def rows(k):
    r = jax.lax.dynamic_slice(order, (k * c,), (c,))
    live = k * c + jnp.arange(c) < num_new
    return jnp.minimum(r, n - 1), jnp.where(live, r, n)          # gather index, scatter index

  def add_features(k, Phi):
    get, put = rows(k)
    return Phi.at[put].set(features(rff, X[get]), mode="drop")  # phi(x) of the new rows

  def add_gram(Phi, k, G):
    get, put = rows(k)
    block = Phi[get] @ Phi.T                                     # (c, n) new rows of Phi Phi^T
    return G.at[put].set(block, mode="drop").at[:, put].set(block.T, mode="drop")

  Phi = jax.lax.fori_loop(0, steps, add_features, Phi)
  G = jax.lax.fori_loop(0, steps, functools.partial(add_gram, Phi), G)
  # Masked rows are exactly 0 in Phi and G already (never cached, never computed), as in fit_weights.
  w = _weights_from_gram(Phi, G, y, mask, ridge)               # eq. (6)
  return w, FitCache(ids=ids, Phi=Phi, G=G)


def kernel_se(x, xp, lengthscale=1.0):
  """The exact SE kernel exp(-||x - x'||^2 / (2 l^2)) (s^2 = 1) that phi approximates."""
  return jnp.exp(-0.5 * jnp.sum((x - xp) ** 2, axis=-1) / lengthscale ** 2)
