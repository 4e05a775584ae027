r"""FedLRGD's simulation suite (specs/fedlrgd.md §3.3; the paper runs none).

Float64 (x64 is enabled at start-up: cond(G^(i)) reaches 1e7 at r ~ 8), except
the float32 runs of ``--study=precision`` (a scoped ``jax.enable_x64(False)``).

``--study=fidelity`` (S2): soft-label logistic regression; per seed one task
with the largest rank's server pool; every r of ``--ranks`` is a server mask of
that pool, and all r run in one ``vmap`` (one compilation). Per (seed, r): the
median / max relative gradient error ||grad^F - grad F|| / ||grad F|| over
``--num_thetas`` points theta ~ U[-1,1]^p, the error at the anchors, cond(G^(i)),
and FedLRGD's gap F(theta^(S)) - F_* after S = ``--rounds`` steps of 1/L1.

``--study=convergence`` (S3): F - F_* against the oracle complexity Gamma of
Definition 1 for phi in ``--phis`` and m in ``--clients_list``: FedLRGD for each
r of ``--ranks``, exact GD and FedAve (b in ``--fedave_local_steps``), each
through ``fedsim.core.simulate`` with :func:`fedsim.algorithms.fedlrgd.with_ledger_metrics`.
One run per algorithm gives Gamma for every phi (Gamma = compute + phi uploads).
FedLRGD with rank r is scored on its own instance (n = m s + r); GD and FedAve
on the instance with r = ``--reference_rank``.

``--study=crossover`` (S5): for each (d, eta) of ``--crossover_dims`` x
``--crossover_etas`` (Hölder features ||u - c_j||^eta of raw points u in
[0,1]^d), the smallest Gamma(FedLRGD) = r^2 + r s + r S + phi m r over r (S =
the first step with gap <= eps) and the smallest Gamma(FedAve) = T (b + phi m)
over b (T = the first epoch with gap <= eps), for phi in ``--phis`` and eps in
``--eps``; the table marks where FedLRGD's Gamma is below FedAve's and
Proposition 1's prediction (eta > (8/3 + 2 alpha + 2) d, alpha = 1). Both
methods start from the same theta^(0) (the engine's: ``init_params`` of the
run's init stream; FedLRGD's anchors are the engine's too), and FedAve's gap is
measured on the instance of FedLRGD's best rank r (same r server samples, n = m
s + r, same F_*; FedAve never reads the server samples, so one run is scored on
every instance); :func:`crossover_runs` checks that their round-0 gaps agree.

``--study=precision``: FedLRGD in float32 against float64 on the fidelity
setting, per r of ``--ranks`` and seed: the engine's FedLRGD (``init``: float64
weight solve, whatever the precision) built once with x64 off (scoped) and
once with x64 on, plus the float32 run with a float32 solve of the same
system (the behaviour before the float64 set-up); the median relative
gradient error over ``--num_thetas`` points and the gap after S = ``--rounds``
steps (F evaluated in float64 on the host).

  python -m experiments.fedlrgd.suite --flagfile=experiments/flagfiles/fedlrgd_s2_fidelity.cfg

Writes ``results.json`` and a plot (``fidelity.png``, ``convergence.png``) or
``crossover.md`` under ``--output_dir``; prints a table.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time

import numpy as np
from absl import app, flags, logging

from fedsim.runner import series_style

FLAGS = flags.FLAGS
STUDIES = ("fidelity", "convergence", "crossover", "precision")


def define_flags():
  flags.DEFINE_string("study", "fidelity", f"which study: {', '.join(STUDIES)}")
  flags.DEFINE_integer("num_clients", 50, "m (fidelity, crossover)")
  flags.DEFINE_list("clients_list", ["100", "1000"], "m values (convergence)")
  flags.DEFINE_integer("samples_per_client", 40, "s")
  flags.DEFINE_integer("num_features", 2, "p")
  flags.DEFINE_float("l2_penalty", 0.1, "mu")
  flags.DEFINE_float("data_heterogeneity", 0.0, "h in [0,1): client sub-boxes")
  flags.DEFINE_float("server_shift", 0.0, "delta in [0,1): server/client covariate shift")
  flags.DEFINE_string("feature_map", "identity", "identity, holder (fidelity, convergence)")
  flags.DEFINE_float("holder_eta", 2.5, "Hölder order of --feature_map=holder")
  flags.DEFINE_integer("raw_dim", 1, "raw dimension of --feature_map=holder")
  flags.DEFINE_list("ranks", ["2", "4", "8", "10", "16"], "ranks r (one vmap)")
  flags.DEFINE_integer("reference_rank", 8, "server samples of the instance GD / FedAve are scored on")
  flags.DEFINE_integer("rounds", 300, "S, FedLRGD / GD steps (T for GD)")
  flags.DEFINE_integer("seeds", 10, "seeds 0..seeds-1 (fidelity)")
  flags.DEFINE_integer("seed", 0, "seed (convergence, crossover)")
  flags.DEFINE_integer("num_thetas", 20, "random theta per seed for the gradient error (fidelity)")
  flags.DEFINE_list("phis", ["10", "100", "1000"], "phi values of the ledger")
  flags.DEFINE_list("fedave_local_steps", ["10", "40"], "FedAve b values")
  flags.DEFINE_list("fedave_lrs", ["fedpaq"], "FedAve step schedules: fedpaq, or constant steps as numbers, "
                    "or L1 for 1/L1 (crossover: the best (b, step, T) is kept)")
  flags.DEFINE_integer("fedave_rounds", 300, "FedAve epochs T")
  flags.DEFINE_integer("eval_every", 5, "rounds between evaluations (convergence, crossover FedAve)")
  flags.DEFINE_list("eps", ["1e-3", "1e-5"], "accuracies eps (crossover)")
  flags.DEFINE_list("crossover_dims", ["1", "2"], "raw data dimensions d (crossover)")
  flags.DEFINE_list("crossover_etas", ["0.5", "1.5", "2.5", "4.5", "8.5"], "Hölder orders eta (crossover)")
  flags.DEFINE_string("output_dir", "runs/fedlrgd_suite", "where results go")


def _ints(name):
  return [int(v) for v in FLAGS[name].value]


def _floats(name):
  return [float(v) for v in FLAGS[name].value]


def validate():
  from fedsim.core.errors import ConfigError
  if FLAGS.study not in STUDIES:
    raise ConfigError("study", f"unknown {FLAGS.study!r}; accepted: {', '.join(STUDIES)}")
  for name in ("ranks", "clients_list", "fedave_local_steps", "crossover_dims"):
    try:
      vals = _ints(name)
    except ValueError:
      raise ConfigError(name, f"must be a list of integers; got {FLAGS[name].value}") from None
    if not vals or min(vals) < 1:
      raise ConfigError(name, f"must be a non-empty list of integers >= 1; got {vals}")
  for name in ("phis", "eps", "crossover_etas"):
    try:
      vals = _floats(name)
    except ValueError:
      raise ConfigError(name, f"must be a list of numbers; got {FLAGS[name].value}") from None
    if not vals or min(vals) < 0 or (name != "phis" and min(vals) <= 0):
      raise ConfigError(name, f"must be a non-empty list of {'>= 0' if name == 'phis' else '> 0'}; got {vals}")
  for name in ("num_clients", "samples_per_client", "num_features", "rounds", "seeds", "num_thetas",
               "fedave_rounds", "eval_every", "raw_dim", "reference_rank"):
    if FLAGS[name].value < 1:
      raise ConfigError(name, f"must be >= 1; got {FLAGS[name].value}")
  if not FLAGS.l2_penalty > 0:
    raise ConfigError("l2_penalty", f"must be > 0; got {FLAGS.l2_penalty}")
  for name in ("data_heterogeneity", "server_shift"):
    if not 0 <= FLAGS[name].value < 1:
      raise ConfigError(name, f"must be in [0, 1); got {FLAGS[name].value}")
  for v in FLAGS.fedave_lrs:
    if v not in ("fedpaq", "L1"):
      try:
        ok = float(v) > 0
      except ValueError:
        ok = False
      if not ok:
        raise ConfigError("fedave_lrs", f"entries must be fedpaq, L1 or a positive number; got {v!r}")
  if FLAGS.feature_map not in ("identity", "holder"):
    raise ConfigError("feature_map", f"unknown {FLAGS.feature_map!r}; accepted: identity, holder")


def _task(seed, R, m=None, **over):
  from fedsim.tasks.logistic_soft import make_smooth_erm_task
  kw = dict(num_clients=m or FLAGS.num_clients, samples_per_client=FLAGS.samples_per_client,
            num_features=FLAGS.num_features, server_samples=R, max_rank=R, mu=FLAGS.l2_penalty,
            heterogeneity=FLAGS.data_heterogeneity, server_shift=FLAGS.server_shift,
            feature_map=FLAGS.feature_map, holder_eta=FLAGS.holder_eta, raw_dim=FLAGS.raw_dim, seed=seed)
  kw.update(over)
  return make_smooth_erm_task("logistic_soft", **kw)


def rank_sweep_fn(mu: float, num_steps: int):
  """One jitted, r-vmapped FedLRGD evaluation: ``fn(masks (K, R), data, anchors, thetas, theta0,
  step, f_stars (K,))`` -> dict of (K, ...) arrays (errors, cond, gap trajectory)."""
  import jax
  import jax.numpy as jnp

  from fedsim.algorithms import fedlrgd as fl
  from fedsim.tasks.logistic_soft import LOSSES, pooled_objective_and_grad
  def loss(theta, ex):
    return LOSSES["logistic_soft"](theta, ex, mu)
  grad_f = jax.grad(loss)
  objective = jax.vmap(lambda th, d: pooled_objective_and_grad(loss, th, d)[0], in_axes=(0, None))

  def one(mask, data, anchors, thetas, theta0, step, f_star):
    d = {**data, "server": {**data["server"], "mask": mask}}
    res = fl.setup(grad_f, d, anchors)
    err = fl.relative_errors(grad_f, d, res.weights, thetas)
    aerr = jnp.where(mask, fl.relative_errors(grad_f, d, res.weights, anchors), 0.0)
    path, err_sq = fl.inexact_gd(grad_f, d, res.weights, theta0, step, num_steps)
    gaps = objective(path, d) - f_star
    gnorm = jax.vmap(lambda th: jnp.linalg.norm(fl.exact_grad(grad_f, th, d)))(path[:-1])
    return {"err_median": jnp.median(err), "err_max": jnp.max(err), "anchor_err_max": jnp.max(aerr),
            "cond_max": jnp.max(res.cond), "cond_median": jnp.median(res.cond),
            "sigma_min": jnp.min(res.sigma_min), "gaps": gaps,
            "path_err_median": jnp.median(jnp.sqrt(err_sq) / gnorm)}

  return jax.jit(jax.vmap(one, in_axes=(0, None, None, None, None, None, 0)))


def _masks_and_fstars(task, ranks):
  from fedsim.tasks.logistic_soft import with_server_size
  R = task.data["server"]["mask"].shape[0]
  masks = np.stack([np.arange(R) < r for r in ranks])
  f_stars = np.array([with_server_size(task, r).info["F_star"] for r in ranks])
  return masks, f_stars


def fidelity():
  import jax
  import jax.numpy as jnp
  ranks, S, p = _ints("ranks"), FLAGS.rounds, FLAGS.num_features
  fn = rank_sweep_fn(FLAGS.l2_penalty, S)
  per_seed = []
  for seed in range(FLAGS.seeds):
    task = _task(seed, max(ranks))
    masks, f_stars = _masks_and_fstars(task, ranks)
    R = masks.shape[1]
    anchors = jax.random.uniform(jax.random.key(1000 + seed), (R, p), jnp.float64, -1.0, 1.0)
    thetas = jax.random.uniform(jax.random.key(2000 + seed), (FLAGS.num_thetas, p), jnp.float64, -1.0, 1.0)
    theta0 = task.init_params(jax.random.key(seed))
    out = jax.device_get(fn(jnp.asarray(masks), task.data, anchors, thetas, theta0,
                            1.0 / task.info["L1"], jnp.asarray(f_stars)))
    per_seed.append({k: np.asarray(v) for k, v in out.items()})
  def agg(k):
    return np.stack([o[k] for o in per_seed])  # (seeds, K, ...)
  final_gap = np.nan_to_num(agg("gaps")[:, :, -1], nan=np.inf)   # diverged runs count as inf
  rows = []
  for j, r in enumerate(ranks):
    rows.append({"r": r, "median_of_median_rel_err": float(np.median(agg("err_median")[:, j])),
                 "median_max_rel_err": float(np.median(agg("err_max")[:, j])),
                 "max_anchor_rel_err": float(np.max(agg("anchor_err_max")[:, j])),
                 "median_path_rel_err": float(np.median(agg("path_err_median")[:, j])),
                 "median_cond_max": float(np.median(agg("cond_max")[:, j])),
                 "frac_seeds_gap_le_1e-5": float(np.mean(final_gap[:, j] <= 1e-5)),
                 "median_final_gap": float(np.median(final_gap[:, j])),
                 "max_final_gap": float(np.max(final_gap[:, j]))})
  print("| r | median-of-median rel. error | max anchor error | median cond max | seeds gap <= 1e-5 | median gap |")
  print("|---|---|---|---|---|---|")
  for row in rows:
    print(f"| {row['r']} | {row['median_of_median_rel_err']:.2e} | {row['max_anchor_rel_err']:.1e} | "
          f"{row['median_cond_max']:.1e} | {row['frac_seeds_gap_le_1e-5']:.1f} | {row['median_final_gap']:.1e} |")
  _plot_fidelity(rows, agg("gaps"), ranks)
  return {"rows": rows, "final_gap": final_gap.tolist(), "err_median": agg("err_median").tolist()}


def _plot_fidelity(rows, gaps, ranks):
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.5))
  a.semilogy([r["r"] for r in rows], [r["median_of_median_rel_err"] for r in rows], "o-", label="median")
  a.semilogy([r["r"] for r in rows], [r["median_max_rel_err"] for r in rows], "s--", label="max (median over seeds)")
  a.set_xlabel("r")
  a.set_ylabel("||grad^F - grad F|| / ||grad F||")
  a.legend(fontsize=7)
  med = np.median(np.maximum(gaps, 1e-17), axis=0)
  for j, r in enumerate(ranks):
    b.semilogy(med[j], **series_style(j, len(med[j])), label=f"r={r}")
  b.set_xlabel("GD step")
  b.set_ylabel("F - F_* (median over seeds)")
  b.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(os.path.join(FLAGS.output_dir, "fidelity.png"), dpi=120)
  plt.close(fig)


def with_instance_gaps(task, masks, f_stars):
  """``task`` whose ``evaluate`` also reports ``gap_j`` = F_j(theta) - F*_j for every instance j:
  the same clients and server pool with server mask ``masks[j]`` (r_j server samples, n_j = m s
  + r_j, eq. (3)) and optimum ``f_stars[j]``. Lets one FedAve run (which never reads the server
  samples) be scored on the instance of each FedLRGD rank."""
  import dataclasses

  import jax
  import jax.numpy as jnp

  from fedsim.tasks.logistic_soft import pooled_objective_and_grad
  masks, f_stars = jnp.asarray(masks), jnp.asarray(f_stars)

  def evaluate(params, data):
    out = dict(task.evaluate(params, data))
    def objective(mask):
      return pooled_objective_and_grad(
          task.per_example_loss, params, {**data, "server": {**data["server"], "mask": mask}})[0]
    gaps = jax.vmap(objective)(masks) - f_stars.astype(params.dtype)
    out.update({f"gap_{j}": gaps[j] for j in range(masks.shape[0])})
    return out

  return dataclasses.replace(task, evaluate=evaluate)


def _run_engine(name, task, rounds, eval_every, seed, instances=None, **hp):
  """Records (round, gap, oracle_compute, oracle_uploads) of one engine run; with
  ``instances`` = (masks (K, R), f_stars (K,)), also ``gaps`` (K,) on every instance
  (:func:`with_instance_gaps`)."""
  import jax

  from fedsim import algorithms
  from fedsim.algorithms import fedlrgd as fl
  from fedsim.core import simulate
  from fedsim.core.errors import DivergenceError
  alg = algorithms.build(name, task, **hp)
  scored = with_instance_gaps(task, *instances) if instances is not None else task
  alg, task_l = fl.with_ledger_metrics(alg, scored, 0.0)
  recs = []
  try:
    simulate(alg, task_l, rounds, eval_every, jax.random.key(seed), on_eval=recs.append)
  except DivergenceError:
    pass
  out = [{"round": r["round"], "gap": r["optimality_gap"], "compute": r["oracle_compute"],
          "uploads": r["oracle_uploads"]} for r in recs]
  if instances is not None:
    for o, r in zip(out, recs):
      o["gaps"] = [r[f"gap_{j}"] for j in range(len(instances[1]))]
  return out


def engine_start(task, seed):
  """(theta^(0) (p,), anchors (R, p)) of an engine run with root key ``jax.random.key(seed)``:
  every algorithm's theta^(0) is ``task.init_params`` of the run's init stream, and FedLRGD's
  anchors are :func:`fedsim.algorithms.fedlrgd.draw_anchors` (U[-1,1]^p) of its sub-stream."""
  import jax
  from jax.flatten_util import ravel_pytree

  from fedsim.algorithms import fedlrgd as fl
  from fedsim.core import rng
  init_key, _ = rng.init_keys(jax.random.key(seed))
  theta0, _ = ravel_pytree(task.init_params(init_key))
  R = task.data["server"]["mask"].shape[0]
  return theta0, fl.draw_anchors(fl.anchor_key(init_key), theta0, R, "uniform", 1.0)


def crossover_runs(task, ranks, seed, num_steps, fedave_settings, fedave_rounds, eval_every, mu):
  """FedLRGD for every rank and FedAve for every setting on one task, scored on the same instances.

  Both methods start from the same theta^(0) (:func:`engine_start`), and for every r of
  ``ranks`` both are scored on the same instance: r server samples, n = m s + r, its own F_*.

  Args:
    task: a logistic_soft task with a server pool of R >= max(ranks).
    ranks: the K ranks r.
    seed: the root seed of the runs.
    num_steps: S, FedLRGD's GD steps.
    fedave_settings: {label: FedAve hyperparameters}.
    fedave_rounds, eval_every: FedAve's epochs and evaluation period.
    mu: the task's L2 weight.

  Returns:
    dict: ``theta0`` (p,), ``fedlrgd_gaps`` (K, S+1) (F - F_* on instance r after 0..S
    steps), ``fedave`` {label: records with ``round`` and ``gaps`` (K,)}.

  Raises:
    RuntimeError: the two methods' round-0 gaps differ (not the same start or instances).
  """
  import jax.numpy as jnp
  masks, f_stars = _masks_and_fstars(task, ranks)
  theta0, anchors = engine_start(task, seed)
  fn = rank_sweep_fn(mu, num_steps)
  out = fn(jnp.asarray(masks), task.data, anchors, anchors[:1], theta0, 1.0 / task.info["L1"],
           jnp.asarray(f_stars))
  gaps = np.asarray(out["gaps"])                                   # (K, S+1)
  fedave = {label: _run_engine("fedave", task, fedave_rounds, eval_every, seed,
                               instances=(masks, f_stars), **hp)
            for label, hp in fedave_settings.items()}
  for label, recs in fedave.items():
    if not np.allclose(recs[0]["gaps"], gaps[:, 0], rtol=1e-9, atol=1e-12):
      raise RuntimeError(f"fedave {label} and fedlrgd start from different F - F_*: "
                         f"{recs[0]['gaps']} vs {gaps[:, 0].tolist()}")
  return {"theta0": np.asarray(theta0), "fedlrgd_gaps": gaps, "fedave": fedave}


def convergence():
  from fedsim.tasks.logistic_soft import with_server_size
  ranks, phis = _ints("ranks"), _floats("phis")
  out = {}
  for m in _ints("clients_list"):
    base = _task(FLAGS.seed, max(ranks + [FLAGS.reference_rank]), m=m)
    ref = with_server_size(base, FLAGS.reference_rank)
    runs = {}
    for r in ranks:
      runs[f"fedlrgd r={r}"] = _run_engine("fedlrgd", with_server_size(base, r), FLAGS.rounds,
                                           FLAGS.eval_every, FLAGS.seed)
    runs["gd"] = _run_engine("gd", ref, FLAGS.rounds, FLAGS.eval_every, FLAGS.seed)
    for b in _ints("fedave_local_steps"):
      runs[f"fedave b={b}"] = _run_engine("fedave", ref, FLAGS.fedave_rounds, FLAGS.eval_every,
                                          FLAGS.seed, local_steps=b)
    out[str(m)] = runs
    for name, recs in runs.items():
      last = recs[-1]
      gam = ", ".join(f"phi={phi:g}: {last['compute'] + phi * last['uploads']:.3g}" for phi in phis)
      print(f"[m={m}] {name}: round {last['round']} gap {last['gap']:.2e}; Gamma {gam}", flush=True)
  _plot_convergence(out, phis)
  return out


def _plot_convergence(out, phis):
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  ms = list(out)
  fig, axes = plt.subplots(len(ms), len(phis), figsize=(4 * len(phis), 3.2 * len(ms)), squeeze=False)
  for i, m in enumerate(ms):
    for j, phi in enumerate(phis):
      ax = axes[i, j]
      for k, (name, recs) in enumerate(out[m].items()):
        g = [r["compute"] + phi * r["uploads"] for r in recs if r["round"] > 0]
        y = [max(r["gap"], 1e-16) for r in recs if r["round"] > 0]
        ax.loglog(g, y, **series_style(k, len(g)), label=name)
      ax.set_title(f"m={m}, phi={phi:g}", fontsize=9)
      ax.set_xlabel("Gamma (Definition 1)")
      ax.set_ylabel("F - F_*")
  axes[0, 0].legend(fontsize=6)
  fig.tight_layout()
  fig.savefig(os.path.join(FLAGS.output_dir, "convergence.png"), dpi=120)
  plt.close(fig)


def _fedave_step(lr, task):
  """FedAve hyperparameters of a ``--fedave_lrs`` entry."""
  if lr == "fedpaq":
    return {"lr_schedule": "fedpaq"}
  return {"lr_schedule": "constant", "lr": 1.0 / task.info["L1"] if lr == "L1" else float(lr)}


def _first(values, eps):
  idx = np.flatnonzero(np.asarray(values) <= eps)
  return int(idx[0]) if idx.size else None


def crossover_row(gaps, fedave, ranks, s, m, phi, eps):
  """One crossover cell: the cheapest FedLRGD and FedAve runs that reach F - F_* <= eps.

  FedLRGD: min over r of Gamma = r^2 + r s + r S + phi m r (Theorem 2's count), S = the first
  step with gap <= eps on instance r. FedAve: min over its settings of Gamma = T (b + phi m)
  (App. D, tau = 1), T = the first evaluated epoch with gap <= eps on the instance of FedLRGD's
  best r (the largest r if FedLRGD never reaches eps).

  Args:
    gaps: (K, S+1) FedLRGD gaps per rank; fedave: {(b, step): records with ``round``, ``gaps`` (K,)};
    ranks: the K ranks; s, m: samples per client, clients; phi, eps: Definition 1's phi, accuracy.

  Returns:
    dict: server_samples, fedlrgd {gamma, r, S} or None, fedave {gamma, b, T, step} or None,
    ratio (0 / inf / nan when one / the other / both never reach eps), fedlrgd_wins.
  """
  from fedsim.algorithms import theory_fedlrgd as th
  best_lr = None
  for j, r in enumerate(ranks):
    S_r = _first(gaps[j], eps)
    if S_r is not None:
      g = th.gamma_fedlrgd(r, s, S_r, phi, m)
      if best_lr is None or g < best_lr[0]:
        best_lr = (g, r, S_r)
  j_inst = ranks.index(best_lr[1]) if best_lr else len(ranks) - 1
  best_fa = None
  for (b, lr), recs in fedave.items():
    T = _first([rec["gaps"][j_inst] for rec in recs], eps)
    if T is not None:
      T = recs[T]["round"]
      g = th.gamma_fedave(T, b, phi, 1.0, m)
      if best_fa is None or g < best_fa[0]:
        best_fa = (g, b, T, lr)
  ratio = best_lr[0] / best_fa[0] if best_lr and best_fa else (
      0.0 if best_lr else math.inf if best_fa else math.nan)
  return {"server_samples": ranks[j_inst],
          "fedlrgd": best_lr and {"gamma": best_lr[0], "r": best_lr[1], "S": best_lr[2]},
          "fedave": best_fa and {"gamma": best_fa[0], "b": best_fa[1], "T": best_fa[2], "step": best_fa[3]},
          "ratio": ratio, "fedlrgd_wins": bool(ratio < 1)}


def crossover():
  from fedsim.algorithms import theory_fedlrgd as th
  ranks, phis, epss = _ints("ranks"), _floats("phis"), _floats("eps")
  m, s = FLAGS.num_clients, FLAGS.samples_per_client
  rows = []
  for d in _ints("crossover_dims"):
    for eta in _floats("crossover_etas"):
      t0 = time.perf_counter()
      task = _task(FLAGS.seed, max(ranks), feature_map="holder", holder_eta=eta, raw_dim=d)
      settings = {(b, lr): dict(local_steps=b, **_fedave_step(lr, task))
                  for b in _ints("fedave_local_steps") for lr in FLAGS.fedave_lrs}
      res = crossover_runs(task, ranks, FLAGS.seed, FLAGS.rounds, settings, FLAGS.fedave_rounds,
                           FLAGS.eval_every, FLAGS.l2_penalty)
      gaps, fedave = res["fedlrgd_gaps"], res["fedave"]
      for eps in epss:
        for phi in phis:
          row = crossover_row(gaps, fedave, ranks, s, m, phi, eps)
          rows.append({"d": d, "eta": eta, "phi": phi, "eps": eps, **row,
                       "prop1_predicts_win": th.proposition1_predicts_win(d, eta)})
      print(f"[crossover] d={d} eta={eta}: {time.perf_counter() - t0:.1f}s", flush=True)
  lines = ["| d | eta | phi | eps | server samples | FedLRGD (r, S) | Gamma FedLRGD | FedAve (b, T, step) | "
           "Gamma FedAve | ratio | FedLRGD below | Prop. 1 predicts |", "|" + "---|" * 12]
  def fmt(x, keys):
    return "-" if not x else "(" + ", ".join(str(x[k]) for k in keys) + ")"
  for row in rows:
    lines.append(f"| {row['d']} | {row['eta']:g} | {row['phi']:g} | {row['eps']:g} | {row['server_samples']} | "
                 f"{fmt(row['fedlrgd'], ('r', 'S'))} | {row['fedlrgd']['gamma'] if row['fedlrgd'] else math.inf:.3g} | "
                 f"{fmt(row['fedave'], ('b', 'T', 'step'))} | "
                 f"{row['fedave']['gamma'] if row['fedave'] else math.inf:.3g} | "
                 f"{row['ratio']:.3g} | {'yes' if row['fedlrgd_wins'] else 'no'} | "
                 f"{'yes' if row['prop1_predicts_win'] else 'no'} |")
  table = "\n".join(lines)
  print(table)
  with open(os.path.join(FLAGS.output_dir, "crossover.md"), "w") as f:
    f.write(table + "\n")
  return {"rows": rows}


def precision():
  import jax
  import jax.numpy as jnp

  from fedsim import algorithms
  from fedsim.algorithms import fedlrgd as fl
  from fedsim.core import engine
  from fedsim.tasks.logistic_soft import LOSSES, logistic_objective_np, with_server_size
  ranks, S = _ints("ranks"), FLAGS.rounds
  grad_f = jax.grad(lambda th, ex: LOSSES["logistic_soft"](th, ex, FLAGS.l2_penalty))
  errors = jax.jit(lambda d, W, th: fl.relative_errors(grad_f, d, W, th))
  solve32 = jax.jit(lambda d, a: fl.setup(grad_f, d, a).weights)
  final = jax.jit(lambda d, W, th0, step: fl.inexact_gd(grad_f, d, W, th0, step, S)[0][-1])
  runs = {}
  for seed in range(FLAGS.seeds):
    for x64 in (False, True):
      with jax.enable_x64(x64):
        base = _task(seed, max(ranks))
        dt = base.data["server"]["x"].dtype
        thetas = jax.random.uniform(jax.random.key(2000 + seed), (FLAGS.num_thetas, FLAGS.num_features),
                                    jnp.float32, -1.0, 1.0).astype(dt)
        for r in ranks:
          task = with_server_size(base, r)
          state = engine.init_state(algorithms.build("fedlrgd", task), jax.random.key(seed))
          d = task.data
          def pooled(a, b, r=r):
            return np.concatenate([np.asarray(a, np.float64)[:r],
                                   np.asarray(b, np.float64).reshape(-1, *np.shape(a)[1:])])
          x = pooled(d["server"]["x"], d["clients"]["x"])
          y = pooled(d["server"]["y"], d["clients"]["y"])
          variants = {"float64": state.weights} if x64 else {
              "float32": state.weights, "float32, float32 solve": solve32(d, state.anchors)}
          for name, W in variants.items():
            th = np.asarray(final(d, W, state.theta, 1.0 / task.info["L1"]), np.float64)
            runs.setdefault((r, name), []).append(
                (float(jnp.median(errors(d, W, thetas))),
                 logistic_objective_np(th, x, y, FLAGS.l2_penalty) - task.info["F_star"]))
  rows = []
  print("| r | run | median rel. gradient error | median final gap | max final gap |")
  print("|---|---|---|---|---|")
  for (r, name), v in sorted(runs.items()):
    v = np.asarray(v)
    rows.append({"r": r, "run": name, "median_rel_err": float(np.median(v[:, 0])),
                 "median_final_gap": float(np.median(v[:, 1])), "max_final_gap": float(np.max(v[:, 1])),
                 "rel_err_per_seed": [float(e) for e in v[:, 0]]})  # seed 0, 1, ...: paired across runs
    print(f"| {r} | {name} | {rows[-1]['median_rel_err']:.1e} | {rows[-1]['median_final_gap']:.1e} | "
          f"{rows[-1]['max_final_gap']:.1e} |")
  return {"rows": rows}


def main(argv):
  del argv
  if not FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)
  from fedsim.core.errors import ConfigError
  try:
    validate()
  except ConfigError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
  import jax
  jax.config.update("jax_enable_x64", True)   # this binary only; before any array exists
  os.makedirs(FLAGS.output_dir, exist_ok=True)
  t0 = time.perf_counter()
  result = {"fidelity": fidelity, "convergence": convergence, "crossover": crossover,
            "precision": precision}[FLAGS.study]()
  result["flags"] = {f.name: f.value for f in FLAGS.get_flags_for_module(sys.modules[__name__])}
  result["seconds"] = time.perf_counter() - t0
  with open(os.path.join(FLAGS.output_dir, "results.json"), "w") as f:
    json.dump(result, f, indent=1, default=str)
  print(f"wrote {FLAGS.output_dir}/results.json ({result['seconds']:.1f}s)", flush=True)


if __name__ == "__main__":
  from experiments import common
  define_flags()
  app.run(main, flags_parser=common.parse_flags_or_exit)
