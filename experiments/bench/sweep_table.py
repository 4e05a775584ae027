r"""Suite ``sweep_table``: K configurations of one algorithm in one
vmapped program against the same K configurations run one after another.

  python -m experiments.benchmark --suite=sweep_table --output_dir=runs/sweep_table
  python -m experiments.benchmark --suite=sweep_table --sweep_table_clients=1000 \
      --sweep_table_configs=1,4,16 --algorithm=fedavg,hiso

For each algorithm of ``sweep_table_algorithms`` (default FedAvg, FedZO, HiSo;
``--algorithm`` when given), each N of ``sweep_table_clients`` (default 10^3,
10^4) and each K of ``sweep_table_configs`` (default 1, 4, 16, 64), on the digits
softmax with full participation (the vmap suite's task and hyperparameters,
:mod:`experiments.bench.vmap`):

* **the configurations** are an lr x seed grid of K members: V learning rates
  (``lr * 2^(-v/2)``, v = 0..V-1, lr the benchmark's) times S = K / V seeds
  (``seed``, ``seed + 1``, ...; each seed its own client draw,
  :func:`experiments.bench.util.make_benchmark_task`), V the largest divisor of K
  that is at most ``sweep_table_lrs`` (4) and at most ceil(sqrt(K)): K = 1, 4, 16,
  64 are 1 x 1, 2 x 2, 4 x 4 and 4 x 16 (lr values x seeds).
* **batched**: the K members in one compiled program, the chunk of
  ``rounds_per_chunk`` rounds that ``fedsim.core.batched.simulate_batched``
  compiles (``prepare_batch``: ``vmap`` over the members of the engine's chunk,
  the algorithm built from each member's data and its lr as a traced scalar).
* **sequential**: the same K configurations one after another in this process,
  each the plain engine's chunk (``fedsim.core.engine.make_chunk``, state donated)
  of the same length. The engine bakes the lr into the program, so one
  program is compiled per lr value (and reused for every seed, whose data is an
  argument; the programs of an (algorithm, N) are shared by its K rows); the K
  chunks are dispatched back to back and blocked on once at the end (the
  baseline's best case: no host round trip between configurations).

Timing (:func:`experiments.bench.util.time_interleaved`): one untimed call of each
side first, after which the K member states of the two sides are compared
(``max_rel_diff``: the largest difference of a floating state leaf over the
largest magnitude of that leaf; FedZO's finite differences amplify 1-ulp
differences by 1/mu, DESIGN.md), then ``repeats`` interleaved repeats of each
(each at least ``min_time`` s). Reported: **configuration-rounds per second** (K x
rounds per chunk / seconds per chunk, best repeat) of each side, the **ratio**
batched / sequential (median of side-by-side ratios), the batched rate over that
of K = 1 (the GPU target: >= 20x at K = 64, N = 10^3), client steps
per second (configuration-rounds x N x local steps), the **compile** seconds
(tracing, lowering and XLA compilation) of the batched chunk and of the
sequential programs it needs, reported apart and never timed, and **peak
memory**: the compiled batched chunk's footprint (``memory_analysis``: arguments
+ temporaries + outputs - aliased), one sequential chunk's, and, where the
device reports it, the process's peak bytes in use so far (rows run in
increasing N, then algorithm, then K).

Client blocks: a delta-averaging algorithm (FedAvg, FedZO) vmaps blocks of
clients (``client_block``, fedsim.core.client_map); under the member ``vmap`` a
block holds K x block client-members. Both sides keep that at most the cap one
run has: on CPU the backend's block (256 clients), off CPU
``sweep_table_max_block`` (10^5; one run vmaps all its clients there): a row
whose K x N exceeds the cap runs in blocks of cap // K clients, so one step's
per-client temporaries (FedZO: (members, clients, b2, d) directions) stay
bounded.
A row that fails (e.g. out of device memory) is recorded with its error and the
table goes on. ``--quick`` runs N = 8, K = 1, 4 with 2 rounds per chunk (the slow
test suite runs it, so the command cannot rot).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from experiments.bench.util import (
  Settings,
  compiled_memory,
  make_benchmark_task,
  mib,
  paired_median,
  process_memory,
  rate,
  state_finite,
  time_interleaved,
)

TITLE = "sweep table: K configurations (lr x seed) in one vmapped program vs one after another"
# Algorithms the suite accepts: the digits-softmax benchmark algorithms whose lr traces.
ALGORITHMS = ("fedavg", "fedadam", "fedyogi", "fedadagrad", "fedzo", "decomfl", "hiso")
DEFAULT_ALGORITHMS = ("fedavg", "fedzo", "hiso")
DELTA_AVERAGING = ("fedavg", "fedadam", "fedyogi", "fedadagrad", "fedzo")
GPU_TARGET = {"num_clients": 1000, "configs": 64, "vs_k1": 20.0}


def grid(k: int, max_lrs: int = 4) -> tuple[int, int]:
  """(V learning rates, S seeds) of K configurations: V the largest divisor of K that is
  <= ``max_lrs`` and <= ceil(sqrt(K)); S = K / V."""
  cap = min(max_lrs, math.ceil(math.sqrt(k)))
  v = max(d for d in range(1, cap + 1) if k % d == 0)
  return v, k // v


def lr_values(base: float, v: int) -> list[float]:
  """``base * 2^(-i/2)`` for i = 0..v-1 (every value at most the benchmark's lr)."""
  return [base * 2.0 ** (-i / 2) for i in range(v)]


def client_block(name: str, n: int, k: int, max_block: int) -> int | None:
  """The ``client_block`` of (algorithm, N, K members), so that one block holds at most ``cap``
  client-members (K x clients): ``cap`` is the backend's default block (256 on CPU, where blocks
  of that size keep a step's temporaries in cache) or, off CPU (one vmap by default),
  ``max_block``. None (the algorithm's default) for algorithms without client blocks and where
  K x N <= ``cap``; else ``cap // K`` clients per block (at least 1)."""
  from fedsim.core import client_map
  cap = client_map.default_client_block() or max_block
  if name not in DELTA_AVERAGING or k * n <= cap:
    return None
  return max(1, cap // k)


def base_hparams(name: str, n: int, block: int | None) -> dict:
  """The benchmark's hyperparameters of ``name`` (vmap suite) with full participation of N."""
  from experiments.bench.vmap import benchmark_hparams
  hp = benchmark_hparams(name)
  hp["clients_per_round"] = n
  if name in DELTA_AVERAGING:
    hp["client_block"] = block
  return hp


class Group:
  """What the K rows of one (algorithm, N) share: each seed's task and the sequential
  programs (one per (lr, client_block))."""

  def __init__(self, name: str, n: int, settings: Settings):
    self.name, self.n, self.settings = name, n, settings
    self.tasks: dict = {}
    self.programs: dict = {}

  def task(self, seed: int):
    if seed not in self.tasks:
      self.tasks[seed] = make_benchmark_task(self.n, self.settings.samples_per_client, seed)
    return self.tasks[seed]

  def program(self, lr: float, block: int | None, length: int):
    """(alg, compiled plain-engine chunk, compile seconds, memory) of the lr value (cached)."""
    import jax
    import jax.numpy as jnp

    from fedsim import algorithms
    from fedsim.core import engine, rng
    key = (lr, block, length)
    if key not in self.programs:
      task = self.task(self.settings.seed)
      hp = dict(base_hparams(self.name, self.n, block), lr=lr)
      alg = algorithms.build(self.name, task, **hp)
      root = jax.random.key(self.settings.seed)
      state = engine.init_state(alg, root)
      t = time.perf_counter()
      compiled = engine.make_chunk(alg).lower(state, task.data, rng.stream(root, "rounds"), jnp.int32(0),
                                              length).compile()
      self.programs[key] = (alg, compiled, time.perf_counter() - t, compiled_memory(compiled))
    return self.programs[key]


def prepare_row(group: Group, k: int):
  """The two sides of row K: ``(batched, sequential, info)``.

  ``batched()`` and ``sequential()`` each run one chunk of ``rounds_per_chunk``
  rounds for all K configurations, chaining their states, and block;
  ``batched.state()`` is the members' state (leading axis K, member s * V + v),
  ``sequential.states()`` the K states in the same order. ``info``: V, S, the lr
  values, seeds, client_block, the compile seconds of each side and the
  compiled memory of the batched chunk and of one sequential chunk.
  """
  import jax
  import jax.numpy as jnp

  from fedsim import algorithms
  from fedsim.core import batched, engine, rng

  settings, name, n = group.settings, group.name, group.n
  length = settings.rounds_per_chunk
  v, s = grid(k, settings.sweep_table_lrs)
  block = client_block(name, n, k, settings.sweep_table_max_block)
  seeds = [settings.seed + i for i in range(s)]
  hp = base_hparams(name, n, block)
  lrs = lr_values(float(hp["lr"]), v)
  static = {kk: vv for kk, vv in hp.items() if kk != "lr"}
  tasks = [group.task(seed) for seed in seeds]

  def build(t, h):
    return algorithms.build(name, t, **h)

  ok, why = batched.traceable(build, tasks[0], static, {"lr": lrs[0]})
  if not ok:
    raise ValueError(f"{name}: lr does not trace ({why})")
  batch = batched.prepare_batch(build, tasks[0], [t.data for t in tasks], seeds, static, [{"lr": x} for x in lrs])
  cache = batched.ProgramCache()
  t = time.perf_counter()
  init = cache.get("init", batch.init_fn, batch.data, batch.keys, batch.hp)
  state = init(batch.data, batch.keys, batch.hp)
  chunk = cache.get("chunk", batch.chunk_fn(length), state, batch.data, batch.keys, batch.hp, jnp.int32(0))
  batched_compile_s = time.perf_counter() - t
  box = {"state": state, "round": 0}

  def run_batched():
    st, stats = chunk(box["state"], batch.data, batch.keys, batch.hp, jnp.int32(box["round"]))
    jax.block_until_ready((st, stats))
    box["state"], box["round"] = st, box["round"] + length

  run_batched.state = lambda: box["state"]

  # The sequential side: member order s * V + v (seed s, lr v), as the batch's.
  programs = [group.program(lr, client_block(name, n, 1, settings.sweep_table_max_block), length) for lr in lrs]
  configs = []
  for seed, task in zip(seeds, tasks):
    root = jax.random.key(seed)
    for alg, compiled, _, _ in programs:
      configs.append({"run": compiled, "data": task.data, "rounds_key": rng.stream(root, "rounds"),
                      "state": engine.init_state(alg, root), "round": 0})
  jax.block_until_ready([c["state"] for c in configs])

  def run_sequential():
    outs = []
    for c in configs:
      st, stats = c["run"](c["state"], c["data"], c["rounds_key"], jnp.int32(c["round"]))
      c["state"], c["round"] = st, c["round"] + length
      outs.append((st, stats))
    jax.block_until_ready(outs)

  run_sequential.states = lambda: [c["state"] for c in configs]
  info = {"lr_values": v, "seeds": s, "lrs": lrs, "seed_list": seeds, "client_block": block,
          "batched_compile_s": batched_compile_s, "batched_memory": compiled_memory(chunk),
          "sequential_programs": len(programs), "sequential_compile_s": sum(p[2] for p in programs),
          "sequential_memory": programs[0][3], "local_steps": int(hp["local_steps"])}
  return run_batched, run_sequential, info


def max_rel_diff(batched_state, states) -> float:
  """Largest |batched member i - sequential i| over the largest |sequential i|, per floating leaf."""
  import jax
  import jax.numpy as jnp
  import numpy as np
  worst = 0.0
  members = jax.tree_util.tree_leaves(jax.device_get(batched_state))
  for i, st in enumerate(states):
    for a, b in zip(members, jax.tree_util.tree_leaves(jax.device_get(st))):
      if not (hasattr(b, "dtype") and jnp.issubdtype(b.dtype, jnp.floating)):
        continue
      a_i, b_i = np.asarray(a[i], np.float64), np.asarray(b, np.float64)
      scale = float(np.max(np.abs(b_i))) if b_i.size else 0.0
      diff = float(np.max(np.abs(a_i - b_i))) if b_i.size else 0.0
      worst = max(worst, diff / scale if scale > 0 else diff)
  return worst


def measure(group: Group, k: int, log: Callable[[str], None]) -> dict:
  """One row: (algorithm, N, K)."""
  settings, name, n = group.settings, group.name, group.n
  length = settings.rounds_per_chunk
  run_b, run_s, info = prepare_row(group, k)
  t = time.perf_counter()
  run_b()
  first_b = time.perf_counter() - t
  t = time.perf_counter()
  run_s()
  first_s = time.perf_counter() - t
  diff = max_rel_diff(run_b.state(), run_s.states())
  warm = settings.min_time > 0  # the first calls above were the warm-up; again only to size the repeats
  timing = time_interleaved({"batched": (run_b, warm), "sequential": (run_s, warm)}, settings.repeats,
                            settings.min_time)
  bt, st = timing["batched"], timing["sequential"]
  b_rates = [k * length / x for x in bt["seconds"]]
  s_rates = [k * length / x for x in st["seconds"]]
  mem = process_memory()
  row = {"algorithm": name, "num_clients": n, "configs": k, "lr_values": info["lr_values"], "seeds": info["seeds"],
         "lrs": info["lrs"], "client_block": info["client_block"], "rounds_per_chunk": length,
         "local_steps": info["local_steps"],
         "batched_config_rounds_per_s": max(b_rates), "sequential_config_rounds_per_s": max(s_rates),
         "ratio": paired_median(b_rates, s_rates), "ratio_of_best": max(b_rates) / max(s_rates),
         "ratio_cpu": paired_median([k * length / max(c, 1e-12) for c in bt["cpu_seconds"]],
                                    [k * length / max(c, 1e-12) for c in st["cpu_seconds"]]),
         "batched_seconds_per_chunk": bt["best"], "sequential_seconds_per_chunk": st["best"],
         "batched_seconds_all": bt["seconds"], "sequential_seconds_all": st["seconds"],
         "batched_first_call_s": first_b, "sequential_first_call_s": first_s,
         "batched_cpu_per_wall": bt["cpu_per_wall"], "sequential_cpu_per_wall": st["cpu_per_wall"],
         "batched_compile_s": info["batched_compile_s"], "sequential_compile_s": info["sequential_compile_s"],
         "sequential_programs": info["sequential_programs"],
         "batched_compiled_bytes": info["batched_memory"]["total_bytes"],
         "batched_temp_bytes": info["batched_memory"]["temp_bytes"],
         "sequential_compiled_bytes": info["sequential_memory"]["total_bytes"],
         "device_peak_bytes": mem["device_peak_bytes"], "peak_rss_bytes": mem["peak_rss_bytes"],
         "max_rel_diff": diff, "state_finite": state_finite(run_b.state()), "repeats": len(bt["seconds"])}
  row["batched_client_steps_per_s"] = row["batched_config_rounds_per_s"] * n * row["local_steps"]
  log(f"[sweep_table {name} N={n} K={k} ({info['lr_values']} lr x {info['seeds']} seeds)] batched "
      f"{row['batched_config_rounds_per_s']:,.2f} config-rounds/s, sequential "
      f"{row['sequential_config_rounds_per_s']:,.2f}: {row['ratio']:.2f}x (CPU s {row['ratio_cpu']:.2f}x); compile "
      f"batched {row['batched_compile_s']:.1f} s, sequential {row['sequential_compile_s']:.1f} s "
      f"({row['sequential_programs']} programs); compiled batched {mib(row['batched_compiled_bytes'])} MiB"
      + (f"; device peak {mib(row['device_peak_bytes'])} MiB" if row["device_peak_bytes"] else "")
      + f"; max rel diff {diff:.1e}; cpu/wall {bt['cpu_per_wall']:.2f}, {st['cpu_per_wall']:.2f}")
  return row


def add_vs_k1(records: list) -> list:
  """Each row with ``vs_k1``: its batched rate over that of K = 1 at the same (algorithm, N)
  (None without a K = 1 row), and ``meets_gpu_target`` on the target row (K = 64, N = 10^3)."""
  base = {(r["algorithm"], r["num_clients"]): r["batched_config_rounds_per_s"]
          for r in records if "error" not in r and r["configs"] == 1}
  out = []
  for r in records:
    if "error" not in r:
      b = base.get((r["algorithm"], r["num_clients"]))
      r = {**r, "vs_k1": None if b is None else r["batched_config_rounds_per_s"] / b}
      if (r["num_clients"], r["configs"]) == (GPU_TARGET["num_clients"], GPU_TARGET["configs"]) \
         and r["vs_k1"] is not None:
        r["meets_gpu_target"] = r["vs_k1"] >= GPU_TARGET["vs_k1"]
    out.append(r)
  return out


def run(settings: Settings, log: Callable[[str], None] = print,
        on_update: Callable[[dict], None] | None = None) -> dict:
  """Runs the suite; returns ``{"records"}`` (failed rows carry ``error``); ``on_update`` gets the
  partial result after every row (a run stopped part-way keeps its rows)."""
  records: list = []
  for n in sorted(settings.sweep_table_clients):
    for name in settings.sweep_table_algorithms:
      group = Group(name, n, settings)
      for k in sorted(settings.sweep_table_configs):
        try:
          records.append(measure(group, k, log))
        except Exception as e:  # pylint: disable=broad-except  # e.g. out of device memory: keep the rest
          msg = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
          log(f"[sweep_table {name} N={n} K={k}] failed: {msg}")
          records.append({"algorithm": name, "num_clients": n, "configs": k, "error": msg})
        records[:] = add_vs_k1(records)
        if on_update:
          on_update({"records": list(records)})
      del group
  return {"records": records, "gpu_target": dict(GPU_TARGET)}


def _num(x: float) -> str:
  return f"{x:,.0f}" if x >= 100 else f"{x:,.3g}"


def markdown(result: dict) -> str:
  """The table: one row per (algorithm, N, K)."""
  rows = ["configuration-rounds per second (K configurations x rounds / s); ratio = batched / sequential "
          "(median of side-by-side repeats; in process CPU s in brackets); compile seconds excluded from "
          "every rate\n",
          "| algorithm | N | K (lr x seeds) | batched config-rounds/s | sequential config-rounds/s | ratio "
          "| batched vs K = 1 | client steps/s batched | compile s batched; sequential (programs) "
          "| memory MiB: batched compiled; one sequential; device peak | max rel diff |", "|" + "---|" * 11]
  for r in result["records"]:
    if "error" in r:
      rows.append(f"| {r['algorithm']} | {r['num_clients']:,} | {r['configs']} | failed: {r['error']} "
                  "| | | | | | | |")
      continue
    dev = f"; {mib(r['device_peak_bytes'])}" if r.get("device_peak_bytes") else "; n/a"
    vs = "" if r.get("vs_k1") is None else f"{r['vs_k1']:.2f}x"
    rows.append(f"| {r['algorithm']} | {r['num_clients']:,} | {r['configs']} ({r['lr_values']} x {r['seeds']}) "
                f"| {_num(r['batched_config_rounds_per_s'])} | {_num(r['sequential_config_rounds_per_s'])} "
                f"| {r['ratio']:.2f}x ({r['ratio_cpu']:.2f}x) | {vs} | {rate(r['batched_client_steps_per_s'])} "
                f"| {r['batched_compile_s']:.1f}; {r['sequential_compile_s']:.1f} ({r['sequential_programs']}) "
                f"| {mib(r['batched_compiled_bytes'])}; {mib(r['sequential_compiled_bytes'])}{dev} "
                f"| {r['max_rel_diff']:.1e} |")
  return "\n".join(rows) + "\n"

