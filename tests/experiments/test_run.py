"""The experiments.run binary: bad input, outputs, determinism."""

import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(*args, timeout=300):
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  return subprocess.run([sys.executable, "-m", "experiments.run", *args], cwd=REPO, env=env,
                        capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("args, flag", [
    (["--algorithm=fedavg,sgd"], "--algorithm"),
    (["--task=lasso"], "--task"),
    (["--dataset=cifar"], "--dataset"),
    (["--num_clients=0"], "--num_clients"),
    (["--num_clients=5", "--clients_per_round=6"], "--clients_per_round"),
    (["--dirichlet_alpha=0"], "--dirichlet_alpha"),
    (["--partition=shards", "--num_clients=100", "--shards_per_client=20"], "--shards_per_client"),
    (["--dataset=mnist", "--data_dir=/nonexistent/mnist"], "--data_dir /nonexistent/mnist: not a directory"),
    (["--fedzo_lr=-1"], "--fedzo_lr"),
    (["--algorithm=hiso_code", "--hiso_code_weight_decay=-1"], "--hiso_code_weight_decay"),
    (["--num_clients=abc"], "num_clients"),
    (["--checkpoint_every=-2"], "--checkpoint_every"),
    (["--blas_threads=-1"], "--blas_threads"),
    (["--num_processes=0"], "--num_processes"),
    (["--num_processes=2", "--process_id=2", "--coordinator_address=localhost:1"], "--process_id"),
    (["--num_processes=2", "--process_id=1"], "--coordinator_address"),
    (["--num_processes=2", "--coordinator_address=localhost"], "--coordinator_address"),
])
def test_bad_input_exits_2_with_one_line(args, flag, tmp_path):
  proc = _run(*args, f"--output_dir={tmp_path}")
  assert proc.returncode == 2, proc.stderr[-2000:]
  lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
  assert len(lines) == 1 and flag in lines[0], proc.stderr
  assert "Traceback" not in proc.stderr
  assert not os.path.exists(tmp_path / "config.json")


def test_corrupt_idx_file_exits_2(tmp_path):
  d = tmp_path / "mnist"
  d.mkdir()
  for name in ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
    (d / name).write_bytes(b"\x00\x00\x08\x99garbage")
  proc = _run("--dataset=mnist", f"--data_dir={d}", f"--output_dir={tmp_path / 'out'}")
  assert proc.returncode == 2
  assert "t10k-" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def _metrics(path):
  with open(path) as f:
    return [{k: v for k, v in json.loads(line).items() if k != "wall_time_s"} for line in f]


@pytest.mark.slow  # 25-50 s: the default suite's 15-minute budget
def test_outputs_and_determinism(tmp_path):
  args = ["--algorithm=fedavg,fedzo", "--num_clients=12", "--clients_per_round=4", "--rounds=4",
          "--eval_every=2", "--lr=0.05"]
  a, b = _run(*args, f"--output_dir={tmp_path / 'a'}"), _run(*args, f"--output_dir={tmp_path / 'b'}")
  assert a.returncode == 0 and b.returncode == 0, a.stderr[-3000:]
  for alg in ("fedavg", "fedzo"):
    ma = _metrics(tmp_path / "a" / alg / "metrics.jsonl")
    assert ma == _metrics(tmp_path / "b" / alg / "metrics.jsonl")
    assert [m["round"] for m in ma] == [0, 2, 4]
    for key in ("queries", "bytes_up", "bytes_down", "objective", "test_accuracy"):
      assert key in ma[-1]
  cfg = json.loads((tmp_path / "a" / "config.json").read_text())
  assert cfg["flags"]["num_clients"] == 12 and cfg["algorithms"]["fedzo"]["lr"] == 0.05
  assert (tmp_path / "a" / "curves.png").stat().st_size > 1000
  assert "[fedzo] round 4/4" in a.stdout and "ETA" in a.stdout
  # Issue 48: the chunk's memory before the first chunk runs; a results table and the total time at the end.
  out = a.stdout.splitlines()
  fz = [x for x in out if x.startswith(("[fedzo] round ", "[fedzo] memory: "))]
  assert fz[0].startswith("[fedzo] round 0/4") and fz[2].startswith("[fedzo] round 2/4"), fz
  assert fz[1].startswith("[fedzo] memory: round chunk ") and " available (host MemAvailable)" in fz[1], fz
  assert out[-4].split() == ["algorithm", "rounds", "objective", "test_accuracy", "queries", "bytes_up", "wall_time"]
  last = ma[-1]
  assert out[-2].split()[:4] == ["fedzo", "4", f"{last['objective']:.5g}", f"{last['test_accuracy']:.4g}"]
  assert out[-3].startswith("fedavg ") and out[-1].startswith("total time ")


@pytest.mark.slow  # 25-50 s: the default suite's 15-minute budget
def test_config_json_and_start_up_log_name_each_values_source(tmp_path):
  """Issue 16 item 2: which algorithm took which value from where. The flagfile sets
  fedavg's local_steps after the command line did (absl: the later one wins) and
  includes a second flagfile; --batch_size (shared) reaches all three algorithms."""
  inner, outer = tmp_path / "inner.cfg", tmp_path / "outer.cfg"
  inner.write_text("# FedZO only\n--fedzo_smoothing=0.002\n")
  outer.write_text(f"--algorithm=fedavg,fedzo:local_steps=2,fedadam\n--fedavg_lr=0.05\n"
                   f"--fedavg_local_steps=3\n--flagfile={inner}\n--rounds=2\n")
  proc = _run("--fedavg_local_steps=4", f"--flagfile={outer}", "--batch_size=5", "--fedzo_fd_directions=2",
              "--num_clients=4", "--clients_per_round=2", "--eval_every=1", f"--output_dir={tmp_path / 'out'}")
  assert proc.returncode == 0, proc.stderr[-3000:]
  got = json.loads((tmp_path / "out" / "config.json").read_text())["hyperparameters"]
  given = {label: {k: (v["value"], v["source"]) for k, v in hp.items() if v["source"] != "default"}
           for label, hp in got.items()}
  assert given == {
      "fedavg": {"lr": (0.05, f"flagfile {outer} (--fedavg_lr)"),
                 "local_steps": (3, f"flagfile {outer} (--fedavg_local_steps)"),
                 "batch_size": (5, "--batch_size"), "clients_per_round": (2, "--clients_per_round")},
      "fedzo-local_steps=2": {"lr": (0.01, "binary default"),
                              "smoothing": (0.002, f"flagfile {inner} (--fedzo_smoothing)"),
                              "batch_size": (5, "--batch_size"), "fd_directions": (2, "--fedzo_fd_directions"),
                              "local_steps": (2, "algorithm entry"),
                              "clients_per_round": (2, "--clients_per_round")},
      "fedadam": {"batch_size": (5, "--batch_size"), "clients_per_round": (2, "--clients_per_round"),
                  "server_optimizer": ("adam", "registry preset"), "server_lr": (0.01, "registry preset")},
  }
  assert got["fedzo-local_steps=2"]["direction"] == {"value": "sphere", "source": "default"}
  lines = proc.stdout.splitlines()
  assert (f"[fedavg] lr=0.05 (flagfile {outer} (--fedavg_lr)), local_steps=3 (flagfile {outer} "
          "(--fedavg_local_steps)), batch_size=5 (--batch_size), clients_per_round=2 (--clients_per_round)") in lines
  assert (f"[fedzo-local_steps=2] lr=0.01 (binary default), smoothing=0.002 (flagfile {inner} "
          "(--fedzo_smoothing)), batch_size=5 (--batch_size), fd_directions=2 (--fedzo_fd_directions), "
          "local_steps=2 (algorithm entry), clients_per_round=2 (--clients_per_round)") in lines


def test_bad_value_names_the_flagfile_flag_that_set_it(tmp_path):
  path = tmp_path / "bad.cfg"
  path.write_text("--algorithm=fedavg,fedzo\n--fedzo_smoothing=-1\n")
  proc = _run(f"--flagfile={path}", f"--output_dir={tmp_path}")
  assert proc.returncode == 2
  lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
  assert lines == ["error: --fedzo_smoothing: must be > 0 and finite; got -1.0"], proc.stderr


@pytest.mark.slow  # long; .ci/run runs it (pytest -m slow)
def test_per_algorithm_flag_beats_global(tmp_path):
  proc = _run("--algorithm=fedavg,fedzo", "--num_clients=4", "--clients_per_round=2", "--rounds=0",
              "--lr=0.2", "--fedzo_lr=0.003", f"--output_dir={tmp_path}")
  assert proc.returncode == 0, proc.stderr[-2000:]
  hp = json.loads((tmp_path / "config.json").read_text())["algorithms"]
  assert hp["fedavg"]["lr"] == 0.2 and hp["fedzo"]["lr"] == 0.003
  assert hp["fedzo"]["smoothing"] == 1e-3 and hp["fedavg"]["batch_size"] == 20


@pytest.mark.slow
def test_checkpoint_and_resume_equal_uninterrupted_run(tmp_path):
  args = ["--algorithm=fedavg,fedzo", "--num_clients=8", "--clients_per_round=3", "--eval_every=2",
          "--lr=0.05"]
  full = _run(*args, "--rounds=6", f"--output_dir={tmp_path / 'full'}")
  assert full.returncode == 0, full.stderr[-3000:]
  out = tmp_path / "cut"
  # "Interrupted" after round 5: the checkpoint is at round 4 (every 4), record 5 is stale.
  first = _run(*args, "--rounds=5", "--checkpoint_every=4", f"--output_dir={out}")
  assert first.returncode == 0, first.stderr[-3000:]
  assert [m["round"] for m in _metrics(out / "fedzo" / "metrics.jsonl")] == [0, 2, 4, 5]
  assert (out / "fedzo" / "checkpoints" / "4").is_dir()
  again = _run(*args, "--rounds=6", "--checkpoint_every=4", "--resume", f"--output_dir={out}")
  assert again.returncode == 0, again.stderr[-3000:]
  assert "[fedzo] resuming from round 4" in again.stdout
  for alg in ("fedavg", "fedzo"):
    resumed = _metrics(out / alg / "metrics.jsonl")
    assert [m["round"] for m in resumed] == [0, 2, 4, 6]
    assert resumed == _metrics(tmp_path / "full" / alg / "metrics.jsonl")  # bitwise


def test_progress_writer_keeps_records_up_to_checkpoint_and_silent_mode(tmp_path):
  from experiments.run import ProgressWriter
  path = tmp_path / "metrics.jsonl"
  path.write_text("".join(json.dumps({"round": r, "objective": 1.0, "queries": r, "wall_time_s": 0.1})
                          + "\n" for r in (0, 2, 4, 5)))
  w = ProgressWriter("a", str(path), 6, keep_until=4)
  w({"round": 6, "objective": 0.5, "queries": 6, "wall_time_s": 0.2})
  w.close()
  assert [r["round"] for r in map(json.loads, path.read_text().splitlines())] == [0, 2, 4, 6]
  assert [r["round"] for r in w.history] == [0, 2, 4, 6]
  other = tmp_path / "other.jsonl"
  q = ProgressWriter("a", str(other), 6, write=False)  # processes != 0 of a multi-host run
  q({"round": 0, "objective": 1.0, "queries": 0, "wall_time_s": 0.0})
  q.close()
  assert not other.exists() and len(q.history) == 1


def test_a_grid_that_diverges_in_part_finishes_and_exits_3(tmp_path):
  # An lr grid's large end diverging is a finished run: exit 3 (not 1, a crash), one line naming
  # the entries that stopped, every entry's metrics on disk.
  proc = _run("--algorithm=fedavg:lr=1e38,fedavg:lr=0.1", "--rounds=3", "--eval_every=1", "--num_clients=4",
              "--clients_per_round=4", f"--output_dir={tmp_path}")
  assert proc.returncode == 3, proc.stderr[-2000:]
  assert "finished; stopped on a non-finite objective: fedavg-lr=1e38 (exit 3)" in proc.stderr
  assert _metrics(tmp_path / "fedavg-lr=0.1" / "metrics.jsonl")[-1]["round"] == 3


def test_run_and_sweep_import_in_either_order_in_one_process():
  # common.define_flags runs once per process: a test worker that imported experiments.sweep first must still
  # be able to import experiments.run (its import defines the flags too).
  for first, second in (("sweep", "run"), ("run", "sweep")):
    code = f"from experiments import {first}; from experiments import {second}; print('ok')"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert proc.stdout.strip() == "ok", proc.stderr[-2000:]
