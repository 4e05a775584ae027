r"""Suite ``fd_memory``: one FedZO round with materialised vs streamed directions.

  python -m experiments.benchmark --suite=fd_memory                       # N = 10^3, 10^5
  python -m experiments.benchmark --suite=fd_memory --fd_memory_blocks=0,1,2,4 --fd_memory_client_block=256

FedZO with its paper defaults (Fang et al. 2022, §V: b1 = 25, b2 = 20, H = 5, sphere directions) on digits
softmax (d = 650), full participation, each client holding ``samples_per_client`` samples drawn with
replacement (:func:`experiments.bench.util.make_benchmark_task`). For each N of ``fd_memory_clients``
and each ``direction_block`` B of ``fd_memory_blocks`` (FedZOConfig.direction_block: 0 = the b2
directions drawn as one (b2, d) array per client, today's path and the CPU default; B >= 1 = streamed,
blocks of B directions drawn where they are used, fedsim.estimators.finite_difference), a one-round
chunk is compiled with ``client_block`` = ``fd_memory_client_block`` (default 0: one vmap over all N
clients, the accelerator default, where the materialised path holds (N, b2, d) arrays; the CPU
default, 256, bounds them to (256, b2, d) either way) and its ``memory_analysis()`` recorded:
temporaries, arguments, the footprint, ``one_array_bytes`` = N b2 d 4 (one (N, b2, d) float32 array)
and ``temp_vs_materialised`` (temporaries over those of B = 0 at the same N). Rows with N at most
``fd_memory_time_clients`` are also run: round 0 once per B from the same initial state, giving
``max_rel_diff`` = max |x_B - x_first| / max |x_first| (x_first: the first B's, 0 by default;
streamed equals materialised up to rounding, not bit for bit), then the B of one N timed side by
side (``time_interleaved``, seconds per round). Larger N are compiled only (at N = 10^5 the
materialised round needs about 20 GiB of temporaries).
"""

from __future__ import annotations

from collections.abc import Callable

from experiments.bench.util import Settings, compile_chunk, make_benchmark_task, mib, time_interleaved

TITLE = "FedZO round memory: materialised vs streamed directions"


def run(settings: Settings, log: Callable[[str], None] = print) -> dict:
  """Runs the suite; returns ``{"records": [...]}``, one per (N, direction_block)."""
  import numpy as np

  from experiments.bench import vmap
  from fedsim import algorithms
  records = []
  for n in sorted(settings.fd_memory_clients):
    task = make_benchmark_task(n, settings.samples_per_client, settings.seed)
    timed = n <= settings.fd_memory_time_clients
    rows, runs, xs = [], {}, {}
    for block in settings.fd_memory_blocks:
      hp = dict(vmap.benchmark_hparams("fedzo"), clients_per_round=n, client_block=settings.fd_memory_client_block,
                direction_block=block)
      alg = algorithms.build("fedzo", task, **hp)
      run_chunk, info = compile_chunk(alg, task, 1, settings.seed)
      b2, d = alg.hparams.fd_directions, task.dim
      rows.append({"num_clients": n, "direction_block": block, "client_block": settings.fd_memory_client_block,
                   "fd_directions": b2, "dim": d, "memory": info["memory"], "one_array_bytes": n * b2 * d * 4,
                   "compile_s": info["compile_s"], "seconds_per_round": None, "cpu_per_wall": None,
                   "max_rel_diff": None})
      if timed:  # round 0 from the same initial state: the x compared across blocks
        run_chunk()
        xs[block] = np.asarray(run_chunk.state().x, np.float64)
        runs[block] = run_chunk
      del alg, run_chunk
    if timed:
      t = time_interleaved({b: (r, True) for b, r in runs.items()}, settings.repeats, settings.min_time)
      ref = xs[settings.fd_memory_blocks[0]]
      for row in rows:
        b = row["direction_block"]
        row.update(seconds_per_round=t[b]["best"], cpu_per_wall=t[b]["cpu_per_wall"],
                   seconds_per_round_all=t[b]["seconds"],
                   max_rel_diff=float(np.max(np.abs(xs[b] - ref)) / max(float(np.max(np.abs(ref))), 1e-300)))
    base = {r["direction_block"]: r["memory"]["temp_bytes"] for r in rows}.get(0)
    for row in rows:
      temp = row["memory"]["temp_bytes"]
      row["temp_vs_materialised"] = temp / base if base and temp is not None else None
      secs = "" if row["seconds_per_round"] is None else f"; {row['seconds_per_round']:.4g} s/round"
      log(f"[fd_memory N={n} direction_block={row['direction_block']}] compiled temp {mib(temp)} MiB "
          f"(one (N, b2, d) array: {mib(row['one_array_bytes'])} MiB){secs}")
    records += rows
    del task, runs
  return {"task": "digits softmax (d = 650), FedZO paper defaults", "records": records}


def markdown(result: dict) -> str:
  """The suite's markdown table."""
  rows = ["| N | client_block | direction_block | compiled temp MiB | temp / materialised | temp+arg+out MiB "
          "| one (N, b2, d) array MiB | s/round | cpu/wall | max rel diff vs first |", "|" + "---|" * 10]
  for r in result["records"]:
    m = r["memory"]
    ratio = "" if r["temp_vs_materialised"] is None else f"{r['temp_vs_materialised']:.3f}"
    secs = "" if r["seconds_per_round"] is None else f"{r['seconds_per_round']:.4g}"
    cpw = "" if r["cpu_per_wall"] is None else f"{r['cpu_per_wall']:.2f}"
    diff = "" if r["max_rel_diff"] is None else f"{r['max_rel_diff']:.2g}"
    rows.append(f"| {r['num_clients']} | {r['client_block']} | {r['direction_block']} | {mib(m['temp_bytes'])} "
                f"| {ratio} | {mib(m['total_bytes'])} | {mib(r['one_array_bytes'])} | {secs} | {cpw} | {diff} |")
  return "\n".join(rows) + "\n"
