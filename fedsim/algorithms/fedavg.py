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
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import optax

from fedsim.algorithms.local import make_delta_averaging, local_optimizer
from fedsim.core.types import FederatedAlgorithm, Task

SERVER_OPTIMIZERS = ("sgd", "adam", "yogi", "adagrad")


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
    beta1, beta2: server moment decays, Reddi et al. 2021 §5: 0.9, 0.99.
    tau: adaptivity epsilon, Reddi et al. 2021 §5: 1e-3.
    client_block: clients per vmapped block (0 = all at once; None = the
      backend's default, fedsim.core.client_map.default_client_block); an
      execution setting, not a hyperparameter of the method.
  """
  lr: float = 0.1
  local_steps: int = 5
  batch_size: int = 20
  clients_per_round: int | None = None
  weighting: str = "uniform"
  server_optimizer: str = "sgd"
  server_lr: float = 1.0
  beta1: float = 0.9
  beta2: float = 0.99
  tau: float = 1e-3
  client_block: int | None = None


def server_optimizer(cfg: FedAvgConfig) -> optax.GradientTransformation:
  """The optax server optimizer applied to the pseudo-gradient -mean_delta.

  ``adam`` is ``optax.adam(server_lr, b1, b2, eps=tau)`` (optax bias-corrects the
  moments; Reddi et al.'s Alg. 2 does not, which only rescales early steps).
  ``yogi`` and ``adagrad`` follow Reddi et al. 2021 Alg. 2 exactly (no bias
  correction; Yogi's v_{-1} = tau^2, Adagrad's v_{-1} = 0): m_t = b1 m + (1 - b1) Delta,
  Yogi v_t = v - (1 - b2) Delta^2 sign(v - Delta^2), Adagrad v_t = v + Delta^2,
  x <- x + eta m_t / (sqrt(v_t) + tau). (optax.yogi bias-corrects and starts m
  at its accumulator value, so it is not FedYogi.)
  """
  name, lr = cfg.server_optimizer, cfg.server_lr
  if name == "sgd":
    return optax.sgd(lr)
  if name == "adam":
    return optax.adam(lr, b1=cfg.beta1, b2=cfg.beta2, eps=cfg.tau)
  if name in ("yogi", "adagrad"):
    return optax.chain(_scale_by_reddi(name, cfg.beta1, cfg.beta2, cfg.tau), optax.scale(-lr))
  raise ValueError(f"unknown server optimizer {name!r}; accepted: {', '.join(SERVER_OPTIMIZERS)}")


def _scale_by_reddi(kind: str, beta1, beta2, tau) -> optax.GradientTransformation:
  """m_t / (sqrt(v_t) + tau) of Reddi et al. 2021 Alg. 2 for FedYogi / FedAdagrad.

  Receives the pseudo-gradient g = -Delta; m, v track g (v depends on g^2 only).
  """
  tmap = jax.tree_util.tree_map

  def init(params):
    v0 = tau ** 2 if kind == "yogi" else 0.0
    return (tmap(jnp.zeros_like, params), tmap(lambda p: jnp.full_like(p, v0), params))

  def update(g, state, params=None):
    del params
    m, v = state
    m = tmap(lambda a, b: beta1 * a + (1 - beta1) * b, m, g)
    if kind == "yogi":
      v = tmap(lambda a, b: a - (1 - beta2) * b * b * jnp.sign(a - b * b), v, g)
    else:
      v = tmap(lambda a, b: a + b * b, v, g)
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
