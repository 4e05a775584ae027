"""The claims of HiSo and DeComFL (Li et al. 2025): the measures of ``declarations/hiso.toml``.

Each returns numbers (:class:`engine.Measured`), never a verdict: Table 2's protocol on the quadratic stand-ins
(``experiments.hiso.h_study``, paper and authors'-code presets), Fig. 5 on ``hiso_mnist_cnn.cfg``, the nu and tau
sweeps on the digits MLP, Corollary 1's dimension sweep. The byte ledger (a check) and the isotropic control (a
diagnostic) keep a rule of their own.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re

from experiments.reproduce import engine
from experiments.reproduce.claims import Context, Evidence, Stat, curves, final, plain_number, values_of
from experiments.reproduce.report import plot_curves
from fedsim import api, results

TITLE = "HiSo and DeComFL (Li et al. 2025): Hessian-informed scalar-only ZO"

TOL = 0.01                   # "reaches DeComFL's best": within 1 % (gap) / 1 pp (accuracy)
ISO_BAND = (0.8, 1.25)       # the isotropic control: "about 1x"


def _label_base(label: str) -> str:
  """The variant of a run label without its lr: ``hiso-preconditioner=scalar-lr=0.001`` ->
  ``hiso-preconditioner=scalar``."""
  return re.sub(r"-lr=[^-]+$", "", label)


def rounds_ratio(runs: dict[str, list[dict]], hiso: str, decomfl: str, metric: str = "optimality_gap",
                 tol: float = TOL) -> dict:
  """Li et al. 2025, Table 2's rounds ratio (``experiments/hiso/rounds_ratio.py``) on one seed's ``{label: records}``:
  the target is DeComFL's best ``metric`` (``optimality_gap`` or ``test_accuracy``) over its runs (labels whose part
  before the first ``-`` is ``decomfl``); R_DeComFL is the first round that best run is within ``tol`` of it
  (relative for gaps, absolute for accuracy), R_HiSo the first round any lr of a ``hiso`` variant is.

  Returns:
    ``{"target", "decomfl_label", "r_decomfl", "variants": {variant: {"r": round or None (never), "ratio":
    R_DeComFL / R_HiSo, 0.0 when never}}}``.

  Raises:
    KeyError: no ``decomfl`` run.
  """
  higher = metric == "test_accuracy"
  sign = -1.0 if higher else 1.0

  def best(k):
    v = [sign * r[metric] for r in runs[k] if r.get(metric) is not None and math.isfinite(r[metric])]
    return sign * min(v) if v else sign * math.inf

  def reach(k, target):
    return next((r["round"] for r in runs[k] if r.get(metric) is not None and math.isfinite(r[metric])
                 and (r[metric] >= target - tol if higher else r[metric] <= target * (1 + tol))), None)

  dec = [k for k in runs if k.split("-", 1)[0] == decomfl]
  if not dec:
    raise KeyError(f"no {decomfl} runs")
  bd = min(dec, key=lambda k: sign * best(k))
  target = best(bd)
  r_d = reach(bd, target)
  out = {"target": target, "decomfl_label": bd, "r_decomfl": r_d, "variants": {}}
  for variant in sorted({_label_base(k) for k in runs if k.split("-", 1)[0] == hiso}):
    hits = [h for k in runs if _label_base(k) == variant and (h := reach(k, target)) is not None]
    r_h = min(hits) if hits else None
    out["variants"][variant] = {"r": r_h, "ratio": _ratio(r_d, r_h)}
  return out


def _ratio(r_d: int | None, r_h: int | None) -> float:
  """R_DeComFL / R_HiSo; 0.0 when HiSo never reaches the target, 1.0 when both are at round 0."""
  if r_h is None or r_d is None:
    return 0.0
  if r_h == 0:
    return 1.0 if r_d == 0 else math.inf
  return r_d / r_h


def _finals(runs: dict[str, list[dict]], base: str, metric: str, higher: bool) -> float:
  """Best final ``metric`` over the lrs of variant ``base`` (labels ``base-lr=...``)."""
  xs = [final(v, metric) for k, v in runs.items() if _label_base(k) == base]
  xs = [x for x in xs if math.isfinite(x)]
  return (max if higher else min)(xs) if xs else math.nan


def _score(x: float, higher: bool) -> float:
  """``x`` with NaN / inf mapped to the worst value (for picking the best lr)."""
  return x if math.isfinite(x) else (-math.inf if higher else math.inf)


def _best_curves(seeds: list[dict[str, list[dict]]], bases, metric: str, higher: bool) -> dict:
  """``{variant: [[(round, metric)] per seed]}``: each seed's lr with the best final metric."""
  out = {}
  for base in bases:
    best = [max((k for k in runs if _label_base(k) == base), default=None,
                key=lambda k, runs=runs: (1 if higher else -1) * _score(final(runs[k], metric), higher))
            for runs in seeds]
    if any(best):
      out[base] = [[(r["round"], r[metric]) for r in runs[k] if r.get(metric) is not None]
                   for runs, k in zip(seeds, best) if k]
  return out


def _toy(ctx: Context, which: str) -> list[dict[str, list[dict]]]:
  """The h_study runs on ``hiso_toy_<which>.cfg``: ``[{label: records}]`` per seed (both preset families; the
  isotropic control runs the paper presets only at smoke, for the CPU budget)."""
  seeds = ctx.pick((0,), (0, 1, 2, 3, 4))
  presets = ctx.pick("paper", "paper,code") if which == "isotropic" else "paper,code"
  flags = {"flagfile": f"experiments/flagfiles/hiso_toy_{which}.cfg", "presets": presets,
           "seeds": ",".join(map(str, seeds))}
  if ctx.scale == "smoke":
    flags.update(rounds=400, eval_every=25, lrs="0.0005,0.001,0.002,0.004")  # a subset of the grid
  out = ctx.script(f"hiso_toy_{which}", "experiments.hiso.h_study", **flags)
  return [{label: results.read_metrics(os.path.join(out, f"seed{s}", label, "metrics.jsonl"))
           for label in sorted(os.listdir(os.path.join(out, f"seed{s}")))} for s in seeds]


def _lr(label: str) -> float | None:
  m = re.search(r"-lr=([^-]+)$", label)
  return float(m.group(1)) if m else None


def at_edge(runs: dict[str, list[dict]], label: str) -> bool:
  """``label``'s lr is the smallest or largest of its variant's grid (of 2 or more lrs) in ``runs``."""
  lrs = sorted(x for k in runs if _label_base(k) == _label_base(label) and (x := _lr(k)) is not None)
  return len(lrs) > 1 and _lr(label) in (lrs[0], lrs[-1])


def _never(ratio: float) -> float:
  """A per-seed rounds ratio R_DeComFL / R_HiSo as the tests read it: :func:`_ratio`'s 0.0 (HiSo never reaches
  DeComFL's best) is censored, ``-inf`` on this higher-is-better scale, never a ratio of 0."""
  return -math.inf if ratio == 0.0 else ratio


def _table2(ctx: Context, family: str) -> engine.Measured:
  """Table 2's rounds ratio on ``hiso_toy_illcond.cfg``, per seed, with the oracle H = lambda and scalar-H
  ablations beside it; gated ``baseline untuned`` where DeComFL's best lr is at its grid's edge on a seed."""
  hiso, decomfl = ("hiso", "decomfl") if family == "paper" else ("hiso_code", "decomfl_code")
  mine = _toy(ctx, "illcond")
  rr = [rounds_ratio(runs, hiso, decomfl) for runs in mine]
  variants = [hiso, f"{hiso}-preconditioner=scalar", f"{hiso}-oracle"]
  untuned = [f"seed {i}: {r['decomfl_label']}" for i, (runs, r) in enumerate(zip(mine, rr))
             if at_edge(runs, r["decomfl_label"])]
  numbers: dict = {f"rounds to DeComFL's best gap {v}": ["never" if r["variants"][v]["r"] is None
                                                          else r["variants"][v]["r"] for r in rr] for v in variants}
  numbers["R_DeComFL (rounds to its own best)"] = [r["r_decomfl"] for r in rr]
  numbers["DeComFL best gap (target)"] = [r["target"] for r in rr]
  for v in (decomfl, f"{decomfl}-schedule=decay", *variants):
    numbers[f"best final gap {v}"] = [_finals(runs, v, "optimality_gap", False) for runs in mine]
  if untuned:
    numbers["DeComFL's best lr at its grid's edge"] = "; ".join(untuned)
  fig = plot_curves(os.path.join(ctx.root, "fig", f"hiso_table2_illcond_{family}.png"),
                    _best_curves(mine, (decomfl, f"{decomfl}-schedule=decay", *variants), "optimality_gap", False),
                    "round", "F(x) - F* (best lr each)", f"Table 2 protocol, illcond quadratic, {family} presets",
                    logy=True)
  return engine.Measured(values={"illcond quadratic": {"hiso": [_never(r["variants"][hiso]["ratio"]) for r in rr]}},
                         gates={"illcond quadratic": {"hiso": "baseline untuned"}} if untuned else {},
                         numbers=numbers, figures=[os.path.relpath(fig, ctx.root)])


def _best_labels(seeds: list[dict[str, list[dict]]], base: str, key: str | None = None) -> list:
  """Per seed, the label of variant ``base`` with the lowest final optimality gap, or with ``key`` that run's
  last value of ``key`` (an H diagnostic of h_study)."""
  best = [min((k for k in runs if _label_base(k) == base),
              key=lambda k, runs=runs: _score(final(runs[k], "optimality_gap"), False)) for runs in seeds]
  return best if key is None else [runs[k][-1][key] for runs, k in zip(seeds, best)]


def hiso_h_curvature(ctx: Context) -> engine.Measured:
  """corr(log H, log lambda) at the end of the ill-conditioned run (best-lr HiSo) per seed and preset family,
  with max H / min H against the EMA fixed point's bound sqrt(P + 2) and the scalar-H ablation's H (its noise)."""
  seeds = _toy(ctx, "illcond")
  values, numbers = {}, {}
  for family, hiso in (("paper presets", "hiso"), ("code presets", "hiso_code")):
    values[family] = {"hiso": _best_labels(seeds, hiso, "h_corr")}
    numbers[f"corr(log H, log lambda), 50 largest lambda, {hiso}"] = _best_labels(seeds, hiso, "h_corr_top50")
    numbers[f"max H / min H {hiso}"] = _best_labels(seeds, hiso, "h_max_min")
    numbers[f"fixed-point bound sqrt(P + 2) {hiso}"] = _best_labels(seeds, hiso, "h_bound")[0]
    numbers[f"max H / min H of the scalar ablation's H (EMA noise) {hiso}"] = _best_labels(
        seeds, f"{hiso}-preconditioner=scalar", "h_max_min")
  from fedsim.tasks.illcond_quadratic import spectrum
  lam = spectrum(1000, math.sqrt(3), 0)  # hiso_toy_illcond.cfg: d = 1000, sigma = sqrt(3), seed 0
  numbers["max lambda / min lambda"] = float(lam.max() / lam.min())
  fig = plot_curves(os.path.join(ctx.root, "fig", "hiso_h_corr.png"),
                    {b: [[(r["round"], r["h_corr"]) for r in runs[k]] for runs, k in zip(seeds, _best_labels(seeds, b))]
                     for b in ("hiso", "hiso_code")}, "round", "corr(log H, log lambda)",
                    "Learned H vs curvature, illcond quadratic")
  return engine.Measured(values=values, numbers=numbers, figures=[os.path.relpath(fig, ctx.root)])


def hiso_isotropic(ctx: Context) -> Evidence:
  """The isotropic control (its own rule): the mean rounds ratio inside :data:`ISO_BAND` in every family."""
  seeds = _toy(ctx, "isotropic")
  numbers, means = {}, {}
  for family, (hiso, decomfl) in (("paper", ("hiso", "decomfl")), ("code", ("hiso_code", "decomfl_code"))):
    if any(k.split("-", 1)[0] == hiso for k in seeds[0]):  # the code presets are not run at smoke
      rr = [rounds_ratio(runs, hiso, decomfl) for runs in seeds]
      for v in (hiso, f"{hiso}-preconditioner=scalar"):
        numbers[f"rounds ratio {v} (0 = never)"] = Stat.of(r["variants"][v]["ratio"] for r in rr)
      means[family] = numbers[f"rounds ratio {hiso} (0 = never)"].mean
  inside = [f for f, r in means.items() if ISO_BAND[0] <= r <= ISO_BAND[1]]
  verdict = ("reproduced" if len(inside) == len(means) else "partly reproduced" if inside else "not reproduced")
  return Evidence(verdict, f"mean rounds ratio inside {ISO_BAND} for {', '.join(inside) or 'no family'} ("
                  + ", ".join(f"{f} {r:.2f}x" for f, r in means.items()) + ")", numbers=numbers)


# (rounds, KB as printed) of Table 2 and Table 5 at P = 5, tau = 1.
TABLE_KB = ((550, 21.56), (775, 30.35), (1350, 52.73), (1500, 58.59), (1125, 43.95), (350, 13.67),
            (275, 10.78), (425, 16.64), (250, 9.77), (1075, 41.85), (750, 29.30), (175, 6.84))


def hiso_bytes(ctx: Context) -> Evidence:
  """The byte ledger (a check): 40 B per client per round for both, and every (rounds, KB) of Tables 2 / 5 equal
  to rounds x that / 1024 within 0.5%."""
  runs = _toy(ctx, "illcond")[0]
  last = {a: next(v[-1] for k, v in runs.items() if _label_base(k) == a) for a in ("hiso", "decomfl")}
  per = {a: (r["bytes_up"] + r["bytes_down"]) / r["participants"] for a, r in last.items()}
  worst = max(abs(r * b / 1024 - kb) / kb for b in per.values() for r, kb in TABLE_KB)
  ok = all(v == 40 for v in per.values()) and worst <= 0.005
  return Evidence("reproduced" if ok else "not reproduced", "bytes per client per round: " + ", ".join(
      f"{k} {v:g} B" for k, v in per.items()) + f"; Tables 2 / 5 KB within {worst:.2%}", numbers={
      **{f"bytes per client per round {a}": v for a, v in per.items()},
      "worst relative error of rounds x bytes / 1024 vs the tables' KB": worst})


FIG5_SEEDS = (0, 1, 2, 3, 4)
FIG5_GRID = (0.003, 0.01, 0.03)       # hiso_mnist_cnn.cfg's lr grid, both methods
FIG5_BELOW = (0.001, 0.0003, 0.0001)  # the grid's steps below it (factor ~3), tried in turn while untuned
FIG5_RATIO = "rounds ratio hiso (0 = never)"
FIG5_ACC = "best final test accuracy {}"


def lr_at_edge(runs: dict[str, list[dict]], base: str, metric: str = "test_accuracy") -> str | None:
  """Why variant ``base``'s lr is not tuned on this seed's grid, or None: every lr diverged, or its
  best (final ``metric``, a diverged run counting as worst) is the grid's smallest lr."""
  labels = [k for k in runs if _label_base(k) == base]
  if all(api.diverged({"run": runs[k]}) for k in labels):
    return "every lr diverged"
  best = max(labels, key=lambda k: _score(math.nan if api.diverged({"run": runs[k]}) else final(runs[k], metric),
                                          True))
  return f"its best lr {_lr(best):g} is the grid's smallest" if _lr(best) == min(map(_lr, labels)) else None


def fig5_measured(numbers: dict, which: str) -> engine.Measured:
  """Fig. 5's per-seed numbers for claim ``which`` (``ratio``: R_DeComFL / R_HiSo, never censored as ``-inf``;
  ``accuracy``: best final test accuracy in pp, per method), from the runs' numbers or a record's."""
  if which == "ratio":
    values = {"hiso": [_never(r) for r in values_of(numbers[FIG5_RATIO])]}
  else:
    values = {v: [100 * a for a in values_of(numbers[FIG5_ACC.format(v)])] for v in ("hiso", "decomfl")}
  return engine.Measured(values={"MNIST CNN": values}, numbers=numbers)


def fig5_from_record(decl: engine.Declaration, which: str):
  """``record -> Evidence``: the claim judged from the per-seed numbers of a record whose runs' metrics were not
  stored (the per-seed ratios and accuracies, and what the lr grid's extension did, ``lr grid``)."""
  return lambda record: engine.judge(decl, fig5_measured(dict(record["numbers"]), which))


def hiso_fig5(ctx: Context, which: str) -> engine.Measured:
  """Fig. 5's numbers for claim ``which`` (:func:`fig5_measured`) on the flagfile's lr grid (``--scale=paper``).

  "Each with its own tuned lr" (§6): where, on some seed, a method's every lr diverged or its best is the grid's
  smallest, both methods (and the scalar-H ablation, in runs of its own) also run one step below the grid (same
  seeds), stepping on down (0.0003, 0.0001) while it is still untuned; the numbers say so (``lr grid``)."""
  seeds, notes, grid = FIG5_SEEDS, [], "the flagfile's grid"
  algs = [f"{a}:lr={lr}" for a in ("hiso", "decomfl", "hiso:preconditioner=scalar") for lr in FIG5_GRID]
  runs = ctx.runs([(f"hiso_fig5_cnn_s{s}", "hiso_mnist_cnn.cfg", dict(seed=s, algorithm=",".join(algs)))
                   for s in seeds])
  for lr in (*FIG5_BELOW, None):
    edges = [f"{b} (seed {s}): {w}" for b in ("hiso", "decomfl") for s, r in zip(seeds, runs)
             if (w := lr_at_edge(r, b))]
    if not edges or lr is None:
      notes += [f"Still untuned on {grid}: " + "; ".join(edges)] if edges else []
      break
    notes.append(f"On {grid} " + "; ".join(edges) + f", so it did not tune them: the grid is extended to lr "
                 f"{lr:g} for both methods (same seeds)")
    low = ctx.runs([(f"hiso_fig5_cnn_lr{lr:g}_s{s}", "hiso_mnist_cnn.cfg",
                     dict(seed=s, algorithm=f"hiso:lr={lr:g},decomfl:lr={lr:g}")) for s in seeds]
                   + [(f"hiso_fig5_cnn_scalar_lr{lr:g}_s{s}", "hiso_mnist_cnn.cfg",
                       dict(seed=s, algorithm=f"hiso:preconditioner=scalar:lr={lr:g}")) for s in seeds])
    runs = [{**r, **p, **q} for r, p, q in zip(runs, low[:len(seeds)], low[len(seeds):])]
    grid = f"the grid down to lr {lr:g}"
  rr = [rounds_ratio(r, "hiso", "decomfl", metric="test_accuracy") for r in runs]
  variants = [v for v in ("hiso", "hiso-preconditioner=scalar") if v in rr[0]["variants"]]
  numbers: dict = {f"rounds ratio {v} (0 = never)": Stat.of(r["variants"][v]["ratio"] for r in rr) for v in
                   variants}
  numbers.update({FIG5_ACC.format(v): Stat.of(_finals(r, v, "test_accuracy", True) for r in runs)
                  for v in ("decomfl", *variants)})
  for v in ("hiso", "decomfl", *variants[1:]):
    numbers[f"lrs that diverged {v} (per seed)"] = Stat.of(
        sum(bool(api.diverged({"run": h})) for k, h in r.items() if _label_base(k) == v) for r in runs)
  best_h = [max((k for k in r if _label_base(k) == "hiso"), key=lambda k, r=r: final(r[k], "test_accuracy"))
            for r in runs]
  numbers["q99.9(H) / median(H) at the end, hiso (Fig. 5 right)"] = Stat.of(
      final(r[k], "h_tail_ratio") for r, k in zip(runs, best_h))
  if notes:
    numbers["lr grid"] = ". ".join(notes)
  fig = plot_curves(os.path.join(ctx.root, "fig", "hiso_fig5.png"),
                    _best_curves(runs, ("hiso", "decomfl", *variants[1:]), "test_accuracy", True), "round",
                    "test accuracy (best lr each)",
                    "Fig. 5: MNIST CNN, M = 64, m = 8")
  return dataclasses.replace(fig5_measured(numbers, which), figures=[os.path.relpath(fig, ctx.root)])


NU_GRID = (0.01, 0.05, 0.1, 0.3)       # hiso_nu_sweep.cfg (the paper does not list its values)
TAU_GRID = (1, 2, 5, 10)               # hiso_tau_sweep.cfg (the paper does not list its values)
NU_FAMILIES = {"eq. 8 step": "hiso-nu={v:g}", "eq. 7 trace step": "hiso-step_norm=trace-nu={v:g}-lr=0.02"}
TAU_FAMILIES = {"hiso": "hiso-local_steps={v}", "decomfl": "decomfl-local_steps={v}"}


def _acc_pp(runs, label: str) -> list[float]:
  """Per seed, the final test accuracy of ``label`` in pp (a diverged run's last finite value)."""
  return [100 * final(r[label], "test_accuracy") for r in runs]


def _sweep(ctx: Context, tag: str, title: str) -> tuple[list[dict], list[str]]:
  runs = ctx.runs([(f"hiso_{tag}_sweep_s{s}", f"hiso_{tag}_sweep.cfg", dict(seed=s)) for s in (0, 1, 2, 3, 4)])
  fig = plot_curves(os.path.join(ctx.root, "fig", f"hiso_{tag}_sweep.png"), curves(runs, "test_accuracy"), "round",
                    "test accuracy", title)
  return runs, [os.path.relpath(fig, ctx.root)]


def hiso_nu(ctx: Context) -> engine.Measured:
  """Fig. 5 (left): HiSo's final test accuracy (pp) per seed at each nu of :data:`NU_GRID`, per step family."""
  runs, figs = _sweep(ctx, "nu", f"HiSo: nu in {', '.join(map(str, NU_GRID))} (digits MLP)")
  return engine.Measured(values={fam: {f"nu={v:g}": _acc_pp(runs, label.format(v=v)) for v in NU_GRID}
                                 for fam, label in NU_FAMILIES.items()}, figures=figs)


def hiso_tau(ctx: Context) -> engine.Measured:
  """Fig. 8: per seed, the spread (max - min over :data:`TAU_GRID`) of the final test accuracy in pp, per method,
  with the accuracies themselves."""
  runs, figs = _sweep(ctx, "tau", f"HiSo and DeComFL: tau in {', '.join(map(str, TAU_GRID))} (digits MLP)")
  acc = {(m, v): _acc_pp(runs, label.format(v=v)) for m, label in TAU_FAMILIES.items() for v in TAU_GRID}
  spread = {m: [max(s) - min(s) for s in zip(*(acc[(m, v)] for v in TAU_GRID))] for m in TAU_FAMILIES}
  return engine.Measured(values={"digits MLP": spread}, figures=figs,
                         numbers={f"{m} final test accuracy tau={v} (pp)": a for (m, v), a in acc.items()})


DIM_FREE_DIMS = (100, 1000, 10000)
DIM_FREE_FRACTION = 0.01  # "converged": the optimality gap within 1% of its initial value


def _best_lr_rounds(runs: list[dict[str, list[dict]]], method: str) -> tuple[str, list[float]]:
  """(label, per-seed rounds to DIM_FREE_FRACTION of the initial gap) of ``method``'s lr with the fewest mean
  rounds over the seeds (never reached: inf, which no finite mean beats; ties: the first lr)."""
  rounds = {k: [engine.first_reach(r[k], "optimality_gap", DIM_FREE_FRACTION * r[k][0]["optimality_gap"]) for r in runs]
            for k in runs[0] if _label_base(k) == method}
  best = min(rounds, key=lambda k: sum(rounds[k]))
  return best, rounds[best]


def hiso_dim_free(ctx: Context) -> engine.Measured:
  """Corollary 1 on the rank-100 quadratic: per seed and method, the rounds to 99% of the gap at each d over
  those at d = 100 (a seed's large eigenvalues and optimum are the same at every d), each method and d at its
  best lr of the grid (which lr, and whether it is the grid's edge, in the numbers)."""
  dims, seeds, extra = ctx.pick((DIM_FREE_DIMS[::2], (0,), dict(rounds=300)), (DIM_FREE_DIMS, (0, 1, 2, 3, 4), {}))
  by_dim = {d: ctx.runs([(f"hiso_dim_free_d{d}_s{s}", "hiso_dim_free.cfg", dict(dim=d, seed=s, **extra))
                         for s in seeds]) for d in dims}
  best = {(m, d): _best_lr_rounds(runs, m) for m in ("hiso", "decomfl") for d, runs in by_dim.items()}
  numbers: dict = {f"{m} d={d}: best lr ({label}), rounds to {1 - DIM_FREE_FRACTION:.0%} of the gap":
                   [plain_number(v) for v in rounds] for (m, d), (label, rounds) in best.items()}
  grid = {m: [_lr(k) for k in by_dim[dims[0]][0] if _label_base(k) == m] for m in ("hiso", "decomfl")}
  edge = sorted({label for (m, _), (label, r) in best.items()
                 if _lr(label) in (min(grid[m]), max(grid[m])) and any(map(math.isfinite, r))})
  if edge:
    numbers["best lr at the grid's edge"] = ", ".join(edge)
  values = {f"d={d}": {m: [a / b if math.isfinite(b) else math.inf
                           for a, b in zip(best[(m, d)][1], best[(m, dims[0])][1])] for m in ("hiso", "decomfl")}
            for d in dims[1:]}
  figs = [os.path.relpath(plot_curves(
      os.path.join(ctx.root, "fig", f"hiso_dim_free_d{d}.png"),
      curves([{k: r[k] for k in (best[("hiso", d)][0], best[("decomfl", d)][0])} for r in runs], "optimality_gap"),
      "round", "F(x) - F*", f"HiSo vs DeComFL, rank-100 spectrum, d = {d} (best lr each)", logy=True), ctx.root)
      for d, runs in by_dim.items()]
  return engine.Measured(values=values, numbers=numbers, figures=figs)


FIG5 = {"hiso.fig5_mnist": "ratio", "hiso.fig5_final_accuracy": "accuracy"}


def _finish(claims: list, decls: dict) -> list:
  """Fig. 5 (about 30 CPU s even at smoke) and the sweeps at ``--scale=paper`` only; the Fig. 5 claims with their
  ``from_record`` (``engine.claims`` builds none)."""
  return [dataclasses.replace(c, from_record=fig5_from_record(decls[c.id], FIG5[c.id])).paper_only() if c.id in FIG5
          else c.paper_only() if c.id in ("hiso.nu_insensitive", "hiso.tau_insensitive") else c for c in claims]


CLAIMS = _finish(engine.claims("hiso", {
    **{c: (lambda ctx, w=w: hiso_fig5(ctx, w)) for c, w in FIG5.items()},
    "hiso.dim_free": hiso_dim_free, "hiso.nu_insensitive": hiso_nu, "hiso.tau_insensitive": hiso_tau,
    "hiso.table2_illcond": lambda ctx: _table2(ctx, "paper"),
    "hiso.table2_illcond_code": lambda ctx: _table2(ctx, "code"),
    "hiso.isotropic_control": hiso_isotropic, "hiso.h_curvature": hiso_h_curvature, "hiso.bytes": hiso_bytes,
}), engine.load("hiso"))

PENDING: list[str] = []  # every claim the paper makes that cannot run here is a "not evaluated" record
