"""FedZO (Fang et al., "Communication-Efficient Stochastic Zeroth-Order
Optimization for Federated Learning", Fang et al. 2022, Algorithm 1).

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
import math

import chex
import jax

from fedsim.algorithms.fedavg import WEIGHTINGS, FedAvgConfig, server_optimizer
from fedsim.algorithms.fzoos import with_accept_if_improves
from fedsim.algorithms.local import LOCAL_OPTIMIZERS, local_optimizer, make_delta_averaging
from fedsim.channels import aircomp
from fedsim.config import FieldError, hparam, validate
from fedsim.core.types import FederatedAlgorithm, Task
from fedsim.estimators import finite_difference

AGGREGATIONS = ("mean", "aircomp")


@chex.dataclass(frozen=True)
class FedZOConfig:
  """FedZO hyperparameters, paper defaults (Fang et al. 2022, §V, specs/fedzo.md §2.5).

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
      ``aircomp`` (§IV: every device computes, those with ``|h| >= h_min`` transmit
      over the air; ``clients_per_round`` is then ignored).
    snr_db, h_min, channel_var, noise_model, empty_round, transceiver: the
      AirComp channel (fedsim.channels.aircomp.AirCompConfig; paper: h_min = 0.8,
      h ~ CN(0, 1), SNR in {-10, -5, 0} dB).
    client_block: clients per vmapped block (0 = all at once; None = the
      backend's default, fedsim.core.client_map.default_client_block); an
      execution setting, not a hyperparameter of the method.
    direction_block: directions drawn and evaluated per block of the eq.-2
      estimator (0 = all b2 at once; None = the backend's default,
      fedsim.estimators.finite_difference.default_direction_block: 0 on CPU);
      B >= 1 holds (M, B, d) directions per step instead of (M, b2, d), same
      directions, equal up to rounding; an execution setting.
    accept_if_improves: 0 (default, Alg. 1) or 1: after each round keep x_{r-1}
      unless the true F = (1/N) sum_i f_i (all N clients' full data, outside
      the query model, not counted) improves: the FZooS authors' server rule
      for every method they compare (the code of Shu et al. 2023, settings.py l. 79-80;
      fedsim.algorithms.fzoos.accept_if_improves, shared).
  """
  lr: float = hparam(1e-3, help="client learning rate (eta)", low=0, low_open=True, finite=True,
                     source="Fang et al. 2022, §V-B")
  smoothing: float = hparam(1e-3, help="finite-difference smoothing radius (mu)", low=0, low_open=True,
                            finite=True, source="Fang et al. 2022, §V")
  batch_size: int = hparam(25, help="samples per local step (b1 / B)", low=1, source="Fang et al. 2022, §V")
  fd_directions: int = hparam(20, help="finite-difference directions per step (b2 / Q)", low=1,
                              source="Fang et al. 2022, §V")
  local_steps: int = hparam(5, help="local steps per round (H)", low=1, source="Fang et al. 2022, §V")
  clients_per_round: int | None = hparam(None, help="clients sampled per round (M; None = all N)", low=1)
  direction: str = hparam("sphere", help="direction law: sphere (paper), gaussian, orthogonal (FZooS baselines)",
                          choices=finite_difference.LAWS, source="Fang et al. 2022, eq. 5")
  local_optimizer: str = hparam("sgd", help="client optimizer: sgd (paper eq. 6), adam (FZooS baselines)",
                                choices=LOCAL_OPTIMIZERS)
  weighting: str = hparam("uniform", help="aggregation weights: uniform (1/M), size (n_i-weighted)",
                          choices=WEIGHTINGS, source="Fang et al. 2022, eq. 1")
  aggregation: str = hparam("mean", help="how deltas reach the server: mean (Alg. 1), aircomp (§IV; "
                            "clients_per_round is then ignored)", choices=AGGREGATIONS, source="Fang et al. 2022, §IV")
  snr_db: float = hparam(0.0, help="AirComp transmit SNR P/sigma_w^2 in dB; inf = noise-free (-inf, "
                         "infinite noise, is rejected)", low=-math.inf, low_open=True,
                         source="Fang et al. 2022, §V-C: -10, -5, 0 dB")
  h_min: float = hparam(0.8, help="AirComp participation threshold on |h|", low=0, source="Fang et al. 2022, §V-C")
  channel_var: float = hparam(1.0, help="AirComp E|h|^2: 1.0 (paper), 0.5 (authors' code)", low=0,
                              low_open=True, finite=True)
  noise_model: str = hparam("real_full", help="AirComp noise: real_full, complex_real_part, code_compat",
                            choices=aircomp.NOISE_MODELS)
  empty_round: str = hparam("skip", help="AirComp round with no device: skip (keep model), resample (code)",
                            choices=aircomp.EMPTY_ROUND_RULES)
  transceiver: str = hparam("shortcut", help="AirComp simulation: shortcut (eq. 17), full (eqs. 14-17)",
                            choices=aircomp.TRANSCEIVERS, source="Fang et al. 2022, §IV")
  client_block: int | None = hparam(None, help="clients per vmapped block, 0 = all at once (speed/memory only)",
                                    low=0)
  direction_block: int | None = hparam(None, help="directions per block of the estimator, 0 = all b2 at once "
                                       "(memory only; equal up to rounding)", low=0)
  accept_if_improves: int = hparam(0, help="1 keeps x_{r-1} unless the true F improves (FZooS authors' "
                                   "server rule; outside the query model)", choices=(0, 1),
                                   source="the code of Shu et al. 2023, settings.py l. 79-80")

  def __post_init__(self):
    validate(self)
    if self.transceiver == "full" and self.noise_model == "code_compat":  # Fang et al. 2022, §IV
      raise FieldError("noise_model", "code_compat (the authors' closed-form noise std) cannot be "
                       "simulated by transceiver=full; accepted with full: "
                       f"{', '.join(aircomp.FULL_NOISE_MODELS)}")


def aircomp_config(cfg: FedZOConfig) -> aircomp.AirCompConfig:
  """The channel settings carried by a FedZO config."""
  return aircomp.AirCompConfig(snr_db=cfg.snr_db, h_min=cfg.h_min, channel_var=cfg.channel_var,
                               noise_model=cfg.noise_model, empty_round=cfg.empty_round,
                               transceiver=cfg.transceiver)


def aircomp_aggregator(num_devices: int, ch: aircomp.AirCompConfig):
  """AirComp aggregation (Fang et al. 2022, §IV) as an ``Aggregator`` over all N devices:
  channels from the server key (so noisy and noise-free runs share M_t and every
  client's local randomness), ``M_t = {|h| >= h_min}``, y = eq. 17."""

  def aggregate(deltas, weights, key):
    del weights  # eq. 17: equal weights 1/|M_t|
    k_chan, k_noise = jax.random.split(key)
    h, mask = aircomp.participating_channels(k_chan, num_devices, ch)
    y, m_size, _ = aircomp.aggregate(deltas, h, mask, k_noise, ch)
    return y, m_size

  return aggregate


def zo_oracle(direction: str, fd_directions: int, smoothing, direction_block: int | None = None):
  """The FedZO estimator (eq. 2) as an oracle ``(f, x, key) -> (d,)``."""
  return functools.partial(_zo, direction=direction, b2=fd_directions, mu=smoothing, block=direction_block)


def _zo(f, x, key, *, direction, b2, mu, block=None):
  return finite_difference.fd_gradient(f, x, key, b2, mu, direction, block)


def make_fedzo(task: Task, cfg: FedZOConfig, name: str = "fedzo") -> FederatedAlgorithm:
  """Builds FedZO (Fang et al. 2022, Alg. 1).

  Raises:
    ValueError: unknown direction law, local optimizer or weighting;
      accept_if_improves not 0 or 1.
  """
  if cfg.direction not in finite_difference.LAWS:
    raise ValueError(f"unknown direction {cfg.direction!r}; accepted: {', '.join(finite_difference.LAWS)}")
  finite_difference.check_directions(cfg.direction, cfg.fd_directions, task.dim, task.name)
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
      name, task, zo_oracle(cfg.direction, cfg.fd_directions, cfg.smoothing, cfg.direction_block),
      local_opt=local_optimizer(cfg.local_optimizer, cfg.lr),
      server_opt=server_optimizer(FedAvgConfig(server_lr=1.0)), local_steps=cfg.local_steps,
      batch_size=cfg.batch_size, clients_per_round=m, weighting=cfg.weighting, aggregator=aggregator,
      queries_per_step=(cfg.batch_size if task.stochastic else 1) * (cfg.fd_directions + 1),
      client_block=cfg.client_block, hparams=cfg)
  if cfg.accept_if_improves:
    alg = with_accept_if_improves(alg, task)
  return alg
