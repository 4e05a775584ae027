r"""Runs one or more federated algorithms side by side on one task.

With no flags this is the main job: digits, softmax, 100 clients, Dirichlet
alpha = 0.5, 10 clients per round, FedAvg and FedZO side by side, 300 rounds.

  python -m experiments.run
  python -m experiments.run --flagfile=experiments/flagfiles/mnist_softmax_shards.cfg

Writes under --output_dir: config.json, <algorithm>/metrics.jsonl (one JSON
object per evaluation) and curves.png; before an algorithm's first round it prints
its round program's memory (XLA's estimate) against the memory available, and
refuses (exit 2, one line naming the settings that shrink it) a program that does
not fit (``fedsim.core.memory``); it ends with a table of each algorithm's final
objective, task metric, queries, bytes uploaded and wall time, and the total time
(``fedsim.runner.results_table``). Bad flags exit with status 2 and one line
before anything compiles; a NaN/inf objective stops that algorithm (its metrics
so far stay on disk), the others run on, and the binary exits with status 3
(``fedsim.results.EXIT_DIVERGED``) at the end, after one line naming them. An lr
grid whose large end diverges is a finished run: scripts can tell it from a
crash (1) or bad flags (2). With ``--watchdog_s=S`` > 0, a run that makes no
progress (a set-up step, an algorithm's compilation start, an evaluation record)
for S seconds prints one line naming each thread's innermost frames, writes every
stack to <output_dir>/watchdog-<process>.txt and exits with status 4
(``fedsim.results.EXIT_HUNG``), so a hung batch job (a deadlock, a dead peer of a
multi-host run) never sits silent.

Long runs: ``--checkpoint_every=K`` saves each algorithm's full state under
<output_dir>/<alg>/checkpoints (asynchronously, off the run's critical path; the
last 2 kept); ``--resume`` continues from there bitwise-identically, keeping
metrics.jsonl up to the checkpoint's round and appending the rest; it is refused
(exit 2, one line naming each setting with its stored and given value) when a
setting that changes results differs from <output_dir>/config.json, and (one line
naming --checkpoint_every, --resume and --overwrite) when there is no checkpoint
to continue from. Reruns never surprise: the same command into a folder holding
the finished run prints ``complete: N rounds in DIR; --overwrite to recompute``,
exits 0 and touches nothing; into a folder holding it unfinished it is refused
unless ``--resume`` or ``--overwrite``. A directory holding another run is refused unless
``--overwrite``; a bad --output_dir (a file, under a file, read-only) exits 2
before anything is built. Multi-host: start one process per host with
``--coordinator_address=HOST:PORT --num_processes=P --process_id=i`` (BUILD.md);
the processes run one SPMD program over all their devices and process 0 writes
the outputs.

This binary only parses flags: ``common.experiment_config`` maps them to a
``fedsim.ExperimentConfig`` and ``fedsim.run`` (fedsim/api.py) does the rest, so
the same settings from Python give the same records and files. The start-up log
prints one line per algorithm with its non-default hyperparameters and where each
came from (``--HP``, ``--ALG_HP``, ``flagfile PATH (--HP)``, ``algorithm entry``,
``binary default``, ``registry preset``); config.json's ``hyperparameters`` has
every value and source.
"""

from __future__ import annotations

import sys
import time

from absl import app, flags, logging

from experiments import common
from fedsim import results
from fedsim.core.errors import ConfigError, Interrupted
from fedsim.runner import ProgressWriter, results_table  # noqa: F401 (ProgressWriter re-exported: the binary's writer)

FLAGS = flags.FLAGS
common.define_flags()


def main(argv):
  del argv
  if not FLAGS["verbosity"].present:  # keep bad-input errors to one line (no backend INFO logs)
    logging.set_verbosity(logging.WARNING)
  try:  # before any JAX use: jax.distributed.initialize must come first
    common.validate_distributed()
  except ConfigError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
  from fedsim.core import distributed
  distributed.initialize(FLAGS.coordinator_address, FLAGS.num_processes, FLAGS.process_id)
  import fedsim

  start = time.perf_counter()
  try:  # the flags' ExperimentConfig, checked; config.json records each value's flag or flagfile
    config = common.experiment_config(
        flags={k: v for k, v in FLAGS.flag_values_dict().items() if k in _own_flags()})
    with common.cli_errors():  # the library's messages in flag form
      histories = fedsim.run(config)  # checks the task and every algorithm before writing anything
  except ConfigError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
  except Interrupted as e:  # SIGINT / SIGTERM at a chunk boundary: records (and a checkpoint) kept
    print(e.message(flags=True), file=sys.stderr, flush=True)
    sys.exit(e.exit_status)
  except KeyboardInterrupt:  # a second Ctrl-C, or one before the run's rounds began
    print("interrupted (SIGINT) before the end of a chunk; records written so far are kept", file=sys.stderr,
          flush=True)
    sys.exit(130)
  if config.progress and distributed.is_main() and not histories.stored:  # a stored run: its one "complete" line
    print(results_table(histories, time.perf_counter() - start), flush=True)
  if gone := fedsim.api.diverged(histories):
    print(f"finished; stopped on a non-finite objective: {', '.join(gone)} (exit {results.EXIT_DIVERGED})",
          file=sys.stderr)
    sys.exit(results.EXIT_DIVERGED)


def _own_flags():
  return {f.name for f in FLAGS.get_flags_for_module(sys.modules[common.__name__])} | {"flagfile"}


if __name__ == "__main__":
  app.run(main, flags_parser=common.parse_flags_or_exit)
