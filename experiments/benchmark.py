r"""The benchmark suite: throughput, scaling, roofline, compile time, FZooS and FFGB speed.

  python -m experiments.benchmark                              # every suite but gpu_table, sweep_table
  python -m experiments.benchmark --suite=gpu_table             # the accelerator table
  python -m experiments.benchmark --suite=sweep_table           # K configurations in one program
  python -m experiments.benchmark --suite=vmap --algorithm=fedavg,fedzo --num_clients=100,1000
  python -m experiments.benchmark --suite=scaling,compile --scaling_clients=100,1000,10000
  python -m experiments.benchmark --quick --output_dir=/tmp/bench   # smoke test of every suite

``--suite`` (comma-separated; default all but gpu_table and sweep_table) picks among (modules in
``experiments/bench/``, whose docstrings say exactly what is timed):

1. ``vmap`` (``bench/vmap.py``): the vmapped round engine against the same
   client update run one client at a time (a jitted per-client function in a
   Python loop) for ``--algorithm`` (default fedavg, fedzo, decomfl, hiso,
   fzoos, ffgb) at every N of ``--num_clients`` (default 1000; fzoos at
   ``--fzoos_vmap`` = 50 clients with M = 1000, ffgb at its 56 clients: N = 1000
   is infeasible / meaningless for them on 2 CPU cores). speedup = rate ratio.
   FedZO also reports the engine's direction rate against the raw
   ``jax.random.normal`` rate.
2. ``scaling`` (``bench/scaling.py``): FedZO, digits softmax, full
   participation, N in ``--scaling_clients`` (10^2..10^5): seconds per round,
   the log-log slope between 10^3 and 10^5, peak memory (compiled
   ``memory_analysis`` and RSS).
3. ``roofline`` (``bench/roofline.py``): FedAvg, DeComFL and HiSo achieved
   FLOP/s (analytic counts) against a float32 matmul measured in the same run;
   FedZO directions per second against the raw generator.
4. ``compile`` (``bench/compile_time.py``): compile time against rounds per
   chunk (1, 10, 100) and N (10^2..10^4); the main job's warm-up, process start to
   first round, cold and warm cache, beside ``--baseline=REV``'s tree.
5. ``fzoos`` (``bench/fzoos_speed.py``): seconds per FZooS round at d = 300,
   N = 5, T = 10, M = 10,000 (Fig. 1), against the authors' 33 s; rounds per
   second for N in {5, 50, 500} (M = 1,000 at 500); a per-piece profile; at the first
   config, a whole 50-round run of this checkout and of ``--fzoos_baseline`` (default
   ``main``) side by side, rounds alternating (mean of all rounds, rounds 1-3, last).
6. ``ffgb`` (``bench/ffgb_speed.py``): one FFGB round, N = 56, K = 2, mlp
   oracle (1000 Adam steps, batch 128) on digits homo_ratio, vmapped vs the
   112 learners trained one client at a time.
7. ``checkpoint`` (``bench/checkpoint_cost.py``): the main job's FedAvg, 200
   rounds, with ``--checkpoint_every=20`` against without, side by side in one
   process (``simulate`` alone and the whole ``fedsim.run``): the ratio, which
   the target bounds at 1.25; ``--checkpoint_task=mlp --checkpoint_clients_per_round=100``
   times the same with longer rounds. Then whole jobs from their flagfiles,
   each cadence side by side: the main job at ``--checkpoint_main_job_rounds`` (3,000)
   rounds without checkpoints, at the default time cadence (``--checkpoint_every=-1``) and
   at ``--checkpoint_every=20``; FZooS Fig. 1 (FZooS alone) at ``--checkpoint_fzoos_rounds``
   (20) rounds without, at the default cadence and at ``--checkpoint_every=5``.
8. ``fd_memory`` (``bench/fd_memory.py``): one FedZO round (digits softmax,
   paper defaults) at N in ``--fd_memory_clients`` (10^3, 10^5) with its
   directions materialised (``direction_block`` 0) or streamed in blocks
   (``--fd_memory_blocks``, default 0,1,4), one vmap over all clients
   (``--fd_memory_client_block``, default 0): compiled temporaries side by side;
   at N <= 10^3 also seconds per round and the state difference.
9. ``gpu_table`` (``bench/gpu_table.py``; only when named): per row of
   ``--gpu_table_algorithms`` (fedavg, fedzo_materialised, fedzo_streamed, decomfl,
   hiso at each N in ``--gpu_table_clients``, 10^3..10^6; ffgb at ``--ffgb_clients``
   and fzoos at ``--fzoos_vmap``): client steps per second, peak device memory, the
   fraction of the binding roof (matmul FLOP/s and memory bandwidth measured in the
   same run; digits-softmax rows only) and the vmapped engine against the one-client loop.
10. ``sweep_table`` (``bench/sweep_table.py``; only when named): per algorithm
   (``--sweep_table_algorithms``, or ``--algorithm`` when given; default fedavg,
   fedzo, hiso), N in ``--sweep_table_clients`` (10^3, 10^4) and K in
   ``--sweep_table_configs`` (1, 4, 16, 64): K configurations (lr x seed) in one
   vmapped program (``fedsim.core.batched``) against the same K run one after
   another with the plain engine: configuration-rounds per second of each, the
   ratio, compile seconds apart, peak memory.

Timing: calls block until their work is done; workloads compared with each
other are timed in alternation (``time_interleaved``), ``--repeats`` times,
each repeat lasting at least ``--min_time`` seconds; rates come from the best
repeat, ratios are medians of side-by-side ratios. ``cpu_per_wall`` (process
CPU seconds / wall seconds) is recorded everywhere: on a shared machine a
value well below the core count marks a disturbed measurement.

Writes ``--output_dir/benchmark.json`` (environment, settings, command, the
vmap records under ``records`` and every suite's result under ``suites``) and
``benchmark.md`` (one table per suite), rewritten after every suite (and every
vmap record). Bad flag values exit with status 2 and one line before anything
is compiled. ``--quick`` shrinks every suite to a smoke test (tiny N, d, M and
step counts, one repeat, no minimum time): about 2 CPU minutes for all six,
most of it XLA compilation.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import math
import os
import sys
from collections.abc import Callable, Sequence

from absl import app, flags

from experiments.bench.gpu_table import ALGORITHMS as GPU_TABLE_ALGORITHMS
from experiments.bench.sweep_table import ALGORITHMS as SWEEP_TABLE_ALGORITHMS
from experiments.bench.util import DEFAULT_SUITES, SUITES, Settings, environment
from experiments.bench.vmap import ALGORITHMS, run_benchmark
from fedsim.core import compile_options
from fedsim.core.errors import ConfigError

FLAGS = flags.FLAGS

# jax.random key implementations --prng_impl accepts (the philox / threefry4x32
# ones need a recent JAX).
PRNG_IMPLS = ("threefry2x32", "rbg", "unsafe_rbg", "philox2x32", "philox4x32", "threefry4x32")
_MODULES = {"compile": "compile_time", "fzoos": "fzoos_speed", "ffgb": "ffgb_speed",
            "checkpoint": "checkpoint_cost"}


def suite(name: str):
  """The module of suite ``name``: ``TITLE``, ``markdown(result)`` and (but vmap) ``run(settings, log)``."""
  return importlib.import_module(f"experiments.bench.{_MODULES.get(name, name)}")


def run_suites(suites: Sequence[str], algorithm_names: Sequence[str], num_clients: Sequence[int],
               settings: Settings, log: Callable[[str], None] = print,
               on_update: Callable[[list, dict], None] | None = None) -> tuple[list, dict]:
  """Runs the chosen suites in the order of :data:`SUITES`.

  Args:
    suites: names from :data:`SUITES`.
    algorithm_names, num_clients: the vmap suite's algorithms and client counts.
    on_update: called with (vmap records, suite results so far) after each record / suite.

  Returns:
    (vmap records, {suite name: result dict}).
  """
  records, results = [], {}
  update = (lambda: on_update(records, results)) if on_update else (lambda: None)
  for name in SUITES:
    if name not in suites:
      continue
    if name == "vmap":
      def on_record(recs, out=records):
        out[:] = recs
        results["vmap"] = {"records": list(recs)}
        update()
      records[:] = run_benchmark(algorithm_names, num_clients, settings, log=log, on_record=on_record)
      results["vmap"] = {"records": records}
    else:
      run = suite(name).run
      if "on_update" in inspect.signature(run).parameters:  # a suite that reports rows as they come
        def on_partial(partial, name=name):
          results[name] = partial
          update()
        results[name] = run(settings, log, on_update=on_partial)
      else:
        results[name] = run(settings, log)
    update()
  return records, results


def write_outputs(output_dir: str, records: Sequence[dict], env: dict, settings: Settings,
                  command: str = "", suites: dict | None = None) -> None:
  """Writes ``benchmark.json`` and ``benchmark.md`` under ``output_dir``.

  Args:
    records: the vmap suite's records (also ``suites["vmap"]``).
    suites: suite name -> result (None: only the vmap records).
  """
  os.makedirs(output_dir, exist_ok=True)
  suites = dict(suites or {})
  if records and "vmap" not in suites:
    suites["vmap"] = {"records": list(records)}
  doc = {**env, "settings": dataclasses.asdict(settings), "command": command,
         "records": list(records), "suites": suites}
  with open(os.path.join(output_dir, "benchmark.json"), "w") as f:
    json.dump(doc, f, indent=2)
  with open(os.path.join(output_dir, "benchmark.md"), "w") as f:
    f.write(f"# fedsim benchmark\n\n{env['device']} ({env['backend']}, jax {env['jax_version']}, "
            f"{env['cpu_count']} CPUs, PRNG {env['prng_impl']}; load average at start "
            f"{env.get('load_average')}). Best of {settings.repeats} interleaved repeats; speedups and "
            "ratios: medians of side-by-side ratios; cpu/wall = process CPU s / wall s.\n\n")
    if command:
      f.write(f"`{command}`\n\n")
    for name in SUITES:
      if name in suites:
        module = suite(name)
        f.write(f"## {name}: {module.TITLE}\n\n{module.markdown(suites[name])}\n")


# ----------------------------------------------------------------------------- binary


def define_flags():
  """Defines the benchmark's flags (only when run as a binary, so importing is side-effect free)."""
  flags.DEFINE_list("suite", list(DEFAULT_SUITES), f"comma-separated suites: {', '.join(SUITES)} (default: all "
                    "but gpu_table and sweep_table, which are sized for an accelerator)")
  flags.DEFINE_list("algorithm", ["fedavg", "fedzo", "decomfl", "hiso", "fzoos", "ffgb"],
                    f"vmap suite: comma-separated algorithms ({', '.join(ALGORITHMS)})")
  flags.DEFINE_list("num_clients", ["1000"],
                    "vmap suite: comma-separated client counts N (full participation; fzoos and ffgb "
                    "use --fzoos_vmap and --ffgb_clients)")
  flags.DEFINE_integer("repeats", None, "timed repeats per measurement, best reported (default 3; --quick: 1)")
  flags.DEFINE_float("min_time", None, "seconds each timed repeat lasts at least (default 0.5; --quick: 0)")
  flags.DEFINE_integer("rounds_per_chunk", None, "rounds in the timed compiled chunk (default 5; --quick: 2)")
  flags.DEFINE_integer("sequential_clients", None,
                       "clients timed in the sequential baseline, at most (default 500; --quick: 16)")
  flags.DEFINE_integer("samples_per_client", 20, "training samples drawn with replacement per client")
  flags.DEFINE_integer("seed", 0, "seed of the client data draw, initialisation and keys")
  flags.DEFINE_string("prng_impl", None, f"JAX PRNG implementation: {', '.join(PRNG_IMPLS)} "
                      "(default: JAX's, threefry2x32)")
  flags.DEFINE_list("scaling_clients", None, "scaling suite: client counts (default 100,1000,10000,100000)")
  flags.DEFINE_list("scaling_algorithms", None, "scaling suite: algorithms, fedavg and/or fedzo (default fedzo)")
  flags.DEFINE_list("gpu_table_clients", None, "gpu_table suite: client counts (default 1000,10000,100000,1000000)")
  flags.DEFINE_list("gpu_table_algorithms", None, "gpu_table suite: rows among fedavg, fedzo_materialised, "
                    "fedzo_streamed, decomfl, hiso (at every --gpu_table_clients), ffgb (at --ffgb_clients), fzoos "
                    "(at --fzoos_vmap) (default: all)")
  flags.DEFINE_list("sweep_table_clients", None, "sweep_table suite: client counts N (default 1000,10000)")
  flags.DEFINE_list("sweep_table_configs", None, "sweep_table suite: configurations K per program (lr x seed; "
                    "default 1,4,16,64)")
  flags.DEFINE_list("sweep_table_algorithms", None, "sweep_table suite: algorithms among "
                    f"{', '.join(SWEEP_TABLE_ALGORITHMS)} (default: --algorithm when given, else fedavg,fedzo,hiso)")
  flags.DEFINE_integer("sweep_table_lrs", None, "sweep_table suite: at most this many lr values per row, the rest "
                       "of the K configurations are seeds (default 4)")
  flags.DEFINE_integer("sweep_table_max_block", None, "sweep_table suite: off CPU, FedAvg/FedZO rows with K x N "
                       "above this run in client blocks of this // K clients (default 100000)")
  flags.DEFINE_list("fd_memory_clients", None, "fd_memory suite: client counts N (default 1000,100000)")
  flags.DEFINE_list("fd_memory_blocks", None, "fd_memory suite: FedZO direction_block values, 0 = materialised "
                    "(default 0,1,4)")
  flags.DEFINE_integer("fd_memory_client_block", None, "fd_memory suite: FedZO client_block (default 0: one vmap "
                       "over all N clients)")
  flags.DEFINE_integer("bandwidth_bytes", None, "roofline and gpu_table suites: bytes of the array whose 2 x + 1 "
                       "measures the memory bandwidth (default: roofline 268435456, gpu_table 2147483648)")
  flags.DEFINE_list("compile_rounds", None, "compile suite: rounds per chunk (default 1,10,100)")
  flags.DEFINE_list("compile_clients", None, "compile suite: client counts (default 100,1000,10000)")
  flags.DEFINE_integer("compile_main_job_rounds", None, "compile suite: rounds of the main-job runs (default 300; "
                       "0 = skipped)")
  flags.DEFINE_integer("compile_emitters_clients", None, "compile suite: N of the classic-vs-fusion XLA CPU "
                       "emitters comparison, the CNN at N / 5 (default 1000; 0 = skipped)")
  flags.DEFINE_enum("xla_cpu_emitters", "classic", list(compile_options.EMITTERS), "XLA's CPU code emitters of "
                    "the timed programs (fedsim.core.compile_options; the engine's default: classic)")
  flags.DEFINE_integer("compile_sweep_rounds", None, "compile suite: rounds of the sweep_fedzo_alpha.cfg runs, seeds "
                       "batched and one after another (default 300; 0 = skipped)")
  flags.DEFINE_integer("compile_warmup_repeats", None, "compile suite: runs per tree and cache state of the "
                       "main-job warm-up (FedAvg, process start to first round; default 3, --quick 0; 0 = skipped)")
  flags.DEFINE_integer("compile_warmup_rounds", None, "compile suite: rounds of the warm-up runs (default 100)")
  flags.DEFINE_string("baseline", None, "compile suite: a git revision whose tree runs the warm-up side by side "
                      "with this one, in a temporary git worktree (default: none)")
  flags.DEFINE_list("compile_parts", None, "compile suite: parts among chunks, main_job, emitters, sweep, warmup "
                    "(default: all)")
  flags.DEFINE_integer("roofline_clients", None, "roofline suite: N (default 1000)")
  flags.DEFINE_integer("matmul_size", None, "roofline and gpu_table suites: n of the n x n float32 matmul "
                       "(default: roofline 2048, gpu_table 8192)")
  flags.DEFINE_list("fzoos_configs", None, "fzoos suite: N:M pairs, M random features "
                    "(default 5:10000,50:10000,500:1000)")
  flags.DEFINE_string("fzoos_vmap", None, "vmap suite: FZooS N:M (default 50:1000)")
  flags.DEFINE_string("fzoos_baseline", None, "fzoos suite: git revision whose whole 50-round run is timed side "
                      "by side with this checkout's, rounds alternating (default main; none: this checkout alone)")
  flags.DEFINE_integer("client_block", None, "vmap suite: client_block of fedavg/fedzo (clients per vmapped "
                       "block; 0 = one vmap; default: the backend's, 256 on CPU)")
  flags.DEFINE_integer("ffgb_clients", None, "ffgb suite and vmap suite: N (default 56)")
  flags.DEFINE_integer("ffgb_oracle_steps", None, "ffgb suite: Adam steps per learner (default 1000)")
  flags.DEFINE_integer("blas_threads", 1, "threads of the BLAS/LAPACK libraries behind XLA's CPU linear "
                       "algebra (threadpoolctl; 0 = the libraries' default). 1 by default: jaxlib's "
                       "Cholesky (FZooS's GP and RFF fits) is 100x slower with 2 spinning OpenBLAS "
                       "threads when other processes share the cores")
  flags.DEFINE_integer("checkpoint_rounds", None, "checkpoint suite: rounds of the main-job FedAvg runs (default 200)")
  flags.DEFINE_integer("checkpoint_main_every", None, "checkpoint suite: --checkpoint_every of the runs with "
                       "checkpoints (default 20)")
  flags.DEFINE_integer("checkpoint_main_job_rounds", None, "checkpoint suite: rounds of the main-job cadence "
                       "runs (default 3000; 0 = skipped)")
  flags.DEFINE_integer("checkpoint_fzoos_rounds", None, "checkpoint suite: rounds of the FZooS Fig. 1 cadence runs "
                       "(default 20; 0 = skipped)")
  flags.DEFINE_string("checkpoint_task", None, "checkpoint suite: the task (default softmax, the main job's; "
                      "mlp: longer rounds, the same per-save cost)")
  flags.DEFINE_integer("checkpoint_clients_per_round", None, "checkpoint suite: clients per round (default 10, "
                       "the main job's)")
  flags.DEFINE_bool("quick", False, "smoke test of every suite: tiny sizes, 1 repeat")
  flags.DEFINE_string("output_dir", "runs/benchmark", "where benchmark.json and benchmark.md go")


def parse_ints(values: Sequence[str], flag: str, pairs: bool = False, low: int = 1) -> list:
  """Comma-list strings -> ints >= ``low``, or (``pairs``) ``N:M`` strings -> [(N, M)] with N, M >= ``low``.

  Raises:
    ConfigError: empty, malformed, or a value < ``low`` (naming ``flag``).
  """
  what = f"N:M pairs of integers >= {low} (e.g. 5:10000)" if pairs else f"integers >= {low}"
  if not values:
    raise ConfigError(flag, f"empty; give comma-separated {what}")
  out = []
  for v in values:
    try:
      ints = [int(p) for p in str(v).split(":")]
    except ValueError:
      ints = []
    if len(ints) != (2 if pairs else 1) or min(ints) < low:
      raise ConfigError(flag, f"must be comma-separated {what}; got {v!r}")
    out.append(tuple(ints) if pairs else ints[0])
  return out


def validate(algorithm: Sequence[str], num_clients: Sequence[str], *, suite: Sequence[str] = ("vmap",),
             repeats=None, min_time=None, rounds_per_chunk=None, sequential_clients=None, samples_per_client=20,
             prng_impl=None, scaling_clients=None, compile_rounds=None, compile_clients=None,
             roofline_clients=None, matmul_size=None, fzoos_configs=None, fzoos_vmap=None, ffgb_clients=None,
             ffgb_oracle_steps=None, blas_threads=1, client_block=None, scaling_algorithms=None,
             gpu_table_clients=None, gpu_table_algorithms=None, bandwidth_bytes=None, compile_main_job_rounds=None,
             compile_sweep_rounds=None, compile_emitters_clients=None, compile_warmup_repeats=None,
             compile_warmup_rounds=None, compile_parts=None, checkpoint_rounds=None,
             checkpoint_main_every=None, checkpoint_task=None, checkpoint_clients_per_round=None,
             checkpoint_main_job_rounds=None, checkpoint_fzoos_rounds=None,
             sweep_table_clients=None, sweep_table_configs=None, sweep_table_algorithms=None,
             sweep_table_lrs=None, sweep_table_max_block=None, fd_memory_clients=None, fd_memory_blocks=None,
             fd_memory_client_block=None, algorithm_given=False):
  """Checks the flag values (arguments named as the flags) before anything is built or compiled.

  ``algorithm_given``: ``--algorithm`` was on the command line; it then also names the
  sweep_table suite's algorithms (when that suite runs and ``--sweep_table_algorithms`` is not given).

  Returns:
    (the vmap suite's client counts as ints, dict of parsed suite overrides
    for :meth:`Settings.make`).

  Raises:
    ConfigError: naming the flag and what is accepted.
  """
  for flag, values, accepted in (("suite", suite, SUITES), ("algorithm", algorithm, ALGORITHMS)):
    if not values:
      raise ConfigError(flag, f"empty; accepted: {', '.join(accepted)}")
    for v in values:
      if v not in accepted:
        raise ConfigError(flag, f"unknown {v!r}; accepted: {', '.join(accepted)}")
  ns = parse_ints(num_clients, "num_clients")
  for flag, value, low in (("repeats", repeats, 1), ("rounds_per_chunk", rounds_per_chunk, 1),
                           ("sequential_clients", sequential_clients, 1),
                           ("samples_per_client", samples_per_client, 1), ("roofline_clients", roofline_clients, 1),
                           ("matmul_size", matmul_size, 1), ("ffgb_clients", ffgb_clients, 2),
                           ("ffgb_oracle_steps", ffgb_oracle_steps, 1),
                           ("blas_threads", blas_threads, 0), ("client_block", client_block, 0),
                           ("bandwidth_bytes", bandwidth_bytes, 4),
                           ("compile_main_job_rounds", compile_main_job_rounds, 0),
                           ("compile_sweep_rounds", compile_sweep_rounds, 0),
                           ("compile_emitters_clients", compile_emitters_clients, 0),
                           ("compile_warmup_repeats", compile_warmup_repeats, 0),
                           ("compile_warmup_rounds", compile_warmup_rounds, 1),
                           ("checkpoint_rounds", checkpoint_rounds, 1),
                           ("checkpoint_main_every", checkpoint_main_every, 1),
                           ("checkpoint_clients_per_round", checkpoint_clients_per_round, 1),
                           ("checkpoint_main_job_rounds", checkpoint_main_job_rounds, 0),
                           ("checkpoint_fzoos_rounds", checkpoint_fzoos_rounds, 0),
                           ("sweep_table_lrs", sweep_table_lrs, 1),
                           ("sweep_table_max_block", sweep_table_max_block, 1),
                           ("fd_memory_client_block", fd_memory_client_block, 0)):
    if value is not None and value < low:
      raise ConfigError(flag, f"must be >= {low}; got {value}")
  if min_time is not None and not (math.isfinite(min_time) and min_time >= 0):
    raise ConfigError("min_time", f"must be a finite number >= 0; got {min_time}")
  if prng_impl is not None and prng_impl not in PRNG_IMPLS:
    raise ConfigError("prng_impl", f"unknown {prng_impl!r}; accepted: {', '.join(PRNG_IMPLS)}")
  if checkpoint_task is not None:
    from fedsim.tasks import TASKS
    if checkpoint_task not in TASKS:
      raise ConfigError("checkpoint_task", f"unknown {checkpoint_task!r}; accepted: {', '.join(TASKS)}")
  extra = {}
  for flag, value in (("scaling_clients", scaling_clients), ("compile_rounds", compile_rounds),
                      ("compile_clients", compile_clients), ("gpu_table_clients", gpu_table_clients),
                      ("sweep_table_clients", sweep_table_clients), ("sweep_table_configs", sweep_table_configs),
                      ("fd_memory_clients", fd_memory_clients)):
    if value is not None:
      extra[flag] = tuple(parse_ints(value, flag))
  if fd_memory_blocks is not None:
    extra["fd_memory_blocks"] = tuple(parse_ints(fd_memory_blocks, "fd_memory_blocks", low=0))
  for flag, value, accepted in (("scaling_algorithms", scaling_algorithms, ("fedavg", "fedzo")),
                                ("gpu_table_algorithms", gpu_table_algorithms, GPU_TABLE_ALGORITHMS)):
    if value is None:
      continue
    if not value or any(v not in accepted for v in value):
      raise ConfigError(flag, f"must be comma-separated among {', '.join(accepted)}; got {','.join(value)!r}")
    extra[flag] = tuple(value)
  st_flag = "sweep_table_algorithms"
  if sweep_table_algorithms is None and algorithm_given and "sweep_table" in suite:
    sweep_table_algorithms, st_flag = algorithm, "algorithm"
  if sweep_table_algorithms is not None:
    if not sweep_table_algorithms or any(v not in SWEEP_TABLE_ALGORITHMS for v in sweep_table_algorithms):
      raise ConfigError(st_flag, "the sweep_table suite accepts comma-separated algorithms among "
                        f"{', '.join(SWEEP_TABLE_ALGORITHMS)}; got {','.join(sweep_table_algorithms)!r}")
    extra["sweep_table_algorithms"] = tuple(sweep_table_algorithms)
  if compile_parts is not None:
    parts = ("chunks", "main_job", "emitters", "sweep", "warmup")
    if not compile_parts or any(v not in parts for v in compile_parts):
      raise ConfigError("compile_parts", f"must be comma-separated among {', '.join(parts)}; "
                        f"got {','.join(compile_parts)!r}")
    extra["compile_parts"] = tuple(compile_parts)
  if fzoos_configs is not None:
    extra["fzoos_configs"] = tuple(parse_ints(fzoos_configs, "fzoos_configs", pairs=True))
  if fzoos_vmap is not None:
    extra["fzoos_vmap"] = parse_ints([fzoos_vmap], "fzoos_vmap", pairs=True)[0]
  return ns, extra


def main(argv):
  del argv
  try:
    ns, extra = validate(**{name: FLAGS[name].value for name in inspect.signature(validate).parameters
                            if name in FLAGS}, algorithm_given=FLAGS["algorithm"].present)
  except ConfigError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
  import jax

  from fedsim.runner import set_blas_threads
  compile_options.set_cpu_emitters(FLAGS.xla_cpu_emitters)
  if FLAGS.prng_impl:
    try:
      jax.config.update("jax_default_prng_impl", FLAGS.prng_impl)
      jax.random.key(0)
    except Exception:  # pylint: disable=broad-except  # an older JAX without this implementation
      print(f"error: --prng_impl: {FLAGS.prng_impl!r} is not available in jax {jax.__version__}",
            file=sys.stderr)
      sys.exit(2)
  if FLAGS.quick and not FLAGS["num_clients"].present:
    ns = [8]
  blas = set_blas_threads(FLAGS.blas_threads, load=True)
  # Every Settings field with a flag of the same name (list flags as validate parsed them).
  given = {f.name: FLAGS[f.name].value for f in dataclasses.fields(Settings) if f.name in FLAGS}
  settings = Settings.make(FLAGS.quick, **{**given, **extra})
  env = environment()
  env["blas_threads"] = blas
  env["xla_cpu_emitters"] = FLAGS.xla_cpu_emitters
  command = "python -m experiments.benchmark " + " ".join(sys.argv[1:])
  suites = [s for s in SUITES if s in FLAGS.suite]
  print(f"benchmark on {env['device']} ({env['backend']}, jax {env['jax_version']}, {env['cpu_count']} CPUs, "
        f"PRNG {env['prng_impl']}, load average {env['load_average']}): suites {', '.join(suites)}; "
        f"vmap algorithms {', '.join(FLAGS.algorithm)}, N = {', '.join(map(str, ns))}; "
        f"output {FLAGS.output_dir}", flush=True)
  def log(line):
    print(line, flush=True)

  def write(recs, res):
    write_outputs(FLAGS.output_dir, recs, env, settings, command, res)

  records, results = run_suites(suites, FLAGS.algorithm, ns, settings, log=log, on_update=write)
  env["load_average_end"] = environment()["load_average"]
  write_outputs(FLAGS.output_dir, records, env, settings, command, results)
  print(f"wrote {FLAGS.output_dir}/benchmark.json and benchmark.md", flush=True)


if __name__ == "__main__":
  from experiments import common
  define_flags()
  app.run(main, flags_parser=common.parse_flags_or_exit)
