"""DZOPA: the distributed zeroth-order primal-dual algorithm of Yi, Zhang, Yang,
Chai, Johansson ("Zeroth-order algorithms for stochastic distributed nonconvex
optimization", Automatica 2022, arXiv 2106.02958), the peer-to-peer baseline
of the FedZO paper's black-box attack comparison (Fang et al. 2022, §V-A, Fig. 1a and
Fig. 2; specs/fedzo.md §2.4 (b)).

The FedZO paper runs it on a complete graph of the N clients, with the
two-point estimator replaced by the mini-batch estimator of its eq. 2, eta =
0.005 and mu = 0.001. Every client is active in every iteration; one ``round``
is one iteration. The per-client state x_i (and the dual v_i) has leading axis
N and the client update is ``vmap``-ped over all N clients.

Laplacian of the complete graph: L = N I - 1 1^T, so
(L x)_i = sum_j L_ij x_j = N x_i - sum_j x_j: one pairwise sum over the client
axis, never an N x N matrix.

Two forms (``variant``):

* ``paper`` (default): the primal-dual update of Yi et al. [recall,
  unverified], with g_i = the mean of ``local_steps`` eq.-2 estimates at x_i:

      x_i <- x_i - eta (alpha (L x)_i + beta v_i + g_i)
      v_i <- v_i + eta beta (L x)_i,                      v_i^0 = 0,

  both right-hand sides at the iteration's old (x, v).
* ``code``: the authors' ``alg_DZOPA.py`` [code]: no dual variable, a
  hard-coded consensus weight gamma_c = 0.01, and G_i the mean of local_ep = 5
  eq.-2 estimates, all at the same x_i (fresh mini-batch and directions each):

      x_i <- x_i - gamma_c (L x)_i - eta G_i.

  With ``alpha = gamma_c / eta``, ``beta = 0`` and sphere directions the paper
  form is the code form (up to rounding of eta * alpha). The code's estimator
  (``GradEst``) scales by d whatever the direction law, so under ``code`` a
  Gaussian law is multiplied by d (sphere, the default, is unchanged).

Estimate h (h = 0..local_steps-1) of client i uses ``fold_in(k_i, h)`` split
into a data key (the b1-sample mini-batch shared by all b2 + 1 queries) and a
direction key, with k_i = ``rng.client_key(k_clients, i)`` (global id), the
same scheme as FedZO's local step h, so DZOPA with N = 1, one estimate and no
coupling terms is FedZO with N = M = H = 1, i.e. one step of ZO-SGD.

Ledgers per iteration (summed over the N clients):

* queries: N * local_steps * b1 (b2 + 1) (b1 -> 1 on tasks without samples);
  with the code's local_ep = 5 this is FedZO's budget with H = 5.
* bytes: every client needs sum_j x_j. We count each client sending its x_i
  once (d float32 up) and receiving the sum once (d float32 down), i.e. the
  cost of a relay / all-reduce, which equals FedZO's per-client ledger. A
  literal point-to-point exchange on the complete graph costs (N - 1) d reals
  each way per client; multiply ``bytes_down`` by N - 1 for that accounting.
  The dual v_i is local and never sent.

``solution(state)`` is the mean of the x_i (the "global" perturbation the
authors score for attack accuracy).
"""

from __future__ import annotations

from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp

from fedsim import config
from fedsim.algorithms.local import BYTES_PER_REAL, flat_problem, flat_solution
from fedsim.config import did_you_mean, hparam
from fedsim.core import rng
from fedsim.core.errors import ConfigError
from fedsim.core.reduce import pairwise_sum
from fedsim.core.types import FederatedAlgorithm, Task, make_stats
from fedsim.estimators import finite_difference

VARIANTS = ("paper", "code")


@chex.dataclass(frozen=True)
class DZOPAConfig:
  """DZOPA hyperparameters (Fang et al. 2022, §V-A; specs/fedzo.md §2.4 (b), §2.5).

  Attributes:
    lr: eta = 0.005 [paper, §V-A].
    smoothing: mu = 0.001 [paper, §V-A].
    batch_size: b1 = 25 [code: run_DZOPA.sh ``--local_bs=25``; the paper only
      says "mini-batch estimator (2)", whose attack values are b1 = 25].
    fd_directions: b2 = 20 [code: run_DZOPA.sh ``--num_dir=20``; FedZO's own
      attack value].
    local_steps: estimates averaged per iteration; None picks the variant's
      value: 1 for ``paper`` (one eq.-2 estimate g_i^e per iteration, as in
      Yi et al.) and 5 for ``code`` (run_DZOPA.sh ``--local_ep=5``, the query
      budget of FedZO with H = 5) [code].
    direction: direction law of the estimator, ``sphere`` (eq. 2, and the
      code's ``GradEst`` default), ``gaussian`` or ``orthogonal``.
    variant: ``paper`` (primal-dual form, default) or ``code``.
    alpha: consensus (primal Laplacian) weight of the paper form, 2.0
      [inferred: eta * alpha = 0.01 is the code's consensus weight gamma_c].
    beta: dual weight of the paper form, 1.0 [recall, unverified: Yi et al.
      take alpha = kappa_1 beta, eta = kappa_2 / beta with kappa_1 above a
      constant > 1; alpha / beta = 2 satisfies that and keeps the disagreement
      modes stable: on the complete graph (eigenvalue N) the (x, v) recursion
      is stable iff eta beta^2 < alpha and eta alpha N < 2 + eta^2 beta^2 N / 2].
    consensus_weight: gamma_c = 0.01 of the ``code`` variant [code:
      alg_DZOPA.py, hard-coded ``gamma = 0.01``].
  """
  lr: float = hparam(5e-3, help="client learning rate (eta)", low=0, low_open=True, finite=True,
                     source="Fang et al. 2022, §V-A")
  smoothing: float = hparam(1e-3, help="finite-difference smoothing radius (mu)", low=0, low_open=True,
                            finite=True, source="Fang et al. 2022, §V-A")
  batch_size: int = hparam(25, help="samples per local step (b1 / B)", low=1,
                           source="[code] run_DZOPA.sh --local_bs=25")
  fd_directions: int = hparam(20, help="finite-difference directions per step (b2 / Q)", low=1,
                              source="[code] run_DZOPA.sh --num_dir=20")
  local_steps: int | None = hparam(None, help="estimates averaged per iteration (None: 1 for variant=paper, "
                                   "5 for code)", low=1, source="[code] run_DZOPA.sh --local_ep=5")
  direction: str = hparam("sphere", help="direction law: sphere (eq. 2), gaussian, orthogonal",
                          choices=finite_difference.LAWS, source="Fang et al. 2022, eq. 2")
  variant: str = hparam("paper", help="paper (primal-dual form), code (the authors' code preset)",
                        choices=VARIANTS)
  alpha: float = hparam(2.0, help="DZOPA consensus (primal Laplacian) weight alpha", low=0, finite=True,
                        source="inferred: eta alpha = the code's gamma_c = 0.01")
  beta: float = hparam(1.0, help="DZOPA dual step beta (0: no dual)", low=0, finite=True,
                       source="Yi et al.: alpha / beta > 1")
  consensus_weight: float = hparam(0.01, help="DZOPA code variant: consensus weight gamma_c", low=0,
                                   low_open=True, finite=True, source="[code] alg_DZOPA.py gamma = 0.01")

  def __post_init__(self):
    config.validate(self)


class DZOPAState(NamedTuple):
  """Per-client state, leading axis N.

  Attributes:
    x: (N, d) float32, the clients' primal iterates x_i.
    v: (N, d) float32, the dual variables v_i (v^0 = 0; stays 0 in the
      ``code`` variant, which has no dual).
  """
  x: jax.Array
  v: jax.Array


DEFAULT_LOCAL_STEPS = {"paper": 1, "code": 5}
"""Estimates per iteration when ``local_steps`` is None: one for the paper form (Yi et al.), the
code's ``--local_ep=5`` for ``code`` (run_DZOPA.sh) [code]."""


def resolve_local_steps(local_steps: int | None, variant: str) -> int:
  """``local_steps`` or, when None, the variant's default (:data:`DEFAULT_LOCAL_STEPS`).

  >>> resolve_local_steps(None, "code"), resolve_local_steps(None, "paper"), resolve_local_steps(3, "code")
  (5, 1, 3)
  """
  if local_steps is None:
    return DEFAULT_LOCAL_STEPS["code" if variant == "code" else "paper"]
  return int(local_steps)


def validate(variant: str, direction: str, local_steps: int, batch_size: int, fd_directions: int):
  """Checks the options shared by DZOPA and ZONE-S.

  Raises:
    ConfigError: unknown variant or direction law, or a non-positive count.
  """
  if variant not in VARIANTS:
    raise ConfigError("variant", f"unknown {variant!r}{did_you_mean(variant, VARIANTS)}; "
                                 f"accepted: {', '.join(VARIANTS)}")
  if direction not in finite_difference.LAWS:
    raise ConfigError("direction", f"unknown {direction!r}{did_you_mean(direction, finite_difference.LAWS)}; "
                                   f"accepted: {', '.join(finite_difference.LAWS)}")
  for flag, value in (("local_steps", local_steps), ("batch_size", batch_size),
                      ("fd_directions", fd_directions)):
    if value < 1:
      raise ConfigError(flag, f"must be a positive integer; got {value}")


def make_mean_estimate(task: Task, loss_flat, *, num_estimates: int, batch_size: int,
                       fd_directions: int, smoothing, direction: str, scale_by_dim: bool = False):
  """Builds ``mean_estimate(x, client, key) -> (d,)`` for one client.

  G = (1/J) sum_{h<J} e_h, with e_h the mini-batch two-point estimate of seed
  001 eq. 2 at the same point x:
  e_h = (s / (mu b2)) sum_n v_n ((1/b1) sum_m F(x + mu v_n, xi_m) - (1/b1) sum_m F(x, xi_m)),
  s = d for sphere / orthogonal directions, 1 for Gaussian ones
  (``fd_gradient``). Estimate h draws its batch and directions from
  ``split(fold_in(key, h))`` = (data key, direction key).

  Args:
    task: the task (``sample_batch``).
    loss_flat: ``(x (d,), batch) -> scalar``, f_i on a batch; only queried.
    num_estimates: J (static), estimates averaged.
    batch_size: b1 (static).
    fd_directions: b2 (static).
    smoothing: mu.
    direction: direction law.
    scale_by_dim: the authors' ``GradEst`` [code]: the scale is d whatever the
      law, so Gaussian estimates are multiplied by d (no change on the sphere).

  Returns:
    ``mean_estimate``: (d,) float32 x, one client's row of ``client_data``, a
    key -> (d,) float32 G. Costs J b1 (b2 + 1) queries.
  """

  def mean_estimate(x, client, key):
    d = x.shape[0]
    extra = d / finite_difference.direction_scale(direction, d) if scale_by_dim else 1.0

    def one(acc, h):
      k_data, k_dir = jax.random.split(jax.random.fold_in(key, h))
      batch = task.sample_batch(client, k_data, batch_size)
      e = finite_difference.fd_gradient(lambda z: loss_flat(z, batch), x, k_dir, fd_directions,
                                        smoothing, direction)
      if extra != 1.0:
        e = extra * e
      return acc + e, None

    total, _ = jax.lax.scan(one, jnp.zeros_like(x), jnp.arange(num_estimates))
    return total / num_estimates

  return mean_estimate


def laplacian_times(x: jax.Array) -> jax.Array:
  """(L x) for the complete-graph Laplacian L = N I - 1 1^T.

  Args:
    x: (N, d) float, one row per client.

  Returns:
    (N, d): row i is sum_j L_ij x_j = N x_i - sum_j x_j (sum in pairwise order).
  """
  n = x.shape[0]
  return n * x - pairwise_sum(x)[None, :]


def make_dzopa(task: Task, cfg: DZOPAConfig, name: str = "dzopa") -> FederatedAlgorithm:
  """Builds DZOPA on the complete graph of the task's N clients.

  Args:
    task: the task; all N clients are active every iteration.
    cfg: hyperparameters (see :class:`DZOPAConfig`).
    name: registry name.

  Returns:
    A :class:`FederatedAlgorithm` whose state is :class:`DZOPAState` and whose
    ``round`` is one DZOPA iteration.

  Raises:
    ConfigError: unknown variant or direction, non-positive counts.
  """
  n = task.num_clients
  h = resolve_local_steps(cfg.local_steps, cfg.variant)
  validate(cfg.variant, cfg.direction, h, cfg.batch_size, cfg.fd_directions)
  finite_difference.check_directions(cfg.direction, cfg.fd_directions, task.dim, task.name)
  d = task.dim
  unravel = flat_solution(task)
  mean_estimate = make_mean_estimate(
      task, lambda x, b: task.loss(unravel(x), b), num_estimates=h, batch_size=cfg.batch_size,
      fd_directions=cfg.fd_directions, smoothing=cfg.smoothing, direction=cfg.direction,
      scale_by_dim=cfg.variant == "code")
  queries = n * h * (cfg.batch_size if task.stochastic else 1) * (cfg.fd_directions + 1)

  def init(key, shared_key):
    del shared_key  # no draws shared by all parties (rng.init_keys)
    x0, _ = flat_problem(task, key)
    x = jnp.broadcast_to(x0, (n, d))  # every client starts at x^0 (the code: zeros)
    return DZOPAState(x=x, v=jnp.zeros_like(x))

  def round_fn(state: DZOPAState, key, data):
    """One iteration.

    Args:
      state: x, v (N, d) float32.
      key: the round key.
      data: ``task.data``.

    Returns:
      (new state, RoundStats).
    """
    _, k_clients, _ = rng.round_subkeys(key)
    keys = rng.client_keys(k_clients, jnp.arange(n, dtype=jnp.int32))
    g = jax.vmap(mean_estimate)(state.x, data["clients"], keys)  # (N, d)
    lx = laplacian_times(state.x)                                  # (N, d)
    if cfg.variant == "code":
      x = state.x - cfg.consensus_weight * lx - cfg.lr * g
      v = state.v
    else:
      x = state.x - cfg.lr * (cfg.alpha * lx + cfg.beta * state.v + g)
      v = state.v + (cfg.lr * cfg.beta) * lx
    stats = make_stats(queries=queries, bytes_up=n * d * BYTES_PER_REAL,
                       bytes_down=n * d * BYTES_PER_REAL, participants=n)
    return DZOPAState(x=x, v=v), stats

  def solution(state: DZOPAState):
    return unravel(pairwise_sum(state.x) / n)

  return FederatedAlgorithm(name=name, init=init, round=round_fn, solution=solution, hparams=cfg)


# Registry line for fedsim/algorithms/__init__.py:
#   from fedsim.algorithms.dzopa import DZOPAConfig, make_dzopa
#   "dzopa": (DZOPAConfig, {}, make_dzopa),
# and, for the authors' version,
#   "dzopa_code": (DZOPAConfig, {"variant": "code"}, make_dzopa),
