"""The measures of FedLRGD and FedAve's claims (Jadbabaie et al. 2023), declared in ``declarations/fedlrgd.toml``.

Each function ``<name>`` measures claim ``fedlrgd.<name>``: it runs (or reads) ``experiments.fedlrgd.suite`` or
``rank_study`` through :meth:`Context.script` and returns :class:`engine.Measured` numbers (per setting, arm and
seed), never a verdict; ``ledger_runs`` (an exact ledger identity) keeps a rule of its own.
"""

from __future__ import annotations

import json
import math
import os

from experiments.reproduce import engine
from experiments.reproduce.claims import FLAGFILES, Context, Evidence, Stat
from experiments.reproduce.report import plot_curves

TITLE = "FedLRGD and FedAve (Jadbabaie et al. 2023): low-rank gradient descent"

SUITE = "experiments.fedlrgd.suite"
RANK_STUDY = "experiments.fedlrgd.rank_study"
FIDELITY = FLAGFILES + "fedlrgd_s2_fidelity.cfg"
MNIST = FLAGFILES + "fedlrgd_rank_study_mnist.cfg"


def _load(folder: str, name: str) -> dict:
  with open(os.path.join(folder, name)) as f:
    return json.load(f)


def _fig(ctx: Context, path: str) -> str:
  return os.path.relpath(path, ctx.root)


def log10(value: float) -> float:
  """log10 of an error or a gap, clipped at 1e-17 (a gap that round-off made <= 0 counts as converged)."""
  return math.log10(max(float(value), 1e-17))


def _fidelity(ctx: Context, name: str, seeds: int = 10, **flags) -> tuple[dict[int, list[float]], dict]:
  """One S2 fidelity run with ``flags`` changed: ({r: each seed's median relative gradient error}, results)."""
  res = _load(ctx.script(name, SUITE, flagfile=FIDELITY, seeds=seeds, **flags), "results.json")
  order = [int(v) for v in res["flags"]["ranks"]]
  return {r: [s[j] for s in res["err_median"]] for j, r in enumerate(order)}, res


def s2_fidelity(ctx: Context) -> engine.Measured:
  """S2: each seed's log10 median relative gradient error per rank (Page's test, paired by seed); smoke: 5 seeds."""
  per, res = _fidelity(ctx, "s2_fidelity", seeds=ctx.pick(5, 10))
  rows = {row["r"]: row for row in res["rows"]}
  numbers: dict = {}
  for j, r in enumerate(per):
    numbers[f"fraction of seeds with F - F_* <= 1e-5 after S steps r={r}"] = rows[r]["frac_seeds_gap_le_1e-5"]
    numbers[f"final F - F_* r={r}"] = Stat.of(g[j] for g in res["final_gap"])
    numbers[f"median cond(G) max r={r}"] = rows[r]["median_cond_max"]
    numbers[f"median rel. error along the GD path r={r}"] = rows[r]["median_path_rel_err"]
  numbers["max anchor rel. error (all r, seeds)"] = max(row["max_anchor_rel_err"] for row in rows.values())
  n = len(per[next(iter(per))])
  fig = plot_curves(os.path.join(ctx.root, "fig", "fedlrgd_s2_fidelity.png"),
                    {"fedlrgd": [[(r, per[r][s]) for r in per] for s in range(n)]}, "rank r",
                    "median ||grad^F - grad F|| / ||grad F||",
                    "FedLRGD S2: gradient fidelity vs r (logistic, 2 features)", logy=True)
  return engine.Measured(values={"i.i.d.": {f"r={r}": [log10(v) for v in vals] for r, vals in per.items()}},
                         numbers=numbers, figures=[_fig(ctx, fig)])


def _sweep(ctx: Context, settings: dict[str, dict[int, list[float]]], fig_name: str, title: str) -> engine.Measured:
  """A fidelity sweep ``{setting: {r: per-seed errors}}`` as settings r = 8, 16 of paired per-seed log10 errors."""
  curves = {f"fedlrgd-{label}": [sorted((r, sorted(v)[len(v) // 2]) for r, v in per.items())]
            for label, per in settings.items()}
  fig = plot_curves(os.path.join(ctx.root, "fig", fig_name), curves, "rank r", "median rel. gradient error",
                    f"{title} (median of the seeds)", logy=True, show_n=False)
  values = {f"r={r}": {label: [log10(v) for v in per[r]] for label, per in settings.items()} for r in (8, 16)}
  return engine.Measured(values=values, figures=[_fig(ctx, fig)])


def s4_shift(ctx: Context) -> engine.Measured:
  """S4: i.i.d. clients (S2's run), a server-client shift of 0.25 and 0.5, and heterogeneous sub-boxes of 0.5."""
  settings = {"i.i.d.": _fidelity(ctx, "s2_fidelity")[0]}
  for delta in (0.25, 0.5):
    settings[f"server_shift={delta:g}"] = _fidelity(ctx, f"s4_shift{delta:g}", server_shift=delta)[0]
  settings["data_heterogeneity=0.5"] = _fidelity(ctx, "s4_heterogeneity0.5", data_heterogeneity=0.5)[0]
  return _sweep(ctx, settings, "fedlrgd_s4_shift.png", "FedLRGD S4: server-client shift and heterogeneity")


def s4_smoothness(ctx: Context) -> engine.Measured:
  """S4: Hölder features psi_eta of order eta = 0.5, 1.5, 2.5 (raw dimension 1), the same draws at every eta."""
  settings = {f"holder eta={eta:g}": _fidelity(ctx, f"s4_holder{eta:g}", feature_map="holder", holder_eta=eta,
                                               raw_dim=1)[0] for eta in (0.5, 1.5, 2.5)}
  return _sweep(ctx, settings, "fedlrgd_s4_smoothness.png", "FedLRGD S4: Hölder features psi_eta (d = 1)")


RATIO = "per-seed error ratio float32 weights / float64 r="


def precision_measured(ratios: dict[int, list[float]]) -> engine.Measured:
  """``{r: per-seed ratio float32-weights error / float64 error}`` as log10 ratios at r >= 16 (the claim);
  every r's ratios are kept as numbers."""
  values = {f"r={r}": {"float32": [math.log10(q) for q in qs]} for r, qs in ratios.items() if r >= 16}
  return engine.Measured(values=values, numbers={f"{RATIO}{r}": list(qs) for r, qs in ratios.items()})


def precision(ctx: Context) -> engine.Measured:
  res = _load(ctx.script("precision", SUITE, flagfile=FLAGFILES + "fedlrgd_precision.cfg",
                         ranks=ctx.pick("8,16", "8,12,16,20"), seeds=ctx.pick(1, 10), rounds=ctx.pick(50, 300)),
              "results.json")
  errs = {(row["r"], row["run"]): row["rel_err_per_seed"] for row in res["rows"]}
  # Paired by seed: each seed's runs share the task and the test points.
  return precision_measured({r: [a / b for a, b in zip(errs[(r, "float32, float32 solve")], errs[(r, "float64")],
                                                       strict=True)] for r in sorted({r for r, _ in errs})})


def _precision_record(record: dict) -> engine.Measured:
  """The precision claim's ``from_record``: the record's per-seed ratios (a list, or an older record's Stat)."""
  return precision_measured({int(k[len(RATIO):]): v["values"] if isinstance(v, dict) else v
                             for k, v in record["numbers"].items() if k.startswith(RATIO)})


precision.from_record = _precision_record


def _convergence(ctx: Context) -> list[dict]:
  """The S3 suite runs, one per seed: ``[{m: {method: records}}]`` with the suite's flags."""
  smoke = dict(clients_list=100, ranks=8, fedave_local_steps=10, fedave_rounds=50) if ctx.scale == "smoke" else {}
  return [_load(ctx.script(f"s3_convergence_s{s}", SUITE, flagfile=FLAGFILES + "fedlrgd_s3_convergence.cfg", seed=s,
                           **smoke), "results.json") for s in ctx.pick((0,), range(10))]


def gamma_to_reach(records: list[dict], phi: float, eps: float) -> float:
  """Gamma = compute + phi uploads (Definition 1) at the first record with gap <= eps (inf: never)."""
  for rec in records:
    if rec["round"] > 0 and rec["gap"] is not None and rec["gap"] <= eps:
      return rec["compute"] + phi * rec["uploads"]
  return math.inf


def s3_convergence(ctx: Context) -> engine.Measured:
  """Each seed's log10 final F - F_* of FedLRGD at r >= 8 per m; every method's final gap and Gamma to 1e-5."""
  runs = _convergence(ctx)
  values, numbers, figures = {}, {}, []
  for m in (k for k in runs[0] if k not in ("flags", "seconds")):
    for method in (methods := runs[0][m]):
      numbers[f"final F - F_* m={m} {method}"] = Stat.of(run[m][method][-1]["gap"] for run in runs)
      for phi in (10.0, 100.0, 1000.0):
        numbers[f"Gamma to F - F_* <= 1e-5 m={m} phi={phi:g} {method}"] = Stat.of(
            gamma_to_reach(run[m][method], phi, 1e-5) for run in runs)
      if method.startswith("fedlrgd") and int(method.split("=")[1]) >= 8:
        values[f"m={m} r={method.split('=')[1]}"] = {"fedlrgd": [log10(run[m][method][-1]["gap"]) for run in runs]}
    for x, name in (("Gamma", ""), ("round", "_rounds")):
      curves = {method.replace(" ", "-"): [[(rec["compute"] + 100.0 * rec["uploads"] if x == "Gamma" else rec["round"],
                                             max(rec["gap"], 1e-16)) for rec in run[m][method]
                                            if rec["gap"] is not None and (x == "round" or rec["round"] > 0)]
                                           for run in runs] for method in methods}
      figures.append(_fig(ctx, plot_curves(
          os.path.join(ctx.root, "fig", f"fedlrgd_s3_m{m}{name}.png"), curves,
          "Gamma (Definition 1, phi = 100)" if x == "Gamma" else "round (FedLRGD: GD step S)", "F - F_*",
          f"FedLRGD S3: F - F_* against {'Gamma' if x == 'Gamma' else 'rounds'}, m = {m}", logy=True)))
  return engine.Measured(values=values, numbers=numbers, figures=figures)


def ledger_mismatches(results: dict) -> tuple[int, list[str]]:
  """(records checked, descriptions of the mismatches) of every logged record (round > 0) of one S3
  ``results.json`` against the ledger: FedLRGD r after S steps: compute = r^2 + r s + r S, uploads = m r
  (Theorem 2); FedAve b after T epochs: T b and T m (App. D, tau = 1); GD: T s and T m."""
  s = int(results["flags"]["samples_per_client"])
  checked, bad = 0, []
  for m, methods in ((m, v) for m, v in results.items() if m not in ("flags", "seconds")):
    for method, recs in methods.items():
      for rec in (rec for rec in recs if rec["round"] > 0):
        t, k = rec["round"], int(method.split("=")[1]) if "=" in method else 0
        want = ((k * k + k * s + k * t, int(m) * k) if method.startswith("fedlrgd") else
                (t * k, t * int(m)) if method.startswith("fedave") else (t * s, t * int(m)))
        checked += 1
        if (rec["compute"], rec["uploads"]) != want:
          bad.append(f"m={m} {method} round {t}: (compute, uploads) = ({rec['compute']:g}, {rec['uploads']:g}), "
                     f"formula {want}")
  return checked, bad


def ledger_runs(ctx: Context) -> Evidence:
  """A check with its own exact rule: every logged (compute, uploads) equals the formula."""
  found = [ledger_mismatches(res) for res in _convergence(ctx)]
  checked, bad = sum(c for c, _ in found), [b for _, bs in found for b in bs]
  numbers = {"records checked": float(checked), "mismatches": float(len(bad))}
  if checked and not bad:
    return Evidence("reproduced", f"all {checked} logged records equal the formulas", numbers=numbers)
  return Evidence("not reproduced", "; ".join(bad[:5]) or "no records", numbers=numbers)


def s5_crossover(ctx: Context) -> engine.Measured:
  """Gamma to eps of FedLRGD (best r) and FedAve (best b, T, step), paired by the cells (phi, eps) of the sweep
  that lie in Proposition 1's regime (``inf``: never reached within the sweep's budget)."""
  smoke = dict(crossover_dims=1, crossover_etas=8.5, ranks="2,4,8", fedave_local_steps=10, fedave_lrs="L1",
               fedave_rounds=60) if ctx.scale == "smoke" else {}
  rows = _load(ctx.script("s5_crossover", SUITE, flagfile=FLAGFILES + "fedlrgd_s5_crossover.cfg", **smoke),
               "results.json")["rows"]
  cells = [row for row in rows if row["prop1_predicts_win"]]
  numbers: dict = {"cells": float(len(rows)), "cells in Prop. 1's regime": float(len(cells)),
                   "cells FedLRGD wins (all)": float(sum(row["fedlrgd_wins"] for row in rows))}
  for row in cells:
    key = f"d={row['d']} eta={row['eta']:g} phi={row['phi']:g} eps={row['eps']:g}"
    numbers[f"Gamma(FedLRGD) / Gamma(FedAve) {key}"] = row["ratio"]
    numbers[f"rounds FedLRGD r, FedAve T {key}"] = [float(row[a][b]) if row[a] else math.inf
                                                    for a, b in (("fedlrgd", "r"), ("fedave", "T"))]
  fig = plot_curves(
      os.path.join(ctx.root, "fig", "fedlrgd_s5_crossover.png"),
      {f"fedlrgd/fedave d={d} eps={eps:g}": [[(row["eta"], row["ratio"]) for row in rows
                                               if row["d"] == d and row["eps"] == eps and row["phi"] == 100.0]]
       for d in sorted({row["d"] for row in rows}) for eps in sorted({row["eps"] for row in rows})},
      "Hölder order eta", "Gamma(FedLRGD) / Gamma(FedAve)", "FedLRGD S5: crossover at phi = 100", logy=True)
  gamma = {a: [row[a]["gamma"] if row[a] else math.inf for row in cells] for a in ("fedlrgd", "fedave")}
  return engine.Measured(values={"cells of Prop. 1's regime": gamma}, numbers=numbers, figures=[_fig(ctx, fig)])


def _rank_study(ctx: Context, name: str = "rank_study", **change) -> str:
  """Paper: the flagfile's MNIST-10k run (K = 784, 25 epochs, k = 60), with ``change``; smoke: the digits below."""
  smoke = dict(dataset="digits", hidden=32, epochs=5, k=30, num_coords=100, t1_n=256) if ctx.scale == "smoke" else {}
  return ctx.script(name, RANK_STUDY, flagfile=MNIST, **change, **({} if change else smoke))


# App. C, Fig. 1 (a), (c)-(i): one hyper-parameter of (b) changed each; (d) is (b)'s run over every weight.
APPC_VARIANTS = (
  ("a: k=30", {"k": 30}), ("c: k=90", {"k": 90}), ("d: all weights", None), ("e: K=500", {"hidden": 500}),
  ("f: K=1000", {"hidden": 1000}), ("g: RMSprop", {"optimizer": "rmsprop"}),
  ("h: two hidden layers", {"hidden_layers": 2}), ("i: ReLU", {"activation": "relu"}))


def share_above(ranks: list[int], rank: int, level: float) -> float:
  """Percentage points by which the share of ``ranks`` at or below ``rank`` exceeds ``level`` (a fraction)."""
  return 100.0 * (sum(r <= rank for r in ranks) / len(ranks) - level) if ranks else math.nan


def _plot_rank_hists(path: str, panels: dict[str, list[int]], title: str) -> str:
  """One histogram of approximate ranks per panel ``{label: ranks}``, in a row of small plots."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, axes = plt.subplots(1, len(panels), figsize=(max(3.0, 2.0 * len(panels)), 2.4), dpi=90, sharey=True,
                           squeeze=False)
  for ax, (label, ranks) in zip(axes[0], panels.items()):
    ax.hist(ranks, bins=[v + 0.5 for v in range(0, max(ranks, default=1) + 1)], edgecolor="k")
    ax.axvline(10.5, color="r", lw=0.8)
    ax.set_title(label, fontsize=8)
    ax.set_xlabel("rank (77)", fontsize=8)
  axes[0][0].set_ylabel("slices")
  fig.suptitle(title, fontsize=9)
  fig.tight_layout()
  os.makedirs(os.path.dirname(path), exist_ok=True)
  fig.savefig(path)
  plt.close(fig)
  return path


def _appc_numbers(runs: list[tuple[dict, list[int]]], label: str = "") -> dict:
  keys = ("median_rank", "frac_rank_le_5", "frac_rank_le_10", "max_rank", "ranked", "zero_slices", "train_accuracy",
          "test_accuracy", "p", "k")
  return {f"{k.replace('_', ' ')}{label}": [float(s[k]) for s, _ in runs] for k in keys}


def _appc_runs(ctx: Context, name: str = "rank_study", **change) -> list[tuple[dict, list[int]]]:
  """(App. C summary, ranks) per training seed: run ``name`` (seed 0), then ``name_s<seed>`` (paper: seeds 1-9)."""
  outs = [_rank_study(ctx, name, **change)] + [_rank_study(ctx, f"{name}_s{seed}", **{"study": "appc", **change},
                                                           seed=seed) for seed in ctx.pick((), range(1, 10))]
  return [(_load(out, "summary.json")["appc"], _load(out, "ranks.json")) for out in outs]


def appc_rank(ctx: Context) -> engine.Measured:
  """App. C Fig. 1 (b): per training seed, the shares of ranked slices with rank <= 10 and <= 5 above 80% and 50%."""
  runs = _appc_runs(ctx)
  numbers = {**_appc_numbers(runs), "all weights: median rank": [s["all_weights"]["median_rank"] for s, _ in runs],
             "all weights: fraction rank <= 10": [s["all_weights"]["frac_rank_le_10"] for s, _ in runs]}
  fig = _plot_rank_hists(os.path.join(ctx.root, "fig", "fedlrgd_appc_rank.png"), {"{dataset}, K = {hidden}, k = {k}"
                         .format(**runs[0][0]): [r for _, ranks in runs for r in ranks]},
                         "App. C Fig. 1 (b): 90%-energy ranks of the non-trivial slices (all seeds)")
  values = {"rank <= 10 (almost all: 80%)": {"mlp": [share_above(ranks, 10, 0.8) for _, ranks in runs]},
            "rank <= 5 (about half: 50%)": {"mlp": [share_above(ranks, 5, 0.5) for _, ranks in runs]}}
  return engine.Measured(values=values, numbers=numbers, figures=[_fig(ctx, fig)])


def appc_variants(ctx: Context) -> engine.Measured:
  """App. C Fig. 1's variants, rank_study runs per training seed (paper scale); (d) from Fig. 1 (b)'s runs."""
  values, numbers, panels = {}, {}, {}
  for label, change in APPC_VARIANTS:
    if change is None:
      values[label] = {"mlp": [100.0 * (s["all_weights"]["frac_rank_le_10"] - 0.8) for s, _ in _appc_runs(ctx)]}
      continue
    runs = _appc_runs(ctx, "rank_study_" + label.split(":")[0], study="appc", **change)
    panels[label] = [r for _, ranks in runs for r in ranks]
    values[label] = {"mlp": [share_above(ranks, 10, 0.8) for _, ranks in runs]}
    numbers.update(_appc_numbers(runs, f" {label}"))
  fig = _plot_rank_hists(os.path.join(ctx.root, "fig", "fedlrgd_appc_variants.png"), panels,
                         "App. C Fig. 1 variants: 90%-energy ranks of the non-trivial slices (red: 10)")
  return engine.Measured(values=values, numbers=numbers, figures=[_fig(ctx, fig)])


def theorem1(ctx: Context) -> engine.Measured:
  """Theorem 1 on 10 draws of (y, vartheta) (seed 0: the App. C run's): per draw and (d, eta), slope - (-2 eta/d)."""
  smoke = {"t1_n": 256} if ctx.scale == "smoke" else {}  # as the smoke App. C run's kernels
  seeds = [_load(_rank_study(ctx), "summary.json")["theorem1"]]
  seeds += [_load(ctx.script(f"theorem1_s{seed}", RANK_STUDY, flagfile=MNIST, study="theorem1", seed=seed, **smoke),
                  "summary.json")["theorem1"] for seed in range(1, ctx.pick(5, 10))]
  values, numbers = {}, {"seeds": float(len(seeds))}
  for i, row in enumerate(seeds[0]):
    key = f"d={row['d']} eta={row['eta']:g}"
    values[key] = {"kernel": [run[i]["slope"] - row["rate"] for run in seeds]}
    numbers[f"fitted slope {key} (rate {row['rate']:.3g}, threshold r >= {row['threshold']:.3g})"] = [
        run[i]["slope"] for run in seeds]
    if "bound_holds" in row:
      numbers[f"explicit bound holds {key} (seeds)"] = float(sum(bool(run[i]["bound_holds"]) for run in seeds))
  fig = plot_curves(os.path.join(ctx.root, "fig", "fedlrgd_theorem1.png"),
                    {f"d={row['d']}, eta={row['eta']:g}": [list(enumerate(run[i]["tails"], 1)) for run in seeds]
                     for i, row in enumerate(seeds[0])},
                    "r", "(1/nk) ||M - M_r||_F^2", "Theorem 1: tail energy of ||y - theta||_2^eta", logy=True)
  # A (d, eta) whose threshold lies above most of the fitted r tests nothing there: listed, not counted.
  gates = {f"d={r['d']} eta={r['eta']:g}": {"kernel": "out of range"} for r in seeds[0]
           if r["threshold"] > len(r["tails"]) / 2}
  return engine.Measured(values=values, gates=gates, numbers=numbers, figures=[_fig(ctx, fig)])


def s1b_logistic(ctx: Context) -> engine.Measured:
  """S1 (b): per gradient coordinate q, the R^2 of an exponential and of a power-law fit to the soft-label
  logistic kernels' singular values; 10 draws, each one rank_study run (seed 0's keeps its earlier name)."""
  runs = [_load(ctx.script("logistic_spectrum" + (f"_s{seed}" if seed else ""), RANK_STUDY, study="logistic",
                           t1_n=1000, **({"seed": seed} if seed else {})), "summary.json")["logistic"]
          for seed in range(10)]
  values, numbers = {}, {"n = k": float(runs[0]["n"]), "d": float(runs[0]["d"])}
  for i, row in enumerate(runs[0]["coords"]):
    rows = [run["coords"][i] for run in runs]
    values[f"q={row['q']}"] = {"exponential": [r["r2_exponential"] for r in rows],
                               "power law": [r["r2_power"] for r in rows]}
    for j in (2, 4, 8, 12):
      numbers[f"sigma_{j} / sigma_1 q={row['q']}"] = [r["sv_ratio"][j - 1] for r in rows]
    numbers[f"decay per j (log) q={row['q']}"] = [r["exp_rate"] for r in rows]
  figure = os.path.join(ctx.root, "runs", "logistic_spectrum", "logistic.png")
  return engine.Measured(values=values, numbers=numbers, figures=[_fig(ctx, figure)] if os.path.exists(figure) else [])


MEASURES = {f"fedlrgd.{f.__name__}": f for f in (appc_rank, appc_variants, theorem1, s2_fidelity, s4_shift,
                                                 s4_smoothness, s1b_logistic, s5_crossover, s3_convergence, precision,
                                                 ledger_runs)}
# Runs that do not fit the smoke budget beside the test batch (about 28 CPU s): paper scale only.
PAPER_ONLY = {f"fedlrgd.{n}" for n in ("appc_variants", "precision", "s4_shift", "s4_smoothness", "s1b_logistic",
                                       "s3_convergence", "ledger_runs")}

CLAIMS = [c.paper_only() if c.id in PAPER_ONLY else c for c in engine.claims("fedlrgd", MEASURES)]
PENDING: list[str] = []
