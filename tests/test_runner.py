"""fedsim.runner pieces that the end-to-end tests do not pin (issue 46 mutation sample)."""

import jax
import pytest

from fedsim import runner


def test_the_progress_bar_of_a_run_without_rounds_is_full_and_20_wide(tmp_path, capsys):
  """On a terminal, a run of 0 rounds (total 0) draws a full bar of exactly 20 '#', no more."""
  w = runner.ProgressWriter("fedavg", None, 0)
  w.tty = True
  w({"round": 0, "objective": 1.0, "wall_time_s": 0.0, "queries": 0, "bytes_up": 0, "bytes_down": 0,
     "participants": 0, "empty_rounds": 0})
  err = capsys.readouterr().err
  assert "|" + "#" * 20 + "|" in err and "#" * 21 not in err


def test_an_existing_cache_folder_is_used_again(tmp_path, monkeypatch):
  """enable_compilation_cache on a folder that already exists (every run after the first) uses it, with no
  error; the JAX settings are recorded, not applied (monkeypatched), so this process's cache is untouched."""
  seen = {}
  monkeypatch.setattr(jax.config, "update", lambda k, v: seen.__setitem__(k, v))
  folder = tmp_path / "cache"
  folder.mkdir()
  assert runner.enable_compilation_cache(str(folder)) == str(folder)
  assert runner.enable_compilation_cache(str(folder)) == str(folder)
  assert seen["jax_compilation_cache_dir"] == str(folder)
  assert runner.enable_compilation_cache("") is None


def test_a_cache_folder_that_cannot_be_made_is_a_config_error(tmp_path):
  blocker = tmp_path / "file"
  blocker.write_text("x")
  from fedsim.core.errors import ConfigError
  with pytest.raises(ConfigError, match="compilation_cache"):
    runner.enable_compilation_cache(str(blocker / "sub"))


def _rec(r, t, **kw):
  return {"round": r, "objective": 1.0, "queries": 10 * r, "wall_time_s": t, **kw}


def test_the_eta_after_the_first_chunk_counts_its_run_time_not_its_compile_time(capsys):
  """With the engine's compile report (``on_compile``: the first chunk starts at 50 s, after compiling),
  the first chunk's record already has an ETA: 90 rounds left x (60 - 50) s / 10 rounds = 90 s; from the
  second chunk on, the time since the first chunk's end (1 s per 10 rounds: 80 rounds left -> 8 s).
  Without the report the first chunk's record has no ETA (test_reliability's test_eta_excludes_compile_time)."""
  from fedsim.core.memory import MemoryEstimate
  w = runner.ProgressWriter("a", None, 100)
  w(_rec(0, 1.0))
  est = MemoryEstimate(argument=2_000, output=1_000, alias=1_000, temp=500, code=0, resident=1_500,
                       devices=1, available=10**9, source="host MemAvailable")
  w.compiled({"memory": est, "compile_s": 48.0, "round": 0, "wall_time_s": 50.0})
  w(_rec(10, 60.0))
  w(_rec(20, 61.0))
  out = capsys.readouterr().out.splitlines()
  assert out[0].endswith("ETA -")
  assert out[1].startswith("[a] memory: round chunk 2.5 kB") and "needs 1 kB beyond" in out[1]
  assert "1 GB available (host MemAvailable); compiled in 48.0s" in out[1], out[1]
  assert out[2].endswith("ETA 1m30s"), out[2]
  assert out[3].endswith("ETA 8.0s"), out[3]


def test_the_progress_is_silent_without_echo(capsys):
  """ETA and memory lines are shown only with progress on (``echo``)."""
  from fedsim.core.memory import MemoryEstimate
  w = runner.ProgressWriter("a", None, 100, echo=False)
  est = MemoryEstimate(1, 1, 0, 0, 0, 0, 1, 10, "host MemAvailable")
  w.compiled({"memory": est, "compile_s": 1.0, "round": 0, "wall_time_s": 2.0})
  w(_rec(10, 3.0))
  assert capsys.readouterr().out == ""


def test_duration_reads_as_seconds_minutes_or_hours():
  assert [runner.duration(s) for s in (0.04, 59.94, 60, 3599.4, 3600, 90061)] == [
      "0.0s", "59.9s", "1m00s", "59m59s", "1h00m", "25h01m"]


def test_the_results_table_has_one_row_per_algorithm_with_final_values_and_the_total_time():
  hist = {
      "fedavg": [_rec(0, 1.0, test_accuracy=0.1, bytes_up=0),
                 _rec(300, 41.25, objective=0.314159, test_accuracy=0.91873, queries=180000, bytes_up=3_200_000)],
      "fedzo:lr=0.1": [_rec(0, 1.0, test_accuracy=0.1, bytes_up=0),
                       _rec(20, 7384.0, objective=float("nan"), test_accuracy=0.5, queries=1_234_567,
                            bytes_up=2_500_000_000)],
      "gd": [],
  }
  lines = runner.results_table(hist, total_s=92.0).splitlines()
  assert lines[0].split() == ["algorithm", "rounds", "objective", "test_accuracy", "queries", "bytes_up",
                              "wall_time"]
  assert lines[1].split() == ["fedavg", "300", "0.31416", "0.9187", "180,000", "3.2", "MB", "41.2s"]
  assert lines[2].split() == ["fedzo:lr=0.1", "20", "nan", "0.5", "1,234,567", "2.5", "GB", "2h03m"]
  assert lines[3].split() == ["gd", "-", "-", "-", "-", "-", "-"]
  assert lines[4] == "total time 1m32s" and len(lines) == 5
  # Right-aligned numbers: the objective column ends at one offset in every row.
  end = lines[0].index("objective") + len("objective")
  assert lines[1][:end].endswith("0.31416") and lines[2][:end].endswith("nan")


def test_the_results_table_names_the_tasks_metric_and_omits_the_total_when_not_given():
  hist = {"gd": [_rec(0, 0.5, optimality_gap=1.0, bytes_up=0), _rec(5, 0.75, optimality_gap=1e-3, bytes_up=80)]}
  lines = runner.results_table(hist).splitlines()
  assert "optimality_gap" in lines[0] and "test_accuracy" not in lines[0]
  assert lines[1].split() == ["gd", "5", "1", "0.001", "50", "80", "B", "0.8s"]
  assert len(lines) == 2
