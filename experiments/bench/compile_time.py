r"""Suite ``compile``: compile time of one engine chunk against rounds per chunk and N.

For FedAvg and FedZO on digits softmax (full participation): the chunk
(``fedsim.core.engine.make_chunk``, rounds in ``lax.scan``) is traced and
lowered (``lower_s``) and compiled by XLA (``compile_s``) from a fresh
``jax.jit`` each time (no cache hit), for

* rounds per chunk in ``compile_rounds`` (default 1, 10, 100) at
  N = ``compile_clients[1]`` (default 1000), and
* N in ``compile_clients`` (default 10^2, 10^3, 10^4) at
  ``compile_rounds[1]`` (default 10) rounds.

``hlo_chars`` (size of the lowered program) shows why compile time does not
depend on the rounds: the scan body is emitted once. ``rounds_ratio`` =
max/min compile time over the rounds sweep (1.0 = independent).

``main_job``: the main job (``fedsim.ExperimentConfig()``'s defaults: FedAvg and
FedZO, digits, N = 100, ``compile_main_job_rounds`` rounds; 0 = skipped), run
twice in fresh processes with one new persistent compilation cache
(``compilation_cache``): ``cold`` (empty cache) then ``warm``. Per run: the
seconds XLA spent compiling (``jax.monitoring``'s backend-compile events, summed),
the persistent-cache hits, and the process's wall and CPU seconds.

``emitters``: XLA's classic CPU emitters (the engine's default) against its
fusion emitters (``fedsim.core.compile_options``) for FedAvg, FedZO, DeComFL and
HiSo on the softmax and FedAvg on the MLP at N = ``compile_emitters_clients``,
and FedAvg on the CNN at N / 5: each chunk (``rounds_per_chunk`` rounds) is
compiled under both (``compile_cpu_s``), run once from the same state (``same_bits``:
the states agree bit for bit), then timed in alternation (``time_interleaved``).

``sweep``: ``experiments/flagfiles/sweep_fedzo_alpha.cfg`` (FedZO, 3 Dirichlet
alphas x ``compile_sweep_seeds`` seeds, ``compile_sweep_rounds`` rounds; 0 =
skipped) with the seeds batched and one after another, each in a fresh process
with an empty persistent cache (:func:`sweep_job`; the target: batched >= 2x
faster, wall and CPU).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Callable

from experiments.bench.util import Settings, compile_chunk, make_benchmark_task

TITLE = "compile time against rounds per chunk and N"
ALGORITHMS = ("fedavg", "fedzo")


# One main-job run in a fresh process: XLA compile seconds, persistent-cache hits, wall and CPU.
_MAIN_JOB = r"""
import json, resource, sys, time
t0 = time.perf_counter()
import jax
from jax._src import dispatch
out = {"compile_s": 0.0, "compiles": 0, "cache_hits": 0}
def duration(event, secs, **kw):
  if event == dispatch.BACKEND_COMPILE_EVENT:
    out["compile_s"] += secs
    out["compiles"] += 1
jax.monitoring.register_event_duration_secs_listener(duration)
jax.monitoring.register_event_listener(
    lambda event, **kw: out.__setitem__("cache_hits", out["cache_hits"] + 1)
    if event == "/jax/compilation_cache/cache_hits" else None)
import fedsim
fedsim.run(fedsim.ExperimentConfig(rounds=int(sys.argv[1]), progress=False, compilation_cache=sys.argv[2]))
usage = resource.getrusage(resource.RUSAGE_SELF)
out.update(wall_s=time.perf_counter() - t0, cpu_s=usage.ru_utime + usage.ru_stime)
print(json.dumps(out))
"""


def main_job(rounds: int, log: Callable[[str], None] = print) -> list[dict]:
  """The main job's compile time with an empty, then a filled persistent cache (module docstring)."""
  out = []
  with tempfile.TemporaryDirectory() as cache:
    for state in ("cold", "warm"):
      proc = subprocess.run([sys.executable, "-c", _MAIN_JOB, str(rounds), cache], capture_output=True, text=True)
      if proc.returncode != 0:
        raise RuntimeError(f"main job failed: {proc.stderr[-2000:]}")
      rec = {"cache": state, "rounds": rounds, **json.loads(proc.stdout.strip().splitlines()[-1])}
      log(f"[compile main job, {state} cache] compile {rec['compile_s']:.2f} s ({rec['compiles']} "
          f"programs compiled or loaded), {rec['cache_hits']} cache hits; run {rec['wall_s']:.1f} s wall, "
          f"{rec['cpu_s']:.1f} s CPU")
      out.append(rec)
  return out


EMITTER_CASES = (("fedavg", "softmax"), ("fedzo", "softmax"), ("decomfl", "softmax"), ("hiso", "softmax"),
                 ("fedavg", "mlp"), ("fedavg", "cnn"))


def emitters(settings: Settings, log: Callable[[str], None] = print) -> list[dict]:
  """Classic against fusion XLA CPU emitters, per case of ``EMITTER_CASES`` (module docstring)."""
  import jax
  import numpy as np

  from experiments.bench.util import time_interleaved
  from experiments.bench.vmap import benchmark_hparams
  from fedsim import algorithms
  from fedsim.core import compile_options

  def bits(tree):
    return [np.asarray(jax.random.key_data(a) if jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key) else a)
            for a in jax.tree_util.tree_leaves(tree)]

  before, out = compile_options.cpu_emitters(), []
  try:
    for name, model in EMITTER_CASES:
      n = max(1, settings.compile_emitters_clients // (5 if model == "cnn" else 1))
      task = make_benchmark_task(n, settings.samples_per_client, settings.seed, model=model)
      hp = benchmark_hparams(name)
      hp["clients_per_round"] = n
      runs, rec = {}, {"algorithm": name, "model": model, "num_clients": n}
      for mode in ("classic", "fusion"):
        compile_options.set_cpu_emitters(mode)
        run, info = compile_chunk(algorithms.build(name, task, **hp), task, settings.rounds_per_chunk, settings.seed)
        run()
        runs[mode], rec[f"{mode}_compile_cpu_s"] = run, info["compile_cpu_s"]
      rec["same_bits"] = all(np.array_equal(a, b) for a, b in zip(bits(runs["classic"].state()),
                                                                  bits(runs["fusion"].state())))
      t = time_interleaved({m: (r, True) for m, r in runs.items()}, settings.repeats, settings.min_time)
      for mode in runs:
        rec[f"{mode}_s_per_round"] = t[mode]["best"] / settings.rounds_per_chunk
      rec["compile_ratio"] = rec["fusion_compile_cpu_s"] / max(rec["classic_compile_cpu_s"], 1e-9)
      rec["run_ratio"] = rec["fusion_s_per_round"] / rec["classic_s_per_round"]
      log(f"[compile emitters {name} ({model}) N={n}] compile CPU classic {rec['classic_compile_cpu_s']:.2f} s, "
          f"fusion {rec['fusion_compile_cpu_s']:.2f} s ({rec['compile_ratio']:.2f}x); s/round classic "
          f"{rec['classic_s_per_round']:.4f}, fusion {rec['fusion_s_per_round']:.4f} (fusion/classic "
          f"{rec['run_ratio']:.2f}); same bits: {rec['same_bits']}")
      out.append(rec)
  finally:
    compile_options.set_cpu_emitters(before)
  return out


SWEEP_FLAGFILE = "experiments/flagfiles/sweep_fedzo_alpha.cfg"


def sweep_job(rounds: int, seeds: int, log: Callable[[str], None] = print) -> list[dict]:
  """The 3 x ``seeds`` sweep of ``SWEEP_FLAGFILE`` at ``rounds`` rounds, seeds batched and one after another.

  Each mode runs ``python -m experiments.sweep`` in a fresh process from the
  repository root with its own empty persistent compilation cache and output
  folder; wall seconds and the child's CPU seconds (user + sys) are measured.
  ``speedup`` (on the batched record) = one-after-another / batched, wall and CPU.
  """
  import os
  import resource
  import time
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  out = []
  for batched in (True, False):
    with tempfile.TemporaryDirectory() as tmp:
      cmd = [sys.executable, "-m", "experiments.sweep", f"--flagfile={SWEEP_FLAGFILE}", f"--rounds={rounds}",
             f"--seeds={seeds}", f"--batch_seeds={str(batched).lower()}", f"--output_dir={tmp}/out",
             f"--compilation_cache={tmp}/cache"]
      before = resource.getrusage(resource.RUSAGE_CHILDREN)
      t = time.perf_counter()
      proc = subprocess.run(cmd, capture_output=True, text=True, cwd=root)
      wall = time.perf_counter() - t
      after = resource.getrusage(resource.RUSAGE_CHILDREN)
      if proc.returncode != 0:
        raise RuntimeError(f"sweep failed: {proc.stderr[-2000:]}")
      cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
      rec = {"mode": "batched" if batched else "one after another", "rounds": rounds, "seeds": seeds,
             "wall_s": wall, "cpu_s": cpu, "command": " ".join(cmd[1:])}
      log(f"[compile sweep, seeds {rec['mode']}] {rounds} rounds x 3 alphas x {seeds} seeds: {wall:.1f} s wall, "
          f"{cpu:.1f} s CPU")
      out.append(rec)
  out[0]["speedup_wall"] = out[1]["wall_s"] / out[0]["wall_s"]
  out[0]["speedup_cpu"] = out[1]["cpu_s"] / max(out[0]["cpu_s"], 1e-9)
  log(f"[compile sweep] batched seeds {out[0]['speedup_wall']:.2f}x faster wall, {out[0]['speedup_cpu']:.2f}x CPU "
      "(target >= 2x)")
  return out


def run(settings: Settings, log: Callable[[str], None] = print) -> dict:
  """Runs the suite; returns ``{"records": [...], "rounds_ratio": {alg: ratio}, "main_job": [...]}``."""
  from experiments.bench.vmap import benchmark_hparams
  from fedsim import algorithms
  rounds, clients = list(settings.compile_rounds), list(settings.compile_clients)
  n_mid = clients[min(1, len(clients) - 1)]
  r_mid = rounds[min(1, len(rounds) - 1)]
  points = [("rounds", n_mid, r) for r in rounds]
  points += [("clients", n, r_mid) for n in clients if (n, r_mid) != (n_mid, r_mid)]
  records, ratio, ratio_cpu = [], {}, {}
  for name in ALGORITHMS:
    for sweep, n, length in points:
      task = make_benchmark_task(n, settings.samples_per_client, settings.seed)
      hp = benchmark_hparams(name)
      hp["clients_per_round"] = n
      alg = algorithms.build(name, task, **hp)
      _, info = compile_chunk(alg, task, length, settings.seed)
      rec = {"algorithm": name, "sweep": sweep, "num_clients": n, "rounds_per_chunk": length,
             "lower_s": info["lower_s"], "compile_s": info["compile_s"], "compile_cpu_s": info["compile_cpu_s"],
             "hlo_chars": info["hlo_chars"]}
      records.append(rec)
      log(f"[compile {name} N={n} rounds={length}] lower {info['lower_s']:.2f} s, compile "
          f"{info['compile_s']:.2f} s ({info['compile_cpu_s']:.2f} CPU s), HLO {info['hlo_chars']:,} chars")
    cs = [r["compile_s"] for r in records if r["algorithm"] == name and r["sweep"] == "rounds"]
    ratio[name] = max(cs) / min(cs)
    cc = [r["compile_cpu_s"] for r in records if r["algorithm"] == name and r["sweep"] == "rounds"]
    ratio_cpu[name] = max(cc) / max(min(cc), 1e-12)
    log(f"[compile {name}] compile time max/min over rounds per chunk {rounds}: {ratio[name]:.2f}")
  jobs = main_job(settings.compile_main_job_rounds, log) if settings.compile_main_job_rounds > 0 else []
  emit = emitters(settings, log) if settings.compile_emitters_clients > 0 else []
  sweeps = (sweep_job(settings.compile_sweep_rounds, settings.compile_sweep_seeds, log)
            if settings.compile_sweep_rounds > 0 else [])
  return {"records": records, "rounds_ratio": ratio, "rounds_ratio_cpu": ratio_cpu, "main_job": jobs,
          "emitters": emit, "sweep": sweeps}


def markdown(result: dict) -> str:
  """The suite's markdown table."""
  rows = ["| algorithm | sweep | N | rounds per chunk | lower s | compile s | compile CPU s | HLO chars |",
          "|" + "---|" * 8]
  for r in result["records"]:
    rows.append(f"| {r['algorithm']} | {r['sweep']} | {r['num_clients']} | {r['rounds_per_chunk']} "
                f"| {r['lower_s']:.2f} | {r['compile_s']:.2f} | {r['compile_cpu_s']:.2f} | {r['hlo_chars'] or 'n/a'} |")
  ratios = [f"{k} {v:.2f}; {result['rounds_ratio_cpu'][k]:.2f}" for k, v in result["rounds_ratio"].items()]
  rows.append("\ncompile time max/min over the rounds sweep (wall; CPU): " + ", ".join(ratios))
  if result.get("main_job"):
    rows += ["", "| main job | rounds | compile s | programs (compiled or loaded) | cache hits | run wall s "
             "| run CPU s |", "|" + "---|" * 7]
    rows += [f"| {r['cache']} cache | {r['rounds']} | {r['compile_s']:.2f} | {r['compiles']} | {r['cache_hits']} "
             f"| {r['wall_s']:.1f} | {r['cpu_s']:.1f} |" for r in result["main_job"]]
  if result.get("emitters"):
    rows += ["", "| XLA CPU emitters | N | compile CPU s classic | fusion | s/round classic | fusion "
             "| fusion / classic run time | same bits |", "|" + "---|" * 8]
    rows += [f"| {r['algorithm']} ({r['model']}) | {r['num_clients']} | {r['classic_compile_cpu_s']:.2f} "
             f"| {r['fusion_compile_cpu_s']:.2f} | {r['classic_s_per_round']:.4f} | {r['fusion_s_per_round']:.4f} "
             f"| {r['run_ratio']:.2f} | {r['same_bits']} |" for r in result["emitters"]]
  if result.get("sweep"):
    rows += ["", f"| `{SWEEP_FLAGFILE}` | rounds | seeds | wall s | CPU s |", "|" + "---|" * 5]
    rows += [f"| seeds {r['mode']} | {r['rounds']} | {r['seeds']} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} |"
             for r in result["sweep"]]
    b = result["sweep"][0]
    rows.append(f"\nbatched seeds: {b['speedup_wall']:.2f}x faster (wall), {b['speedup_cpu']:.2f}x (CPU); "
                "target >= 2x")
  return "\n".join(rows) + "\n"
