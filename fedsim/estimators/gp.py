"""GP posterior of the gradient (FZooS, Shu et al. 2023, §4.1, eqs. 4-5; specs/fzoos.md §2.4.1).

A client conditions a GP prior f ~ GP(0, k) on its query history
D = {(x_tau, y_tau)}_{tau=1..n}. The gradient is again a GP (eq. 5):

    grad mu(x)      = J(x)^T alpha,        alpha = (K + sigma^2 I)^{-1} y          (eq. 5)
    dsigma^2(x)     = d_x d_x' k(x, x) - J(x)^T (K + sigma^2 I)^{-1} J(x)          (eq. 5)

with J(x) (n, d) the Jacobian whose row tau is ``d_x k(x, x_tau)^T``. Both
kernels used here are radial, so ``d_x k(x, x') = g(r) (x - x')`` with a scalar
g (r = ||x - x'||) and ``d_x d_x' k(x, x) = kappa I``:

* SE (the paper, App. B/E): k = s^2 exp(-r^2/(2 l^2)), g = -k / l^2, kappa = s^2/l^2.
* Matern-5/2 (the authors' code's local GP): k = s^2 (1 + sqrt5 r/l + 5 r^2/(3 l^2))
  exp(-sqrt5 r/l), g = -s^2 (5/(3 l^2)) (1 + sqrt5 r/l) exp(-sqrt5 r/l),
  kappa = 5 s^2 / (3 l^2).

Everything is analytic (no numerical differentiation, unlike the authors' code,
specs/fzoos.md §5 item 2) and uses fixed shapes: a history window of n slots
with a boolean ``mask``; invalid slots get a unit diagonal, zero
cross-covariances and y = 0, so their alpha is exactly 0 and they contribute
nothing. Inputs are centred at a reference point before any inner product
(the points of a window are ~0.01 apart while l = 1).

Precision: the functions follow the dtype of their inputs. K is close to the
all-ones matrix on a local window, so callers should pass float64 (enable x64
for the run, ``--x64``, or scope ``jax.enable_x64(True)``); the Cholesky is
retried with 100x jitter where the first factor is not finite.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from fedsim.estimators.cholesky import cholesky_retry

KERNELS = ("se", "matern52")
SQRT5 = 5.0 ** 0.5


def _radius(sq):
  """Safe r = sqrt(sq) (finite gradient at sq = 0)."""
  pos = sq > 0
  return jnp.where(pos, jnp.sqrt(jnp.where(pos, sq, 1.0)), 0.0)


def kernel_from_sqdist(kind: str, sq, lengthscale, variance=1.0):
  """k as a function of the squared distance.

  Args:
    kind: ``se`` or ``matern52``.
    sq: squared distances, any shape, float.
    lengthscale: l > 0 (scalar, may be traced).
    variance: s^2.

  Returns:
    k, same shape as ``sq``.

  Raises:
    ValueError: unknown kernel.
  """
  if kind == "se":
    return variance * jnp.exp(-0.5 * sq / lengthscale ** 2)
  if kind == "matern52":
    u = SQRT5 * _radius(sq) / lengthscale
    return variance * (1.0 + u + u * u / 3.0) * jnp.exp(-u)
  raise ValueError(f"unknown kernel {kind!r}; accepted: {', '.join(KERNELS)}")


def kernel_grad_scale(kind: str, sq, lengthscale, variance=1.0):
  """The scalar g with ``d_x k(x, x') = g (x - x')`` (specs/fzoos.md §2.4.1 [derived])."""
  if kind == "se":
    return -kernel_from_sqdist("se", sq, lengthscale, variance) / lengthscale ** 2
  if kind == "matern52":
    u = SQRT5 * _radius(sq) / lengthscale
    return -variance * (5.0 / (3.0 * lengthscale ** 2)) * (1.0 + u) * jnp.exp(-u)
  raise ValueError(f"unknown kernel {kind!r}; accepted: {', '.join(KERNELS)}")


def kappa(kind: str, lengthscale, variance=1.0):
  """``d_x d_x' k(x, x')`` at x = x' is ``kappa I``: s^2/l^2 (SE), 5 s^2/(3 l^2) (Matern-5/2)."""
  if kind == "se":
    return variance / lengthscale ** 2
  if kind == "matern52":
    return 5.0 * variance / (3.0 * lengthscale ** 2)
  raise ValueError(f"unknown kernel {kind!r}; accepted: {', '.join(KERNELS)}")


class GPPosterior(NamedTuple):
  """A fitted GP on a masked window (all arrays of one dtype).

  Attributes:
    X: (n, d) inputs, centred at ``center`` (X_raw - center).
    center: (d,) the centring point.
    mask: (n,) bool, valid slots.
    chol: (n, n) lower Cholesky factor of K + (sigma^2 + jitter) I (masked).
    alpha: (n,) (K + sigma^2 I)^{-1} y (0 on invalid slots).
    gram: (n, n) X X^T of the centred inputs (the fit's; reused by
      :func:`posterior_grad_cov_trace`).
    lengthscale, variance: kernel hyperparameters (scalars).
  """
  X: jax.Array
  center: jax.Array
  mask: jax.Array
  chol: jax.Array
  alpha: jax.Array
  lengthscale: jax.Array
  variance: jax.Array
  gram: jax.Array


def _masked_gram(kind, X, mask, lengthscale, variance, noise):
  """(masked K + noise I with a unit diagonal on invalid slots (n, n), X X^T (n, n))."""
  XX = X @ X.T
  sqn = jnp.sum(X * X, axis=1)
  sq = jnp.maximum(sqn[:, None] + sqn[None, :] - 2.0 * XX, 0.0)
  m = mask.astype(X.dtype)
  K = kernel_from_sqdist(kind, sq, lengthscale, variance) * m[:, None] * m[None, :]
  return K + jnp.diag(noise * m + (1.0 - m)), XX


def fit(kind: str, X, y, mask, center, lengthscale=1.0, variance=1.0, noise=1e-6,
        jitter=None) -> GPPosterior:
  """Conditions the GP on a masked window (eq. 5's alpha).

  Args:
    kind: ``se`` or ``matern52``.
    X: (n, d) float inputs.
    y: (n,) float targets (zero prior mean; invalid entries ignored).
    mask: (n,) bool valid slots.
    center: (d,) point subtracted from X (numerics only; the posterior is
      translation invariant).
    lengthscale, variance: kernel hyperparameters.
    noise: sigma^2 (the authors' code: alpha = 1e-6).
    jitter: extra diagonal; default 1e-10 (float64) or 1e-5 (float32) times s^2.

  Returns:
    :class:`GPPosterior`.
  """
  dtype = X.dtype
  if jitter is None:
    jitter = (1e-10 if dtype == jnp.float64 else 1e-5) * variance
  Xc = X - center
  A, XX = _masked_gram(kind, Xc, mask, lengthscale, variance, noise)
  L = cholesky_retry(A, jitter, 100.0 * jitter)        # retried with 100 jitter where not finite
  yv = jnp.where(mask, y, 0.0).astype(dtype)
  alpha = jax.scipy.linalg.cho_solve((L, True), yv)
  return GPPosterior(X=Xc, center=center, mask=mask, chol=L, alpha=alpha,
                     lengthscale=jnp.asarray(lengthscale, dtype), variance=jnp.asarray(variance, dtype), gram=XX)


def _cross(kind, post: GPPosterior, x):
  """(diff (n, d), sq (n,)) of x against the window (x in raw coordinates)."""
  diff = (x - post.center)[None, :] - post.X
  return diff, jnp.sum(diff * diff, axis=1)


def posterior_mean(kind: str, post: GPPosterior, x):
  """mu(x) = k(x)^T alpha (eq. 4); x (d,) -> scalar."""
  _, sq = _cross(kind, post, x)
  k = kernel_from_sqdist(kind, sq, post.lengthscale, post.variance) * post.mask
  return k @ post.alpha


def jacobian(kind: str, post: GPPosterior, x):
  """J(x) (n, d): row tau = d_x k(x, x_tau)^T (0 on invalid slots)."""
  diff, sq = _cross(kind, post, x)
  g = kernel_grad_scale(kind, sq, post.lengthscale, post.variance) * post.mask
  return g[:, None] * diff


def posterior_mean_grad(kind: str, post: GPPosterior, x):
  """grad mu(x) = J(x)^T alpha (eq. 5), analytic; x (d,) -> (d,).

  O(n d): sum_tau alpha_tau g(r_tau) (x - x_tau).
  """
  diff, sq = _cross(kind, post, x)
  g = kernel_grad_scale(kind, sq, post.lengthscale, post.variance) * post.mask
  return diff.T @ (g * post.alpha)


def posterior_grad_cov(kind: str, post: GPPosterior, x):
  """dsigma^2(x) = kappa I - J^T (K + sigma^2 I)^{-1} J (eq. 5); x (d,) -> (d, d).

  O(n^2 d + n d^2); for scores use :func:`posterior_grad_cov_trace`.
  """
  J = jacobian(kind, post, x)
  B = jax.scipy.linalg.solve_triangular(post.chol, J, lower=True)  # L^{-1} J (n, d)
  d = x.shape[0]
  return kappa(kind, post.lengthscale, post.variance) * jnp.eye(d, dtype=J.dtype) - B.T @ B


def posterior_grad_cov_trace(kind: str, post: GPPosterior, xs, ainv=None):
  """tr dsigma^2(x) = d kappa - tr(A^{-1} J J^T) for many points (specs §2.4.1, §6 step 7).

  Uses (J J^T)_{ab} = g_a g_b (x - x_a).(x - x_b), so one candidate costs
  O(n d + n^2) instead of the O(n^2 d) of a triangular solve.

  Args:
    kind: kernel.
    post: the fitted window.
    xs: (c, d) candidate points (raw coordinates).
    ainv: optional (n, n) A^{-1} (computed from ``post.chol`` if None).

  Returns:
    (c,) traces.
  """
  n, d = post.X.shape
  if ainv is None:
    ainv = jax.scipy.linalg.cho_solve((post.chol, True), jnp.eye(n, dtype=post.X.dtype))
  G = post.gram                                              # (n, n) X X^T
  gn = jnp.diagonal(G)
  xc = xs - post.center                                      # (c, d)
  cx = xc @ post.X.T                                         # (c, n)
  cc = jnp.sum(xc * xc, axis=1)                              # (c,)
  sq = jnp.maximum(cc[:, None] - 2.0 * cx + gn[None, :], 0.0)
  g = kernel_grad_scale(kind, sq, post.lengthscale, post.variance) * post.mask  # (c, n)
  # sum_ab g_a g_b A^{-1}_ab D_ab with D_ab = (x - x_a).(x - x_b) = |x|^2 - x.x_a - x.x_b + x_a.x_b,
  # expanded so no (c, n, n) tensor is formed (A^{-1} symmetric):
  #   |x|^2 g^T A^{-1} g - 2 (g o cx)^T A^{-1} g + g^T (A^{-1} o G) g;  O(c n^2) time, O(c n) memory.
  ag = g @ ainv                                              # (c, n)
  quad = (cc * jnp.sum(g * ag, axis=1) - 2.0 * jnp.sum(g * cx * ag, axis=1)
          + jnp.sum(g * (g @ (ainv * G)), axis=1))
  return d * kappa(kind, post.lengthscale, post.variance) - quad


def log_marginal_likelihood(kind: str, X, y, mask, lengthscale, variance=1.0, noise=1e-6,
                            jitter=None):
  """log p(y | X, l) of the masked window (for ``lengthscale=auto``); scalar."""
  center = jnp.sum(jnp.where(mask[:, None], X, 0.0), 0) / jnp.maximum(jnp.sum(mask), 1)
  post = fit(kind, X, y, mask, center, lengthscale, variance, noise, jitter)
  yv = jnp.where(mask, y, 0.0)
  logdet = 2.0 * jnp.sum(jnp.where(mask, jnp.log(jnp.diagonal(post.chol)), 0.0))
  n = jnp.sum(mask)
  return -0.5 * yv @ post.alpha - 0.5 * logdet - 0.5 * n * jnp.log(2.0 * jnp.pi)


def select_lengthscale(kind: str, X, y, mask, grid, variance=1.0, noise=1e-6):
  """The grid lengthscale of largest marginal likelihood (ML-II on a log-grid,
  the vectorised stand-in of the code's 20-restart sklearn fit, specs §6).

  Args:
    grid: (g,) candidate lengthscales.

  Returns:
    scalar lengthscale.
  """
  grid = jnp.asarray(grid, X.dtype)
  lml = jax.vmap(lambda l: log_marginal_likelihood(kind, X, y, mask, l, variance, noise))(grid)
  lml = jnp.where(jnp.isfinite(lml), lml, -jnp.inf)
  return grid[jnp.argmax(lml)]


def optimal_gamma(g, c, grad_f):
  """Prop. 1: argmin_gamma ||g + gamma c - grad F||^2 = (grad F - g)^T c / ||c||^2 (eq. 10,
  with the square on the norm, specs §4 item 1); 0 when c = 0."""
  cc = jnp.sum(c * c)
  return jnp.where(cc > 0, jnp.sum((grad_f - g) * c) / jnp.where(cc > 0, cc, 1.0), 0.0)
