"""The benchmark's sweep_table suite (issue 37, item 3): K configurations in one vmapped program
vs the same K one after another."""

import json
import math
import os
import subprocess
import sys

import pytest

from experiments import benchmark
from experiments.bench import sweep_table, util
from fedsim.core.errors import ConfigError

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _positive(v):
  return isinstance(v, (int, float)) and math.isfinite(v) and v > 0


def test_sweep_table_runs_only_when_named():
  assert "sweep_table" in util.SUITES and "sweep_table" not in util.DEFAULT_SUITES
  assert "gpu_table" not in util.DEFAULT_SUITES and "vmap" in util.DEFAULT_SUITES
  default, quick = util.Settings.make(), util.Settings.make(quick=True)
  assert default.sweep_table_algorithms == ("fedavg", "fedzo", "hiso")
  assert default.sweep_table_clients == (1000, 10000) and default.sweep_table_configs == (1, 4, 16, 64)
  assert quick.sweep_table_clients == (8,) and quick.sweep_table_configs == (1, 4)


def test_grid_is_lr_values_times_seeds():
  assert [sweep_table.grid(k) for k in (1, 2, 3, 4, 16, 64)] == [(1, 1), (2, 1), (1, 3), (2, 2), (4, 4), (4, 16)]
  assert sweep_table.grid(64, max_lrs=8) == (8, 8)
  assert sweep_table.lr_values(0.1, 3) == pytest.approx([0.1, 0.1 / math.sqrt(2), 0.05])


def test_client_blocks_hold_at_most_the_backend_cap(monkeypatch):
  # K x block client-members per block: at most 256 on CPU (the backend's block), max_block elsewhere.
  assert sweep_table.client_block("fedzo", 1000, 1, 100000) == 256
  assert sweep_table.client_block("fedzo", 1000, 16, 100000) == 16
  assert sweep_table.client_block("fedavg", 8, 4, 100000) is None            # 32 client-members: one vmap
  assert sweep_table.client_block("hiso", 1000, 16, 100000) is None          # no client blocks
  from fedsim.core import client_map
  monkeypatch.setattr(client_map, "default_client_block", lambda: 0)  # an accelerator
  assert sweep_table.client_block("fedzo", 1000, 64, 100000) is None          # 64,000 client-members
  assert sweep_table.client_block("fedzo", 10000, 64, 100000) == 1562
  assert sweep_table.client_block("fedavg", 10000, 16, 100000) == 6250
  assert sweep_table.client_block("hiso", 10000, 64, 100000) is None


def test_validate_sweep_table_flags():
  ns, extra = benchmark.validate(["fedavg"], ["10"], suite=["sweep_table"], sweep_table_clients=["1000", "10000"],
                                 sweep_table_configs=["1", "4"], algorithm_given=True)
  assert extra == {"sweep_table_clients": (1000, 10000), "sweep_table_configs": (1, 4),
                   "sweep_table_algorithms": ("fedavg",)}
  # --algorithm names the sweep_table algorithms only when that suite runs and nothing more specific is given.
  assert benchmark.validate(["fzoos"], ["10"], suite=["vmap"], algorithm_given=True)[1] == {}
  _, extra = benchmark.validate(["fedzo"], ["10"], suite=["sweep_table"], algorithm_given=True,
                                sweep_table_algorithms=["hiso", "fedavg"])
  assert extra == {"sweep_table_algorithms": ("hiso", "fedavg")}
  for kwargs, flag in (({"sweep_table_configs": ["0"]}, "--sweep_table_configs"),
                       ({"sweep_table_clients": ["1e3"]}, "--sweep_table_clients"),
                       ({"sweep_table_algorithms": ["fzoos"]}, "--sweep_table_algorithms"),
                       ({"sweep_table_lrs": 0}, "--sweep_table_lrs"),
                       ({"sweep_table_max_block": 0}, "--sweep_table_max_block"),
                       ({"algorithm_given": True}, "--algorithm")):
    with pytest.raises(ConfigError, match=flag):
      benchmark.validate(["ffgb"], ["10"], suite=["sweep_table"], **kwargs)


def _row(name, n, k, rate):
  v, s = sweep_table.grid(k)
  return {"algorithm": name, "num_clients": n, "configs": k, "lr_values": v, "seeds": s,
          "batched_config_rounds_per_s": rate, "sequential_config_rounds_per_s": 10.0, "ratio": rate / 10.0,
          "ratio_cpu": 1.0, "batched_client_steps_per_s": rate * n * 5, "batched_compile_s": 1.0,
          "sequential_compile_s": 2.0, "sequential_programs": v, "batched_compiled_bytes": 2 ** 20,
          "sequential_compiled_bytes": 2 ** 19, "device_peak_bytes": None, "max_rel_diff": 0.0}


def test_vs_k1_target_and_markdown():
  rows = sweep_table.add_vs_k1([_row("fedavg", 1000, 1, 10.0), _row("fedavg", 1000, 64, 250.0),
                                _row("hiso", 1000, 64, 150.0),
                                {"algorithm": "fedzo", "num_clients": 10000, "configs": 64,
                                 "error": "XlaRuntimeError: out of memory"}])
  assert rows[0]["vs_k1"] == 1.0 and rows[1]["vs_k1"] == 25.0 and rows[1]["meets_gpu_target"]
  assert rows[2]["vs_k1"] is None and "meets_gpu_target" not in rows[2]  # no K = 1 row of hiso
  md = sweep_table.markdown({"records": rows})
  assert "| fedavg | 1,000 | 64 (4 x 16) | 250 | 10 | 25.00x (1.00x) | 25.00x |" in md
  assert "failed: XlaRuntimeError" in md and md.count("\n| hiso |") == 1


def test_bad_sweep_table_flag_exits_2(tmp_path):
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  proc = subprocess.run([sys.executable, "-m", "experiments.benchmark", "--suite=sweep_table", "--algorithm=ffgb",
                         f"--output_dir={tmp_path}"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
  assert proc.returncode == 2, proc.stderr[-2000:]
  lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
  assert len(lines) == 1 and "--algorithm" in lines[0] and "sweep_table" in lines[0], proc.stderr
  assert not os.path.exists(tmp_path / "benchmark.json")


@pytest.mark.slow  # ~30 s of CPU: compiles 2 batched and 2 sequential programs per algorithm
def test_quick_sweep_table_command(tmp_path):
  """The command itself at --quick size (N = 8, K = 1, 4): every row measured, both sides compute the
  same K configurations, the records and table are written."""
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  proc = subprocess.run([sys.executable, "-m", "experiments.benchmark", "--quick", "--suite=sweep_table",
                         f"--output_dir={tmp_path}"], cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
  assert proc.returncode == 0, proc.stderr[-3000:]
  doc = json.loads((tmp_path / "benchmark.json").read_text())
  assert set(doc["suites"]) == {"sweep_table"} and doc["settings"]["sweep_table_configs"] == [1, 4]
  rows = doc["suites"]["sweep_table"]["records"]
  assert [(r["algorithm"], r["num_clients"], r["configs"]) for r in rows] == [
      (a, 8, k) for a in ("fedavg", "fedzo", "hiso") for k in (1, 4)]
  for r in rows:
    assert "error" not in r and r["state_finite"], r
    assert (r["lr_values"], r["seeds"]) == ((1, 1) if r["configs"] == 1 else (2, 2))
    assert r["sequential_programs"] == r["lr_values"] and r["rounds_per_chunk"] == 2
    for k in ("batched_config_rounds_per_s", "sequential_config_rounds_per_s", "ratio", "batched_compile_s",
              "sequential_compile_s", "batched_compiled_bytes", "sequential_compiled_bytes", "vs_k1"):
      assert _positive(r[k]), (r["algorithm"], r["configs"], k, r[k])
    assert r["batched_config_rounds_per_s"] == pytest.approx(r["configs"] * 2 / r["batched_seconds_per_chunk"])
    # One repeat: the paired median is the ratio of the rates.
    assert r["ratio"] == pytest.approx(r["batched_config_rounds_per_s"] / r["sequential_config_rounds_per_s"])
    # The same configurations on both sides: FedAvg to float32 rounding; FedZO and HiSo's finite
    # differences amplify 1-ulp differences of F by 1/mu = 1000 (max_rel_diff 1.8e-5 at mu = 0.1).
    assert r["max_rel_diff"] <= (1e-5 if r["algorithm"] == "fedavg" else 3e-2), r
  assert [r["vs_k1"] for r in rows if r["configs"] == 1] == [1.0, 1.0, 1.0]
  # Four members hold four copies of the data: the batched program is larger than one sequential chunk.
  assert all(r["batched_compiled_bytes"] > r["sequential_compiled_bytes"] for r in rows if r["configs"] == 4)
  md = (tmp_path / "benchmark.md").read_text()
  assert "## sweep_table:" in md and md.count("| fedzo | 8 |") == 2
