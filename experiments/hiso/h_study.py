"""HiSo's learned H against the curvature, its ablations, and DeComFL with a decaying step
(Li et al. 2025, Table 2, §4.2, Fig. 5 right; specs/hiso.md §4 last bullet, §7 items 8-9).

Reads the task settings of a ``hiso_toy_*.cfg`` flagfile (the ill-conditioned or the
isotropic quadratic, M, m, P, tau = 1, rounds, eval_every) and its lr grid (the ``lr=`` values
of its ``--algorithm`` entries), and runs, for each preset family of ``--presets``
(``paper``: ``hiso`` / ``decomfl``; ``code``: the authors'-code presets ``hiso_code`` /
``decomfl_code``, with their own P, b, eps, weight decay and finite differences), every lr of
the grid of:

* ``<decomfl>``: DeComFL, constant step;
* ``<decomfl>-schedule=decay``: DeComFL with the authors' code's decaying step
  (``--adjust-perturb``: x0.8 / x0.5 / x0.3 of the base lr from rounds 500 / 1000 / 2000 of
  their 6000-round scale, here from R/12, R/6, R/3; P is not changed);
* ``<hiso>``: HiSo with its learned H (eq. 12 / [code]);
* ``<hiso>-preconditioner=scalar``: the ablation, H replaced by mean(H) 1 (spec §4);
* ``<hiso>-oracle``: H fixed at the true diagonal Hessian lambda (as nu = 0 from H_0 = lambda).

The step size is applied outside the algorithm: each round is built with lr = 1 and
x_{r+1} = x_r + eta_r (x'_{r+1} - x_r), which for tau = 1 is exactly the round with step eta_r
(x - eta (Delta x + wd x); Delta x and the H signal do not depend on eta). So one compilation
serves the whole lr grid and the schedule (lanes vmapped: DeComFL's constant and decaying
steps in one compilation, HiSo's learned and oracle H in another, the scalar ablation in a
third). Output: ``<label>-lr=<lr>/metrics.jsonl``
per run (``round``, ``optimality_gap``, ``objective``, cumulative ``bytes_up``,
``bytes_down``, ``participants``, ``queries``; for the learned-H runs also ``h_corr``
= corr(log H, log lambda), ``h_corr_top50`` (the 50 largest lambda), ``h_max_min`` =
max H / min H, ``h_bound`` = sqrt(P + 2) (the fixed-point bound derived in
fedsim/algorithms/hiso.py), ``h_q999_median``), and ``summary.json``.

Usage:
  python -m experiments.hiso.h_study --flagfile=experiments/flagfiles/hiso_toy_illcond.cfg \
      [--presets=paper,code] [--seeds=0] [--rounds=R] [--lrs=0.001,0.002] --output_dir=DIR
"""

from __future__ import annotations

import json
import math
import os

import numpy as np
from absl import app, flags

FLAGS = flags.FLAGS

FAMILIES = {"paper": ("hiso", "decomfl"), "code": ("hiso_code", "decomfl_code")}


def define_flags():
  # The flags of experiments/flagfiles/hiso_toy_*.cfg (same meaning as in experiments.run).
  flags.DEFINE_string("task", "illcond_quadratic", "Only illcond_quadratic.")
  flags.DEFINE_integer("dim", 1000, "d.")
  flags.DEFINE_float("spectrum_sigma", math.sqrt(3), "Std of log lambda.")
  flags.DEFINE_float("heterogeneity", 0.01, "Spread of the client optima b_i.")
  flags.DEFINE_bool("isotropic", False, "All eigenvalues equal to mean(lambda).")
  flags.DEFINE_integer("num_clients", 64, "M.")
  flags.DEFINE_integer("clients_per_round", 8, "m.")
  flags.DEFINE_integer("num_perturbations", 5, "P of the paper presets (code presets keep their own).")
  flags.DEFINE_integer("local_steps", 1, "tau (must be 1).")
  flags.DEFINE_integer("rounds", 6000, "R (a multiple of eval_every).")
  flags.DEFINE_integer("eval_every", 25, "Rounds between evaluations.")
  flags.DEFINE_list("algorithm", [], "The flagfile's entries: only their lr= values are read (the grid).")
  flags.DEFINE_string("output_dir", None, "Where the runs go.", required=True)
  # This script's own.
  flags.DEFINE_list("presets", ["paper", "code"], "Preset families: paper, code.")
  flags.DEFINE_list("seeds", ["0"], "Seeds (task and run, as experiments.run's --seed).")
  flags.DEFINE_list("lrs", [], "The lr grid (default: the lr= values of --algorithm).")


def decay_multipliers(rounds: int) -> np.ndarray:
  """(rounds,) step multipliers of the authors' ``--adjust-perturb`` schedule scaled to R rounds:
  1 before R/12, 0.8 from R/12, 0.5 from R/6, 0.3 from R/3 ([code] decomfl_main.py:
  rounds 500 / 1000 / 2000 at 6000 rounds; specs/hiso.md §5)."""
  r = np.arange(rounds)
  m = np.ones(rounds)
  for start, value in ((rounds // 12, 0.8), (rounds // 6, 0.5), (rounds // 3, 0.3)):
    m[r >= start] = value
  return m


def h_diagnostics(h: np.ndarray, lam: np.ndarray, P: int) -> dict:
  """corr(log H, log lambda) (all coordinates; the 50 largest lambda), max H / min H, its
  bound sqrt(P + 2) and q99.9(H) / median(H), for one H (d,) and the spectrum lambda (d,)."""
  h, lam = np.asarray(h, np.float64), np.asarray(lam, np.float64)
  top = np.argsort(-lam)[:50]

  def corr(i):
    a, b = np.log(h[i]), np.log(lam[i])
    return float(np.corrcoef(a, b)[0, 1]) if np.ptp(a) > 0 and np.ptp(b) > 0 else float("nan")
  return {"h_corr": corr(slice(None)), "h_corr_top50": corr(top), "h_max_min": float(h.max() / h.min()),
          "h_bound": math.sqrt(P + 2), "h_q999_median": float(np.quantile(h, 0.999) / np.median(h))}


def run_lanes(task, name: str, hp: dict, lanes, rounds: int, every: int, seed: int):
  """Runs algorithm ``name`` (registry name, hyperparameters ``hp``) in several lanes at once
  (one compilation, vmapped): lane i has the step sizes ``lanes[i][0]`` (rounds,) and, when
  ``lanes[i][1]`` is not None, H frozen at that (d,) vector (the oracle H = lambda: the same
  as nu = 0 from H_0 = lambda); otherwise H is the algorithm's own.

  Returns:
    ``[records per lane]``; each record has the round, the gap, the cumulative ledgers and,
    for the lanes with the algorithm's own H (HiSo), :func:`h_diagnostics`.
  """
  import jax
  import jax.numpy as jnp

  from fedsim import algorithms
  from fedsim.core import rng

  alg = algorithms.build(name, task, lr=1.0, **hp)
  cfg = alg.hparams
  if cfg.local_steps != 1 or getattr(cfg, "h_signal", "delta_x") != "delta_x":
    raise ValueError("the lr-outside trick needs tau = 1 and h_signal=delta_x")
  learned = alg.metrics is not None  # HiSo (DeComFL's H is 1)
  lam = np.asarray(task.data["eval"]["lam"])
  root = jax.random.key(seed)
  s0 = jax.jit(alg.init)(*rng.init_keys(root))
  L = len(lanes)
  fixed = jnp.asarray([h is not None for _, h in lanes])
  h_fixed = jnp.stack([jnp.asarray(h if h is not None else np.ones_like(lam), s0.h.dtype) for _, h in lanes])
  states = jax.tree_util.tree_map(lambda a: jnp.broadcast_to(a, (L, *a.shape)), s0)
  states = states._replace(h=jnp.where(fixed[:, None], h_fixed, states.h))
  rounds_key = rng.stream(root, "rounds")
  data = task.data

  def one(s, key, eta, fix, hf):
    s2, stats = alg.round(s, key, data)
    return s2._replace(x=s.x + eta * (s2.x - s.x), h=jnp.where(fix, hf, s2.h)), stats

  @jax.jit
  def chunk(states, rs, etas):           # rs (every,), etas (every, L)
    def body(ss, inp):
      r, eta = inp
      ss, stats = jax.vmap(one, in_axes=(0, None, 0, 0, 0))(ss, rng.round_key(rounds_key, r), eta,
                                                            fixed, h_fixed)
      return ss, jax.tree_util.tree_map(lambda a: a[0], stats)
    return jax.lax.scan(body, states, (rs, etas))

  gap = jax.jit(jax.vmap(lambda s: task.evaluate(alg.solution(s), data)["optimality_gap"]))
  etas_all = np.stack([np.asarray(e, np.float32) for e, _ in lanes], axis=1)   # (rounds, L)
  totals = {"queries": 0, "bytes_up": 0, "bytes_down": 0, "participants": 0}
  out: list[list[dict]] = [[] for _ in lanes]

  def record(r):
    g = np.asarray(gap(states), np.float64)
    hs = np.asarray(states.h)
    for i in range(L):
      rec = {"round": r, "optimality_gap": float(g[i]), **totals}
      if learned and lanes[i][1] is None:
        rec.update(h_diagnostics(hs[i], lam, cfg.num_perturbations))
      out[i].append(rec)

  record(0)
  for start in range(0, rounds, every):
    rs = np.arange(start, start + every, dtype=np.int32)
    states, stats = chunk(states, jnp.asarray(rs), jnp.asarray(etas_all[start:start + every]))
    for k, v in jax.device_get(stats).totals().items():
      if k in totals:
        totals[k] += int(v)
    record(start + every)
  return out


def main(argv):
  del argv
  from fedsim.tasks import make_task

  a = FLAGS
  if a.task != "illcond_quadratic" or a.local_steps != 1 or a.rounds % a.eval_every:
    raise app.UsageError("needs --task=illcond_quadratic, --local_steps=1 and eval_every dividing rounds")
  lrs = sorted({float(x) for x in a.lrs} or {float(p.split("=", 1)[1]) for e in a.algorithm
                                             for p in e.split(":")[1:] if p.startswith("lr=")})
  if not lrs:
    raise app.UsageError("no lr grid (--lrs or lr= in --algorithm)")
  const, decay = np.ones(a.rounds), decay_multipliers(a.rounds)
  summary = {"lrs": lrs, "rounds": a.rounds, "runs": []}
  for seed in (int(s) for s in a.seeds):
    task = make_task("illcond_quadratic", num_clients=a.num_clients, seed=seed, dim=a.dim,
                     heterogeneity=a.heterogeneity, spectrum_sigma=a.spectrum_sigma, isotropic=a.isotropic)
    for family in a.presets:
      hiso, decomfl = FAMILIES[family]
      hp = {"clients_per_round": a.clients_per_round, "local_steps": 1}
      if family == "paper":
        hp["num_perturbations"] = a.num_perturbations
      lam = np.asarray(task.data["eval"]["lam"])
      groups = [  # (registry name, extra hyperparameters, [(label, steps multiplier, frozen H)])
          (decomfl, {}, [(decomfl, const, None), (f"{decomfl}-schedule=decay", decay, None)]),
          (hiso, {}, [(hiso, const, None), (f"{hiso}-oracle", const, lam)]),
          (hiso, {"preconditioner": "scalar"}, [(f"{hiso}-preconditioner=scalar", const, None)])]
      for name, extra, kinds in groups:
        lanes = [(lr * mult, h) for _, mult, h in kinds for lr in lrs]
        labels = [f"{label}-lr={lr:g}" for label, _, _ in kinds for lr in lrs]
        hists = run_lanes(task, name, {**hp, **extra}, lanes, a.rounds, a.eval_every, seed)
        for label, hist in zip(labels, hists):
          folder = os.path.join(a.output_dir, f"seed{seed}", label)
          os.makedirs(folder, exist_ok=True)
          with open(os.path.join(folder, "metrics.jsonl"), "w") as f:
            for rec in hist:
              f.write(json.dumps(rec) + "\n")
          summary["runs"].append({"seed": seed, "label": label, "final_gap": hist[-1]["optimality_gap"]})
          print(f"seed {seed} {label}: final gap {hist[-1]['optimality_gap']:.4g}", flush=True)
  with open(os.path.join(a.output_dir, "summary.json"), "w") as f:
    json.dump(summary, f, indent=1)


if __name__ == "__main__":
  define_flags()
  app.run(main)
