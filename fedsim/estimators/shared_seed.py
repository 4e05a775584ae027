"""Shared-seed perturbations and scalar-only zeroth-order steps (DeComFL / HiSo,
Li et al. 2025; specs/hiso.md §2, §6).

Every party derives the same perturbation from a shared key and the indices
(round r, local step k, perturbation p), so a direction never travels: only the
scalars do.

* Key of one perturbation (spec §6, "Seeds -> perturbations"):
  ``perturbation_key(shared, r, k, p) = fold_in(fold_in(fold_in(shared, r), k), p)``.
  The hierarchy means that changing P or tau never changes the directions of
  the indices that remain (spec §7 item 10).
* Direction (eq. 8 and eq. 10): ``z = H^{-1/2} u`` with ``u ~ N(0, I_d)``; H is
  diagonal, so ``z_j = u_j * s_j`` with the per-round scale ``s = 1 / sqrt(H)``
  (``s = None`` is H = I, DeComFL: z = u).
* Gradient scalar, one per perturbation, on one mini-batch shared by every
  evaluation of the step (common random numbers; [code]):

  - ``forward`` (eq. 1, eq. 8, App. E eq. 112): ``g_p = (f(x + mu z_p) - f(x)) / mu``,
    with f(x) evaluated once and shared by the P perturbations;
  - ``central`` ([code] default of the vanilla DeComFL estimator):
    ``g_p = (f(x + mu z_p) - f(x - mu z_p)) / (2 mu)``.

* Step (App. E eq. 113 as intended, Alg. 2b line 5; spec §2.5):
  ``Delta x = (1/P) sum_p g_p z_p``.

Memory stays O(d) for any P: directions are regenerated from their keys inside
a loop over p and accumulated, never stored as a (P, d) matrix (spec §6 pitfall
5). The accumulation order is fixed (p = 0, 1, ..., P-1, elementwise), so the
same scalars give the same bits wherever the step is rebuilt, inside a vmap or
outside it.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

FD_SCHEMES = ("forward", "central")


def perturbation_key(shared_key: jax.Array, r, k, p) -> jax.Array:
  """The key of perturbation p of local step k in round r (spec §6).

  Args:
    shared_key: the run's shared-perturbation key (identical for every party).
    r, k, p: int32 scalars (may be traced): round, local step, perturbation.

  Returns:
    A PRNG key.
  """
  return jax.random.fold_in(jax.random.fold_in(jax.random.fold_in(shared_key, r), k), p)


def gaussian(shared_key: jax.Array, r, k, p, dim: int, dtype=jnp.float32) -> jax.Array:
  """u_{r,k,p} ~ N(0, I_d): (dim,) of ``dtype`` from :func:`perturbation_key`."""
  return jax.random.normal(perturbation_key(shared_key, r, k, p), (dim,), dtype)


def inverse_sqrt(h: jax.Array) -> jax.Array:
  """s = H^{-1/2} for a diagonal H > 0 stored as its diagonal (d,)."""
  return 1.0 / jnp.sqrt(h)


def direction(shared_key: jax.Array, r, k, p, scale: jax.Array | None, dim: int,
              dtype=jnp.float32) -> jax.Array:
  """z_{r,k,p} = H_r^{-1/2} u_{r,k,p} (eq. 8 / eq. 10).

  Args:
    scale: (d,) s = H^{-1/2} (see :func:`inverse_sqrt`), or None for H = I
      (DeComFL, z = u).

  Returns:
    (dim,) direction of ``dtype``.
  """
  u = gaussian(shared_key, r, k, p, dim, dtype)
  return u if scale is None else u * scale


def scalars_and_step(f: Callable[[jax.Array], jax.Array], x: jax.Array, shared_key: jax.Array, r, k,
                     num_perturbations: int, smoothing, scale: jax.Array | None,
                     scheme: str = "forward"):
  """The P gradient scalars of one local step and the step they encode.

  Args:
    f: ``(d,) -> scalar``, the client's mini-batch objective (one batch for all
      evaluations of the step); only queried.
    x: (d,) the client's current local iterate x^{(i)}_{r,k}.
    shared_key, r, k: identify the step's shared directions.
    num_perturbations: P (static).
    smoothing: mu > 0.
    scale: (d,) H_r^{-1/2} or None (H = I).
    scheme: ``forward`` (paper eq. 1/8) or ``central`` ([code] vanilla DeComFL).

  Returns:
    ``(g, step)``: g (P,) the scalars g^{(i)}_{r,k,p} (the uplink payload of the
    step) and step (d,) = (1/P) sum_p g_p z_p, the client's Delta x^{(i)}_{r,k}
    (App. E eq. 113). Queries: P + 1 evaluations of f (forward) or 2 P (central).

  Raises:
    ValueError: unknown scheme.
  """
  if scheme not in FD_SCHEMES:
    raise ValueError(f"unknown finite-difference scheme {scheme!r}; accepted: {', '.join(FD_SCHEMES)}")
  dim = x.shape[0]
  f0 = f(x) if scheme == "forward" else None

  def per_perturbation(acc, p):
    z = direction(shared_key, r, k, p, scale, dim, x.dtype)
    if scheme == "forward":
      assert f0 is not None  # set above for the forward scheme
      g = (f(x + smoothing * z) - f0) / smoothing                             # eq. 8
    else:
      g = (f(x + smoothing * z) - f(x - smoothing * z)) / (2 * smoothing)    # [code] central
    g = g.astype(x.dtype)
    return acc + g * z, g

  acc, g = jax.lax.scan(per_perturbation, jnp.zeros_like(x), jnp.arange(num_perturbations))
  return g, acc / num_perturbations


def step_from_scalars(g: jax.Array, shared_key: jax.Array, r, k, scale: jax.Array | None, dim: int,
                      dtype=jnp.float32) -> jax.Array:
  """Rebuilds Delta x_{r,k} = (1/P) sum_p g_p z_{r,k,p} from P scalars (Alg. 2 line 14,
  Alg. 2a line 5, App. E eq. 113).

  Args:
    g: (P,) scalars (the server's averaged g_{r,k,p}, or one client's).
    shared_key, r, k: identify the directions.
    scale: (d,) H_r^{-1/2} or None (H = I).
    dim: d (static).

  Returns:
    (dim,) the step, accumulated over p in the same order as
    :func:`scalars_and_step` (bitwise the same for the same scalars).
  """
  g = g.astype(dtype)

  def per_perturbation(acc, p):
    return acc + g[p] * direction(shared_key, r, k, p, scale, dim, dtype), None

  acc, _ = jax.lax.scan(per_perturbation, jnp.zeros((dim,), dtype), jnp.arange(g.shape[0]))
  return acc / g.shape[0]
