"""No lost work and no silent wrong answer (issue 18): a run directory is a record, every
file is written atomically or line by line, metrics are strict JSON, progress is honest,
and faults (a full disk, a kill) lose no byte.

Fault counts (item 5 of the issue) are printed by the fault tests (``pytest -s``)."""

import errno
import io
import json
import math
import os
import shutil
import signal
import subprocess
import sys

import pytest

import fedsim
from fedsim import files, results, runner
from fedsim.core import checkpoint
from fedsim.core.errors import OutputError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Ridge regression, 3 clients: compiles and runs in seconds.
TINY = dict(task="ridge", num_clients=3, clients_per_round=3, rounds=4, eval_every=2,
            algorithms=("gd",), progress=False)
TINY_FLAGS = ["--task=ridge", "--num_clients=3", "--clients_per_round=3", "--eval_every=2",
              "--algorithm=gd"]


def _strict(line: str):
  def no_constant(name):
    raise ValueError(f"non-standard JSON constant {name}")
  return json.loads(line, parse_constant=no_constant)


def _cli(*args, timeout=300):
  return subprocess.run([sys.executable, "-m", "experiments.run", *args], cwd=REPO, capture_output=True,
                        text=True, timeout=timeout, env=dict(os.environ, JAX_PLATFORMS="cpu"))


def _one_line_error(proc, *words):
  assert proc.returncode == 2, proc.stderr[-2000:]
  lines = proc.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in proc.stderr, proc.stderr
  for w in words:
    assert w in lines[0], lines[0]
  return lines[0]


def _no_build(monkeypatch):
  """Makes building a task fail loudly: a check that runs after it would not be reached."""
  def boom(config):
    raise AssertionError("the task was built before the output directory was checked")
  monkeypatch.setattr(fedsim.api, "build_task", boom)


# --- 1. a run directory is a record -------------------------------------------------------

def test_a_new_run_refuses_a_directory_holding_another_run_unless_overwrite(tmp_path, monkeypatch):
  out = tmp_path / "run"
  fedsim.run(fedsim.ExperimentConfig(**{**TINY, "algorithms": ("gd", "gd:step_size=0.5")}), output_dir=str(out))
  before = (out / "gd" / "metrics.jsonl").read_bytes()
  other = fedsim.ExperimentConfig(**{**TINY, "hparams": {"gd": {"step_size": 0.2}}})
  with monkeypatch.context() as m:
    _no_build(m)
    with pytest.raises(fedsim.ConfigError) as err:
      fedsim.run(other, output_dir=str(out))
  assert err.value.flag == "output_dir" and "step_size (gd)" in str(err.value)
  assert "overwrite" in str(err.value) and (out / "gd" / "metrics.jsonl").read_bytes() == before
  # The same settings again (a rerun) are accepted; --overwrite replaces the other run whole.
  fedsim.run(fedsim.ExperimentConfig(**{**TINY, "algorithms": ("gd", "gd:step_size=0.5")}), output_dir=str(out))
  fedsim.run(fedsim.ExperimentConfig(**{**TINY, "hparams": {"gd": {"step_size": 0.2}}, "overwrite": True}),
             output_dir=str(out))
  assert not (out / "gd-step_size=0.5").exists()               # the replaced run's folders went
  assert results.read_config(out)["algorithms"]["gd"]["step_size"] == 0.2
  # A new run of another length is another run too (only --resume may change the rounds).
  longer = fedsim.ExperimentConfig(**{**TINY, "hparams": {"gd": {"step_size": 0.2}},
                                      "rounds": TINY["rounds"] + 2})
  with monkeypatch.context() as m:
    _no_build(m)
    with pytest.raises(fedsim.ConfigError, match="rounds: stored"):
      fedsim.run(longer, output_dir=str(out))


def test_resume_with_a_changed_setting_is_refused_naming_it_and_both_values(tmp_path, monkeypatch):
  out = tmp_path / "run"
  fedsim.run(fedsim.ExperimentConfig(**{**TINY, "checkpoint_every": 2}), output_dir=str(out))
  files_before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
  changed = fedsim.ExperimentConfig(**{**TINY, "rounds": 8, "resume": True, "checkpoint_every": 2,
                                       "hparams": {"gd": {"step_size": 0.5}}, "seed": 3})
  with monkeypatch.context() as m:
    _no_build(m)
    with pytest.raises(fedsim.ConfigError) as err:
      fedsim.run(changed, output_dir=str(out))
  msg = str(err.value)
  assert err.value.flag == "resume", msg
  assert "seed: stored 0, given 3" in msg and "step_size (gd): stored" in msg and "given 0.5" in msg, msg
  assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == files_before  # nothing touched
  # More rounds with the same settings resume (rounds do not change earlier records).
  again = fedsim.run(fedsim.ExperimentConfig(**{**TINY, "rounds": 6, "resume": True, "checkpoint_every": 2}),
                     output_dir=str(out))
  assert [r["round"] for r in again["gd"]] == [0, 2, 4, 6]


def test_resume_and_overwrite_do_not_combine():
  with pytest.raises(fedsim.ConfigError) as err:
    fedsim.ExperimentConfig(**{**TINY, "resume": True, "overwrite": True})
  assert err.value.flag == "overwrite"


@pytest.mark.parametrize("make, words", [
    (lambda tmp: (tmp / "f").write_text("x") and tmp / "f", "not a folder"),
    (lambda tmp: (tmp / "f").write_text("x") and tmp / "f" / "sub" / "run", "which is not a folder"),
])
def test_output_dir_problems_are_refused_before_the_task_is_built(tmp_path, monkeypatch, make, words):
  path = make(tmp_path)
  _no_build(monkeypatch)
  with pytest.raises(fedsim.ConfigError) as err:
    fedsim.run(fedsim.ExperimentConfig(**TINY), output_dir=str(path))
  assert err.value.flag == "output_dir" and words in str(err.value), str(err.value)


def test_a_read_only_output_dir_is_refused_before_the_task_is_built(tmp_path, monkeypatch):
  ro = tmp_path / "ro"
  ro.mkdir()
  ro.chmod(0o555)
  if os.geteuid() == 0:  # root writes anyway: simulate the read-only file system
    def read_only(*args, **kwargs):
      raise OSError(errno.EROFS, "Read-only file system")
    monkeypatch.setattr("tempfile.TemporaryFile", read_only)
  _no_build(monkeypatch)
  with pytest.raises(fedsim.ConfigError) as err:
    fedsim.run(fedsim.ExperimentConfig(**TINY), output_dir=str(ro / "run"))
  assert err.value.flag == "output_dir" and "not writable" in str(err.value), str(err.value)


def test_cli_refuses_a_bad_output_dir_and_a_changed_resume_with_one_line(tmp_path):
  (tmp_path / "file").write_text("x")
  _one_line_error(_cli(*TINY_FLAGS, "--rounds=2", f"--output_dir={tmp_path / 'file'}"), "--output_dir",
                  "not a folder")
  _one_line_error(_cli(*TINY_FLAGS, "--rounds=2", f"--output_dir={tmp_path / 'file' / 'run'}"),
                  "--output_dir")
  out = tmp_path / "run"
  first = _cli(*TINY_FLAGS, "--rounds=4", "--checkpoint_every=2", f"--output_dir={out}")
  assert first.returncode == 0, first.stderr[-2000:]
  before = (out / "gd" / "metrics.jsonl").read_bytes()
  _one_line_error(_cli(*TINY_FLAGS, "--rounds=6", "--step_size=0.5", "--resume", "--checkpoint_every=2",
                       f"--output_dir={out}"), "--resume", "step_size (gd): stored None, given 0.5")
  _one_line_error(_cli(*TINY_FLAGS, "--rounds=6", "--step_size=0.5", f"--output_dir={out}"),
                  "--output_dir", "--overwrite")
  assert (out / "gd" / "metrics.jsonl").read_bytes() == before
  ok = _cli(*TINY_FLAGS, "--rounds=6", "--step_size=0.5", "--overwrite", f"--output_dir={out}")
  assert ok.returncode == 0, ok.stderr[-2000:]
  assert results.read_config(out)["flags"]["overwrite"] is True


# --- reruns never surprise (issue 36) -------------------------------------------------------

def _files(folder):
  """{path: (bytes, mtime_ns)} of every file under ``folder``."""
  return {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in folder.rglob("*") if p.is_file()}


def _truncate(path, keep):
  """Leaves the first ``keep`` records of a metrics.jsonl (a run killed there)."""
  lines = path.read_text().splitlines(keepends=True)
  path.write_text("".join(lines[:keep]))


def test_a_finished_run_is_returned_as_stored_and_its_files_are_untouched(tmp_path, monkeypatch, capsys):
  out = tmp_path / "run"
  first = fedsim.run(fedsim.ExperimentConfig(**TINY), output_dir=str(out))
  before = _files(out)
  for again in ({}, {"resume": True}):  # the same call, and a resume of the finished run
    with monkeypatch.context() as m:
      _no_build(m)                      # nothing is built, run or written
      capsys.readouterr()
      histories = fedsim.run(fedsim.ExperimentConfig(**{**TINY, **again, "progress": True}), output_dir=str(out))
    assert capsys.readouterr().out == f"complete: 4 rounds in {out}; overwrite=True to recompute\n"
    assert histories == {"gd": [{k: v for k, v in r.items()} for r in first["gd"]]}
    assert _files(out) == before        # byte-identical, mtimes unchanged
  fedsim.run(fedsim.ExperimentConfig(**{**TINY, "overwrite": True}), output_dir=str(out))
  assert _files(out).keys() == before.keys() and _files(out) != before  # overwrite=True recomputes


def test_an_unfinished_run_is_refused_unless_resume_or_overwrite(tmp_path, monkeypatch):
  out = tmp_path / "run"
  fedsim.run(fedsim.ExperimentConfig(**TINY), output_dir=str(out))  # no checkpoints
  _truncate(out / "gd" / "metrics.jsonl", 2)                         # "killed" after round 2
  before = _files(out)
  _no_build(monkeypatch)
  for again, field in (({}, "output_dir"), ({"resume": True}, "resume")):
    with pytest.raises(fedsim.ConfigError) as err:
      fedsim.run(fedsim.ExperimentConfig(**{**TINY, **again}), output_dir=str(out))
    msg = str(err.value)
    assert err.value.flag == field and "gd at round 2 of 4, no checkpoint" in msg, msg
    for words in ("overwrite=True", "checkpoint_every=K", "resume=True"):  # Python's words, not flags
      assert words in msg, msg
    body = msg.split(": ", 1)[1]  # after ConfigError's field prefix
    assert "--overwrite" not in body and "--resume" not in body, msg
  with pytest.raises(fedsim.ConfigError, match="nothing to resume") as err:  # --resume into no run
    fedsim.run(fedsim.ExperimentConfig(**{**TINY, "resume": True}), output_dir=str(tmp_path / "empty"))
  assert err.value.flag == "resume"
  assert _files(out) == before


def test_an_unfinished_run_with_checkpoints_resumes_and_a_finished_algorithm_is_kept(tmp_path, monkeypatch):
  out = tmp_path / "run"
  two = {**TINY, "algorithms": ("gd", "gd:step_size=0.5"), "checkpoint_every": 2}
  full = fedsim.run(fedsim.ExperimentConfig(**two), output_dir=str(tmp_path / "full"))
  fedsim.run(fedsim.ExperimentConfig(**two), output_dir=str(out))
  _truncate(out / "gd-step_size=0.5" / "metrics.jsonl", 2)  # the second algorithm "killed" after round 2
  shutil.rmtree(out / "gd-step_size=0.5" / "checkpoints" / "4")
  kept = (out / "gd" / "metrics.jsonl").stat().st_mtime_ns
  with pytest.raises(fedsim.ConfigError) as err:
    fedsim.run(fedsim.ExperimentConfig(**two), output_dir=str(out))
  assert "gd complete; gd-step_size=0.5 at round 2 of 4, checkpoint at round 2" in str(err.value)
  assert "resume=True to continue it" in str(err.value)
  again = fedsim.run(fedsim.ExperimentConfig(**{**two, "resume": True}), output_dir=str(out))
  strip = lambda h: [{k: v for k, v in r.items() if k != "wall_time_s"} for r in h]  # noqa: E731
  assert strip(again["gd"]) == strip(full["gd"]) and strip(again["gd-step_size=0.5"]) == strip(full["gd-step_size=0.5"])
  assert (out / "gd" / "metrics.jsonl").stat().st_mtime_ns == kept  # the finished one was not rerun


def test_cli_reruns_print_complete_or_refuse_with_one_line(tmp_path):
  out = tmp_path / "run"
  args = [*TINY_FLAGS, "--rounds=4", f"--output_dir={out}"]
  assert _cli(*args).returncode == 0
  before = _files(out)
  again = _cli(*args)
  assert again.returncode == 0, again.stderr[-2000:]
  assert again.stdout == f"complete: 4 rounds in {out}; --overwrite to recompute\n" and not again.stderr.strip()
  assert _files(out) == before
  _truncate(out / "gd" / "metrics.jsonl", 2)
  line = _one_line_error(_cli(*args), "--output_dir", "without checkpoints", "gd at round 2 of 4",
                         "--overwrite", "--checkpoint_every=K", "--resume")
  assert "overwrite=True" not in line
  _one_line_error(_cli(*args, "--resume"), "--resume: no checkpoint to resume from", "--overwrite",
                  "--checkpoint_every=K")
  _one_line_error(_cli(*TINY_FLAGS, "--rounds=4", "--resume", f"--output_dir={tmp_path / 'none'}"),
                  "--resume: nothing to resume")


def test_every_file_of_a_run_is_renamed_into_place(tmp_path, monkeypatch):
  renamed = []
  real = os.replace
  monkeypatch.setattr(files.os, "replace", lambda a, b: (renamed.append(os.path.basename(b)), real(a, b)))
  fedsim.run(fedsim.ExperimentConfig(**TINY), output_dir=str(tmp_path))
  assert {"config.json", "metrics.jsonl", "curves.png"} <= set(renamed), renamed
  assert not [p for p in tmp_path.rglob("*.tmp")]


def test_atomic_write_keeps_the_old_file_when_writing_fails(tmp_path):
  path = tmp_path / "config.json"
  files.atomic_write(path, "old")
  with pytest.raises(RuntimeError):
    with files.atomic_open(path) as f:
      f.write("partial new conte")
      raise RuntimeError("killed")
  assert path.read_text() == "old" and os.listdir(tmp_path) == ["config.json"]


def test_the_next_write_removes_a_temporary_file_a_kill_left(tmp_path):
  path = tmp_path / "results.csv"
  (tmp_path / ".results.csv.k1ll3d.tmp").write_text("a,b\n1,")  # a write killed before its rename
  (tmp_path / ".other.csv.x.tmp").write_text("not ours")
  files.atomic_write(path, "a,b\n1,2\n")
  assert sorted(os.listdir(tmp_path)) == [".other.csv.x.tmp", "results.csv"]


# --- 2. strict JSON and honest progress ----------------------------------------------------

def test_a_diverged_run_writes_strict_json_with_a_nonfinite_field(tmp_path):
  config = fedsim.ExperimentConfig(**{**TINY, "rounds": 20, "algorithms": ("gd:step_size=1e6",)})
  hist = fedsim.run(config, output_dir=str(tmp_path))["gd-step_size=1e6"]
  assert not math.isfinite(hist[-1]["objective"])
  lines = (tmp_path / "gd-step_size=1e6" / "metrics.jsonl").read_text().splitlines()
  recs = [_strict(line) for line in lines]          # bare NaN / Infinity would raise here
  assert recs[-1]["objective"] is None and recs[-1]["nonfinite"]["objective"] in ("nan", "inf", "-inf")
  assert all("nonfinite" not in r for r in recs[:-1])
  back = results.read_metrics(tmp_path / "gd-step_size=1e6")
  assert len(back) == len(hist) and not math.isfinite(back[-1]["objective"])
  assert "nonfinite" not in back[-1] and back[:-1] == hist[:-1]
  assert len(results.load_runs(tmp_path, metric="objective")) == len(hist) - 1
  _strict((tmp_path / "config.json").read_text())  # config.json is strict JSON too


def test_eta_excludes_compile_time():
  w = runner.ProgressWriter("a", None, 100, echo=False)
  lines = []
  for r, t in ((0, 1.0), (10, 100.0), (20, 101.0), (30, 102.0)):  # the first chunk compiles: 99 s
    rec = {"round": r, "objective": 1.0, "queries": r, "wall_time_s": t}
    lines.append(runner.progress_line("a", rec, 100, w._since))
    w(rec)
  assert lines[0].endswith("ETA -") and lines[1].endswith("ETA -")
  assert lines[2].endswith("ETA 8.0s") and lines[3].endswith("ETA 7.0s"), lines


def test_progress_is_one_redrawn_line_on_a_terminal_and_one_line_per_eval_otherwise(tmp_path, monkeypatch,
                                                                                    capsys):
  class Tty(io.StringIO):
    def isatty(self):
      return True
  recs = [{"round": r, "objective": 1.0, "queries": r, "wall_time_s": 0.1 * r} for r in (0, 5, 10)]
  tty = Tty()
  monkeypatch.setattr(sys, "stderr", tty)
  w = runner.ProgressWriter("a", None, 10)
  for rec in recs:
    w(rec)
  w.close()
  monkeypatch.undo()
  assert tty.getvalue().count("\r") == 3 and tty.getvalue().count("\n") == 1 and "|####" in tty.getvalue()
  assert capsys.readouterr().out == ""
  w = runner.ProgressWriter("a", None, 10)  # pytest's stderr is not a terminal
  for rec in recs:
    w(rec)
  w.close()
  assert len(capsys.readouterr().out.strip().splitlines()) == 3


# --- 4. faults, measured --------------------------------------------------------------------

def test_a_full_disk_stops_the_run_with_a_clear_error_and_loses_no_byte(tmp_path, monkeypatch):
  """Simulated ENOSPC on each metrics append in turn (the first fails whole, the others after
  writing half the line): earlier records stay, byte for byte."""
  faults, lost = 0, 0
  full = fedsim.run(fedsim.ExperimentConfig(**{**TINY, "rounds": 8}), output_dir=str(tmp_path / "full"))["gd"]
  for fail_at in range(1, len(full)):  # records 1.. : each fails once
    out = tmp_path / f"fail{fail_at}"
    real_write, calls = os.write, []

    def write(fd, data, fail_at=fail_at, calls=calls, real_write=real_write):
      if os.readlink(f"/proc/self/fd/{fd}").endswith("metrics.jsonl"):
        calls.append(len(data))
        if len(calls) == fail_at + 1:
          if fail_at % 2:
            real_write(fd, data[:len(data) // 2])  # a partial line reaches the disk first
          raise OSError(errno.ENOSPC, "No space left on device")
      return real_write(fd, data)
    monkeypatch.setattr(files.os, "write", write)
    with pytest.raises(OutputError) as err:
      fedsim.run(fedsim.ExperimentConfig(**{**TINY, "rounds": 8}), output_dir=str(out))
    monkeypatch.undo()
    faults += 1
    msg = str(err.value)
    assert err.value.flag == "output_dir" and "No space left on device" in msg, msg
    assert f"up to round {full[fail_at - 1]['round']} are kept" in msg, msg
    text = (out / "gd" / "metrics.jsonl").read_text()
    kept = [_strict(line) for line in text.splitlines()]
    want = [{k: v for k, v in r.items() if k != "wall_time_s"} for r in full[:fail_at]]
    got = [{k: v for k, v in r.items() if k != "wall_time_s"} for r in kept]
    lost += sum(a != b for a, b in zip(got, want)) + abs(len(got) - len(want)) + (not text.endswith("\n"))
  print(f"\nfull-disk faults injected: {faults}, records lost or corrupted: {lost}")
  assert faults == len(full) - 1 and lost == 0


def test_line_appender_cuts_a_partial_line_back(tmp_path, monkeypatch):
  path = tmp_path / "m.jsonl"
  f = files.LineAppender(path, ['{"round": 0}'])
  real, calls = os.write, []

  def write(fd, data):  # disk full after 3 bytes: a short write, then ENOSPC
    calls.append(1)
    if len(calls) > 1:
      raise OSError(errno.ENOSPC, "No space left on device")
    return real(fd, data[:3])
  monkeypatch.setattr(files.os, "write", write)
  with pytest.raises(OSError):
    f.append('{"round": 1}')
  monkeypatch.undo()
  f.append('{"round": 2}')
  f.close()
  assert path.read_text() == '{"round": 0}\n{"round": 2}\n'


@pytest.mark.slow
def test_kill_at_random_points_then_resume_gives_the_uninterrupted_metrics(tmp_path):
  """SIGKILL a checkpointing run at random moments (during compiles, chunks, checkpoint writes),
  resume each time until it finishes; the metrics equal an uninterrupted run's."""
  import random
  # 40 rounds, a checkpoint after each: about 3 s of start-up, then about 3 s of rounds and orbax saves
  # (some 30 ms each; 2 cores, idle).
  flags = [*TINY_FLAGS, "--rounds=40", "--eval_every=1", "--checkpoint_every=1", "--algorithm=gd,fedavg",
           "--clients_per_round=2"]
  ref = _cli(*flags, f"--output_dir={tmp_path / 'ref'}")
  assert ref.returncode == 0, ref.stderr[-2000:]
  rng, out, kills, lost, refused = random.Random(18), tmp_path / "cut", 0, 0, False
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  for attempt in range(14):
    # As a person would: --resume where a checkpoint exists, else --overwrite where a run was begun
    # (a rerun of an unfinished run is refused, issue 36); --overwrite after --resume was refused.
    ckpts = any(checkpoint.latest_round(str(out / alg / "checkpoints")) is not None for alg in ("gd", "fedavg"))
    again = ["--resume"] if ckpts and not refused else ["--overwrite"] if (out / "config.json").exists() else []
    args = [*flags, f"--output_dir={out}", *again]
    proc = subprocess.Popen([sys.executable, "-m", "experiments.run", *args], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
      _, err = proc.communicate(timeout=rng.uniform(3.0, 9.0) if attempt < 6 else 300)
      refused = proc.returncode == 2 and "--resume: no checkpoint" in err
      if refused:
        continue
      assert proc.returncode == 0, err[-2000:]
      break
    except subprocess.TimeoutExpired:
      proc.send_signal(signal.SIGKILL)
      proc.wait()
      kills, refused = kills + 1, False
      for alg in ("gd", "fedavg"):  # every kill leaves strict, complete lines
        path = out / alg / "metrics.jsonl"
        if path.exists():
          text = path.read_text()
          lost += bool(text) and not text.endswith("\n")
          [_strict(line) for line in text.splitlines()]
  for alg in ("gd", "fedavg"):
    want = [{k: v for k, v in r.items() if k != "wall_time_s"} for r in results.read_metrics(tmp_path / "ref" / alg)]
    got = [{k: v for k, v in r.items() if k != "wall_time_s"} for r in results.read_metrics(out / alg)]
    lost += got != want
  print(f"\nkill-and-resume: {kills} kills, runs differing or files corrupted: {lost}")
  assert lost == 0 and kills >= 1


@pytest.mark.slow
def test_a_really_full_disk_exits_2_with_one_line_and_earlier_metrics_intact(tmp_path):
  """A 64 KiB tmpfs under --output_dir (needs root and mount; skipped otherwise)."""
  disk = tmp_path / "disk"
  disk.mkdir()
  if shutil.which("mount") is None or shutil.which("umount") is None or subprocess.run(
      ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], capture_output=True).returncode != 0:
    pytest.skip("cannot mount a tmpfs here")
  try:
    flags = [*TINY_FLAGS, "--rounds=600", "--eval_every=1"]
    proc = _cli(*flags, f"--output_dir={disk / 'run'}")
    line = _one_line_error(proc, "--output_dir", "No space left on device", "are kept")
    text = (disk / "run" / "gd" / "metrics.jsonl").read_text()
    kept = [_strict(x) for x in text.splitlines()]
    assert text.endswith("\n") and 0 < len(kept) < 601, line
  finally:
    subprocess.run(["umount", str(disk)], check=False)
  ref = _cli(*flags, f"--output_dir={tmp_path / 'ref'}")
  assert ref.returncode == 0, ref.stderr[-2000:]
  want = [{k: v for k, v in r.items() if k != "wall_time_s"} for r in results.read_metrics(tmp_path / "ref" / "gd")]
  got = [{k: v for k, v in r.items() if k != "wall_time_s"} for r in kept]
  lost = sum(a != b for a, b in zip(got, want))
  print(f"\nreal full disk: 1 fault, {len(kept)} records kept, records lost or corrupted: {lost}")
  assert lost == 0


# A sweep of 8 groups (ridge, gd, rounds 2..9 x 2 seeds): results.csv is rewritten after each group.
SWEEP_FLAGS = ["--task=ridge", "--algorithm=gd", "--num_clients=3", "--clients_per_round=3", "--eval_every=2",
               "--sweep=rounds=2,3,4,5,6,7,8,9", "--seeds=2"]


def _csv_table(path):
  """results.csv read strictly: a header, then rows of the header's length, all ending in a newline."""
  import csv
  text = path.read_text()
  assert text.endswith("\n"), text[-200:]
  table = list(csv.reader(io.StringIO(text, newline=""), strict=True))
  assert table and all(len(r) == len(table[0]) for r in table), text
  return table


def _untimed(table):
  keep = [i for i, c in enumerate(table[0]) if c != "group_wall_time_s"]
  return [[r[i] for i in keep] for r in table]


@pytest.mark.slow
def test_kill_a_sweep_at_random_points_then_rerun_gives_the_uninterrupted_results_csv(tmp_path):
  """SIGKILL ``experiments.sweep`` 3 times (2 at random moments after it has started its groups,
  1 as soon as a temporary ``.results.csv.*.tmp`` appears, i.e. during a results.csv write),
  rerunning the same command after each; after every kill each file is strictly readable, and
  the final results.csv equals an uninterrupted sweep's (but for the wall-time column)."""
  import random
  import threading
  import time
  env = dict(os.environ, JAX_PLATFORMS="cpu")

  def sweep(out):
    return subprocess.Popen([sys.executable, "-u", "-m", "experiments.sweep", *SWEEP_FLAGS, f"--output_dir={out}"],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

  ref = sweep(tmp_path / "ref")
  out_ref, err_ref = ref.communicate(timeout=300)
  assert ref.returncode == 0, err_ref[-2000:]
  want = _csv_table(tmp_path / "ref" / "results.csv")
  assert len(want) == 1 + 16

  rng, out = random.Random(18), tmp_path / "cut"
  plan = ["random", "write", "random"]  # the kinds of the 3 kills
  kills, mid_write, corrupted, done_rows = [], 0, 0, []
  for _ in range(len(plan) + 1):
    kind = plan[len(kills)] if len(kills) < len(plan) else None
    stale = {p.name for p in out.glob(".results.csv.*.tmp")}
    proc = sweep(out)
    started = threading.Event()

    def watch(proc=proc, started=started):  # "sweep: N groups ..." is printed before the first group
      for line in proc.stdout:
        if line.startswith("sweep: "):
          started.set()
    reader = threading.Thread(target=watch, daemon=True)
    reader.start()
    killed = False
    if kind is not None:
      while not started.is_set() and proc.poll() is None:
        time.sleep(0.01)
      if kind == "random":
        deadline = time.monotonic() + rng.uniform(0.0, 2.0)  # the groups take ~0.3 s each
        while time.monotonic() < deadline and proc.poll() is None:
          time.sleep(0.005)
      else:  # poll the folder; kill the moment atomic_write's temporary results.csv appears
        while proc.poll() is None and not {p.name for p in out.glob(".results.csv.*.tmp")} - stale:
          pass
      if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
        killed = True
    proc.wait(timeout=300)
    reader.join(timeout=10)
    err = proc.stderr.read()
    if not killed:
      assert proc.returncode == 0, err[-2000:]
      break
    kills.append(kind)
    mid_write += bool({p.name for p in out.glob(".results.csv.*.tmp")} - stale)  # left by this kill
    try:  # every file the kill left is complete
      _strict((out / "sweep_config.json").read_text())
      if (out / "results.csv").exists():
        table = _csv_table(out / "results.csv")
        assert table[0] == want[0] and set(map(tuple, _untimed(table))) <= set(map(tuple, _untimed(want)))
        done_rows.append(len(table) - 1)
      else:
        done_rows.append(0)
    except (AssertionError, ValueError) as e:
      corrupted += 1
      print(f"kill {len(kills)} ({kind}) left a broken file: {e}")
  got = _csv_table(out / "results.csv")
  _strict((out / "sweep_stats.json").read_text())
  assert (out / "summary.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  differ = _untimed(got) != _untimed(want)
  print(f"\nsweep kill-and-rerun: {len(kills)} kills ({', '.join(kills)}; {mid_write} inside a results.csv "
        f"write), rows present after each kill: {done_rows}; files corrupted: {corrupted}, "
        f"final results.csv differing: {int(differ)}; stale temporary files: "
        f"{[p.name for p in out.glob('.*.tmp')]}")
  assert len(kills) == len(plan) and corrupted == 0 and not differ


@pytest.mark.slow
def test_killing_one_process_of_a_distributed_run_stops_the_other_with_a_message(tmp_path):
  """2 CPU processes (jax.distributed on localhost, gloo); SIGKILL process 1 once both are in the
  rounds: process 0, blocked in a collective, exits non-zero within 120 s with the runtime's
  message on stderr (fedsim.core.distributed.HEARTBEAT_TIMEOUT_S = 30 s, jax's default 100 s),
  and the metrics it wrote are complete strict-JSON lines."""
  import socket
  import threading
  import time

  from fedsim.core.distributed import HEARTBEAT_TIMEOUT_S
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
  env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=2")
  env.pop("FEDSIM_HEARTBEAT_TIMEOUT_S", None)
  out = tmp_path / "run"
  procs = [subprocess.Popen(
      [sys.executable, "-u", "-m", "experiments.run", "--task=ridge", "--algorithm=gd", "--num_clients=4",
       "--clients_per_round=4", "--rounds=1000000", "--eval_every=50", f"--output_dir={out}",
       f"--coordinator_address=127.0.0.1:{port}", "--num_processes=2", f"--process_id={i}"],
      cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
  rounds, errs = [], ["", ""]

  def read_out():
    for line in procs[0].stdout:
      if line.startswith("[gd] round "):
        rounds.append(line)

  def read_err(i):
    errs[i] = procs[i].stderr.read()
  threads = [threading.Thread(target=read_out, daemon=True)] + [
      threading.Thread(target=read_err, args=(i,), daemon=True) for i in range(2)]
  for t in threads:
    t.start()
  try:
    deadline = time.monotonic() + 240
    while len(rounds) < 3 and time.monotonic() < deadline:  # round 0, 50, 100: both compute
      assert procs[0].poll() is None and procs[1].poll() is None, errs
      time.sleep(0.05)
    assert len(rounds) >= 3, errs
    procs[1].send_signal(signal.SIGKILL)
    killed = time.monotonic()
    procs[1].wait()
    try:
      procs[0].wait(timeout=120)
    except subprocess.TimeoutExpired:
      pytest.fail("process 0 still runs 120 s after process 1 was killed")
    took = time.monotonic() - killed
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
        p.wait()
  for t in threads:
    t.join(timeout=10)
  print(f"\ndistributed: 1 kill (process 1, after {len(rounds)} evaluations); process 0 exited with "
        f"status {procs[0].returncode} after {took:.1f}s (heartbeat timeout {HEARTBEAT_TIMEOUT_S}s)")
  assert procs[0].returncode != 0
  assert "another task died" in errs[0] and "stopped sending heartbeats" in errs[0], errs[0][-3000:]
  text = (out / "gd" / "metrics.jsonl").read_text()
  recs = [_strict(line) for line in text.splitlines()]
  assert text.endswith("\n") and [r["round"] for r in recs][:3] == [0, 50, 100]
