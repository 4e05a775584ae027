"""The output folder's policy (fedsim/run_folder.py, fedsim/provenance.py, fedsim/interrupts.py):
results tied to the code that made them, one writer per folder, clean SIGINT/SIGTERM stops."""

import importlib
import json
import logging
import os
import signal
import subprocess
import sys
import time

import pytest

import fedsim
from fedsim import provenance, results, run_folder
from fedsim.core.errors import ConfigError, Interrupted

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, JAX_PLATFORMS="cpu")
TINY = dict(task="ridge", num_clients=3, clients_per_round=3, eval_every=2, rounds=4, algorithms=("gd",),
            progress=False)
TINY_FLAGS = ["--task=ridge", "--num_clients=3", "--clients_per_round=3", "--eval_every=2", "--algorithm=gd"]


def _cli(*args, timeout=300):
  return subprocess.run([sys.executable, "-m", "experiments.run", *args], cwd=REPO, capture_output=True, text=True,
                        env=ENV, timeout=timeout)


def _strip(records):
  return [{k: v for k, v in r.items() if k != "wall_time_s"} for r in records]


# --- provenance ---------------------------------------------------------------------------------

def test_config_json_records_the_version_commit_and_a_fingerprint_of_the_code(tmp_path):
  fedsim.run(fedsim.ExperimentConfig(**TINY), output_dir=str(tmp_path))
  stored = results.read_config(tmp_path)["provenance"]
  now = provenance.provenance({"gd": "gd"})
  assert stored["fingerprint"] == now["fingerprint"] and len(stored["fingerprint"]) == 64
  assert stored["version"] == provenance.version()
  assert "fedsim/api.py" in stored["files"] and "fedsim/algorithms/fedavg.py" in stored["files"]
  git = subprocess.run(["git", "-C", REPO, "rev-parse", "HEAD"], capture_output=True, text=True)
  if git.returncode == 0:  # a checkout: its commit and whether tracked files changed
    assert stored["git"]["commit"] == git.stdout.strip() and isinstance(stored["git"]["dirty"], bool)
  assert results.provenance(tmp_path) == stored


def test_changes_name_the_changed_file_and_the_external_algorithm():
  now = provenance.provenance({"gd": "gd"})
  old = json.loads(json.dumps(now))
  assert provenance.changes(old, now) == []
  old["files"]["fedsim/algorithms/gd.py"] = "0" * 12
  old["fingerprint"] = "1" * 64
  assert provenance.changes(old, now) == ["fedsim/algorithms/gd.py changed"]
  assert "older fedsim" in provenance.changes(None, now)[0]


def _write_module(folder, scale):
  (folder / "my_algos.py").write_text(
      "import dataclasses\nfrom fedsim.algorithms.fedavg import make_fedavg\n"
      "def make_mine(task, cfg, name):\n"
      f"  return make_fedavg(task, dataclasses.replace(cfg, lr=cfg.lr * {scale}), name=name)\n")


@pytest.fixture
def mine(tmp_path, monkeypatch):
  """An algorithm registered from outside fedsim, in a module the test rewrites."""
  from fedsim import algorithms
  folder = tmp_path / "user_code"
  folder.mkdir()
  _write_module(folder, 1.0)
  monkeypatch.syspath_prepend(str(folder))
  module = importlib.import_module("my_algos")
  cls = algorithms.REGISTRY["fedavg"][0]
  monkeypatch.setitem(algorithms.REGISTRY, "mine", (cls, {}, module.make_mine))

  def change(scale):
    _write_module(folder, scale)
    importlib.invalidate_caches()
    new = importlib.reload(module)
    algorithms.REGISTRY["mine"] = (cls, {}, new.make_mine)
  yield change
  sys.modules.pop("my_algos", None)


def test_a_registered_algorithm_whose_code_changed_is_not_returned_as_stored(tmp_path, mine, caplog):
  cfg = fedsim.ExperimentConfig(**{**TINY, "task": "softmax", "num_clients": 6, "algorithms": ("mine",)})
  first = fedsim.run(cfg, output_dir=str(tmp_path / "out"))
  assert first.stored is False
  with caplog.at_level(logging.INFO, logger="fedsim"):
    again = fedsim.run(cfg, output_dir=str(tmp_path / "out"))  # same code: the stored records, said so
  assert again.stored is True and _strip(again["mine"]) == _strip(first["mine"])
  assert any("returning stored records" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)
  mine(0.5)  # the code under the same name changes
  with pytest.raises(ConfigError, match=r"made by other code \(algorithm mine's code \(module my_algos\) changed\)"
                     r".*overwrite=True"):
    fedsim.run(cfg, output_dir=str(tmp_path / "out"))
  fresh = fedsim.run(cfg, output_dir=str(tmp_path / "fresh"))
  redone = fedsim.run(dataclasses_replace(cfg, overwrite=True), output_dir=str(tmp_path / "out"))
  assert redone.stored is False and _strip(redone["mine"]) == _strip(fresh["mine"])
  assert _strip(fresh["mine"]) != _strip(first["mine"])  # the change changed the records


def dataclasses_replace(cfg, **kw):
  import dataclasses
  return dataclasses.replace(cfg, **kw)


def test_the_cli_refuses_a_finished_run_of_other_code_in_one_line(tmp_path):
  out = tmp_path / "out"
  assert _cli(*TINY_FLAGS, "--rounds=2", f"--output_dir={out}").returncode == 0
  cfg = json.loads((out / "config.json").read_text())
  cfg["provenance"]["files"]["fedsim/core/engine.py"] = "0" * 12   # as if engine.py had been another
  cfg["provenance"]["fingerprint"] = "0" * 64
  (out / "config.json").write_text(json.dumps(cfg))
  proc = _cli(*TINY_FLAGS, "--rounds=2", f"--output_dir={out}")
  assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
  assert "made by other code (fedsim/core/engine.py changed)" in proc.stderr and "--overwrite" in proc.stderr
  assert _cli(*TINY_FLAGS, "--rounds=2", f"--output_dir={out}", "--overwrite").returncode == 0


# --- one writer per folder ----------------------------------------------------------------------

HOLD = ("import sys, time\nfrom fedsim.run_folder import FolderLock\nlock = FolderLock(sys.argv[1], sys.argv[2])\n"
        "print('locked', flush=True)\ntime.sleep(600)\n")


def _holder(folder, kind="run"):
  proc = subprocess.Popen([sys.executable, "-c", HOLD, str(folder), kind], cwd=REPO, env=ENV,
                          stdout=subprocess.PIPE, text=True)
  assert proc.stdout.readline().strip() == "locked"
  return proc


def test_a_live_writer_refuses_a_second_and_a_killed_one_blocks_nothing(tmp_path):
  out = tmp_path / "out"
  holder = _holder(out)
  try:
    with pytest.raises(ConfigError, match=rf"in use by a live run of process {holder.pid} on "):
      fedsim.run(fedsim.ExperimentConfig(**TINY), output_dir=str(out))
    proc = _cli(*TINY_FLAGS, "--rounds=2", f"--output_dir={out}")
    assert proc.returncode == 2 and f"process {holder.pid}" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
  finally:
    holder.send_signal(signal.SIGKILL)
    holder.wait()
  assert (out / run_folder.LOCK_FILE).exists()  # the killed process's file stays; its lock does not
  assert fedsim.run(fedsim.ExperimentConfig(**TINY), output_dir=str(out))["gd"][-1]["round"] == 4


def test_a_run_is_refused_in_a_sweeps_folder_and_a_sweep_in_a_runs(tmp_path):
  sweep_dir = tmp_path / "sweep"
  sweep_dir.mkdir()
  (sweep_dir / run_folder.SWEEP_FILE).write_text("{}")
  with pytest.raises(ConfigError, match="holds a sweep"):
    fedsim.run(fedsim.ExperimentConfig(**TINY), output_dir=str(sweep_dir))
  run_dir = tmp_path / "run"
  fedsim.run(fedsim.ExperimentConfig(**TINY), output_dir=str(run_dir))
  proc = subprocess.run([sys.executable, "-m", "experiments.sweep", *TINY_FLAGS, "--rounds=2", "--sweep=step_size=0.1",
                         f"--output_dir={run_dir}"], cwd=REPO, env=ENV, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 2 and "holds a run (config.json)" in proc.stderr, proc.stderr


def test_a_live_sweep_refuses_a_second_sweep(tmp_path):
  out = tmp_path / "sweep"
  holder = _holder(out, "sweep")
  try:
    proc = subprocess.run([sys.executable, "-m", "experiments.sweep", *TINY_FLAGS, "--rounds=2",
                           "--sweep=step_size=0.1", f"--output_dir={out}"], cwd=REPO, env=ENV, capture_output=True,
                          text=True, timeout=300)
  finally:
    holder.send_signal(signal.SIGKILL)
    holder.wait()
  assert proc.returncode == 2 and f"in use by a live sweep of process {holder.pid}" in proc.stderr, proc.stderr


# --- interrupts ---------------------------------------------------------------------------------

def test_the_engine_stops_at_a_chunk_boundary_saves_and_resumes_bitwise(tmp_path):
  import jax

  from fedsim import algorithms
  from fedsim.core import checkpoint
  from fedsim.core.engine import simulate
  task = fedsim.api.build_task(fedsim.ExperimentConfig(**TINY))
  alg = algorithms.build("gd", task)
  key = jax.random.key(0)
  _, want = simulate(alg, task, 10, 2, key)
  seen = []
  with pytest.raises(Interrupted) as e:
    simulate(alg, task, 10, 2, key, on_eval=seen.append, checkpoint_dir=str(tmp_path), checkpoint_every=100,
             stop=lambda: len(seen) >= 3)  # after round 4's record
  assert e.value.round == 4 and [r["round"] for r in seen] == [0, 2, 4]
  assert checkpoint.latest_round(str(tmp_path)) == 4  # saved at the stop although K = 100
  _, rest = simulate(alg, task, 10, 2, key, checkpoint_dir=str(tmp_path), checkpoint_every=100, resume=True)
  assert _strip(seen + rest) == _strip(want)


def test_an_interrupted_python_run_keeps_its_records_and_resumes_bitwise(tmp_path):
  cfg = fedsim.ExperimentConfig(**{**TINY, "rounds": 12, "checkpoint_every": 100})
  want = fedsim.run(cfg, output_dir=str(tmp_path / "ref"))

  def ctrl_c(label, rec):
    if rec["round"] == 6:
      os.kill(os.getpid(), signal.SIGINT)   # the handler only marks it; the chunk ends cleanly
  before = signal.getsignal(signal.SIGINT)  # (a pytest-xdist worker may start with SIGINT ignored)
  with pytest.raises(Interrupted) as e:
    fedsim.run(cfg, output_dir=str(tmp_path / "cut"), callbacks=(ctrl_c,))
  # The signal arrives while round 6's record is handled: the run stops at that chunk boundary.
  assert (e.value.round, e.value.checkpoint_round, e.value.signum) == (6, 6, signal.SIGINT)
  assert str(e.value) == "interrupted (SIGINT) at round 6 (gd); resume=True continues from round 6"
  assert signal.getsignal(signal.SIGINT) is before   # restored
  assert [r["round"] for r in results.read_metrics(tmp_path / "cut" / "gd")] == [0, 2, 4, 6]
  got = fedsim.run(dataclasses_replace(cfg, resume=True), output_dir=str(tmp_path / "cut"))
  assert _strip(got["gd"]) == _strip(want["gd"])


def _interrupt_cli(out, signum, *extra):
  """A CLI run sent ``signum`` once its first record past round 0 is written."""
  proc = subprocess.Popen([sys.executable, "-m", "experiments.run", *TINY_FLAGS, "--rounds=400", "--eval_every=1",
                           f"--output_dir={out}", *extra], cwd=REPO, env=ENV, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
  metrics, deadline = out / "gd" / "metrics.jsonl", time.monotonic() + 240
  while time.monotonic() < deadline and proc.poll() is None:
    if metrics.exists() and len(metrics.read_text().splitlines()) >= 2:
      break
    time.sleep(0.02)
  proc.send_signal(signum)
  _, err = proc.communicate(timeout=240)
  return proc.returncode, err


@pytest.mark.parametrize("signum,status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signalled_cli_run_exits_in_one_line_and_resumes_bitwise(tmp_path, signum, status):
  out = tmp_path / "cut"
  code, err = _interrupt_cli(out, signum, "--checkpoint_every=1000")
  lines = err.strip().splitlines()
  assert code == status and "Traceback" not in err, err
  stopped = results.read_metrics(out / "gd")[-1]["round"]
  assert stopped < 400 and lines[-1] == (f"interrupted ({signal.Signals(signum).name}) at round {stopped} (gd); "
                                         f"--resume continues from round {stopped}")
  assert _cli(*TINY_FLAGS, "--rounds=400", "--eval_every=1", f"--output_dir={out}", "--checkpoint_every=1000",
              "--resume").returncode == 0
  ref = _cli(*TINY_FLAGS, "--rounds=400", "--eval_every=1", f"--output_dir={tmp_path / 'ref'}")
  assert ref.returncode == 0
  assert _strip(results.read_metrics(out / "gd")) == _strip(results.read_metrics(tmp_path / "ref" / "gd"))


def test_a_signalled_run_without_checkpoints_says_how_to_enable_them(tmp_path):
  code, err = _interrupt_cli(tmp_path / "cut", signal.SIGTERM)
  assert code == 143 and "Traceback" not in err, err
  assert "no checkpoint to resume from (add --checkpoint_every=K" in err.strip().splitlines()[-1]


def test_a_stop_saves_a_checkpoint_whatever_the_time_cadence_says(tmp_path):
  from fedsim.core import checkpoint
  cfg = fedsim.ExperimentConfig(**{**TINY, "rounds": 12, "checkpoint_every": -1, "checkpoint_interval_s": 3600.0})
  want = fedsim.run(dataclasses_replace(cfg, checkpoint_every=0), output_dir=str(tmp_path / "ref"))

  def ctrl_c(label, rec):
    if rec["round"] == 4:
      os.kill(os.getpid(), signal.SIGINT)
  with pytest.raises(Interrupted) as e:
    fedsim.run(cfg, output_dir=str(tmp_path / "cut"), callbacks=(ctrl_c,))
  assert e.value.checkpoint_round == 4 == checkpoint.latest_round(str(tmp_path / "cut" / "gd" / "checkpoints"))
  got = fedsim.run(dataclasses_replace(cfg, resume=True), output_dir=str(tmp_path / "cut"))
  assert _strip(got["gd"]) == _strip(want["gd"])


def test_a_stop_between_algorithms_keeps_the_finished_one_and_resume_runs_the_rest(tmp_path):
  cfg = fedsim.ExperimentConfig(**{**TINY, "algorithms": ("gd", "gd:step_size=0.1"), "rounds": 4})
  want = fedsim.run(cfg, output_dir=str(tmp_path / "ref"))

  def ctrl_c(label, rec):
    if label == "gd" and rec["round"] == 4:   # the first algorithm's last record
      os.kill(os.getpid(), signal.SIGINT)
  with pytest.raises(Interrupted) as e:
    fedsim.run(cfg, output_dir=str(tmp_path / "cut"), callbacks=(ctrl_c,))
  assert (e.value.label, e.value.round, e.value.checkpoint_round) == ("gd", 4, 4)
  assert not (tmp_path / "cut" / "gd-step_size=0.1" / "metrics.jsonl").exists()
  got = fedsim.run(dataclasses_replace(cfg, resume=True), output_dir=str(tmp_path / "cut"))
  assert {k: _strip(v) for k, v in got.items()} == {k: _strip(v) for k, v in want.items()}
