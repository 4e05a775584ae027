r"""Runs one or more federated algorithms side by side on one task.

With no flags this is the main job: digits, softmax, 100 clients, Dirichlet
alpha = 0.5, 10 clients per round, FedAvg and FedZO side by side, 300 rounds.

  python -m experiments.run
  python -m experiments.run --flagfile=experiments/flagfiles/mnist_softmax_shards.cfg

Writes under --output_dir: config.json, <algorithm>/metrics.jsonl (one JSON
object per evaluation) and curves.png. Bad flags exit with status 2 and one line
before anything compiles; a NaN/inf objective stops that algorithm (its metrics
so far stay on disk) and the binary exits with status 1 at the end.

Long runs: ``--checkpoint_every=K`` saves each algorithm's full state under
<output_dir>/<alg>/checkpoints (orbax; the last 2 kept); ``--resume`` continues
from there bitwise-identically, keeping metrics.jsonl up to the checkpoint's
round and appending the rest. Multi-host: start one process per host with
``--coordinator_address=HOST:PORT --num_processes=P --process_id=i`` (BUILD.md);
the processes run one SPMD program over all their devices and process 0 writes
the outputs.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from importlib import metadata

from absl import app, flags, logging

from experiments import common
from experiments.plotting import plot_curves
from fedsim.core.errors import ConfigError, DivergenceError

FLAGS = flags.FLAGS
common.define_flags()


def _version():
  try:
    return metadata.version("fedsim")
  except metadata.PackageNotFoundError:
    return "unknown"


# Task metrics shown on the progress line, with their short names.
HEADLINE = (("test_accuracy", "acc"), ("attack_accuracy", "attack_acc"), ("optimality_gap", "gap"))


class ProgressWriter:
  """Writes metrics.jsonl as records arrive and prints one progress line each."""

  def __init__(self, alg: str, path: str, total_rounds: int, keep_until: int | None = None,
               write: bool = True):
    """``keep_until``: resuming from that round: earlier records of ``path`` are kept (and
    re-plotted), later ones dropped; None starts a new file. ``write``: False on the
    processes other than 0 of a multi-host run (nothing written or printed)."""
    self.alg, self.total, self.write = alg, total_rounds, write
    self.history = []
    if keep_until is not None and os.path.exists(path):
      with open(path) as f:
        self.history = [rec for rec in map(json.loads, filter(str.strip, f))
                        if rec["round"] <= keep_until]
    self.f = None
    if write:
      self.f = open(path, "w")
      for rec in self.history:
        self.f.write(json.dumps(rec) + "\n")
      self.f.flush()

  def __call__(self, rec: dict):
    self.history.append(rec)
    if not self.write:
      return
    self.f.write(json.dumps(rec) + "\n")
    self.f.flush()
    r, el = rec["round"], rec["wall_time_s"]
    eta = f"{el / r * (self.total - r):.1f}s" if r else "-"
    extra = "".join(f" {short} {rec[key]:.4g}" for key, short in HEADLINE if key in rec)
    print(f"[{self.alg}] round {r}/{self.total} objective {rec['objective']:.5g}{extra} "
          f"queries {rec['queries']:.3e} elapsed {el:.1f}s ETA {eta}", flush=True)

  def close(self):
    if self.f is not None:
      self.f.close()


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
  main_process = distributed.is_main()
  import jax
  from fedsim.core import checkpoint
  from fedsim import algorithms
  from fedsim.core import simulate
  from fedsim.core.sharding import client_mesh, shard_task

  try:
    common.validate()
    if FLAGS.task in ("attack", "attack_cw", "metric_opt", "finetune"):
      print(f"building task {FLAGS.task} (trains or loads cached models) ...", flush=True)
    task = common.build_task()
    hps = {common.run_label(spec): common.hparams_for(spec) for spec in FLAGS.algorithm}
    names = {common.run_label(spec): common.parse_spec(spec)[0] for spec in FLAGS.algorithm}
    for label in hps:
      try:  # builders check their own settings (shapes, laws) without compiling
        algorithms.build(names[label], task, **hps[label])
      except ValueError as e:
        if isinstance(e, ConfigError):
          raise
        raise ConfigError("algorithm", f"{label}: {e}") from None
  except ConfigError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)

  common.set_blas_threads(FLAGS.blas_threads)
  mesh = client_mesh(FLAGS.num_devices or None)
  task = shard_task(task, mesh)
  os.makedirs(FLAGS.output_dir, exist_ok=True)  # every process (checkpoints need it)
  config = {"flags": {k: v for k, v in FLAGS.flag_values_dict().items() if k in _own_flags()},
            "version": _version(), "jax_version": jax.__version__, "backend": jax.default_backend(),
            "devices": mesh.devices.size, "processes": jax.process_count(),
            "task": {"name": task.name, "dim": task.dim, **task.info},
            "algorithms": {label: {"algorithm": names[label], **hp} for label, hp in hps.items()}}
  if main_process:
    with open(os.path.join(FLAGS.output_dir, "config.json"), "w") as f:
      json.dump(config, f, indent=2, default=str)
    print(f"task {task.name}: d = {task.dim}, N = {task.num_clients}; "
          f"algorithms {', '.join(FLAGS.algorithm)}; output {FLAGS.output_dir}", flush=True)

  histories, diverged = {}, []
  for alg_name in hps:
    # Built on the sharded task (cheap: builders only close over functions).
    alg = algorithms.build(names[alg_name], task, **hps[alg_name])
    os.makedirs(os.path.join(FLAGS.output_dir, alg_name), exist_ok=True)
    rounds, run_task = FLAGS.rounds, task
    if FLAGS.comm_budget > 0:
      rounds = common.comm_rounds(names[alg_name], hps[alg_name], task.num_clients, FLAGS.comm_budget)
    if names[alg_name] in common.FFGB_FAMILY:  # scored on its value caches (fedsim.tasks.functional)
      from fedsim.algorithms import ffgb
      from fedsim.tasks.functional import cache_view
      run_task = cache_view(task)
      if FLAGS.save_learners:
        cfg = alg.hparams
        alg = ffgb.attach_learner_writer(alg, os.path.join(FLAGS.output_dir, alg_name, "learners"),
                                         cfg, names[alg_name])
    ckpt_dir = os.path.join(FLAGS.output_dir, alg_name, "checkpoints")
    resumed = checkpoint.latest_round(ckpt_dir) if FLAGS.resume else None
    writer = ProgressWriter(alg_name, os.path.join(FLAGS.output_dir, alg_name, "metrics.jsonl"),
                            rounds, keep_until=resumed, write=main_process)
    if resumed is not None and main_process:
      print(f"[{alg_name}] resuming from round {resumed} ({ckpt_dir})", flush=True)
    try:
      simulate(alg, run_task, rounds, FLAGS.eval_every, jax.random.key(FLAGS.seed), on_eval=writer,
               checkpoint_dir=ckpt_dir, checkpoint_every=FLAGS.checkpoint_every, resume=FLAGS.resume)
    except DivergenceError as e:
      if main_process:
        print(f"[{alg_name}] diverged: {e}", file=sys.stderr, flush=True)
      diverged.append(alg_name)
    finally:
      writer.close()
      histories[alg_name] = writer.history
      if main_process:
        plot_curves(histories, os.path.join(FLAGS.output_dir, "curves.png"),
                    title=f"{task.name} on {task.info.get('dataset', task.name)}, N = {task.num_clients}")
  if main_process:
    print(f"wrote {FLAGS.output_dir}/config.json, */metrics.jsonl, curves.png", flush=True)
  if diverged:
    sys.exit(1)


def _own_flags():
  return {f.name for f in FLAGS.get_flags_for_module(sys.modules[common.__name__])} | {"flagfile"}


if __name__ == "__main__":
  app.run(main, flags_parser=common.parse_flags_or_exit)
