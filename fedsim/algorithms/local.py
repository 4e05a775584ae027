"""The mechanism FedAvg, FedOpt and FedZO share: H local steps of an optax
optimizer driven by a gradient oracle, then the server averages the client
deltas (FedAvg, McMahan et al. 2017, Alg. 1; FedZO, Fang et al. 2022, Alg. 1 eq. 5-6;
FedOpt, Reddi et al. 2021 Alg. 1).

Everything works on the flat decision vector x (d,) float32
(``jax.flatten_util.ravel_pytree`` of the task's parameters), so any flax
model, a synthetic function or a perturbation vector plugs in the same way,
and the uplink is d reals.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax.flatten_util import ravel_pytree

from fedsim.core import rng
from fedsim.core.client_map import map_clients
from fedsim.core.reduce import pairwise_sum
from fedsim.core.sampling import sample_clients
from fedsim.core.types import FederatedAlgorithm, Task, make_stats

BYTES_PER_REAL = 4
LOCAL_OPTIMIZERS = ("sgd", "adam")

# A gradient oracle: (f, x, key) -> (d,) direction, where f: (d,) -> scalar is the
# client's mini-batch objective. First-order oracles may differentiate f, ZO
# oracles may only query it.
Oracle = Callable[[Callable[[jax.Array], jax.Array], jax.Array, jax.Array], jax.Array]


def flat_problem(task: Task, key: jax.Array):
  """(x0, loss_flat): the initial flat vector (d,) and ``loss_flat(x, batch)``."""
  params0 = task.init_params(key)
  x0, unravel = ravel_pytree(params0)
  return x0, lambda x, batch: task.loss(unravel(x), batch)


def flat_solution(task: Task):
  """``x -> params``: the unravel function of the task's parameter pytree.

  Built while tracing (``jax.eval_shape``), so nothing runs or compiles eagerly;
  the unravel function depends only on the leaves' shapes and dtypes.
  """
  found = []

  def trace():
    x, unravel = ravel_pytree(task.init_params(jax.random.key(0)))
    found.append(unravel)
    return x
  jax.eval_shape(trace)
  return found[0]


def local_optimizer(name: str, lr) -> optax.GradientTransformation:
  """The client optimizer, re-initialised every round: ``sgd`` or ``adam``."""
  if name == "sgd":
    return optax.sgd(lr)
  if name == "adam":
    return optax.adam(lr)
  raise ValueError(f"unknown local optimizer {name!r}; accepted: {', '.join(LOCAL_OPTIMIZERS)}")


def make_local_update(loss_flat, task: Task, oracle: Oracle, opt: optax.GradientTransformation,
                      local_steps: int, batch_size: int):
  """Builds ``local_update(x_global, client, key) -> delta`` for one client.

  Step k (k = 0..H-1) uses ``key_k = fold_in(key, k)`` split into a data key
  (the b1-sample mini-batch, shared by every query of the step) and an oracle
  key, then x <- x + opt.update(oracle(f_batch, x)) (Fang et al. 2022, eq. 6 with SGD).

  Returns a function of (d,), one row of client_data, a key -> delta (d,) =
  x^(t,H) - x^(t,0).
  """

  def local_update(x_global, client, key):
    def step(carry, k):
      x, opt_state = carry
      k_data, k_oracle = jax.random.split(jax.random.fold_in(key, k))
      batch = task.sample_batch(client, k_data, batch_size)
      g = oracle(lambda z: loss_flat(z, batch), x, k_oracle)
      updates, opt_state = opt.update(g, opt_state, x)
      return (optax.apply_updates(x, updates), opt_state), None

    (x, _), _ = jax.lax.scan(step, (x_global, opt.init(x_global)), jnp.arange(local_steps))
    return x - x_global

  return local_update


# (deltas (M, d), weights (M,), server key) -> (aggregate (d,), participants int32)
Aggregator = Callable[[jax.Array, jax.Array, jax.Array], tuple]


def weighted_mean(deltas, weights, key):
  """The exact aggregate sum_i w_i Delta_i, in a fixed pairwise order (same bits
  on any device count); every sampled client participates."""
  del key
  return pairwise_sum(weights[:, None] * deltas), jnp.int32(deltas.shape[0])


class ServerState(NamedTuple):
  """State of the delta-averaging algorithms: x (d,) and the server optimizer's state."""
  x: jax.Array
  opt_state: optax.OptState


def make_delta_averaging(name: str, task: Task, oracle: Oracle, *, local_opt: optax.GradientTransformation,
                         server_opt: optax.GradientTransformation, local_steps: int, batch_size: int,
                         clients_per_round: int, weighting: str, queries_per_step: int,
                         aggregator: Aggregator | None = None, client_block: int | None = None,
                         hparams=None) -> FederatedAlgorithm:
  """A FedAvg-shaped algorithm: sample M clients, vmap the local update, average.

  Server step (Reddi et al. 2021, Alg. 1): pseudo-gradient = -mean_delta,
  x <- x + server_opt.update(-mean_delta). With ``optax.sgd(1.0)`` this is
  x <- x + mean_delta (FedAvg; FedZO Fang et al. 2022, Alg. 1 last line).

  Args:
    weighting: ``uniform`` (1/M, FedZO eq. 1) or ``size`` (n_i / sum n_j over
      the sampled clients, McMahan et al. 2017).
    queries_per_step: oracle queries one local step costs one client.
    aggregator: how the deltas reach the server (default: the exact weighted
      mean, ``weighted_mean``); e.g. AirComp's noisy over-the-air sum.
    client_block: run the sampled clients in blocks of this many
      (fedsim.core.client_map; 0 = one vmap over all of them, None = the
      backend's default). An execution
      setting: it changes speed and memory, not the mathematics.
  """
  N = task.num_clients
  M = clients_per_round
  if weighting not in ("uniform", "size"):
    raise ValueError(f"unknown weighting {weighting!r}; accepted: uniform, size")
  d = task.dim

  def init(key, shared_key):
    del shared_key  # no draws shared by all parties (rng.init_keys)
    x0, _ = flat_problem(task, key)
    return ServerState(x=x0, opt_state=server_opt.init(x0))

  unravel = flat_solution(task)
  local_update = make_local_update(lambda x, b: task.loss(unravel(x), b), task, oracle,
                                   local_opt, local_steps, batch_size)

  def round_fn(state: ServerState, key, data):
    k_sample, k_clients, k_server = rng.round_subkeys(key)
    idx = sample_clients(k_sample, N, M)
    keys = rng.client_keys(k_clients, idx)

    def client_update(x, i, k):
      # Gathers client i's rows inside the mapped function, so a block of B clients
      # gathers only its B rows: no (M, ...) copy of the sampled clients' data.
      return local_update(x, jax.tree_util.tree_map(lambda a: a[i], data["clients"]), k)

    deltas = map_clients(client_update, (None, 0, 0), state.x, idx, keys,
                         client_block=client_block)  # (M, d)
    if weighting == "uniform":
      w = jnp.full((M,), 1.0 / M, deltas.dtype)
    else:
      sizes = jnp.take(data["sizes"], idx).astype(deltas.dtype)
      w = sizes / jnp.sum(sizes)
    mean_delta, participants = (aggregator or weighted_mean)(deltas, w, k_server)
    updates, opt_state = server_opt.update(-mean_delta, state.opt_state, state.x)
    stats = make_stats(queries=participants * (local_steps * queries_per_step),
                       bytes_up=participants * (d * BYTES_PER_REAL),
                       bytes_down=participants * (d * BYTES_PER_REAL), participants=participants,
                       empty_rounds=participants == 0)
    return ServerState(x=optax.apply_updates(state.x, updates), opt_state=opt_state), stats

  return FederatedAlgorithm(name=name, init=init, round=round_fn,
                            solution=lambda s: unravel(s.x), hparams=hparams)
