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
  assert all(r["vmapped_members"] == "2" and r["rounds"] == "2" for r in rows)
  assert "batch_size" not in rows[0]  # FedZO's own hyperparameter, not the vmapped-member count (issue 36)
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
  # Per-round curves: every member's 3 evaluations (rounds 0, 1, 2), the same after the kill and restart.
  with open(tmp_path / "full" / "curves.csv") as f:
    curves = list(csv.DictReader(f))
  assert list(curves[0]) == ["algorithm", "dirichlet_alpha", "seed", "round", "queries", "bytes_up",
                             "objective"]   # --target's metric is the objective: no second metric column
  assert [(c["dirichlet_alpha"], c["seed"], c["round"]) for c in curves] == [
      (a, s, r) for a in ("0.1", "0.5", "1.0") for s in ("0", "1") for r in ("0", "1", "2")]
  finals = {(r["dirichlet_alpha"], r["seed"]): r["final_objective"] for r in rows}
  assert all(c["objective"] == finals[(c["dirichlet_alpha"], c["seed"])] for c in curves if c["round"] == "2")
  assert (part / "curves.csv").read_bytes() == (tmp_path / "full" / "curves.csv").read_bytes()
  assert (tmp_path / "full" / "curves.png").stat().st_size > 0

  # Different flags into the same directory: refused before compiling.
  other = _sweep(*args[:-1], "--target=objective:2.0", f"--output_dir={part}")
  assert other.returncode == 2 and "--output_dir" in other.stderr and "--target" in other.stderr
  assert len(other.stderr.strip().splitlines()) == 1


# --- outputs a person reads right (issue 36) -------------------------------------------------

def _fake_sweep(names, metric="test_accuracy"):
  """experiments.sweep and a stand-in for its Sweep (what summarize and best_lines read)."""
  from types import SimpleNamespace

  from experiments import sweep
  extra = [f"final_{metric}", f"best_{metric}"] if metric != "objective" else []
  header = ["algorithm", *names, "seed", "final_objective", "best_objective", *extra, "rounds_to_target",
            "queries_to_target", "rounds", "queries", "diverged", "vmapped_members", "group_wall_time_s"]
  curve_header = ["algorithm", *names, "seed", *sweep.curve_metrics(metric)]
  fake = SimpleNamespace(names=list(names), metric=metric, labels=["fedavg"], target=None,
                         algs={"fedavg": "fedavg"}, header=lambda: header, curve_header=lambda: curve_header)
  fake.row_key = lambda label, combo, seed: (label, *(sweep._fmt(combo[n]) for n in fake.names), str(seed))
  return sweep, fake


def _rows(fake, finals):
  """results.csv rows from {(algorithm, *swept values): [final metric per seed]}."""
  out = []
  for key, vals in finals.items():
    for seed, v in enumerate(vals):
      d = {"algorithm": key[0], **dict(zip(fake.names, key[1:])), "seed": str(seed), "final_objective": repr(v),
           "best_objective": repr(v), f"final_{fake.metric}": repr(v), f"best_{fake.metric}": repr(v),
           "rounds_to_target": "", "queries_to_target": "", "rounds": "4", "queries": "8", "diverged": "False",
           "vmapped_members": "6", "group_wall_time_s": "1.000"}
      out.append([d[c] for c in fake.header()])
  return out


def test_summary_keeps_each_swept_value_apart_with_a_t_interval_over_seeds():
  from scipy import stats
  sweep, fake = _fake_sweep(["lr"])
  finals = {("fedavg", "0.01"): [0.5, 0.6, 0.7], ("fedavg", "0.1"): [0.8, 0.9, 0.85],
            ("fedavg", "1.0"): [0.9, float("nan"), 0.95]}
  summary = sweep.summarize(fake, _rows(fake, finals))
  assert [(e["lr"], e["n_seeds"], e["n_finite"]) for e in summary] == [("0.01", 3, 3), ("0.1", 3, 3), ("1.0", 3, 2)]
  e = summary[1]
  lo, hi = stats.t.interval(0.95, 2, loc=0.85, scale=0.05 / 3 ** 0.5)
  assert abs(e["mean"] - 0.85) < 1e-12 and abs(e["std"] - 0.05) < 1e-12
  assert abs(e["ci95_low"] - lo) < 1e-9 and abs(e["ci95_high"] - hi) < 1e-9
  # The best lr: the highest mean among values whose every seed ended finite (lr=1.0 lost a seed).
  (line,) = sweep.best_lines(fake, summary)
  assert line.startswith("best lr=0.1 for fedavg: final test_accuracy 0.85 (95% CI [")
  assert "t-interval over n=3 seeds" in line and f"{lo:.4g}" in line and f"{hi:.4g}" in line


def test_best_value_is_given_per_value_of_the_swept_task_settings_and_lower_is_better_for_objectives():
  sweep, fake = _fake_sweep(["lr", "dirichlet_alpha"], metric="objective")
  finals = {("fedavg", "0.01", "0.1"): [2.0, 2.2], ("fedavg", "0.1", "0.1"): [1.0, 1.2],
            ("fedavg", "0.01", "1.0"): [0.5, 0.7], ("fedavg", "0.1", "1.0"): [0.9, 1.1]}
  lines = sweep.best_lines(fake, sweep.summarize(fake, _rows(fake, finals)))
  assert [line.split(":")[0] for line in lines] == ["best lr=0.1 for fedavg at dirichlet_alpha=0.1",
                                                    "best lr=0.01 for fedavg at dirichlet_alpha=1.0"]
  assert all("lower is better" in line and "n=2 seeds" in line for line in lines)
  _, alpha_only = _fake_sweep(["dirichlet_alpha"])  # no hyperparameter swept: no best line
  assert sweep.best_lines(alpha_only, sweep.summarize(alpha_only, _rows(alpha_only, {("fedavg", "0.1"): [0.5]}))) == []


def test_a_results_csv_with_the_old_column_names_resumes(tmp_path):
  sweep, fake = _fake_sweep(["lr"])
  rows = _rows(fake, {("fedavg", "0.1"): [0.5]})
  old = [{"vmapped_members": "batch_size", "group_wall_time_s": "wall_time_s"}.get(c, c) for c in fake.header()]
  path = tmp_path / "results.csv"
  path.write_text(",".join(old) + "\n" + ",".join(rows[0]) + "\n")
  assert sweep._read_done(str(path), fake.header(), {("fedavg", "0.1", "0")}) == {("fedavg", "0.1", "0"): rows[0]}


@pytest.mark.slow
def test_lr_sweep_log_line_summary_csv_and_best_value(tmp_path):
  """FedAvg, lr in 3 values x 2 seeds, vmapped in one program: the group's log line gives each lr
  apart, results.csv says 6 vmapped members (no batch_size column), summary.csv has one row per lr
  and the best lr is printed with its 95% CI over n=2 seeds."""
  args = ["--algorithm=fedavg", "--num_clients=6", "--clients_per_round=2", "--rounds=2", "--eval_every=1",
          "--sweep=lr=0.01,0.1,0.3", "--seeds=2", f"--output_dir={tmp_path}"]
  proc = _sweep(*args)
  assert proc.returncode == 0, proc.stderr[-3000:]
  (group,) = [line for line in proc.stdout.splitlines() if line.startswith("[1/1]")]
  assert "(mean +- std over 2 seeds) lr=0.01 " in group and ", lr=0.1 " in group and ", lr=0.3 " in group, group
  with open(tmp_path / "results.csv") as f:
    rows = list(csv.DictReader(f))
  assert "batch_size" not in rows[0] and {r["vmapped_members"] for r in rows} == {"6"}
  with open(tmp_path / "summary.csv") as f:
    summary = list(csv.DictReader(f))
  assert [(r["lr"], r["n_seeds"]) for r in summary] == [("0.01", "2"), ("0.1", "2"), ("0.3", "2")]
  assert list(summary[0])[3:] == ["n_finite", "final_test_accuracy_mean", "final_test_accuracy_std",
                                  "final_test_accuracy_ci95_low", "final_test_accuracy_ci95_high"]
  best = [line for line in proc.stdout.splitlines() if line.startswith("best lr=")]
  assert len(best) == 1 and "95% CI [" in best[0] and "n=2 seeds" in best[0], proc.stdout
  top = max(summary, key=lambda r: float(r["final_test_accuracy_mean"]))
  assert best[0].startswith(f"best lr={top['lr']} for fedavg")


# --- per-round curves and named summary columns (issue 48 item 5) ------------------------------

def test_curves_rows_are_one_per_evaluation_and_name_the_metric():
  sweep, fake = _fake_sweep(["lr"])
  hist = [{"round": 0, "queries": 0, "bytes_up": 0, "objective": 2.5, "test_accuracy": 0.1, "wall_time_s": 1.0},
          {"round": 5, "queries": 40, "bytes_up": 1040, "objective": float("nan")}]
  rows = sweep.Sweep.curve_rows(fake, "fedavg", {"lr": 0.1}, 3, hist)
  assert fake.curve_header() == ["algorithm", "lr", "seed", "round", "queries", "bytes_up", "objective",
                                 "test_accuracy"]
  assert rows == [["fedavg", "0.1", "3", "0", "0", "0", "2.5", "0.1"],
                  ["fedavg", "0.1", "3", "5", "40", "1040", "nan", ""]]


def _curves(fake, values):
  """curves.csv rows from {(algorithm, *swept values): {round: [test_accuracy per seed]}}."""
  out = []
  for key, by_round in values.items():
    for rnd, vals in by_round.items():
      for seed, v in enumerate(vals):
        out.append([*key, str(seed), str(rnd), "0", "0", "1.0", repr(v)])
  return out


def test_curve_bands_are_the_mean_and_a_t_interval_over_seeds_at_each_round():
  from scipy import stats
  sweep, fake = _fake_sweep(["lr", "dirichlet_alpha"])
  values = {("fedavg", "0.1", "0.5"): {0: [0.25, 0.25, 0.25], 5: [0.5, 0.7, 0.6], 10: [0.8, float("nan"), 0.9]},
            ("fedavg", "0.3", "0.5"): {0: [0.1, 0.1, 0.1], 5: [float("nan")] * 3}}
  bands = sweep.curve_bands(fake.curve_header(), _curves(fake, values), "test_accuracy")
  assert list(bands) == ["fedavg, lr=0.1, dirichlet_alpha=0.5", "fedavg, lr=0.3, dirichlet_alpha=0.5"]
  first = bands["fedavg, lr=0.1, dirichlet_alpha=0.5"]
  assert list(first) == [0, 5, 10]
  assert first[0] == (3, 0.25, 0.25, 0.25)                    # identical values: a zero-width band
  n, mean, lo, hi = first[5]
  want = stats.t.interval(0.95, 2, loc=0.6, scale=0.1 / 3 ** 0.5)
  assert n == 3 and abs(mean - 0.6) < 1e-12 and abs(lo - want[0]) < 1e-9 and abs(hi - want[1]) < 1e-9
  n, mean, lo, hi = first[10]                                 # a diverged seed is left out
  want = stats.t.interval(0.95, 1, loc=0.85, scale=(0.05 * 2 ** 0.5) / 2 ** 0.5)
  assert n == 2 and abs(mean - 0.85) < 1e-12 and abs(lo - want[0]) < 1e-9
  assert list(bands["fedavg, lr=0.3, dirichlet_alpha=0.5"]) == [0]   # no finite value at round 5: no point


def test_curves_png_is_drawn_from_curves_csv(tmp_path):
  sweep, fake = _fake_sweep(["lr"])
  rows = _curves(fake, {("fedavg", "0.1"): {0: [0.1, 0.2], 5: [0.5, 0.7]}, ("fedavg", "1.0"): {0: [0.1], 5: [0.2]}})
  sweep.plot_curves(fake.curve_header(), rows, ["objective", "test_accuracy"], str(tmp_path / "c.png"), 2)
  from PIL import Image
  assert Image.open(tmp_path / "c.png").size == (12 * 120, 4 * 120)


def test_curves_csv_of_an_earlier_start_is_kept_and_an_old_sweeps_is_ignored(tmp_path):
  sweep, fake = _fake_sweep(["lr"])
  rows = _curves(fake, {("fedavg", "0.1"): {0: [0.1], 5: [0.5]}, ("fedavg", "0.3"): {0: [0.1]}})
  path = tmp_path / "curves.csv"
  path.write_text("\n".join(",".join(r) for r in [fake.curve_header(), *rows]) + "\n")
  kept = sweep._read_curves(str(path), fake.curve_header(), {("fedavg", "0.1", "0")})
  assert kept == {("fedavg", "0.1", "0"): rows[:2]}
  assert sweep._read_curves(str(path), ["algorithm", "lr", "seed", "round"], {("fedavg", "0.1", "0")}) == {}
  assert sweep._read_curves(str(tmp_path / "none.csv"), fake.curve_header(), set()) == {}


def test_summary_csv_names_its_metric_and_old_summary_files_still_read(tmp_path):
  sweep, fake = _fake_sweep(["lr"])
  summary = sweep.summarize(fake, _rows(fake, {("fedavg", "0.1"): [0.8, 0.9], ("fedavg", "1.0"): [0.5]}))
  sweep.write_summary(fake, summary, str(tmp_path / "summary.csv"))
  header = (tmp_path / "summary.csv").read_text().splitlines()[0].split(",")
  assert header == ["algorithm", "lr", "n_seeds", "n_finite", "final_test_accuracy_mean", "final_test_accuracy_std",
                    "final_test_accuracy_ci95_low", "final_test_accuracy_ci95_high"]
  new = sweep.read_summary(str(tmp_path / "summary.csv"))
  assert new[0]["metric"] == "test_accuracy" and float(new[0]["mean"]) == summary[0]["mean"]
  assert float(new[0]["ci95_high"]) == summary[0]["ci95_high"] and new[1]["std"] == "nan"
  old = tmp_path / "old.csv"   # before issue 48: bare statistic names
  old.write_text("algorithm,lr,n_seeds,n_finite,mean,std,ci95_low,ci95_high\nfedavg,0.1,2,2,0.85,0.07,0.2,1.5\n")
  (row,) = sweep.read_summary(str(old))
  assert row == {"algorithm": "fedavg", "lr": "0.1", "n_seeds": "2", "n_finite": "2", "mean": "0.85", "std": "0.07",
                 "ci95_low": "0.2", "ci95_high": "1.5", "metric": None}
