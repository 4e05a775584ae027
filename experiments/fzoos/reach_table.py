"""Rounds to reach the baselines' final value (Shu et al. 2023, §6.2-6.3; the attack and metric
targets of the FZooS issue) from ``experiments.run`` output folders.

Layout: ``ROOT/<run>/<algorithm>/metrics.jsonl``, one ``<run>`` per target image
(attack) or seed (metric optimisation), e.g.::

  for j in 0 1 2 3; do python -m experiments.run --flagfile=experiments/flagfiles/fzoos_attack_mnist.cfg \\
      --attack_target=$j --output_dir=runs/attack/t$j; done
  python -m experiments.fzoos.reach_table runs/attack --metric=objective
  python -m experiments.fzoos.reach_table runs/metric --metric=objective

Per run: target = the best final value among the baselines (every algorithm other
than ``--method``; lower is better unless ``--higher_is_better``); for every
algorithm, the first evaluated round at which it is at least as good as the target
(``-`` if never). The summary counts the runs in which ``--method`` gets there in
strictly fewer rounds than every baseline, and prints the mean final values.
"""

from __future__ import annotations

import statistics

from absl import app, flags

from fedsim import results

FLAGS = flags.FLAGS


def define_flags():
  flags.DEFINE_string("metric", "objective", "Metric to compare.")
  flags.DEFINE_bool("higher_is_better", False, "Higher metric values are better.")
  flags.DEFINE_string("method", "fzoos", "The method compared with the others.")


def first_reach(recs, metric: str, target, higher: bool):
  """The round of the first record at least as good as ``target`` (None if none is)."""
  for r in recs:
    if (r[metric] >= target) if higher else (r[metric] <= target):
      return r["round"]
  return None


def main(argv):
  if len(argv) != 2:
    raise app.UsageError("usage: python -m experiments.fzoos.reach_table ROOT")
  metric, higher, me = FLAGS.metric, FLAGS.higher_is_better, FLAGS.method
  runs = results.group(results.load_runs(argv[1], "*/*/metrics.jsonl", metric=metric), "run", "algorithm")
  if not runs:
    raise app.UsageError(f"no ROOT/*/*/metrics.jsonl with {metric!r} under {argv[1]}")
  methods = sorted({a for r in runs.values() for a in r})
  print(f"| run | target (best baseline final {metric}) | " + " | ".join(methods) + " |")
  print("|---|---|" + "---|" * len(methods))
  wins, counted, stuck_runs, finals = 0, 0, 0, {m: [] for m in methods}
  for run in sorted(runs):
    algs = runs[run]
    for m in methods:
      if m in algs:
        finals[m].append(algs[m][-1][metric])
    base = [algs[a][-1][metric] for a in algs if a != me]
    if not base or me not in algs:
      continue
    target = max(base) if higher else min(base)
    start = algs[me][0][metric]
    stuck = target == start and algs[me][0]["round"] == 0
    stuck_runs += int(stuck)
    reach = {a: first_reach(algs[a], metric, target, higher) for a in algs}
    cells = [f"{reach[m]} ({algs[m][-1][metric]:.4g})" if m in algs and reach[m] is not None
             else (f"- ({algs[m][-1][metric]:.4g})" if m in algs else "n/a") for m in methods]
    note = " (= round 0: no baseline improves)" if stuck else ""
    print(f"| {run} | {target:.4g}{note} | " + " | ".join(cells) + " |")
    counted += 1
    others = [reach[a] for a in algs if a != me]
    if reach[me] is not None and all(o is None or reach[me] < o for o in others):
      wins += 1
  print()
  print(f"- {me} reaches the best baseline's final {metric} in strictly fewer rounds than every "
        f"baseline in {wins}/{counted} runs (cells: first round reaching the target, (final value)).")
  if stuck_runs:
    print(f"- in {stuck_runs}/{counted} runs no baseline improves on the starting value, so every method "
          f"'reaches' the target at round 0; compare the final values instead.")
  for m in methods:
    if finals[m]:
      sd = statistics.stdev(finals[m]) if len(finals[m]) > 1 else 0.0
      print(f"- {m}: mean final {metric} {statistics.mean(finals[m]):.4f} ± {sd:.4f} over {len(finals[m])} runs")


if __name__ == "__main__":
  define_flags()
  app.run(main)
