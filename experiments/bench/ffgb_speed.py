r"""Suite ``ffgb``: one FFGB round with the paper's mlp oracle, vmapped vs one client at a time.

FFGB (Shen et al. 2022, Alg. 2, ``fedsim.algorithms.ffgb``) on digits with the
homo_ratio partition (s = 0.1, specs/ffgb.md §3.1), N = ``ffgb_clients`` = 56
clients all taking part, K = ``ffgb_local_steps`` = 2, the ``mlp`` oracle
(MLP 32-32, fresh init and Adam per call, ``ffgb_oracle_steps`` = 1000 steps of
batch ``ffgb_batch`` = 128, App. B.3): N K = 112 learner trainings per round.

* vmapped: one engine round (one compiled chunk of one round: the 112
  trainings vmapped over clients, scanned over k, then the value caches
  updated), first call = warm-up, then ``repeats`` rounds timed (at most 2).
* one at a time: ``make_client_round`` (one client's K steps: K trainings in
  sequence, as Alg. 2 requires) jitted once and called for each of the N
  clients in a Python loop (N K = 112 trainings, one client at a time); it
  does not update the caches, so the ratio slightly favours the loop.

``ratio`` = loop seconds / vmapped seconds (median of side-by-side repeats).
"""

from __future__ import annotations

from collections.abc import Callable

from experiments.bench.util import (
  Settings,
  compile_chunk,
  mib,
  paired_median,
  process_memory,
  state_finite,
  time_interleaved,
)

TITLE = "FFGB round time (digits homo_ratio, mlp oracle)"


def run(settings: Settings, log: Callable[[str], None] = print) -> dict:
  """Runs the suite; returns ``{"records": [one record]}``."""
  from experiments.bench.vmap import ffgb_loop, ffgb_parts
  task, alg, client, cfg = ffgb_parts(settings, settings.ffgb_oracle_steps)
  n, k = task.num_clients, cfg.local_steps
  run, info = compile_chunk(alg, task, 1, settings.seed)
  loop = ffgb_loop(task, client, cfg, run.initial_state, run.rounds_key, n)
  reps = min(settings.repeats, 2)
  t = time_interleaved({"vmapped": (run, True), "loop": (loop, True)}, reps, 0.0)
  v, lp = t["vmapped"], t["loop"]
  ratio = paired_median(lp["seconds"], v["seconds"])
  mem = dict(info["memory"], **process_memory())
  rec = {"num_clients": n, "local_steps": k, "learners_per_round": n * k, "oracle": cfg.weak_learner,
         "oracle_steps": cfg.oracle_steps, "oracle_batch": cfg.oracle_batch,
         "max_client_size": int(task.client_data["x"].shape[1]),
         "seconds_per_round": v["best"], "seconds_per_round_all": v["seconds"],
         "cpu_seconds_per_round": min(v["cpu_seconds"]), "vmapped_cpu_per_wall": v["cpu_per_wall"],
         "loop_seconds": lp["best"], "loop_seconds_all": lp["seconds"], "loop_cpu_per_wall": lp["cpu_per_wall"],
         "loop_cpu_seconds": min(lp["cpu_seconds"]), "ratio": ratio, "ratio_of_best": lp["best"] / v["best"],
         "ratio_cpu": paired_median(lp["cpu_seconds"], v["cpu_seconds"]),
         "compile_s": info["compile_s"], "memory": mem, "state_finite": state_finite(run.state())}
  log(f"[ffgb N={n} K={k} mlp {cfg.oracle_steps} steps, batch {cfg.oracle_batch}] vmapped {v['best']:.4g} s/round "
      f"({n * k} trainings; cpu/wall {v['cpu_per_wall']:.2f}); one client at a time {lp['best']:.4g} s "
      f"(cpu/wall {lp['cpu_per_wall']:.2f}); ratio {ratio:.2f}x; compile {info['compile_s']:.1f} s; "
      f"compiled {mib(mem['total_bytes'])} MiB")
  return {"records": [rec]}


def markdown(result: dict) -> str:
  """The suite's markdown table."""
  rows = ["| N | K | learners | Adam steps x batch | vmapped s/round | cpu/wall | one at a time s | cpu/wall "
          "| ratio | ratio in CPU s |", "|" + "---|" * 10]
  for r in result["records"]:
    rows.append(f"| {r['num_clients']} | {r['local_steps']} | {r['learners_per_round']} "
                f"| {r['oracle_steps']} x {r['oracle_batch']} | {r['seconds_per_round']:.4g} "
                f"| {r['vmapped_cpu_per_wall']:.2f} | {r['loop_seconds']:.4g} | {r['loop_cpu_per_wall']:.2f} "
                f"| {r['ratio']:.2f}x | {r['ratio_cpu']:.2f}x |")
  return "\n".join(rows) + "\n"
