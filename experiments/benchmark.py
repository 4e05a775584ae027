r"""The benchmark suite (issue 8): throughput, scaling, roofline, compile time, FZooS and FFGB speed.

  python -m experiments.benchmark                              # every suite
  python -m experiments.benchmark --suite=vmap --algorithm=fedavg,fedzo --num_clients=100,1000
  python -m experiments.benchmark --suite=scaling,compile --scaling_clients=100,1000,10000
  python -m experiments.benchmark --quick --output_dir=/tmp/bench   # smoke test of every suite

``--suite`` (comma-separated; default all) picks among (modules in
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
   chunk (1, 10, 100) and N (10^2..10^4).
5. ``fzoos`` (``bench/fzoos_speed.py``): seconds per FZooS round at d = 300,
   N = 5, T = 10, M = 10,000 (Fig. 1), against the authors' 33 s; rounds per
   second for N in {5, 50, 500} (M = 1,000 at 500); a per-piece profile.
6. ``ffgb`` (``bench/ffgb_speed.py``): one FFGB round, N = 56, K = 2, mlp
   oracle (1000 Adam steps, batch 128) on digits homo_ratio, vmapped vs the
   112 learners trained one client at a time.

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
import json
import math
import os
import sys
from typing import Callable, Sequence

from absl import app, flags

from experiments import common
from experiments.bench import util
from experiments.bench.util import (SUITES, Settings, compiled_memory, environment, make_benchmark_task,  # noqa: F401
                                    process_memory, time_interleaved)
from experiments.bench.vmap import (ALGORITHMS, benchmark_one, prepare_normals, prepare_sequential,  # noqa: F401
                                    prepare_vmapped, run_benchmark)
from fedsim.core.errors import ConfigError

FLAGS = flags.FLAGS

# jax.random key implementations --prng_impl accepts (the philox / threefry4x32
# ones need a recent JAX).
PRNG_IMPLS = ("threefry2x32", "rbg", "unsafe_rbg", "philox2x32", "philox4x32", "threefry4x32")

_mib, _rate, _mega = util.mib, util.rate, util.mega


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
  from experiments.bench import compile_time, ffgb_speed, fzoos_speed, roofline, scaling
  records, results = [], {}
  update = (lambda: on_update(records, results)) if on_update else (lambda: None)
  runners = {"scaling": scaling.run_scaling, "roofline": roofline.run_roofline,
             "compile": compile_time.run_compile, "fzoos": fzoos_speed.run_fzoos, "ffgb": ffgb_speed.run_ffgb}
  for name in SUITES:
    if name not in suites:
      continue
    if name == "vmap":
      def on_record(recs):
        records[:] = recs
        results["vmap"] = {"records": list(recs)}
        update()
      records = run_benchmark(algorithm_names, num_clients, settings, log=log, on_record=on_record)
      results["vmap"] = {"records": records}
    else:
      results[name] = runners[name](settings, log)
    update()
  return records, results


# ----------------------------------------------------------------------------- output


def markdown_table(records: Sequence[dict]) -> str:
  """The vmap records as a markdown table (rates in client local steps per second; FFGB: learners)."""
  head = ("| algorithm | N | s/round | vmapped rate | one-at-a-time rate (clients timed) | unit | speedup "
          "| speedup in CPU s | cpu/wall vmapped, loop | compiled temp+arg+out MiB | peak RSS MiB "
          "| directions M/s engine | raw normal M/s | ratio (in CPU s) |")
  rows = [head, "|" + "---|" * 14]
  for r in records:
    m, dr = r["memory"], r["directions"] or {}
    rows.append(
        f"| {r['algorithm']} | {r['num_clients']} | {r['seconds_per_round']:.4g} "
        f"| {_rate(r['vmapped_steps_per_s'])} "
        f"| {_rate(r['sequential_steps_per_s'])} ({r['sequential_clients_timed']}) "
        f"| {r.get('rate_unit', 'client steps')}/s | {r['speedup']:.2f}x "
        f"| {r['speedup_cpu']:.2f}x "
        f"| {r['vmapped_cpu_per_wall']:.2f}, {r['sequential_cpu_per_wall']:.2f} "
        f"| {_mib(m['total_bytes'])} | {_mib(m['peak_rss_bytes'])} | {_mega(dr.get('engine_per_s'))} "
        f"| {_mega(dr.get('raw_normal_per_s'))} "
        f"| {'' if not dr else format(dr['ratio'], '.2f') + ' (' + format(dr['ratio_cpu'], '.2f') + ')'} |")
  return "\n".join(rows) + "\n"


def suite_markdown(name: str, result: dict) -> str:
  """One suite's markdown section body."""
  from experiments.bench import compile_time, ffgb_speed, fzoos_speed, roofline, scaling
  if name == "vmap":
    return markdown_table(result["records"])
  return {"scaling": scaling.markdown, "roofline": roofline.markdown, "compile": compile_time.markdown,
          "fzoos": fzoos_speed.markdown, "ffgb": ffgb_speed.markdown}[name](result)


SUITE_TITLES = {
    "vmap": "vmapped engine vs one client at a time",
    "scaling": "FedZO scaling in N (digits softmax, full participation)",
    "roofline": "roofline",
    "compile": "compile time against rounds per chunk and N",
    "fzoos": "FZooS round time (quadratic, Fig. 1 settings, float64)",
    "ffgb": "FFGB round time (digits homo_ratio, mlp oracle)",
}


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
        f.write(f"## {name}: {SUITE_TITLES[name]}\n\n{suite_markdown(name, suites[name])}\n")


# ----------------------------------------------------------------------------- binary


set_blas_threads = common.set_blas_threads  # shared with experiments.run / sweep


def define_flags():
  """Defines the benchmark's flags (only when run as a binary, so importing is side-effect free)."""
  flags.DEFINE_list("suite", list(SUITES), f"comma-separated suites: {', '.join(SUITES)}")
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
  flags.DEFINE_list("compile_rounds", None, "compile suite: rounds per chunk (default 1,10,100)")
  flags.DEFINE_list("compile_clients", None, "compile suite: client counts (default 100,1000,10000)")
  flags.DEFINE_integer("roofline_clients", None, "roofline suite: N (default 1000)")
  flags.DEFINE_integer("matmul_size", None, "roofline suite: n of the n x n float32 matmul (default 2048)")
  flags.DEFINE_list("fzoos_configs", None, "fzoos suite: N:M pairs, M random features "
                    "(default 5:10000,50:10000,500:1000)")
  flags.DEFINE_string("fzoos_vmap", None, "vmap suite: FZooS N:M (default 50:1000)")
  flags.DEFINE_integer("client_block", None, "vmap suite: client_block of fedavg/fedzo (clients per vmapped "
                       "block; 0 = one vmap; default: the backend's, 256 on CPU)")
  flags.DEFINE_integer("ffgb_clients", None, "ffgb suite and vmap suite: N (default 56)")
  flags.DEFINE_integer("ffgb_oracle_steps", None, "ffgb suite: Adam steps per learner (default 1000)")
  flags.DEFINE_integer("blas_threads", 1, "threads of the BLAS/LAPACK libraries behind XLA's CPU linear "
                       "algebra (threadpoolctl; 0 = the libraries' default). 1 by default: jaxlib's "
                       "Cholesky (FZooS's GP and RFF fits) is 100x slower with 2 spinning OpenBLAS "
                       "threads when other processes share the cores")
  flags.DEFINE_bool("quick", False, "smoke test of every suite: tiny sizes, 1 repeat")
  flags.DEFINE_string("output_dir", "runs/benchmark", "where benchmark.json and benchmark.md go")


def parse_num_clients(values: Sequence[str], flag: str = "num_clients") -> list[int]:
  """Comma-list strings -> ints >= 1.

  Raises:
    ConfigError: empty, not an integer, or < 1 (naming ``flag``).
  """
  if not values:
    raise ConfigError(flag, "empty; give comma-separated integers >= 1")
  out = []
  for v in values:
    try:
      n = int(v)
    except (TypeError, ValueError):
      raise ConfigError(flag, f"must be comma-separated integers >= 1; got {v!r}") from None
    if n < 1:
      raise ConfigError(flag, f"must be >= 1; got {n}")
    out.append(n)
  return out


def parse_pairs(values: Sequence[str], flag: str) -> list[tuple[int, int]]:
  """``N:M`` strings -> [(N, M)] with N, M >= 1.

  Raises:
    ConfigError: a malformed pair (naming ``flag``).
  """
  if not values:
    raise ConfigError(flag, "empty; give comma-separated N:M pairs of integers >= 1")
  out = []
  for v in values:
    a, sep, b = str(v).partition(":")
    try:
      pair = (int(a), int(b))
    except ValueError:
      pair = None
    if not sep or pair is None or min(pair) < 1:
      raise ConfigError(flag, f"must be N:M pairs of integers >= 1 (e.g. 5:10000); got {v!r}")
    out.append(pair)
  return out


def validate(algorithm_names: Sequence[str], num_clients: Sequence[str], *, repeats=None, min_time=None,
             rounds_per_chunk=None, sequential_clients=None, samples_per_client=20,
             prng_impl=None, suites: Sequence[str] = ("vmap",), scaling_clients=None, compile_rounds=None,
             compile_clients=None, roofline_clients=None, matmul_size=None, fzoos_configs=None,
             fzoos_vmap=None, ffgb_clients=None, ffgb_oracle_steps=None):
  """Checks the flag values before anything is built or compiled.

  Returns:
    (the vmap suite's client counts as ints, dict of parsed suite overrides
    for :meth:`Settings.make`).

  Raises:
    ConfigError: naming the flag and what is accepted.
  """
  if not suites:
    raise ConfigError("suite", f"empty; accepted: {', '.join(SUITES)}")
  for s in suites:
    if s not in SUITES:
      raise ConfigError("suite", f"unknown {s!r}; accepted: {', '.join(SUITES)}")
  if not algorithm_names:
    raise ConfigError("algorithm", f"empty; accepted: {', '.join(ALGORITHMS)}")
  for a in algorithm_names:
    if a not in ALGORITHMS:
      raise ConfigError("algorithm", f"unknown {a!r}; accepted: {', '.join(ALGORITHMS)}")
  ns = parse_num_clients(num_clients)
  for flag, value in (("repeats", repeats), ("rounds_per_chunk", rounds_per_chunk),
                      ("sequential_clients", sequential_clients),
                      ("samples_per_client", samples_per_client), ("roofline_clients", roofline_clients),
                      ("matmul_size", matmul_size), ("ffgb_clients", ffgb_clients),
                      ("ffgb_oracle_steps", ffgb_oracle_steps)):
    if value is not None and value < 1:
      raise ConfigError(flag, f"must be >= 1; got {value}")
  if min_time is not None and not (math.isfinite(min_time) and min_time >= 0):
    raise ConfigError("min_time", f"must be a finite number >= 0; got {min_time}")
  if prng_impl is not None and prng_impl not in PRNG_IMPLS:
    raise ConfigError("prng_impl", f"unknown {prng_impl!r}; accepted: {', '.join(PRNG_IMPLS)}")
  extra = {}
  for flag, value in (("scaling_clients", scaling_clients), ("compile_rounds", compile_rounds),
                      ("compile_clients", compile_clients)):
    if value is not None:
      extra[flag] = tuple(parse_num_clients(value, flag))
  if fzoos_configs is not None:
    extra["fzoos_configs"] = tuple(parse_pairs(fzoos_configs, "fzoos_configs"))
  if fzoos_vmap is not None:
    pairs = parse_pairs([fzoos_vmap], "fzoos_vmap")
    extra["fzoos_vmap"] = pairs[0]
  if ffgb_clients is not None and ffgb_clients < 2:
    raise ConfigError("ffgb_clients", f"must be >= 2; got {ffgb_clients}")
  return ns, extra


def main(argv):
  del argv
  try:
    ns, extra = validate(
        FLAGS.algorithm, FLAGS.num_clients, repeats=FLAGS.repeats, min_time=FLAGS.min_time,
        rounds_per_chunk=FLAGS.rounds_per_chunk, sequential_clients=FLAGS.sequential_clients,
        samples_per_client=FLAGS.samples_per_client, prng_impl=FLAGS.prng_impl, suites=FLAGS.suite,
        scaling_clients=FLAGS.scaling_clients, compile_rounds=FLAGS.compile_rounds,
        compile_clients=FLAGS.compile_clients, roofline_clients=FLAGS.roofline_clients,
        matmul_size=FLAGS.matmul_size, fzoos_configs=FLAGS.fzoos_configs, fzoos_vmap=FLAGS.fzoos_vmap,
        ffgb_clients=FLAGS.ffgb_clients, ffgb_oracle_steps=FLAGS.ffgb_oracle_steps)
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
  if FLAGS.blas_threads < 0:
    print(f"error: --blas_threads: must be >= 0 (0 = library default); got {FLAGS.blas_threads}", file=sys.stderr)
    sys.exit(2)
  if FLAGS.client_block is not None and FLAGS.client_block < 0:
    print(f"error: --client_block: must be >= 0 (0 = one vmap); got {FLAGS.client_block}", file=sys.stderr)
    sys.exit(2)
  if FLAGS.quick and not FLAGS["num_clients"].present:
    ns = [8]
  blas = set_blas_threads(FLAGS.blas_threads)
  settings = Settings.make(FLAGS.quick, repeats=FLAGS.repeats, min_time=FLAGS.min_time,
                           rounds_per_chunk=FLAGS.rounds_per_chunk,
                           sequential_clients=FLAGS.sequential_clients,
                           samples_per_client=FLAGS.samples_per_client, seed=FLAGS.seed,
                           roofline_clients=FLAGS.roofline_clients, matmul_size=FLAGS.matmul_size,
                           ffgb_clients=FLAGS.ffgb_clients, ffgb_oracle_steps=FLAGS.ffgb_oracle_steps,
                           client_block=FLAGS.client_block, **extra)
  env = environment()
  env["blas_threads"] = blas
  command = "python -m experiments.benchmark " + " ".join(sys.argv[1:])
  suites = [s for s in SUITES if s in FLAGS.suite]
  print(f"benchmark on {env['device']} ({env['backend']}, jax {env['jax_version']}, {env['cpu_count']} CPUs, "
        f"PRNG {env['prng_impl']}, load average {env['load_average']}): suites {', '.join(suites)}; "
        f"vmap algorithms {', '.join(FLAGS.algorithm)}, N = {', '.join(map(str, ns))}; "
        f"output {FLAGS.output_dir}", flush=True)
  log = lambda line: print(line, flush=True)
  write = lambda recs, res: write_outputs(FLAGS.output_dir, recs, env, settings, command, res)
  records, results = run_suites(suites, FLAGS.algorithm, ns, settings, log=log, on_update=write)
  env["load_average_end"] = environment()["load_average"]
  write_outputs(FLAGS.output_dir, records, env, settings, command, results)
  print(f"wrote {FLAGS.output_dir}/benchmark.json and benchmark.md", flush=True)


if __name__ == "__main__":
  define_flags()
  app.run(main, flags_parser=common.parse_flags_or_exit)
