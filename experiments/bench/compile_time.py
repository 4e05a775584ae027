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
"""

from __future__ import annotations

from collections.abc import Callable

from experiments.bench.util import Settings, compile_chunk, make_benchmark_task

TITLE = "compile time against rounds per chunk and N"
ALGORITHMS = ("fedavg", "fedzo")


def run(settings: Settings, log: Callable[[str], None] = print) -> dict:
  """Runs the suite; returns ``{"records": [...], "rounds_ratio": {alg: ratio}}``."""
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
  return {"records": records, "rounds_ratio": ratio, "rounds_ratio_cpu": ratio_cpu}


def markdown(result: dict) -> str:
  """The suite's markdown table."""
  rows = ["| algorithm | sweep | N | rounds per chunk | lower s | compile s | compile CPU s | HLO chars |",
          "|" + "---|" * 8]
  for r in result["records"]:
    rows.append(f"| {r['algorithm']} | {r['sweep']} | {r['num_clients']} | {r['rounds_per_chunk']} "
                f"| {r['lower_s']:.2f} | {r['compile_s']:.2f} | {r['compile_cpu_s']:.2f} | {r['hlo_chars'] or 'n/a'} |")
  ratios = [f"{k} {v:.2f}; {result['rounds_ratio_cpu'][k]:.2f}" for k, v in result["rounds_ratio"].items()]
  rows.append("\ncompile time max/min over the rounds sweep (wall; CPU): " + ", ".join(ratios))
  return "\n".join(rows) + "\n"
