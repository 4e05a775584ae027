"""Heterogeneous ill-conditioned diagonal quadratics: the whitening toy of Li et al. 2025
§5.1 (Fig. 4) made federated (specs/hiso.md §3.1, §3.4 substitute (a), §7 items
6 and 8).

    f_i(x) = (1/2) (x - b_i)^T A (x - b_i),   A = Diag(lambda),
    log lambda_j ~ N(0, sigma^2) i.i.d.  (§5.1: "log(Sigma) ~ N(0, 3I)"; the
    default sigma = sqrt(3) reads 3 as the variance, spec §3.1),
    b_i = b* + c (e_i - mean_j e_j),  b* ~ N(0, I_d), e_i ~ N(0, I_d),

with c = ``heterogeneity``. The centring makes mean_i b_i = b* exactly, so

    F(x) = (1/N) sum_i f_i(x) = (1/2) (x - b*)^T A (x - b*) + F*,
    F* = (1/(2N)) sum_i (b_i - b*)^T A (b_i - b*).

``isotropic=True`` is the control of spec §7 item 8: every eigenvalue equals
mean(lambda) (the same trace Tr A, so the same Lkappa), everything else
unchanged. f_i has no samples (``stochastic=False``); x_0 = 0.

``info`` carries the §5.1 / Fig. 4 quantities: L = max lambda, Tr A (= L kappa,
eq. 15), L d (eq. 14), kappa = Tr A / L, and the whitening rank
zeta(eps) = sum_j lambda_j / (lambda_j + eps) of H = Diag(lambda + eps) (eq. 16).
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from fedsim.core.types import Task

DEFAULT_SIGMA = math.sqrt(3.0)


TAIL = 1e-4
"""The eigenvalue of the d - k tail directions of a rank-k spectrum (``rank`` of :func:`spectrum`)."""


def spectrum(dim: int, sigma: float = DEFAULT_SIGMA, seed: int = 0, isotropic: bool = False,
             rank: int = 0) -> np.ndarray:
  """The eigenvalues lambda (dim,) float64: log-normal(0, sigma^2), or all equal
  to their mean when ``isotropic`` (same trace).

  With ``0 < rank < dim`` only the first ``rank`` are log-normal and the other
  dim - rank equal :data:`TAIL`: a low effective rank kappa = Tr A / L that stays
  (nearly) fixed as d grows (spec §7 item 5: "the same number of large eigenvalues").
  The first ``rank`` values are the same for every dim >= rank (one sequential draw),
  so a seed's spectra at two dimensions share their large eigenvalues.
  """
  lam = np.exp(sigma * np.random.default_rng([seed, 1]).standard_normal(dim))
  if 0 < rank < dim:
    lam[rank:] = TAIL
  return np.full(dim, lam.mean()) if isotropic else lam


def whitening_rank(lam: np.ndarray, eps: float) -> float:
  """zeta(eps) = Tr(H^{-1/2} A H^{-1/2}) for H = Diag(lambda + eps) (eq. 16, §5.1)."""
  return float(np.sum(lam / (lam + eps)))


def make_illcond_quadratic_task(dim: int, num_clients: int, heterogeneity: float = 1.0, *,
                                sigma: float = DEFAULT_SIGMA, isotropic: bool = False,
                                seed: int = 0, rank: int = 0) -> Task:
  """Builds the federated ill-conditioned quadratic.

  Args:
    dim: d >= 1.
    num_clients: N >= 1.
    heterogeneity: c >= 0, the spread of the client optima b_i around b*.
    sigma: standard deviation of log lambda (> 0; 0 gives A = I).
    isotropic: all eigenvalues equal to mean(lambda).
    seed: seed of lambda, b* and the b_i.
    rank: k >= 0; 0 < k < d keeps k log-normal eigenvalues and sets the rest to
      :data:`TAIL` (:func:`spectrum`); 0 (or k >= d): all d log-normal.

  Returns:
    A Task: client rows ``{"b": (d,), "lam": (d,)}`` float32 (lambda is stored
    per client so that a row is self-contained); ``loss(x, row)`` = f_i(x);
    ``evaluate`` gives ``objective`` = F(x) and ``optimality_gap`` = F(x) - F*.

  Raises:
    ValueError: dim or num_clients < 1, heterogeneity < 0 or sigma < 0.
  """
  if dim < 1 or num_clients < 1:
    raise ValueError(f"dim and num_clients must be >= 1; got {dim}, {num_clients}")
  if not heterogeneity >= 0 or not sigma >= 0 or rank < 0:
    raise ValueError(f"heterogeneity, sigma and rank must be >= 0; got {heterogeneity}, {sigma}, {rank}")
  lam = spectrum(dim, sigma, seed, isotropic, rank)
  gen = np.random.default_rng([seed, 2])
  b_star = gen.standard_normal(dim)
  e = gen.standard_normal((num_clients, dim))
  b = b_star + heterogeneity * (e - e.mean(axis=0))
  f_star = float(0.5 * np.mean(np.sum(lam * (b - b_star) ** 2, axis=1)))
  lam32 = jnp.asarray(lam, jnp.float32)
  data = {"clients": {"b": jnp.asarray(b, jnp.float32),
                      "lam": jnp.broadcast_to(lam32, (num_clients, dim))},
          "sizes": jnp.ones((num_clients,), jnp.int32),
          "eval": {"b_star": jnp.asarray(b_star, jnp.float32), "lam": lam32}}

  def loss(x, row):
    r = x - row["b"].astype(x.dtype)
    return 0.5 * jnp.sum(row["lam"].astype(x.dtype) * r * r)

  def evaluate(x, data):
    ev = data["eval"]
    r = x - ev["b_star"].astype(x.dtype)
    gap = 0.5 * jnp.sum(ev["lam"].astype(x.dtype) * r * r)
    return {"objective": gap + f_star, "optimality_gap": gap}

  L, trace = float(lam.max()), float(lam.sum())
  info = {"dim": dim, "sigma": sigma, "isotropic": isotropic, "spectrum_rank": rank, "heterogeneity": heterogeneity,
          "seed": seed, "F_star": f_star, "L": L, "trace_A": trace, "L_times_d": L * dim,
          "effective_rank": trace / L, "condition_number": L / float(lam.min()),
          "zeta": {str(eps): whitening_rank(lam, eps) for eps in (0.1, 1.0, 10.0)}}
  return Task(name="illcond_quadratic", num_clients=num_clients,
              init_params=lambda key: jnp.zeros((dim,)),  # float32 (float64 under x64)
              data=data, loss=loss, sample_batch=lambda client, key, batch_size: client,
              full_batch=lambda c: c, evaluate=evaluate, stochastic=False, info=info)
