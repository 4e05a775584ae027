"""The contracts between folders: Task, FederatedAlgorithm, RoundStats.

See DESIGN.md ("Contracts"). A Task is everything an algorithm may know about the
problem; a FederatedAlgorithm is a NamedTuple of pure functions in the style of
``optax.GradientTransformation``.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

PyTree = Any
Array = jax.Array


LEDGERS = ("queries", "bytes_up", "bytes_down", "participants", "empty_rounds")
"""The :class:`RoundStats` ledgers, in field order."""
INT32_MAX = 2 ** 31 - 1


class Product(NamedTuple):
  """A ledger value ``count * unit`` (see :func:`times`)."""
  count: Any
  unit: int


def times(count, unit: int) -> Product:
  """A per-round ledger value ``count * unit`` kept exact beyond int32.

  ``count`` may be traced (an int32 scalar, 0 <= count <= 2**31 - 1 per
  round); ``unit`` is a static Python int of any size (e.g. the bytes of one
  broadcast, which may exceed 2**31). :func:`make_stats` stores ``count`` as the
  field and ``unit`` in ``RoundStats.units``; the product is only formed on the
  host, in Python integers.

  Raises:
    TypeError: ``unit`` is not a static integer.
    ValueError: ``unit`` < 0.
  """
  if isinstance(unit, bool) or not isinstance(unit, (int, np.integer)):
    raise TypeError(f"unit must be a static Python int; got {type(unit).__name__}")
  if unit < 0:
    raise ValueError(f"unit must be >= 0; got {unit}")
  return Product(count, int(unit))


@functools.partial(jax.tree_util.register_dataclass, data_fields=list(LEDGERS),
                   meta_fields=["units"])
@dataclasses.dataclass(frozen=True)
class RoundStats:
  """Ledgers of one communication round (summed over clients).

  Each ledger is ``count * unit``: the field holds the int32 ``count`` (a
  pytree leaf, exact up to 2**31 - 1 per round) and ``units`` holds the static
  Python-int ``unit`` of each field (1 unless the value was given as
  :func:`times` or as a static integer above 2**31 - 1). Values beyond int32 are
  thus exact without x64: the product is formed on the host, in Python ints
  (:meth:`exact`, :meth:`totals`; the engine's running totals).

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
    units: static tuple of 5 Python ints, the unit of each field in
      :data:`LEDGERS` order (not a pytree leaf: it survives ``jit``, ``scan``
      stacking and ``device_get`` unchanged).
  """
  queries: Array
  bytes_up: Array
  bytes_down: Array
  participants: Array
  empty_rounds: Array
  units: tuple = (1, 1, 1, 1, 1)

  def unit(self, name: str) -> int:
    """The static unit of ledger ``name``."""
    return self.units[LEDGERS.index(name)]

  def exact(self, name: str):
    """Host-side exact value(s) ``count * unit`` of ledger ``name``.

    Returns:
      A Python int for a scalar count, else an object array of Python ints
      with the count's shape (e.g. (T,) for stats stacked over T rounds).
    """
    counts = np.asarray(getattr(self, name), np.int64)
    if counts.ndim == 0:
      return int(counts) * self.unit(name)
    return counts.astype(object) * self.unit(name)

  def totals(self, axis=None) -> dict:
    """Host-side exact sums of every ledger over ``axis`` (all axes if None).

    Counts are summed in int64 (exact for fewer than 2**32 int32 terms), then
    multiplied by the unit in Python ints.

    Returns:
      ``{name: int}`` for ``axis=None``, else ``{name: object array of Python
      ints}`` with ``axis`` removed.
    """
    out = {}
    for name, unit in zip(LEDGERS, self.units):
      s = np.sum(np.asarray(getattr(self, name), np.int64), axis=axis)
      out[name] = int(s) * unit if axis is None else np.asarray(s).astype(object) * unit
    return out


def _ledger(name: str, value) -> tuple[Any, int]:
  """(int32 count, static unit) of one :func:`make_stats` argument."""
  if isinstance(value, Product):
    return jnp.asarray(value.count, jnp.int32), value.unit
  if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
    value = int(value)
    if value < 0:
      raise ValueError(f"{name}: a ledger is >= 0; got {value}")
    if value > INT32_MAX:  # static and exact: count 1 of a unit that is the value
      return jnp.asarray(1, jnp.int32), value
  return jnp.asarray(value, jnp.int32), 1


def make_stats(queries, bytes_up, bytes_down, participants, empty_rounds=0) -> RoundStats:
  """Builds a :class:`RoundStats` from its five ledgers, in :data:`LEDGERS` order.

  Each argument is an int32-representable value (traced or static; cast to
  int32), a static Python int of any size (above 2**31 - 1 it is stored as
  count 1 times a unit equal to the value), or :func:`times` ``(count, unit)``
  for a traced count times a static unit of any size. A traced value is an
  int32 computed in the round: keep it below 2**31 (int32 arithmetic wraps
  silently) by factoring its static part into a :func:`times` unit. Branches of
  ``lax.cond`` that return stats must use the same units (they are part of the
  pytree structure).

  Args:
    queries, bytes_up, bytes_down, participants: the round's ledgers (the
      :class:`RoundStats` fields of the same names).
    empty_rounds: the ``empty_rounds`` ledger; 0 by default.

  Returns:
    A :class:`RoundStats` whose fields are the int32 counts and whose
    ``units`` are the static units, in :data:`LEDGERS` order.

  Raises:
    ValueError: a static value < 0.
  """
  pairs = [_ledger(n, v) for n, v in zip(LEDGERS, (queries, bytes_up, bytes_down, participants,
                                                    empty_rounds))]
  counts = dict(zip(LEDGERS, (c for c, _ in pairs)))
  return RoundStats(**counts, units=tuple(u for _, u in pairs))


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
      theory assumes, Fang et al. 2022, eq. 2) from one client's row of ``client_data``.
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
    params = jax.eval_shape(lambda: self.init_params(jax.random.key(0)))  # no eager key program
    return sum(_prod(leaf.shape) for leaf in jax.tree_util.tree_leaves(params))

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
    init: ``(key, shared_key) -> state``; server state plus per-client state
      with a leading axis N (the task is bound when the algorithm is built).
      ``key`` is the run's init stream ``rng.stream(root, "init")`` (x_0 and
      other initial draws); ``shared_key`` is the run's shared stream
      ``rng.stream(root, "shared")`` (DESIGN.md, "Randomness") for the draws
      every party makes identically (DeComFL/HiSo seeds, FZooS random
      features); algorithms without shared draws ignore it. Both
      come from ``rng.init_keys(root)``; neither is derived from the other.
    round: ``(state, key, data) -> (state, RoundStats)``; one communication
      round, jit-able; ``key`` is the round key
      ``rng.round_key(rng.stream(root, "rounds"), r)`` (the rounds stream
      folded with r) and ``data`` is ``task.data`` (passed as an argument so
      the compiled program does not embed the dataset as a constant).
    solution: ``state -> params`` scored by ``task.evaluate``.
    hparams: the frozen hyperparameter dataclass (for config.json).
    metrics: optional ``state -> dict[str, scalar]`` of algorithm-specific
      measurements merged into every evaluation record (e.g. FedLRGD's
      oracle-complexity ledger, Definition 1 of Jadbabaie et al. 2023).
    setup: optional ``state -> state``, a host-side set-up run once on the
      state ``init`` returns, before the first round and outside any compiled
      program (it may run compiled JAX programs of its own, e.g. FedLRGD's
      float64 set-up of Algorithm 1 lines 2-10 in a float32 run). JAX must never
      run inside a host callback of a compiled program (it can deadlock the CPU
      runtime, jax-ml/jax#24255), so work that needs its own program goes here.
      The engine applies it (``fedsim.core.engine.init_state``); a resumed state
      has already had it. ``None``: ``init`` is the whole initial state.
  """
  name: str
  init: Callable[[Array, Array], PyTree]
  round: Callable[[PyTree, Array, PyTree], tuple[PyTree, RoundStats]]
  solution: Callable[[PyTree], PyTree]
  hparams: Any = None
  metrics: Callable[[PyTree], dict] | None = None
  setup: Callable[[PyTree], PyTree] | None = None
