"""Rounds ratio of seed 003 Table 2 from an experiments.run output folder.

target = the best (lowest) metric DeComFL reaches over its lr grid and all evaluations;
R_DeComFL = first evaluated round at which that best DeComFL run is within `tol` of target;
R_HiSo = first evaluated round at which any HiSo lr (diagonal H) gets within `tol` of target.
Usage: python -m experiments.hiso_rounds_ratio OUTPUT_DIR [metric=optimality_gap|test_accuracy] [tol=0.01]
"""
import glob, json, os, sys

out = sys.argv[1]
metric = sys.argv[2] if len(sys.argv) > 2 else "optimality_gap"
tol = float(sys.argv[3]) if len(sys.argv) > 3 else 0.01
higher = metric == "test_accuracy"
runs = {}
for f in sorted(glob.glob(os.path.join(out, "*", "metrics.jsonl"))):
  runs[os.path.basename(os.path.dirname(f))] = [json.loads(l) for l in open(f)]
better = (lambda a, b: a > b) if higher else (lambda a, b: a < b)
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
his = {k: v for k, v in runs.items() if k.startswith("hiso") and "scalar" not in k}
abl = {k: v for k, v in runs.items() if "scalar" in k}
bd = max(dec, key=lambda k: best(dec[k])) if higher else min(dec, key=lambda k: best(dec[k]))
target = best(dec[bd])
r_d = reach(dec[bd], target)
print(f"metric {metric}; DeComFL best {target:.6g} by {bd} at round {r_d}")
for name, group in (("HiSo", his), ("HiSo scalar-H ablation", abl)):
  hits = {k: reach(v, target) for k, v in group.items()}
  for k, v in sorted(group.items()):
    print(f"  {k}: best {best(v):.6g}, reaches DeComFL's best at round {hits[k]}")
  got = [(r, k) for k, r in hits.items() if r is not None]
  if got:
    r_h, k_h = min(got)
    print(f"{name}: {k_h} reaches it at round {r_h}: rounds ratio {r_d / r_h:.2f}x")
  elif group:
    print(f"{name}: never reaches DeComFL's best (ratio < {r_d / max(v[-1]['round'] for v in group.values()):.2f}x)")
for k, v in sorted(runs.items()):
  last = v[-1]
  print(f"  {k}: bytes per client per round {(last['bytes_up'] + last['bytes_down']) / last['participants']:.1f}")
