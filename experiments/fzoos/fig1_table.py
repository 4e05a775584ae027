"""The FZooS Fig. 1 table (Shu et al. 2023, §6.1; specs/fzoos.md §7 checks 5-6) from runs of
``experiments/flagfiles/fzoos_fig1_quadratic.cfg``.

Expects ``ROOT/C{C}_s{S}/{algorithm}/metrics.jsonl`` (one ``experiments.run`` per
heterogeneity C and seed S, with ``--eval_every=1`` so that the query-budget
column is exact), e.g.::

  for C in 0.5 5 50; do for S in 0 1 2 3 4; do
    python -m experiments.run --flagfile=experiments/flagfiles/fzoos_fig1_quadratic.cfg \\
      --heterogeneity=$C --seed=$S --eval_every=1 --output_dir=runs/fig1/C${C}_s$S
  done; done
  python -m experiments.fzoos.fig1_table runs/fig1 [more roots] [--budget=26800] [--markdown=table.md]

Several roots merge (e.g. a separate ``--algorithm=fedavg_true_grad`` oracle run).
``--fig4`` tabulates instead Fig. 4 (App. F.1; specs §7 check 7) from runs of
``fzoos_fig4_cosine.cfg`` laid out the same way: the last record's
``grad_cosine`` (mean over the T local steps), ``grad_cosine_early`` (t <= T/2)
and ``grad_cosine_late``, with the checks FZooS > every FD baseline and FZooS's
late < early.

Prints, per C and method, the mean +- std over seeds of F(x_R) (check 5) and of
the best-so-far F within a total-query budget (check 6; default 26,800 =
50 FZooS rounds x 5 clients x 107 + 50 initial queries), then the checks:
FZooS below every baseline at every C (both columns), and F(x_R) non-decreasing
in C for every method. Methods whose rounds count no queries (the
``fedavg_true_grad`` oracle) get no budget column.
"""

from __future__ import annotations

import math
import re
import statistics

from absl import app, flags

from fedsim import results

FLAGS = flags.FLAGS


def define_flags():
  flags.DEFINE_integer("budget", 26800, "Total-query budget (all clients) of check 6.")
  flags.DEFINE_string("markdown", None, "Also write the table to this markdown file.")
  flags.DEFINE_string("metric", "objective", "Metric to tabulate (lower is better).")
  flags.DEFINE_float("gap", 0.1, "Column: first round with optimality_gap <= this (F - F*).")
  flags.DEFINE_string("method", "fzoos", "The FZooS run compared with the FD baselines "
                      "(e.g. fzoos-gamma_schedule=one); other fzoos* runs are not baselines.")
  flags.DEFINE_bool("fig4", False, "Tabulate the Fig. 4 gradient cosines instead.")


def load(roots, metric: str) -> dict:
  """{C: {method: {seed: [records]}}} from ROOT/C*_s*/*/metrics.jsonl of every root (later roots
  win for the same C, method and seed); only records with a finite ``metric``."""
  out: dict = {}
  for root in roots:
    rows = results.load_runs(root, "C*_s*/*/metrics.jsonl", metric=metric)
    for run, methods in results.group(rows, "run", "algorithm").items():
      m = re.fullmatch(r"C([0-9.eE+-]+)_s(\d+)", run)
      if m:
        for method, recs in methods.items():
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


def fig4_table(data) -> str:
  """Fig. 4 rows and checks (module docstring)."""
  lines = ["| C | method | seeds | cos mean over t ± std | early (t <= T/2) | late (t > T/2) | round |",
           "|---|---|---|---|---|---|---|"]
  means, checks = {}, []
  for C in sorted(data):
    for method in sorted(data[C]):
      seeds = data[C][method]
      cols = [[recs[-1][k] for recs in seeds.values()]
              for k in ("grad_cosine", "grad_cosine_early", "grad_cosine_late")]
      means[C, method] = [statistics.mean(c) for c in cols]
      rounds = sorted({recs[-1]["round"] for recs in seeds.values()})
      lines.append(f"| {C:g} | {method} | {len(seeds)} | " + " | ".join(_fmt(c) for c in cols)
                   + f" | {','.join(map(str, rounds))} |")
    if (C, "fzoos") in means:
      fz = means[C, "fzoos"]
      worse = [m for (c, m), v in means.items() if c == C and m != "fzoos" and v[0] >= fz[0]]
      checks.append(f"C={C:g}: FZooS cosine {fz[0]:.4f} above every FD baseline: "
                    f"{'yes' if not worse else 'NO (' + ', '.join(worse) + ')'}")
      checks.append(f"C={C:g}: FZooS late {fz[2]:.4f} < early {fz[1]:.4f}: {'yes' if fz[2] < fz[1] else 'NO'}")
  return "\n".join(lines + [""] + [f"- {c}" for c in checks])


def fig1_table(data, metric: str, budget: int, gap: float, me: str) -> str:
  """Fig. 1 rows and checks 5-6 (module docstring); ``me`` is the FZooS run compared."""
  lines = [f"| C | method | seeds | F(x_R) mean ± std | best F within {budget} queries "
           f"| rounds to gap <= {gap:g} (mean; never = -) | last round |",
           "|---|---|---|---|---|---|---|"]
  final, budgeted = {}, {}
  for C in sorted(data):
    for method in sorted(data[C]):
      seeds = data[C][method]
      fin = [recs[-1][metric] for recs in seeds.values()]
      counted = all(recs[-1]["queries"] > 0 for recs in seeds.values())
      bud = [best_within(recs, budget, metric) for recs in seeds.values()] if counted else []
      final[C, method], budgeted[C, method] = statistics.mean(fin), (statistics.mean(bud) if bud else None)
      last = sorted({recs[-1]["round"] for recs in seeds.values()})
      hits = [next((r["round"] for r in recs if r.get("optimality_gap", math.inf) <= gap), None)
              for recs in seeds.values()]
      reached = [h for h in hits if h is not None]
      hit_txt = (f"{statistics.mean(reached):.1f} ({len(reached)}/{len(hits)} seeds)" if reached else "-")
      lines.append(f"| {C:g} | {method} | {len(seeds)} | {_fmt(fin)} | {_fmt(bud)} | {hit_txt} "
                   f"| {','.join(map(str, last))} |")
  checks = []
  for C in sorted(data):
    if (C, me) not in final:
      continue
    for col, name in ((final, "F(x_R)"), (budgeted, "budget")):
      others = {m: v for (c, m), v in col.items() if c == C and not m.startswith("fzoos") and v is not None
                and m != "fedavg_true_grad"}
      if col[C, me] is None or not others:
        continue
      worse = [m for m, v in others.items() if v <= col[C, me]]
      checks.append(f"C={C:g} {name}: {me} {col[C, me]:.4f} below every FD baseline: "
                    f"{'yes' if not worse else 'NO (' + ', '.join(worse) + ' lower or equal)'}")
  for method in sorted({m for (_, m) in final}):
    cs = sorted(c for (c, m) in final if m == method)
    vals = [final[c, method] for c in cs]
    mono = all(a <= b for a, b in zip(vals, vals[1:]))
    checks.append(f"{method}: F(x_R) over C={','.join(f'{c:g}' for c in cs)}: "
                  f"{', '.join(f'{v:.4f}' for v in vals)} non-decreasing: {'yes' if mono else 'NO'}")
  return "\n".join(lines + [""] + [f"- {c}" for c in checks])


def main(argv):
  if len(argv) < 2:
    raise app.UsageError("usage: python -m experiments.fzoos.fig1_table ROOT [ROOT ...]")
  metric, budget = ("grad_cosine" if FLAGS.fig4 else FLAGS.metric), FLAGS.budget
  data = load(argv[1:], metric)
  if not data:
    raise app.UsageError(f"no ROOT/C*_s*/*/metrics.jsonl with {metric!r} under {argv[1:]}")
  text = fig4_table(data) if FLAGS.fig4 else fig1_table(data, metric, budget, FLAGS.gap, FLAGS.method)
  print(text)
  if FLAGS.markdown:
    with open(FLAGS.markdown, "w") as fh:
      fh.write(text + "\n")


if __name__ == "__main__":
  define_flags()
  app.run(main)
