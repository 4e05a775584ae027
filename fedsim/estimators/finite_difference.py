"""Two-point finite-difference (zeroth-order) gradient estimators.

The mini-batch estimator of FedZO (seed 001, eq. 2):

    e = 1/(b1 b2) sum_m sum_n (d v_n / mu) (F(x + mu v_n, xi_m) - F(x, xi_m)),

with v_n i.i.d. uniform on the unit sphere S^{d-1}. The caller passes ``f``, the
mini-batch mean (1/b1) sum_m F(., xi_m), so the same batch serves x and every
x + mu v_n (common random numbers) and F(x, .) is computed once, not b2 times.

Direction laws (``law``):

* ``sphere``: v ~ U(S^{d-1}), scale d (FedZO, seed 001 eq. 2). Unbiased for the
  ball-smoothed gradient; exactly unbiased for quadratics.
* ``gaussian``: u ~ N(0, I_d), scale 1 (Gaussian smoothing, Nesterov & Spokoiny).
* ``orthogonal``: Gaussian directions orthonormalised (QR), scale d: each column
  is marginally uniform on the sphere, so the estimate is unbiased like
  ``sphere`` and the b2 directions never repeat a subspace. The FZooS paper's
  baselines (seed 000, §2.2 of specs/fzoos.md) use these directions; their code
  divides by Q only (scale 1), which Adam's scale invariance hides.
"""

from collections.abc import Callable

import jax
import jax.numpy as jnp

LAWS = ("sphere", "gaussian", "orthogonal")


def directions(key: jax.Array, num: int, dim: int, law: str = "sphere",
               dtype=jnp.float32) -> jax.Array:
  """Draws ``num`` perturbation directions.

  Args:
    key: PRNG key.
    num: b2, number of directions (static).
    dim: d (static).
    law: one of :data:`LAWS`. ``orthogonal`` needs num <= dim.
    dtype: float dtype of the result.

  Returns:
    (num, dim) array; rows unit-norm for ``sphere`` / ``orthogonal``.

  Raises:
    ValueError: unknown law, or ``orthogonal`` with num > dim.
  """
  g = jax.random.normal(key, (num, dim), dtype)
  if law == "gaussian":
    return g
  if law == "sphere":
    return g * jax.lax.rsqrt(jnp.sum(g * g, axis=1, keepdims=True))
  if law == "orthogonal":
    if num > dim:
      raise ValueError(f"orthogonal directions need fd_directions <= dim; got {num} > {dim}")
    q, r = jnp.linalg.qr(g.T)          # (dim, num), orthonormal columns
    q = q * jnp.sign(jnp.diagonal(r))  # Haar-uniform (sign fix of the QR factor)
    return q.T
  raise ValueError(f"unknown direction law {law!r}; accepted: {', '.join(LAWS)}")


def check_directions(law: str, num: int, dim: int, task: str = "") -> None:
  """Raises ConfigError (``fd_directions``) before anything compiles where :func:`directions`
  would fail while tracing: ``orthogonal`` with num > dim."""
  if law == "orthogonal" and num > dim:
    from fedsim.core.errors import ConfigError
    on = f" on task {task}" if task else ""
    raise ConfigError("fd_directions", f"orthogonal directions need fd_directions <= dim = {dim}{on}; got {num}; "
                      f"use fd_directions <= {dim}, or direction=sphere or gaussian")


def direction_scale(law: str, dim: int) -> float:
  """The factor multiplying (F(x+mu v) - F(x)) v / mu: d on the sphere, 1 for Gaussians."""
  return float(dim) if law in ("sphere", "orthogonal") else 1.0


def fd_gradient(f: Callable[[jax.Array], jax.Array], x: jax.Array, key: jax.Array,
                num_directions: int, smoothing, law: str = "sphere") -> jax.Array:
  """The mini-batch two-point estimator of seed 001 eq. 2 (FedZO).

  Args:
    f: ``(d,) -> scalar``, the mini-batch mean objective (1/b1) sum_m F(x, xi_m);
      only queried, never differentiated.
    x: (d,) float, the point.
    key: PRNG key for the directions.
    num_directions: b2 (static).
    smoothing: mu > 0, the smoothing radius (may be traced).
    law: direction law, see module docstring.

  Returns:
    (d,) estimate ``(scale / (mu b2)) sum_n v_n (f(x + mu v_n) - f(x))``.
    Costs ``b1 (b2 + 1)`` sample queries (f is a b1-sample mean).
  """
  d = x.shape[0]
  v = directions(key, num_directions, d, law, x.dtype)
  with jax.default_matmul_precision("highest"):
    f0 = f(x)
    fp = jax.vmap(lambda vi: f(x + smoothing * vi))(v)
    scale = direction_scale(law, d) / (smoothing * num_directions)
    return scale * (v.T @ (fp - f0))
