"""Random Fourier features of the SE kernel (FZooS, Shu et al. 2023, §4.2.1, App. B, eqs. 6-7;
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

from fedsim.estimators.cholesky import cholesky_retry

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


def features(rff: RFF, x, cos=jnp.cos):
  """phi(x) = sqrt(2/M) cos(V x + b); x (..., d) -> (..., M). ``cos``: the cosine used
  (:func:`fast_cos` in :func:`fit_weights_cached`)."""
  M = rff.V.shape[0]
  return jnp.sqrt(2.0 / M).astype(rff.V.dtype) * cos(x @ rff.V.T + rff.b)


# Cody-Waite split of pi/4 (each part with 24 significant bits, so j * part is exact for j < 2^29) and the
# minimax polynomials of sin and cos on [-pi/4, pi/4]: Cephes' double-precision sin.c (S. L. Moshier).
_PI4 = (7.85398125648498535156e-1, 3.77489470793079817668e-8, 2.69515142907905952645e-15)
_SIN = (1.58962301576546568060e-10, -2.50507477628578072866e-8, 2.75573136213857245213e-6,
        -1.98412698295895385996e-4, 8.33333333332211858878e-3, -1.66666666666666307295e-1)
_COS = (-1.13585365213876817300e-11, 2.08757008419747316778e-9, -2.75573141792967388112e-7,
        2.48015872888517045348e-5, -1.38888888888730564116e-3, 4.16666666666665929218e-2)
# |argument| up to which :func:`fast_cos` reduces by the split above (j < 2^29 with margin).
FAST_COS_MAX = 2.0 ** 20


def _horner(coefs, z):
  r = coefs[0]
  for c in coefs[1:]:
    r = r * z + c
  return r


def fast_cos(a):
  """cos(a) for float64 ``a`` (any shape) as vectorised arithmetic: within 2^-52 of ``jnp.cos``, and
  within 2 ulp where |cos a| >= 2^-10 (tests/estimators/test_rff.py; near cos's zeros the reduction's
  ~1e-29 absolute error is many of their ulps), about 4x faster on CPU, where XLA computes a float64
  cosine by a scalar libm call per element. Cephes' method: j = the even integer nearest 4|a|/pi from below
  (floor, rounded up to even), z = |a| - j pi/4 in three exact steps, the sin or cos minimax polynomial
  of z by the octant j mod 8. Where some |a| exceeds FAST_COS_MAX (not reached by FZooS's V x + b)
  the whole array takes ``jnp.cos``. Other dtypes: ``jnp.cos``.
  """
  if a.dtype != jnp.float64:
    return jnp.cos(a)

  def fast(a):
    x = jnp.abs(a)
    j = jnp.floor(x * (4.0 / jnp.pi))
    j = j + (j - 2.0 * jnp.floor(0.5 * j))                  # even: the octant pair's lower end
    octant = j - 8.0 * jnp.floor(0.125 * j)                 # 0, 2, 4 or 6
    z = ((x - j * _PI4[0]) - j * _PI4[1]) - j * _PI4[2]      # |a| - j pi/4, |z| <= pi/4
    zz = z * z
    s = z + z * zz * _horner(_SIN, zz)
    c = 1.0 - 0.5 * zz + zz * zz * _horner(_COS, zz)
    r = jnp.where((octant == 2.0) | (octant == 6.0), s, c)  # cos(z + j pi/4): c, -s, -c, s
    return jnp.where((octant == 2.0) | (octant == 4.0), -r, r)

  return jax.lax.cond(jnp.max(jnp.abs(a), initial=0.0) <= FAST_COS_MAX, fast, jnp.cos, a)


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
  return Phi.T @ _gram_solve(Phi @ Phi.T, y, mask, ridge)


def _gram_solve(G, y, mask, ridge):
  """beta = (G + sigma^2 I)^{-1} y (eq. 6, w = Phi^T beta) from the Gram G = Phi Phi^T (n, n) of the
  masked features; invalid rows: G row 0, unit diagonal, y = 0, so beta = 0 there exactly."""
  m = mask.astype(G.dtype)
  if G.dtype == jnp.float32:
    ridge = ridge + float32_jitter(G, m)
  A = G + jnp.diag(ridge * m + (1.0 - m))                      # Khat + sigma^2 I (eq. 6)
  # A is PD for ridge > 0; only where its factor is not finite (round-off), redo with extra jitter.
  L = cholesky_retry(A, 0.0, 1e-6 + 100.0 * ridge)
  return jax.scipy.linalg.cho_solve((L, True), jnp.where(mask, y, 0.0).astype(A.dtype))


def float32_jitter(G, m):
  """The float32 floor added to the fit's sigma^2: u tr(G) over the valid rows (u = 2^-23, float32's eps).

  FZooS's windows are near-singular: queries within 0.01 of x_r under an SE kernel with l = 1
  leave G = Phi Phi^T (n, n) with eigenvalues down to ~1e-16 of its largest (some negative after
  round-off), so with the code's sigma^2 = 1e-8 (and the 1e-6 retry) the float32 Cholesky
  fails and w is NaN by round 2. A float32 Cholesky of A is exact for some
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
  """The features and Gram of the points :func:`fit_weights_cached` fitted, in fixed slots.

  Slot s holds the point of id ``ids[s]`` (-1: none), its features ``Phi[s]`` = phi(x) and
  its Gram entries ``G[s, t]`` = Phi[s] . Phi[t] with every slot t, so G = Phi Phi^T over all
  slots (rows of 0 for empty ones). A point keeps its slot while it stays in the windows
  (rows never move), and stays cached after it leaves one until its slot is reused.

  Attributes:
    ids: (n,) int32 identity of each slot's point (the caller's unique id of a
      query, e.g. its write index in a history); -1 for none.
    Phi: (n, M) features phi(x) of those points (0 where never written).
    G: (n, n) their Gram Phi Phi^T.
  """
  ids: jax.Array
  Phi: jax.Array
  G: jax.Array


def empty_cache(n: int, num_features: int, dtype=jnp.float32) -> FitCache:
  """A :class:`FitCache` of n slots that holds nothing (every id -1)."""
  return FitCache(ids=jnp.full((n,), -1, jnp.int32), Phi=jnp.zeros((n, num_features), dtype),
                  G=jnp.zeros((n, n), dtype))


def _slots(ids, mask, cache_ids):
  """The cache slot of each window row: (slot (n,) int32, n for a masked row; new (n,) bool, the rows
  whose id no slot holds). A new row takes a slot that no window row holds: empty slots first, then
  the others in slot order (the k-th new row in window order the k-th such slot)."""
  n = ids.shape[0]
  eq = (ids[:, None] == cache_ids[None, :]) & mask[:, None] & (ids[:, None] >= 0)  # (n, n')
  hit = jnp.any(eq, axis=1)
  new = mask & ~hit
  kept = jnp.any(eq, axis=0)
  # Slots by preference: unheld and empty (0), unheld and holding an old point (1), held (2).
  free = jnp.argsort(2 * kept.astype(jnp.int32) + (cache_ids >= 0).astype(jnp.int32), stable=True)
  rank = jnp.cumsum(new.astype(jnp.int32)) - 1
  slot = jnp.where(hit, jnp.argmax(eq, axis=1), jnp.where(new, free[jnp.maximum(rank, 0)], n))
  return slot.astype(jnp.int32), new


def fit_weights_cached(rff: RFF, X, y, mask, ids, cache: FitCache, ridge=1e-8, chunk=None):
  """:func:`fit_weights` (eq. 6) of a batch of windows, each reusing the features and Gram of
  the points its client's cache holds: w = Phi^T (Phi Phi^T + sigma^2 I)^{-1} y.

  Per client: a window row whose id a slot holds takes that slot's phi(x) and Gram
  entries; only the m new rows get features phi(x) (m d M) and Gram rows against all n
  slots (m n M), written into free slots of the client's cache in place, in chunks of
  ``chunk`` rows (one loop for all clients, to the largest ceil(m / chunk)).
  The system of eq. 6 is then solved in slot order (the window's rows permuted, which
  does not change w mathematically). The ids must identify the points: equal ids,
  equal x (a history's write index does; a slot index does not once a ring wraps); a
  window's valid rows have distinct ids (one row per point).
  The same w as :func:`fit_weights` on (X, y, mask) up to round-off: the Gram entries,
  the factorisation's row order and the product Phi^T beta are summed in other orders
  (tests/estimators/test_rff.py pins the agreement), and the new rows' cosines are :func:`fast_cos`'s
  (within 2^-52 of ``jnp.cos``).

  Args:
    rff: the shared draw.
    X: (N, n, d) inputs; y: (N, n) targets; mask: (N, n) bool valid rows.
    ids: (N, n) int32 ids of the rows (ignored where ``mask`` is False).
    cache: the previous call's caches (:func:`empty_cache` at first), leading axis N, n slots
      (as many as window rows).
    ridge: sigma^2 (float32: plus :func:`float32_jitter`, as in :func:`fit_weights`).
    chunk: rows per step of the new-row loop (static); default n.

  Returns:
    ((N, M) weights, the updated caches). Cost per client O(m (d + n) M + n^3), and one
    read of its (n, M) features for Phi^T beta; no copy of a feature block (the caches are
    updated in place when the caller's arrays are loop-carried or donated).
  """
  N, n = X.shape[:2]
  c = n if chunk is None else max(1, min(int(chunk), n))
  dt = rff.V.dtype
  mask = mask.astype(bool)
  ids = jnp.where(mask, ids, -1).astype(jnp.int32)
  slot, new = jax.vmap(_slots)(ids, mask, cache.ids)           # (N, n) each
  num_new = jnp.sum(new.astype(jnp.int32), axis=1)              # (N,)
  pad = (-n) % c
  # Per client: the new rows first (stable), then the rest; padded to whole chunks with n (dropped).
  order = jnp.concatenate([jnp.argsort(~new, axis=1, stable=True).astype(jnp.int32),
                           jnp.full((N, pad), n, jnp.int32)], axis=1)

  def rows(k):
    """Chunk k's window rows (N, c) and their slots (N, c), n where past a client's new rows (dropped)."""
    get = jnp.minimum(jax.lax.dynamic_slice_in_dim(order, k * c, c, axis=1), n - 1)
    live = k * c + jnp.arange(c) < num_new[:, None]
    return get, jnp.where(live, jnp.take_along_axis(slot, get, axis=1), n)

  def add_features(k, Phi):
    get, put = rows(k)
    F = features(rff, jnp.take_along_axis(X, get[..., None], axis=1), fast_cos)   # (N, c, M) phi(x), new rows
    return jax.vmap(lambda P, p, f: P.at[p].set(f, mode="drop"))(Phi, put, F)

  def add_gram(Phi, k, G):
    _, put = rows(k)
    new_rows = jax.vmap(lambda P, p: P[jnp.minimum(p, n - 1)])(Phi, put)
    block = jnp.einsum("icm,inm->icn", new_rows, Phi)                  # (N, c, n) new rows of Phi Phi^T
    return jax.vmap(lambda g, p, b: g.at[p].set(b, mode="drop").at[:, p].set(b.T, mode="drop"))(G, put, block)

  # One loop for all clients, to the largest client's chunk count: a client past its own new rows
  # writes nothing (mode="drop"), so no client's block is copied or selected.
  steps = jnp.max((num_new + c - 1) // c)
  Phi = jax.lax.fori_loop(0, steps, add_features, cache.Phi)
  G = jax.lax.fori_loop(0, steps, functools.partial(add_gram, Phi), cache.G)
  y_slot = jax.vmap(lambda s, v: jnp.zeros((n,), dt).at[s].set(v, mode="drop"))(slot, jnp.where(mask, y, 0.0))
  m_slot = jax.vmap(lambda s, v: jnp.zeros((n,), bool).at[s].set(v, mode="drop"))(slot, mask)
  held = m_slot[:, :, None] & m_slot[:, None, :]
  beta = jax.vmap(_gram_solve, in_axes=(0, 0, 0, None))(jnp.where(held, G, 0.0), y_slot, m_slot, ridge)  # eq. (6)
  w = jnp.einsum("in,inm->im", beta, Phi)                              # Phi^T beta; beta = 0 off the window
  ids_slot = jax.vmap(lambda s, v, old: old.at[s].set(v, mode="drop"))(slot, ids, cache.ids)
  return w, FitCache(ids=ids_slot, Phi=Phi, G=G)


def kernel_se(x, xp, lengthscale=1.0):
  """The exact SE kernel exp(-||x - x'||^2 / (2 l^2)) (s^2 = 1) that phi approximates."""
  return jnp.exp(-0.5 * jnp.sum((x - xp) ** 2, axis=-1) / lengthscale ** 2)
