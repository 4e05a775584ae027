"""The experiments.benchmark binary: quick measurement, outputs, bad flags."""

import json
import math
import os
import subprocess
import sys

import pytest

from experiments import benchmark
from fedsim.core.errors import ConfigError

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _positive(v):
  return isinstance(v, (int, float)) and math.isfinite(v) and v > 0


def test_quick_measurement_fields_and_outputs(tmp_path):
  settings = benchmark.Settings.make(quick=True)
  assert settings.repeats == 1 and settings.rounds_per_chunk == 2
  lines = []
  records = benchmark.run_benchmark(["fedavg", "fedzo"], [4], settings, log=lines.append)
  assert [r["algorithm"] for r in records] == ["fedavg", "fedzo"]
  assert len(lines) == 3 + 4  # vmapped, sequential, memory (+ directions for fedzo)
  for r in records:
    assert r["num_clients"] == 4 and r["dim"] == 650 and r["local_steps"] == 5
    assert r["state_finite"]
    for k in ("seconds_per_round", "vmapped_steps_per_s", "sequential_steps_per_s", "speedup",
              "sequential_inloop_steps_per_s", "speedup_vs_inloop",
              "sequential_seconds_per_client", "compile_s"):
      assert _positive(r[k]), (k, r[k])
    assert r["vmapped_steps_per_s"] == pytest.approx(4 * 5 / r["seconds_per_round"])
    assert r["sequential_clients_timed"] == 4 and not r["sequential_subset"]
    # One repeat: the paired median is the ratio of the (only) rates.
    assert r["speedup"] == pytest.approx(r["vmapped_steps_per_s"] / r["sequential_steps_per_s"])
    assert r["speedup"] == pytest.approx(r["speedup_of_best"])
    mem = r["memory"]
    for k in ("temp_bytes", "argument_bytes", "output_bytes", "total_bytes", "peak_rss_bytes"):
      assert isinstance(mem[k], int) and mem[k] >= 0, (k, mem[k])
    assert mem["peak_rss_bytes"] > 0 and mem["argument_bytes"] > 0
  assert records[0]["batch_size"] == 20 and records[0]["hparams"]["lr"] == 0.1
  assert records[0]["directions"] is None
  zo = records[1]["directions"]
  assert zo["per_round"] == 4 * 5 * 20 * 650 and zo["fd_directions"] == 20 and zo["law"] == "sphere"
  for k in ("engine_per_s", "raw_normal_per_s", "law_per_s", "ratio", "ratio_of_best", "law_ratio"):
    assert _positive(zo[k]), (k, zo[k])
  assert zo["raw_normal_count"] >= zo["per_round"]

  env = benchmark.environment()
  benchmark.write_outputs(str(tmp_path), records, env, settings, "python -m experiments.benchmark --quick")
  doc = json.loads((tmp_path / "benchmark.json").read_text())
  for k in ("device", "backend", "jax_version", "cpu_count", "prng_impl", "settings", "records"):
    assert k in doc, k
  assert len(doc["records"]) == 2
  table = (tmp_path / "benchmark.md").read_text()
  assert table.count("| fedavg | 4 |") == 1 and table.count("| fedzo | 4 |") == 1


def test_benchmark_task_is_a_draw_with_replacement():
  task = benchmark.make_benchmark_task(3000, samples_per_client=20, seed=0)
  assert task.num_clients == 3000 and task.dim == 650
  assert task.client_data["x"].shape == (3000, 20, 8, 8)
  assert bool(task.client_data["mask"].all())
  again = benchmark.make_benchmark_task(3000, samples_per_client=20, seed=0)
  assert bool((again.client_data["y"] == task.client_data["y"]).all())


@pytest.mark.parametrize("kwargs, flag", [
    ({"algorithm_names": ["fedavg", "sgd"], "num_clients": ["10"]}, "--algorithm"),
    ({"algorithm_names": [], "num_clients": ["10"]}, "--algorithm"),
    ({"algorithm_names": ["fedzo"], "num_clients": ["0"]}, "--num_clients"),
    ({"algorithm_names": ["fedzo"], "num_clients": ["10", "x"]}, "--num_clients"),
    ({"algorithm_names": ["fedzo"], "num_clients": []}, "--num_clients"),
    ({"algorithm_names": ["fedzo"], "num_clients": ["10"], "repeats": 0}, "--repeats"),
    ({"algorithm_names": ["fedzo"], "num_clients": ["10"], "prng_impl": "mt"}, "--prng_impl"),
])
def test_validate_rejects(kwargs, flag):
  with pytest.raises(ConfigError, match=flag):
    benchmark.validate(**kwargs)


def test_validate_accepts():
  assert benchmark.validate(["fedavg", "fedzo"], ["100", "1000"]) == [100, 1000]


@pytest.mark.parametrize("args, flag", [
    (["--algorithm=fedavg,sgd"], "--algorithm"),
    (["--num_clients=0"], "--num_clients"),
])
def test_bad_flags_exit_2_with_one_line(args, flag, tmp_path):
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  proc = subprocess.run([sys.executable, "-m", "experiments.benchmark", *args, f"--output_dir={tmp_path}"],
                        cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
  assert proc.returncode == 2, proc.stderr[-2000:]
  lines = [l for l in proc.stderr.strip().splitlines() if l.strip()]
  assert len(lines) == 1 and flag in lines[0], proc.stderr
  assert not os.path.exists(tmp_path / "benchmark.json")
