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
3. Memory: the compiled chunk's ``memory_analysis()`` (temp, argument, output
   bytes), the process peak RSS so far (``resource.getrusage``; monotone over
   the run, so it is the peak of every measurement up to this one) and, where
   the device reports it (GPU, TPU), ``memory_stats()["peak_bytes_in_use"]``
   (also a peak since the process started).
4. For zeroth-order algorithms: directions generated per second in the engine,
   N * H * b2 * d normals per round / seconds per round, against the raw
   ``jax.random.normal`` rate measured in the same run on the same total count
   (jitted, in pieces of at most 2**25 numbers when larger) and against the
   direction law alone (``fedsim.estimators.directions``, one key per client
   step as in the engine); ``ratio`` = engine rate / raw rate.

The client data is NOT a partition: digits has only 1,437 training samples, so
every client gets ``--samples_per_client`` (20) training samples drawn with
replacement (``numpy.random.default_rng(--seed)``) and
``fedsim.data.to_client_arrays`` pads them into the Task layout. The numbers
measure the simulator, not learning.

Timings are the best of ``--repeats`` repeats (each repeat runs the measured
call enough times to last ``--min_time`` seconds); the medians are in the JSON
too. The best is the least disturbed by other processes on a shared machine.

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

PRNG_IMPLS = ("threefry2x32", "rbg", "unsafe_rbg")
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


def time_calls(fn: Callable[[], object], repeats: int, min_time: float, warmup: bool = True):
  """Times ``fn`` (which must block until its work is done).

  One untimed warm-up call (unless ``warmup`` is False), then ``repeats``
  repeats; each repeat calls ``fn`` k times, k chosen from the warm-up so a
  repeat lasts about ``min_time`` (k = 1 without a warm-up).

  Returns:
    A dict: ``seconds`` (per call, one per repeat), ``best``, ``median``,
    ``warmup_s`` (None without a warm-up), ``calls_per_repeat`` (k) and
    ``cpu_per_wall``: this process's CPU seconds / wall seconds over the
    repeats (about 1 for one busy thread; well below 1 when other processes
    took the CPU, a sign of a disturbed measurement).
  """
  warm, k = None, 1
  if warmup:
    t = time.perf_counter()
    fn()
    warm = time.perf_counter() - t
    if min_time > 0:
      k = max(1, math.ceil(min_time / max(warm, 1e-6)))
  out = []
  wall0, cpu0 = time.perf_counter(), time.process_time()
  for _ in range(repeats):
    t = time.perf_counter()
    for _ in range(k):
      fn()
    out.append((time.perf_counter() - t) / k)
  cpu_per_wall = (time.process_time() - cpu0) / max(time.perf_counter() - wall0, 1e-9)
  return {"seconds": out, "best": min(out), "median": statistics.median(out), "warmup_s": warm,
          "calls_per_repeat": k, "cpu_per_wall": cpu_per_wall}


# ----------------------------------------------------------------------------- measurements


def measure_vmapped(alg, task, settings: Settings) -> dict:
  """Compiles one chunk of ``rounds_per_chunk`` rounds, warms it up and times it.

  Returns:
    ``compile_s``, ``timing`` (:func:`time_calls` of one chunk), the compiled
    executable's ``memory`` analysis and ``state_finite`` (the final state is
    finite).
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

  timing = time_calls(run_chunk, settings.repeats, settings.min_time)
  leaves = jax.tree_util.tree_leaves(box["state"])
  finite = bool(all(jnp.all(jnp.isfinite(l)) for l in leaves if jnp.issubdtype(l.dtype, jnp.floating)))
  return {"compile_s": compile_s, "timing": timing, "memory": compiled_memory(compiled),
          "state_finite": finite}


def measure_sequential(alg, task, settings: Settings) -> dict:
  """Times one round of a Python loop over clients calling a per-client jitted update.

  Clients 0..S-1 (S = min(N, sequential_clients)) run
  ``make_local_update(...)`` (jitted once, one client at a time) from the
  initial point with their own data row and round key; the deltas are summed
  on the device, averaged and applied, then the result is blocked on.

  Returns:
    ``clients_timed`` and ``timing`` (:func:`time_calls` of one pass over them).
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
  # What a sequential simulator holds: one data row and one key per client.
  rows = [jax.tree_util.tree_map(lambda a, i=i: a[i], task.client_data) for i in range(s)]
  _, k_clients, _ = rng.round_subkeys(rng.round_key(rng.stream(key, "rounds"), 0))
  keys = [rng.client_key(k_clients, i) for i in range(s)]
  jax.block_until_ready((rows, keys))

  def one_round():
    total = jnp.zeros_like(x0)
    for row, k in zip(rows, keys):
      total = total + update(x0, row, k)
    jax.block_until_ready(x0 + total / s)

  return {"clients_timed": s, "timing": time_calls(one_round, settings.repeats, settings.min_time)}


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


def measure_normal_rates(count: int, dim: int, b2: int, law: str, settings: Settings) -> dict:
  """Raw ``jax.random.normal`` and direction-law rates on ``count`` numbers of width ``dim``.

  The count is generated as ``pieces`` jitted calls of the same shape
  (rows, dim), rows * dim <= 2**25 (each piece from its own key), so large
  counts neither exhaust memory nor compile more than once. The law rate draws
  ``b2`` directions per key with ``fedsim.estimators.directions`` under
  ``vmap`` over keys, as one client step of the engine does.

  Returns:
    ``count`` (numbers actually drawn, >= the requested count rounded to
    pieces), ``raw_per_s``, ``law_per_s`` and the timings.
  """
  import jax
  from fedsim.estimators import directions

  if settings.max_normals is not None:
    count = min(count, settings.max_normals)
  steps_total = max(1, math.ceil(count / (b2 * dim)))           # client steps' worth
  steps_piece = max(1, min(steps_total, MAX_PIECE // (b2 * dim)))
  pieces = math.ceil(steps_total / steps_piece)
  drawn = pieces * steps_piece * b2 * dim
  root = jax.random.key(settings.seed + 1)

  raw = jax.jit(lambda k, i: jax.random.normal(jax.random.fold_in(k, i), (steps_piece * b2, dim)))
  law_fn = jax.jit(lambda k, i: jax.vmap(lambda kk: directions(kk, b2, dim, law))(
      jax.random.split(jax.random.fold_in(k, i), steps_piece)))

  def run(fn):
    def go():
      for i in range(pieces):
        out = fn(root, i)
      jax.block_until_ready(out)
    jax.block_until_ready(fn(root, 0))  # compile outside the timing
    return go

  # With several pieces a repeat already lasts long (and the compiled piece has
  # run): no warm-up pass over the whole count.
  warm = pieces == 1
  raw_t = time_calls(run(raw), settings.repeats, settings.min_time, warmup=warm)
  law_t = time_calls(run(law_fn), settings.repeats, settings.min_time, warmup=warm)
  return {"count": drawn, "pieces": pieces, "raw_timing": raw_t, "law_timing": law_t,
          "raw_per_s": drawn / raw_t["best"], "law_per_s": drawn / law_t["best"]}


def benchmark_one(name: str, num_clients: int, settings: Settings,
                  log: Callable[[str], None] = print) -> dict:
  """Every measurement for one (algorithm, N); one ``log`` line per measurement.

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
  d, n, h = task.dim, num_clients, cfg.local_steps
  tag = f"[{name} N={n}]"

  vm = measure_vmapped(alg, task, settings)
  length = settings.rounds_per_chunk
  vt = vm["timing"]
  spr = vt["best"] / length
  vm_rate = n * h / spr
  log(f"{tag} vmapped: {spr:.4g} s/round (median {vt['median'] / length:.4g}), "
      f"{vm_rate:,.0f} client steps/s; compile {vm['compile_s']:.2f} s; cpu/wall {vt['cpu_per_wall']:.2f}")

  sq = measure_sequential(alg, task, settings)
  s, st = sq["clients_timed"], sq["timing"]
  sq_rate = s * h / st["best"]
  speedup = vm_rate / sq_rate
  log(f"{tag} sequential ({s} of {n} clients timed): {st['best'] / s * 1e3:.3g} ms/client, "
      f"{sq_rate:,.0f} client steps/s; speedup {speedup:.2f}x; cpu/wall {st['cpu_per_wall']:.2f}")

  mem = dict(vm["memory"], **process_memory())
  log(f"{tag} memory: compiled temp {_mib(mem['temp_bytes'])} + args {_mib(mem['argument_bytes'])} "
      f"+ out {_mib(mem['output_bytes'])} MiB; peak RSS {_mib(mem['peak_rss_bytes'])} MiB"
      + (f"; device peak {_mib(mem['device_peak_bytes'])} MiB" if mem["device_peak_bytes"] else ""))

  record = {
      "algorithm": name, "num_clients": n, "dim": d, "local_steps": h,
      "batch_size": cfg.batch_size, "hparams": {k: _jsonable(v) for k, v in dataclasses.asdict(cfg).items()},
      "samples_per_client": settings.samples_per_client, "rounds_per_chunk": settings.rounds_per_chunk,
      "repeats": settings.repeats, "compile_s": vm["compile_s"], "first_chunk_s": vt["warmup_s"],
      "seconds_per_round": spr, "seconds_per_round_median": vt["median"] / length,
      "seconds_per_round_all": [t / length for t in vt["seconds"]],
      "chunks_per_repeat": vt["calls_per_repeat"], "vmapped_cpu_per_wall": vt["cpu_per_wall"],
      "vmapped_steps_per_s": vm_rate, "state_finite": vm["state_finite"],
      "sequential_clients_timed": s, "sequential_subset": s < n,
      "sequential_seconds_per_client": st["best"] / s,
      "sequential_seconds_per_client_median": st["median"] / s,
      "sequential_passes_per_repeat": st["calls_per_repeat"], "sequential_cpu_per_wall": st["cpu_per_wall"],
      "sequential_steps_per_s": sq_rate,
      "sequential_note": ("python loop over clients of a per-client jitted make_local_update; "
                          f"{s} of {n} clients timed, rate per client local step"),
      "speedup": speedup, "memory": mem, "directions": None,
  }

  if zeroth_order:
    b2 = cfg.fd_directions
    per_round = n * h * b2 * d
    engine_rate = per_round / spr
    nr = measure_normal_rates(per_round, d, b2, cfg.direction, settings)
    record["directions"] = {
        "law": cfg.direction, "fd_directions": b2, "per_round": per_round,
        "engine_per_s": engine_rate, "raw_normal_per_s": nr["raw_per_s"],
        "raw_normal_count": nr["count"], "raw_normal_pieces": nr["pieces"],
        "law_per_s": nr["law_per_s"], "ratio": engine_rate / nr["raw_per_s"],
        "law_ratio": nr["law_per_s"] / nr["raw_per_s"],
        "raw_normal_seconds": nr["raw_timing"]["seconds"], "law_seconds": nr["law_timing"]["seconds"],
        "raw_normal_cpu_per_wall": nr["raw_timing"]["cpu_per_wall"],
    }
    dr = record["directions"]
    log(f"{tag} directions: engine {engine_rate / 1e6:,.1f} M/s, raw normal {dr['raw_normal_per_s'] / 1e6:,.1f} M/s "
        f"({dr['raw_normal_count']:,} numbers), {cfg.direction} law alone {dr['law_per_s'] / 1e6:,.1f} M/s; "
        f"ratio {dr['ratio']:.2f}")
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
            f"{records[0]['dim'] if records else '?'}; full participation; best of "
            f"{settings.repeats} repeats; rates in client local steps per second.\n\n")
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
    jax.config.update("jax_default_prng_impl", FLAGS.prng_impl)
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

