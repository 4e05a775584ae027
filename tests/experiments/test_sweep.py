"""The experiments.sweep binary: bad values, compiled-program count, kill and resume."""

import csv
import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# A tiny FedZO job: the sweep's structure is under test, not the optimisation.
TINY = ["--algorithm=fedzo", "--num_clients=6", "--clients_per_round=2", "--rounds=2",
        "--eval_every=1", "--fedzo_local_steps=1", "--fedzo_fd_directions=2", "--fedzo_batch_size=4",
        "--fedzo_client_block=0"]


def _sweep(*args, env=None, timeout=600):
  env = dict(os.environ, JAX_PLATFORMS="cpu", **(env or {}))
  return subprocess.run([sys.executable, "-m", "experiments.sweep", *args], cwd=REPO, env=env,
                        capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("args, needle", [
    (["--sweep=dirichlet_alpha=0.1,0"], "--sweep"),  # alpha must be > 0
    (["--sweep=dirichlet_alpha=0.1,abc"], "dirichlet_alpha"),
    (["--sweep=lr=0.1,-1"], "lr"),
    (["--sweep=seed=1,2"], "--seeds"),
    (["--sweep=no_such_flag=1"], "no_such_flag"),
    (["--sweep=lr"], "NAME=V1,V2"),
    (["--sweep=lr=0.1,0.1"], "repeated"),
    (["--sweep=clients_per_round=2,7"], "clients_per_round"),
    (["--sweep=fedzo_direction=sphere,spiral"], "fedzo_direction"),
    (["--seeds=0"], "--seeds"),
    (["--target=test_accuracy"], "--target"),
    (["--target=no_metric:0.5"], "no_metric"),
])
def test_bad_sweep_values_exit_2_with_one_line(args, needle, tmp_path):
  proc = _sweep(*TINY, *args, f"--output_dir={tmp_path / 'out'}")
  assert proc.returncode == 2, proc.stderr[-2000:]
  lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
  assert len(lines) == 1 and needle in lines[0], proc.stderr
  assert "Traceback" not in proc.stderr
  assert not os.path.exists(tmp_path / "out" / "results.csv")


@pytest.mark.slow
def test_alpha_sweep_three_programs_and_kill_resume(tmp_path):
  """3 alpha x 2 seeds of FedZO: 3 compiled round programs, 6 rows; a run killed
  after its first group and restarted writes the same results.csv, byte for byte
  (a fixed clock makes the wall-time column reproducible)."""
  args = [*TINY, "--sweep=dirichlet_alpha=0.1,0.5,1.0", "--seeds=2", "--target=objective:2.303"]
  clock = {"FEDSIM_SWEEP_FIXED_CLOCK": "1"}
  full = _sweep(*args, f"--output_dir={tmp_path / 'full'}", env=clock)
  assert full.returncode == 0, full.stderr[-3000:]
  stats = json.loads((tmp_path / "full" / "sweep_stats.json").read_text())
  assert stats["chunk_programs"] == 3 and stats["compilations"]["chunk"] == 3, stats
  assert stats["modes"] == {"fedzo": {"dirichlet_alpha": "data"}}
  assert "ETA" in full.stdout and "compiled programs: 3" in full.stdout
  with open(tmp_path / "full" / "results.csv") as f:
    rows = list(csv.DictReader(f))
  assert [(r["dirichlet_alpha"], r["seed"]) for r in rows] == [
      (a, s) for a in ("0.1", "0.5", "1.0") for s in ("0", "1")]
  assert all(r["batch_size"] == "2" and r["rounds"] == "2" for r in rows)
  assert len({r["final_objective"] for r in rows}) == 6  # seeds and alphas really differ
  for r in rows:  # rounds to target is the first evaluation at or below 2.303
    assert (r["rounds_to_target"] == "") == (float(r["best_objective"]) > 2.303)
  assert (tmp_path / "full" / "summary.png").stat().st_size > 0

  part = tmp_path / "part"
  killed = _sweep(*args, f"--output_dir={part}", env={**clock, "FEDSIM_SWEEP_STOP_AFTER": "1"})
  assert killed.returncode == 3, killed.stderr[-3000:]
  assert len((part / "results.csv").read_text().splitlines()) == 1 + 2  # one group of 2 seeds
  resumed = _sweep(*args, f"--output_dir={part}", env=clock)
  assert resumed.returncode == 0, resumed.stderr[-3000:]
  assert "1 already in results.csv" in resumed.stdout
  assert json.loads((part / "sweep_stats.json").read_text())["groups_run"] == 2
  assert (part / "results.csv").read_bytes() == (tmp_path / "full" / "results.csv").read_bytes()

  # Different flags into the same directory: refused before compiling.
  other = _sweep(*args[:-1], "--target=objective:2.0", f"--output_dir={part}")
  assert other.returncode == 2 and "--output_dir" in other.stderr and "--target" in other.stderr
  assert len(other.stderr.strip().splitlines()) == 1
