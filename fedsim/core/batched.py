"""Many runs of one algorithm in one compiled program (BUILD.md, "Sweeps").

``simulate_batched`` runs the round engine (``fedsim.core.engine``) for K seeds
times V values of the numeric hyperparameters that do not change shapes, as a
single ``vmap`` over the K x V members (member k * V + v) of the same
chunk that ``simulate`` compiles. The algorithm is built *inside* the traced
function from the member's data and traced hyperparameters
(``algorithms.build(name, replace(task, data=traced), lr=traced)``), so one
compiled program serves every member. Each member k, v computes what
``simulate(build(name, task_k, **hp_v), task_k, T, E, jax.random.key(seed_k))``
computes, up to the reduction order that padding and ``vmap`` may change
(<= 1e-6 relative; tests/core/test_batched.py).

Seeds give different partitions, hence client arrays of different n_max:
``stack_padded`` zero-pads every seed's ``data["clients"]`` along the sample
axis (masked: ``mask`` is False there) to the batch's largest n_max and stacks
them. Tasks draw mini-batches among the ``mask``-ed samples and mask every
sum, so padding never changes a value (DESIGN.md, "Task").

``traceable`` decides, by tracing (``jax.eval_shape``) rather than from a
list, whether a hyperparameter can be a traced scalar (builders that need a
Python value, for a shape or in Python control flow, fail to trace) and
whether an algorithm can take its data as a traced argument at all.

``ProgramCache`` compiles through ``compile_options.jit(f).lower(*args).compile()`` and
keys executables by the lowered program text, so two configurations whose
programs are identical (e.g. two ``dirichlet_alpha`` values whose padded data
happen to have the same shapes) share one compilation; it counts
compilations.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from fedsim.core import compile_options, rng
from fedsim.core.engine import round_chunk
from fedsim.core.types import Task

LEDGERS = ("queries", "bytes_up", "bytes_down", "participants", "empty_rounds")


class ProgramCache:
  """Compiled executables keyed by (kind, lowered program text); counts compilations.

  Attributes:
    compiles: dict kind -> number of XLA compilations of that kind
      (``init``, ``chunk``, ``eval``).
    hits: dict kind -> number of lookups served without compiling.
    seconds: wall seconds spent tracing, lowering and compiling.
  """

  def __init__(self):
    self._cache = {}
    self.compiles: dict[str, int] = {}
    self.hits: dict[str, int] = {}
    self.seconds = 0.0

  def get(self, kind: str, fn: Callable, *args):
    """The compiled ``compile_options.jit(fn)`` for ``args`` (arrays / pytrees; no static arguments)."""
    t0 = time.perf_counter()
    lowered = compile_options.jit(fn).lower(*args)
    # The text omits pruned (unused) arguments, whose shapes the executable still checks.
    avals = jax.tree_util.tree_map(lambda a: (jnp.shape(a), str(jnp.result_type(a))), args)
    key = (kind, hashlib.sha256(lowered.as_text().encode()).hexdigest(), str(avals))
    if key in self._cache:
      self.hits[kind] = self.hits.get(kind, 0) + 1
    else:
      self._cache[key] = lowered.compile()
      self.compiles[kind] = self.compiles.get(kind, 0) + 1
    self.seconds += time.perf_counter() - t0
    return self._cache[key]

  @property
  def total(self) -> int:
    """All compilations so far."""
    return sum(self.compiles.values())


def stack_padded(datas: list) -> dict | None:
  """Stacks K tasks' ``data`` along a new leading axis, padding sample axes.

  Args:
    datas: K ``task.data`` pytrees with the same structure. Leaves of
      ``data["clients"]`` may differ in their axis 1 (the sample axis n_max)
      when ``data["clients"]`` has a boolean ``mask``; they are zero-padded
      there (mask False). Every other leaf must have one shape across the K.

  Returns:
    The stacked pytree (leading axis K), or None when the data cannot be
    stacked (different structures, dtypes, or shapes that padding cannot
    reconcile); the caller then runs the seeds separately.
  """
  structs = [jax.tree_util.tree_structure(d) for d in datas]
  if any(s != structs[0] for s in structs):  # type: ignore[operator]  # mypy cannot resolve jaxlib's PyTreeDef
    return None
  clients = [d.get("clients") if isinstance(d, dict) else None for d in datas]
  maskable = all(isinstance(c, dict) and "mask" in c for c in clients)

  def pad(leaves, path_is_client):
    shapes = [np.shape(leaf) for leaf in leaves]
    dtypes = {jnp.asarray(leaf).dtype for leaf in leaves}
    if len(dtypes) != 1 or len({len(s) for s in shapes}) != 1:
      raise _Unstackable
    if len(set(shapes)) == 1:
      return jnp.stack([jnp.asarray(leaf) for leaf in leaves])
    if not (path_is_client and maskable and len(shapes[0]) >= 2
            and len({(s[0],) + s[2:] for s in shapes}) == 1):
      raise _Unstackable
    n_max = max(s[1] for s in shapes)
    out = []
    for leaf in leaves:
      a = jnp.asarray(leaf)
      widths = [(0, 0)] * a.ndim
      widths[1] = (0, n_max - a.shape[1])
      out.append(jnp.pad(a, widths))  # zeros; the mask pads with False
    return jnp.stack(out)

  try:
    out = {}
    for k in datas[0]:
      parts = [d[k] for d in datas]
      flat = [jax.tree_util.tree_flatten(p) for p in parts]
      treedef = flat[0][1]
      leaves = [pad([f[0][i] for f in flat], k == "clients") for i in range(len(flat[0][0]))]
      out[k] = jax.tree_util.tree_unflatten(treedef, leaves)
    return out
  except (_Unstackable, AttributeError, TypeError):
    return None


class _Unstackable(Exception):
  pass


def _hp_array(values, dtype):
  return jnp.asarray(np.asarray(values, dtype=dtype))


def hp_dtype(value):
  """The dtype a traced hyperparameter value gets (int32 or float32), or None
  when the value cannot be traced (bool, str, None)."""
  if isinstance(value, bool) or value is None or isinstance(value, str):
    return None
  if isinstance(value, int):
    return jnp.int32
  if isinstance(value, float):
    return jnp.float32
  return None


def _member_fns(build: Callable, task: Task, static_hp: dict):
  """Per-member init / chunk / eval functions with the algorithm built from traced inputs."""

  def alg_for(data, hp):
    return build(dataclasses.replace(task, data=data), {**static_hp, **hp})

  def init(data, key, hp):
    return alg_for(data, hp).init(*rng.init_keys(key))   # streams "init" and "shared"

  def chunk(state, data, key, hp, first_round, length):
    alg = alg_for(data, hp)
    # The engine's own chunk (lax.scan of round(s, round_key(stream "rounds", r), data)).
    return jax.jit(round_chunk(alg), static_argnums=4)(state, data, rng.stream(key, "rounds"), first_round, length)

  def evaluate(state, data, hp):
    alg = alg_for(data, hp)
    out = dict(task.evaluate(alg.solution(state), data))
    if alg.metrics is not None:
      out.update(alg.metrics(state))
    return out

  return init, chunk, evaluate


def _members(fn, n_state=0):
  """vmap ``fn(*state, data, key, hp, *rest)`` over the member axis of state, data,
  key and hp (``rest`` is shared). Every member gets its own copy of its seed's
  data: with the data unbatched (broadcast) and only the hyperparameters
  batched, XLA merges the member axis into the matmuls' free dimensions and
  the accumulation order changes; finite differences with mu = 1e-3 amplify
  that 1-ulp change by 1/mu, and the runs drift apart (1e-5 after 6 rounds of
  FedZO). With everything batched, each member's arithmetic is its own run's."""
  def batched(*args):
    axes = (0,) * (n_state + 3) + (None,) * (len(args) - n_state - 3)
    return jax.vmap(fn, in_axes=axes)(*args)
  return batched


def traceable(build: Callable, task: Task, static_hp: dict, traced_hp: dict) -> tuple[bool, str]:
  """Whether the algorithm runs with ``task.data`` and ``traced_hp`` as traced values.

  Traces (``jax.eval_shape``, nothing is compiled or run) init, one round and
  the evaluation with the data and the given hyperparameters abstract.

  Args:
    build: ``(task, hparams) -> FederatedAlgorithm``.
    task: a concrete task.
    static_hp: hyperparameters passed as Python values.
    traced_hp: name -> example value (int or float) passed as a traced scalar.

  Returns:
    (ok, reason): ``reason`` is the exception's first line when tracing fails
    (e.g. a ``ConcretizationTypeError`` from a shape that needs the value).
  """
  if any(hp_dtype(v) is None for v in traced_hp.values()):
    return False, "not a number"
  hp = {k: _hp_array(v, hp_dtype(v)) for k, v in traced_hp.items()}
  init, chunk, evaluate = _member_fns(build, task, static_hp)

  def probe(data, key, hp):
    state = init(data, key, hp)
    state, stats = chunk(state, data, key, hp, jnp.int32(0), 1)
    return evaluate(state, data, hp), stats

  try:
    jax.eval_shape(probe, task.data, jax.random.key(0), hp)
    return True, ""
  except Exception as e:  # noqa: BLE001 -- any failure means: give this value to Python
    return False, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]


@dataclasses.dataclass(frozen=True)
class Batch:
  """K seeds x V hyperparameter values prepared as one vmapped batch (:func:`prepare_batch`).

  Attributes:
    K, V: seeds and hyperparameter values; members are ordered k * V + v.
    data: the members' stacked (padded) data, leading axis K * V.
    keys: the members' root keys, shape (K * V,).
    hp: name -> (K * V,) int32 / float32 array of the traced hyperparameters.
    init_fn: ``(data, keys, hp) -> state`` over the members (not jitted).
    eval_fn: ``(state, data, keys, hp) -> metrics`` over the members (not jitted).
    chunk_fn: ``length -> ((state, data, keys, hp, first_round) -> (state, stats))``
      over the members (not jitted): ``length`` rounds of the engine's chunk.
  """
  K: int
  V: int
  data: dict
  keys: jax.Array
  hp: dict
  init_fn: Callable
  eval_fn: Callable
  chunk_fn: Callable[[int], Callable]


def prepare_batch(build: Callable, task: Task, datas: list, seeds: list[int], static_hp: dict,
                  traced_hp: list[dict]) -> Batch:
  """The members' inputs and functions of :func:`simulate_batched` (arguments as there).

  ``simulate_batched`` compiles ``init_fn``, ``eval_fn`` and ``chunk_fn(length)`` and runs
  them; a benchmark (``experiments/bench/sweep_table.py``) compiles and times the same
  chunk program.

  Raises:
    ValueError: ``datas`` cannot be stacked.
  """
  data = stack_padded(datas)
  if data is None:
    raise ValueError("the seeds' data cannot be stacked into one batch")
  K, V = len(seeds), max(len(traced_hp), 1)
  names = sorted(traced_hp[0]) if traced_hp else []
  # Members in the order (seed k, value v) -> k * V + v.
  seed_of = np.repeat(np.arange(K), V)
  hp = {n: _hp_array([traced_hp[v][n] for v in np.tile(np.arange(V), K)], hp_dtype(traced_hp[0][n]))
        for n in names}
  data = jax.tree_util.tree_map(lambda a: a[seed_of] if V > 1 else a, data)
  keys = jax.vmap(jax.random.key)(jnp.asarray(np.asarray(seeds)[seed_of], jnp.uint32))
  m_init, m_chunk, m_eval = _member_fns(build, task, static_hp)

  def chunk_fn(length):
    return _members(lambda s, d, k, h, r: m_chunk(s, d, k, h, r, length), n_state=1)

  return Batch(K=K, V=V, data=data, keys=keys, hp=hp, init_fn=_members(lambda d, k, h: m_init(d, k, h)),
               eval_fn=_members(lambda s, d, k, h: m_eval(s, d, h), n_state=1), chunk_fn=chunk_fn)


def simulate_batched(build: Callable, task: Task, datas: list, seeds: list[int], static_hp: dict,
                     traced_hp: list[dict], num_rounds: int, eval_every: int, *,
                     cache: ProgramCache | None = None, clock: Callable[[], float] = time.perf_counter,
                     on_chunk: Callable[[int], None] | None = None):
  """Runs K seeds x V hyperparameter values of one algorithm in one compiled program.

  Args:
    build: ``(task, hparams: dict) -> FederatedAlgorithm`` (e.g.
      ``lambda t, hp: algorithms.build(name, t, **hp)``); called inside the
      trace with the member's data and traced hyperparameters.
    task: the task whose functions (loss, sampling, evaluate) every member
      uses; its ``data`` is replaced by each member's.
    datas: K ``task.data`` pytrees (seed k's partition), stacked with
      :func:`stack_padded`.
    seeds: K root seeds; member (k, v) uses ``jax.random.key(seeds[k])``.
    static_hp: hyperparameters common to all members (Python values).
    traced_hp: V dicts, each name -> int/float, with the same names; traced
      as int32 / float32 scalars (see :func:`traceable`).
    num_rounds: T >= 0; eval_every: E >= 1, rounds per compiled chunk.
    cache: where executables are compiled and counted.
    clock: wall clock (tests substitute a fixed one).
    on_chunk: called with the round reached after each chunk.

  Returns:
    (records, diverged): ``records[k][v]`` is the list of evaluation records of
    member (k, v), as ``simulate`` makes them (``round``, cumulative ledgers,
    every ``evaluate`` / ``metrics`` key, ``wall_time_s`` of the whole batch),
    ending at the first non-finite objective; ``diverged[k][v]`` is a bool.

  Raises:
    ValueError: ``datas`` cannot be stacked (run the seeds separately), or
      ``eval_every`` < 1.
  """
  if eval_every < 1:
    raise ValueError(f"eval_every must be >= 1; got {eval_every}")
  cache = cache or ProgramCache()
  t0 = clock()
  batch = prepare_batch(build, task, datas, seeds, static_hp, traced_hp)
  K, V, data, keys, hp = batch.K, batch.V, batch.data, batch.keys, batch.hp
  init_fn, eval_fn, chunk_fn = batch.init_fn, batch.eval_fn, batch.chunk_fn

  state = cache.get("init", init_fn, data, keys, hp)(data, keys, hp)
  evaluate = cache.get("eval", eval_fn, state, data, keys, hp)
  totals = {n: np.zeros((K * V,), object) for n in LEDGERS}  # exact Python ints
  records: list[list[list[dict]]] = [[[] for _ in range(V)] for _ in range(K)]
  diverged = np.zeros((K, V), bool)

  def record(r):
    metrics = {k: np.asarray(v) for k, v in jax.device_get(evaluate(state, data, keys, hp)).items()}
    wall = clock() - t0
    for k in range(K):
      for v in range(V):
        if diverged[k, v]:
          continue
        i = k * V + v
        rec = {"round": r, **{n: int(totals[n][i]) for n in LEDGERS},
               **{m: float(a[i]) for m, a in metrics.items()}, "wall_time_s": wall}
        records[k][v].append(rec)
        if not math.isfinite(rec["objective"]):
          diverged[k, v] = True

  r = 0
  record(0)
  chunks = {}
  while r < num_rounds and not diverged.all():
    length = min(eval_every, num_rounds - r)
    if length not in chunks:
      chunks[length] = cache.get("chunk", chunk_fn(length), state, data, keys, hp, jnp.int32(r))
    state, stats = chunks[length](state, data, keys, hp, jnp.int32(r))
    # exact: int32 counts per round times static units, summed as Python ints
    for n, values in jax.device_get(stats).totals(axis=-1).items():
      totals[n] += values
    r += length
    record(r)
    if on_chunk is not None:
      on_chunk(r)
  return records, diverged.tolist()
