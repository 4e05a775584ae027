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


def server_optimizer(cfg: FedAvgConfig) -> optax.GradientTransformation:
  """The optax server optimizer applied to the pseudo-gradient -mean_delta.

  ``adam`` is ``optax.adam(server_lr, b1, b2, eps=tau)`` (optax bias-corrects the
  moments; Reddi et al.'s Alg. 2 does not, which only rescales early steps);
  ``yogi`` is ``optax.yogi`` with v_{-1} = tau^2 (Reddi et al. Alg. 2 requires
  v_{-1} >= tau^2); ``adagrad`` is Reddi et al.'s FedAdagrad: momentum beta1 on
  the pseudo-gradient, v_t = v_{t-1} + Delta_t^2, step m_t / (sqrt(v_t) + tau).
  """
  name, lr = cfg.server_optimizer, cfg.server_lr
  if name == "sgd":
    return optax.sgd(lr)
  if name == "adam":
    return optax.adam(lr, b1=cfg.beta1, b2=cfg.beta2, eps=cfg.tau)
  if name == "yogi":
    return optax.yogi(lr, b1=cfg.beta1, b2=cfg.beta2, eps=cfg.tau,
                      initial_accumulator_value=cfg.tau ** 2)
  if name == "adagrad":
    return _fedadagrad(lr, cfg.beta1, cfg.tau)
  raise ValueError(f"unknown server optimizer {name!r}; accepted: {', '.join(SERVER_OPTIMIZERS)}")


def _fedadagrad(lr, beta1, tau) -> optax.GradientTransformation:
  """Reddi et al. 2021 Alg. 2 (FedAdagrad) from optax parts: m_t / (sqrt(v_t) + tau)."""

  def scale_by_fedadagrad():
    def init(params):
      z = jax.tree_util.tree_map(lambda p: p * 0, params)
      return (z, z)

    def update(g, state, params=None):
      m, v = state
      m = jax.tree_util.tree_map(lambda a, b: beta1 * a + (1 - beta1) * b, m, g)
      v = jax.tree_util.tree_map(lambda a, b: a + b * b, v, g)
      out = jax.tree_util.tree_map(lambda a, b: a / (jax.numpy.sqrt(b) + tau), m, v)
      return out, (m, v)

    return optax.GradientTransformation(init, update)

  return optax.chain(scale_by_fedadagrad(), optax.scale(-lr))


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
      queries_per_step=cfg.batch_size, hparams=cfg)
