"""The round engine: ``simulate`` (DESIGN.md, "Engine").

Rounds run inside a ``jax.lax`` loop in chunks of ``eval_every`` rounds; each
chunk is one compiled call (one compiled program per configuration: the round count is traced),
so Python only runs between chunks, where the solution is evaluated, the
ledgers are accumulated, the record is handed to ``on_eval`` and, every
``checkpoint_every`` rounds or (``checkpoint_every = -1``) every
``checkpoint_interval_s`` seconds, the full state is saved (``fedsim.core.checkpoint``).

Padded client data (``sharding.shard_task`` when N does not divide the device
count) is cut back to the real N inside every compiled chunk and evaluation
(``sharding.unpad``), so algorithms and tasks only ever see real clients.
"""

from __future__ import annotations

import functools
import math
import threading
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from fedsim.core import compile_options, rng
from fedsim.core import sharding as sharding_lib
from fedsim.core.distributed import fetch
from fedsim.core.errors import DivergenceError, Interrupted
from fedsim.core.types import FederatedAlgorithm, Task


def round_chunk(algorithm: FederatedAlgorithm) -> Callable:
  """``chunk(state, data, rounds_key, first_round, length, count=None) -> (state, stacked RoundStats)``,
  not jitted.

  ``count`` rounds of ``algorithm`` (``first_round``, ..., ``first_round + count - 1``) in
  one loop; the RoundStats come stacked in ``length`` rows, rows ``count`` and after zero.
  ``length`` (static) is the chunk's capacity; ``count`` (default ``length``) may be
  traced: the engine passes it traced, so one compiled program runs every chunk of a run
  (the last, shorter one included) and XLA cannot see the trip count. That is what makes a
  run's numbers independent of how it is cut: with a visible trip count of 1 XLA
  removes the loop and compiles the round's body into the surrounding program, whose
  float arithmetic may then differ in the last bits from the looped body (FZooS at the
  paper's size: F(x_5) 1.3762073693645593 with ``eval_every = 1`` against
  1.3762073694803476 with 2, 5 or 10, HISTORY.md 2026-11-28). :func:`make_chunk`
  compiles it. Programs that trace it inside their own (``fedsim.core.batched``)
  wrap it in a plain ``jax.jit``: compiler options are top-level only.
  """

  def chunk(state, data, rounds_key, first_round, length, count=None):
    data = sharding_lib.unpad(data)  # padded clients never reach the algorithm
    count = length if count is None else count

    def round_at(s, r):
      return algorithm.round(s, rng.round_key(rounds_key, r), data)
    # The round is traced once: its jaxpr gives the stats' shapes and is replayed in the loop.
    closed, out_shape = jax.make_jaxpr(round_at, return_shape=True)(state, first_round)
    out_tree = jax.tree_util.tree_structure(out_shape)
    stats = jax.tree_util.tree_map(lambda a: jnp.zeros((length,) + a.shape, a.dtype), out_shape[1])

    def body(i, carry):
      s, stacked = carry
      flat = jax.core.eval_jaxpr(closed.jaxpr, closed.consts, *jax.tree_util.tree_leaves((s, first_round + i)))
      s, st = jax.tree_util.tree_unflatten(out_tree, flat)
      return s, jax.tree_util.tree_map(lambda b, x: b.at[i].set(x), stacked, st)
    # A while loop when count is traced (the engine); lax.fori_loop makes static bounds a scan.
    return jax.lax.fori_loop(jnp.int32(0), jnp.asarray(count, jnp.int32), body, (state, stats))
  return chunk


def make_chunk(algorithm: FederatedAlgorithm):
  """:func:`round_chunk`, jitted with the engine's compiler options (:mod:`fedsim.core.compile_options`).

  ``length`` (the capacity) is static; ``first_round`` and ``count`` are traced, so every
  chunk of a run reuses one compilation. Top-level calls only (a compiled program).
  """
  # The state is donated (on every backend, the CPU included): the chunk updates it in place
  # instead of copying it first (FZooS: a 270 MB copy per chunk at the Fig. 1 setting).
  # The caller's state is deleted by the call; :func:`simulate` rebinds it to the result.
  return compile_options.jit(round_chunk(algorithm), static_argnums=4, donate_argnums=(0,))


class ChunkProgram:
  """:func:`make_chunk`'s program, compiled ahead of time once and checked for memory (:mod:`fedsim.core.memory`).

  ``compile(state, data, rounds_key)`` lowers and compiles the chunk
  (``jax.jit(...).lower(...).compile()``: ``state`` may be abstract, ``jax.eval_shape`` of
  ``init``, so the check runs before the state is allocated), measures its memory
  (:func:`fedsim.core.memory.estimate`) and refuses it when it does not fit
  (:meth:`~fedsim.core.memory.MemoryEstimate.check`). Calls run that executable; arguments
  placed on other shardings than it was compiled for (a committed array elsewhere) go
  through the jitted chunk instead, which compiles for them as a plain ``jax.jit`` call
  would. The first call reports ``{"memory": MemoryEstimate, "compile_s": seconds,
  "round": first round, "wall_time_s": clock()}`` to ``on_compile`` before it runs.
  """

  def __init__(self, algorithm: FederatedAlgorithm, capacity: int,
               on_compile: Callable[[dict], None] | None = None, clock: Callable[[], float] = time.perf_counter):
    self.algorithm, self.capacity, self.on_compile, self.clock = algorithm, capacity, on_compile, clock
    self.jitted = make_chunk(algorithm)
    self.compiled: jax.stages.Compiled | None = None
    self.abstract = None      # the state's (shape, dtype) leaves when compiled from an abstract state
    self.report: dict | None = None

  def compile(self, state, data, rounds_key, first_round: int = 0) -> None:
    """Compiles the chunk for these arguments and checks its memory.

    Raises:
      ConfigError: the program needs more memory than is available (names the settings that shrink it).
    """
    from fedsim.core import memory
    t = time.perf_counter()
    first, count = _int32(first_round), _int32(self.capacity)
    compiled = self.jitted.lower(state, data, rounds_key, first, self.capacity, count).compile()
    seconds = time.perf_counter() - t
    est = memory.estimate(compiled, (state, data, rounds_key, first, count))
    est.check(self.algorithm)
    self.compiled, self.report = compiled, {"memory": est, "compile_s": seconds}
    self.abstract = _avals(state)

  def __call__(self, state, data, rounds_key, first_round, count):
    if self.compiled is not None and self.abstract is not None and _avals(state) != self.abstract:
      self.compiled = None   # the state differs from the abstract one compiled for (never expected)
    if self.compiled is None:
      self.compile(state, data, rounds_key, int(first_round))
    assert self.compiled is not None and self.report is not None
    if self.on_compile is not None and "round" not in self.report:
      self.report.update(round=int(first_round), wall_time_s=self.clock())
      self.on_compile(self.report)
    args = (state, data, rounds_key, first_round, count)
    if _takes(self.compiled, args):
      return self.compiled(*args)
    return self.jitted(state, data, rounds_key, first_round, self.capacity, count)


def _int32(value: int) -> jax.Array:
  """``jnp.int32(value)`` placed without a conversion program (an uncommitted int32 scalar)."""
  return jax.device_put(np.int32(value))


def _avals(tree):
  return jax.tree_util.tree_map(lambda a: (tuple(a.shape), str(a.dtype)), tree)


def _takes(compiled, args) -> bool:
  """Whether ``compiled`` accepts ``args`` as placed: JAX refuses a committed array whose sharding is
  not the one compiled for (uncommitted ones it places itself; unused arguments have None)."""
  ok = []

  def check(s, a):
    ok.append(s is None or not isinstance(a, jax.Array) or not a.committed
              or a.sharding.is_equivalent_to(s, a.ndim))
  jax.tree_util.tree_map(check, compiled.input_shardings[0], args, is_leaf=lambda x: x is None)
  return all(ok)


@functools.lru_cache(maxsize=32)
def task_evaluator(evaluate: Callable) -> Callable:
  """``(params, data) -> metrics``, jitted once per task ``evaluate`` function.

  Shared by every algorithm and every :func:`simulate` call on the same task:
  algorithms whose solutions have the same shapes (FedAvg and FedZO on one
  model) evaluate with one compiled program instead of one each.
  """
  def evaluate_task(params, data):
    return evaluate(params, sharding_lib.unpad(data))
  return compile_options.jit(evaluate_task)


def _compile_first_record(init, init_keys, solve, evaluate_task, abstract_state, data) -> None:
  """Compiles (into JAX's caches, running nothing) the programs :func:`simulate` runs before its
  first chunk: ``init``, the solution and the task's evaluation, for the state's shapes."""
  init.lower(*init_keys).compile()
  params, _ = solve.lower(abstract_state).compile().out_info  # shapes with the shardings the call returns
  evaluate_task.lower(params, data).compile()


class _RunKeys:
  """A run's key streams from its root key (or an int seed, root ``jax.random.key(seed)``): ``abstract``,
  their shapes (``jax.eval_shape``: no program), and :meth:`concrete`, their values (``rng.init_keys`` and
  ``rng.stream(root, "rounds")``), computed once by whichever thread asks first (the others wait for it)."""

  def __init__(self, root: jax.Array | int):
    self.root, self._lock, self._value = root, threading.Lock(), None
    self.abstract = jax.eval_shape(self._derive, root)

  @staticmethod
  def _derive(root):
    if isinstance(root, int) or (root.ndim == 0 and jax.numpy.issubdtype(root.dtype, jax.numpy.integer)):
      root = jax.random.key(root)   # a seed (a raw uint32 key, jax.random.PRNGKey, has shape (2,))
    return rng.init_keys(root), rng.stream(root, "rounds")

  def concrete(self):
    with self._lock:
      if self._value is None:
        self._value = self._derive(self.root)
      return self._value


class _Beside(threading.Thread):
  """Runs ``fn`` in a daemon thread started now, under the caller's ``jax_enable_x64`` and
  ``jax_log_compiles`` (settings a context may scope to the caller's thread); an error is dropped:
  the program it was compiling compiles again, and raises, where it is first called. A program
  traced otherwise here than in the caller is another program: the caller compiles its own."""

  def __init__(self, fn: Callable[[], None]):
    super().__init__(name="fedsim-compile", daemon=True)
    self.fn = fn
    self.x64, self.log = bool(jax.config.jax_enable_x64), bool(jax.config.jax_log_compiles)  # type: ignore[attr-defined]
    self.start()

  def run(self):
    try:
      with jax.enable_x64(self.x64), jax.log_compiles(self.log):
        self.fn()
    except Exception:  # pylint: disable=broad-except  # recompiled (and raised) on first use
      pass


def _apply_setup(algorithm: FederatedAlgorithm, state):
  """``algorithm.setup(state)`` (if any) placed as ``state`` is: committed leaves on their
  shardings, uncommitted ones (``init`` on one default device while the task is sharded
  over several) left uncommitted, so they still combine with the sharded data."""
  if algorithm.setup is None:
    return state

  def place(new, old):
    return jax.device_put(new, old.sharding) if old.committed else jax.device_put(new)
  return jax.tree_util.tree_map(place, algorithm.setup(state), state)


def init_state(algorithm: FederatedAlgorithm, key: jax.Array):
  """The initial state of a run with root ``key``, as :func:`simulate` makes it.

  ``algorithm.init`` on the run's init and shared streams (``rng.init_keys``),
  compiled, then its host-side ``setup`` (if any) outside the compiled program.
  Use this, not ``jax.jit(algorithm.init)`` alone, wherever a state is needed
  outside :func:`simulate`: an algorithm with a ``setup`` (FedLRGD in float32)
  returns placeholders from ``init`` alone (NaN interpolation weights).

  Example::

    state = init_state(algorithms.build("fedavg", task), jax.random.key(0))

  Args:
    algorithm: the algorithm.
    key: the run's root key (``jax.random.key(seed)``).

  Returns:
    The state ``round`` starts from (round 0).
  """
  return _apply_setup(algorithm, compile_options.jit(algorithm.init)(*rng.init_keys(key)))


def simulate(algorithm: FederatedAlgorithm, task: Task, num_rounds: int, eval_every: int,
             key: jax.Array | int, *, on_eval: Callable[[dict], None] | None = None,
             state=None, start_round: int = 0, totals: dict | None = None,
             checkpoint_dir: str | None = None, checkpoint_every: int = 0, resume: bool = False,
             profile_dir: str | None = None, on_compile: Callable[[dict], None] | None = None,
             stop: Callable[[], bool] | None = None, checkpoint_interval_s: float | None = None):
  """Runs ``num_rounds`` communication rounds and evaluates every ``eval_every``.

  Args:
    algorithm: the algorithm (its ``round`` is scanned).
    task: the task (its ``evaluate`` scores ``algorithm.solution(state)``).
    num_rounds: T >= 0.
    eval_every: rounds per compiled chunk (>= 1); a final shorter chunk runs the
      remainder.
    key: the root key, or an int seed (the root ``jax.random.key(seed)``, made beside the chunk's
      compilation: no program before it); ``init`` gets streams "init" and "shared"
      (``rng.init_keys``), rounds use stream "rounds" with ``fold_in(stream, r)``.
    on_eval: called with each record (a dict of Python scalars) as soon as it is
      measured; records have ``round``, cumulative ``queries``, ``bytes_up``,
      ``bytes_down``, ``participants``, ``empty_rounds``, ``wall_time_s``,
      every key of ``task.evaluate`` and of ``algorithm.metrics``.
    state, start_round, totals: resume from a saved state after ``start_round``
      rounds with the given cumulative ledgers. The chunks donate their state, so a
      state passed here is consumed (its arrays are deleted by the first chunk); pass a
      copy to keep it.
    checkpoint_dir: where checkpoints go (orbax, ``fedsim.core.checkpoint``; the last 2 are kept).
    checkpoint_every: K > 0 saves the full state (algorithm state with its PRNG
      keys, round, ledger totals, elapsed time) at the first chunk end at or
      after each multiple of K (the saved rounds depend only on K and
      ``eval_every``); -1 saves by time: at the first chunk end at least
      ``checkpoint_interval_s`` seconds after the run started and after the
      previous save began, none while a save is still being written
      (``checkpoint.SinceStartPolicy``, orbax's ``ContinuousCheckpointingPolicy``),
      so a kill loses at most about the interval plus one chunk's time; 0 never saves.
    resume: continue from the newest checkpoint in ``checkpoint_dir`` (if there
      is one; otherwise start from round 0). The continuation is
      bitwise-identical to an uninterrupted run when checkpoints sit at chunk
      boundaries of the same ``eval_every`` (they always do). Records at or
      before the checkpoint's round are not measured again (the returned list
      starts after it); ``wall_time_s`` continues the saved clock.
    profile_dir: a folder for a JAX profiler trace (``jax.profiler.start_trace``)
      of the chunks after the first one (compiled by then) up to round 3 at least:
      rounds 2-3 with ``eval_every = 1``, rounds E+1..2E with ``eval_every = E``,
      their evaluations included; a run of one chunk is not traced. None
      (default): no trace. Open it with
      TensorBoard's profile plugin or ui.perfetto.dev (BUILD.md, "Profiling").
    on_compile: called once, just before the first chunk runs, with ``{"memory":
      fedsim.core.memory.MemoryEstimate, "compile_s": seconds compiling the chunk, "round":
      the first chunk's first round, "wall_time_s": the run's clock then}`` (:class:`ChunkProgram`).
    stop: polled at every chunk boundary (after the chunk's record and scheduled checkpoint);
      True ends the run there: with checkpointing on (``checkpoint_every != 0``) the state is saved at that round
      first, then :class:`~fedsim.core.errors.Interrupted` is raised (``fedsim.interrupts``).
    checkpoint_interval_s: seconds between saves with ``checkpoint_every = -1``
      (> 0; None: ``checkpoint.DEFAULT_INTERVAL_S``); unused otherwise.

  Returns:
    (final state, list of records).

  Raises:
    DivergenceError: the objective became NaN or inf; the record of that
      evaluation has been passed to ``on_eval`` first.
    Interrupted: ``stop()`` returned True (its ``round``: the last round run; records up to it
      have been passed to ``on_eval``).
    ValueError: bad ``eval_every``/``checkpoint_every``, checkpointing without a
      directory, or a checkpoint that does not match this algorithm's state.
    ConfigError: the compiled chunk needs more memory than is available
      (:mod:`fedsim.core.memory`); raised before a fresh run allocates its state.
  """
  if eval_every < 1:
    raise ValueError(f"eval_every must be >= 1; got {eval_every}")
  if checkpoint_every < -1:
    raise ValueError(f"checkpoint_every must be >= -1 (-1: by time); got {checkpoint_every}")
  if checkpoint_interval_s is not None and not 0 < checkpoint_interval_s < math.inf:
    raise ValueError(f"checkpoint_interval_s must be > 0 and finite; got {checkpoint_interval_s}")
  if (checkpoint_every != 0 or resume) and not checkpoint_dir:
    raise ValueError("checkpoint_every != 0 and resume need checkpoint_dir")
  t0 = time.perf_counter()
  mesh = sharding_lib.mesh_of(task.data)
  multi = jax.process_count() > 1 and mesh is not None
  mngr = None
  by_time = checkpoint_every == -1
  if checkpoint_dir and (checkpoint_every != 0 or resume):
    from fedsim.core import checkpoint
    interval = checkpoint_interval_s if checkpoint_interval_s is not None else checkpoint.DEFAULT_INTERVAL_S
    mngr = checkpoint.manager(checkpoint_dir, interval_s=interval if by_time else None)
  # (stream "init", stream "shared"), stream "rounds": their shapes now; their values where first needed
  # (a fresh run computes them beside the chunk's compilation, below).
  keys = _RunKeys(key)
  init_keys, rounds_key = keys.abstract
  saved = None                                    # the round of the newest checkpoint
  capacity = max(1, min(eval_every, num_rounds))    # the chunk's static size: the same for every cut of this run
  evaluate_task = task_evaluator(task.evaluate)     # one program per task, not per algorithm
  # The algorithm's part: its solution and its own metrics, one small program.
  def solve(s):
    return algorithm.solution(s), (algorithm.metrics(s) if algorithm.metrics is not None else {})
  solve = compile_options.jit(solve)
  # Compiled once, ahead of time, with its memory checked (fedsim.core.memory).
  program = ChunkProgram(algorithm, capacity, on_compile, clock=lambda: time.perf_counter() - t0)
  if resume:
    assert mngr is not None  # resume needs checkpoint_dir (checked above)
    restored = checkpoint.restore(mngr, jax.eval_shape(algorithm.init, *init_keys),
                                  mesh=mesh, algorithm=algorithm.name)
    if restored is not None:
      state, meta = restored
      start_round, totals = meta["round"], meta["totals"]
      saved = start_round
      t0 -= meta["wall_time_s"]
  if state is None:
    if mesh is not None and (multi or mesh.devices.size == 1):
      # Multi-host: a global (replicated) state, so chunks mix it with global data. One
      # device: the sharding every chunk returns, so the second chunk (and the second
      # evaluation) reuse the first one's compilation instead of compiling again.
      from jax.sharding import NamedSharding, PartitionSpec
      init = compile_options.jit(algorithm.init, out_shardings=NamedSharding(mesh, PartitionSpec()))
    else:
      init = compile_options.jit(algorithm.init)
    if start_round < num_rounds:   # refuse a program that does not fit before allocating its state
      abstract = jax.eval_shape(init, *init_keys)
      # The run's keys and the first record's programs (init, solution, evaluation) are made beside the
      # round chunk, which compiles from their shapes: XLA compiles without the GIL, so another core hides
      # them (the same programs and keys, the same bits).
      def beside_chunk():
        keys.concrete()
        _compile_first_record(init, init_keys, solve, evaluate_task, abstract, task.data)
      beside = _Beside(beside_chunk)
      try:
        program.compile(abstract, task.data, rounds_key, start_round)
      finally:
        beside.join()
    state = _apply_setup(algorithm, init(*keys.concrete()[0]))
  init_keys, rounds_key = keys.concrete()
  def evaluate(s, data):
    params, own = solve(s)
    return {**evaluate_task(params, data), **own}
  totals = dict(totals or {"queries": 0, "bytes_up": 0, "bytes_down": 0, "participants": 0,
                           "empty_rounds": 0})
  records = []

  def record(r):
    metrics = {k: float(v) for k, v in fetch(evaluate(state, task.data)).items()}
    rec = {"round": r, **totals, **metrics, "wall_time_s": time.perf_counter() - t0}
    records.append(rec)
    if on_eval is not None:
      on_eval(rec)
    if not math.isfinite(rec["objective"]):
      raise DivergenceError(f"objective is {rec['objective']} at round {r}; stopping "
                            f"(metrics up to round {r} are kept)")

  r = start_round
  tracing = traced = False   # a profiler trace is active / was started (profile_dir)
  next_save = (r // checkpoint_every + 1) * checkpoint_every if checkpoint_every > 0 else None
  try:
    if r == 0:
      record(0)
    while r < num_rounds:
      if stop is not None and stop():   # SIGINT / SIGTERM: a clean stop at this chunk boundary
        if mngr is not None and checkpoint_every != 0 and saved != r:
          checkpoint.save(mngr, state, r, totals, time.perf_counter() - t0, algorithm.name, force=True)
        raise Interrupted(r, None)
      length = min(eval_every, num_rounds - r)   # rounds in this chunk (traced: one program for all)
      if profile_dir and not traced and r > start_round:   # the first chunk has compiled the program
        jax.profiler.start_trace(profile_dir)
        tracing = traced = True
      state, stats = program(state, task.data, rounds_key, _int32(r), _int32(length))
      # Exact host-side accumulation: per-round int32 counts times static units
      # (RoundStats.units), summed as Python ints (RoundStats.totals).
      for name, value in fetch(stats).totals().items():
        totals[name] += value
      r += length
      record(r)
      if tracing and r >= 3:
        jax.profiler.stop_trace()
        tracing = False
      if next_save is not None and r >= next_save:  # first chunk end at or after a multiple of K
        assert mngr is not None  # checkpoint_every > 0 needs checkpoint_dir (checked above)
        checkpoint.save(mngr, state, r, totals, time.perf_counter() - t0, algorithm.name)
        saved, next_save = r, (r // checkpoint_every + 1) * checkpoint_every
      elif by_time:  # orbax's time policy decides at each chunk end
        assert mngr is not None  # checkpoint_every = -1 needs checkpoint_dir (checked above)
        if checkpoint.due(mngr, r):
          checkpoint.save(mngr, state, r, totals, time.perf_counter() - t0, algorithm.name)
          saved = r
  finally:
    if tracing:   # a run that ended (or stopped) before round 3
      jax.profiler.stop_trace()
    if mngr is not None:
      checkpoint.close(mngr)  # waits for the save in flight
  return state, records
