r"""Suite ``scaling``: seconds per round and memory against the number of clients.

For each of ``scaling_algorithms`` (default FedZO; fedavg also accepted, with
the vmap suite's lr 0.1, H = 5, B = 20): FedZO with its paper defaults (seed
001 §V: b1 = 25, b2 = 20, H = 5, sphere directions) on digits softmax (d = 650),
FULL participation (M = N clients every round), N in ``scaling_clients``
(default 10^2, 10^3, 10^4, 10^5; 10^6 by flag), each
client holding ``samples_per_client`` samples drawn with replacement
(:func:`experiments.bench.util.make_benchmark_task`). Per N: a one-round chunk
is compiled (``compile_s``) and timed (best of ``scaling_repeats`` after a
warm-up call that makes a repeat last >= 1 s; for N > 10^4 no warm-up, every
call is a repeat; for N > 10^5 one timed round), the compiled executable's ``memory_analysis()`` and the
process peak RSS (monotone: N runs in increasing order, so the RSS after N is
the peak of every N so far). ``slope`` is the least-squares slope of
log(seconds per round) against log(N) over the N from 10^3 to the largest N measured (the
target, up to 10^6: <= 1.1), per algorithm; ``fits_24gib`` compares the compiled footprint and the peak RSS with
24 GiB.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from experiments.bench.util import Settings, compile_chunk, make_benchmark_task, mib, process_memory, time_interleaved

TITLE = "scaling in N (digits softmax, full participation)"
GIB24 = 24 * 2 ** 30


def loglog_slope(ns, seconds) -> float | None:
  """Least-squares slope of log(seconds) on log(N); None with fewer than 2 points."""
  if len(ns) < 2:
    return None
  xs, ys = [math.log(n) for n in ns], [math.log(s) for s in seconds]
  mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
  sxx = sum((x - mx) ** 2 for x in xs)
  return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx > 0 else None


def fmt(v) -> str:
  """A slope with 3 decimals, or n/a."""
  return "n/a" if v is None else format(v, ".3f")


def run(settings: Settings, log: Callable[[str], None] = print) -> dict:
  """Runs the suite; returns ``{"records": [...], "slopes": {algorithm: {...}}}``."""
  from experiments.bench import vmap
  from fedsim import algorithms
  records, slopes = [], {}
  for name in settings.scaling_algorithms:
    mine = []
    for n in sorted(settings.scaling_clients):
      task = make_benchmark_task(n, settings.samples_per_client, settings.seed)
      hp = vmap.benchmark_hparams(name)
      hp["clients_per_round"] = n
      alg = algorithms.build(name, task, **hp)
      run, info = compile_chunk(alg, task, 1, settings.seed)
      warm = n <= 10000
      repeats = 1 if n > 100000 else settings.scaling_repeats
      t = time_interleaved({"round": (run, warm)}, repeats, 1.0 if warm else 0.0)["round"]
      mem = dict(info["memory"], **process_memory())
      rec = {"algorithm": name, "num_clients": n, "participation": "full", "seconds_per_round": t["best"],
             "seconds_per_round_all": t["seconds"], "cpu_seconds_per_round": min(t["cpu_seconds"]),
             "cpu_per_wall": t["cpu_per_wall"], "compile_s": info["compile_s"], "lower_s": info["lower_s"],
             "client_steps_per_s": n * alg.hparams.local_steps / t["best"], "memory": mem,
             "fits_24gib": bool((mem["total_bytes"] or 0) < GIB24 and mem["peak_rss_bytes"] < GIB24)}
      mine.append(rec)
      log(f"[scaling {name} N={n}] {t['best']:.4g} s/round (cpu/wall {t['cpu_per_wall']:.2f}); compile "
          f"{info['compile_s']:.2f} s; compiled temp {mib(mem['temp_bytes'])} + args "
          f"{mib(mem['argument_bytes'])} MiB; peak RSS {mib(mem['peak_rss_bytes'])} MiB")
      del task, alg, run
    records += mine
    ns = [r["num_clients"] for r in mine]
    lo, hi = 1000, max(ns)
    sel = [r for r in mine if lo <= r["num_clients"]]
    if hi < 100000 or len(sel) < 2:  # --quick or a custom list: fit over everything measured
      sel, lo = mine, min(ns)
    slope = loglog_slope([r["num_clients"] for r in sel], [r["seconds_per_round"] for r in sel])
    # The same fit on CPU seconds of the process (less sensitive to other processes' load).
    slope_cpu = loglog_slope([r["num_clients"] for r in sel], [r["cpu_seconds_per_round"] for r in sel])
    slopes[name] = {"slope": slope, "slope_cpu": slope_cpu, "slope_range": [lo, hi]}
    log(f"[scaling {name}] log-log slope of s/round on N over [{lo}, {hi}]: {fmt(slope)} "
        f"(CPU s: {fmt(slope_cpu)})")
  return {"task": "digits softmax (d = 650)", "participation": "full", "records": records, "slopes": slopes}


def markdown(result: dict) -> str:
  """The suite's markdown table."""
  rows = ["| algorithm | N | s/round | CPU s/round | client steps/s | cpu/wall | compile s "
          "| compiled temp+arg+out MiB | peak RSS MiB | fits 24 GiB |", "|" + "---|" * 10]
  for r in result["records"]:
    m = r["memory"]
    rows.append(f"| {r.get('algorithm', 'fedzo')} | {r['num_clients']} | {r['seconds_per_round']:.4g} "
                f"| {r['cpu_seconds_per_round']:.4g} | {r['client_steps_per_s']:,.0f} "
                f"| {r['cpu_per_wall']:.2f} | {r['compile_s']:.2f} | {mib(m['total_bytes'])} "
                f"| {mib(m['peak_rss_bytes'])} | {'yes' if r['fits_24gib'] else 'no'} |")
  for name, sl in result["slopes"].items():
    lo, hi = sl["slope_range"]
    rows.append(f"\n{name}: log-log slope of s/round on N over [{lo}, {hi}]: {fmt(sl['slope'])}; of CPU "
                f"s/round: {fmt(sl['slope_cpu'])} (target <= 1.1)")
  return "\n".join(rows) + "\n"
