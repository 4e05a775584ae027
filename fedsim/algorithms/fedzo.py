"""FedZO (Fang et al., "Communication-Efficient Stochastic Zeroth-Order
Optimization for Federated Learning", seed 001, Algorithm 1).

FedAvg with the gradient replaced by the mini-batch two-point estimator of
eq. 2: per local step, b1 samples (``batch_size``) and b2 directions
(``fd_directions``) uniform on the unit sphere, e = (d/(mu b1 b2)) sum sum
v (F(x + mu v, xi) - F(x, xi)); x <- x - eta e (eq. 6) for H local steps; the
server averages the M deltas with equal weights and adds them (no server
learning rate). Clients are stateless.

Queries per client step: b1 (b2 + 1) (F(x, xi_m) shared by the b2 directions).
"""

from __future__ import annotations

import functools

import chex

from fedsim.algorithms.local import make_delta_averaging, local_optimizer
from fedsim.algorithms.fedavg import FedAvgConfig, server_optimizer
from fedsim.core.types import FederatedAlgorithm, Task
from fedsim.estimators import finite_difference


@chex.dataclass(frozen=True)
class FedZOConfig:
  """FedZO hyperparameters, paper defaults (seed 001 §V, specs/fedzo.md §2.5).

  Attributes:
    lr: eta = 0.001.
    smoothing: mu = 0.001.
    batch_size: b1 = 25.
    fd_directions: b2 = 20.
    local_steps: H = 5 (the softmax and AirComp experiments' value).
    clients_per_round: M (None = N).
    direction: ``sphere`` (paper), ``gaussian`` or ``orthogonal`` (FZooS baselines).
    local_optimizer: ``sgd`` (paper eq. 6) or ``adam`` (FZooS baselines).
    weighting: ``uniform`` (paper eq. 1) or ``size``.
  """
  lr: float = 1e-3
  smoothing: float = 1e-3
  batch_size: int = 25
  fd_directions: int = 20
  local_steps: int = 5
  clients_per_round: int | None = None
  direction: str = "sphere"
  local_optimizer: str = "sgd"
  weighting: str = "uniform"


def zo_oracle(direction: str, fd_directions: int, smoothing):
  """The FedZO estimator (eq. 2) as an oracle ``(f, x, key) -> (d,)``."""
  return functools.partial(_zo, direction=direction, b2=fd_directions, mu=smoothing)


def _zo(f, x, key, *, direction, b2, mu):
  return finite_difference.fd_gradient(f, x, key, b2, mu, direction)


def make_fedzo(task: Task, cfg: FedZOConfig, name: str = "fedzo") -> FederatedAlgorithm:
  """Builds FedZO (seed 001 Alg. 1).

  Raises:
    ValueError: unknown direction law, local optimizer or weighting.
  """
  if cfg.direction not in finite_difference.LAWS:
    raise ValueError(f"unknown direction {cfg.direction!r}; accepted: {', '.join(finite_difference.LAWS)}")
  return make_delta_averaging(
      name, task, zo_oracle(cfg.direction, cfg.fd_directions, cfg.smoothing),
      local_opt=local_optimizer(cfg.local_optimizer, cfg.lr),
      server_opt=server_optimizer(FedAvgConfig(server_lr=1.0)), local_steps=cfg.local_steps,
      batch_size=cfg.batch_size, clients_per_round=cfg.clients_per_round or task.num_clients,
      weighting=cfg.weighting, queries_per_step=(cfg.batch_size if task.stochastic else 1) * (cfg.fd_directions + 1),
      hparams=cfg)
