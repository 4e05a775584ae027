r"""Suite ``checkpoint``: what ``--checkpoint_every`` costs the main job (the target: at most 25%).

FedAvg on the main job's task (``fedsim.ExperimentConfig()``'s digits softmax,
N = 100, M = 10, Dirichlet alpha = 0.5, eval every 10 rounds; ``checkpoint_task``
and ``checkpoint_clients_per_round`` another size, e.g. ``mlp`` with M = 100, whose
rounds are longer) for
``checkpoint_rounds`` (200) rounds, without checkpoints and with
``--checkpoint_every=checkpoint_main_every`` (20: 10 saves), timed side by side in
one process (``time_interleaved``, each call into a fresh output folder):

* ``simulate``: :func:`fedsim.core.engine.simulate` alone (task and algorithm
  built once), from its call to its return, so the wait for the last save is in it;
* ``run``: the whole :func:`fedsim.run` call, what ``python -m experiments.run
  --algorithm=fedavg --rounds=200 [--checkpoint_every=20]`` spends after start-up
  (task, compiled programs from JAX's persistent cache, rounds, config.json,
  metrics.jsonl, curves.png).

``ratio`` = with / without (median of side-by-side ratios); below 1.25 meets
the issue's bound. Both runs' records are checked equal (checkpoints do not
change results).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable

from experiments.bench.util import Settings, paired_median, time_interleaved

TITLE = "checkpoint cost on the main job (FedAvg, with / without --checkpoint_every)"
TARGET = 1.25


def run(settings: Settings, log: Callable[[str], None] = print) -> dict:
  """Runs the suite; returns ``{"records": [one record]}``."""
  import jax

  import fedsim
  from fedsim import algorithms, api
  from fedsim.core.engine import simulate
  from fedsim.core.sharding import client_mesh, shard_task

  rounds, every, task_name = settings.checkpoint_rounds, settings.checkpoint_main_every, settings.checkpoint_task
  m = settings.checkpoint_clients_per_round
  base = fedsim.ExperimentConfig(algorithms=("fedavg",), rounds=rounds, progress=False, task=task_name,
                                 clients_per_round=m)
  task = shard_task(api.build_task(base), client_mesh(None))
  (resolved,) = base.resolve().values()
  alg = algorithms.build(resolved.name, task, **resolved.values)
  key = jax.random.key(base.seed)
  work = tempfile.mkdtemp(prefix="fedsim-bench-checkpoint-")
  last: dict = {}

  def fresh():
    return tempfile.mkdtemp(dir=work)

  def sim(k):
    def call():
      d = fresh()
      _, recs = simulate(alg, task, rounds, base.eval_every, key, checkpoint_dir=os.path.join(d, "ckpt") if k else None,
                         checkpoint_every=k)
      last[("simulate", k)] = [{n: v for n, v in r.items() if n != "wall_time_s"} for r in recs]
      shutil.rmtree(d)
    return call

  def whole(k):
    def call():
      d = fresh()
      h = fedsim.run(fedsim.ExperimentConfig(algorithms=("fedavg",), rounds=rounds, progress=False,
                                             task=task_name, clients_per_round=m, checkpoint_every=k),
                     output_dir=d)
      last[("run", k)] = [{n: v for n, v in r.items() if n != "wall_time_s"} for r in h["fedavg"]]
      shutil.rmtree(d)
    return call

  try:
    t = time_interleaved({"simulate": (sim(0), True), "simulate_ckpt": (sim(every), True),
                          "run": (whole(0), True), "run_ckpt": (whole(every), True)},
                         settings.repeats, settings.min_time)
  finally:
    shutil.rmtree(work, ignore_errors=True)
  rec = {"algorithm": "fedavg", "task": task_name, "clients_per_round": m, "rounds": rounds, "checkpoint_every": every,
         "saves": rounds // every, "target_ratio": TARGET,
         "same_records": last[("simulate", 0)] == last[("simulate", every)] == last[("run", 0)] == last[("run", every)]}
  for name in ("simulate", "run"):
    off, on = t[name], t[f"{name}_ckpt"]
    rec.update({f"{name}_s": off["best"], f"{name}_ckpt_s": on["best"], f"{name}_s_all": off["seconds"],
                f"{name}_ckpt_s_all": on["seconds"], f"{name}_ratio": paired_median(on["seconds"], off["seconds"]),
                f"{name}_cpu_ratio": paired_median(on["cpu_seconds"], off["cpu_seconds"]),
                f"{name}_cpu_per_wall": off["cpu_per_wall"], f"{name}_ckpt_cpu_per_wall": on["cpu_per_wall"]})
  ok = max(rec["simulate_ratio"], rec["run_ratio"]) <= TARGET
  log(f"[checkpoint fedavg on {task_name}, M = {m}, {rounds} rounds, every {every}: {rec['saves']} saves] simulate "
      f"{rec['simulate_s']:.3f} s without, {rec['simulate_ckpt_s']:.3f} s with: ratio {rec['simulate_ratio']:.2f}x "
      f"(CPU {rec['simulate_cpu_ratio']:.2f}x); fedsim.run {rec['run_s']:.3f} s / {rec['run_ckpt_s']:.3f} s: "
      f"ratio {rec['run_ratio']:.2f}x (CPU {rec['run_cpu_ratio']:.2f}x) "
      f"({'within' if ok else 'over'} the {TARGET}x bound; same records: {rec['same_records']})")
  return {"records": [rec]}


def markdown(result: dict) -> str:
  """The suite's markdown table."""
  rows = ["| task | M | rounds | every | saves | simulate s without | with | ratio | CPU ratio | fedsim.run s without "
          "| with | ratio | CPU ratio | cpu/wall | same records |", "|" + "---|" * 15]
  for r in result["records"]:
    rows.append(f"| {r['task']} | {r['clients_per_round']} | {r['rounds']} | {r['checkpoint_every']} | {r['saves']} "
                f"| {r['simulate_s']:.3f} | {r['simulate_ckpt_s']:.3f} | {r['simulate_ratio']:.2f}x "
                f"| {r['simulate_cpu_ratio']:.2f}x | {r['run_s']:.3f} | {r['run_ckpt_s']:.3f} | {r['run_ratio']:.2f}x "
                f"| {r['run_cpu_ratio']:.2f}x | {r['run_ckpt_cpu_per_wall']:.2f} | {r['same_records']} |")
  return "\n".join(rows) + "\n"
