r"""Throughput of the vmapped round engine against a sequential client loop.

  python -m experiments.benchmark
  python -m experiments.benchmark --algorithm=fedavg --num_clients=100,1000 --repeats=5
  python -m experiments.benchmark --quick --num_clients=8 --output_dir=/tmp/bench

For every ``--algorithm`` and every N in ``--num_clients`` (a comma-separated
list) on the digits softmax task (d = 650) it measures:

1. Vmapped engine throughput: full participation (clients_per_round = N), a
   chunk of ``--rounds_per_chunk`` rounds compiled once by
   ``fedsim.core.engine.make_chunk`` (``lower(...).compile()``), run once to
   warm up, then timed with ``block_until_ready``: seconds per round and client
   local steps per second = N * H / seconds_per_round. FedAvg (and the FedOpt
   variants) run 5 local SGD steps of batch 20 at lr 0.1; FedZO runs its paper
   defaults (b1 = 25, b2 = 20, H = 5, sphere directions).
2. A sequential baseline, as sequential simulators do it: the same client
   update (``make_local_update`` with the algorithm's oracle and local
   optimizer) jitted once for one client and called in a Python loop over the
   clients, each with its own data row and key, the deltas summed on the device
   and averaged. The rows and keys are split before timing (the baseline's best
   case). For large N only the first ``--sequential_clients`` clients are timed;
   the per-step rate is what is compared (``sequential_clients_timed`` in the
   JSON says how many). speedup = vmapped rate / sequential rate.
   ``speedup_vs_inloop`` compares with a naive loop that slices each client's
   row out of the stacked arrays and derives its key inside the loop.
3. Memory: the compiled chunk's ``memory_analysis()`` (temp, argument, output
   bytes), the process peak RSS so far (``resource.getrusage``; monotone over
   the run, so it is the peak of every measurement up to this one) and, where
   the device reports it (GPU, TPU), ``memory_stats()["peak_bytes_in_use"]``
   (also a peak since the process started).
4. For zeroth-order algorithms: directions generated per second in the engine,
   N * H * b2 * d normals per round / seconds per round, against the raw
   ``jax.random.normal`` rate measured in the same run on the same total count
   (jitted, one call per local step of all N clients, as the engine draws them,
   split further into calls of at most 2**25 numbers) and against the
   direction law alone (``fedsim.estimators.directions``, one key per client
   step as in the engine); ``ratio`` = engine rate / raw rate.

The client data is NOT a partition: digits has only 1,437 training samples, so
every client gets ``--samples_per_client`` (20) training samples drawn with
replacement (``numpy.random.default_rng(--seed)``) and
``fedsim.data.to_client_arrays`` pads them into the Task layout. The numbers
measure the simulator, not learning.

The workloads of one (algorithm, N) (engine chunk, sequential loop, raw
normals, direction law) are timed in alternation, ``--repeats`` times, each
repeat running a workload enough times to last ``--min_time`` seconds. Rates
come from the best repeat (the least disturbed by other processes on a shared
machine; medians are in the JSON too); ``speedup`` and the direction ``ratio``
are medians over repeats of side-by-side ratios, so a load change between
workloads does not bias them. On CPU, ``*_cpu_per_wall`` (process CPU time /
wall time) flags disturbed measurements: about 1 for one busy thread, below 1
when other processes took the CPU.

Writes --output_dir/benchmark.json (environment, settings and one record per
(algorithm, N)) and benchmark.md (a markdown table), rewritten after every
record. Prints one progress line per measurement. Bad flag values exit with
status 2 and one line. ``--quick`` is a smoke test: 2 rounds per chunk, one
repeat, no minimum time, at most 16 clients timed sequentially and at most
2**20 raw normals.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import platform
import resource
import statistics
import sys
import time
from typing import Callable, Sequence

from absl import app, flags

from experiments import common
from fedsim.core.errors import ConfigError

FLAGS = flags.FLAGS

# jax.random key implementations --prng_impl accepts (the philox / threefry4x32
# ones need a recent JAX).
PRNG_IMPLS = ("threefry2x32", "rbg", "unsafe_rbg", "philox2x32", "philox4x32", "threefry4x32")
# Per-algorithm hyperparameters of the benchmark (FedAvgConfig algorithms);
# FedZO keeps its paper defaults.
FIRST_ORDER_HPARAMS = {"lr": 0.1, "local_steps": 5, "batch_size": 20}
MAX_PIECE = 1 << 25     # largest single jax.random.normal call (numbers) for the raw rate
QUICK_MAX_NORMALS = 1 << 20


@dataclasses.dataclass(frozen=True)
class Settings:
  """What one benchmark run measures and how long it tries.

  Attributes:
    rounds_per_chunk: rounds in the compiled chunk that is timed.
    repeats: timed repeats of each measurement (the best is reported).
    min_time: seconds each repeat lasts at least (the measured call is
      repeated; 0 = a single call).
    sequential_clients: at most this many clients are timed sequentially.
    samples_per_client: training samples drawn (with replacement) per client.
    seed: data draw, initialisation and round keys.
    max_normals: cap on the raw-normal count (None = the engine's count).
  """
  rounds_per_chunk: int = 5
  repeats: int = 3
  min_time: float = 0.5
  sequential_clients: int = 500
  samples_per_client: int = 20
  seed: int = 0
  max_normals: int | None = None

  @classmethod
  def make(cls, quick: bool = False, **overrides) -> "Settings":
    """Defaults, then ``--quick``'s reductions, then explicit ``overrides``.

    ``None`` values in ``overrides`` are ignored (flag not given).
    """
    base = cls()
    if quick:
      base = dataclasses.replace(base, rounds_per_chunk=2, repeats=1, min_time=0.0,
                                 sequential_clients=16, max_normals=QUICK_MAX_NORMALS)
    given = {k: v for k, v in overrides.items() if v is not None}
    return dataclasses.replace(base, **given)


# ----------------------------------------------------------------------------- set-up


def make_benchmark_task(num_clients: int, samples_per_client: int = 20, seed: int = 0):
  """Digits softmax with every client holding ``samples_per_client`` samples drawn with replacement.

  Not a partition (a benchmark needs more clients than digits has samples):
  client k's samples are row k of ``default_rng(seed).integers(0, n_train,
  (N, samples_per_client))``.
  """
  import numpy as np
  from fedsim.data import load_digits, to_client_arrays
  from fedsim.tasks.classification import make_classification_task

  ds = load_digits(seed=seed)
  idx = np.random.default_rng(seed).integers(0, ds.n_train, (num_clients, samples_per_client))
  clients = to_client_arrays(ds.x_train, ds.y_train, list(idx))
  info = {"dataset": "digits", "partition": f"benchmark: {samples_per_client} samples per client "
                                            "drawn with replacement", "seed": seed}
  return make_classification_task("softmax", ds, clients, info=info)


def benchmark_hparams(name: str) -> dict:
  """The hyperparameters ``name`` is benchmarked with (full participation is added later)."""
  from fedsim import algorithms
  from fedsim.algorithms.fedavg import FedAvgConfig
  cls = algorithms.REGISTRY[name][0]
  cfg = algorithms.default_config(name)
  if cls is FedAvgConfig:
    cfg.update(FIRST_ORDER_HPARAMS)
  return cfg


def _client_update_parts(cfg):
  """(oracle, local optimizer, is_zeroth_order) of an algorithm's config."""
  from fedsim.algorithms.fedavg import FedAvgConfig, first_order_oracle
  from fedsim.algorithms.fedzo import FedZOConfig, zo_oracle
  from fedsim.algorithms.local import local_optimizer
  if isinstance(cfg, FedZOConfig):
    return (zo_oracle(cfg.direction, cfg.fd_directions, cfg.smoothing),
            local_optimizer(cfg.local_optimizer, cfg.lr), True)
  if isinstance(cfg, FedAvgConfig):
    return first_order_oracle, local_optimizer("sgd", cfg.lr), False
  raise ValueError(f"no sequential baseline for config {type(cfg).__name__}")


# ----------------------------------------------------------------------------- timing


def time_interleaved(fns: dict, repeats: int, min_time: float) -> dict:
  """Times several workloads in alternation, so slow drifts in machine load hit all alike.

  Every function must block until its work is done. Each gets one untimed
  warm-up call (unless its ``warmup`` is False), which fixes k, the number of
  calls that makes one of its repeats last about ``min_time`` (k = 1 without
  a warm-up or with ``min_time`` 0). Then ``repeats`` rounds run: in each, every
  function is called k times in turn and timed.

  Args:
    fns: name -> (function, warmup).
    repeats: timed repeats.
    min_time: seconds one repeat of one function lasts at least.

  Returns:
    name -> dict: ``seconds`` (wall, per call, one per repeat), ``best``,
    ``median``, ``warmup_s`` (None without a warm-up), ``calls_per_repeat``
    (k), ``cpu_seconds`` (this process's CPU time per call, one per repeat)
    and ``cpu_per_wall`` over the repeats (about 1 for one busy thread, up to
    the core count when XLA uses several; well below 1 when other processes
    took the CPU, a sign of a disturbed measurement).
  """
  out = {}
  for name, (fn, warmup) in fns.items():
    warm, k = None, 1
    if warmup:
      t = time.perf_counter()
      fn()
      warm = time.perf_counter() - t
      if min_time > 0:
        k = max(1, math.ceil(min_time / max(warm, 1e-6)))
    out[name] = {"warmup_s": warm, "calls_per_repeat": k, "seconds": [], "cpu_seconds": []}
  for _ in range(repeats):
    for name, (fn, _) in fns.items():
      k = out[name]["calls_per_repeat"]
      t, c = time.perf_counter(), time.process_time()
      for _ in range(k):
        fn()
      out[name]["seconds"].append((time.perf_counter() - t) / k)
      out[name]["cpu_seconds"].append((time.process_time() - c) / k)
  for r in out.values():
    r.update(best=min(r["seconds"]), median=statistics.median(r["seconds"]),
             cpu_per_wall=sum(r["cpu_seconds"]) / max(sum(r["seconds"]), 1e-12))
  return out


def _paired_median(num: Sequence[float], den: Sequence[float]) -> float:
  """Median over repeats of num[i] / den[i] (times taken side by side)."""
  return statistics.median(a / b for a, b in zip(num, den))


# ----------------------------------------------------------------------------- workloads


def prepare_vmapped(alg, task, settings: Settings):
  """Compiles one chunk of ``rounds_per_chunk`` rounds of the engine.

  Returns:
    (run_chunk, info): ``run_chunk()`` runs the compiled chunk once on the
    current state and blocks (successive calls chain the state and the round
    index); ``info`` has ``compile_s``, ``memory`` (:func:`compiled_memory`)
    and ``state_finite()`` (whether the current state is finite).
  """
  import jax
  import jax.numpy as jnp
  from fedsim.core import engine, rng

  key = jax.random.key(settings.seed)
  state = jax.jit(alg.init)(rng.stream(key, "init"))
  rounds_key = rng.stream(key, "rounds")
  length = settings.rounds_per_chunk
  t = time.perf_counter()
  compiled = engine.make_chunk(alg).lower(state, task.data, rounds_key, jnp.int32(0), length).compile()
  compile_s = time.perf_counter() - t
  box = {"state": state, "round": 0}

  def run_chunk():
    # Chains the states (the state is donated on accelerators).
    s, stats = compiled(box["state"], task.data, rounds_key, jnp.int32(box["round"]))
    jax.block_until_ready((s, stats))
    box["state"], box["round"] = s, box["round"] + length

  def state_finite():
    leaves = jax.tree_util.tree_leaves(box["state"])
    return bool(all(jnp.all(jnp.isfinite(l)) for l in leaves if jnp.issubdtype(l.dtype, jnp.floating)))

  return run_chunk, {"compile_s": compile_s, "memory": compiled_memory(compiled),
                     "state_finite": state_finite}


def prepare_sequential(alg, task, settings: Settings):
  """The sequential baseline: a Python loop over clients of a per-client jitted update.

  Clients 0..S-1 (S = min(N, sequential_clients)) run ``make_local_update``
  (the algorithm's oracle and local optimizer, jitted once, one client per
  call) from the initial point with their own data row and round key; the
  deltas are summed on the device, averaged and applied, then the result is
  blocked on. ``one_round`` splits rows and keys beforehand (what a sequential
  simulator holds: one dataset and one key per client; the baseline's best
  case); ``one_round_inloop`` slices each client's row out of the stacked
  arrays and derives its key inside the loop (a naive port of the vmapped
  layout: three more dispatches per client).

  Returns:
    (one_round, one_round_inloop, S).
  """
  import jax
  import jax.numpy as jnp
  from fedsim.algorithms.local import flat_problem, make_local_update
  from fedsim.core import rng

  cfg = alg.hparams
  oracle, opt, _ = _client_update_parts(cfg)
  key = jax.random.key(settings.seed)
  x0, loss_flat = flat_problem(task, rng.stream(key, "init"))
  update = jax.jit(make_local_update(loss_flat, task, oracle, opt, cfg.local_steps, cfg.batch_size))
  s = min(task.num_clients, settings.sequential_clients)
  rows = [jax.tree_util.tree_map(lambda a, i=i: a[i], task.client_data) for i in range(s)]
  _, k_clients, _ = rng.round_subkeys(rng.round_key(rng.stream(key, "rounds"), 0))
  keys = [rng.client_key(k_clients, i) for i in range(s)]
  jax.block_until_ready((rows, keys))

  def one_round():
    total = jnp.zeros_like(x0)
    for row, k in zip(rows, keys):
      total = total + update(x0, row, k)
    jax.block_until_ready(x0 + total / s)

  def one_round_inloop():
    total = jnp.zeros_like(x0)
    for i in range(s):
      row = jax.tree_util.tree_map(lambda a: a[i], task.client_data)
      total = total + update(x0, row, rng.client_key(k_clients, i))
    jax.block_until_ready(x0 + total / s)

  return one_round, one_round_inloop, s


def prepare_normals(count: int, dim: int, b2: int, law: str, settings: Settings,
                    steps_per_call: int | None = None):
  """Raw ``jax.random.normal`` and direction-law workloads of ``count`` numbers of width ``dim``.

  The count (capped by ``settings.max_normals``) is generated as ``pieces``
  jitted calls of one shape, each from its own key: ``steps_per_call`` client
  steps' worth (b2 * dim numbers each; the engine draws one local step of all
  N clients at once, so N is the natural value), at most 2**25 numbers, so
  large counts neither exhaust memory nor compile more than once. The raw
  workload draws (rows, dim) normals per call; the law workload draws ``b2``
  directions per key with ``fedsim.estimators.directions`` under ``vmap`` over
  keys, as one client step of the engine does. Both are compiled (and run
  once) here.

  Returns:
    (raw, law, info): two blocking workloads and ``count`` (numbers one call
    of either draws, the requested count rounded up to whole pieces) and
    ``pieces``.
  """
  import jax
  from fedsim.estimators import directions

  if settings.max_normals is not None:
    count = min(count, settings.max_normals)
  steps_total = max(1, math.ceil(count / (b2 * dim)))           # client steps' worth
  steps_piece = max(1, min(steps_total, steps_per_call or steps_total, MAX_PIECE // (b2 * dim)))
  pieces = math.ceil(steps_total / steps_piece)
  root = jax.random.key(settings.seed + 1)
  raw = jax.jit(lambda k, i: jax.random.normal(jax.random.fold_in(k, i), (steps_piece * b2, dim)))
  law_fn = jax.jit(lambda k, i: jax.vmap(lambda kk: directions(kk, b2, dim, law))(
      jax.random.split(jax.random.fold_in(k, i), steps_piece)))

  def workload(fn):
    jax.block_until_ready(fn(root, 0))  # compiles outside the timing

    def go():
      for i in range(pieces):
        out = fn(root, i)
      jax.block_until_ready(out)
    return go

  return workload(raw), workload(law_fn), {"count": pieces * steps_piece * b2 * dim, "pieces": pieces}


def compiled_memory(compiled) -> dict:
  """The compiled executable's ``memory_analysis()`` in bytes (None fields where unavailable)."""
  out = {"temp_bytes": None, "argument_bytes": None, "output_bytes": None, "alias_bytes": None,
         "total_bytes": None}
  try:
    ma = compiled.memory_analysis()
  except Exception:  # pylint: disable=broad-except  # not every backend implements it
    ma = None
  if ma is None:
    return out
  get = lambda name: int(getattr(ma, name, 0) or 0)
  out.update(temp_bytes=get("temp_size_in_bytes"), argument_bytes=get("argument_size_in_bytes"),
             output_bytes=get("output_size_in_bytes"), alias_bytes=get("alias_size_in_bytes"))
  out["total_bytes"] = out["temp_bytes"] + out["argument_bytes"] + out["output_bytes"] - out["alias_bytes"]
  return out


def process_memory() -> dict:
  """Peak RSS of this process so far and, where the device reports it, its peak bytes in use."""
  import jax
  rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
  rss *= 1 if sys.platform == "darwin" else 1024  # bytes on macOS, KiB on Linux
  device_peak = None
  try:
    stats = jax.devices()[0].memory_stats()
    if stats and "peak_bytes_in_use" in stats:
      device_peak = int(stats["peak_bytes_in_use"])
  except Exception:  # pylint: disable=broad-except  # CPU has no memory_stats
    device_peak = None
  return {"peak_rss_bytes": int(rss), "device_peak_bytes": device_peak}


# ----------------------------------------------------------------------------- one record


def benchmark_one(name: str, num_clients: int, settings: Settings,
                  log: Callable[[str], None] = print) -> dict:
  """Every measurement for one (algorithm, N); one ``log`` line per measurement.

  The engine chunk, the sequential loop and (zeroth-order algorithms) the raw
  normal and direction-law workloads are timed in alternation
  (:func:`time_interleaved`). Rates use the best repeat of each; ``speedup``
  and the direction ``ratio`` are medians of the ratios of side-by-side
  repeats (``speedup_of_best`` and ``ratio_of_best`` divide the best rates).

  Returns:
    The JSON record (see the module docstring).
  """
  from fedsim import algorithms

  task = make_benchmark_task(num_clients, settings.samples_per_client, settings.seed)
  hp = benchmark_hparams(name)
  hp["clients_per_round"] = num_clients
  alg = algorithms.build(name, task, **hp)
  cfg = alg.hparams
  _, _, zeroth_order = _client_update_parts(cfg)
  d, n, h, length = task.dim, num_clients, cfg.local_steps, settings.rounds_per_chunk
  tag = f"[{name} N={n}]"

  run_chunk, vinfo = prepare_vmapped(alg, task, settings)
  one_round, one_round_inloop, s = prepare_sequential(alg, task, settings)
  fns = {"vmapped": (run_chunk, True), "sequential": (one_round, True),
         "sequential_inloop": (one_round_inloop, True)}
  if zeroth_order:
    b2 = cfg.fd_directions
    per_round = n * h * b2 * d
    raw, law, ninfo = prepare_normals(per_round, d, b2, cfg.direction, settings, steps_per_call=n)
    # A large count makes a long repeat (and one piece has run): no warm-up pass.
    warm = ninfo["count"] <= MAX_PIECE * 4
    fns.update(raw=(raw, warm), law=(law, warm))
  timing = time_interleaved(fns, settings.repeats, settings.min_time)

  vt, st = timing["vmapped"], timing["sequential"]
  round_s = [t / length for t in vt["seconds"]]
  spr = min(round_s)
  vm_rate = n * h / spr
  log(f"{tag} vmapped: {spr:.4g} s/round (median {statistics.median(round_s):.4g}), "
      f"{vm_rate:,.0f} client steps/s; compile {vinfo['compile_s']:.2f} s; cpu/wall {vt['cpu_per_wall']:.2f}")

  sq_rate = s * h / st["best"]
  # Client steps per second of each, repeat by repeat.
  speedup = _paired_median([n * h * length / t for t in vt["seconds"]], [s * h / t for t in st["seconds"]])
  it = timing["sequential_inloop"]
  speedup_inloop = _paired_median([n * h * length / t for t in vt["seconds"]], [s * h / t for t in it["seconds"]])
  log(f"{tag} sequential ({s} of {n} clients timed): {st['best'] / s * 1e3:.3g} ms/client, "
      f"{sq_rate:,.0f} client steps/s; speedup {speedup:.2f}x; cpu/wall {st['cpu_per_wall']:.2f} "
      f"(slicing rows and keys in the loop: {it['best'] / s * 1e3:.3g} ms/client, speedup {speedup_inloop:.2f}x)")

  mem = dict(vinfo["memory"], **process_memory())
  log(f"{tag} memory: compiled temp {_mib(mem['temp_bytes'])} + args {_mib(mem['argument_bytes'])} "
      f"+ out {_mib(mem['output_bytes'])} MiB; peak RSS {_mib(mem['peak_rss_bytes'])} MiB"
      + (f"; device peak {_mib(mem['device_peak_bytes'])} MiB" if mem["device_peak_bytes"] else ""))

  record = {
      "algorithm": name, "num_clients": n, "dim": d, "local_steps": h, "batch_size": cfg.batch_size,
      "hparams": {k: _jsonable(v) for k, v in dataclasses.asdict(cfg).items()},
      "samples_per_client": settings.samples_per_client, "rounds_per_chunk": length,
      "repeats": settings.repeats, "compile_s": vinfo["compile_s"], "first_chunk_s": vt["warmup_s"],
      "seconds_per_round": spr, "seconds_per_round_median": statistics.median(round_s),
      "seconds_per_round_all": round_s, "chunks_per_repeat": vt["calls_per_repeat"],
      "cpu_seconds_per_round": min(vt["cpu_seconds"]) / length,
      "vmapped_cpu_per_wall": vt["cpu_per_wall"], "vmapped_steps_per_s": vm_rate,
      "state_finite": vinfo["state_finite"](),
      "sequential_clients_timed": s, "sequential_subset": s < n,
      "sequential_seconds_per_client": st["best"] / s,
      "sequential_seconds_per_client_median": st["median"] / s,
      "sequential_cpu_seconds_per_client": min(st["cpu_seconds"]) / s,
      "sequential_passes_per_repeat": st["calls_per_repeat"], "sequential_cpu_per_wall": st["cpu_per_wall"],
      "sequential_steps_per_s": sq_rate,
      "sequential_note": ("python loop over clients of a per-client jitted make_local_update; "
                          f"{s} of {n} clients timed; rates per client local step"),
      "speedup": speedup, "speedup_of_best": vm_rate / sq_rate,
      "sequential_inloop_seconds_per_client": it["best"] / s,
      "sequential_inloop_steps_per_s": s * h / it["best"], "speedup_vs_inloop": speedup_inloop,
      "memory": mem, "directions": None,
  }

  if zeroth_order:
    rt, lt = timing["raw"], timing["law"]
    count = ninfo["count"]
    engine_rate = per_round / spr
    raw_rate, law_rate = count / rt["best"], count / lt["best"]
    # Per repeat: (numbers per second in the engine) / (raw numbers per second).
    ratio = _paired_median([per_round * length / t for t in vt["seconds"]], [count / t for t in rt["seconds"]])
    record["directions"] = {
        "law": cfg.direction, "fd_directions": b2, "per_round": per_round,
        "engine_per_s": engine_rate, "raw_normal_per_s": raw_rate, "law_per_s": law_rate,
        "ratio": ratio, "ratio_of_best": engine_rate / raw_rate, "law_ratio": law_rate / raw_rate,
        "raw_normal_count": count, "raw_normal_pieces": ninfo["pieces"],
        "raw_normal_seconds": rt["seconds"], "law_seconds": lt["seconds"],
        "raw_normal_cpu_per_wall": rt["cpu_per_wall"],
    }
    log(f"{tag} directions: engine {engine_rate / 1e6:,.1f} M/s, raw normal {raw_rate / 1e6:,.1f} M/s "
        f"({count:,} numbers), {cfg.direction} law alone {law_rate / 1e6:,.1f} M/s; ratio {ratio:.2f}")
  return record


def run_benchmark(algorithm_names: Sequence[str], num_clients: Sequence[int], settings: Settings,
                  log: Callable[[str], None] = print,
                  on_record: Callable[[list], None] | None = None) -> list[dict]:
  """Runs :func:`benchmark_one` for every algorithm and N (algorithms outer, N inner).

  Args:
    on_record: called with the list of records so far after each record.

  Returns:
    The records.
  """
  records = []
  for name in algorithm_names:
    for n in num_clients:
      records.append(benchmark_one(name, n, settings, log))
      if on_record is not None:
        on_record(records)
  return records


# ----------------------------------------------------------------------------- output


def environment() -> dict:
  """Device, backend, versions, CPU count, PRNG implementation and load average."""
  import jax
  import jaxlib
  dev = jax.devices()[0]
  try:
    load = list(os.getloadavg())
  except OSError:
    load = None
  try:
    affinity = len(os.sched_getaffinity(0))
  except AttributeError:
    affinity = None
  kind = dev.device_kind
  if dev.platform == "cpu":
    kind = _cpu_model() or platform.processor() or platform.machine()
  return {"device": f"{dev.platform}: {kind}", "device_count": jax.device_count(),
          "backend": jax.default_backend(), "jax_version": jax.__version__,
          "jaxlib_version": jaxlib.__version__, "cpu_count": os.cpu_count(),
          "cpu_affinity": affinity, "machine": platform.machine(),
          "python": platform.python_version(),
          "prng_impl": str(jax.config.jax_default_prng_impl), "load_average": load}


def _cpu_model():
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith("model name"):
          return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return None


def _mib(b):
  return "n/a" if b is None else f"{b / 2**20:,.1f}"


def _rate(r):
  return "" if r is None else f"{r:,.0f}"


def _mega(r):
  return "" if r is None else f"{r / 1e6:,.1f}"


def _jsonable(v):
  return v if isinstance(v, (int, float, str, bool, type(None))) else str(v)


def markdown_table(records: Sequence[dict]) -> str:
  """The records as a markdown table (rates in client local steps per second)."""
  head = ("| algorithm | N | s/round | vmapped steps/s | sequential steps/s (clients timed) | speedup "
          "| compiled temp+arg+out MiB | peak RSS MiB | device peak MiB "
          "| directions M/s engine | raw normal M/s | ratio |")
  rows = [head, "|" + "---|" * 12]
  for r in records:
    m, dr = r["memory"], r["directions"] or {}
    rows.append(
        f"| {r['algorithm']} | {r['num_clients']} | {r['seconds_per_round']:.4g} "
        f"| {_rate(r['vmapped_steps_per_s'])} "
        f"| {_rate(r['sequential_steps_per_s'])} ({r['sequential_clients_timed']}) "
        f"| {r['speedup']:.2f}x | {_mib(m['total_bytes'])} | {_mib(m['peak_rss_bytes'])} "
        f"| {_mib(m['device_peak_bytes'])} | {_mega(dr.get('engine_per_s'))} "
        f"| {_mega(dr.get('raw_normal_per_s'))} | {'' if not dr else format(dr['ratio'], '.2f')} |")
  return "\n".join(rows) + "\n"


def write_outputs(output_dir: str, records: Sequence[dict], env: dict, settings: Settings,
                  command: str = "") -> None:
  """Writes ``benchmark.json`` and ``benchmark.md`` under ``output_dir``."""
  os.makedirs(output_dir, exist_ok=True)
  doc = {**env, "settings": dataclasses.asdict(settings), "command": command,
         "records": list(records)}
  with open(os.path.join(output_dir, "benchmark.json"), "w") as f:
    json.dump(doc, f, indent=2)
  with open(os.path.join(output_dir, "benchmark.md"), "w") as f:
    f.write(f"# fedsim engine benchmark\n\n{env['device']} ({env['backend']}, jax {env['jax_version']}, "
            f"{env['cpu_count']} CPUs, PRNG {env['prng_impl']}); digits softmax, d = "
            f"{records[0]['dim'] if records else '?'}; full participation; rates in client local "
            f"steps per second, best of {settings.repeats} interleaved repeats; speedup and ratio: "
            "medians of side-by-side ratios.\n\n")
    if command:
      f.write(f"`{command}`\n\n")
    f.write(markdown_table(records))


# ----------------------------------------------------------------------------- binary


def define_flags():
  """Defines the benchmark's flags (only when run as a binary, so importing is side-effect free)."""
  flags.DEFINE_list("algorithm", ["fedavg", "fedzo"], "comma-separated algorithms to benchmark")
  flags.DEFINE_list("num_clients", ["100", "1000", "10000"],
                    "comma-separated client counts N (full participation: all N clients every round)")
  flags.DEFINE_integer("repeats", None, "timed repeats per measurement, best reported (default 3; --quick: 1)")
  flags.DEFINE_float("min_time", None, "seconds each timed repeat lasts at least (default 0.5; --quick: 0)")
  flags.DEFINE_integer("rounds_per_chunk", None, "rounds in the timed compiled chunk (default 5; --quick: 2)")
  flags.DEFINE_integer("sequential_clients", None,
                       "clients timed in the sequential baseline, at most (default 500; --quick: 16)")
  flags.DEFINE_integer("samples_per_client", 20, "training samples drawn with replacement per client")
  flags.DEFINE_integer("seed", 0, "seed of the client data draw, initialisation and keys")
  flags.DEFINE_string("prng_impl", None, f"JAX PRNG implementation: {', '.join(PRNG_IMPLS)} "
                      "(default: JAX's, threefry2x32)")
  flags.DEFINE_bool("quick", False, "smoke test: 2 rounds per chunk, 1 repeat, 16 sequential clients")
  flags.DEFINE_string("output_dir", "runs/benchmark", "where benchmark.json and benchmark.md go")


def parse_num_clients(values: Sequence[str]) -> list[int]:
  """``--num_clients`` strings -> ints.

  Raises:
    ConfigError: empty, not an integer, or < 1.
  """
  if not values:
    raise ConfigError("num_clients", "empty; give comma-separated integers >= 1")
  out = []
  for v in values:
    try:
      n = int(v)
    except (TypeError, ValueError):
      raise ConfigError("num_clients", f"must be comma-separated integers >= 1; got {v!r}") from None
    if n < 1:
      raise ConfigError("num_clients", f"must be >= 1; got {n}")
    out.append(n)
  return out


def validate(algorithm_names: Sequence[str], num_clients: Sequence[str], *, repeats=None, min_time=None,
             rounds_per_chunk=None, sequential_clients=None, samples_per_client=20,
             prng_impl=None) -> list[int]:
  """Checks the flag values before anything is built or compiled.

  Returns:
    The client counts as ints.

  Raises:
    ConfigError: naming the flag and what is accepted.
  """
  from fedsim import algorithms
  from fedsim.algorithms.fedavg import FedAvgConfig
  from fedsim.algorithms.fedzo import FedZOConfig
  accepted = [a for a, (cls, _, _) in algorithms.REGISTRY.items() if cls in (FedAvgConfig, FedZOConfig)]
  if not algorithm_names:
    raise ConfigError("algorithm", f"empty; accepted: {', '.join(accepted)}")
  for a in algorithm_names:
    if a not in accepted:
      raise ConfigError("algorithm", f"unknown {a!r}; accepted: {', '.join(accepted)}")
  ns = parse_num_clients(num_clients)
  for flag, value in (("repeats", repeats), ("rounds_per_chunk", rounds_per_chunk),
                      ("sequential_clients", sequential_clients),
                      ("samples_per_client", samples_per_client)):
    if value is not None and value < 1:
      raise ConfigError(flag, f"must be >= 1; got {value}")
  if min_time is not None and not (math.isfinite(min_time) and min_time >= 0):
    raise ConfigError("min_time", f"must be a finite number >= 0; got {min_time}")
  if prng_impl is not None and prng_impl not in PRNG_IMPLS:
    raise ConfigError("prng_impl", f"unknown {prng_impl!r}; accepted: {', '.join(PRNG_IMPLS)}")
  return ns


def main(argv):
  del argv
  try:
    ns = validate(FLAGS.algorithm, FLAGS.num_clients, repeats=FLAGS.repeats, min_time=FLAGS.min_time,
                  rounds_per_chunk=FLAGS.rounds_per_chunk, sequential_clients=FLAGS.sequential_clients,
                  samples_per_client=FLAGS.samples_per_client, prng_impl=FLAGS.prng_impl)
  except ConfigError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
  import jax
  if FLAGS.prng_impl:
    try:
      jax.config.update("jax_default_prng_impl", FLAGS.prng_impl)
      jax.random.key(0)
    except Exception:  # pylint: disable=broad-except  # an older JAX without this implementation
      print(f"error: --prng_impl: {FLAGS.prng_impl!r} is not available in jax {jax.__version__}",
            file=sys.stderr)
      sys.exit(2)
  settings = Settings.make(FLAGS.quick, repeats=FLAGS.repeats, min_time=FLAGS.min_time,
                           rounds_per_chunk=FLAGS.rounds_per_chunk,
                           sequential_clients=FLAGS.sequential_clients,
                           samples_per_client=FLAGS.samples_per_client, seed=FLAGS.seed)
  env = environment()
  command = "python -m experiments.benchmark " + " ".join(sys.argv[1:])
  print(f"benchmark on {env['device']} ({env['backend']}, jax {env['jax_version']}, {env['cpu_count']} CPUs, "
        f"PRNG {env['prng_impl']}): algorithms {', '.join(FLAGS.algorithm)}; N = "
        f"{', '.join(map(str, ns))}; output {FLAGS.output_dir}", flush=True)
  log = lambda line: print(line, flush=True)
  records = run_benchmark(FLAGS.algorithm, ns, settings, log=log,
                          on_record=lambda recs: write_outputs(FLAGS.output_dir, recs, env, settings, command))
  env["load_average_end"] = environment()["load_average"]
  write_outputs(FLAGS.output_dir, records, env, settings, command)
  print(f"wrote {FLAGS.output_dir}/benchmark.json and benchmark.md", flush=True)


if __name__ == "__main__":
  define_flags()
  app.run(main, flags_parser=common.parse_flags_or_exit)

