r"""Suite ``roofline``: achieved FLOP/s of the dominant kernel against the machine's
dense-matmul FLOP/s, and (per-client-direction ZO) directions per second against
the raw generator rate, all measured in the same run.

Peak: an n x n float32 ``jnp.dot`` (n = ``matmul_size``, 2 n^3 FLOPs), jitted,
best of ``repeats`` (each >= ``min_time``).

FLOPs are counted analytically for the digits softmax (d_in = 64 inputs,
C = 10 classes; multiply and add count 2; the O(C) bias, softmax and update
terms are left out, so the counts are lower bounds):

* ``fedavg`` (first order): a local SGD step of one client on a batch of B
  samples is a forward matmul x W (2 d_in C B) and the weight gradient x^T
  (softmax - onehot) (2 d_in C B); no input gradient is needed, so
  4 d_in C B per client step (the "2*3*d_in*C" convention also counts an input
  gradient the softmax never computes). Per round N H B 4 d_in C.
* ``decomfl`` / ``hiso`` (shared-direction ZO, Li et al. 2025): each client step is
  P + 1 forward evaluations on a batch of b (forward differences), 2 d_in C b
  each; per round m tau (P + 1) b 2 d_in C. The P shared directions are the
  same for every client (one draw per round, not per client) and are not
  counted.

``engine_flops_per_s`` divides that count by the engine's seconds per round
(full participation, N = ``roofline_clients``); ``kernel_flops_per_s`` times
the dominant kernel alone at the same shapes (FedAvg: the batched
forward + weight-gradient einsums over N clients with their own W; HiSo: the
(N b, d_in) x (d_in, (P + 1) C) forward evaluations), so the gap between the
two is the engine's overhead (sampling, gathers, the H-step scan, RNG).
``fraction`` = achieved / peak (the target: >= 30% for FLOP-bound kernels).

Which roof binds: the memory bandwidth is measured in the same run
(:func:`bandwidth_peak`, a float32 ``2 x + 1`` over ``bandwidth_bytes``), the
bytes a round must at least move are counted analytically
(:func:`round_counts`), and :func:`binding_roof` takes the roof with the larger
time bound: ``bound`` (flops or memory), the arithmetic intensity against the
machine's ridge (peak FLOP/s / bandwidth), and ``roof_fraction`` = that time
bound / the measured seconds per round.

Layouts (layouts that give XLA larger GEMMs are tried before concluding): the CNN
runs both as the patches GEMM that is fedsim's default (``fedsim.models.cnn``,
``impl=gemm``) and as flax's ``nn.Conv`` (``impl=xla``, grouped convolutions under
vmap), side by side; the softmax client step is timed in three layouts
(:func:`softmax_layouts`).

* ``fedzo`` (per-client-direction ZO): Gaussian (sphere) directions generated
  per second in the engine, N H b2 d numbers per round / s, against the raw
  ``jax.random.normal`` rate on the same count (the target: >= 70%).
"""

from __future__ import annotations

from collections.abc import Callable

from experiments.bench.util import Settings, compile_chunk, make_benchmark_task, paired_median, time_interleaved

TITLE = "roofline"


def matmul_peak(n: int, repeats: int, min_time: float) -> dict:
  """float32 n x n matmul: FLOP/s (2 n^3 per call), best and median of ``repeats``."""
  import jax
  import jax.numpy as jnp
  k1, k2 = jax.random.split(jax.random.key(0))
  a = jax.random.normal(k1, (n, n), jnp.float32)
  b = jax.random.normal(k2, (n, n), jnp.float32)
  f = jax.jit(lambda a, b: jnp.dot(a, b, precision=jax.lax.Precision.DEFAULT))
  t = time_interleaved({"dot": (lambda: jax.block_until_ready(f(a, b)), True)}, repeats, min_time)["dot"]
  flops = 2.0 * n ** 3
  return {"n": n, "dtype": "float32", "flops": flops, "seconds": t["best"], "flops_per_s": flops / t["best"],
          "flops_per_s_median": flops / t["median"], "cpu_per_wall": t["cpu_per_wall"]}


def bandwidth_peak(nbytes: int, repeats: int, min_time: float) -> dict:
  """Memory bandwidth: ``y = 2 x + 1`` over a float32 array of ``nbytes`` (reads and writes it:
  2 nbytes moved per call, the STREAM "scale" kernel), jitted, best of ``repeats``."""
  import jax
  import jax.numpy as jnp
  x = jnp.ones((max(1, nbytes // 4),), jnp.float32)
  f = jax.jit(lambda x: 2.0 * x + 1.0)
  t = time_interleaved({"scale": (lambda: jax.block_until_ready(f(x)), True)}, repeats, min_time)["scale"]
  moved = 2.0 * x.size * 4
  return {"array_bytes": x.size * 4, "bytes_moved": moved, "seconds": t["best"],
          "bytes_per_s": moved / t["best"], "bytes_per_s_median": moved / t["median"],
          "cpu_per_wall": t["cpu_per_wall"]}


def round_counts(name: str, cfg, num_clients: int, d_in: int, c: int) -> dict:
  """Analytic FLOPs and bytes of one full-participation round on the digits softmax (lower bounds).

  FLOPs as in the module docstring (FedZO: its (b2 + 1) forward evaluations of a
  b1 batch per step, 2 d_in C b1 each; direction generation is not counted).
  Bytes: what a client step must at least read from memory, float32: its batch's
  inputs (B d_in 4) and, for the per-client models of FedAvg / FedZO, the model
  read and written (2 d 4, d = (d_in + 1) C); DeComFL / HiSo share one model and
  one direction draw across clients, so only the batch counts. Intermediates
  that a fused kernel keeps on chip are not counted.

  Returns:
    {"flops_per_round", "bytes_per_round", "flop_count", "byte_count"}.
  """
  n, d = num_clients, (d_in + 1) * c
  if name == "fedavg":
    h, b = cfg.local_steps, cfg.batch_size
    return {"flops_per_round": n * h * b * 4 * d_in * c, "bytes_per_round": n * h * (b * d_in + 2 * d) * 4,
            "flop_count": "N H B 4 d_in C", "byte_count": "N H (B d_in + 2 d) 4"}
  if name == "fedzo":
    h, b1, b2 = cfg.local_steps, cfg.batch_size, cfg.fd_directions
    return {"flops_per_round": n * h * (b2 + 1) * b1 * 2 * d_in * c,
            "bytes_per_round": n * h * (b1 * d_in + 2 * d) * 4,
            "flop_count": "N H (b2 + 1) b1 2 d_in C", "byte_count": "N H (b1 d_in + 2 d) 4"}
  if name in ("decomfl", "hiso"):
    tau, b, evals = cfg.local_steps, cfg.batch_size, cfg.num_perturbations + 1
    return {"flops_per_round": n * tau * evals * b * 2 * d_in * c, "bytes_per_round": n * tau * b * d_in * 4,
            "flop_count": "m tau (P + 1) b 2 d_in C", "byte_count": "m tau b d_in 4"}
  raise ValueError(f"no analytic counts for {name!r}; accepted: fedavg, fedzo, decomfl, hiso")


def binding_roof(flops: float, nbytes: float, seconds: float, flops_per_s: float, bytes_per_s: float) -> dict:
  """The roofline verdict of a kernel that did ``flops`` and moved ``nbytes`` in ``seconds``.

  The binding roof is the one whose lower bound on the time is larger: FLOPs
  (flops / peak FLOP/s) or memory (nbytes / peak bandwidth); ``roof_fraction`` =
  that bound / seconds (1 = at the roof).
  """
  t_flop, t_mem = flops / flops_per_s, nbytes / bytes_per_s
  bound = "flops" if t_flop >= t_mem else "memory"
  return {"bound": bound, "arithmetic_intensity": flops / nbytes if nbytes else None,
          "ridge_intensity": flops_per_s / bytes_per_s, "roof_fraction": max(t_flop, t_mem) / seconds,
          "achieved_flops_per_s": flops / seconds, "achieved_bytes_per_s": nbytes / seconds}


def step_flops(task, batch_size: int, seed: int = 0) -> float:
  """FLOPs of one client's local SGD step (forward and gradient on a batch of ``batch_size``),
  counted by XLA's cost analysis of that step compiled alone."""
  import jax

  from fedsim.algorithms.local import flat_problem
  x0, loss_flat = flat_problem(task, jax.random.key(seed))
  client = jax.tree_util.tree_map(lambda a: a[0], task.client_data)
  batch = task.sample_batch(client, jax.random.key(seed), batch_size)
  step = jax.jit(lambda x, b: x - 0.1 * jax.grad(loss_flat)(x, b))
  cost = step.lower(x0, batch).compile().cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  return float(cost["flops"]) if cost and cost.get("flops") else float("nan")


def fedavg_model_record(model: str, n: int, settings: Settings, peak: dict, bw: dict,
                        log: Callable[[str], None] = print, cnn_impl: str = "gemm") -> dict:
  """FedAvg (lr 0.1, H = 5, B = 20) on the digits ``model`` benchmark task at N clients: the engine's
  achieved FLOP/s (XLA-counted step FLOPs x N H) and its binding roof (bytes: N H (B inputs + 2 d) 4).

  The CNN's FLOPs are counted on its ``xla`` form (a convolution's multiply-adds as XLA counts
  them) whatever ``cnn_impl`` runs, so both implementations are judged on the same count.
  """
  import math as _m

  from experiments.bench import vmap
  from fedsim import algorithms
  task = make_benchmark_task(n, settings.samples_per_client, settings.seed, model=model, cnn_impl=cnn_impl)
  counted = (make_benchmark_task(1, settings.samples_per_client, settings.seed, model=model, cnn_impl="xla")
             if model == "cnn" else task)
  hp = vmap.benchmark_hparams("fedavg")
  hp["clients_per_round"] = n
  alg = algorithms.build("fedavg", task, **hp)
  cfg = alg.hparams
  length = settings.rounds_per_chunk
  run, _ = compile_chunk(alg, task, length, settings.seed)
  h, b = cfg.local_steps, cfg.batch_size
  flops = n * h * step_flops(counted, b, settings.seed)
  inputs = int(_m.prod(task.client_data["x"].shape[2:]))
  nbytes = n * h * (b * inputs + 2 * task.dim) * 4
  t = time_interleaved({"engine": (run, True)}, settings.repeats, settings.min_time)["engine"]
  spr = t["best"] / length
  roof = binding_roof(flops, nbytes, spr, peak["flops_per_s"], bw["bytes_per_s"])
  label = f"fedavg ({model}{', impl=' + cnn_impl if model == 'cnn' and cnn_impl != 'gemm' else ''})"
  rec = {"algorithm": label, "num_clients": n, "dim": task.dim,
         "flop_count": "N H x XLA cost analysis of one client step", "byte_count": "N H (B inputs + 2 d) 4",
         "flops_per_round": flops, "bytes_per_round": nbytes, "seconds_per_round": spr,
         "engine_flops_per_s": flops / spr, "engine_fraction": flops / spr / peak["flops_per_s"],
         "engine_cpu_per_wall": t["cpu_per_wall"], **roof}
  log(f"[roofline {label} N={n} d={task.dim}] engine {flops / spr / 1e9:,.2f} GFLOP/s "
      f"({100 * rec['engine_fraction']:.1f}% of peak); {roof['bound']}-bound (intensity "
      f"{roof['arithmetic_intensity']:.1f} FLOP/B): {100 * roof['roof_fraction']:.1f}% of its roof")
  return rec


def softmax_dims(task):
  import math as _m
  d_in = int(_m.prod(task.client_data["x"].shape[2:]))
  return d_in, int(task.info.get("num_classes", 10))


def _fedavg_kernel(n, b, d_in, c, seed):
  """Blocking workload: the per-client forward + weight gradient of N softmax clients."""
  import jax
  import jax.numpy as jnp
  k = jax.random.split(jax.random.key(seed), 3)
  x = jax.random.normal(k[0], (n, b, d_in), jnp.float32)
  w = 0.01 * jax.random.normal(k[1], (n, d_in, c), jnp.float32)
  y = jax.nn.one_hot(jax.random.randint(k[2], (n, b), 0, c), c)

  @jax.jit
  def step(w, x, y):
    logits = jnp.einsum("nbd,ndc->nbc", x, w)                         # 2 d_in C B per client
    g = jnp.einsum("nbd,nbc->ndc", x, jax.nn.softmax(logits) - y) / b  # 2 d_in C B per client
    return w - 0.1 * g

  return lambda: jax.block_until_ready(step(w, x, y))


SOFTMAX_LAYOUTS = ("batched GEMM", "broadcast-reduce", "clients minor")


def softmax_layouts(n, b, d_in, c, settings: Settings) -> dict:
  """The FedAvg softmax client step (forward and weight gradient, N clients with their own W)
  written in three layouts, timed side by side (layouts before concluding).

  ``batched GEMM``: ``einsum("nbd,ndc->nbc")``, the engine's layout (vmap of a matmul);
  ``broadcast-reduce``: the products broadcast to (N, B, d_in, C) and summed, which XLA fuses
  into one loop; ``clients minor``: the same with the client axis last, so the vector lanes
  run across clients. All three agree to float32 rounding (``max_abs_diff``).

  Returns:
    ``{layout: {"seconds", "flops_per_s"}, "max_abs_diff": float}`` (5 steps per call).
  """
  import jax
  import jax.numpy as jnp
  import numpy as np
  rng = np.random.default_rng(settings.seed)
  x = jnp.asarray(rng.uniform(size=(n, b, d_in)), jnp.float32)
  y = jax.nn.one_hot(rng.integers(0, c, (n, b)), c)
  w = jnp.asarray(0.01 * rng.standard_normal((n, d_in, c)), jnp.float32)

  def gemm(w):
    g = jnp.einsum("nbd,nbc->ndc", x, jax.nn.softmax(jnp.einsum("nbd,ndc->nbc", x, w)) - y) / b
    return w - 0.1 * g

  def bcast(w):
    p = jax.nn.softmax(jnp.sum(x[:, :, :, None] * w[:, None], axis=2)) - y
    return w - 0.1 * jnp.sum(x[:, :, :, None] * p[:, :, None, :], axis=1) / b

  def minor(w):
    xt, yt, wt = jnp.moveaxis(x, 0, -1), jnp.moveaxis(y, 0, -1), jnp.moveaxis(w, 0, -1)
    p = jax.nn.softmax(jnp.sum(xt[:, :, None, :] * wt[None], axis=1), axis=1) - yt   # (B, C, N)
    return jnp.moveaxis(wt - 0.1 * jnp.sum(xt[:, :, None, :] * p[:, None], axis=0) / b, -1, 0)

  fns = {name: jax.jit(lambda w, f=f: jax.lax.fori_loop(0, 5, lambda _, w: f(w), w))
         for name, f in zip(SOFTMAX_LAYOUTS, (gemm, bcast, minor))}
  outs = [fns[name](w) for name in SOFTMAX_LAYOUTS]
  t = time_interleaved({name: (lambda f=f: jax.block_until_ready(f(w)), True) for name, f in fns.items()},
                       settings.repeats, settings.min_time)
  flops = 5 * n * b * 4 * d_in * c
  out = {name: {"seconds": t[name]["best"], "flops_per_s": flops / t[name]["best"]} for name in SOFTMAX_LAYOUTS}
  out["max_abs_diff"] = max(float(jnp.max(jnp.abs(o - outs[0]))) for o in outs[1:])
  return out


def _hiso_kernel(n, b, d_in, c, evals, seed):
  """Blocking workload: ``evals`` forward evaluations per client on (N b, d_in) inputs."""
  import jax
  import jax.numpy as jnp
  k = jax.random.split(jax.random.key(seed), 2)
  x = jax.random.normal(k[0], (n * b, d_in), jnp.float32)
  w = jax.random.normal(k[1], (d_in, evals * c), jnp.float32)

  @jax.jit
  def fwd(x, w):
    return jnp.sum(jax.nn.logsumexp((x @ w).reshape(n * b, evals, c), axis=-1))

  return lambda: jax.block_until_ready(fwd(x, w))


def run(settings: Settings, log: Callable[[str], None] = print) -> dict:
  """Runs the suite; returns ``{"peak": ..., "bandwidth": ..., "records": [...]}``."""
  from experiments.bench import vmap
  from fedsim import algorithms
  n = settings.roofline_clients
  size, nbytes = settings.roof_sizes("roofline")
  peak = matmul_peak(size, settings.repeats, settings.min_time)
  bw = bandwidth_peak(nbytes, settings.repeats, settings.min_time)
  log(f"[roofline] float32 {peak['n']}x{peak['n']} matmul: {peak['flops_per_s'] / 1e9:,.1f} GFLOP/s "
      f"(cpu/wall {peak['cpu_per_wall']:.2f}); memory bandwidth {bw['bytes_per_s'] / 1e9:,.1f} GB/s")
  task = make_benchmark_task(n, settings.samples_per_client, settings.seed)
  d_in, c = softmax_dims(task)
  records = []
  for name in ("fedavg", "decomfl", "hiso"):
    hp = vmap.benchmark_hparams(name)
    hp["clients_per_round"] = n
    alg = algorithms.build(name, task, **hp)
    cfg = alg.hparams
    length = settings.rounds_per_chunk
    run, _ = compile_chunk(alg, task, length, settings.seed)
    counts = round_counts(name, cfg, n, d_in, c)
    flops = counts["flops_per_round"]
    if name == "fedavg":
      b = cfg.batch_size
      kernel, kflops = _fedavg_kernel(n, b, d_in, c, settings.seed), n * b * 4 * d_in * c
    else:
      b, evals = cfg.batch_size, cfg.num_perturbations + 1
      kernel, kflops = _hiso_kernel(n, b, d_in, c, evals, settings.seed), n * evals * b * 2 * d_in * c
    t = time_interleaved({"engine": (run, True), "kernel": (kernel, True)}, settings.repeats, settings.min_time)
    spr = t["engine"]["best"] / length
    eng, ker = flops / spr, kflops / t["kernel"]["best"]
    roof = binding_roof(flops, counts["bytes_per_round"], spr, peak["flops_per_s"], bw["bytes_per_s"])
    rec = {"algorithm": name, "num_clients": n, **counts,
           "seconds_per_round": spr, "engine_flops_per_s": eng, "engine_fraction": eng / peak["flops_per_s"],
           "kernel_flops": kflops, "kernel_seconds": t["kernel"]["best"], "kernel_flops_per_s": ker,
           "kernel_fraction": ker / peak["flops_per_s"], "engine_cpu_per_wall": t["engine"]["cpu_per_wall"],
           "kernel_cpu_per_wall": t["kernel"]["cpu_per_wall"], **roof}
    records.append(rec)
    log(f"[roofline {name} N={n}] engine {eng / 1e9:,.2f} GFLOP/s ({100 * rec['engine_fraction']:.1f}% of "
        f"peak), kernel alone {ker / 1e9:,.2f} GFLOP/s ({100 * rec['kernel_fraction']:.1f}%); "
        f"{roof['bound']}-bound (intensity {roof['arithmetic_intensity']:.1f} FLOP/B, ridge "
        f"{roof['ridge_intensity']:.1f}): {100 * roof['roof_fraction']:.1f}% of its roof; cpu/wall "
        f"{t['engine']['cpu_per_wall']:.2f}")

  # FedAvg on the MLP and CNN (issue 17): FLOPs of a client step from XLA's cost analysis.
  for model in ("mlp", "cnn"):
    records.append(fedavg_model_record(model, n, settings, peak, bw, log))
  # The CNN's flax nn.Conv form, the engine's layout before the patches GEMM (fedsim.models.cnn).
  records.append(fedavg_model_record("cnn", n, settings, peak, bw, log, cnn_impl="xla"))
  layouts = softmax_layouts(n, vmap.benchmark_hparams("fedavg")["batch_size"], d_in, c, settings)
  log(f"[roofline softmax layouts N={n}] " + ", ".join(
      f"{k} {layouts[k]['flops_per_s'] / 1e9:,.2f} GFLOP/s" for k in SOFTMAX_LAYOUTS))

  # Per-client-direction ZO: the generator bound.
  hp = vmap.benchmark_hparams("fedzo")
  hp["clients_per_round"] = n
  alg = algorithms.build("fedzo", task, **hp)
  cfg = alg.hparams
  run, _ = compile_chunk(alg, task, settings.rounds_per_chunk, settings.seed)
  per_round = n * cfg.local_steps * cfg.fd_directions * task.dim
  raw, law, ninfo = vmap.prepare_normals(per_round, task.dim, cfg.fd_directions, cfg.direction, settings,
                                         steps_per_call=n)
  warm = ninfo["count"] <= vmap.MAX_PIECE * 4
  t = time_interleaved({"engine": (run, True), "raw": (raw, warm)}, settings.repeats, settings.min_time)
  length = settings.rounds_per_chunk
  eng = per_round / (t["engine"]["best"] / length)
  rawr = ninfo["count"] / t["raw"]["best"]
  ratio = paired_median([per_round * length / s for s in t["engine"]["seconds"]],
                        [ninfo["count"] / s for s in t["raw"]["seconds"]])
  records.append({"algorithm": "fedzo", "num_clients": n, "direction": cfg.direction,
                  "normals_per_round": per_round, "seconds_per_round": t["engine"]["best"] / length,
                  "engine_normals_per_s": eng, "raw_normals_per_s": rawr, "fraction": ratio,
                  "engine_cpu_per_wall": t["engine"]["cpu_per_wall"], "raw_cpu_per_wall": t["raw"]["cpu_per_wall"]})
  log(f"[roofline fedzo N={n}] directions {eng / 1e6:,.1f} M normals/s in the engine vs raw "
      f"jax.random.normal {rawr / 1e6:,.1f} M/s: {100 * ratio:.0f}%")
  return {"peak": peak, "bandwidth": bw, "records": records, "softmax_layouts": layouts}


def markdown(result: dict) -> str:
  """The suite's markdown table."""
  p = result["peak"]
  bw = result.get("bandwidth")
  rows = [f"float32 {p['n']}x{p['n']} matmul: {p['flops_per_s'] / 1e9:,.1f} GFLOP/s (cpu/wall "
          f"{p['cpu_per_wall']:.2f})" + (f"; memory bandwidth {bw['bytes_per_s'] / 1e9:,.1f} GB/s "
                                         f"(2 x {bw['array_bytes'] / 2**20:,.0f} MiB scale)" if bw else "") + "\n",
          "| algorithm | N | FLOPs counted | s/round | engine GFLOP/s | % of matmul | kernel alone GFLOP/s "
          "| % of matmul | bound (FLOP/B vs ridge) | % of binding roof |", "|" + "---|" * 10]
  for r in result["records"]:
    if r["algorithm"] == "fedzo":
      continue
    bound = (f"{r['bound']} ({r['arithmetic_intensity']:.1f} vs {r['ridge_intensity']:.1f})"
             if "bound" in r else "n/a")
    frac = f"{100 * r['roof_fraction']:.1f}" if "roof_fraction" in r else "n/a"
    kernel = (f"{r['kernel_flops_per_s'] / 1e9:,.2f} | {100 * r['kernel_fraction']:.1f}" if "kernel_flops_per_s" in r
              else "n/a | n/a")
    rows.append(f"| {r['algorithm']} | {r['num_clients']} | {r['flop_count']} | {r['seconds_per_round']:.4g} "
                f"| {r['engine_flops_per_s'] / 1e9:,.2f} | {100 * r['engine_fraction']:.1f} "
                f"| {kernel} | {bound} | {frac} |")
  for r in result["records"]:
    if r["algorithm"] == "fedzo":
      rows.append(f"\nfedzo N={r['num_clients']} ({r['direction']} directions): engine "
                  f"{r['engine_normals_per_s'] / 1e6:,.1f} M normals/s, raw jax.random.normal "
                  f"{r['raw_normals_per_s'] / 1e6:,.1f} M/s: {100 * r['fraction']:.0f}% (target >= 70%)")
  lay = result.get("softmax_layouts")
  if lay:
    rows.append("\nFedAvg softmax client step (forward + weight gradient) in three layouts: " + ", ".join(
        f"{k} {lay[k]['flops_per_s'] / 1e9:,.2f} GFLOP/s" for k in SOFTMAX_LAYOUTS)
        + f" (max |difference| {lay['max_abs_diff']:.1e})")
  return "\n".join(rows) + "\n"
