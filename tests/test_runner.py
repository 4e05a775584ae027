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
