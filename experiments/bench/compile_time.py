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

``compile_parts`` picks among ``chunks`` (the sweeps above), ``main_job``, ``emitters``,
``sweep`` and ``warmup`` (default: all).

``warmup``: the main job's FedAvg (``python -m experiments.run --algorithm=fedavg
--rounds=R``, R = ``compile_warmup_rounds``) timed from the process's start (just before it
is spawned) to its first round (the first progress line past round 0, the end of the
first ``eval_every`` chunk) and to its final loss (round R's line), with a fresh empty
persistent compilation cache (``cold``: a new ``--compilation_cache`` folder and
``XDG_CACHE_HOME``) and again with that cache filled (``warm``), ``compile_warmup_repeats``
times (0 = skipped). With ``baseline`` (a git revision) the same runs go in a ``git worktree``
of that revision, alternating with this tree's (A B B A ...), each tree byte-compiled and run once
untimed first; per tree and cache the median, and ``ratio`` = the median of this tree's over the
baseline's, pair by pair (:func:`warmup`).

``sweep``: ``experiments/flagfiles/sweep_fedzo_alpha.cfg`` (FedZO, 3 Dirichlet
alphas x ``compile_sweep_seeds`` seeds, ``compile_sweep_rounds`` rounds; 0 =
skipped) with the seeds batched and one after another, each in a fresh process
with an empty persistent cache (:func:`sweep_job`; the target: batched >= 2x
faster, wall and CPU).
"""

from __future__ import annotations

import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
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


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_ROUND_LINE = re.compile(r"^\[fedavg\] round (\d+)/(\d+) objective (\S+)")


def warmup_run(tree: str, rounds: int, cache_home: str, output_dir: str) -> dict:
  """One main-job FedAvg run of ``tree`` in a fresh process (``experiments.run``), timed from outside.

  The persistent compilation cache is ``cache_home/fedsim/jax`` and ``XDG_CACHE_HOME`` is
  ``cache_home`` (an empty folder: a first run; the same folder again: a cached run).

  Returns:
    ``{"first_round_s", "final_s", "exit_s", "cpu_s", "final_objective"}``: wall seconds from just
    before the spawn to the first progress line past round 0, to round ``rounds``' line and to the
    exit; the child's CPU seconds; the final objective as printed.

  Raises:
    RuntimeError: the run failed or printed no round line.
  """
  env = {**os.environ, "XDG_CACHE_HOME": cache_home, "PYTHONPATH": tree}
  cmd = [sys.executable, "-m", "experiments.run", "--algorithm=fedavg", f"--rounds={rounds}",
         f"--output_dir={output_dir}", f"--compilation_cache={os.path.join(cache_home, 'fedsim', 'jax')}"]
  before = resource.getrusage(resource.RUSAGE_CHILDREN)
  t0 = time.perf_counter()
  proc = subprocess.Popen(cmd, cwd=tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          bufsize=1)
  first = final = objective = None
  assert proc.stdout is not None
  for line in proc.stdout:
    m = _ROUND_LINE.match(line.strip())
    if m and int(m.group(1)) > 0:
      now = time.perf_counter() - t0
      first = now if first is None else first
      if int(m.group(1)) == rounds:
        final, objective = now, m.group(3)
  err = proc.stderr.read() if proc.stderr is not None else ""
  code = proc.wait()
  exit_s = time.perf_counter() - t0
  after = resource.getrusage(resource.RUSAGE_CHILDREN)
  if code != 0 or first is None or final is None:
    raise RuntimeError(f"{' '.join(cmd)} in {tree} failed (exit {code}): {err[-2000:]}")
  return {"first_round_s": first, "final_s": final, "exit_s": exit_s, "final_objective": objective,
          "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)}


def warmup(rounds: int, repeats: int, baseline: str = "", log: Callable[[str], None] = print) -> dict:
  """This tree's main-job warm-up, cold and warm cache, side by side with ``baseline`` (module docstring).

  Args:
    rounds: R of the FedAvg runs.
    repeats: runs per tree and cache state (the median is reported).
    baseline: a git revision of this repository ("" = this tree alone).

  Returns:
    ``{"rounds", "repeats", "trees": {name: commit}, "runs": [per run], "summary": [per tree and
    cache: medians], "ratios": {cache: {figure: median ratio this / baseline}}}``.

  Raises:
    RuntimeError: a run failed, or the baseline's worktree could not be made.
  """
  def git(*args, cwd=ROOT):
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()
  tmp = tempfile.mkdtemp(prefix="fedsim_warmup_")
  trees = {"this tree": ROOT}
  commits = {"this tree": git("rev-parse", "--short", "HEAD") + ("+" if git("status", "--porcelain") else "")}
  try:
    if baseline:
      base_dir = os.path.join(tmp, "baseline")
      try:
        git("worktree", "add", "--detach", base_dir, baseline)
      except subprocess.CalledProcessError as e:
        raise RuntimeError(f"baseline {baseline!r}: git worktree add failed: {e.stderr.strip()}") from None
      trees["baseline"] = base_dir
      commits["baseline"] = git("rev-parse", "--short", "HEAD", cwd=base_dir)
    for tree in trees.values():  # bytecode and the OS's file cache, not timed
      subprocess.run([sys.executable, "-m", "compileall", "-q", "fedsim", "experiments"], cwd=tree, check=True,
                     capture_output=True)
      home = tempfile.mkdtemp(dir=tmp)
      warmup_run(tree, rounds, home, os.path.join(home, "out"))
    runs = []
    order = list(trees)
    for rep in range(repeats):
      for name in (order if rep % 2 == 0 else order[::-1]):
        home = tempfile.mkdtemp(dir=tmp)  # empty: the cold run fills it, the warm run reads it
        for cache in ("cold", "warm"):
          rec = {"tree": name, "commit": commits[name], "cache": cache, "repeat": rep,
                 **warmup_run(trees[name], rounds, home, os.path.join(home, f"out_{cache}"))}
          log(f"[compile warmup {name} {commits[name]}, {cache} cache, run {rep + 1}/{repeats}] first round "
              f"{rec['first_round_s']:.2f} s, final loss {rec['final_s']:.2f} s, exit {rec['exit_s']:.2f} s, "
              f"CPU {rec['cpu_s']:.2f} s")
          runs.append(rec)
  finally:
    if "baseline" in trees:
      subprocess.run(["git", "worktree", "remove", "--force", trees["baseline"]], cwd=ROOT, capture_output=True)
    subprocess.run(["rm", "-rf", tmp], check=False)
  figures = ("first_round_s", "final_s", "exit_s", "cpu_s")
  summary = []
  for name in trees:
    for cache in ("cold", "warm"):
      mine = [r for r in runs if r["tree"] == name and r["cache"] == cache]
      summary.append({"tree": name, "commit": commits[name], "cache": cache, "runs": len(mine),
                      **{f: statistics.median(r[f] for r in mine) for f in figures},
                      "final_objective": mine[-1]["final_objective"]})
  ratios = {}
  if baseline:
    for cache in ("cold", "warm"):
      pairs = [(a, b) for a in runs for b in runs if a["cache"] == b["cache"] == cache
               and a["repeat"] == b["repeat"] and a["tree"] == "this tree" and b["tree"] == "baseline"]
      ratios[cache] = {f: statistics.median(a[f] / b[f] for a, b in pairs) for f in figures}
      log(f"[compile warmup, {cache} cache] this tree / baseline {baseline}: first round "
          f"{ratios[cache]['first_round_s']:.2f}x, final loss {ratios[cache]['final_s']:.2f}x (target <= 0.5x "
          "for the first round)")
  return {"rounds": rounds, "repeats": repeats, "baseline": baseline, "trees": commits, "runs": runs,
          "summary": summary, "ratios": ratios}


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
  if "chunks" not in settings.compile_parts:
    return _runs(settings, log, {"records": [], "rounds_ratio": {}, "rounds_ratio_cpu": {}})
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
  return _runs(settings, log, {"records": records, "rounds_ratio": ratio, "rounds_ratio_cpu": ratio_cpu})


def _runs(settings: Settings, log: Callable[[str], None], out: dict) -> dict:
  """The suite's whole-process and emitter parts, added to ``out``."""
  parts = settings.compile_parts
  jobs = (main_job(settings.compile_main_job_rounds, log)
          if settings.compile_main_job_rounds > 0 and "main_job" in parts else [])
  emit = emitters(settings, log) if settings.compile_emitters_clients > 0 and "emitters" in parts else []
  sweeps = (sweep_job(settings.compile_sweep_rounds, settings.compile_sweep_seeds, log)
            if settings.compile_sweep_rounds > 0 and "sweep" in parts else [])
  warm = (warmup(settings.compile_warmup_rounds, settings.compile_warmup_repeats, settings.baseline, log)
          if settings.compile_warmup_repeats > 0 and "warmup" in parts else {})
  return {**out, "main_job": jobs, "emitters": emit, "sweep": sweeps, "warmup": warm}


def markdown(result: dict) -> str:
  """The suite's markdown table."""
  rows = ["| algorithm | sweep | N | rounds per chunk | lower s | compile s | compile CPU s | HLO chars |",
          "|" + "---|" * 8] if result["records"] else []
  for r in result["records"]:
    rows.append(f"| {r['algorithm']} | {r['sweep']} | {r['num_clients']} | {r['rounds_per_chunk']} "
                f"| {r['lower_s']:.2f} | {r['compile_s']:.2f} | {r['compile_cpu_s']:.2f} | {r['hlo_chars'] or 'n/a'} |")
  ratios = [f"{k} {v:.2f}; {result['rounds_ratio_cpu'][k]:.2f}" for k, v in result["rounds_ratio"].items()]
  if ratios:
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
  if result.get("warmup"):
    rows += ["", warmup_markdown(result["warmup"])]
  return "\n".join(rows) + "\n"


def warmup_markdown(w: dict) -> str:
  """The warm-up table: per tree and cache state, the medians; then the ratios to the baseline."""
  rows = [f"| main job FedAvg, {w['rounds']} rounds | commit | cache | runs | to first round s | to final loss s "
          "| to exit s | CPU s |", "|" + "---|" * 8]
  rows += [f"| {r['tree']} | {r['commit']} | {r['cache']} | {r['runs']} | {r['first_round_s']:.2f} "
           f"| {r['final_s']:.2f} | {r['exit_s']:.2f} | {r['cpu_s']:.2f} |" for r in w["summary"]]
  for cache, q in w.get("ratios", {}).items():
    rows.append(f"\n{cache} cache, this tree / baseline {w['baseline']} (median of paired ratios): first round "
                f"{q['first_round_s']:.2f}x, final loss {q['final_s']:.2f}x, exit {q['exit_s']:.2f}x, CPU "
                f"{q['cpu_s']:.2f}x")
  return "\n".join(rows)
