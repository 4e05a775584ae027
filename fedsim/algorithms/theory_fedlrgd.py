r"""Theory helpers for FedLRGD / FedAve (Jadbabaie et al. 2023; specs/fedlrgd.md §2.3, §2.4, §4).

* Theorem 2's prescriptions: S of eq. (48) and r of eq. (47), evaluated in log
  space (e^{eta(d+1)} and (2 eta + 2 d)^{eta d} overflow float64 quickly), with
  clear errors outside their domain; Gamma(FedLRGD) = r^2 + r s + r S + phi m r.
* Theorem 3 / App. D: T(b) of eq. (80), the numerical optimum of (79), and
  Gamma(FedAve) = T (b + phi tau m).
* Theorem 1: the threshold e sqrt(d) 2^d (l+d)^d, the explicit bound, the
  Hölder kernels ||y - vartheta||_2^eta of §3.3 S1, tail energies and fitted
  log-log slopes; App. C's 90%-energy approximate rank (eq. (77)).
* Lemma 2's inexact-GD bound, checkable run by run; Proposition 1's regime.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math

import numpy as np


def _single_thread_blas():
  """Single-threaded BLAS/LAPACK for the host SVDs below: for matrices of a few
  thousand rows threads buy little, and on shared cores OpenBLAS threads can
  make a 1000 x 1000 SVD 20x slower (measured: 0.26 s vs 5.5 s on 2 busy cores)."""
  try:
    from threadpoolctl import threadpool_limits
  except ImportError:  # pragma: no cover - threadpoolctl comes with scikit-learn
    return contextlib.nullcontext()
  return threadpool_limits(limits=1, user_api="blas")


def _check(cond, message):
  if not cond:
    raise ValueError(message)


# ----------------------------------------------------------------------------------------------
# Theorem 2: eqs. (47)-(48).
# ----------------------------------------------------------------------------------------------

def theorem2_eps_max(B: float, p: int, mu: float) -> float:
  """The largest accuracy Theorem 2 covers: 9 (B+3)^4 p / (8 mu)."""
  return 9.0 * (B + 3.0) ** 4 * p / (8.0 * mu)


def theorem2_delta(gap0: float, B: float, p: int, mu: float) -> float:
  """Delta = F(theta^(0)) - F_* + 9 (B+3)^4 p / (2 mu) (§2.3)."""
  return gap0 + 9.0 * (B + 3.0) ** 4 * p / (2.0 * mu)


def _check_common(kappa, B, p, mu, gap0, eps):
  _check(kappa >= 1, f"kappa must be >= 1; got {kappa}")
  _check(mu > 0, f"mu must be > 0; got {mu}")
  _check(B > 0, f"B must be > 0; got {B}")
  _check(p >= 1, f"p must be >= 1; got {p}")
  _check(gap0 >= 0, f"gap0 = F(theta0) - F_* must be >= 0; got {gap0}")
  eps_max = theorem2_eps_max(B, p, mu)
  _check(0 < eps <= eps_max, f"eps must be in (0, 9(B+3)^4 p/(8 mu) = {eps_max:.6g}]; got {eps} "
         "(Theorem 2's domain)")


def theory_S(*, kappa: float, gap0: float, B: float, p: int, mu: float, eps: float) -> int:
  """S = ceil(log(Delta/eps) / log(kappa/(kappa-1))), eq. (48).

  Raises:
    ValueError: outside Theorem 2's domain (eps not in (0, 9(B+3)^4 p/(8 mu)],
      kappa < 1, mu <= 0, ...). kappa = 1 gives S = 1 (one step of 1/L1 = 1/mu
      is exact on a quadratic with kappa = 1).
  """
  _check_common(kappa, B, p, mu, gap0, eps)
  if kappa == 1:
    return 1
  delta = theorem2_delta(gap0, B, p, mu)
  return max(1, math.ceil(math.log(delta / eps) / math.log(kappa / (kappa - 1.0))))


def theory_log_r(*, d: int, eta: float, alpha: float, L2: float, kappa: float, B: float, p: int,
                 mu: float, gap0: float, eps: float) -> float:
  """log of the real number inside the ceiling of eq. (47) (natural log).

      r = ceil(max{ e sqrt(d) 2^d (eta+d)^d,
                    ( L2^d eta^d e^{eta(d+1)} d^{eta/2} (2eta+2d)^{eta d} / (eta-1)^{eta d}
                      * [kappa Delta / ((kappa-1) eps)]^{d/2} )^{1/(eta - (2 alpha + 2) d)} })

  Raises:
    ValueError: eta <= (2 alpha + 2) d, alpha < 1, L2 <= 0, kappa <= 1 or any
      condition of :func:`theory_S`.
  """
  _check_common(kappa, B, p, mu, gap0, eps)
  _check(d >= 1, f"d must be >= 1; got {d}")
  _check(alpha >= 1, f"alpha must be >= 1 (assumption (8)); got {alpha}")
  _check(L2 > 0, f"L2 must be > 0; got {L2}")
  _check(eta > (2 * alpha + 2) * d, f"eta must be > (2 alpha + 2) d = {(2 * alpha + 2) * d}; got {eta} "
         "(Theorem 2 needs eta > (2 alpha + 2) d)")
  _check(kappa > 1, f"kappa must be > 1 in (47); got {kappa}")
  delta = theorem2_delta(gap0, B, p, mu)
  log_first = 1.0 + 0.5 * math.log(d) + d * math.log(2.0) + d * math.log(eta + d)
  log_inner = (d * math.log(L2) + d * math.log(eta) + eta * (d + 1) + 0.5 * eta * math.log(d)
               + eta * d * math.log(2 * eta + 2 * d) - eta * d * math.log(eta - 1.0)
               + 0.5 * d * math.log(kappa * delta / ((kappa - 1.0) * eps)))
  log_second = log_inner / (eta - (2 * alpha + 2) * d)
  return max(log_first, log_second)


def theory_r(**kwargs) -> int | float:
  """r of eq. (47) (same arguments as :func:`theory_log_r`): a Python int, or
  ``math.inf`` when it exceeds float64 (use :func:`theory_log_r` then)."""
  lr = theory_log_r(**kwargs)
  if lr > 709.0:
    return math.inf
  # Guard the ceiling against a log/exp round trip landing just above an integer.
  x = math.exp(lr)
  return math.ceil(x - 1e-9 * x)


def gamma_fedlrgd(r: float, s: int, S: int, phi: float, m: int) -> float:
  """Gamma(FedLRGD) = r^2 + r s + r S + phi m r (Theorem 2)."""
  return r * r + r * s + r * S + phi * m * r


@dataclasses.dataclass(frozen=True)
class Prescription:
  """Theorem 2's (r, S, Gamma) with log10 r for astronomically large r."""
  r: int | float
  S: int
  log10_r: float
  gamma: float


def theorem2_prescription(*, d, eta, alpha, L2, kappa, B, p, mu, gap0, eps, s, m, phi) -> Prescription:
  """(r, S, Gamma) of Theorem 2 for the given problem constants (errors as in (47)/(48))."""
  S = theory_S(kappa=kappa, gap0=gap0, B=B, p=p, mu=mu, eps=eps)
  lr = theory_log_r(d=d, eta=eta, alpha=alpha, L2=L2, kappa=kappa, B=B, p=p, mu=mu, gap0=gap0, eps=eps)
  r = theory_r(d=d, eta=eta, alpha=alpha, L2=L2, kappa=kappa, B=B, p=p, mu=mu, gap0=gap0, eps=eps)
  gamma = gamma_fedlrgd(r, s, S, phi, m) if r != math.inf else math.inf
  return Prescription(r=r, S=S, log10_r=lr / math.log(10.0), gamma=gamma)


# ----------------------------------------------------------------------------------------------
# Theorem 3 / App. D (FedAve).
# ----------------------------------------------------------------------------------------------

def gamma_fedave(T: int, b: int, phi: float, tau: float, m: int) -> float:
  """Gamma(FedAve) = T (b + phi tau m) (App. D: every epoch is Type A)."""
  return T * (b + phi * tau * m)


def fedave_T(b: float, *, C: float, m: int, eps_rel: float) -> float:
  """Eq. (80): the T making C (m^2/(T^2 b^2) + b/(m T)) = eps' (eps' = eps/p, (78))."""
  _check(b > 0 and C > 0 and m >= 1 and eps_rel > 0, "b, C, eps_rel must be > 0 and m >= 1")
  a = b * C / (2.0 * m * eps_rel)
  return a + math.sqrt(a * a + C * m * m / (eps_rel * b * b))


@dataclasses.dataclass(frozen=True)
class FedAveOptimum:
  """Numerical optimum of (79) over integer b (T real, eq. (80))."""
  b: int
  T: float
  gamma: float
  ratio: float          # gamma / (phi tau m (C/eps')^{3/4}); Theorem 3: in [3/4, 8]
  b_band: tuple         # ((m/2)(eps'/C)^{1/4}, 2 m (eps'/C)^{1/4}), eq. (89)


def fedave_optimum(*, C: float, m: int, phi: float, tau: float, eps_rel: float,
                   b_max: int | None = None) -> FedAveOptimum:
  """min_b T(b) (b + phi tau m) over b = 1..b_max (default 100 m), eq. (79)."""
  b_max = b_max or 100 * m
  bs = np.arange(1, b_max + 1, dtype=np.float64)
  a = bs * C / (2.0 * m * eps_rel)
  T = a + np.sqrt(a * a + C * m * m / (eps_rel * bs * bs))
  g = T * (bs + phi * tau * m)
  i = int(np.argmin(g))
  scale = phi * tau * m * (C / eps_rel) ** 0.75
  q = (eps_rel / C) ** 0.25
  return FedAveOptimum(b=i + 1, T=float(T[i]), gamma=float(g[i]), ratio=float(g[i] / scale),
                       b_band=(0.5 * m * q, 2.0 * m * q))


# ----------------------------------------------------------------------------------------------
# Theorem 1, App. C.
# ----------------------------------------------------------------------------------------------

def holder_l(eta: float) -> int:
  """l = ceil(eta) - 1 (assumption 3)."""
  return math.ceil(eta) - 1


def theorem1_threshold(d: int, eta: float) -> float:
  """e sqrt(d) 2^d (l + d)^d: Theorem 1 holds for r at least this."""
  l = holder_l(eta)
  return math.e * math.sqrt(d) * 2 ** d * (l + d) ** d


def theorem1_bound(d: int, eta: float, L2: float, r: float) -> float:
  """Theorem 1's bound on (1/(nk)) ||M - M_r||_F^2:
  L2^2 e^{2 eta/d} d^{eta/d} 4^eta (l+d)^{2 eta} / (l!)^2 * r^{-2 eta/d}."""
  l = holder_l(eta)
  return (L2 ** 2 * math.exp(2 * eta / d) * d ** (eta / d) * 4 ** eta * (l + d) ** (2 * eta)
          / math.factorial(l) ** 2 * r ** (-2 * eta / d))


def holder_kernel_matrix(d: int, eta: float, n: int, k: int, seed: int = 0) -> np.ndarray:
  """M[j, k] = ||y^(j) - vartheta^(k)||_2^eta with y, vartheta ~ U[0,1]^d (§3.3 S1 (a)); (n, k) float64."""
  rng = np.random.default_rng(seed)
  y, th = rng.uniform(size=(n, d)), rng.uniform(size=(k, d))
  return np.sqrt(np.sum((y[:, None, :] - th[None, :, :]) ** 2, axis=-1)) ** eta


def singular_values(M) -> np.ndarray:
  """The singular values of the (n, k) matrix ``M``, descending, float64 (host LAPACK, one thread)."""
  with _single_thread_blas():
    return np.linalg.svd(np.asarray(M, np.float64), compute_uv=False)


def tail_energies(M: np.ndarray) -> np.ndarray:
  """t[r] = (1/(n k)) sum_{j > r} sigma_j^2 = (1/(nk)) ||M - M_r||_F^2 (Eckart-Young), r = 0..min(n,k)."""
  sv2 = singular_values(M) ** 2
  tails = np.concatenate([np.cumsum(sv2[::-1])[::-1], [0.0]])
  return tails / M.size


def fitted_slope(rs, values) -> float:
  """Least-squares slope of log(values) against log(rs)."""
  return float(np.polyfit(np.log(np.asarray(rs, np.float64)), np.log(np.asarray(values, np.float64)), 1)[0])


def approximate_rank(M, energy: float = 0.9) -> int:
  """Eq. (77): min{J : sum_{i<=J} sigma_i(M)^2 >= energy ||M||_F^2}; 0 for M = 0."""
  sv2 = singular_values(M) ** 2
  total = sv2.sum()
  if total == 0:
    return 0
  return int(np.searchsorted(np.cumsum(sv2), energy * total * (1 - 1e-12)) + 1)


# ----------------------------------------------------------------------------------------------
# Lemma 2, Proposition 1.
# ----------------------------------------------------------------------------------------------

def lemma2_bound(gap0: float, kappa: float, L1: float, err_sq) -> float:
  """Lemma 2 ([5, Lemma 2.1]): F(theta^(S)) - F_* <= (1-1/kappa)^S gap0
  + (1/(2 L1)) sum_{g=1}^S (1-1/kappa)^{S-g} ||grad^F(theta^(g-1)) - grad F(theta^(g-1))||^2.

  Args:
    gap0: F(theta^(0)) - F_*.
    err_sq: (S,) squared gradient errors at theta^(0..S-1).
  """
  e = np.asarray(err_sq, np.float64)
  S = e.shape[0]
  rho = 1.0 - 1.0 / kappa
  weights = rho ** (S - 1 - np.arange(S))      # gamma = 1..S -> exponent S - gamma
  return float(rho ** S * gap0 + np.sum(weights * e) / (2.0 * L1))


def proposition1_eta_threshold(d: int, alpha: float = 1.0, xi: float = 0.75) -> float:
  """Proposition 1's smoothness condition: FedLRGD's Gamma is o(FedAve's) when
  eta >= (c1 + 2 alpha + 2) d with c1 >= 2/xi, xi in (0, 3/4); the boundary
  xi -> 3/4 gives eta > (8/3 + 2 alpha + 2) d."""
  return (2.0 / xi + 2 * alpha + 2) * d


def proposition1_predicts_win(d: int, eta: float, alpha: float = 1.0) -> bool:
  """True when (d, eta) is in Proposition 1's regime (eta above the xi -> 3/4 threshold)."""
  return eta > proposition1_eta_threshold(d, alpha)
