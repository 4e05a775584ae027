"""experiments.hiso.rounds_ratio (seed 003 Table 2) on hand-written metrics files whose answers are known."""

import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _write(root, label, gaps):
  os.makedirs(os.path.join(root, label))
  with open(os.path.join(root, label, "metrics.jsonl"), "w") as f:
    for i, g in enumerate(gaps):
      f.write(json.dumps({"round": 10 * i, "optimality_gap": g, "test_accuracy": 1 - g,
                          "bytes_up": 10 * (i + 1), "bytes_down": 20 * (i + 1), "participants": 2 * (i + 1)}) + "\n")


def _py(*args):
  return subprocess.run([sys.executable, "-m", "experiments.hiso.rounds_ratio", *args], cwd=REPO,
                        capture_output=True, text=True, timeout=120)


def test_rounds_ratio_gap_and_accuracy(tmp_path):
  root = str(tmp_path)
  # DeComFL's best gap is 0.1 (lr=0.1, reached at round 30). HiSo lr=0.1 gets within 1% of it
  # (0.1005) at round 20: ratio 30 / 20; the trace variant never does.
  _write(root, "decomfl-lr=0.1", [1.0, 0.5, 0.2, 0.1])
  _write(root, "decomfl-lr=0.01", [1.0, 0.8, 0.6, 0.4])
  _write(root, "hiso-lr=0.1", [1.0, 0.3, 0.1005, 0.05])
  _write(root, "hiso-lr=0.01", [1.0, 0.2, 0.15, 0.12])
  _write(root, "hiso-step_norm=trace-lr=0.1", [1.0, 0.9, 0.8, 0.7])
  proc = _py(root)
  assert proc.returncode == 0, proc.stderr
  out = proc.stdout
  assert "metric optimality_gap; DeComFL best 0.1 by decomfl-lr=0.1 at round 30" in out, out
  assert "hiso: hiso-lr=0.1 reaches it at round 20: rounds ratio 1.50x" in out
  assert "hiso-step_norm=trace: never reaches DeComFL's best within 30 rounds (ratio < 1.00x)" in out
  assert "  decomfl-lr=0.01: bytes per client per round 15.0" in out
  # Accuracy (higher is better, absolute tol): DeComFL's best 0.9; HiSo lr=0.1 is >= 0.9 - 0.1 at round 10.
  proc = _py(root, "--metric=test_accuracy", "--tol=0.1")
  assert proc.returncode == 0, proc.stderr
  assert "metric test_accuracy; DeComFL best 0.9 by decomfl-lr=0.1 at round 20" in proc.stdout, proc.stdout
  assert "hiso: hiso-lr=0.01 reaches it at round 10: rounds ratio 2.00x" in proc.stdout


def test_rounds_ratio_without_decomfl_is_a_usage_error(tmp_path):
  _write(str(tmp_path), "hiso-lr=0.1", [1.0, 0.5])
  proc = _py(str(tmp_path))
  assert proc.returncode == 1 and "no decomfl*/metrics.jsonl" in proc.stderr, proc.stderr
