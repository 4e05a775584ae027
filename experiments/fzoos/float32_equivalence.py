"""Is FZooS's float32 RFF fit equivalent to the float64 default on Fig. 1? (the `equivalent` form, VERDICTS.md)

Judges the runs declared in docs/benchmarks/fzoos_float32/DECLARATION.md: Fig. 1's federated quadratic
(Shu et al. 2023, §6.1; d = 300, N = 5, T = 10, R = 50, M = 10,000, paper preset), arms ``fzoos`` (the RFF
weights of eq. 6 fitted in float64, the default) and ``fzoos-rff_float32=1`` (fitted in float32,
``FZooSConfig.rff_float32``), both in the same process, C in {0.5, 5, 50}, seeds 0-9.

Measures, paired by seed, difference float32 - float64, computed by the reproduction engine's own
``reduce_runs`` (experiments/reproduce/engine.py) on metric ``optimality_gap`` with optimum 0.0:

* ``F(x_r) - F*`` at r = 10, 25, 50 (kind ``final`` on the records of rounds 0..r), margin 0.03 (F units);
* rounds to 10% of the initial gap (kind ``reach``, fraction 0.1), margin 2 rounds (``inf``: never reached).

Each (C, measure) is one TOST (``experiments.reproduce.protocol.equivalent``: the 90% interval of the mean
paired difference inside ±margin). The float32 path is equivalent only if all of them hold.

Layout read: ``RUNS/C<C>_s<S>/<label>/metrics.jsonl.gz`` (``experiments.run`` output, metrics gzipped).
Writes ``equivalence.json``, ``equivalence.md`` and ``float32_vs_float64_fig1.png`` into ``--out``::

  python -m experiments.fzoos.float32_equivalence \\
      --runs=docs/benchmarks/fzoos_float32/runs --out=docs/benchmarks/fzoos_float32
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping, Sequence

import numpy as np
from absl import app, flags

from experiments.reproduce import engine, protocol
from fedsim import results

F64, F32 = "fzoos", "fzoos-rff_float32=1"
ROUNDS = (10, 25, 50)               # F(x_r) - F* read at these rounds
MARGIN_F, MARGIN_ROUNDS = 0.03, 2.0  # declared before the runs (DECLARATION.md)
METRIC = "optimality_gap"
SETTINGS, SEEDS = ("C=0.5", "C=5", "C=50"), tuple(range(10))  # the declared runs
FIGURE = "float32_vs_float64_fig1.png"

FLAGS = flags.FLAGS


def define_flags():
  flags.DEFINE_string("runs", "docs/benchmarks/fzoos_float32/runs", "Folder of the C<C>_s<S> run folders.")
  flags.DEFINE_string("out", "docs/benchmarks/fzoos_float32", "Where the table, the JSON and the figure go.")


def load(root: str) -> dict[str, dict[int, dict[str, list[dict]]]]:
  """``{"C=5": {seed: {label: records}}}`` of the finished runs under ``root`` (both arms present)."""
  out: dict[str, dict[int, dict[str, list[dict]]]] = {}
  for name in sorted(os.listdir(root)):
    m = re.fullmatch(r"C([0-9.]+)_s(\d+)", name)
    if not m:
      continue
    folders = {lab: os.path.join(root, name, lab) for lab in (F64, F32)}
    if not all(os.path.exists(os.path.join(f, results.METRICS_FILE + ".gz")) for f in folders.values()):
      continue
    run = {lab: results.read_metrics(f) for lab, f in folders.items()}
    if any(run[lab][-1]["round"] < ROUNDS[-1] for lab in run):
      continue  # an unfinished run
    out.setdefault(f"C={float(m.group(1)):g}", {})[int(m.group(2))] = run
  return out


def _upto(records: Sequence[dict], r: int) -> list[dict]:
  """The records of rounds 0..r; raises ValueError if round r was not evaluated."""
  kept = [x for x in records if x["round"] <= r]
  if not kept or kept[-1]["round"] != r:
    raise ValueError(f"round {r} is not in the records (last kept: {kept[-1]['round'] if kept else None})")
  return kept


def measures(runs: Sequence[Mapping[str, list[dict]]]) -> dict[str, dict[str, list[float]]]:
  """``{measure name: {label: per-seed values}}`` of one setting's runs (one per seed), by the engine."""
  out = {}
  for r in ROUNDS:
    cut = [{lab: _upto(run[lab], r) for lab in (F64, F32)} for run in runs]
    c = engine.reduce_runs(cut, [F64, F32], engine.MeasureSpec("final", "F - F*", METRIC, optimum=0.0))
    out[f"F(x_{r}) - F*"] = c.values
  c = engine.reduce_runs(list(runs), [F64, F32],
                         engine.MeasureSpec("reach", "rounds", METRIC, x="round", fraction=0.1, optimum=0.0))
  out["rounds to 10% of the initial gap"] = c.values
  return out


def margin_of(measure: str) -> tuple[float, str]:
  """The declared margin and unit of a measure name."""
  return (MARGIN_ROUNDS, "rounds") if measure.startswith("rounds") else (MARGIN_F, "F")


def judge(table: Mapping[str, Mapping[str, Mapping[str, Sequence[float]]]]) -> tuple[list[protocol.Result], bool]:
  """The TOST of every (setting, measure) and the declared rule.

  Args:
    table: ``{setting: {measure name: {F64: per-seed values, F32: per-seed values}}}`` (same seed order);
      a measure name starting with "rounds" gets the rounds margin (2), any other the F margin (0.03).

  Returns:
    (one ``protocol.equivalent`` result per (setting, measure), named "<setting>: <measure>"; whether every
    one of them holds). Raises ValueError (from ``protocol``) on unpaired values.
  """
  rows = []
  for setting, by_measure in table.items():
    for measure, arms in by_measure.items():
      margin, unit = margin_of(measure)
      rows.append(protocol.equivalent(f"{setting}: {measure}", arms[F32], arms[F64], margin=margin, unit=unit))
  return rows, bool(rows) and all(r.outcome == "holds" for r in rows)


def _num(v: float) -> float | str:
  return v if math.isfinite(v) else str(v)


def _wall(runs: Mapping[int, Mapping[str, list[dict]]]) -> dict[str, dict[str, list[float]]]:
  """Per arm, per seed: ``total``, the arm's elapsed seconds at its last record (``wall_time_s``, compilation
  included), and ``round``, the median seconds of one round after the second (``wall_time_s`` differences)."""
  def per_round(recs):
    t = [float(r.get("wall_time_s", math.nan)) for r in recs if r["round"] >= 2]
    return float(np.median(np.diff(t))) if len(t) > 1 else math.nan
  return {lab: {"total": [float(runs[s][lab][-1].get("wall_time_s", math.nan)) for s in sorted(runs)],
                "round": [per_round(runs[s][lab]) for s in sorted(runs)]} for lab in (F64, F32)}


def figure(data: Mapping[str, Mapping[int, Mapping[str, list[dict]]]], path: str) -> None:
  """Mean F(x_r) - F* over seeds, per round, both arms, one panel per setting (log scale)."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  settings = sorted(data, key=lambda s: float(s.split("=")[1]))
  fig, axes = plt.subplots(1, len(settings), figsize=(4.2 * len(settings), 3.4), squeeze=False)
  for ax, setting in zip(axes[0], settings):
    for lab, style, name in ((F64, "-", "float64 (default)"), (F32, "--", "rff_float32=1")):
      curves = np.asarray([[r[METRIC] for r in run[lab]] for run in data[setting].values()])
      rounds = [r["round"] for r in next(iter(data[setting].values()))[lab]]
      ax.plot(rounds, curves.mean(axis=0), style, label=f"{name}")
    ax.set_yscale("log")
    ax.set_title(f"{setting} ({len(data[setting])} seeds)")
    ax.set_xlabel("round r")
    ax.set_ylabel("mean F(x_r) - F*")
    ax.legend(fontsize=8)
  fig.suptitle("FZooS, Fig. 1 quadratic (paper preset): RFF fit float64 vs float32", fontsize=10)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError("no positional arguments")
  data = load(FLAGS.runs)
  if not data:
    raise app.UsageError(f"no finished C<C>_s<S> runs with both {F64} and {F32} under {FLAGS.runs}")
  order = sorted(data, key=lambda s: float(s.split("=")[1]))
  table = {s: measures([data[s][k] for k in sorted(data[s])]) for s in order}
  rows, all_hold = judge(table)
  complete = order == list(SETTINGS) and all(sorted(data[s]) == list(SEEDS) for s in order)
  equivalent = all_hold and complete   # the rule is judged on the declared runs only
  walls = {s: _wall(data[s]) for s in order}
  os.makedirs(FLAGS.out, exist_ok=True)
  figure(data, os.path.join(FLAGS.out, FIGURE))
  record = {
      "declaration": "docs/benchmarks/fzoos_float32/DECLARATION.md",
      "rule": "equivalent only if every (C, measure) comparison holds by protocol.equivalent",
      "equivalent": equivalent, "all_hold": all_hold, "complete": complete,
      "seeds": {s: sorted(data[s]) for s in order},
      "comparisons": [{"comparison": r.setting, "n": len(r.per_seed), "mean_diff": _num(r.effect),
                       "ci90": [_num(r.interval[0]), _num(r.interval[1])], "margin": margin_of(r.setting)[0],
                       "unit": r.unit, "outcome": r.outcome, "p": _num(r.p), "diffs": [_num(d) for d in r.per_seed]}
                      for r in rows],
      "values": {s: {m: {lab: [_num(v) for v in vals] for lab, vals in arms.items()} for m, arms in table[s].items()}
                 for s in order},
      "wall_s_per_arm": walls,
  }
  with open(os.path.join(FLAGS.out, "equivalence.json"), "w") as f:
    json.dump(record, f, indent=1)
  lines = ["# FZooS rff_float32 vs float64 on Fig. 1: equivalence (TOST, margins declared before the runs)", "",
           "Written by `python -m experiments.fzoos.float32_equivalence`; declaration: DECLARATION.md. "
           "Difference = float32 - float64, paired by seed; outcome by `experiments/reproduce/protocol.py: "
           "equivalent` (`holds`: the 90% CI lies inside ±δ).", "",
           f"**Rule: every comparison holds → {'EQUIVALENT' if equivalent else 'NOT shown equivalent'}** "
           f"({sum(r.outcome == 'holds' for r in rows)} of {len(rows)} hold"
           + ("" if complete else f"; INCOMPLETE: the declaration asks for seeds 0-9 at each of {', '.join(SETTINGS)}")
           + ").", "",
           "| C | measure | n | mean diff | 90% CI | δ | outcome | p |", "|---|---|---|---|---|---|---|---|"]
  for r in rows:
    setting, measure = r.setting.split(": ", 1)
    lines.append(f"| {setting[2:]} | {measure} | {len(r.per_seed)} | {r.effect:+.3g} | "
                 f"[{r.interval[0]:+.3g}, {r.interval[1]:+.3g}] | ±{margin_of(measure)[0]:g} {r.unit} | "
                 f"{r.outcome} | {r.p:.3g} |")
  for r in rows:
    censored = sum(not math.isfinite(d) for d in r.per_seed)
    if censored:
      lines.append(f"\n- {r.setting}: {censored} of {len(r.per_seed)} seeds have no finite difference (a run never "
                   "reached the target: `inf`); `protocol.equivalent` cannot hold on them (p and the interval "
                   "are NaN).")
  lines += ["", "## Per-seed values (float64 / float32)", ""]
  for s in order:
    seeds = sorted(data[s])
    lines += [f"### {s}", "", "| measure | " + " | ".join(f"s{k}" for k in seeds) + " |",
              "|---|" + "---|" * len(seeds)]
    for m, arms in table[s].items():
      fmt = (lambda v: f"{v:g}") if m.startswith("rounds") else (lambda v: f"{v:.4g}")
      lines.append(f"| {m} | " + " | ".join(f"{fmt(a)} / {fmt(b)}" for a, b in zip(arms[F64], arms[F32])) + " |")
    lines.append("")
  lines += ["## Wall seconds per arm (side by side in one process; float64 arm first)", "",
            "Each arm's `wall_time_s` at its last record (compilation included), and the median seconds of one "
            "round after the second. A side-by-side ratio at about the same load, "
            "not an absolute speed; the float64 arm always runs first.", "",
            "| C | n | float64 s (median) | float32 s (median) | ratio f32/f64 (median over seeds) "
            "| s/round float64 | s/round float32 | ratio f32/f64 per round |", "|---|---|---|---|---|---|---|---|"]
  for s in order:
    a, b = np.asarray(walls[s][F64]["total"]), np.asarray(walls[s][F32]["total"])
    ra, rb = np.asarray(walls[s][F64]["round"]), np.asarray(walls[s][F32]["round"])
    lines.append(f"| {s[2:]} | {len(a)} | {np.median(a):.1f} | {np.median(b):.1f} | {np.median(b / a):.3f} "
                 f"| {np.median(ra):.3f} | {np.median(rb):.3f} | {np.median(rb / ra):.3f} |")
  lines += ["", f"![mean F(x_r) - F* per round]({FIGURE})", ""]
  with open(os.path.join(FLAGS.out, "equivalence.md"), "w") as f:
    f.write("\n".join(lines))
  print("\n".join(lines[:8 + len(rows)]))


if __name__ == "__main__":
  define_flags()
  app.run(main)
