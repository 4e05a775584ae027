"""ZONE-S: the star-topology (server) zeroth-order primal-dual method of
Hajinezhad, Hong, Garcia ("ZONE: Zeroth-order nonconvex multiagent
optimization over networks", IEEE TAC 64(10), 2019), the second baseline of
the FedZO paper's black-box attack comparison (Fang et al. 2022, §V-A, Fig. 1a and
Fig. 2, rho = 500, mu = 0.001; specs/fedzo.md §2.4 (c)).

Augmented Lagrangian of min sum_i f_i(x_i) s.t. x_i = x0, with penalty rho and
duals lambda_i. Per iteration r one client i_r, drawn uniformly, is active.
With G = (1/J) sum_{h<J} e_h, the mean of J mini-batch estimates (Fang et al. 2022
eq. 2) at the server point x0:

    x_i        = x0 - (1 / (alpha rho)) (lambda_i + G)           (active i = i_r)
    lambda_i  <- lambda_i + alpha rho (x_i - x0)
    x_j        = x0,  lambda_j unchanged                          (j != i_r)
    x0        <- sum_j (rho x_j + lambda_j^prev) / (N rho),

where lambda^prev is every dual *before* this iteration's update (the code's
``dual_DeltaImage_prev``, set before ``client_update``), so the new server
point uses the active client's new x_i but its old lambda_i. We evaluate the
server step in the algebraically identical delta form
x0 + sum_j (rho (x_j - x0) + lambda_j^prev) / (N rho), which keeps float32
precision when rho is large (the code's rho = 5e5); the sum over the client
axis is a pairwise sum.

With alpha = 1/N this is an incremental aggregated gradient step: the new
lambda_i is -G, and x0 <- x0 - (1/rho) (G_new - G_i^old + (1/N) sum_j G_j^old)
(a SAGA-like step of size 1/rho).

Variants (``variant``):

* ``paper``: rho = 500 [paper, §V-A], sphere directions with scale d (eq. 2).
* ``code``: the authors' ``alg_ZONES.py`` [code]: rho = 1/lr = 5e5
  (run_ZONES.sh ``--lr=0.000002``; the line rho = sqrt(r+1) is overwritten),
  Gaussian directions u ~ N(0, I_d) still multiplied by d/mu (``GradEst`` with
  ``form='gaussian'``), i.e. ``fd_gradient`` with law ``gaussian`` times d.

Both: J = ``local_steps`` = 100 batches of b1 = 25 samples with b2 = 1
direction each [code: run_ZONES.sh ``--local_ep=100 --local_bs=25
--num_dir=1``]; the FedZO paper states no J. The original ZONE-S lets J grow
with r (O(T) samples per iteration, Fang et al. 2022, §I); the code fixes it.

Vectorisation: the one active row is gathered (data row, lambda_i), its G is
computed, and the new x_i / lambda_i are scattered back with ``.at[i].set``;
no Python branching on traced values. The active client's key is
``rng.client_key(k_clients, i_r)`` (global id); estimate h uses
``split(fold_in(key, h))`` = (data key, direction key).

Ledgers per iteration: queries J b1 (b2 + 1) (b1 -> 1 on tasks without
samples), from the one active client; bytes_down = d float32 (x0 to the
active client), bytes_up = d float32 (its x_i; the server mirrors lambda_i,
whose update is a function of x_i, x0 and lambda_i^prev, and the inactive
copies x_j = x0 are server-side bookkeeping); participants = 1.

``solution(state)`` is the server point x0.
"""

from __future__ import annotations

from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp

from fedsim import config
from fedsim.algorithms.dzopa import VARIANTS, make_mean_estimate, validate
from fedsim.algorithms.local import BYTES_PER_REAL, flat_problem, flat_solution
from fedsim.config import hparam
from fedsim.core import rng
from fedsim.core.errors import ConfigError
from fedsim.core.reduce import pairwise_sum
from fedsim.core.sampling import sample_clients
from fedsim.core.types import FederatedAlgorithm, Task, make_stats
from fedsim.estimators import finite_difference

PAPER_RHO = 500.0     # Fang et al. 2022, §V-A
CODE_RHO = 1.0 / 2e-6  # alg_ZONES.py rho = 1 / lr, run_ZONES.sh --lr=0.000002


@chex.dataclass(frozen=True)
class ZONESConfig:
  """ZONE-S hyperparameters (Fang et al. 2022, §V-A; specs/fedzo.md §2.4 (c), §2.5).

  Attributes:
    rho: penalty; None picks the variant's value: 500 for ``paper`` [paper,
      §V-A], 5e5 = 1/lr for ``code`` [code, run_ZONES.sh lr = 2e-6].
    smoothing: mu = 0.001 [paper, §V-A].
    alpha: dual step factor; None means 1/N [code: ``self.alpha = 1.0 /
      num_users``; consistent with ZONE-S, recall].
    local_steps: J = 100, estimates averaged per iteration [code:
      ``--local_ep=100``].
    batch_size: b1 = 25 [code: ``--local_bs=25``].
    fd_directions: b2 = 1 [code: ``--num_dir=1``].
    direction: direction law; None picks the variant's: ``sphere`` (eq. 2)
      for ``paper``, ``gaussian`` for ``code``.
    variant: ``paper`` (default) or ``code`` (the authors' estimator scale d
      for every law, and rho = 5e5).
  """
  rho: float | None = hparam(None, help="ZONE-S penalty rho (None: 500 for variant=paper, 1/lr = 5e5 "
                             "for code)", low=0, low_open=True, finite=True,
                             source="Fang et al. 2022, §V-A; [code] run_ZONES.sh lr = 2e-6")
  smoothing: float = hparam(1e-3, help="finite-difference smoothing radius (mu)", low=0, low_open=True,
                            finite=True, source="Fang et al. 2022, §V-A")
  alpha: float | None = hparam(None, help="ZONE-S dual step factor alpha (None: 1/N)", low=0, low_open=True,
                               finite=True, source="[code] self.alpha = 1.0 / num_users")
  local_steps: int = hparam(100, help="estimates averaged per iteration (J)", low=1,
                            source="[code] --local_ep=100")
  batch_size: int = hparam(25, help="samples per local step (b1 / B)", low=1, source="[code] --local_bs=25")
  fd_directions: int = hparam(1, help="finite-difference directions per step (b2 / Q)", low=1,
                              source="[code] --num_dir=1")
  direction: str | None = hparam(None, help="direction law (None: sphere for variant=paper, gaussian "
                                 "for code)", choices=finite_difference.LAWS, source="Fang et al. 2022, eq. 2")
  variant: str = hparam("paper", help="paper, code (the authors' estimator scale d for every law, "
                        "rho = 5e5)", choices=VARIANTS)

  def __post_init__(self):
    config.validate(self)


class ZONESState(NamedTuple):
  """Server point and per-client state (leading axis N).

  Attributes:
    x0: (d,) float32, the server point.
    x: (N, d) float32, the local copies x_i after the last iteration (x_j =
      the then server point for the inactive clients).
    lam: (N, d) float32, the duals lambda_i (lambda^0 = 0, as the code's
      zero-initialised ``dual_DeltaImage_curr``).
  """
  x0: jax.Array
  x: jax.Array
  lam: jax.Array


def make_zone_s(task: Task, cfg: ZONESConfig, name: str = "zone_s") -> FederatedAlgorithm:
  """Builds ZONE-S on the task's N clients (star topology, one active client per iteration).

  Args:
    task: the task.
    cfg: hyperparameters (see :class:`ZONESConfig`).
    name: registry name.

  Returns:
    A :class:`FederatedAlgorithm` whose state is :class:`ZONESState` and whose
    ``round`` is one ZONE-S iteration.

  Raises:
    ConfigError: unknown variant or direction, non-positive counts, rho or alpha.
  """
  n = task.num_clients
  direction = cfg.direction or ("gaussian" if cfg.variant == "code" else "sphere")
  validate(cfg.variant, direction, cfg.local_steps, cfg.batch_size, cfg.fd_directions)
  finite_difference.check_directions(direction, cfg.fd_directions, task.dim, task.name)
  rho = float(cfg.rho if cfg.rho is not None else (CODE_RHO if cfg.variant == "code" else PAPER_RHO))
  alpha = float(cfg.alpha if cfg.alpha is not None else 1.0 / n)
  if not rho > 0:
    raise ConfigError("rho", f"must be positive; got {rho}")
  if not alpha > 0:
    raise ConfigError("alpha", f"must be positive; got {alpha}")
  d = task.dim
  unravel = flat_solution(task)
  mean_estimate = make_mean_estimate(
      task, lambda x, b: task.loss(unravel(x), b), num_estimates=cfg.local_steps,
      batch_size=cfg.batch_size, fd_directions=cfg.fd_directions, smoothing=cfg.smoothing,
      direction=direction, scale_by_dim=cfg.variant == "code")
  queries = cfg.local_steps * (cfg.batch_size if task.stochastic else 1) * (cfg.fd_directions + 1)

  def init(key, shared_key):
    del shared_key  # no draws shared by all parties (rng.init_keys)
    x0, _ = flat_problem(task, key)
    return ZONESState(x0=x0, x=jnp.broadcast_to(x0, (n, d)), lam=jnp.zeros((n, d), x0.dtype))

  def round_fn(state: ZONESState, key, data):
    """One iteration.

    Args:
      state: x0 (d,), x and lam (N, d), float32.
      key: the round key.
      data: ``task.data``.

    Returns:
      (new state, RoundStats).
    """
    k_sample, k_clients, _ = rng.round_subkeys(key)
    i = sample_clients(k_sample, n, 1)[0]  # i_r, uniform over the N clients
    client = jax.tree_util.tree_map(lambda a: a[i], data["clients"])
    g = mean_estimate(state.x0, client, rng.client_key(k_clients, i))  # (d,) G at x0
    lam_i = state.lam[i]
    x_i = state.x0 - (1.0 / (alpha * rho)) * (lam_i + g)
    lam_i_new = lam_i + (alpha * rho) * (x_i - state.x0)
    x = jnp.broadcast_to(state.x0, (n, d)).at[i].set(x_i)   # x_j = x0 for j != i_r
    lam_prev = state.lam
    x0 = state.x0 + pairwise_sum(rho * (x - state.x0) + lam_prev) / (n * rho)
    stats = make_stats(queries=queries, bytes_up=d * BYTES_PER_REAL, bytes_down=d * BYTES_PER_REAL,
                       participants=1)
    return ZONESState(x0=x0, x=x, lam=state.lam.at[i].set(lam_i_new)), stats

  return FederatedAlgorithm(name=name, init=init, round=round_fn,
                            solution=lambda s: unravel(s.x0), hparams=cfg)


# Registry line for fedsim/algorithms/__init__.py:
#   from fedsim.algorithms.zone_s import ZONESConfig, make_zone_s
#   "zone_s": (ZONESConfig, {}, make_zone_s),
# and, for the authors' version,
#   "zone_s_code": (ZONESConfig, {"variant": "code"}, make_zone_s),
