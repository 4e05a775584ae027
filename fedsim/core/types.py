"""The contracts between folders: Task, FederatedAlgorithm, RoundStats.

See DESIGN.md ("Contracts"). A Task is everything an algorithm may know about the
problem; a FederatedAlgorithm is a NamedTuple of pure functions in the style of
``optax.GradientTransformation``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple

import chex
import jax
import jax.numpy as jnp

PyTree = Any
Array = jax.Array


@chex.dataclass(frozen=True)
class RoundStats:
  """Ledgers of one communication round (all int32 scalars, summed over clients).

  Attributes:
    queries: function (or per-example gradient) evaluations spent in the round,
      summed over participating clients. For zeroth-order methods a query is
      one evaluation of F_i(x, xi) on one sample; for first-order methods one
      per-example gradient evaluation.
    bytes_up: bytes sent client -> server (float32 payloads: 4 bytes a real).
    bytes_down: bytes sent server -> client.
    participants: number of clients whose update reached the server.
    empty_rounds: 1 if no client update reached the server this round (e.g.
      no AirComp device passed the channel threshold), else 0.

  Per-round values are int32 (exact up to 2**31 - 1); the engine accumulates
  totals on the host in Python integers, so totals never overflow.
  """
  queries: Array
  bytes_up: Array
  bytes_down: Array
  participants: Array
  empty_rounds: Array


def make_stats(queries, bytes_up, bytes_down, participants, empty_rounds=0) -> RoundStats:
  """Builds a :class:`RoundStats` casting each field to int32."""
  c = lambda v: jnp.asarray(v, jnp.int32)
  return RoundStats(queries=c(queries), bytes_up=c(bytes_up), bytes_down=c(bytes_down),
                    participants=c(participants), empty_rounds=c(empty_rounds))


@dataclasses.dataclass(frozen=True, eq=False)
class Task:
  """A federated objective F(x) = sum_i w_i f_i(x) over ``num_clients`` clients.

  Attributes:
    name: task name (``softmax``, ``mlp``, ``quadratic``, ...).
    num_clients: N.
    init_params: ``key -> params`` (a pytree; ZO algorithms ravel it with
      ``jax.flatten_util.ravel_pytree``).
    data: the task's arrays, passed to every compiled function as an argument
      (never captured as a constant, so large data neither bloats compilation
      nor escapes sharding): ``data["clients"]`` is a pytree whose leaves have
      leading axis N (padded to the largest client; ``mask`` (N, n_max) bool
      marks real samples where there are samples); ``data["sizes"]`` (N,)
      int32 is n_i (1 for tasks without samples); ``data["eval"]`` holds
      evaluation-only arrays (test split), possibly empty.
    loss: ``(params, batch) -> scalar`` the local objective f_i on a batch of
      one client (mean over the batch). ZO algorithms only query it.
    sample_batch: ``(client, key, batch_size) -> batch``: draws a mini-batch of
      ``batch_size`` samples i.i.d. uniformly (with replacement, as the FedZO
      theory assumes, seed 001 eq. 2) from one client's row of ``client_data``.
      ``batch_size`` is static. Tasks without samples return the row itself.
    full_batch: ``client -> batch``: the whole local dataset (masked), so
      ``loss(params, full_batch(client))`` is f_i exactly.
    per_example_loss: ``(params, example) -> scalar`` or None.
    evaluate: ``(params, data) -> dict[str, scalar]`` with at least ``objective``.
    has_accuracy: whether ``evaluate`` reports ``test_accuracy``.
    stochastic: False when f_i has no samples (synthetic functions): a query is
      then one evaluation of f_i, whatever the batch size.
    info: JSON-serialisable description (sizes, partition, split) for config.json.
  """
  name: str
  num_clients: int
  init_params: Callable[[Array], PyTree]
  data: PyTree
  loss: Callable[[PyTree, PyTree], Array]
  sample_batch: Callable[[PyTree, Array, int], PyTree]
  full_batch: Callable[[PyTree], PyTree]
  evaluate: Callable[[PyTree, PyTree], dict]
  per_example_loss: Callable[[PyTree, PyTree], Array] | None = None
  has_accuracy: bool = False
  stochastic: bool = True
  info: dict = dataclasses.field(default_factory=dict)

  @property
  def dim(self) -> int:
    """Number of scalar parameters d of the decision variable."""
    params = jax.eval_shape(self.init_params, jax.random.key(0))
    return sum(_prod(l.shape) for l in jax.tree_util.tree_leaves(params))

  @property
  def client_data(self) -> PyTree:
    """``data["clients"]``: per-client arrays with leading axis N."""
    return self.data["clients"]

  @property
  def client_sizes(self) -> Array:
    """``data["sizes"]``: (N,) int32 n_i."""
    return self.data["sizes"]


def _prod(shape) -> int:
  out = 1
  for s in shape:
    out *= int(s)
  return out


class FederatedAlgorithm(NamedTuple):
  """A federated algorithm as pure functions (DESIGN.md, "Contracts").

  Attributes:
    name: registry name.
    init: ``key -> state``; server state plus per-client state with a leading
      axis N (the task is bound when the algorithm is built).
    round: ``(state, key, data) -> (state, RoundStats)``; one communication
      round, jit-able; ``key`` is the round key ``fold_in(run_key, r)`` and
      ``data`` is ``task.data`` (passed as an argument so the compiled program
      does not embed the dataset as a constant).
    solution: ``state -> params`` scored by ``task.evaluate``.
    hparams: the frozen hyperparameter dataclass (for config.json).
    metrics: optional ``state -> dict[str, scalar]`` of algorithm-specific
      measurements merged into every evaluation record (e.g. FedLRGD's
      oracle-complexity ledger, Definition 1 of seed 004).
  """
  name: str
  init: Callable[[Array], PyTree]
  round: Callable[[PyTree, Array], tuple]
  solution: Callable[[PyTree], PyTree]
  hparams: Any = None
  metrics: Callable[[PyTree], dict] | None = None
