"""The persistent compilation cache (``ExperimentConfig.compilation_cache``): a second
process loads the programs the first one compiled, with identical records; ``""`` is off."""

from __future__ import annotations

import json
import os
import subprocess
import sys

# One small run in a fresh process: prints the persistent-cache hits and the records.
SCRIPT = r"""
import json, sys
import jax
hits = []
jax.monitoring.register_event_listener(
    lambda event, **kw: hits.append(event) if event == "/jax/compilation_cache/cache_hits" else None)
import fedsim
config = fedsim.ExperimentConfig(task="softmax", dataset="digits", num_clients=6, clients_per_round=3,
                                 algorithms=("fedavg", "fedzo"), rounds=4, eval_every=2, seed=0,
                                 progress=False, compilation_cache=sys.argv[1])
histories = fedsim.run(config)
records = {k: [{m: v for m, v in r.items() if m != "wall_time_s"} for r in h] for k, h in histories.items()}
print(json.dumps({"hits": len(hits), "dir": jax.config.jax_compilation_cache_dir, "records": records}))
"""


def _run(setting: str) -> dict:
  proc = subprocess.run([sys.executable, "-c", SCRIPT, setting], capture_output=True, text=True,
                        env={**os.environ, "JAX_PLATFORMS": "cpu"})
  assert proc.returncode == 0, proc.stderr[-2000:]
  return json.loads(proc.stdout.strip().splitlines()[-1])


def test_second_process_loads_the_first_ones_programs_with_identical_records(tmp_path):
  cache = str(tmp_path / "cache")
  first = _run(cache)
  assert first["dir"] == cache
  stored = [name for name in os.listdir(cache) if name.endswith("-cache")]
  assert stored  # programs were stored (a program the run compiles twice may already hit)
  second = _run(cache)
  assert second["hits"] >= first["hits"] + len(stored)  # every stored program loaded, not compiled
  assert second["records"] == first["records"]


def test_empty_setting_leaves_the_cache_off(tmp_path):
  off = _run("")
  assert off["dir"] is None and off["hits"] == 0


def test_an_unwritable_auto_folder_turns_the_cache_off_and_an_explicit_one_raises(tmp_path, monkeypatch):
  import pytest

  from fedsim import runner
  from fedsim.core.errors import ConfigError
  blocker = tmp_path / "file"
  blocker.write_text("")  # a folder cannot be made under a file
  monkeypatch.setattr(runner, "DEFAULT_CACHE_DIR", str(blocker / "jax"))
  with pytest.warns(UserWarning, match="compilation cache off"):
    assert runner.enable_compilation_cache("auto") is None
  with pytest.raises(ConfigError, match="compilation_cache"):
    runner.enable_compilation_cache(str(blocker / "mine"))
