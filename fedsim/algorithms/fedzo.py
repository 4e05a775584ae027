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
import jax

from fedsim.algorithms.local import make_delta_averaging, local_optimizer
from fedsim.algorithms.fedavg import FedAvgConfig, server_optimizer
from fedsim.algorithms.fzoos import with_accept_if_improves
from fedsim.channels import aircomp
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
    aggregation: ``mean`` (Alg. 1, exact average of the M sampled deltas) or
      ``aircomp`` (§IV: every device computes, those with |h| >= h_min transmit
      over the air; ``clients_per_round`` is then ignored).
    snr_db, h_min, channel_var, noise_model, empty_round, transceiver: the
      AirComp channel (fedsim.channels.aircomp.AirCompConfig; paper: h_min = 0.8,
      h ~ CN(0, 1), SNR in {-10, -5, 0} dB).
    client_block: clients per vmapped block (0 = all at once; None = the
      backend's default, fedsim.core.client_map.default_client_block); an
      execution setting, not a hyperparameter of the method.
    accept_if_improves: 0 (default, Alg. 1) or 1: after each round keep x_{r-1}
      unless the true F = (1/N) sum_i f_i (all N clients' full data, outside
      the query model, not counted) improves: the FZooS authors' server rule
      for every method they compare (seed 000 code, settings.py l. 79-80;
      fedsim.algorithms.fzoos.accept_if_improves, shared).
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
  aggregation: str = "mean"
  snr_db: float = 0.0
  h_min: float = 0.8
  channel_var: float = 1.0
  noise_model: str = "real_full"
  empty_round: str = "skip"
  transceiver: str = "shortcut"
  client_block: int | None = None
  accept_if_improves: int = 0


AGGREGATIONS = ("mean", "aircomp")


def aircomp_config(cfg: FedZOConfig) -> aircomp.AirCompConfig:
  """The channel settings carried by a FedZO config."""
  return aircomp.AirCompConfig(snr_db=cfg.snr_db, h_min=cfg.h_min, channel_var=cfg.channel_var,
                               noise_model=cfg.noise_model, empty_round=cfg.empty_round,
                               transceiver=cfg.transceiver)


def aircomp_aggregator(num_devices: int, ch: aircomp.AirCompConfig):
  """AirComp aggregation (seed 001 §IV) as an ``Aggregator`` over all N devices:
  channels from the server key (so noisy and noise-free runs share M_t and every
  client's local randomness), M_t = {|h| >= h_min}, y = eq. 17."""

  def aggregate(deltas, weights, key):
    del weights  # eq. 17: equal weights 1/|M_t|
    k_chan, k_noise = jax.random.split(key)
    h, mask = aircomp.participating_channels(k_chan, num_devices, ch)
    y, m_size, _ = aircomp.aggregate(deltas, h, mask, k_noise, ch)
    return y, m_size

  return aggregate


def zo_oracle(direction: str, fd_directions: int, smoothing):
  """The FedZO estimator (eq. 2) as an oracle ``(f, x, key) -> (d,)``."""
  return functools.partial(_zo, direction=direction, b2=fd_directions, mu=smoothing)


def _zo(f, x, key, *, direction, b2, mu):
  return finite_difference.fd_gradient(f, x, key, b2, mu, direction)


def make_fedzo(task: Task, cfg: FedZOConfig, name: str = "fedzo") -> FederatedAlgorithm:
  """Builds FedZO (seed 001 Alg. 1).

  Raises:
    ValueError: unknown direction law, local optimizer or weighting;
      accept_if_improves not 0 or 1.
  """
  if cfg.direction not in finite_difference.LAWS:
    raise ValueError(f"unknown direction {cfg.direction!r}; accepted: {', '.join(finite_difference.LAWS)}")
  if cfg.aggregation not in AGGREGATIONS:
    raise ValueError(f"unknown aggregation {cfg.aggregation!r}; accepted: {', '.join(AGGREGATIONS)}")
  if cfg.accept_if_improves not in (0, 1):
    raise ValueError(f"accept_if_improves must be 0 or 1; got {cfg.accept_if_improves!r}")
  aggregator, m = None, cfg.clients_per_round or task.num_clients
  if cfg.aggregation == "aircomp":
    ch = aircomp_config(cfg)
    aircomp.validate(ch)
    aggregator, m = aircomp_aggregator(task.num_clients, ch), task.num_clients
  alg = make_delta_averaging(
      name, task, zo_oracle(cfg.direction, cfg.fd_directions, cfg.smoothing),
      local_opt=local_optimizer(cfg.local_optimizer, cfg.lr),
      server_opt=server_optimizer(FedAvgConfig(server_lr=1.0)), local_steps=cfg.local_steps,
      batch_size=cfg.batch_size, clients_per_round=m, weighting=cfg.weighting, aggregator=aggregator, queries_per_step=(cfg.batch_size if task.stochastic else 1) * (cfg.fd_directions + 1),
      client_block=cfg.client_block, hparams=cfg)
  if cfg.accept_if_improves:
    alg = with_accept_if_improves(alg, task)
  return alg
