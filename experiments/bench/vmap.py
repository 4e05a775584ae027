r"""Suite ``vmap``: the vmapped round engine against the same client update run one
client at a time (a jitted per-client function called in a Python loop).

Algorithms and what "one client at a time" runs (the per-client work is the
algorithm's own code in every case):

* ``fedavg`` (and FedOpt), ``fedzo`` (delta-averaging family,
  ``fedsim.algorithms.local``): ``make_local_update`` with the algorithm's
  oracle and local optimizer, jitted once for one client, called for clients
  0..S-1 (S = min(N, ``sequential_clients``)) with their own data row and round
  key; the deltas are summed on the device, averaged and applied. FedAvg runs
  5 local SGD steps of batch 20 at lr 0.1; FedZO its paper defaults (b1 = 25,
  b2 = 20, H = 5, sphere directions). ``speedup_vs_inloop`` compares with a
  naive loop that slices each client's row and derives its key inside the loop.
  For FedZO the engine's direction rate (N H b2 d normals per round / s) is
  also compared with the raw ``jax.random.normal`` rate on the same count.
* ``decomfl``, ``hiso`` (Li et al. 2025): ``hiso_parts(...).client_scalars`` (one
  client's tau local steps, Alg. 2b) jitted and looped; the scalars are summed
  and the round applied once with ``apply_round`` (Alg. 2 lines 13-16). Defaults
  of the configs (P = 5, tau = 1, b = 32).
* ``fzoos`` (Shu et al. 2023, Alg. 2): its per-client update is not exposed, so the
  baseline runs FZooS's own round on a task holding that single client's data
  (N = 1): one jitted round (client's T local steps, its active queries and
  its RFF fit: exactly one client's work of the N-client round, plus an
  average over one client) called for each client with its own state.
  Quadratic task (d = ``fzoos_dim``), N and M from ``fzoos_vmap`` (default
  N = 50, M = 1000: N = 1000 is infeasible on a 24 GiB, 2-core machine: the
  vmapped server-side posterior-trace intermediates alone are N x 200 x 150^2
  float64 = 360 MB per client, and N = 50 at M = 10,000 already takes 23.5 CPU s
  per round; see the ``fzoos`` suite for M = 10,000).
* ``ffgb`` (Shen et al. 2022, Alg. 2): ``make_client_round`` (one client's K local
  steps, each training a fresh mlp weak learner by Adam) jitted and looped over
  the clients; the vmapped side is the full engine round (it also folds the
  learners into the value caches, so the ratio slightly favours the loop).
  Digits, homo_ratio partition s = 0.1, N = ``ffgb_clients`` (56; digits has
  1,437 training images, so N = 1000 is not a meaningful partition),
  K = ``ffgb_local_steps``, ``ffgb_vmap_oracle_steps`` Adam steps (the ``ffgb``
  suite runs the paper's 1000).

Rates are client local steps per second (FFGB: learner trainings per second),
vmapped = N * steps / seconds_per_round, sequential = S * steps / seconds of
the loop over S clients; ``speedup`` = their ratio (median over side-by-side
repeats). The fedavg/fedzo client data is not a partition: each client gets
``samples_per_client`` digits samples drawn with replacement
(:func:`experiments.bench.util.make_benchmark_task`).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable, Sequence

from experiments.bench.util import (
  Settings,
  compile_chunk,
  jsonable,
  make_benchmark_task,
  mega,
  mib,
  paired_median,
  process_memory,
  rate,
  state_finite,
  time_interleaved,
)

TITLE = "vmapped engine vs one client at a time"
# Per-algorithm hyperparameters of the benchmark (FedAvgConfig algorithms);
# FedZO keeps its paper defaults.
FIRST_ORDER_HPARAMS = {"lr": 0.1, "local_steps": 5, "batch_size": 20}
MAX_PIECE = 1 << 25     # largest single jax.random.normal call (numbers) for the raw rate
DELTA_AVERAGING = ("fedavg", "fedadam", "fedyogi", "fedadagrad", "fedzo")
LOOPED = ("decomfl", "hiso", "fzoos", "ffgb")
ALGORITHMS = DELTA_AVERAGING + LOOPED


def benchmark_hparams(name: str) -> dict:
  """The hyperparameters ``name`` is benchmarked with (full participation is added later)."""
  from fedsim import algorithms
  from fedsim.algorithms.fedavg import FedAvgConfig
  cls = algorithms.REGISTRY[name][0]
  cfg = algorithms.default_config(name)
  if cls is FedAvgConfig:
    cfg.update(FIRST_ORDER_HPARAMS)
  return cfg


def _client_update_parts(cfg):
  """(oracle, local optimizer, is_zeroth_order) of an algorithm's config."""
  from fedsim.algorithms.fedavg import FedAvgConfig, first_order_oracle
  from fedsim.algorithms.fedzo import FedZOConfig, zo_oracle
  from fedsim.algorithms.local import local_optimizer
  if isinstance(cfg, FedZOConfig):
    return (zo_oracle(cfg.direction, cfg.fd_directions, cfg.smoothing, cfg.direction_block),
            local_optimizer(cfg.local_optimizer, cfg.lr), True)
  if isinstance(cfg, FedAvgConfig):
    return first_order_oracle, local_optimizer("sgd", cfg.lr), False
  raise ValueError(f"no sequential baseline for config {type(cfg).__name__}")


def prepare_sequential(alg, task, settings: Settings):
  """The sequential baseline: a Python loop over clients of a per-client jitted update.

  Clients 0..S-1 (S = min(N, sequential_clients)) run ``make_local_update``
  (the algorithm's oracle and local optimizer, jitted once, one client per
  call) from the initial point with their own data row and round key; the
  deltas are summed on the device, averaged and applied, then the result is
  blocked on. ``one_round`` splits rows and keys beforehand (what a sequential
  simulator holds: one dataset and one key per client; the baseline's best
  case); ``one_round_inloop`` slices each client's row out of the stacked
  arrays and derives its key inside the loop (a naive port of the vmapped
  layout: three more dispatches per client).

  Returns:
    (one_round, one_round_inloop, S).
  """
  import jax
  import jax.numpy as jnp

  from fedsim.algorithms.local import flat_problem, make_local_update
  from fedsim.core import rng

  cfg = alg.hparams
  oracle, opt, _ = _client_update_parts(cfg)
  key = jax.random.key(settings.seed)
  x0, loss_flat = flat_problem(task, rng.stream(key, "init"))
  update = jax.jit(make_local_update(loss_flat, task, oracle, opt, cfg.local_steps, cfg.batch_size))
  s = min(task.num_clients, settings.sequential_clients)
  rows = [jax.tree_util.tree_map(lambda a, i=i: a[i], task.client_data) for i in range(s)]
  _, k_clients, _ = rng.round_subkeys(rng.round_key(rng.stream(key, "rounds"), 0))
  keys = [rng.client_key(k_clients, i) for i in range(s)]
  jax.block_until_ready((rows, keys))

  def one_round():
    total = jnp.zeros_like(x0)
    for row, k in zip(rows, keys):
      total = total + update(x0, row, k)
    jax.block_until_ready(x0 + total / s)

  def one_round_inloop():
    total = jnp.zeros_like(x0)
    for i in range(s):
      row = jax.tree_util.tree_map(lambda a, i=i: a[i], task.client_data)
      total = total + update(x0, row, rng.client_key(k_clients, i))
    jax.block_until_ready(x0 + total / s)

  return one_round, one_round_inloop, s


def prepare_normals(count: int, dim: int, b2: int, law: str, settings: Settings,
                    steps_per_call: int | None = None):
  """Raw ``jax.random.normal`` and direction-law workloads of ``count`` numbers of width ``dim``.

  The count (capped by ``settings.max_normals``) is generated as ``pieces``
  jitted calls of one shape, each from its own key: ``steps_per_call`` client
  steps' worth (b2 * dim numbers each; the engine draws one local step of all
  N clients at once, so N is the natural value), at most 2**25 numbers, so
  large counts neither exhaust memory nor compile more than once. The raw
  workload draws (rows, dim) normals per call; the law workload draws ``b2``
  directions per key with ``fedsim.estimators.directions`` under ``vmap`` over
  keys, as one client step of the engine does. Both are compiled (and run
  once) here.

  Returns:
    (raw, law, info): two blocking workloads and ``count`` (numbers one call
    of either draws, the requested count rounded up to whole pieces) and
    ``pieces``.
  """
  import jax

  from fedsim.estimators import directions

  if settings.max_normals is not None:
    count = min(count, settings.max_normals)
  steps_total = max(1, math.ceil(count / (b2 * dim)))           # client steps' worth
  steps_piece = max(1, min(steps_total, steps_per_call or steps_total, MAX_PIECE // (b2 * dim)))
  pieces = math.ceil(steps_total / steps_piece)
  root = jax.random.key(settings.seed + 1)
  raw = jax.jit(lambda k, i: jax.random.normal(jax.random.fold_in(k, i), (steps_piece * b2, dim)))
  law_fn = jax.jit(lambda k, i: jax.vmap(lambda kk: directions(kk, b2, dim, law))(
      jax.random.split(jax.random.fold_in(k, i), steps_piece)))

  def workload(fn):
    jax.block_until_ready(fn(root, 0))  # compiles outside the timing

    def go():
      for i in range(pieces):
        out = fn(root, i)
      jax.block_until_ready(out)
    return go

  return workload(raw), workload(law_fn), {"count": pieces * steps_piece * b2 * dim, "pieces": pieces}


# ----------------------------------------------------------------------------- records


def _record(name, n, s, steps, unit, dim, run_chunk, vinfo, timing, length, log, tag, note, extra=None):
  """The record of one (algorithm, N): the engine chunk against a loop over S of the N clients.

  Logs three lines (vmapped, one client at a time, memory).

  Args:
    steps: rate units per client per round (local steps; FFGB: learner trainings), named ``unit``.
    run_chunk, vinfo: the engine chunk of ``length`` rounds and its info (:func:`compile_chunk`).
    timing: :func:`time_interleaved` results: ``vmapped`` (the chunk), ``sequential`` (one pass
      of the loop over S clients) and optionally ``sequential_inloop`` (:func:`prepare_sequential`).
    extra: more fields of the record.
  """
  vt, st = timing["vmapped"], timing["sequential"]
  round_s = [t / length for t in vt["seconds"]]
  spr = min(round_s)
  vm_rate, sq_rate = n * steps / spr, s * steps / st["best"]
  vm_rates = [n * steps * length / t for t in vt["seconds"]]   # per repeat, side by side
  speedup = paired_median(vm_rates, [s * steps / t for t in st["seconds"]])
  mem = dict(vinfo["memory"], **process_memory())
  rec = {
      "algorithm": name, "num_clients": n, "dim": dim, "local_steps": steps, "rate_unit": unit,
      "rounds_per_chunk": length, "repeats": len(vt["seconds"]), "lower_s": vinfo["lower_s"],
      "compile_s": vinfo["compile_s"], "first_chunk_s": vt["warmup_s"],
      "seconds_per_round": spr, "seconds_per_round_median": statistics.median(round_s),
      "seconds_per_round_all": round_s, "chunks_per_repeat": vt["calls_per_repeat"],
      "cpu_seconds_per_round": min(vt["cpu_seconds"]) / length,
      "vmapped_cpu_per_wall": vt["cpu_per_wall"], "vmapped_steps_per_s": vm_rate,
      "state_finite": state_finite(run_chunk.state()),
      "sequential_clients_timed": s, "sequential_subset": s < n,
      "sequential_seconds_per_client": st["best"] / s,
      "sequential_seconds_per_client_median": st["median"] / s,
      "sequential_cpu_seconds_per_client": min(st["cpu_seconds"]) / s,
      "sequential_passes_per_repeat": st["calls_per_repeat"], "sequential_cpu_per_wall": st["cpu_per_wall"],
      "sequential_steps_per_s": sq_rate, "sequential_note": note,
      "speedup": speedup, "speedup_of_best": vm_rate / sq_rate,
      # The same ratio in CPU seconds of this process (less sensitive to other processes' load).
      "speedup_cpu": paired_median([n * steps * length / max(c, 1e-12) for c in vt["cpu_seconds"]],
                                   [s * steps / max(c, 1e-12) for c in st["cpu_seconds"]]),
      "memory": mem, "directions": None, **(extra or {}),
  }
  inloop = ""
  if "sequential_inloop" in timing:
    it = timing["sequential_inloop"]
    rec.update(sequential_inloop_seconds_per_client=it["best"] / s,
               sequential_inloop_steps_per_s=s * steps / it["best"],
               speedup_vs_inloop=paired_median(vm_rates, [s * steps / t for t in it["seconds"]]))
    inloop = (f" (slicing rows and keys in the loop: {it['best'] / s * 1e3:.3g} ms/client, "
              f"speedup {rec['speedup_vs_inloop']:.2f}x)")
  log(f"{tag} vmapped: {spr:.4g} s/round (median {rec['seconds_per_round_median']:.4g}), {vm_rate:,.1f} "
      f"{unit}/s; lower {vinfo['lower_s']:.2f} s, compile {vinfo['compile_s']:.2f} s; "
      f"cpu/wall {vt['cpu_per_wall']:.2f}")
  log(f"{tag} one client at a time ({s} of {n} clients timed): {st['best'] / s * 1e3:.4g} ms/client, "
      f"{sq_rate:,.1f} {unit}/s; speedup {speedup:.2f}x; cpu/wall {st['cpu_per_wall']:.2f}{inloop}")
  log(f"{tag} memory: compiled temp {mib(mem['temp_bytes'])} + args {mib(mem['argument_bytes'])} "
      f"+ out {mib(mem['output_bytes'])} MiB; peak RSS {mib(mem['peak_rss_bytes'])} MiB"
      + (f"; device peak {mib(mem['device_peak_bytes'])} MiB" if mem["device_peak_bytes"] else ""))
  return rec


def benchmark_one(name: str, num_clients: int, settings: Settings,
                  log: Callable[[str], None] = print, hparams: dict | None = None) -> dict:
  """Every measurement for one delta-averaging (algorithm, N); one ``log`` line per measurement.

  ``hparams``: config fields set on top of :func:`benchmark_hparams` (e.g. FedZO's ``direction_block``).

  The engine chunk, the sequential loops and (zeroth-order algorithms) the raw
  normal and direction-law workloads are timed in alternation
  (:func:`time_interleaved`). Rates use the best repeat of each; ``speedup``
  and the direction ``ratio`` are medians of the ratios of side-by-side
  repeats (``speedup_of_best`` and ``ratio_of_best`` divide the best rates).

  Returns:
    The JSON record (see the module docstring).
  """
  from fedsim import algorithms

  task = make_benchmark_task(num_clients, settings.samples_per_client, settings.seed)
  hp = benchmark_hparams(name)
  hp["clients_per_round"] = num_clients
  hp.update(hparams or {})
  if settings.client_block is not None:
    hp["client_block"] = settings.client_block
  alg = algorithms.build(name, task, **hp)
  cfg = alg.hparams
  _, _, zeroth_order = _client_update_parts(cfg)
  d, n, h, length = task.dim, num_clients, cfg.local_steps, settings.rounds_per_chunk

  run_chunk, vinfo = compile_chunk(alg, task, length, settings.seed)
  one_round, one_round_inloop, s = prepare_sequential(alg, task, settings)
  fns = {"vmapped": (run_chunk, True), "sequential": (one_round, True),
         "sequential_inloop": (one_round_inloop, True)}
  if zeroth_order:
    b2 = cfg.fd_directions
    per_round = n * h * b2 * d
    raw, law, ninfo = prepare_normals(per_round, d, b2, cfg.direction, settings, steps_per_call=n)
    # A large count makes a long repeat (and one piece has run): no warm-up pass.
    warm = ninfo["count"] <= MAX_PIECE * 4
    fns.update(raw=(raw, warm), law=(law, warm))
  timing = time_interleaved(fns, settings.repeats, settings.min_time)
  tag = f"[{name} N={n}]"
  note = ("python loop over clients of a per-client jitted make_local_update; "
          f"{s} of {n} clients timed; rates per client local step")
  record = _record(name, n, s, h, "client steps", d, run_chunk, vinfo, timing, length, log, tag, note,
                   {"batch_size": cfg.batch_size, "samples_per_client": settings.samples_per_client,
                    "hparams": {k: jsonable(v) for k, v in dataclasses.asdict(cfg).items()}})

  if zeroth_order:
    vt, rt, lt = timing["vmapped"], timing["raw"], timing["law"]
    count = ninfo["count"]
    engine_rate = per_round / record["seconds_per_round"]
    raw_rate, law_rate = count / rt["best"], count / lt["best"]
    # Per repeat: (numbers per second in the engine) / (raw numbers per second).
    ratio = paired_median([per_round * length / t for t in vt["seconds"]], [count / t for t in rt["seconds"]])
    record["directions"] = {
        "law": cfg.direction, "fd_directions": b2, "per_round": per_round,
        "engine_per_s": engine_rate, "raw_normal_per_s": raw_rate, "law_per_s": law_rate,
        "ratio": ratio, "ratio_of_best": engine_rate / raw_rate, "law_ratio": law_rate / raw_rate,
        "ratio_cpu": paired_median([per_round * length / max(c, 1e-12) for c in vt["cpu_seconds"]],
                                   [count / max(c, 1e-12) for c in rt["cpu_seconds"]]),
        "raw_normal_count": count, "raw_normal_pieces": ninfo["pieces"],
        "raw_normal_seconds": rt["seconds"], "law_seconds": lt["seconds"],
        "raw_normal_cpu_per_wall": rt["cpu_per_wall"],
    }
    log(f"{tag} directions: engine {engine_rate / 1e6:,.1f} M/s, raw normal {raw_rate / 1e6:,.1f} M/s "
        f"({count:,} numbers), {cfg.direction} law alone {law_rate / 1e6:,.1f} M/s; ratio {ratio:.2f}")
  return record


def run_benchmark(algorithm_names: Sequence[str], num_clients: Sequence[int], settings: Settings,
                  log: Callable[[str], None] = print,
                  on_record: Callable[[list], None] | None = None) -> list[dict]:
  """Runs the vmap suite for every algorithm and N (algorithms outer, N inner).

  fedavg/fedzo/decomfl/hiso run at every N of ``num_clients``; fzoos at
  ``settings.fzoos_vmap`` and ffgb at ``settings.ffgb_clients`` only (one record each).

  Args:
    on_record: called with the list of records so far after each record.

  Returns:
    The records.
  """
  records = []
  for name in algorithm_names:
    if name in DELTA_AVERAGING:
      todo = [lambda n=n, name=name: benchmark_one(name, n, settings, log) for n in num_clients]
    elif name in ("decomfl", "hiso"):
      todo = [lambda n=n, name=name: benchmark_hiso(name, n, settings, log) for n in num_clients]
    elif name == "fzoos":
      todo = [lambda: benchmark_fzoos_loop(settings, log)]
    elif name == "ffgb":
      todo = [lambda: benchmark_ffgb_loop(settings, log)]
    else:
      raise ValueError(f"no vmap benchmark for {name!r}; accepted: {', '.join(ALGORITHMS)}")
    for fn in todo:
      records.append(fn())
      if on_record is not None:
        on_record(records)
  return records


def markdown(result: dict) -> str:
  """The records as a markdown table (rates in client local steps per second; FFGB: learners)."""
  head = ("| algorithm | N | s/round | vmapped rate | one-at-a-time rate (clients timed) | unit | speedup "
          "| speedup in CPU s | cpu/wall vmapped, loop | compiled temp+arg+out MiB | peak RSS MiB "
          "| directions M/s engine | raw normal M/s | ratio (in CPU s) |")
  rows = [head, "|" + "---|" * 14]
  for r in result["records"]:
    m, dr = r["memory"], r["directions"] or {}
    rows.append(
        f"| {r['algorithm']} | {r['num_clients']} | {r['seconds_per_round']:.4g} "
        f"| {rate(r['vmapped_steps_per_s'])} "
        f"| {rate(r['sequential_steps_per_s'])} ({r['sequential_clients_timed']}) "
        f"| {r.get('rate_unit', 'client steps')}/s | {r['speedup']:.2f}x "
        f"| {r['speedup_cpu']:.2f}x "
        f"| {r['vmapped_cpu_per_wall']:.2f}, {r['sequential_cpu_per_wall']:.2f} "
        f"| {mib(m['total_bytes'])} | {mib(m['peak_rss_bytes'])} | {mega(dr.get('engine_per_s'))} "
        f"| {mega(dr.get('raw_normal_per_s'))} "
        f"| {'' if not dr else format(dr['ratio'], '.2f') + ' (' + format(dr['ratio_cpu'], '.2f') + ')'} |")
  return "\n".join(rows) + "\n"


# ----------------------------------------------------------------------------- looped baselines


def benchmark_hiso(name: str, num_clients: int, settings: Settings, log: Callable[[str], None] = print) -> dict:
  """DeComFL / HiSo: engine round vs ``client_scalars`` (Alg. 2b) jitted and looped over clients."""
  from fedsim import algorithms

  task = make_benchmark_task(num_clients, settings.samples_per_client, settings.seed)
  alg = algorithms.build(name, task, clients_per_round=num_clients)
  cfg = alg.hparams
  length, n = settings.rounds_per_chunk, num_clients
  run_chunk, vinfo = compile_chunk(alg, task, length, settings.seed)
  s = min(n, settings.sequential_clients)
  one_round = hiso_loop(name, task, cfg, run_chunk.initial_state, run_chunk.rounds_key, s)
  timing = time_interleaved({"vmapped": (run_chunk, True), "sequential": (one_round, True)},
                            settings.repeats, settings.min_time)
  note = ("python loop over clients of jitted hiso_parts(...).client_scalars (Alg. 2b), "
          f"then apply_round once; {s} of {n} clients timed; rates per client local step")
  return _record(name, n, s, cfg.local_steps, "client steps", task.dim, run_chunk, vinfo, timing, length, log,
                 f"[{name} N={n}]", note,
                 {"batch_size": cfg.batch_size, "num_perturbations": cfg.num_perturbations,
                  "hparams": {k: jsonable(v) for k, v in dataclasses.asdict(cfg).items()}})


def hiso_loop(name, task, cfg, state, rounds_key, s: int):
  """One client at a time for DeComFL / HiSo: ``client_scalars`` (Alg. 2b) jitted, looped over
  clients 0..s-1 (rows and round-0 keys split beforehand), the scalars summed and averaged, then
  ``apply_round`` (Alg. 2 lines 13-16) once. Returns a blocking ``one_round()``; after a call,
  ``one_round.result`` is the new (x, h)."""
  import jax

  from fedsim.algorithms.hiso import hiso_parts
  from fedsim.core import rng
  parts = hiso_parts(task, cfg, preconditioned=(name == "hiso"))
  client_fn = jax.jit(parts.client_scalars)
  apply_fn = jax.jit(parts.apply_round)
  rows = [jax.tree_util.tree_map(lambda a, i=i: a[i], task.client_data) for i in range(s)]
  _, k_clients, _ = rng.round_subkeys(rng.round_key(rounds_key, 0))
  keys = [rng.client_key(k_clients, i) for i in range(s)]
  jax.block_until_ready((rows, keys))

  def one_round():
    total = None
    for row, k in zip(rows, keys):
      G, _ = client_fn(state.x, state.h, state.round, state.shared_key, row, k)   # Alg. 2b
      total = G if total is None else total + G
    x, h = apply_fn(state.x, state.h, state.round, state.shared_key, total / s)  # Alg. 2 l. 13-16
    jax.block_until_ready((x, h))
    one_round.result = (x, h)

  return one_round


def fzoos_task(num_clients: int, dim: int, seed: int = 0, heterogeneity: float = 5.0):
  """The Fig. 1 federated quadratic (``make_task('quadratic')``; build under ``jax.enable_x64``)."""
  from fedsim.tasks import make_task
  return make_task("quadratic", num_clients=num_clients, dim=dim, heterogeneity=heterogeneity, seed=seed)


def single_client_task(task, i: int):
  """``task`` restricted to client i (N = 1): same functions, data rows i:i+1."""
  import jax
  data = dict(task.data)
  data["clients"] = jax.tree_util.tree_map(lambda a: a[i:i + 1], task.data["clients"])
  data["sizes"] = task.data["sizes"][i:i + 1]
  return dataclasses.replace(task, num_clients=1, data=data)


def fzoos_hparams(settings: Settings, num_rff: int) -> dict:
  """FZooS defaults (Shu et al. 2023, App. E) with T = ``fzoos_steps`` and M = ``num_rff``; the
  history sized for Fig. 1's R = 50 rounds (fedsim.algorithms.fzoos, "History")."""
  return {"local_steps": settings.fzoos_steps, "num_rff": num_rff, "rounds": 50}


def benchmark_fzoos_loop(settings: Settings, log: Callable[[str], None] = print) -> dict:
  """FZooS: engine round over N clients vs its own round on single-client tasks, looped.

  Float64 (``jax.enable_x64``), as the Fig. 1 flagfile runs it.
  """
  import jax

  from fedsim import algorithms
  from fedsim.core import rng

  n, M = settings.fzoos_vmap
  length = 1
  with jax.enable_x64(True):
    task = fzoos_task(n, settings.fzoos_dim, settings.seed)
    hp = fzoos_hparams(settings, M)
    alg = algorithms.build("fzoos", task, **hp)
    run_chunk, vinfo = compile_chunk(alg, task, length, settings.seed)

    s = min(n, settings.sequential_clients)
    tasks1 = [single_client_task(task, i) for i in range(s)]
    alg1 = algorithms.build("fzoos", tasks1[0], **hp)
    round1 = jax.jit(alg1.round)
    init_keys = rng.init_keys(jax.random.key(settings.seed))
    states = [jax.jit(alg1.init)(*init_keys) for _ in range(s)]   # same shared RFF draw for all
    datas = [t.data for t in tasks1]
    box = {"states": states, "round": 0}

    def one_round():
      r = box["round"]
      _, k_clients, _ = rng.round_subkeys(rng.round_key(run_chunk.rounds_key, r))
      new = [round1(st, rng.client_key(k_clients, i), d)[0]
             for i, (st, d) in enumerate(zip(box["states"], datas))]
      x = sum(st.x for st in new) / s                                   # Alg. 1 server average
      jax.block_until_ready((new, x))
      box["states"], box["round"] = new, r + 1

    timing = time_interleaved({"vmapped": (run_chunk, True), "sequential": (one_round, True)},
                              settings.repeats, 0.0)
    note = ("python loop over clients of FZooS's own jitted round on a single-client task (N = 1): "
            "one client's T local steps, active queries and RFF fit per call; "
            f"{s} of {n} clients timed; rates per client local step; float64")
    return _record("fzoos", n, s, settings.fzoos_steps, "client steps", settings.fzoos_dim, run_chunk, vinfo,
                   timing, length, log, f"[fzoos N={n} M={M} d={settings.fzoos_dim}]", note,
                   {"num_rff": M, "dtype": "float64"})


def ffgb_task(num_clients: int, seed: int = 0, homo_ratio: float = 0.1):
  """Digits, homo_ratio partition (specs/ffgb.md §3.1), MLP task (FFGB scores caches)."""
  from fedsim.tasks import make_task
  return make_task("mlp", num_clients=num_clients, seed=seed, dataset="digits", partition="homo_ratio",
                   homo_ratio=homo_ratio, hidden_width=32)


def ffgb_parts(settings: Settings, oracle_steps: int, num_clients: int | None = None):
  """(task, alg, client function, cfg) of FFGB with the mlp oracle on digits."""
  from fedsim import algorithms
  from fedsim.algorithms import ffgb as ffgbm
  n = num_clients or settings.ffgb_clients
  task = ffgb_task(n, settings.seed)
  alg = algorithms.build("ffgb", task, weak_learner="mlp", local_steps=settings.ffgb_local_steps,
                         oracle_steps=oracle_steps, oracle_batch=settings.ffgb_batch, clients_per_round=n)
  cfg = alg.hparams
  client = ffgbm.make_client_round(task, cfg, "ffgb", ffgbm.build_oracle(task, cfg))
  return task, alg, client, cfg


def ffgb_loop(task, client, cfg, state, rounds_key, s: int):
  """One client at a time: the jitted per-client K-step function (K learner trainings) in a loop.

  Returns a blocking ``one_round()`` over clients 0..s-1 (rows, keys and f_i split beforehand).
  """
  import jax

  from fedsim.algorithms import ffgb as ffgbm
  from fedsim.core import rng
  fn = jax.jit(client)
  c = task.client_data
  etas = ffgbm.step_sizes(cfg, "ffgb", 0)
  _, k_clients, _ = rng.round_subkeys(rng.round_key(rounds_key, 0))
  args = [(rng.client_key(k_clients, i), c["x"][i], c["y"][i], c["mask"][i], task.data["sizes"][i],
           state.f_train[i]) for i in range(s)]
  jax.block_until_ready(args)

  def one_round():
    out = [fn(*a, etas) for a in args]
    jax.block_until_ready(out)

  return one_round


def benchmark_ffgb_loop(settings: Settings, log: Callable[[str], None] = print) -> dict:
  """FFGB (mlp oracle, ``ffgb_vmap_oracle_steps`` Adam steps): engine round vs clients looped."""
  task, alg, client, cfg = ffgb_parts(settings, settings.ffgb_vmap_oracle_steps)
  n, length = task.num_clients, 1
  run_chunk, vinfo = compile_chunk(alg, task, length, settings.seed)
  s = min(n, settings.sequential_clients)
  one_round = ffgb_loop(task, client, cfg, run_chunk.initial_state, run_chunk.rounds_key, s)
  timing = time_interleaved({"vmapped": (run_chunk, True), "sequential": (one_round, True)},
                            settings.repeats, 0.0)
  note = ("python loop over clients of the jitted per-client K-step function (make_client_round: "
          f"K mlp trainings); {s} of {n} clients timed; rates in learner trainings per second")
  return _record("ffgb", n, s, cfg.local_steps, "learners", None, run_chunk, vinfo, timing, length, log,
                 f"[ffgb N={n} K={cfg.local_steps} oracle_steps={cfg.oracle_steps}]", note,
                 {"oracle_steps": cfg.oracle_steps, "oracle_batch": cfg.oracle_batch})
