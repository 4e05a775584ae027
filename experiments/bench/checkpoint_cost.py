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

Cadences (records under ``cadence``): whole jobs as ``python -m
experiments.run`` configures them from their flagfiles, each in a worker process
(``experiments/bench/checkpoint_job.py``, the flags' ``ExperimentConfig``, ``fedsim.run``
timed after one untimed compiling call, the cadences in alternation, ``repeats`` times):

* the main job (``experiments/flagfiles/main.cfg``, FedAvg and FedZO) at
  ``checkpoint_main_job_rounds`` (3,000) rounds: no checkpoints, the default cadence
  (``--checkpoint_every=-1``: every ``checkpoint_interval_s``, by default
  ``fedsim.core.checkpoint.DEFAULT_INTERVAL_S``) and ``--checkpoint_every=20``;
* FZooS Fig. 1 (``experiments/flagfiles/fzoos_fig1_quadratic.cfg``, FZooS alone: the
  algorithm of that figure whose state is large) at ``checkpoint_fzoos_rounds`` (20, not the
  figure's 50, to bound the suite's time) rounds: no checkpoints, the default cadence and
  ``--checkpoint_every=5`` (a save at every chunk end), which measures the cost of one save.

Per cadence: the best run's seconds, ``ratio`` = with / without (median of side-by-side
ratios; the default cadence's target is :data:`TIME_TARGET`), the CPU ratio, saves per run,
``per_save_s`` ((median seconds with - without) / saves) and whether the records equal the
run without checkpoints. ``0`` rounds skips a job (``--quick`` skips both).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable

from experiments.bench.util import Settings, paired_median, time_interleaved

TITLE = "checkpoint cost on the main job (FedAvg, with / without --checkpoint_every)"
TARGET = 1.25
TIME_TARGET = 1.05   # the default time cadence costs at most 5%
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# (job, flagfile, extra flags, the round cadence compared)
JOBS = (("main", "experiments/flagfiles/main.cfg", (), 20),
        ("fzoos_fig1", "experiments/flagfiles/fzoos_fig1_quadratic.cfg", ("--algorithm=fzoos",), 5))


def cadence_job(job: str, rounds: int, repeats: int, log: Callable[[str], None] = print) -> list[dict]:
  """Times one of :data:`JOBS` at ``rounds`` rounds without checkpoints, at the default time cadence and
  at its round cadence, in a worker process; returns one record per cadence."""
  _, flagfile, extra, every = next(j for j in JOBS if j[0] == job)
  variants = [["off", 0, None], ["default", -1, None], [f"every {every}", every, None]]
  spec = {"flags": [f"--flagfile={os.path.join(_ROOT, flagfile)}", f"--rounds={rounds}", *extra],
          "variants": variants, "repeats": repeats}
  done = subprocess.run([sys.executable, "-m", "experiments.bench.checkpoint_job", json.dumps(spec)], cwd=_ROOT,
                        capture_output=True, text=True, check=False)
  if done.returncode:
    raise RuntimeError(f"checkpoint job {job} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
  t = json.loads(done.stdout.strip().splitlines()[-1])
  off = t["off"]
  from fedsim.core.checkpoint import DEFAULT_INTERVAL_S
  recs = []
  for name, k, _ in variants:
    v = t[name]
    saves = statistics.median(v["saves"])
    extra_s = statistics.median(v["seconds"]) - statistics.median(off["seconds"])
    extra_cpu_s = statistics.median(v["cpu_seconds"]) - statistics.median(off["cpu_seconds"])
    recs.append({"job": job, "rounds": rounds, "cadence": name, "checkpoint_every": k,
                 "interval_s": DEFAULT_INTERVAL_S if k == -1 else None, "saves": saves, "best_s": min(v["seconds"]),
                 "seconds": v["seconds"], "cpu_seconds": v["cpu_seconds"],
                 "ratio": paired_median(v["seconds"], off["seconds"]),
                 "cpu_ratio": paired_median(v["cpu_seconds"], off["cpu_seconds"]),
                 "per_save_s": extra_s / saves if saves else None,
                 "per_save_cpu_s": extra_cpu_s / saves if saves else None, "cpu_per_wall": v["cpu_per_wall"],
                 "same_records": v["records_equal_to_first"]})
  base = recs[0]["best_s"]
  for r in recs[1:]:
    per = (f", {r['per_save_s']:.3f} s ({r['per_save_cpu_s']:.3f} s CPU) a save" if r["per_save_s"] is not None
           else "")
    target = f" (target {TIME_TARGET}x)" if r["checkpoint_every"] == -1 else ""
    log(f"[checkpoint {job}, {rounds} rounds] {r['cadence']}: {r['saves']:g} saves a run, {r['best_s']:.2f} s "
        f"against {base:.2f} s without: ratio {r['ratio']:.3f}x{target} (CPU {r['cpu_ratio']:.3f}x){per}; "
        f"same records: {r['same_records']}")
  return recs


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
  cadence = []
  for job, job_rounds in (("main", settings.checkpoint_main_job_rounds),
                          ("fzoos_fig1", settings.checkpoint_fzoos_rounds)):
    if job_rounds:
      cadence += cadence_job(job, job_rounds, settings.repeats, log)
  log(f"[checkpoint fedavg on {task_name}, M = {m}, {rounds} rounds, every {every}: {rec['saves']} saves] simulate "
      f"{rec['simulate_s']:.3f} s without, {rec['simulate_ckpt_s']:.3f} s with: ratio {rec['simulate_ratio']:.2f}x "
      f"(CPU {rec['simulate_cpu_ratio']:.2f}x); fedsim.run {rec['run_s']:.3f} s / {rec['run_ckpt_s']:.3f} s: "
      f"ratio {rec['run_ratio']:.2f}x (CPU {rec['run_cpu_ratio']:.2f}x) "
      f"({'within' if ok else 'over'} the {TARGET}x bound; same records: {rec['same_records']})")
  return {"records": [rec], "cadence": cadence}


def markdown(result: dict) -> str:
  """The suite's markdown table."""
  rows = ["| task | M | rounds | every | saves | simulate s without | with | ratio | CPU ratio | fedsim.run s without "
          "| with | ratio | CPU ratio | cpu/wall | same records |", "|" + "---|" * 15]
  for r in result["records"]:
    rows.append(f"| {r['task']} | {r['clients_per_round']} | {r['rounds']} | {r['checkpoint_every']} | {r['saves']} "
                f"| {r['simulate_s']:.3f} | {r['simulate_ckpt_s']:.3f} | {r['simulate_ratio']:.2f}x "
                f"| {r['simulate_cpu_ratio']:.2f}x | {r['run_s']:.3f} | {r['run_ckpt_s']:.3f} | {r['run_ratio']:.2f}x "
                f"| {r['run_cpu_ratio']:.2f}x | {r['run_ckpt_cpu_per_wall']:.2f} | {r['same_records']} |")
  if result.get("cadence"):
    rows += ["", "| job | rounds | cadence | saves a run | fedsim.run s (best) | ratio | CPU ratio | s a save "
             "| CPU s a save | cpu/wall | same records |", "|" + "---|" * 11]
    for r in result["cadence"]:
      name = f"default (-1, {r['interval_s']:g} s)" if r["checkpoint_every"] == -1 else r["cadence"]
      per = "- | -" if r["per_save_s"] is None else f"{r['per_save_s']:.3f} | {r['per_save_cpu_s']:.3f}"
      rows.append(f"| {r['job']} | {r['rounds']} | {name} | {r['saves']:g} | {r['best_s']:.2f} | {r['ratio']:.3f}x "
                  f"| {r['cpu_ratio']:.3f}x | {per} | {r['cpu_per_wall']:.2f} | {r['same_records']} |")
  return "\n".join(rows) + "\n"
