r"""Suite ``fzoos``: seconds per FZooS round at the Fig. 1 settings, and rounds per second in N.

FZooS (Shu et al. 2023, Alg. 2, ``fedsim.algorithms.fzoos``) on the federated quadratic
of ``experiments/flagfiles/fzoos_fig1_quadratic.cfg`` (d = ``fzoos_dim`` = 300,
C = 5, float64 as the flagfile's ``--x64``), all N clients every round,
T = ``fzoos_steps`` = 10 local steps, the paper's windows and active queries,
for each (N, M) of ``fzoos_configs`` (default (5, 10000), (50, 10000),
(500, 1000): at N = 500 the vmapped RFF fit alone would hold 500 x (500 x 10,000)
float64 features = 20 GB, so M = 1,000 there). A config whose compiled round
needs more than 80% of the available memory is compiled but not run (record
``skipped`` with ``compiled_bytes``). One-round chunks: the first
call (round 0, with the 10 initial queries) is the warm-up; rounds 1.. are
timed (``repeats`` of them for N <= 5, one otherwise).

``speedup_vs_authors`` = 33 s / seconds per round: the authors' public
implementation measured about 33 s per FZooS round at d = 300, N = 5, T = 10,
M = 10,000 on 2 CPU cores (the target: >= 100x).

Run it with the BLAS libraries at one thread (the binary's ``--blas_threads=1``):
jaxlib's CPU Cholesky calls OpenBLAS, whose spinning worker threads make a
500 x 500 float64 factorisation take ~1 s instead of ~3 ms when other processes
share the 2 cores; ``seconds_per_round_blas_default_threads`` (first config)
times one round with ``os.cpu_count()`` BLAS threads for comparison.

``rff_cache_off`` (first config): the same round without the cached RFF fit
(``FZooSConfig.rff_cache = 0``, the default of earlier fedsim versions), timed side by side with the
default; ``speedup`` is the default's (paired median of off / default).

``whole_run`` (first config): whole runs of the history's R = 50 rounds, every round timed, of this
checkout (``current``) and of the git revision ``fzoos_baseline`` (``--fzoos_baseline``, default
``main``; its ``fedsim/`` and ``experiments/`` exported with ``git archive``), each in its own process
(``fzoos_round_server.py``), their rounds alternating: the mean over all R rounds, rounds 1-3, the last
round and sum(x_r) per round (whether the two compute the same run). A round reads more of the history
as it fills, so a round late in a run costs more than the first rounds.

``profile`` (first config): the jitted pieces of one client's round timed
alone on one client's shapes, with how many times a round calls each, so
``estimate_s`` = N sum(count x seconds) can be set against the measured round. It models
the ``rff_cache = 0`` fit (``rff_fit_weights``) and one distance pass per window
(``*_top_k``); the default round makes fewer (a cached fit, the distances reused), so the
estimate is an upper bound there (BUILD.md has a trace of the default round).
"""

from __future__ import annotations

import collections
import glob
import gzip
import json
import os
import re
import tempfile
from collections.abc import Callable

from experiments.bench.util import Settings, compile_chunk, mib, paired_median, process_memory, time_interleaved

TITLE = "FZooS round time (quadratic, Fig. 1 settings, float64)"
AUTHORS_SECONDS_PER_ROUND = 33.0


def profile_pieces(cfg, dim: int, repeats: int, seed: int = 0) -> dict:
  """Times FZooS's per-client pieces at the config's shapes (float64; call under enable_x64).

  Every array is an argument of the jitted piece (no captured constants, which
  XLA would fold at compile time).

  Returns:
    name -> {"seconds", "cpu_seconds", "count_per_round"} and ``estimate_per_client_s``.
  """
  import jax
  import jax.numpy as jnp

  from fedsim.estimators import gp as gpm
  from fedsim.estimators import rff as rffm
  T, kind, ls, noise = cfg.local_steps, cfg.kernel, cfg.lengthscale, cfg.gp_noise
  k = jax.random.split(jax.random.key(seed), 4)
  f64 = jnp.float64
  feats = rffm.draw(k[0], cfg.num_rff, dim, ls, f64)
  Xr = 0.1 * jax.random.normal(k[1], (cfg.rff_window, dim), f64)
  yr = jnp.sum(Xr ** 2, 1)
  Xg, yg = Xr[:cfg.gp_window], yr[:cfg.gp_window]
  mg, mr = jnp.ones(cfg.gp_window, bool), jnp.ones(cfg.rff_window, bool)
  post = gpm.fit(kind, Xg, yg, mg, Xg[0], ls, 1.0, noise)
  cand_l = Xg[0] + cfg.local_radius * jax.random.uniform(k[2], (cfg.local_candidates, dim), f64, -1, 1)
  cand_s = Xg[0] + 0.1 * jax.random.uniform(k[3], (cfg.server_candidates, dim), f64, -1, 1)
  hist = jax.random.normal(k[1], (cfg.history_size, dim), f64)
  w = jnp.ones(cfg.num_rff, f64)
  pieces = {
      # eq. (6), the rff_cache = 0 fit: once per client per round (server side).
      "rff_fit_weights": (lambda f, X, y, m: rffm.fit_weights(f, X, y, m, cfg.rff_ridge), (feats, Xr, yr, mr), 1),
      # local GP (eq. 5): every local step, every local active query (t < T) and the server active query.
      "gp_fit": (lambda X, y, m: gpm.fit(kind, X, y, m, X[0], ls, 1.0, noise).alpha, (Xg, yg, mg), 2 * T),
      "gp_mean_grad": (lambda p, x: gpm.posterior_mean_grad(kind, p, x), (post, Xg[1]), T),
      "grad_cov_trace_local": (lambda p, c: gpm.posterior_grad_cov_trace(kind, p, c), (post, cand_l), T - 1),
      "grad_cov_trace_server": (lambda p, c: gpm.posterior_grad_cov_trace(kind, p, c), (post, cand_s), 1),
      "rff_gradient": (lambda f, w, x: rffm.gradient(f, w, x), (feats, w, Xg[1]), T),
      # nearest-point windows over the ring buffer (top_k): one per GP fit, one for the RFF fit.
      "gp_window_top_k": (lambda H, p: jax.lax.top_k(-jnp.sum((H - p) ** 2, 1), cfg.gp_window)[1],
                          (hist, Xg[1]), 2 * T),
      "rff_window_top_k": (lambda H, p: jax.lax.top_k(-jnp.sum((H - p) ** 2, 1), cfg.rff_window)[1],
                           (hist, Xg[1]), 1),
  }
  out, est = {}, 0.0
  for name, (fn, args, count) in pieces.items():
    jf = jax.jit(fn)
    t = time_interleaved({name: (lambda jf=jf, args=args: jax.block_until_ready(jf(*args)), True)},
                         repeats, 0.2)[name]
    out[name] = {"seconds": t["best"], "cpu_seconds": min(t["cpu_seconds"]), "count_per_round": count,
                 "cpu_per_wall": t["cpu_per_wall"]}
    est += count * t["best"]
  out["estimate_per_client_s"] = est
  return out


SCOPES = ("rff_fit", "rff_gradient", "distances", "nearest", "local_gp", "active_queries")
"""The ``jax.named_scope`` names of fedsim.algorithms.fzoos's pieces, innermost first: an op is charged to the
first of them in its HLO ``op_name`` (``distances`` inside ``local_gp`` inside ``active_queries`` is
``distances``); ops under none of them are ``other`` (aggregation, the iterate's steps, the clients' f)."""


def scope_profile(run, trace_dir: str | None = None) -> dict:
  """Where one compiled FZooS round's time goes, by :data:`SCOPES`: one call of ``run`` (a
  :func:`~experiments.bench.util.compile_chunk` of one round) under ``jax.profiler.trace``; each thunk's
  self time (its span minus those of the thunks nested in it, per thread) is charged to the scope of its HLO
  instruction's ``op_name`` (``run.hlo_text()``).

  Returns:
    ``{"traced_round_s": wall seconds of the traced call, "ms": {scope: self milliseconds, summed over
    threads}, "total_ms": their sum}``. Self times summed over threads can exceed the wall time when XLA
    runs thunks in parallel.
  """
  import time

  import jax
  scope_of = {}
  for line in run.hlo_text().splitlines():
    m = re.match(r"\s*(?:ROOT )?%?([\w.\-]+) = .*?op_name=\"([^\"]*)\"", line)
    if m:
      parts = re.split(r"[/()]", m.group(2))   # vmap puts a scope in parentheses: vmap(rff_fit)/...
      scope_of[m.group(1)] = next((sc for sc in SCOPES if sc in parts), "other")
  with tempfile.TemporaryDirectory() as tmp:
    folder = trace_dir or tmp
    t = time.perf_counter()
    with jax.profiler.trace(folder, create_perfetto_trace=True):
      run()
    wall = time.perf_counter() - t
    (path,) = glob.glob(os.path.join(folder, "**", "*.trace.json.gz"), recursive=True)[-1:]
    with gzip.open(path) as f:
      doc = json.load(f)
  events = doc["traceEvents"] if isinstance(doc, dict) else doc
  threads = collections.defaultdict(list)
  for e in events:
    if e.get("ph") == "X" and e.get("name") in scope_of:
      threads[(e["pid"], e["tid"])].append(e)
  ms: collections.Counter = collections.Counter({sc: 0.0 for sc in (*SCOPES, "other")})
  for evs in threads.values():
    evs.sort(key=lambda e: (e["ts"], -e["dur"]))
    stack: list = []
    for e in evs:
      while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"]:
        stack.pop()
      if stack:
        ms[scope_of[stack[-1]["name"]]] -= e["dur"] / 1e3
      ms[scope_of[e["name"]]] += e["dur"] / 1e3
      stack.append(e)
  return {"traced_round_s": wall, "ms": dict(ms), "total_ms": sum(ms.values())}


SERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fzoos_round_server.py")
"""The round server (``fzoos_round_server.py``): one FZooS run of a checkout, a round per request."""
CHECKOUT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
"""The checkout this suite runs from (its fedsim is the one timed as ``current``)."""


def export_revision(revision: str, dest: str, repo: str = CHECKOUT) -> str:
  """Writes git revision ``revision``'s ``fedsim/`` and ``experiments/`` under ``dest`` (``git archive``:
  the repository and its work trees are left as they are) and returns the commit's hash.

  Raises:
    subprocess.CalledProcessError: no such revision, or git fails.
  """
  import subprocess
  commit = subprocess.run(["git", "-C", repo, "rev-parse", "--verify", f"{revision}^{{commit}}"],
                          check=True, capture_output=True, text=True).stdout.strip()
  tar = subprocess.run(["git", "-C", repo, "archive", commit, "fedsim", "experiments"], check=True,
                       capture_output=True).stdout
  subprocess.run(["tar", "-x", "-C", dest], input=tar, check=True)
  return commit


def whole_runs(trees: dict, n: int, m: int, dim: int, steps: int, rounds: int, seed: int = 0,
               log: Callable[[str], None] = print) -> dict:
  """Times every round of one whole FZooS run per checkout, the checkouts' rounds in alternation.

  Each checkout of ``trees`` (name -> path) gets a round server (``fzoos_round_server.py``: its own
  process, compiled before any round runs); then rounds 0..rounds-1 run one checkout's round after
  the other's, the order swapped every round, so slow drifts in the machine's load hit all alike.
  Round 0 is each run's first call (its 10 initial queries, first touches of the state).

  Returns:
    name -> {"seconds": [rounds floats], "mean_s" (all rounds), "mean_after_first_s" (rounds
    1..), "early_s" (mean of rounds 1-3), "last_s", "compile_s", "checksums": sum(x_r) per round}.
  """
  import subprocess
  import sys
  procs = {}
  try:
    for name, tree in trees.items():
      p = subprocess.Popen([sys.executable, SERVER, tree, str(n), str(m), str(dim), str(steps), str(rounds),
                            str(seed)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
      line = p.stdout.readline().split()
      if not line or line[0] != "ready":
        raise RuntimeError(f"the round server of {name} ({tree}) did not start: {line}")
      procs[name] = (p, float(line[1]))
    out = {name: {"seconds": [], "checksums": [], "compile_s": c} for name, (_, c) in procs.items()}
    names = list(procs)
    for r in range(rounds):
      for name in (names if r % 2 == 0 else names[::-1]):
        p = procs[name][0]
        p.stdin.write("round\n")
        sec, chk = p.stdout.readline().split()
        out[name]["seconds"].append(float(sec))
        out[name]["checksums"].append(float(chk))
  finally:
    for p, _ in procs.values():
      if p.poll() is None:
        p.stdin.close()
        p.wait(timeout=60)
  for name, rec in out.items():
    s = rec["seconds"]
    rec.update(mean_s=sum(s) / len(s), mean_after_first_s=sum(s[1:]) / max(len(s) - 1, 1),
               early_s=sum(s[1:4]) / len(s[1:4]) if len(s) > 1 else None, last_s=s[-1])
    log(f"[fzoos whole run, {name}] {rounds} rounds: mean {rec['mean_s']:.4g} s/round (rounds 1-{rounds - 1}: "
        f"{rec['mean_after_first_s']:.4g}), rounds 1-3 {rec['early_s']:.4g}, last {rec['last_s']:.4g}, "
        f"round 0 {s[0]:.4g}")
  return out


def whole_run_record(settings, n: int, m: int, rounds: int, log: Callable[[str], None] = print) -> dict:
  """:func:`whole_runs` of this checkout (``current``) and, unless ``settings.fzoos_baseline`` is "" or
  "none", of that git revision (``baseline``, exported to a temporary folder by :func:`export_revision`).

  Returns:
    {"rounds", "runs": whole_runs' result, "baseline_revision", "baseline_commit" (when a baseline
    ran; "baseline_error" instead when the revision could not be exported), "same_run" and
    "max_checksum_difference" (sum(x_r) of the two runs, when both ran)}.
  """
  import subprocess
  rev = settings.fzoos_baseline
  out = {"rounds": rounds}
  with tempfile.TemporaryDirectory() as tmp:
    trees = {"current": CHECKOUT}
    if rev and rev != "none":
      try:
        out["baseline_commit"] = export_revision(rev, tmp)
        out["baseline_revision"] = rev
        trees["baseline"] = tmp
      except (subprocess.CalledProcessError, OSError) as e:
        out["baseline_error"] = f"{rev}: {e}"
        log(f"[fzoos whole run] no baseline: {out['baseline_error']}")
    out["runs"] = whole_runs(trees, n, m, settings.fzoos_dim, settings.fzoos_steps, rounds, settings.seed, log)
  if "baseline" in out["runs"]:
    a, b = out["runs"]["current"]["checksums"], out["runs"]["baseline"]["checksums"]
    out["max_checksum_difference"] = max(abs(x - y) for x, y in zip(a, b))
    out["same_run"] = a == b
    log(f"[fzoos whole run] mean over all {rounds} rounds: {out['runs']['current']['mean_s']:.4g} s against the "
        f"baseline's {out['runs']['baseline']['mean_s']:.4g} s; x_r the same: {out['same_run']}")
  return out


def available_memory_bytes() -> int | None:
  """MemAvailable from /proc/meminfo (None where unreadable)."""
  try:
    with open("/proc/meminfo") as f:
      for line in f:
        if line.startswith("MemAvailable:"):
          return int(line.split()[1]) * 1024
  except OSError:
    pass
  return None


def run(settings: Settings, log: Callable[[str], None] = print,
              blas_default_comparison: bool = True) -> dict:
  """Runs the suite; returns ``{"records": [...], "authors_seconds_per_round": 33.0}``.

  ``blas_default_comparison``: also time one round of the first config with the
  BLAS libraries at ``os.cpu_count()`` threads (``seconds_per_round_blas_default_threads``).
  """
  import jax

  from experiments.bench.vmap import fzoos_hparams, fzoos_task
  from fedsim import algorithms
  records = []
  with jax.enable_x64(True):
    for i, (n, m) in enumerate(settings.fzoos_configs):
      task = fzoos_task(n, settings.fzoos_dim, settings.seed)
      alg = algorithms.build("fzoos", task, **fzoos_hparams(settings, m))
      run, info = compile_chunk(alg, task, 1, settings.seed)
      need, avail = info["memory"]["total_bytes"], available_memory_bytes()
      if need is not None and avail is not None and need > 0.8 * avail:
        # Not run: it would be killed for memory (and take the machine's other jobs with it).
        records.append({"num_clients": n, "num_rff": m, "dim": settings.fzoos_dim,
                        "local_steps": settings.fzoos_steps, "dtype": "float64", "skipped": True,
                        "compiled_bytes": need, "available_bytes": avail, "compile_s": info["compile_s"],
                        "memory": info["memory"]})
        log(f"[fzoos N={n} M={m}] NOT RUN: the compiled round needs {mib(need)} MiB, "
            f"{mib(avail)} MiB available")
        del task, alg, run
        continue
      reps = settings.repeats if n <= 5 else 1
      t = time_interleaved({"round": (run, True)}, reps, 0.0)["round"]
      spr = t["best"]
      mem = dict(info["memory"], **process_memory())
      rec = {"num_clients": n, "num_rff": m, "dim": settings.fzoos_dim, "local_steps": settings.fzoos_steps,
             "dtype": "float64", "seconds_per_round": spr, "rounds_per_s": 1.0 / spr,
             "seconds_per_round_all": t["seconds"], "first_round_s": t["warmup_s"],
             "cpu_seconds_per_round": min(t["cpu_seconds"]), "cpu_per_wall": t["cpu_per_wall"],
             "compile_s": info["compile_s"], "memory": mem,
             "speedup_vs_authors": AUTHORS_SECONDS_PER_ROUND / spr}
      log(f"[fzoos N={n} M={m} d={settings.fzoos_dim} T={settings.fzoos_steps}] {spr:.4g} s/round "
          f"({1 / spr:.3g} rounds/s; cpu {rec['cpu_seconds_per_round']:.3g} s, cpu/wall {t['cpu_per_wall']:.2f}); "
          f"vs the authors' 33 s: {rec['speedup_vs_authors']:.1f}x; compile {info['compile_s']:.1f} s; "
          f"compiled {mib(mem['total_bytes'])} MiB")
      if i == 0 and blas_default_comparison:
        # The same round with the BLAS libraries' default thread count (the binary sets 1).
        from threadpoolctl import threadpool_limits
        with threadpool_limits(limits=os.cpu_count(), user_api="blas"):
          tb = time_interleaved({"round": (run, False)}, 1, 0.0)["round"]
        rec["seconds_per_round_blas_default_threads"] = tb["best"]
        rec["cpu_per_wall_blas_default_threads"] = tb["cpu_per_wall"]
        log(f"[fzoos N={n} M={m}] with {os.cpu_count()} BLAS threads: {tb['best']:.4g} s/round "
            f"(cpu/wall {tb['cpu_per_wall']:.2f})")
      if i == 0:
        # The uncached RFF fit (FZooSConfig.rff_cache = 0, the default before issue 37), side by side.
        alg_c = algorithms.build("fzoos", task, rff_cache=0, **fzoos_hparams(settings, m))
        run_c, info_c = compile_chunk(alg_c, task, 1, settings.seed)
        tc = time_interleaved({"default": (run, False), "rff_cache_off": (run_c, True)}, reps, 0.0)
        rec["rff_cache_off"] = {"seconds_per_round": tc["rff_cache_off"]["best"],
                                "default_seconds_per_round": tc["default"]["best"],
                                "speedup": paired_median(tc["rff_cache_off"]["seconds"], tc["default"]["seconds"]),
                                "compiled_bytes": info_c["memory"]["total_bytes"],
                                "cpu_per_wall": tc["rff_cache_off"]["cpu_per_wall"]}
        log(f"[fzoos N={n} M={m}] rff_cache=0: {tc['rff_cache_off']['best']:.4g} s/round against the default's "
            f"{tc['default']['best']:.4g} s side by side (the default {rec['rff_cache_off']['speedup']:.2f}x "
            f"faster); compiled {mib(info_c['memory']['total_bytes'])} MiB")
        rec["scope_profile"] = scope_profile(run)
        rec["rff_cache_off"]["scope_profile"] = scope_profile(run_c)
        log(f"[fzoos N={n} M={m}] one traced round by scope, default / rff_cache=0 (self ms): "
            + ", ".join(f"{k} {rec['scope_profile']['ms'][k]:.0f} / "
                        f"{rec['rff_cache_off']['scope_profile']['ms'][k]:.0f}" for k in (*SCOPES, "other")))
        del run_c, alg_c
        # Whole runs: this checkout's and the baseline revision's, every round timed, rounds alternating.
        rec["whole_run"] = whole_run_record(settings, n, m, alg.hparams.rounds, log)
        prof = profile_pieces(alg.hparams, settings.fzoos_dim, settings.repeats, settings.seed)
        rec["profile"] = prof
        rec["profile_estimate_s"] = n * prof["estimate_per_client_s"]
        top = sorted(((k, v["count_per_round"] * v["seconds"]) for k, v in prof.items() if isinstance(v, dict)),
                     key=lambda kv: -kv[1])
        log(f"[fzoos N={n} profile] per client per round: "
            + ", ".join(f"{k} {1e3 * s:.1f} ms" for k, s in top)
            + f"; N x sum = {rec['profile_estimate_s']:.3g} s vs measured {spr:.3g} s")
      records.append(rec)
      del task, alg, run
  return {"records": records, "authors_seconds_per_round": AUTHORS_SECONDS_PER_ROUND}


def markdown(result: dict) -> str:
  """The suite's markdown table."""
  rows = ["| N | M | d | T | s/round | rounds/s | CPU s/round | cpu/wall | vs authors' 33 s | compile s |",
          "|" + "---|" * 10]
  for r in result["records"]:
    if r.get("skipped"):
      rows.append(f"| {r['num_clients']} | {r['num_rff']} | {r['dim']} | {r['local_steps']} | not run: needs "
                  f"{r['compiled_bytes'] / 2**30:.1f} GiB, {r['available_bytes'] / 2**30:.1f} GiB free | | | | "
                  f"| {r['compile_s']:.1f} |")
      continue
    rows.append(f"| {r['num_clients']} | {r['num_rff']} | {r['dim']} | {r['local_steps']} "
                f"| {r['seconds_per_round']:.4g} | {r['rounds_per_s']:.3g} | {r['cpu_seconds_per_round']:.3g} "
                f"| {r['cpu_per_wall']:.2f} | {r['speedup_vs_authors']:.1f}x | {r['compile_s']:.1f} |")
  for r in result["records"]:
    if "rff_cache_off" in r:
      c = r["rff_cache_off"]
      rows.append(f"\nrff_cache = 0 (no cached RFF fit, the default of earlier fedsim versions) "
                  f"at N = {r['num_clients']}, "
                  f"M = {r['num_rff']}: {c['seconds_per_round']:.4g} s/round against the default's "
                  f"{c['default_seconds_per_round']:.4g} s side by side (the default {c['speedup']:.2f}x faster)")
    if r.get("whole_run"):
      wr = r["whole_run"]
      rows.append(f"\nwhole {wr['rounds']}-round runs side by side (N = {r['num_clients']}, M = {r['num_rff']}, "
                  "rounds alternating between the checkouts; s/round):\n")
      rows += ["| checkout | mean, all rounds | rounds 1-3 | last round | round 0 | mean / baseline's |",
               "|---|---|---|---|---|---|"]
      for name, run in wr["runs"].items():
        label = name if name != "baseline" else f"baseline {wr['baseline_revision']} ({wr['baseline_commit'][:10]})"
        ratio = f"{run['mean_s'] / wr['runs']['baseline']['mean_s']:.3f}" if "baseline" in wr["runs"] else ""
        rows.append(f"| {label} | {run['mean_s']:.4g} | {run['early_s']:.4g} | {run['last_s']:.4g} "
                    f"| {run['seconds'][0]:.4g} | {ratio} |")
      if "same_run" in wr:
        rows.append(f"\nthe two runs' x_r {'agree bit for bit' if wr['same_run'] else 'differ'} "
                    f"(largest |sum(x_r) difference| {wr['max_checksum_difference']:.3g})")
  for r in result["records"]:
    if "scope_profile" in r:
      on, off = r["scope_profile"], r["rff_cache_off"]["scope_profile"]
      rows.append(f"\none traced round at N = {r['num_clients']}, M = {r['num_rff']} by named scope of "
                  "fedsim.algorithms.fzoos (thunk self times, ms; `scope_profile`):\n")
      rows += ["| scope | default | rff_cache = 0 |", "|---|---|---|"]
      for k in (*SCOPES, "other"):
        rows.append(f"| {k} | {on['ms'][k]:.1f} | {off['ms'][k]:.1f} |")
      rows.append(f"| total | {on['total_ms']:.1f} | {off['total_ms']:.1f} |")
  for r in result["records"]:
    if "profile" in r:
      prof = r["profile"]
      parts = sorted(((k, v) for k, v in prof.items() if isinstance(v, dict)),
                     key=lambda kv: -kv[1]["count_per_round"] * kv[1]["seconds"])
      rows.append(f"\nprofile at N = {r['num_clients']}, M = {r['num_rff']} (one client's pieces, timed alone; "
                  "ms x calls per round):\n")
      rows += ["| piece | ms per call | calls per client-round | ms per client-round |", "|---|---|---|---|"]
      for k, v in parts:
        rows.append(f"| {k} | {1e3 * v['seconds']:.2f} | {v['count_per_round']} "
                    f"| {1e3 * v['seconds'] * v['count_per_round']:.1f} |")
      rows.append(f"\nN x sum = {r['profile_estimate_s']:.3g} s vs measured {r['seconds_per_round']:.3g} s/round")
  return "\n".join(rows) + "\n"
