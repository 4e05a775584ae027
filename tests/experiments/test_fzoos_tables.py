"""The FZooS table scripts (experiments.fzoos.fig1_table, experiments.fzoos.reach_table) on
hand-written metrics files whose answers are known."""

import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _write(root, run, alg, rows):
  d = os.path.join(root, run, alg)
  os.makedirs(d, exist_ok=True)
  with open(os.path.join(d, "metrics.jsonl"), "w") as f:
    for r in rows:
      f.write(json.dumps(r) + "\n")


def _py(module, *args):
  out = subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, capture_output=True, text=True,
                       timeout=120)
  assert out.returncode == 0, out.stderr
  return out.stdout


def _curve(values, per_round):
  return [{"round": r, "queries": r * per_round, "objective": v, "optimality_gap": v + 0.02}
          for r, v in enumerate(values)]


def test_fig1_table_final_budget_gap_and_checks(tmp_path):
  root = str(tmp_path)
  # Two seeds at C=5: fzoos final (0.0 + 0.2)/2 = 0.1, fedzo_fd 0.3; budget 200 queries:
  # fzoos (100/round) sees rounds 0..2, fedzo_fd (200/round) rounds 0..1; gap = F + 0.02 <= 0.1
  # at round 2 for fzoos seed 0 only.
  _write(root, "C5_s0", "fzoos", _curve([3.0, 1.0, 0.05, 0.0], 100))
  _write(root, "C5_s1", "fzoos", _curve([3.0, 2.0, 0.5, 0.2], 100))
  _write(root, "C5_s0", "fedzo_fd", _curve([3.0, 2.5, 1.0, 0.3], 200))
  _write(root, "C5_s1", "fedzo_fd", _curve([3.0, 2.5, 1.0, 0.3], 200))
  # C=50: fzoos worse than at C=5 (monotone), fedzo_fd better (not monotone).
  _write(root, "C50_s0", "fzoos", _curve([3.0, 2.0, 1.0, 0.5], 100))
  _write(root, "C50_s0", "fedzo_fd", _curve([3.0, 2.0, 1.0, 0.1], 200))
  out = _py("experiments.fzoos.fig1_table", root, "--budget=200", "--gap=0.1")
  assert "| 5 | fzoos | 2 | 0.1000 ± 0.1414 | 0.2750 ± 0.3182 | 2.0 (1/2 seeds) | 3 |" in out, out
  assert "| 5 | fedzo_fd | 2 | 0.3000 ± 0.0000 | 2.5000 ± 0.0000 | - | 3 |" in out, out
  assert "C=5 F(x_R): fzoos 0.1000 below every FD baseline: yes" in out
  assert "C=50 F(x_R): fzoos 0.5000 below every FD baseline: NO (fedzo_fd lower or equal)" in out
  assert "fzoos: F(x_R) over C=5,50: 0.1000, 0.5000 non-decreasing: yes" in out
  assert "fedzo_fd: F(x_R) over C=5,50: 0.3000, 0.1000 non-decreasing: NO" in out


def test_fig4_table_cosines(tmp_path):
  root = str(tmp_path)
  for s, (a, b) in enumerate([(0.5, 0.3), (0.7, 0.5)]):
    _write(root, f"C5_s{s}", "fzoos", [{"round": 5, "queries": 1, "grad_cosine": (a + b) / 2,
                                         "grad_cosine_early": a, "grad_cosine_late": b}])
    _write(root, f"C5_s{s}", "fedzo_fd", [{"round": 5, "queries": 1, "grad_cosine": 0.45,
                                            "grad_cosine_early": 0.45, "grad_cosine_late": 0.45}])
  out = _py("experiments.fzoos.fig1_table", root, "--fig4")
  assert "C=5: FZooS cosine 0.5000 above every FD baseline: yes" in out, out
  assert "C=5: FZooS late 0.4000 < early 0.6000: yes" in out


def test_reach_table_counts_fewer_rounds(tmp_path):
  root = str(tmp_path)
  # Run t0: baselines end at 1.0 and 0.5 -> target 0.5; fzoos reaches it at round 2, fedzo_fd never,
  # scaffold_zo2 at round 4. Run t1: fzoos never reaches the baseline's 0.2.
  _write(root, "t0", "fzoos", _curve([2.0, 1.0, 0.4, 0.3, 0.3], 1))
  _write(root, "t0", "fedzo_fd", _curve([2.0, 1.5, 1.2, 1.1, 1.0], 1))
  _write(root, "t0", "scaffold_zo2", _curve([2.0, 1.5, 1.0, 0.7, 0.5], 1))
  _write(root, "t1", "fzoos", _curve([2.0, 1.0, 0.9, 0.8, 0.7], 1))
  _write(root, "t1", "fedzo_fd", _curve([2.0, 1.0, 0.5, 0.3, 0.2], 1))
  out = _py("experiments.fzoos.reach_table", root)
  assert "| t0 | 0.5 | - (1) | 2 (0.3) | 4 (0.5) |" in out, out
  assert "| t1 | 0.2 | 4 (0.2) | - (0.7) | n/a |" in out, out
  assert "in 1/2 runs" in out


def test_fig1_table_method_flag_and_variants_are_not_baselines(tmp_path):
  root = str(tmp_path)
  _write(root, "C5_s0", "fzoos", _curve([3.0, 1.0, 0.5], 100))
  _write(root, "C5_s0", "fzoos-gamma_schedule=one", _curve([3.0, 1.0, -0.01], 100))
  _write(root, "C5_s0", "fedzo_fd", _curve([3.0, 1.0, 0.2], 200))
  out = _py("experiments.fzoos.fig1_table", root)
  assert "C=5 F(x_R): fzoos 0.5000 below every FD baseline: NO (fedzo_fd lower or equal)" in out, out
  out = _py("experiments.fzoos.fig1_table", root, "--method=fzoos-gamma_schedule=one")
  assert "C=5 F(x_R): fzoos-gamma_schedule=one -0.0100 below every FD baseline: yes" in out, out


def test_reach_table_flags_runs_where_no_baseline_moves(tmp_path):
  root = str(tmp_path)
  _write(root, "s0", "fzoos", _curve([0.5, 0.4, 0.3], 1))
  _write(root, "s0", "fedzo_fd", _curve([0.5, 0.5, 0.5], 1))
  out = _py("experiments.fzoos.reach_table", root)
  assert "| s0 | 0.5 (= round 0: no baseline improves) | 0 (0.5) | 0 (0.3) |" in out, out
  assert "in 1/1 runs no baseline improves" in out
