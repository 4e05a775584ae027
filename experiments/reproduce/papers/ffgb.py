"""The claims of FFGB, FFGB.C, FFGB.L (Shen et al. 2022; ``../shared/specs/ffgb.md``).

The claims are declared in ``experiments/reproduce/declarations/ffgb.toml`` and judged by
:mod:`experiments.reproduce.engine`; this module only measures: it runs (or reads) each claim's
runs of the ``ffgb_*.cfg`` flagfiles and returns their numbers (:class:`engine.Measured`).
"""

from __future__ import annotations

import csv
import json
import math
import os

from experiments.reproduce import engine
from experiments.reproduce.claims import Context, Evidence, Substitute, curves, final, values_of
from experiments.reproduce.report import plot_curves

TITLE = "FFGB, FFGB.C, FFGB.L (Shen et al. 2022): federated functional gradient boosting"

# The authors'-code preset with the paper's learner (lecun init, no activation after the output
# layer): the ablation that separates the code's learner from its other settings.
CODE_PAPER_LEARNER = "ffgb_code:mlp_init=default:mlp_output_act=false"
# The paper form with the code's learner (N(0, 1/fan_in^2) weights, leaky ReLU after the output).
PAPER_CODE_LEARNER = "ffgb:mlp_init=faithful:mlp_output_act=true"

DATA = {"digits": dict(cfg="ffgb_digits_s0{s}.cfg", clients=14, smoke_budget=58),
        "mnist10k": dict(cfg="ffgb_mnist10k_s0{s}.cfg", clients=56, smoke_budget=114),
        # the paper's Fig. 1 (K = 4 / 3, eta0 = 10 / 20, CNN learner) where --data_dir holds CIFAR-10
        "cifar10": dict(cfg="ffgb_cifar10_s0{s}.cfg", clients=56, smoke_budget=None)}
K_MAIN = 2  # the digits / MNIST flagfiles' local steps (paper MNIST K = 2)
ACC = "final test accuracy"


def _versus_algs(ctx: Context, data: str = "digits") -> list[str]:
  if data == "cifar10":  # the flagfile's own: the paper form, its no-residual ablation, FedAvg
    return ["ffgb", "ffgb_nores", "fedavg"]
  return ["ffgb", "ffgb_code", CODE_PAPER_LEARNER, "fedavg"] + ctx.pick([], ["ffgb_nores", PAPER_CODE_LEARNER])


def _versus(ctx: Context, data: str, s: int) -> list[dict[str, list[dict]]]:
  """Runs of ``ffgb_<data>_s0<s>.cfg`` (one per seed) at equal communication: ffgb, ffgb_code,
  the code preset with the paper's learner, FedAvg (paper scale also ffgb_nores and ffgb with the
  code's learner). The paper-form and code-preset claims share these runs.

  Smoke: 1 seed, a budget of 2 FFGB rounds on digits (1 on MNIST), 20 oracle steps.
  Paper: the flagfile (budget 2000; 200 oracle steps) with 5 seeds; CIFAR-10 (paper scale, with the data only)
  the paper's settings and its flagfile's algorithms.
  """
  d = DATA[data]
  extra = ctx.paper_data("cifar10") if data == "cifar10" else ctx.pick(
      dict(comm_budget=d["smoke_budget"], oracle_steps=20, eval_every=2), {})
  return ctx.runs([(f"{data}_s0{s}_seed{seed}", d["cfg"].format(s=s),
                    dict(algorithm=_versus_algs(ctx, data), seed=seed, **extra))
                   for seed in ctx.pick((0,), (0, 1, 2, 3, 4))])


def _pct(runs, metric: str):
  """``runs`` with ``metric`` (an accuracy in [0, 1]) in percent, so effects read in pp."""
  return [{lab: [dict(r, **{metric: 100 * r[metric]}) if r.get(metric) is not None else r for r in hist]
           for lab, hist in run.items()} for run in runs]


def _at_round(history: list[dict], rnd: int, metric: str = "test_accuracy") -> float:
  """``metric`` at the last record with round <= ``rnd``."""
  return float([r[metric] for r in history if r["round"] <= rnd and r.get(metric) is not None][-1])


def _comm_curves(runs) -> dict:
  """Test accuracy against models communicated per client: FFGB's logged ``comm`` (2 + N K t, checked by
  ffgb.comm_accounting), FedAvg's 2 + 2 t."""
  return {label: [[(2 + 2 * r["round"] if label == "fedavg" else r["comm"], r["test_accuracy"]) for r in run[label]
                   if r.get("test_accuracy") is not None] for run in runs] for label in runs[0]}


def versus_numbers(ctx: Context, data: str) -> tuple[dict, dict, list[str]]:
  """The runs of :func:`_versus` on ``data`` at s = 0.1 and 0.3 (smoke: 0.1): ``({setting: runs with the test
  accuracy in percent}, numbers, figures)``; the numbers hold ``s=0.S final test accuracy <label>`` (per seed, in
  [0, 1]) for every label and FedAvg's accuracy at FFGB's last round (Fig. 3's equal-rounds view)."""
  settings, numbers, figs = {}, {}, []
  for s in ctx.pick((1,), (1, 3)):
    runs = _versus(ctx, data, s)
    settings[f"s=0.{s}"] = _pct(runs, "test_accuracy")
    for label in runs[0]:
      numbers[f"s=0.{s} {ACC} {label}"] = [final(r[label], "test_accuracy") for r in runs]
    t_ffgb = runs[0]["ffgb"][-1]["round"]
    numbers[f"s=0.{s} fedavg test accuracy at FFGB's last round ({t_ffgb})"] = [_at_round(r["fedavg"], t_ffgb)
                                                                                for r in runs]
    name = f"ffgb_{data}_s0{s}"  # the paper-form and code-preset claims plot the same shared runs
    figs.append(plot_curves(os.path.join(ctx.root, "fig", name + "_comm.png"), _comm_curves(runs),
                            "communication (models per client)", "test accuracy",
                            f"FFGB vs FedAvg, {data}, s = 0.{s} (equal communication)"))
    figs.append(plot_curves(os.path.join(ctx.root, "fig", name + "_rounds.png"), curves(runs, "test_accuracy"),
                            "round", "test accuracy", f"FFGB vs FedAvg, {data}, s = 0.{s} (rounds)"))
  return settings, numbers, [os.path.relpath(f, ctx.root) for f in figs]


def values_from_numbers(numbers: dict, main: str) -> dict:
  """``{setting: {arm: per-seed test accuracy in percent}}`` of ``main`` and FedAvg from a ``numbers`` dict
  (:func:`versus_numbers`'s, or a record's: per-seed lists or their JSON :class:`Stat` form)."""
  vals = lambda n: list(n) if isinstance(n, list) else values_of(n)  # noqa: E731
  settings = sorted({k.split(" ", 1)[0] for k in numbers if k.startswith("s=0.") and f" {ACC} " in k})
  return {s: {arm: [100 * v for v in vals(numbers[f"{s} {ACC} {arm}"])] for arm in (main, "fedavg")}
          for s in settings}


def versus_fedavg(data: str, code: bool):
  """The measure of 'FFGB (paper form, or with ``code`` the authors'-code preset) beats FedAvg at equal
  communication' on ``data``: digits gives the engine the runs (its curve gates apply), MNIST-10k the final
  accuracies, which its ``from_record`` reads from a record whose runs' metrics were not stored."""
  main = "ffgb_code" if code else "ffgb"

  def measure(ctx: Context) -> engine.Measured:
    settings, numbers, figs = versus_numbers(ctx, data)
    if data == "digits":
      return engine.Measured(runs=settings, numbers=numbers, figures=figs)
    return engine.Measured(values=values_from_numbers(numbers, main), numbers=numbers, figures=figs)

  def from_record(record: dict) -> engine.Measured:
    numbers = {k: v for k, v in record["numbers"].items() if k.startswith("s=0.") and f" {ACC} " in k
               or "at FFGB's last round" in k}
    return engine.Measured(values=values_from_numbers(numbers, main), numbers=numbers)

  if data == "mnist10k":
    measure.from_record = from_record
  return measure


def comm_accounting(ctx: Context) -> Evidence:
  """FFGB's logged comm is 2 + N K t, and the budget gives ceil((B - 2) / cost) rounds (a check)."""
  run = _versus(ctx, "digits", 1)[0]
  budget = ctx.pick(DATA["digits"]["smoke_budget"], 2000)
  n_k = DATA["digits"]["clients"] * K_MAIN
  ledger_ok = all(r["comm"] == 2 + n_k * r["round"] for r in run["ffgb"])
  t_ffgb, t_fedavg = run["ffgb"][-1]["round"], run["fedavg"][-1]["round"]
  want_ffgb, want_fedavg = math.ceil((budget - 2) / n_k), math.ceil((budget - 2) / 2)
  numbers = {"FFGB rounds": float(t_ffgb), "FFGB rounds expected": float(want_ffgb),
             "FedAvg rounds": float(t_fedavg), "FedAvg rounds expected": float(want_fedavg),
             "FFGB final comm": float(run["ffgb"][-1]["comm"]), "budget": float(budget)}
  rounds_ok = (t_ffgb, t_fedavg) == (want_ffgb, want_fedavg)
  if ledger_ok and rounds_ok:
    return Evidence("reproduced", "comm = 2 + N K t at every record and both round counts match the budget",
                    numbers=numbers)
  return Evidence("not reproduced", f"ledger matches: {ledger_ok}; round counts match: {rounds_ok}", numbers=numbers)


def oracle_fidelity(ctx: Context) -> Evidence:
  """The MLP oracle's empirical gamma-hat on every call of every FFGB variant of the digits s = 0.1 runs (a
  diagnostic of eq. (9)'s weak-learning assumption): reproduced when every call has gamma-hat > 0, partly when
  the paper form's do, not reproduced otherwise."""
  runs = _versus(ctx, "digits", 1)
  worst = {lab: [min(r["gamma_hat_min_all"] for r in run[lab][1:]) for run in runs] for lab in runs[0]
           if lab != "fedavg"}
  numbers = {f"min gamma-hat over all calls {k}": v for k, v in worst.items()}
  numbers.update({f"last-round mean gamma-hat {k}": [final(run[k], "gamma_hat_mean") for run in runs] for k in worst})
  bad = [k for k, v in worst.items() if min(v) <= 0]
  if not bad:
    return Evidence("reproduced", "every oracle call of every FFGB variant has gamma-hat > 0", numbers=numbers)
  verdict = "not reproduced" if "ffgb" in bad else "partly reproduced"
  return Evidence(verdict, f"calls with gamma-hat <= 0: {', '.join(bad)} (200 Adam steps per call, the paper "
                  "1,000)", numbers=numbers)


def _round_settings(runs, labels) -> dict:
  """The runs cut at the middle evaluated round and whole (the last): ``{"round r": runs}``."""
  n = min(len(r[labels[0]]) for r in runs)
  mid = [{k: r[k][: n // 2 + 1] for k in labels} for r in runs]
  return {f"round {mid[0][labels[0]][-1]['round']}": mid, f"round {runs[0][labels[0]][n - 1]['round']}": runs}


def fig2a_residual(ctx: Context) -> engine.Measured:
  """Fig. 2(a): FFGB and its no-residual variant's training accuracy (pp) at the middle and the last
  evaluated round, on digits; a seed's two variants share its split and initialisation."""
  extra = ctx.pick(dict(rounds=2, oracle_steps=20, eval_every=2), {})
  runs = ctx.runs([(f"residual_seed{seed}", "ffgb_residual_ablation.cfg", dict(seed=seed, **extra))
                   for seed in ctx.pick((0,), range(10))])
  fig = plot_curves(os.path.join(ctx.root, "fig", "ffgb_fig2a_residual.png"), curves(runs, "train_accuracy"), "round",
                    "train accuracy", "FFGB Fig. 2a: residual vs no residual (K = 10, digits)")
  return engine.Measured(runs=_round_settings(_pct(runs, "train_accuracy"), ["ffgb", "ffgb_nores"]),
                         numbers={"last-round mean gamma-hat ffgb": [final(r["ffgb"], "gamma_hat_mean") for r in runs]},
                         figures=[os.path.relpath(fig, ctx.root)])


K_LABELS = tuple(f"ffgb-local_steps={k}" for k in (1, 5, 10, 20, 40))


def fig2b_k_sweep(ctx: Context) -> engine.Measured:
  """Fig. 2(b): training accuracy (pp) by K at the middle and the last evaluated round, on digits (paper scale
  swaps the flagfile's rf_ridge oracle for the paper's MLP); a seed's K runs share its split and initialisation.
  Numbers: the training loss by K at the first evaluated round after 0 and at the last."""
  extra = ctx.pick(dict(rounds=2, eval_every=2), dict(weak_learner="mlp", oracle_steps=200))
  runs = ctx.runs([(f"k_sweep_seed{seed}", "ffgb_k_sweep.cfg", dict(seed=seed, **extra))
                   for seed in ctx.pick((0,), (0, 1, 2, 3, 4))])
  figs = [plot_curves(os.path.join(ctx.root, "fig", "ffgb_fig2b_k.png"), curves(runs, "train_accuracy"), "round",
                      "train accuracy", "FFGB Fig. 2b: local steps K (digits)"),
          plot_curves(os.path.join(ctx.root, "fig", "ffgb_fig2b_k_loss.png"), curves(runs, "objective"), "round",
                      "training loss", "FFGB Fig. 2b: local steps K (the diagnostic's loss)", logy=True)]
  numbers = {f"train loss at round {rnd} {k}": [_at_round(r[k], rnd, "objective") for r in runs] for k in K_LABELS
             for rnd in (runs[0][K_LABELS[0]][1]["round"], runs[0][K_LABELS[0]][-1]["round"])}
  return engine.Measured(runs=_round_settings(_pct(runs, "train_accuracy"), K_LABELS), numbers=numbers,
                         figures=[os.path.relpath(f, ctx.root) for f in figs])


def _sweep_finals(folder: str) -> dict[str, dict[float, list[float]]]:
  """``{algorithm: {feature_shift: [final objective per seed, in seed order]}}`` from a sweep's results.csv
  (a seed's runs at every shift share its draws, so the lists pair by position)."""
  rows: dict[str, dict[float, dict[int, float]]] = {}
  with open(os.path.join(folder, "results.csv")) as f:
    for row in csv.DictReader(f):
      rows.setdefault(row["algorithm"], {}).setdefault(float(row["feature_shift"]), {})[int(row["seed"])] = float(
          row["final_objective"])
  return {alg: {eps: [v for _, v in sorted(by_seed.items())] for eps, by_seed in per.items()}
          for alg, per in rows.items()}


def shift_sweep(name: str, cfg: str, alg: str, shifts, ylabel: str, title: str):
  """The measure of a feature-shift claim: ``alg``'s final objective per seed at each shift (the levels
  ``eps=<shift>``) of ``experiments.sweep`` over ``feature_shift`` (smoke: shifts 0 and 1, 20 rounds, 1 seed);
  every algorithm's finals are in the numbers."""
  def measure(ctx: Context) -> engine.Measured:
    grid = ctx.pick((0, 1), shifts)
    folder = ctx.script(f"{name}_sweep", "experiments.sweep", flagfile=f"experiments/flagfiles/{cfg}",
                        sweep=f"feature_shift={','.join(map(str, grid))}", seeds=ctx.pick(1, 5),
                        **ctx.pick(dict(rounds=20, eval_every=20), {}))
    finals = _sweep_finals(folder)
    cur = {lab: [[(e, v[i]) for e, v in sorted(per.items())] for i in range(len(next(iter(per.values()))))]
           for lab, per in finals.items()}
    fig = plot_curves(os.path.join(ctx.root, "fig", f"{name}.png"), cur, "feature_shift (epsilon)", ylabel, title)
    return engine.Measured(values={"final round": {f"eps={e:g}": v for e, v in finals[alg].items()}},
                           numbers={f"final objective {a} eps={e:g}": v for a in finals
                                    for e, v in sorted(finals[a].items())},
                           figures=[os.path.relpath(fig, ctx.root)])
  return measure


# Thm 3.1 / Cor. 3.1 on the exact tabular task (experiments/ffgb/rate.py): each sweep's grid at each scale.
RATE_FLAGS = {"smoke": dict(seeds=1, a_rounds=(50, 100, 200), b_rounds=300, b_local_steps=(1, 2, 5, 10),
                            c_rounds=(16, 64, 256)),
              "paper": dict(seeds=5, a_rounds=(50, 100, 200, 400), b_rounds=300, b_local_steps=(1, 2, 5, 10, 20),
                            c_rounds=(16, 64, 256, 1024))}
# part: (grid key, x, the declared setting, the bound's exponent)
RATE_PARTS = {"a": ("rounds", "T", "(a) exact oracle, error vs T", 1.0),
              "b": ("local_steps", "K", "(b) gamma = 0.5, T = 300, error vs K", 1.0),
              "c": ("rounds", "T", "(c) gamma = 0.5, K = ceil(sqrt(T)), error vs T", 0.5)}

def thm31_rate(ctx: Context) -> engine.Measured:
  """Thm 3.1 (a, b) and Cor. 3.1 (c) on the semi-heterogeneous tabular square-loss task (N = 8 clients on one
  grid of 12 points, f* = mean_i ybar_i / (1 + mu), mu = 0.1, the scaled oracle h = gamma phi,
  eta = 2/(mu(tK + k + 1)), f^0 = 0; ``experiments/ffgb/rate.py``): per seed, the least-squares slope of log
  relative error ||f^T - f*||^2 / ||f*||^2 on log T or log K, divided by the bound's exponent (the raw slopes
  are in the numbers)."""
  out = ctx.script("ffgb_thm31_rate", "experiments.ffgb.rate", **ctx.pick(RATE_FLAGS["smoke"], RATE_FLAGS["paper"]))
  with open(os.path.join(out, "result.json")) as f:
    res = json.load(f)
  values, numbers, cur = {}, {}, {"T": {}, "K": {}}
  for part, (key, xname, setting, ref) in RATE_PARTS.items():
    xs, errs = res[part][key], res[part]["errors"]
    slopes = [engine.loglog_slope(xs, e) for e in errs]
    values[setting] = {"ffgb": [v / ref for v in slopes]}
    numbers[f"({part}) slope of log error vs log {xname}"] = slopes
    for j, x in enumerate(xs):
      numbers[f"({part}) relative error at {xname} = {x}"] = [e[j] for e in errs]
    cur[xname][setting] = [[(float(x), float(y)) for x, y in zip(xs, e)] for e in errs]
    y0 = sum(e[0] for e in errs) / len(errs)
    cur[xname][f"({part}) {xname}^-{ref:g} reference"] = [[(float(x), y0 * (xs[0] / x) ** ref) for x in xs]]
  figs = [plot_curves(os.path.join(ctx.root, "fig", f"ffgb_thm31_rate_{x}.png"), c, "rounds T" if x == "T" else
                      "local steps K", "||f^T - f*||^2 / ||f*||^2", f"FFGB Thm 3.1 / Cor. 3.1: error vs {x}",
                      logy=True, logx=True, show_n=False) for x, c in cur.items()]
  # (a): eta capped at 0.01 converges geometrically, so any converging run beats 1/T (VERDICTS §3: trivial).
  return engine.Measured(values=values, gates={RATE_PARTS["a"][2]: {"ffgb": "trivial"}}, numbers=numbers,
                         figures=[os.path.relpath(f, ctx.root) for f in figs])


MEASURES = {
    "ffgb.fig4_digits": versus_fedavg("digits", code=False),
    "ffgb.fig4_digits_code": versus_fedavg("digits", code=True),
    "ffgb.fig3_mnist10k": versus_fedavg("mnist10k", code=False),
    "ffgb.fig3_mnist10k_code": versus_fedavg("mnist10k", code=True),
    "ffgb.fig2a_residual": fig2a_residual,
    "ffgb.fig2b_k_sweep": fig2b_k_sweep,
    "ffgb.c_tv_shift": shift_sweep("ffgb_c_tv", "ffgb_c_tv_shift.cfg", "ffgb_c", (0, 0.25, 0.5, 1),
                                   "final objective (CE on alpha)", "FFGB.C under TV shift"),
    "ffgb.l_w1_shift": shift_sweep("ffgb_l_w1", "ffgb_l_w1_shift.cfg", "ffgb_l", (0, 0.25, 0.5, 1, 2),
                                   "final objective (square loss)", "FFGB.L under W1 shift"),
    "ffgb.thm31_rate": thm31_rate,
    "ffgb.comm_accounting": comm_accounting,
    "ffgb.oracle_fidelity": oracle_fidelity,
}

_CIFAR = Substitute("cifar10", "digits (MLP weak learner)", movable=False,
                    elsewhere="ffgb.fig1_cifar10, ffgb.fig2a_cifar10, ffgb.fig2b_cifar10")
SUBSTITUTES = {f: _CIFAR for f in ("ffgb_digits_s01.cfg", "ffgb_digits_s03.cfg", "ffgb_residual_ablation.cfg",
                                   "ffgb_k_sweep.cfg")}
PENDING: list[str] = []

CLAIMS = engine.claims("ffgb", MEASURES)
