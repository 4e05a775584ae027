"""Rounds ratio of seed 003 Table 2 from an experiments.run output folder.

target = the best metric DeComFL reaches over its lr grid and all evaluations (lowest
optimality_gap / highest test_accuracy); R_DeComFL = first evaluated round at which that
best DeComFL run is within `tol` of target (relative for gaps, absolute for accuracy);
for every HiSo variant (the run name without its lr, e.g. ``hiso``, ``hiso-step_norm=trace``,
``hiso-preconditioner=scalar``), R_HiSo = first evaluated round at which any lr of that
variant gets within `tol` of target; ratio = R_DeComFL / R_HiSo.
Usage: python -m experiments.hiso_rounds_ratio OUTPUT_DIR [metric=optimality_gap|test_accuracy] [tol=0.01]
"""
import glob, json, math, os, re, sys

out = sys.argv[1]
metric = sys.argv[2] if len(sys.argv) > 2 else "optimality_gap"
tol = float(sys.argv[3]) if len(sys.argv) > 3 else 0.01
higher = metric == "test_accuracy"
runs = {}
for f in sorted(glob.glob(os.path.join(out, "*", "metrics.jsonl"))):
  recs = [json.loads(l) for l in open(f)]
  recs = [r for r in recs if metric in r and math.isfinite(r[metric])]
  if recs:
    runs[os.path.basename(os.path.dirname(f))] = recs
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
