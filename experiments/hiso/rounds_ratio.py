"""Rounds ratio of Li et al. 2025, Table 2 from an experiments.run output folder.

target = the best metric DeComFL reaches over its lr grid and all evaluations (lowest
optimality_gap / highest test_accuracy); R_DeComFL = first evaluated round at which that
best DeComFL run is within `tol` of target (relative for gaps, absolute for accuracy);
for every HiSo variant (the run name without its lr, e.g. ``hiso``, ``hiso-step_norm=trace``,
``hiso-preconditioner=scalar``), R_HiSo = first evaluated round at which any lr of that
variant gets within `tol` of target; ratio = R_DeComFL / R_HiSo.

Usage: python -m experiments.hiso.rounds_ratio OUTPUT_DIR [--metric=optimality_gap|test_accuracy] [--tol=0.01]
"""

import re

from absl import app, flags

from fedsim import results

FLAGS = flags.FLAGS


def define_flags():
  flags.DEFINE_string("metric", "optimality_gap", "optimality_gap (lower is better) or test_accuracy (higher).")
  flags.DEFINE_float("tol", 0.01, "Within tol of DeComFL's best: relative for gaps, absolute for accuracy.")


def main(argv):
  if len(argv) != 2:
    raise app.UsageError("usage: python -m experiments.hiso.rounds_ratio OUTPUT_DIR [--metric=...] [--tol=...]")
  metric, tol = FLAGS.metric, FLAGS.tol
  higher = metric == "test_accuracy"
  runs = results.group(results.load_runs(argv[1], "*/metrics.jsonl", metric=metric), "algorithm")

  def best(recs):
    vals = [r[metric] for r in recs]
    return max(vals) if higher else min(vals)

  def reach(recs, target):
    for r in recs:
      ok = r[metric] >= target - tol if higher else r[metric] <= target * (1 + tol)
      if ok:
        return r["round"]
    return None

  dec = {k: v for k, v in runs.items() if k.startswith("decomfl")}
  if not dec:
    raise app.UsageError(f"no decomfl*/metrics.jsonl with {metric!r} under {argv[1]}")
  bd = max(dec, key=lambda k: best(dec[k])) if higher else min(dec, key=lambda k: best(dec[k]))
  target = best(dec[bd])
  r_d = reach(dec[bd], target)
  print(f"metric {metric}; DeComFL best {target:.6g} by {bd} at round {r_d}")
  groups = {}
  for k, v in runs.items():
    if k.startswith("hiso"):
      groups.setdefault(re.sub(r"-lr=[^-]+", "", k), {})[k] = v
  for name, group in sorted(groups.items()):
    hits = {k: reach(v, target) for k, v in group.items()}
    for k, v in sorted(group.items()):
      print(f"  {k}: best {best(v):.6g}, final {v[-1][metric]:.6g}, reaches DeComFL's best at round {hits[k]}")
    got = [(r, k) for k, r in hits.items() if r is not None]
    if got:
      r_h, k_h = min(got)
      print(f"{name}: {k_h} reaches it at round {r_h}: rounds ratio {r_d / r_h:.2f}x")
    else:
      last = max(max(v[-1]["round"] for v in group.values()), 1)
      print(f"{name}: never reaches DeComFL's best within {last} rounds (ratio < {r_d / last:.2f}x)")
  for k, v in sorted(runs.items()):
    last = v[-1]
    print(f"  {k}: bytes per client per round {(last['bytes_up'] + last['bytes_down']) / last['participants']:.1f}")


if __name__ == "__main__":
  define_flags()
  app.run(main)
