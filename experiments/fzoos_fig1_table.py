"""The FZooS Fig. 1 table (seed 000 §6.1; specs/fzoos.md §7 checks 5-6) from runs of
``experiments/flagfiles/fzoos_fig1_quadratic.cfg``.

Expects ``ROOT/C{C}_s{S}/{algorithm}/metrics.jsonl`` (one ``experiments.run`` per
heterogeneity C and seed S, with ``--eval_every=1`` so that the query-budget
column is exact), e.g.::

  for C in 0.5 5 50; do for S in 0 1 2 3 4; do
    python -m experiments.run --flagfile=experiments/flagfiles/fzoos_fig1_quadratic.cfg \\
      --heterogeneity=$C --seed=$S --eval_every=1 --output_dir=runs/fig1/C${C}_s$S
  done; done
  python -m experiments.fzoos_fig1_table runs/fig1 [--budget=26800] [--markdown=table.md]

Prints, per C and method, the mean +- std over seeds of F(x_R) (check 5) and of
the best-so-far F within a total-query budget (check 6; default 26,800 =
50 FZooS rounds x 5 clients x 107 + 50 initial queries), then the checks:
FZooS below every baseline at every C (both columns), and F(x_R) non-decreasing
in C for every method. Methods whose rounds count no queries (the
``fedavg_true_grad`` oracle) get no budget column.
"""

from __future__ import annotations

import glob
import json
import math
import os
import re
import statistics

from absl import app, flags

_BUDGET = flags.DEFINE_integer("budget", 26800, "Total-query budget (all clients) of check 6.")
_MARKDOWN = flags.DEFINE_string("markdown", None, "Also write the table to this markdown file.")
_METRIC = flags.DEFINE_string("metric", "objective", "Metric to tabulate (lower is better).")


def load(root: str, metric: str) -> dict:
  """{C: {method: {seed: [records]}}} from ROOT/C*_s*/*/metrics.jsonl."""
  out: dict = {}
  for f in glob.glob(os.path.join(root, "C*_s*", "*", "metrics.jsonl")):
    run_dir = os.path.basename(os.path.dirname(os.path.dirname(f)))
    m = re.fullmatch(r"C([0-9.eE+-]+)_s(\d+)", run_dir)
    if not m:
      continue
    recs = [json.loads(line) for line in open(f) if line.strip()]
    recs = [r for r in recs if metric in r and r[metric] is not None and math.isfinite(r[metric])]
    if recs:
      method = os.path.basename(os.path.dirname(f))
      out.setdefault(float(m.group(1)), {}).setdefault(method, {})[int(m.group(2))] = recs
  return out


def best_within(recs: list, budget: int, metric: str):
  """Best-so-far metric over the records whose cumulative queries are <= budget."""
  vals = [r[metric] for r in recs if r["queries"] <= budget]
  return min(vals) if vals else float("nan")


def _fmt(vals):
  if not vals:
    return "-"
  sd = statistics.stdev(vals) if len(vals) > 1 else 0.0
  return f"{statistics.mean(vals):.4f} ± {sd:.4f}"


def main(argv):
  if len(argv) != 2:
    raise app.UsageError("usage: python -m experiments.fzoos_fig1_table ROOT")
  metric, budget = _METRIC.value, _BUDGET.value
  data = load(argv[1], metric)
  if not data:
    raise app.UsageError(f"no ROOT/C*_s*/*/metrics.jsonl under {argv[1]}")
  lines = [f"| C | method | seeds | F(x_R) mean ± std | best F within {budget} queries | last round |",
           "|---|---|---|---|---|---|"]
  final, budgeted = {}, {}
  for C in sorted(data):
    for method in sorted(data[C]):
      seeds = data[C][method]
      fin = [recs[-1][metric] for recs in seeds.values()]
      counted = all(recs[-1]["queries"] > 0 for recs in seeds.values())
      bud = [best_within(recs, budget, metric) for recs in seeds.values()] if counted else []
      final[C, method], budgeted[C, method] = statistics.mean(fin), (statistics.mean(bud) if bud else None)
      last = sorted({recs[-1]["round"] for recs in seeds.values()})
      lines.append(f"| {C:g} | {method} | {len(seeds)} | {_fmt(fin)} | {_fmt(bud)} | {','.join(map(str, last))} |")
  checks = []
  for C in sorted(data):
    if (C, "fzoos") not in final:
      continue
    for col, name in ((final, "F(x_R)"), (budgeted, "budget")):
      others = {m: v for (c, m), v in col.items() if c == C and m != "fzoos" and v is not None
                and m != "fedavg_true_grad"}
      if col[C, "fzoos"] is None or not others:
        continue
      worse = [m for m, v in others.items() if v <= col[C, "fzoos"]]
      checks.append(f"C={C:g} {name}: FZooS {col[C, 'fzoos']:.4f} below every baseline: "
                    f"{'yes' if not worse else 'NO (' + ', '.join(worse) + ' lower or equal)'}")
  for method in sorted({m for (_, m) in final}):
    cs = sorted(c for (c, m) in final if m == method)
    vals = [final[c, method] for c in cs]
    mono = all(a <= b for a, b in zip(vals, vals[1:]))
    checks.append(f"{method}: F(x_R) over C={','.join(f'{c:g}' for c in cs)}: "
                  f"{', '.join(f'{v:.4f}' for v in vals)} non-decreasing: {'yes' if mono else 'NO'}")
  text = "\n".join(lines + [""] + [f"- {c}" for c in checks])
  print(text)
  if _MARKDOWN.value:
    with open(_MARKDOWN.value, "w") as fh:
      fh.write(text + "\n")


if __name__ == "__main__":
  app.run(main)
