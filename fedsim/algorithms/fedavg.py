"""FedAvg (McMahan et al. 2017) and FedOpt: FedAdam, FedYogi, FedAdagrad
(Reddi et al. 2021, "Adaptive Federated Optimization", Alg. 2).

Clients run ``local_steps`` steps of mini-batch SGD (optax.sgd) on their own
data from the current global model; the server averages the deltas
(``uniform`` or ``size`` weighting) and applies a server optimizer to the
pseudo-gradient -mean_delta. FedAvg's server optimizer is SGD with
``server_lr`` (1.0 gives plain averaging).

Queries: one per-example gradient evaluation counts one query, so a client
spends ``local_steps * batch_size`` per round. Bytes: d float32 down and d up
per participating client.

FedOpt's server step is Reddi et al. 2021 Alg. 2 written out
(:func:`scale_by_fedopt`), not optax's bias-corrected ``adam`` / ``yogi``.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import optax

from fedsim.algorithms.local import local_optimizer, make_delta_averaging
from fedsim.config import hparam, validate
from fedsim.core.types import FederatedAlgorithm, Task

SERVER_OPTIMIZERS = ("sgd", "adam", "yogi", "adagrad")
WEIGHTINGS = ("uniform", "size")


@chex.dataclass(frozen=True)
class FedAvgConfig:
  """FedAvg / FedOpt hyperparameters.

  Attributes:
    lr: client learning rate (SGD). 0.1 is tuned for the digits softmax main
      job (McMahan et al. 2017 grid-search it per task).
    local_steps: H, local SGD steps per round.
    batch_size: B, samples per local step (drawn with replacement).
    clients_per_round: M (None = all N, full participation).
    weighting: ``uniform`` (1/M) or ``size`` (n_i-weighted, McMahan et al. 2017).
    server_optimizer: ``sgd`` (FedAvg), ``adam``, ``yogi``, ``adagrad`` (FedOpt).
    server_lr: server learning rate eta (FedAvg: 1.0; FedOpt defaults from
      Reddi et al. 2021 App. D grids: 1e-2 for Adam/Yogi, 1e-1 for Adagrad).
    beta1, beta2: server moment decays, Reddi et al. 2021 §5: 0.9, 0.99
      (beta2 is unused by FedAdagrad).
    tau: adaptivity epsilon, Reddi et al. 2021 §5: 1e-3; also v_{-1} = tau^2.
    client_block: clients per vmapped block (0 = all at once; None = the
      backend's default, fedsim.core.client_map.default_client_block); an
      execution setting, not a hyperparameter of the method.
  """
  lr: float = hparam(0.1, help="client learning rate (eta)", low=0, low_open=True, finite=True,
                     source="tuned for the digits softmax main job (McMahan et al. 2017 grid-search it)")
  local_steps: int = hparam(5, help="local steps per round (H)", low=1)
  batch_size: int = hparam(20, help="samples per local step (b1 / B)", low=1)
  clients_per_round: int | None = hparam(None, help="clients sampled per round (M; None = all N)", low=1)
  weighting: str = hparam("uniform", help="aggregation weights: uniform (1/M), size (n_i-weighted)",
                          choices=WEIGHTINGS, source="McMahan et al. 2017")
  server_optimizer: str = hparam("sgd", help="server optimizer: sgd (FedAvg), adam, yogi, adagrad (FedOpt)",
                                 choices=SERVER_OPTIMIZERS, source="Reddi et al. 2021", cli=False)
  server_lr: float = hparam(1.0, help="server learning rate", low=0, low_open=True, finite=True,
                            source="Reddi et al. 2021 App. D")
  beta1: float = hparam(0.9, help="server first-moment decay (FedOpt)", low=0, high=1, high_open=True,
                        source="Reddi et al. 2021 §5")
  beta2: float = hparam(0.99, help="server second-moment decay (FedOpt)", low=0, high=1, high_open=True,
                        source="Reddi et al. 2021 §5")
  tau: float = hparam(1e-3, help="server adaptivity epsilon (FedOpt)", low=0, low_open=True, finite=True,
                      source="Reddi et al. 2021 §5")
  client_block: int | None = hparam(None, help="clients per vmapped block, 0 = all at once (speed/memory only)",
                                    low=0)

  def __post_init__(self):
    validate(self)


def server_optimizer(cfg: FedAvgConfig) -> optax.GradientTransformation:
  """The server optimizer applied to the pseudo-gradient -Delta_t (Delta_t the mean delta).

  ``sgd`` is ``optax.sgd(server_lr)``: x <- x + eta Delta_t (FedAvg with eta = 1).
  ``adam``, ``yogi`` and ``adagrad`` are Reddi et al. 2021 Alg. 2 exactly
  (:func:`scale_by_fedopt`): m_{-1} = 0, v_{-1} = tau^2 (line 1: v_{-1} >= tau^2),
  no bias correction, x <- x + eta m_t / (sqrt(v_t) + tau). optax's own
  ``adam`` / ``yogi`` are not: they bias-correct, and ``optax.yogi`` starts m
  at its accumulator value (and its ``initial_accumulator_value`` argument
  is what an earlier FedYogi passed for v_{-1}).

  Raises:
    ValueError: unknown ``server_optimizer``.
  """
  name, lr = cfg.server_optimizer, cfg.server_lr
  if name == "sgd":
    return optax.sgd(lr)
  if name in FEDOPT:
    return optax.chain(scale_by_fedopt(name, cfg.beta1, cfg.beta2, cfg.tau), optax.scale(-lr))
  raise ValueError(f"unknown server optimizer {name!r}; accepted: {', '.join(SERVER_OPTIMIZERS)}")


FEDOPT = ("adam", "yogi", "adagrad")


def scale_by_fedopt(kind: str, beta1, beta2, tau) -> optax.GradientTransformation:
  """m_t / (sqrt(v_t) + tau) of Reddi et al. 2021 Alg. 2 (FedAdagrad, FedYogi, FedAdam).

  With Delta_t the round's mean delta (lines 10-15)::

    m_t = beta1 m_{t-1} + (1 - beta1) Delta_t                              (line 11)
    FedAdagrad: v_t = v_{t-1} + Delta_t^2                                  (line 12)
    FedYogi:    v_t = v_{t-1} - (1 - beta2) Delta_t^2 sign(v_{t-1} - Delta_t^2)  (line 13)
    FedAdam:    v_t = beta2 v_{t-1} + (1 - beta2) Delta_t^2                (line 14)
    x_{t+1} = x_t + eta m_t / (sqrt(v_t) + tau)                            (line 15)

  from m_{-1} = 0 and v_{-1} = tau^2 (line 1 asks v_{-1} >= tau^2; the smallest
  value), no bias correction. It receives the pseudo-gradient g = -Delta_t, so
  m tracks -Delta_t (v depends on g^2 = Delta_t^2 only) and the caller's
  ``optax.scale(-eta)`` gives line 15. State: (m, v), pytrees like the params.

  Raises:
    ValueError: ``kind`` not in :data:`FEDOPT`.
  """
  if kind not in FEDOPT:
    raise ValueError(f"unknown FedOpt server optimizer {kind!r}; accepted: {', '.join(FEDOPT)}")
  tmap = jax.tree_util.tree_map

  def init(params):
    return (tmap(jnp.zeros_like, params), tmap(lambda p: jnp.full_like(p, tau ** 2), params))

  def second_moment(v, g):
    g2 = g * g
    if kind == "adagrad":
      return v + g2                                           # line 12
    if kind == "yogi":
      return v - (1 - beta2) * g2 * jnp.sign(v - g2)          # line 13
    return beta2 * v + (1 - beta2) * g2                       # line 14

  def update(g, state, params=None):
    del params
    m, v = state
    m = tmap(lambda a, b: beta1 * a + (1 - beta1) * b, m, g)  # line 11
    v = tmap(second_moment, v, g)
    return tmap(lambda a, b: a / (jnp.sqrt(b) + tau), m, v), (m, v)

  return optax.GradientTransformation(init, update)


def first_order_oracle(f, x, key):
  """The mini-batch stochastic gradient: grad of the batch-mean loss at x."""
  del key
  return jax.grad(f)(x)


def make_fedavg(task: Task, cfg: FedAvgConfig, name: str = "fedavg") -> FederatedAlgorithm:
  """Builds FedAvg (``server_optimizer='sgd'``) or a FedOpt variant.

  Raises:
    ValueError: unknown weighting or server optimizer.
  """
  return make_delta_averaging(
      name, task, first_order_oracle, local_opt=local_optimizer("sgd", cfg.lr),
      server_opt=server_optimizer(cfg), local_steps=cfg.local_steps, batch_size=cfg.batch_size,
      clients_per_round=cfg.clients_per_round or task.num_clients, weighting=cfg.weighting,
      queries_per_step=cfg.batch_size, client_block=cfg.client_block, hparams=cfg)
