"""Shared pieces of the benchmark suites: settings, timing, memory, environment.

Used by every ``experiments.bench`` suite and by the ``experiments.benchmark``
binary. Timing is wall clock (``time.perf_counter``) around calls that block
until their device work is done; ``process_time`` (CPU seconds of this process)
is recorded alongside, so ``cpu_per_wall`` flags runs disturbed by other
processes on a shared machine (about 1 for one busy thread, up to the core
count when XLA uses several; well below that when others took the CPU).
"""

from __future__ import annotations

import dataclasses
import math
import os
import platform
import resource
import statistics
import sys
import time
from collections.abc import Sequence

SUITES = ("vmap", "scaling", "roofline", "compile", "fzoos", "ffgb", "checkpoint", "fd_memory", "gpu_table",
          "sweep_table")
# Suites that run only when named: sized for an accelerator (gpu_table: N up to 10^6;
# sweep_table: 64 configurations of N = 10^4 clients in one program).
ONLY_WHEN_NAMED = ("gpu_table", "sweep_table")
# What runs without --suite.
DEFAULT_SUITES = tuple(s for s in SUITES if s not in ONLY_WHEN_NAMED)
QUICK_MAX_NORMALS = 1 << 20


# The roofs' default sizes per suite: (n of the n x n float32 matmul, bytes of the
# bandwidth array). The roofline suite is sized for this CPU; gpu_table for an
# accelerator (an 8192^2 matmul fills an H100/H200, and 2 GiB is 30x its L2).
ROOF_SIZES = {"roofline": (2048, 1 << 28), "gpu_table": (8192, 1 << 31)}


@dataclasses.dataclass(frozen=True)
class Settings:
  """What one benchmark run measures and how long it tries.

  Attributes:
    rounds_per_chunk: rounds in the compiled chunk that is timed (vmap suite).
    repeats: timed repeats of each measurement (the best is reported).
    min_time: seconds each repeat lasts at least (the measured call is
      repeated; 0 = a single call).
    sequential_clients: at most this many clients are timed sequentially.
    samples_per_client: training samples drawn (with replacement) per client.
    seed: data draw, initialisation and keys.
    max_normals: cap on the raw-normal count (None = the engine's count).
    scaling_clients: N of the scaling suite (FedZO, digits softmax, full participation).
    scaling_repeats: timed one-round repeats per N in the scaling suite.
    compile_rounds: chunk lengths of the compile suite (at N = compile_clients[1]).
    compile_clients: client counts of the compile suite (at compile_rounds[1]).
    compile_main_job_rounds: rounds of the compile suite's main-job runs (0 = skipped).
    compile_emitters_clients: N of the compile suite's classic-vs-fusion XLA CPU
      emitters comparison (the CNN runs at N / 5; 0 = skipped).
    compile_sweep_rounds, compile_sweep_seeds: the compile suite's sweep_fedzo_alpha.cfg
      runs (rounds 0 = skipped).
    compile_warmup_rounds, compile_warmup_repeats: the compile suite's main-job warm-up runs
      (FedAvg, process start to first round and to final loss, cold and warm cache; repeats
      0 = skipped).
    baseline: a git revision whose tree the compile suite's warm-up runs side by side with
      this one ("" = none).
    compile_parts: the compile suite's parts among chunks, main_job, emitters, sweep, warmup.
    roofline_clients: N of the roofline suite.
    matmul_size: n of the n x n float32 matmul that measures the machine's peak
      (None: the suite's own, :data:`ROOF_SIZES`).
    fzoos_dim, fzoos_steps: d and T of the FZooS suite (Fig. 1: 300, 10).
    fzoos_configs: (N, M) pairs of the FZooS suite (M = random features).
    fzoos_vmap: (N, M) of FZooS in the vmap suite.
    fzoos_baseline: the git revision whose whole FZooS run the fzoos suite times side by side with
      this checkout's ("" or "none": this checkout's alone; --quick: "").
    ffgb_clients, ffgb_local_steps, ffgb_oracle_steps, ffgb_batch: the FFGB suite
      (paper: 56, 2, 1000, 128).
    ffgb_vmap_oracle_steps: the mlp oracle's Adam steps in the vmap suite.
    client_block: the delta-averaging algorithms' ``client_block`` in the vmap
      suite (None = the backend default, fedsim.core.client_map).
    scaling_algorithms: the algorithms of the scaling suite (fedavg, fedzo).
    bandwidth_bytes: size of the array whose ``2 x + 1`` measures the memory
      bandwidth (roofline and gpu_table suites; None: the suite's own,
      :data:`ROOF_SIZES`).
    gpu_table_algorithms, gpu_table_clients: the gpu_table suite's rows (experiments.bench.gpu_table.ALGORITHMS)
      and N (FZooS and FFGB run at their own N, ``fzoos_vmap`` and ``ffgb_clients``).
    gpu_table_max_block: in the gpu_table suite, N above this runs in client
      blocks of this many clients (fedsim.core.client_map), so one step's
      per-client temporaries stay bounded; N at or below it is one vmap.
    gpu_table_sequential: clients timed one at a time in the gpu_table suite.
    checkpoint_rounds, checkpoint_main_every: the checkpoint suite's main-job FedAvg rounds and
      its ``--checkpoint_every`` (200 and 20).
    checkpoint_main_job_rounds, checkpoint_fzoos_rounds: rounds of the checkpoint suite's cadence jobs (the
      main job, FZooS Fig. 1; 0 = skipped).
    checkpoint_task, checkpoint_clients_per_round: the checkpoint suite's task and M (the main
      job's ``softmax`` and 10; ``mlp`` with M = 100 makes rounds several times longer at about
      the same per-save cost).
    sweep_table_algorithms, sweep_table_clients, sweep_table_configs: the
      sweep_table suite's algorithms, N and K (configurations per program).
    sweep_table_lrs: at most this many lr values among a row's K configurations
      (the rest are seeds; ``experiments.bench.sweep_table.grid``).
    sweep_table_max_block: off CPU, FedAvg / FedZO rows whose K x N client-members
      exceed it run in client blocks of ``sweep_table_max_block // K`` clients (on
      CPU the cap is the backend's block, 256).
    fd_memory_clients, fd_memory_blocks, fd_memory_client_block: the fd_memory suite's N, FedZO
      ``direction_block`` values (0 = materialised) and ``client_block`` (0 = one vmap).
    fd_memory_time_clients: the fd_memory suite also runs and times the rounds at N up to this.
  """
  rounds_per_chunk: int = 5
  repeats: int = 3
  min_time: float = 0.5
  sequential_clients: int = 500
  samples_per_client: int = 20
  seed: int = 0
  max_normals: int | None = None
  scaling_clients: tuple = (100, 1000, 10000, 100000)
  scaling_repeats: int = 2
  compile_rounds: tuple = (1, 10, 100)
  compile_clients: tuple = (100, 1000, 10000)
  compile_main_job_rounds: int = 300
  compile_emitters_clients: int = 1000
  compile_sweep_rounds: int = 300
  compile_sweep_seeds: int = 5
  compile_warmup_rounds: int = 100
  compile_warmup_repeats: int = 3
  baseline: str = ""
  compile_parts: tuple = ("chunks", "main_job", "emitters", "sweep", "warmup")
  roofline_clients: int = 1000
  matmul_size: int | None = None
  fzoos_dim: int = 300
  fzoos_steps: int = 10
  fzoos_configs: tuple = ((5, 10000), (50, 10000), (500, 1000))
  fzoos_vmap: tuple = (50, 1000)
  fzoos_baseline: str = "main"
  ffgb_clients: int = 56
  ffgb_local_steps: int = 2
  ffgb_oracle_steps: int = 1000
  ffgb_batch: int = 128
  ffgb_vmap_oracle_steps: int = 100
  client_block: int | None = None
  scaling_algorithms: tuple = ("fedzo",)
  bandwidth_bytes: int | None = None
  gpu_table_algorithms: tuple = ("fedavg", "fedzo_materialised", "fedzo_streamed", "decomfl", "hiso", "ffgb", "fzoos")
  gpu_table_clients: tuple = (1000, 10000, 100000, 1000000)
  gpu_table_max_block: int = 100000
  gpu_table_sequential: int = 200
  checkpoint_rounds: int = 200
  checkpoint_main_every: int = 20
  checkpoint_task: str = "softmax"
  checkpoint_clients_per_round: int = 10
  checkpoint_main_job_rounds: int = 3000
  checkpoint_fzoos_rounds: int = 20
  sweep_table_algorithms: tuple = ("fedavg", "fedzo", "hiso")
  sweep_table_clients: tuple = (1000, 10000)
  sweep_table_configs: tuple = (1, 4, 16, 64)
  sweep_table_lrs: int = 4
  sweep_table_max_block: int = 100000
  fd_memory_clients: tuple = (1000, 100000)
  fd_memory_blocks: tuple = (0, 1, 4)
  fd_memory_client_block: int = 0
  fd_memory_time_clients: int = 1000

  def roof_sizes(self, suite: str) -> tuple[int, int]:
    """(matmul n, bandwidth array bytes) of ``suite``: the settings where given, else its :data:`ROOF_SIZES`."""
    n, nbytes = ROOF_SIZES[suite]
    return (self.matmul_size or n, self.bandwidth_bytes or nbytes)

  @classmethod
  def make(cls, quick: bool = False, **overrides) -> Settings:
    """Defaults, then ``--quick``'s reductions, then explicit ``overrides``.

    ``None`` values in ``overrides`` are ignored (flag not given).
    """
    base = cls()
    if quick:
      base = dataclasses.replace(
          base, rounds_per_chunk=2, repeats=1, min_time=0.0, sequential_clients=16,
          max_normals=QUICK_MAX_NORMALS, scaling_clients=(16, 64), scaling_repeats=1,
          compile_rounds=(1, 4), compile_clients=(8, 16), compile_main_job_rounds=2, roofline_clients=8,
          compile_emitters_clients=5,
          compile_sweep_rounds=2, compile_sweep_seeds=2, compile_warmup_rounds=2, compile_warmup_repeats=0,
          matmul_size=256,
          fzoos_dim=8, fzoos_steps=2, fzoos_configs=((2, 64),), fzoos_vmap=(2, 64), fzoos_baseline="",
          ffgb_clients=4, ffgb_oracle_steps=4, ffgb_batch=8, ffgb_vmap_oracle_steps=4,
          bandwidth_bytes=1 << 22, gpu_table_clients=(4, 16), gpu_table_max_block=8, gpu_table_sequential=4,
          checkpoint_rounds=20, checkpoint_main_every=10, checkpoint_main_job_rounds=0, checkpoint_fzoos_rounds=0,
          sweep_table_clients=(8,), sweep_table_configs=(1, 4),
          fd_memory_clients=(16,), fd_memory_time_clients=16)
    given = {k: v for k, v in overrides.items() if v is not None}
    return dataclasses.replace(base, **given)


def make_benchmark_task(num_clients: int, samples_per_client: int = 20, seed: int = 0, model: str = "softmax",
                        cnn_impl: str = "gemm"):
  """Digits ``model`` (softmax, mlp, cnn) with every client holding ``samples_per_client`` samples
  drawn with replacement; ``cnn_impl``: the CNN's ``impl`` (fedsim.models.cnn).

  Not a partition (a benchmark needs more clients than digits has samples):
  client k's samples are row k of ``default_rng(seed).integers(0, n_train,
  (N, samples_per_client))``. Softmax: d = 650 (64 inputs x 10 classes + 10
  biases); mlp: one hidden layer of 64 ReLU units; cnn: fedsim.models.cnn.CNN
  (d = 14,538 on the 8 x 8 images).
  """
  import numpy as np

  from fedsim.data import load_digits, to_client_arrays
  from fedsim.tasks.classification import make_classification_task

  ds = load_digits(seed=seed)
  idx = np.random.default_rng(seed).integers(0, ds.n_train, (num_clients, samples_per_client))
  clients = to_client_arrays(ds.x_train, ds.y_train, list(idx))
  info = {"dataset": "digits", "partition": f"benchmark: {samples_per_client} samples per client "
                                            "drawn with replacement", "seed": seed}
  if model == "cnn":
    from fedsim.models.cnn import CNN
    from fedsim.tasks.classification import make_model_task
    return make_model_task("cnn", CNN(ds.num_classes, impl=cnn_impl), ds, clients, info=info)
  return make_classification_task(model, ds, clients, info=info)


def compile_chunk(alg, task, length: int, seed: int = 0):
  """Lowers and compiles one engine chunk of ``length`` rounds (``fedsim.core.engine.make_chunk``).

  Returns:
    (run, info). ``run()`` runs the compiled chunk once and blocks; successive
    calls chain the state and the round index (from a copy of the initial state:
    the chunk donates its state). ``run.state()``
    is the current state, ``run.initial_state`` the initial one (for baselines
    that redo round 0) and ``run.rounds_key`` the run's rounds key. ``info`` has
    ``lower_s`` (tracing and lowering seconds), ``compile_s`` (XLA compile
    seconds), ``compile_cpu_s``, ``hlo_chars`` (size of the lowered StableHLO
    text) and ``memory`` (:func:`compiled_memory`).
  """
  import jax
  import jax.numpy as jnp

  from fedsim.core import engine, rng

  key = jax.random.key(seed)
  state = engine.init_state(alg, key)
  rounds_key = rng.stream(key, "rounds")
  t = time.perf_counter()
  lowered = engine.make_chunk(alg).lower(state, task.data, rounds_key, jnp.int32(0), length)
  lower_s = time.perf_counter() - t
  t, c = time.perf_counter(), time.process_time()
  compiled = lowered.compile()
  compile_s, compile_cpu_s = time.perf_counter() - t, time.process_time() - c
  try:
    hlo_chars = len(lowered.as_text())
  except Exception:  # pylint: disable=broad-except
    hlo_chars = None
  # The chunk donates its state: it runs from a copy, so initial_state stays valid.
  first = jax.tree_util.tree_map(jnp.copy, state)
  box = {"state": first, "round": 0}

  def run():
    s, stats = compiled(box["state"], task.data, rounds_key, jnp.int32(box["round"]))
    jax.block_until_ready((s, stats))
    box["state"], box["round"] = s, box["round"] + length

  run.state, run.initial_state, run.rounds_key = (lambda: box["state"]), state, rounds_key
  run.hlo_text = compiled.as_text  # the optimised HLO (op names and their metadata, for a trace's thunks)
  return run, {"lower_s": lower_s, "compile_s": compile_s, "compile_cpu_s": compile_cpu_s,
               "hlo_chars": hlo_chars, "memory": compiled_memory(compiled)}


def state_finite(state) -> bool:
  """Whether every floating leaf of ``state`` is finite."""
  import jax
  import jax.numpy as jnp
  leaves = jax.tree_util.tree_leaves(state)
  return bool(all(jnp.all(jnp.isfinite(leaf)) for leaf in leaves
                  if hasattr(leaf, "dtype") and jnp.issubdtype(leaf.dtype, jnp.floating)))


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


def paired_median(num: Sequence[float], den: Sequence[float]) -> float:
  """Median over repeats of num[i] / den[i] (times taken side by side)."""
  return statistics.median(a / b for a, b in zip(num, den))


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
  def get(name):
    return int(getattr(ma, name, 0) or 0)
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


def mib(b):
  return "n/a" if b is None else f"{b / 2**20:,.1f}"


def rate(r):
  return "" if r is None else f"{r:,.0f}"


def mega(r):
  return "" if r is None else f"{r / 1e6:,.1f}"


def jsonable(v):
  return v if isinstance(v, (int, float, str, bool, type(None))) else str(v)
