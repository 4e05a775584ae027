r"""Suite ``gpu_table``: the accelerator table, one command.

  python -m experiments.benchmark --suite=gpu_table --output_dir=runs/gpu_table

For each algorithm of ``gpu_table_algorithms`` (default FedAvg, FedZO, DeComFL,
HiSo) at each N of ``gpu_table_clients`` (default 10^3, 10^4, 10^5, 10^6), on
the digits softmax with full participation (the vmap suite's workloads and
hyperparameters, :mod:`experiments.bench.vmap`):

* **client steps per second** of the vmapped engine (N x local steps / seconds
  per round; one-round chunks from N = 10^5 on);
* **peak device memory**: the compiled round's footprint (arguments + temporaries
  + outputs - aliased, ``memory_analysis``) and, where the device reports it,
  the process's peak bytes in use so far (N runs in increasing order, so it is
  the peak of the largest run so far);
* **roofline**: the float32 matmul FLOP/s (8192^2 unless ``--matmul_size``; at
  JAX's default precision: TF32 on NVIDIA tensor cores) and the memory
  bandwidth of this device (a 2 GiB array unless ``--bandwidth_bytes``),
  measured in the same run after the rows (:mod:`experiments.bench.roofline`), the
  round's analytic FLOPs and bytes (``roofline.round_counts``), the binding roof
  and the fraction of it reached; FedZO also against the raw
  ``jax.random.normal`` rate (its direction generator);
* **vmapped vs one client at a time**: the same client update jitted for one
  client and looped over ``gpu_table_sequential`` clients (the vmap suite's
  baselines), as a ratio of client steps per second.

N above ``gpu_table_max_block`` (default 10^5) runs in client blocks of that many
clients (``client_block``, fedsim.core.client_map): one vmap over 10^6 FedZO
clients would hold 10^6 x b2 x d = 52 GB of directions per step. DeComFL / HiSo
vmap their clients directly. A configuration that fails (e.g. out of device
memory) is recorded with its error and the table goes on.

On CPU the same command runs (slowly); ``--quick`` shrinks it to N = 4, 16 for
the test suite, so the command cannot rot while no accelerator is at hand.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable

from experiments.bench.util import Settings, make_benchmark_task, mib

TITLE = "accelerator table: client steps/s, peak memory, roofline, vmapped vs loop"


def measure(name: str, n: int, settings: Settings, log: Callable[[str], None]) -> dict:
  """One row: the vmap suite's record of (name, N) with the round's analytic FLOPs and bytes."""
  from experiments.bench import roofline, vmap

  s = dataclasses.replace(settings, sequential_clients=settings.gpu_table_sequential,
                          client_block=0 if n <= settings.gpu_table_max_block else settings.gpu_table_max_block,
                          rounds_per_chunk=1 if n >= 100000 else settings.rounds_per_chunk)
  rec = (vmap.benchmark_hiso(name, n, s, log) if name in ("decomfl", "hiso")
         else vmap.benchmark_one(name, n, s, log))
  d_in, c = roofline.softmax_dims(make_benchmark_task(1, settings.samples_per_client, settings.seed))
  # The hyperparameters the record ran with (not a second build).
  counts = roofline.round_counts(name, types.SimpleNamespace(**rec["hparams"]), n, d_in, c)
  mem = rec["memory"]
  row = {"algorithm": name, "num_clients": n, "client_block": s.client_block,
         "seconds_per_round": rec["seconds_per_round"], "client_steps_per_s": rec["vmapped_steps_per_s"],
         "compiled_bytes": mem["total_bytes"], "device_peak_bytes": mem["device_peak_bytes"],
         "peak_rss_bytes": mem["peak_rss_bytes"], "compile_s": rec["compile_s"],
         "sequential_clients_timed": rec["sequential_clients_timed"],
         "sequential_steps_per_s": rec["sequential_steps_per_s"], "speedup_vs_loop": rec["speedup"],
         "state_finite": rec["state_finite"], "cpu_per_wall": rec["vmapped_cpu_per_wall"], **counts}
  if rec.get("directions"):
    row["generator_fraction"] = rec["directions"]["ratio"]
  log(f"[gpu_table {name} N={n}] {row['client_steps_per_s']:,.0f} client steps/s; compiled "
      f"{mib(row['compiled_bytes'])} MiB; {row['speedup_vs_loop']:.1f}x the one-client loop")
  return row


def add_roof(row: dict, peak: dict, bw: dict, log: Callable[[str], None]) -> dict:
  """``row`` with the binding roof (FLOP/s or bytes/s of this device) and the fraction of it reached."""
  from experiments.bench import roofline
  roof = roofline.binding_roof(row["flops_per_round"], row["bytes_per_round"], row["seconds_per_round"],
                               peak["flops_per_s"], bw["bytes_per_s"])
  log(f"[gpu_table {row['algorithm']} N={row['num_clients']}] {roof['bound']}-bound, "
      f"{100 * roof['roof_fraction']:.1f}% of the roof")
  return {**row, **roof}


def run(settings: Settings, log: Callable[[str], None] = print,
        on_update: Callable[[dict], None] | None = None) -> dict:
  """Runs the suite; returns ``{"peak", "bandwidth", "records"}`` (failed rows carry ``error``).

  The rows run first, in increasing N, and the two roofs are measured after
  them, so that the device's peak bytes in use (a process-wide high-water mark)
  at each row holds the rows so far and not the roofline's own arrays.
  ``on_update`` is called with the partial result (``peak`` and ``bandwidth``
  None until measured) after every row, so a run stopped part-way (a device
  lease running out) keeps the rows it measured.
  """
  from experiments.bench import roofline
  records: list = []
  for n in sorted(settings.gpu_table_clients):
    for name in settings.gpu_table_algorithms:
      try:
        records.append(measure(name, n, settings, log))
      except Exception as e:  # pylint: disable=broad-except  # e.g. out of device memory: keep the rest
        msg = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
        log(f"[gpu_table {name} N={n}] failed: {msg}")
        records.append({"algorithm": name, "num_clients": n, "error": msg})
      if on_update:
        on_update({"peak": None, "bandwidth": None, "records": list(records)})
  size, nbytes = settings.roof_sizes("gpu_table")
  peak = roofline.matmul_peak(size, settings.repeats, settings.min_time)
  bw = roofline.bandwidth_peak(nbytes, settings.repeats, settings.min_time)
  log(f"[gpu_table] float32 {peak['n']}^2 matmul {peak['flops_per_s'] / 1e12:,.3f} TFLOP/s; memory bandwidth "
      f"{bw['bytes_per_s'] / 1e9:,.1f} GB/s")
  records = [r if "error" in r else add_roof(r, peak, bw, log) for r in records]
  return {"peak": peak, "bandwidth": bw, "records": records}


def markdown(result: dict) -> str:
  """The table: one row per (algorithm, N)."""
  p, bw = result["peak"], result["bandwidth"]
  if p is None or bw is None:  # a partial result: the rows so far, before the roofs are measured
    p, bw = {"n": 0, "flops_per_s": float("nan")}, {"bytes_per_s": float("nan")}
  rows = [f"float32 {p['n']}x{p['n']} matmul: {p['flops_per_s'] / 1e12:,.3f} TFLOP/s; memory bandwidth "
          f"{bw['bytes_per_s'] / 1e9:,.1f} GB/s (ridge {p['flops_per_s'] / bw['bytes_per_s']:.1f} FLOP/B)\n",
          "| algorithm | N | client steps/s | s/round | peak memory MiB (compiled; device peak) | bound "
          "| % of binding roof | vmapped vs loop (clients looped) |", "|" + "---|" * 8]
  for r in result["records"]:
    if "error" in r:
      rows.append(f"| {r['algorithm']} | {r['num_clients']} | failed: {r['error']} | | | | | |")
      continue
    dev = f"; {mib(r['device_peak_bytes'])}" if r.get("device_peak_bytes") else ""
    gen = (f"; generator {100 * r['generator_fraction']:.0f}%" if r.get("generator_fraction") is not None
           else "")
    if "bound" not in r:
      r = {**r, "bound": "not measured yet", "arithmetic_intensity": float("nan"), "roof_fraction": float("nan")}
    rows.append(f"| {r['algorithm']} | {r['num_clients']:,} | {r['client_steps_per_s']:,.0f} "
                f"| {r['seconds_per_round']:.4g} | {mib(r['compiled_bytes'])}{dev} "
                f"| {r['bound']} ({r['arithmetic_intensity']:.1f} FLOP/B) "
                f"| {100 * r['roof_fraction']:.1f}{gen} "
                f"| {r['speedup_vs_loop']:.1f}x ({r['sequential_clients_timed']}) |")
  return "\n".join(rows) + "\n"
