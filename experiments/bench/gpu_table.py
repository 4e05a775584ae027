r"""Suite ``gpu_table``: the accelerator table, one command.

  python -m experiments.benchmark --suite=gpu_table --output_dir=runs/gpu_table

Rows (``gpu_table_algorithms``, :data:`ALGORITHMS`; default all of them):

* ``fedavg``, ``fedzo_materialised`` (FedZO with ``direction_block`` 0: each client's
  b2 directions drawn as one (b2, d) array), ``fedzo_streamed`` (FedZO with the accelerator
  default ``direction_block``, :data:`fedsim.estimators.finite_difference.DIRECTION_BLOCK` = 4
  directions drawn where they are used; BUILD.md "FedZO directions"), ``decomfl``, ``hiso``: at each
  N of ``gpu_table_clients`` (default 10^3, 10^4, 10^5, 10^6) on the digits softmax with full
  participation (the vmap suite's workloads and hyperparameters, :mod:`experiments.bench.vmap`).
  Their per-client state is a d = 650 model (DeComFL / HiSo: scalars around one shared model), so
  10^6 clients fit one device.
* ``ffgb``: one row at N = ``ffgb_clients`` (56) with ``ffgb_vmap_oracle_steps`` (100) Adam steps
  of the mlp oracle: the vmap suite's measurement (:func:`experiments.bench.vmap.benchmark_ffgb_loop`).
  Its clients are a homo_ratio partition of digits' 1,437 training images (Shen et al. 2022's
  setting), so N is bounded by the data, not the device: at 10^4 clients most would hold no image.
* ``fzoos``: one row at (N, M) = ``fzoos_vmap`` (50 clients, M = 1,000 random features; d = 300
  quadratic of Fig. 1, float64, T = ``fzoos_steps``): the vmap suite's measurement
  (:func:`experiments.bench.vmap.benchmark_fzoos_loop`). Fig. 1 has N = 5 by design, and each
  client carries its own GP history and RFF fit: the round compiled to 6.3 GiB at N = 500, M = 1,000
  on the CPU (BUILD.md, ``fzoos`` suite), about 13 MiB per client, so 10^4 clients would need
  ~126 GiB by that (linear) measure: beyond an H100's ~78 GiB and most of an H200's ~139 GiB.

Columns:

* **client steps per second** of the vmapped engine (N x local steps / seconds
  per round; one-round chunks from N = 10^5 on; FFGB: learner trainings per second);
* **peak device memory**: the compiled round's footprint (arguments + temporaries
  + outputs - aliased, ``memory_analysis``) and, where the device reports it,
  the process's peak bytes in use so far (the rows run in increasing N, so it is
  the peak of the largest run so far);
* **roofline**: the float32 matmul FLOP/s (8192^2 unless ``--matmul_size``; at
  JAX's default precision: TF32 on NVIDIA tensor cores) and the memory
  bandwidth of this device (a 2 GiB array unless ``--bandwidth_bytes``),
  measured in the same run after the digits-softmax rows (:mod:`experiments.bench.roofline`),
  the round's analytic FLOPs and bytes (``roofline.round_counts``), the binding roof
  and the fraction of it reached; FedZO also against the raw
  ``jax.random.normal`` rate (its direction generator). FFGB and FZooS have no
  roofline cells (:data:`NO_ROOFLINE` says why);
* **vmapped vs one client at a time**: the same client update jitted for one
  client and looped over ``gpu_table_sequential`` clients (the vmap suite's
  baselines), as a ratio of client steps per second.

N above ``gpu_table_max_block`` (default 10^5) runs in client blocks of that many
clients (``client_block``, fedsim.core.client_map): one vmap over 10^6 materialised FedZO
clients would hold 10^6 x b2 x d = 52 GB of directions per step. DeComFL / HiSo
vmap their clients directly. A configuration that fails (e.g. out of device
memory) is recorded with its error and the table goes on.

Order: the digits-softmax rows in increasing N, then the two roofs (so a row's device peak is
not the roofline's own arrays), then FFGB and FZooS, whose time on an accelerator has not been
measured: a run cut short there keeps every roofed row.

On CPU the same command runs (slowly); ``--quick`` shrinks it to N = 4, 16 (FFGB N = 4, FZooS
N = 2, d = 8, M = 64) for the test suite, so the command cannot rot while no accelerator is at hand.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable

from experiments.bench.util import Settings, make_benchmark_task, mib

TITLE = "accelerator table: client steps/s, peak memory, roofline, vmapped vs loop"
SCALABLE = ("fedavg", "fedzo_materialised", "fedzo_streamed", "decomfl", "hiso")
"""Rows run at every N of ``gpu_table_clients``."""
OWN_N = ("ffgb", "fzoos")
"""Rows run once at their own N (``ffgb_clients``, ``fzoos_vmap``), in this order, after the roofs."""
ALGORITHMS = SCALABLE + OWN_N
NO_ROOFLINE = {
    "ffgb": "not counted: the round is N K mlp trainings by Adam plus value-cache updates over every "
            "client's data; roofline.round_counts counts the digits softmax rounds only",
    "fzoos": "not counted: a float64 round (the roofs are float32 / TF32) of Cholesky GP fits, top-k "
             "windows and RFF fits whose cost grows with the history written so far",
}
"""Why a row has no roofline cells."""


def direction_block(label: str) -> int | None:
  """FedZO's ``direction_block`` of a row label (None: not a FedZO row): 0 for ``fedzo_materialised``,
  the accelerator default (``default_direction_block()``, or ``DIRECTION_BLOCK`` on CPU, where the
  default is 0) for ``fedzo_streamed``."""
  from fedsim.estimators.finite_difference import DIRECTION_BLOCK, default_direction_block
  return {"fedzo_materialised": 0, "fedzo_streamed": default_direction_block() or DIRECTION_BLOCK}.get(label)


def _row(label: str, rec: dict, client_block: int) -> dict:
  """The table's fields of a vmap-suite record (:func:`experiments.bench.vmap._record`)."""
  mem = rec["memory"]
  return {"algorithm": label, "num_clients": rec["num_clients"], "client_block": client_block,
          "seconds_per_round": rec["seconds_per_round"], "client_steps_per_s": rec["vmapped_steps_per_s"],
          "rate_unit": rec["rate_unit"],
          "compiled_bytes": mem["total_bytes"], "device_peak_bytes": mem["device_peak_bytes"],
          "peak_rss_bytes": mem["peak_rss_bytes"], "compile_s": rec["compile_s"],
          "sequential_clients_timed": rec["sequential_clients_timed"],
          "sequential_steps_per_s": rec["sequential_steps_per_s"], "speedup_vs_loop": rec["speedup"],
          "state_finite": rec["state_finite"], "cpu_per_wall": rec["vmapped_cpu_per_wall"]}


def _log_row(row: dict, log: Callable[[str], None]) -> None:
  log(f"[gpu_table {row['algorithm']} N={row['num_clients']}] {row['client_steps_per_s']:,.0f} "
      f"{row['rate_unit']}/s; compiled {mib(row['compiled_bytes'])} MiB; {row['speedup_vs_loop']:.1f}x the "
      "one-client loop")


def measure(name: str, n: int, settings: Settings, log: Callable[[str], None]) -> dict:
  """One digits-softmax row (a :data:`SCALABLE` label): the vmap suite's record of (name, N) with the
  round's analytic FLOPs and bytes."""
  from experiments.bench import roofline, vmap

  s = dataclasses.replace(settings, sequential_clients=settings.gpu_table_sequential,
                          client_block=0 if n <= settings.gpu_table_max_block else settings.gpu_table_max_block,
                          rounds_per_chunk=1 if n >= 100000 else settings.rounds_per_chunk)
  block = direction_block(name)
  algo = "fedzo" if block is not None else name
  rec = (vmap.benchmark_hiso(algo, n, s, log) if algo in ("decomfl", "hiso")
         else vmap.benchmark_one(algo, n, s, log, None if block is None else {"direction_block": block}))
  d_in, c = roofline.softmax_dims(make_benchmark_task(1, settings.samples_per_client, settings.seed))
  # The hyperparameters the record ran with (not a second build).
  counts = roofline.round_counts(algo, types.SimpleNamespace(**rec["hparams"]), n, d_in, c)
  row = {**_row(name, rec, s.client_block), **counts}
  if block is not None:
    row["direction_block"] = rec["hparams"]["direction_block"]
  if rec.get("directions"):
    row["generator_fraction"] = rec["directions"]["ratio"]
  _log_row(row, log)
  return row


def own_clients(name: str, settings: Settings) -> int:
  """N of an :data:`OWN_N` row: ``ffgb_clients`` or the N of ``fzoos_vmap``."""
  return settings.ffgb_clients if name == "ffgb" else settings.fzoos_vmap[0]


def measure_own(name: str, settings: Settings, log: Callable[[str], None]) -> dict:
  """One FFGB or FZooS row: the vmap suite's record (one client at a time over ``gpu_table_sequential``
  clients at most), with the reason it has no roofline cells (:data:`NO_ROOFLINE`)."""
  from experiments.bench import vmap
  s = dataclasses.replace(settings, sequential_clients=settings.gpu_table_sequential)
  if name == "ffgb":
    rec = vmap.benchmark_ffgb_loop(s, log)
    extra = {"oracle_steps": rec["oracle_steps"], "oracle_batch": rec["oracle_batch"]}
  elif name == "fzoos":
    rec = vmap.benchmark_fzoos_loop(s, log)
    extra = {"num_rff": rec["num_rff"], "dim": rec["dim"], "dtype": rec["dtype"]}
  else:
    raise ValueError(f"no own-N gpu_table row {name!r}; accepted: {', '.join(OWN_N)}")
  row = {**_row(name, rec, 0), **extra, "roofline": NO_ROOFLINE[name]}
  _log_row(row, log)
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

  The digits-softmax rows (:data:`SCALABLE` labels of ``gpu_table_algorithms``) run first, in
  increasing N, and the two roofs are measured after them, so that the device's peak bytes in use
  (a process-wide high-water mark) at each row holds the rows so far and not the roofline's own
  arrays; then the :data:`OWN_N` rows (FFGB, FZooS). ``on_update`` is called with the partial
  result (``peak`` and ``bandwidth`` None until measured) after every row and once the roofs are
  applied, so a run stopped part-way (a device lease running out) keeps the rows it measured.
  """
  from experiments.bench import roofline
  records: list = []
  peak = bw = None

  def attempt(name, n, fn):
    try:
      records.append(fn())
    except Exception as e:  # pylint: disable=broad-except  # e.g. out of device memory: keep the rest
      msg = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
      log(f"[gpu_table {name} N={n}] failed: {msg}")
      records.append({"algorithm": name, "num_clients": n, "error": msg})
    if on_update:
      on_update({"peak": peak, "bandwidth": bw, "records": list(records)})

  for n in sorted(settings.gpu_table_clients):
    for name in (a for a in settings.gpu_table_algorithms if a in SCALABLE):
      attempt(name, n, lambda name=name, n=n: measure(name, n, settings, log))
  size, nbytes = settings.roof_sizes("gpu_table")
  peak = roofline.matmul_peak(size, settings.repeats, settings.min_time)
  bw = roofline.bandwidth_peak(nbytes, settings.repeats, settings.min_time)
  log(f"[gpu_table] float32 {peak['n']}^2 matmul {peak['flops_per_s'] / 1e12:,.3f} TFLOP/s; memory bandwidth "
      f"{bw['bytes_per_s'] / 1e9:,.1f} GB/s")
  records[:] = [add_roof(r, peak, bw, log) if "flops_per_round" in r else r for r in records]
  if on_update:
    on_update({"peak": peak, "bandwidth": bw, "records": list(records)})
  for name in (a for a in OWN_N if a in settings.gpu_table_algorithms):
    attempt(name, own_clients(name, settings), lambda name=name: measure_own(name, settings, log))
  return {"peak": peak, "bandwidth": bw, "records": records}


def label(r: dict) -> str:
  """A row's algorithm cell: the label with its FedZO direction block, FFGB oracle or FZooS M."""
  if "direction_block" in r:
    return f"{r['algorithm']} (direction_block {r['direction_block']})"
  if r["algorithm"] == "ffgb" and "oracle_steps" in r:
    return f"ffgb (mlp, {r['oracle_steps']} Adam steps x {r['oracle_batch']})"
  if r["algorithm"] == "fzoos" and "num_rff" in r:
    return f"fzoos (d = {r['dim']}, M = {r['num_rff']}, {r['dtype']})"
  return r["algorithm"]


def markdown(result: dict) -> str:
  """The table: one row per (algorithm, N); the reasons for rows without roofline cells below it."""
  p, bw = result["peak"], result["bandwidth"]
  if p is None or bw is None:  # a partial result: the rows so far, before the roofs are measured
    p, bw = {"n": 0, "flops_per_s": float("nan")}, {"bytes_per_s": float("nan")}
  rows = [f"float32 {p['n']}x{p['n']} matmul: {p['flops_per_s'] / 1e12:,.3f} TFLOP/s; memory bandwidth "
          f"{bw['bytes_per_s'] / 1e9:,.1f} GB/s (ridge {p['flops_per_s'] / bw['bytes_per_s']:.1f} FLOP/B)\n",
          "| algorithm | N | client steps/s | s/round | peak memory MiB (compiled; device peak) | bound "
          "| % of binding roof | vmapped vs loop (clients looped) |", "|" + "---|" * 8]
  notes = {}
  for r in result["records"]:
    if "error" in r:
      rows.append(f"| {r['algorithm']} | {r['num_clients']} | failed: {r['error']} | | | | | |")
      continue
    dev = f"; {mib(r['device_peak_bytes'])}" if r.get("device_peak_bytes") else ""
    gen = (f"; generator {100 * r['generator_fraction']:.0f}%" if r.get("generator_fraction") is not None
           else "")
    unit = "" if r.get("rate_unit", "client steps") == "client steps" else f" {r['rate_unit']}/s"
    if "roofline" in r:
      notes[r["algorithm"]] = r["roofline"]
      roof = f"| not counted ({r['algorithm']}, below) | "
    elif "bound" not in r:
      roof = "| not measured yet | "
    else:
      roof = f"| {r['bound']} ({r['arithmetic_intensity']:.1f} FLOP/B) | {100 * r['roof_fraction']:.1f}{gen} "
    rows.append(f"| {label(r)} | {r['num_clients']:,} | {r['client_steps_per_s']:,.0f}{unit} "
                f"| {r['seconds_per_round']:.4g} | {mib(r['compiled_bytes'])}{dev} {roof}"
                f"| {r['speedup_vs_loop']:.1f}x ({r['sequential_clients_timed']}) |")
  rows += [""] + [f"- {name}: roofline {why}" for name, why in notes.items()]
  return "\n".join(rows) + "\n"
