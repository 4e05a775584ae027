"""The experiments.benchmark binary: quick measurement, outputs, bad flags."""

import dataclasses
import json
import math
import os
import subprocess
import sys

import pytest

from experiments import benchmark
from experiments.bench import util, vmap
from fedsim.core.errors import ConfigError

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _positive(v):
  return isinstance(v, (int, float)) and math.isfinite(v) and v > 0


@pytest.mark.slow  # long; .ci/run runs it (pytest -m slow)
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
  task = util.make_benchmark_task(3000, samples_per_client=20, seed=0)
  assert task.num_clients == 3000 and task.dim == 650
  assert task.client_data["x"].shape == (3000, 20, 8, 8)
  assert bool(task.client_data["mask"].all())
  again = util.make_benchmark_task(3000, samples_per_client=20, seed=0)
  assert bool((again.client_data["y"] == task.client_data["y"]).all())


@pytest.mark.parametrize("kwargs, flag", [
    ({"algorithm": ["fedavg", "sgd"], "num_clients": ["10"]}, "--algorithm"),
    ({"algorithm": [], "num_clients": ["10"]}, "--algorithm"),
    ({"algorithm": ["fedzo"], "num_clients": ["0"]}, "--num_clients"),
    ({"algorithm": ["fedzo"], "num_clients": ["10", "x"]}, "--num_clients"),
    ({"algorithm": ["fedzo"], "num_clients": []}, "--num_clients"),
    ({"algorithm": ["fedzo"], "num_clients": ["10"], "repeats": 0}, "--repeats"),
    ({"algorithm": ["fedzo"], "num_clients": ["10"], "prng_impl": "mt"}, "--prng_impl"),
    ({"algorithm": ["fedzo"], "num_clients": ["10"], "suite": ["vmap", "speed"]}, "--suite"),
    ({"algorithm": ["fedzo"], "num_clients": ["10"], "suite": []}, "--suite"),
    ({"algorithm": ["fedzo"], "num_clients": ["10"], "fzoos_configs": ["5"]}, "--fzoos_configs"),
    ({"algorithm": ["fedzo"], "num_clients": ["10"], "fzoos_configs": ["5:0"]}, "--fzoos_configs"),
    ({"algorithm": ["fedzo"], "num_clients": ["10"], "scaling_clients": ["1e3"]}, "--scaling_clients"),
    ({"algorithm": ["fedzo"], "num_clients": ["10"], "compile_rounds": ["0"]}, "--compile_rounds"),
    ({"algorithm": ["fedzo"], "num_clients": ["10"], "ffgb_clients": 1}, "--ffgb_clients"),
    ({"algorithm": ["fedzo"], "num_clients": ["10"], "matmul_size": 0}, "--matmul_size"),
    ({"algorithm": ["fedzo"], "num_clients": ["10"], "blas_threads": -1}, "--blas_threads"),
    ({"algorithm": ["fedzo"], "num_clients": ["10"], "client_block": -1}, "--client_block"),
    ({"algorithm": ["fedzo"], "num_clients": ["10"], "fzoos_vmap": "50:1000:3"}, "--fzoos_vmap"),
    ({"algorithm": ["fedzo"], "num_clients": ["10"], "fd_memory_blocks": ["0", "-1"]}, "--fd_memory_blocks"),
    ({"algorithm": ["fedzo"], "num_clients": ["10"], "fd_memory_clients": ["0"]}, "--fd_memory_clients"),
    ({"algorithm": ["fedzo"], "num_clients": ["10"], "fd_memory_client_block": -1}, "--fd_memory_client_block"),
    ({"algorithm": ["fedzo"], "num_clients": ["10"], "compile_parts": ["warmup", "boot"]}, "--compile_parts"),
    ({"algorithm": ["fedzo"], "num_clients": ["10"], "compile_warmup_repeats": -1}, "--compile_warmup_repeats"),
    ({"algorithm": ["fedzo"], "num_clients": ["10"], "compile_warmup_rounds": 0}, "--compile_warmup_rounds"),
])
def test_validate_rejects(kwargs, flag):
  with pytest.raises(ConfigError, match=flag):
    benchmark.validate(**kwargs)


def test_validate_accepts():
  assert benchmark.validate(["fedavg", "fedzo"], ["100", "1000"]) == ([100, 1000], {})
  ns, extra = benchmark.validate(["hiso", "fzoos", "ffgb"], ["10"], suite=["vmap", "fzoos", "compile"],
                                 fzoos_configs=["5:10000", "500:1000"], fzoos_vmap="50:1000",
                                 compile_rounds=["1", "10"], scaling_clients=["100", "100000"])
  assert ns == [10]
  assert extra == {"fzoos_configs": ((5, 10000), (500, 1000)), "fzoos_vmap": (50, 1000),
                   "compile_rounds": (1, 10), "scaling_clients": (100, 100000)}


@pytest.mark.parametrize("args, flag", [
    (["--algorithm=fedavg,sgd"], "--algorithm"),
    (["--num_clients=0"], "--num_clients"),
    (["--suite=vmap,speed"], "--suite"),
    (["--fzoos_configs=5x10000"], "--fzoos_configs"),
])
def test_bad_flags_exit_2_with_one_line(args, flag, tmp_path):
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  proc = subprocess.run([sys.executable, "-m", "experiments.benchmark", *args, f"--output_dir={tmp_path}"],
                        cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
  assert proc.returncode == 2, proc.stderr[-2000:]
  lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
  assert len(lines) == 1 and flag in lines[0], proc.stderr
  assert not os.path.exists(tmp_path / "benchmark.json")


@pytest.mark.slow
def test_binary_passes_the_flags_to_the_settings(tmp_path):
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  proc = subprocess.run([sys.executable, "-m", "experiments.benchmark", "--quick", "--suite=compile",
                         "--compile_rounds=1,3", "--compile_clients=4,6", "--seed=3", f"--output_dir={tmp_path}"],
                        cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-2000:]
  doc = json.loads((tmp_path / "benchmark.json").read_text())
  s = doc["settings"]
  assert (s["compile_rounds"], s["compile_clients"], s["seed"], s["repeats"]) == ([1, 3], [4, 6], 3, 1)
  assert set(doc["suites"]) == {"compile"} and "## compile: compile time" in (tmp_path / "benchmark.md").read_text()
  co = doc["suites"]["compile"]
  fedavg = [r for r in co["records"] if r["algorithm"] == "fedavg"]
  assert [(r["sweep"], r["num_clients"], r["rounds_per_chunk"]) for r in fedavg] == [
      ("rounds", 6, 1), ("rounds", 6, 3), ("clients", 4, 3)]
  # lax.scan: the program text does not grow with the rounds.
  assert fedavg[0]["hlo_chars"] == fedavg[1]["hlo_chars"]
  assert set(co["rounds_ratio"]) == set(co["rounds_ratio_cpu"]) == {"fedavg", "fedzo"}
  assert all(r["compile_cpu_s"] > 0 for r in co["records"])
  cold, warm = doc["suites"]["compile"]["main_job"]  # the main job, empty then filled cache
  assert (cold["cache"], warm["cache"], cold["rounds"]) == ("cold", "warm", 2)
  assert warm["cache_hits"] > cold["cache_hits"]  # the second process loaded what the first stored


@pytest.mark.slow
def test_warmup_runs_the_main_job_beside_a_baseline_worktree():
  """The compile suite's warm-up part: each tree's FedAvg main job, cold then warm cache, the
  baseline in a git worktree that is removed afterwards; both trees print the same final loss.
  No timing is asserted (the speed target lives in the suite's output)."""
  from experiments.bench import compile_time
  w = compile_time.warmup(rounds=2, repeats=1, baseline="HEAD", log=lambda _: None)
  assert [(r["tree"], r["cache"]) for r in w["summary"]] == [
      ("this tree", "cold"), ("this tree", "warm"), ("baseline", "cold"), ("baseline", "warm")]
  assert len(w["runs"]) == 4 and set(w["ratios"]) == {"cold", "warm"}
  assert all(0 < r["first_round_s"] <= r["final_s"] <= r["exit_s"] for r in w["runs"])
  assert len({r["final_objective"] for r in w["runs"]}) == 1
  listed = subprocess.run(["git", "worktree", "list"], cwd=REPO, capture_output=True, text=True).stdout
  assert "fedsim_warmup_" not in listed  # the baseline's worktree is gone
  table = compile_time.warmup_markdown(w)
  assert table.count("| this tree |") == 2 and "cold cache, this tree / baseline HEAD" in table


# ----------------------------------------------------------------------------- the other suites


def test_loglog_slope_recovers_the_exponent():
  from experiments.bench.scaling import loglog_slope
  ns = [1e3, 1e4, 1e5]
  assert loglog_slope(ns, [3e-4 * n ** 1.5 for n in ns]) == pytest.approx(1.5, rel=1e-12)
  assert loglog_slope(ns, [7.0] * 3) == pytest.approx(0.0, abs=1e-12)
  assert loglog_slope([100], [1.0]) is None


def test_hiso_loop_is_the_same_round_as_the_engine():
  """The one-client-at-a-time baseline computes the engine's round (Alg. 2): same x and H."""
  import jax.numpy as jnp

  from fedsim import algorithms
  task = util.make_benchmark_task(6, 20, 0)
  for name in ("decomfl", "hiso"):
    # mu = 0.1 keeps the 1/mu amplification of float32 rounding in the scalars small
    # (the summation order differs: pairwise over the vmapped clients vs sequential).
    alg = algorithms.build(name, task, clients_per_round=6, lr=0.05, smoothing=0.1)
    run, _ = util.compile_chunk(alg, task, 1)
    state = run.initial_state
    run()
    new = run.state()
    loop = vmap.hiso_loop(name, task, alg.hparams, state, run.rounds_key, 6)
    loop()
    x, h = loop.result
    dx_engine, dx_loop = new.x - state.x, x - state.x
    scale = float(jnp.max(jnp.abs(dx_engine)))
    assert scale > 1e-4  # the round moved x
    assert float(jnp.max(jnp.abs(dx_loop - dx_engine))) <= 1e-4 * scale, name
    dh_engine, dh_loop = new.h - state.h, h - state.h
    assert float(jnp.max(jnp.abs(dh_loop - dh_engine))) <= 1e-3 * float(jnp.max(jnp.abs(dh_engine))) + 1e-12


@pytest.mark.slow  # long; .ci/run runs it (pytest -m slow)
def test_ffgb_loop_trains_the_engine_learners():
  """The looped per-client function gives the learners the vmapped round trains (same keys, data)."""
  import jax
  import jax.numpy as jnp

  from fedsim.algorithms import ffgb as ffgbm
  from fedsim.core import rng
  settings = util.Settings.make(quick=True)
  task, alg, client, cfg = vmap.ffgb_parts(settings, 3)
  n = task.num_clients
  state = alg.init(*rng.init_keys(jax.random.key(0)))
  etas = ffgbm.step_sizes(cfg, "ffgb", 0)
  _, k_clients, _ = rng.round_subkeys(rng.round_key(jax.random.key(1), 0))
  c = task.client_data
  keys = rng.client_keys(k_clients, jnp.arange(n))
  th_v, _ = jax.vmap(client, in_axes=(0, 0, 0, 0, 0, 0, None))(keys, c["x"], c["y"], c["mask"],
                                                              task.data["sizes"], state.f_train, etas)
  fn = jax.jit(client)
  for i in range(n):
    th_i, _ = fn(keys[i], c["x"][i], c["y"][i], c["mask"][i], task.data["sizes"][i], state.f_train[i], etas)
    for a, b in zip(jax.tree_util.tree_leaves(th_i), jax.tree_util.tree_leaves(th_v)):
      assert jnp.allclose(a, b[i], rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_quick_looped_algorithms():
  settings = benchmark.Settings.make(quick=True)
  lines = []
  records = benchmark.run_benchmark(["decomfl", "hiso", "fzoos", "ffgb"], [4], settings, log=lines.append)
  assert [r["algorithm"] for r in records] == ["decomfl", "hiso", "fzoos", "ffgb"]
  assert [r["num_clients"] for r in records] == [4, 4, settings.fzoos_vmap[0], settings.ffgb_clients]
  for r in records:
    assert r["state_finite"], r["algorithm"]
    for k in ("seconds_per_round", "vmapped_steps_per_s", "sequential_steps_per_s", "speedup", "compile_s"):
      assert _positive(r[k]), (r["algorithm"], k, r[k])
    assert r["speedup"] == pytest.approx(r["vmapped_steps_per_s"] / r["sequential_steps_per_s"])
    assert r["vmapped_steps_per_s"] == pytest.approx(r["num_clients"] * r["local_steps"] / r["seconds_per_round"])
    # One repeat: CPU-time speedup = (N steps / vmapped CPU s) / (S steps / loop CPU s).
    assert r["speedup_cpu"] == pytest.approx(
        (r["num_clients"] / r["cpu_seconds_per_round"])
        / (r["sequential_clients_timed"] / (r["sequential_cpu_seconds_per_client"] * r["sequential_clients_timed"])))
  assert records[3]["rate_unit"] == "learners" and records[3]["local_steps"] == 2
  table = vmap.markdown({"records": records})
  assert table.count("| hiso | 4 |") == 1 and "learners/s" in table


@pytest.mark.slow
def test_quick_scaling_and_roofline(tmp_path):
  from experiments.bench import roofline, scaling
  settings = benchmark.Settings.make(quick=True)
  sc = scaling.run(dataclasses.replace(settings, scaling_algorithms=("fedavg", "fedzo")), log=lambda _: None)
  assert [(r["algorithm"], r["num_clients"]) for r in sc["records"]] == [
      ("fedavg", 16), ("fedavg", 64), ("fedzo", 16), ("fedzo", 64)]
  for name in ("fedavg", "fedzo"):
    mine = [r for r in sc["records"] if r["algorithm"] == name]
    assert sc["slopes"][name]["slope"] == pytest.approx(scaling.loglog_slope(
        [16, 64], [r["seconds_per_round"] for r in mine]))
    assert sc["slopes"][name]["slope_cpu"] == pytest.approx(scaling.loglog_slope(
        [16, 64], [r["cpu_seconds_per_round"] for r in mine]))
    assert sc["slopes"][name]["slope_range"] == [16, 64]
  assert all(r["fits_24gib"] and r["memory"]["temp_bytes"] > 0 for r in sc["records"])
  # More clients, more compiled argument bytes (the client data).
  assert sc["records"][1]["memory"]["argument_bytes"] > sc["records"][0]["memory"]["argument_bytes"]

  ro = roofline.run(settings, log=lambda _: None)
  assert ro["peak"]["flops"] == 2 * 256 ** 3 and _positive(ro["peak"]["flops_per_s"])
  byname = {r["algorithm"]: r for r in ro["records"]}
  # Analytic counts: digits softmax d_in = 64, C = 10.
  assert byname["fedavg"]["flops_per_round"] == 8 * 5 * 20 * 4 * 64 * 10
  assert byname["hiso"]["flops_per_round"] == 8 * 1 * 6 * 32 * 2 * 64 * 10
  assert byname["fedzo"]["normals_per_round"] == 8 * 5 * 20 * 650
  for r in ro["records"][:3]:
    assert r["engine_fraction"] == pytest.approx(r["engine_flops_per_s"] / ro["peak"]["flops_per_s"])
    assert r["bound"] in ("flops", "memory") and 0 < r["roof_fraction"]
  assert ro["bandwidth"]["bytes_moved"] == 2 * (1 << 22) and _positive(ro["bandwidth"]["bytes_per_s"])
  # FedAvg on the MLP and CNN: XLA-counted step FLOPs x N H; the CNN does more per step than the MLP.
  mlp, cnn = byname["fedavg (mlp)"], byname["fedavg (cnn)"]
  assert cnn["dim"] == 14538 and mlp["dim"] == 64 * 64 + 64 + 64 * 10 + 10
  assert mlp["bytes_per_round"] == 8 * 5 * (20 * 64 + 2 * mlp["dim"]) * 4
  assert cnn["flops_per_round"] > mlp["flops_per_round"] > byname["fedavg"]["flops_per_round"] > 0
  assert all(_positive(r["roof_fraction"]) for r in (mlp, cnn))
  # The CNN's nn.Conv form is judged on the same FLOP and byte counts as the patches GEMM.
  xla = byname["fedavg (cnn, impl=xla)"]
  assert (xla["flops_per_round"], xla["bytes_per_round"]) == (cnn["flops_per_round"], cnn["bytes_per_round"])
  lay = ro["softmax_layouts"]
  assert set(lay) == {*roofline.SOFTMAX_LAYOUTS, "max_abs_diff"} and lay["max_abs_diff"] < 1e-5
  assert all(_positive(lay[k]["flops_per_s"]) for k in roofline.SOFTMAX_LAYOUTS)

  env = benchmark.environment()
  benchmark.write_outputs(str(tmp_path), [], env, settings, "cmd",
                          {"scaling": sc, "roofline": ro})
  doc = json.loads((tmp_path / "benchmark.json").read_text())
  assert set(doc["suites"]) == {"scaling", "roofline"}
  md = (tmp_path / "benchmark.md").read_text()
  assert "## scaling" in md and "## roofline" in md and "log-log slope" in md


def test_fzoos_suite_exports_a_git_revision(tmp_path):
  """fzoos_speed.export_revision writes a revision's fedsim/ and experiments/ (the baseline of the
  whole-run comparison) and returns its commit; an unknown revision raises."""
  import subprocess

  from experiments.bench import fzoos_speed
  commit = fzoos_speed.export_revision("HEAD", str(tmp_path))
  assert len(commit) == 40 and (tmp_path / "fedsim" / "algorithms" / "fzoos.py").is_file()
  assert (tmp_path / "experiments" / "bench" / "util.py").is_file()
  with pytest.raises(subprocess.CalledProcessError):
    fzoos_speed.export_revision("no-such-revision-here", str(tmp_path))


@pytest.mark.slow
def test_quick_fzoos_and_ffgb_suites():
  from experiments.bench import ffgb_speed, fzoos_speed
  settings = benchmark.Settings.make(quick=True)
  fz = fzoos_speed.run(settings, log=lambda _: None, blas_default_comparison=False)
  (r,) = fz["records"]
  assert (r["num_clients"], r["num_rff"], r["dim"], r["local_steps"]) == (2, 64, 8, 2)
  assert r["speedup_vs_authors"] == pytest.approx(33.0 / r["seconds_per_round"])
  assert r["rounds_per_s"] == pytest.approx(1 / r["seconds_per_round"])
  prof = r["profile"]
  # Calls per client-round of each piece (T = 2): T + (T - 1) + 1 GP fits, one RFF fit.
  assert prof["gp_fit"]["count_per_round"] == 4 and prof["rff_fit_weights"]["count_per_round"] == 1
  assert prof["gp_window_top_k"]["count_per_round"] == 4 and prof["grad_cov_trace_local"]["count_per_round"] == 1
  assert r["profile_estimate_s"] == pytest.approx(2 * prof["estimate_per_client_s"])
  assert _positive(r["rff_cache_off"]["seconds_per_round"]) and _positive(r["rff_cache_off"]["speedup"])
  assert "rff_cache = 0" in fzoos_speed.markdown(fz)
  # A whole run of the history's 50 rounds (this checkout alone under --quick), each round timed.
  wr = r["whole_run"]
  cur = wr["runs"]["current"]
  assert wr["rounds"] == 50 and set(wr["runs"]) == {"current"} and len(cur["seconds"]) == 50
  assert cur["mean_s"] == pytest.approx(sum(cur["seconds"]) / 50) and cur["last_s"] == cur["seconds"][-1]
  assert "whole 50-round runs" in fzoos_speed.markdown(fz)
  # Every thunk of the traced round is charged to a scope; the default's fit and GP are found by name.
  for sp in (r["scope_profile"], r["rff_cache_off"]["scope_profile"]):
    assert set(sp["ms"]) == {*fzoos_speed.SCOPES, "other"} and sp["total_ms"] == pytest.approx(sum(sp["ms"].values()))
  assert r["scope_profile"]["ms"]["rff_fit"] > 0 and r["scope_profile"]["ms"]["local_gp"] > 0

  fg = ffgb_speed.run(settings, log=lambda _: None)
  (g,) = fg["records"]
  assert g["learners_per_round"] == 8 and g["oracle_steps"] == 4 and g["state_finite"]
  assert g["ratio"] == pytest.approx(g["loop_seconds"] / g["seconds_per_round"])
  assert g["ratio_cpu"] == pytest.approx(g["loop_cpu_seconds"] / g["cpu_seconds_per_round"])


def test_round_counts_are_the_documented_formulas():
  from experiments.bench import roofline
  from fedsim.algorithms.fedavg import FedAvgConfig
  from fedsim.algorithms.fedzo import FedZOConfig
  from fedsim.algorithms.hiso import DeComFLConfig
  d_in, c = 64, 10
  d = 650
  fa = roofline.round_counts("fedavg", FedAvgConfig(lr=0.1, local_steps=5, batch_size=20), 1000, d_in, c)
  assert fa["flops_per_round"] == 1000 * 5 * 20 * 4 * 64 * 10
  assert fa["bytes_per_round"] == 1000 * 5 * (20 * 64 + 2 * d) * 4
  zo = roofline.round_counts("fedzo", FedZOConfig(), 10, d_in, c)
  assert zo["flops_per_round"] == 10 * 5 * 21 * 25 * 2 * 64 * 10
  assert zo["bytes_per_round"] == 10 * 5 * (25 * 64 + 2 * d) * 4
  hs = roofline.round_counts("hiso", DeComFLConfig(), 8, d_in, c)
  assert hs["flops_per_round"] == 8 * 1 * 6 * 32 * 2 * 64 * 10 and hs["bytes_per_round"] == 8 * 32 * 64 * 4
  with pytest.raises(ValueError, match="accepted"):
    roofline.round_counts("fzoos", None, 1, d_in, c)


def test_binding_roof_picks_the_larger_time_bound():
  from experiments.bench.roofline import binding_roof
  # 10 GFLOP at 100 GFLOP/s = 0.1 s; 1 GB at 20 GB/s = 0.05 s: FLOP-bound; 0.4 s measured -> 25%.
  r = binding_roof(10e9, 1e9, 0.4, 100e9, 20e9)
  assert r["bound"] == "flops" and r["roof_fraction"] == pytest.approx(0.25)
  assert r["arithmetic_intensity"] == pytest.approx(10) and r["ridge_intensity"] == pytest.approx(5)
  # The same work with 4 GB moved: 0.2 s of memory > 0.1 s of FLOPs -> memory-bound, 50%.
  r = binding_roof(10e9, 4e9, 0.4, 100e9, 20e9)
  assert r["bound"] == "memory" and r["roof_fraction"] == pytest.approx(0.5)
  assert r["achieved_bytes_per_s"] == pytest.approx(1e10)


@pytest.mark.slow
def test_quick_gpu_table_keeps_each_row_as_it_is_measured():
  """A gpu_table run stopped part-way keeps its rows: one partial result per row, the scalable rows before the
  roofs, then the roofed table, then the rows without a roofline (FZooS). Two scalable algorithms here; every
  row of the script's table is checked in test_gpu_all_script_quick_writes_every_step."""
  from experiments.bench import gpu_table
  settings = dataclasses.replace(benchmark.Settings.make(quick=True), gpu_table_algorithms=("fedavg", "hiso", "fzoos"))
  assert settings.gpu_table_clients == (4, 16) and settings.gpu_table_max_block == 8
  partials = []
  res = gpu_table.run(settings, log=lambda _: None, on_update=partials.append)
  assert [len(p["records"]) for p in partials] == [1, 2, 3, 4, 4, 5]
  assert all(p["peak"] is None and "bound" not in p["records"][-1] for p in partials[:4])
  assert all(p["peak"] is not None and "bound" in p["records"][0] for p in partials[4:])
  assert "not measured yet" in gpu_table.markdown(partials[2]) and "| hiso | 4 |" in gpu_table.markdown(partials[2])
  assert [(r["algorithm"], r["num_clients"]) for r in res["records"]] == [
      ("fedavg", 4), ("hiso", 4), ("fedavg", 16), ("hiso", 16), ("fzoos", 2)]
  # A failed configuration is a row with its error, and the table goes on.
  res["records"].append({"algorithm": "fzoos", "num_clients": 10 ** 4, "error": "XlaRuntimeError: out of memory"})
  assert "failed: XlaRuntimeError" in gpu_table.markdown(res)


def _check_gpu_table_rows(res, settings):
  """Every row of the --quick gpu_table (the script's step 1, read back from its benchmark.json; ``settings``
  the suite's settings as stored there). The rows' markdown lines are checked by the caller, on the written file."""
  from experiments.bench import gpu_table
  rows = res["records"]
  softmax = [(a, n) for n in (4, 16) for a in gpu_table.SCALABLE]
  assert [(r["algorithm"], r["num_clients"]) for r in rows] == softmax + [("ffgb", 4), ("fzoos", 2)]
  for r in rows:
    assert "error" not in r and r["state_finite"], r
    assert _positive(r["speedup_vs_loop"]) and r["compiled_bytes"] > 0
  steps = {"fedavg": 5, "fedzo_materialised": 5, "fedzo_streamed": 5, "decomfl": 1, "hiso": 1,
           "ffgb": settings["ffgb_local_steps"], "fzoos": settings["fzoos_steps"]}
  for r in rows:
    assert r["client_steps_per_s"] == pytest.approx(r["num_clients"] * steps[r["algorithm"]] / r["seconds_per_round"])
  for r in rows[:10]:
    assert r["client_block"] == (0 if r["num_clients"] <= 8 else 8) and r["sequential_clients_timed"] == 4
    assert r["bound"] in ("flops", "memory") and _positive(r["roof_fraction"])
  assert {r["algorithm"]: r.get("direction_block") for r in rows[:5]} == {
      "fedavg": None, "fedzo_materialised": 0, "fedzo_streamed": 4, "decomfl": None, "hiso": None}
  assert "generator_fraction" in rows[1] and "generator_fraction" in rows[2] and "generator_fraction" not in rows[0]
  ffgb, fzoos = rows[10:]
  assert ffgb["rate_unit"] == "learners" and ffgb["oracle_steps"] == settings["ffgb_vmap_oracle_steps"]
  assert fzoos["num_rff"] == 64 and fzoos["dtype"] == "float64" and fzoos["sequential_clients_timed"] == 2
  assert "bound" not in ffgb and "bound" not in fzoos and ffgb["roofline"] == gpu_table.NO_ROOFLINE["ffgb"]
  md = gpu_table.markdown(res)
  assert md.count("| fedzo_streamed (direction_block 4) |") == 2 and "TFLOP/s" in md and "learners/s" in md


def test_gpu_table_rows_labels_and_flag():
  """The gpu_table rows (issue 49 item 3): two FedZO rows told apart by direction_block, FFGB and FZooS at
  their own N without roofline cells (a reason instead); the flag accepts exactly these labels."""
  from experiments.bench import gpu_table
  from fedsim.estimators.finite_difference import DIRECTION_BLOCK
  assert gpu_table.ALGORITHMS == ("fedavg", "fedzo_materialised", "fedzo_streamed", "decomfl", "hiso", "ffgb", "fzoos")
  assert benchmark.Settings.make().gpu_table_algorithms == gpu_table.ALGORITHMS
  assert gpu_table.direction_block("fedzo_materialised") == 0
  assert gpu_table.direction_block("fedzo_streamed") == DIRECTION_BLOCK > 0  # the GPU default, on CPU too
  assert gpu_table.direction_block("fedavg") is None
  settings = benchmark.Settings.make(ffgb_clients=56, fzoos_vmap=(50, 1000))
  assert gpu_table.own_clients("ffgb", settings) == 56 and gpu_table.own_clients("fzoos", settings) == 50
  _, extra = benchmark.validate(["fedavg"], ["8"], suite=["gpu_table"],
                                gpu_table_algorithms=["fzoos", "fedzo_streamed"])
  assert extra["gpu_table_algorithms"] == ("fzoos", "fedzo_streamed")
  with pytest.raises(ConfigError, match="gpu_table_algorithms.*fedzo_materialised"):
    benchmark.validate(["fedavg"], ["8"], suite=["gpu_table"], gpu_table_algorithms=["fedzo"])
  # The markdown of stored rows (no measurement): FFGB's rate in learners, its roofline reason below the table.
  row = {"num_clients": 56, "seconds_per_round": 0.5, "client_steps_per_s": 224.0, "compiled_bytes": 2 ** 20,
         "device_peak_bytes": None, "speedup_vs_loop": 3.0, "sequential_clients_timed": 56}
  res = {"peak": {"n": 8192, "flops_per_s": 3e14}, "bandwidth": {"bytes_per_s": 3e12}, "records": [
      {**row, "algorithm": "ffgb", "rate_unit": "learners", "oracle_steps": 100, "oracle_batch": 128,
       "roofline": gpu_table.NO_ROOFLINE["ffgb"]},
      {**row, "algorithm": "fedzo_streamed", "direction_block": 4, "rate_unit": "client steps", "bound": "memory",
       "arithmetic_intensity": 57.9, "roof_fraction": 0.013}]}
  md = gpu_table.markdown(res)
  assert "| ffgb (mlp, 100 Adam steps x 128) | 56 | 224 learners/s | 0.5 | 1.0 | not counted (ffgb, below) | |" in md
  assert "| fedzo_streamed (direction_block 4) | 56 | 224 | 0.5 | 1.0 | memory (57.9 FLOP/B) | 1.3 |" in md
  assert f"- ffgb: roofline {gpu_table.NO_ROOFLINE['ffgb']}" in md and "- fedzo" not in md


def _fake_python(tmp_path, seconds):
  fake = tmp_path / "fake_python"
  fake.write_text(f"#!/bin/sh\nsleep {seconds}\n")
  fake.chmod(0o755)
  return str(fake)


def _timings(out):
  return {line.split()[0]: line for line in (out / "timings.txt").read_text().splitlines()}


def test_gpu_all_script_limits_fit_the_budget(tmp_path):
  """gpu_all.sh's step limits: caps 320 / 145 / 60 s inside a 470 s budget; a step gets at most the budget
  left less the floors of the steps after it, and is skipped (a failure) under 10 s. A stand-in interpreter
  that returns at once keeps this to a second."""
  env = dict(os.environ, PYTHON=_fake_python(tmp_path, 0))
  out = tmp_path / "a"
  proc = subprocess.run(["bash", "experiments/bench/gpu_all.sh", str(out)], cwd=REPO, env=env, capture_output=True,
                        text=True, timeout=60)
  assert proc.returncode == 0, proc.stderr
  t = _timings(out)
  assert list(t) == ["gpu_table", "sweep_table", "profile", "total"]
  assert "timeout=320s" in t["gpu_table"] and "timeout=145s" in t["sweep_table"] and "timeout=60s" in t["profile"]
  assert 320 + 145 + 60 > 470  # the caps alone would not fit: the budget bounds them
  # A 40 s budget: the table would leave less than 10 s beside the floors (100 + 30 s) kept for the steps
  # after it, and the sweep less than 10 s beside profile's 30 s: both skipped; profile gets 40 - 5 = 35 s.
  out = tmp_path / "b"
  proc = subprocess.run(["bash", "experiments/bench/gpu_all.sh", str(out)], cwd=REPO, capture_output=True,
                        env=dict(env, GPU_ALL_BUDGET="40"), text=True, timeout=60)
  assert proc.returncode == 1 and "failed: gpu_table sweep_table" in proc.stderr
  t = _timings(out)
  assert "rc=skipped" in t["gpu_table"] and "rc=skipped" in t["sweep_table"]
  assert "rc=0" in t["profile"] and ("timeout=34s" in t["profile"] or "timeout=35s" in t["profile"])


def test_roof_sizes_per_suite():
  # Each suite sizes its roofs for its machine unless --matmul_size / --bandwidth_bytes say otherwise.
  default = benchmark.Settings.make()
  assert default.roof_sizes("roofline") == (2048, 1 << 28)
  assert default.roof_sizes("gpu_table") == (8192, 1 << 31)
  given = benchmark.Settings.make(matmul_size=4096, bandwidth_bytes=1 << 30)
  assert given.roof_sizes("roofline") == given.roof_sizes("gpu_table") == (4096, 1 << 30)
  quick = benchmark.Settings.make(quick=True)
  assert quick.roof_sizes("roofline") == quick.roof_sizes("gpu_table") == (256, 1 << 22)


def test_gpu_table_is_not_a_default_suite():
  assert "gpu_table" in util.SUITES and "gpu_table" not in util.DEFAULT_SUITES


def test_quick_checkpoint_suite_times_both_side_by_side():
  """The checkpoint suite's fields (issue 36); its speed bound lives in the suite, not here."""
  from experiments.bench import checkpoint_cost
  settings = benchmark.Settings.make(quick=True)
  out = checkpoint_cost.run(settings, log=lambda _: None)
  (r,) = out["records"]
  assert (r["rounds"], r["checkpoint_every"], r["saves"]) == (20, 10, 2) and r["same_records"]
  for name in ("simulate", "run"):
    assert _positive(r[f"{name}_s"]) and _positive(r[f"{name}_ckpt_s"]) and _positive(r[f"{name}_ratio"])
  assert "| softmax | 10 | 20 | 10 | 2 |" in checkpoint_cost.markdown(out)
  assert "checkpoint" in util.SUITES and "checkpoint" in util.DEFAULT_SUITES


def test_quick_fd_memory_suite_streamed_rounds_hold_less():
  """Issue 37 item 2: FedZO's round with directions streamed in blocks of 1 or 4 (of b2 = 20)
  compiles to fewer temporaries than the materialised one, and below one (N, b2, d) array at
  B = 1; the rounds agree up to rounding."""
  from experiments.bench import fd_memory
  settings = benchmark.Settings.make(quick=True)
  out = fd_memory.run(settings, log=lambda _: None)
  rows = {r["direction_block"]: r for r in out["records"]}
  assert sorted(rows) == [0, 1, 4] and all(r["num_clients"] == 16 and r["client_block"] == 0 for r in rows.values())
  temp = {b: r["memory"]["temp_bytes"] for b, r in rows.items()}
  assert temp[1] < rows[1]["one_array_bytes"] < temp[0] and temp[4] < temp[0] / 2
  assert rows[0]["max_rel_diff"] == 0 and 0 <= rows[4]["max_rel_diff"] < 0.05
  assert all(_positive(r["seconds_per_round"]) for r in rows.values())
  assert "| 16 | 0 | 1 |" in fd_memory.markdown(out) and "fd_memory" in util.DEFAULT_SUITES


@pytest.mark.slow  # about 5 min on 2 CPU cores; .ci/run runs it (pytest -m slow)
def test_gpu_all_script_quick_writes_every_step(tmp_path):
  """Issue 49 item 3: experiments/bench/gpu_all.sh, the one script a lent GPU runs, at --quick sizes."""
  out = tmp_path / "gpu"
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHON=sys.executable)
  proc = subprocess.run(["bash", "experiments/bench/gpu_all.sh", str(out), "--quick"], cwd=REPO, env=env,
                        capture_output=True, text=True, timeout=1800)
  assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
  for suite_name in ("gpu_table", "sweep_table"):
    md = (out / suite_name / "benchmark.md").read_text()
    assert f"## {suite_name}:" in md and (out / suite_name / "benchmark.json").stat().st_size > 0, suite_name
  doc = json.loads((out / "sweep_table" / "benchmark.json").read_text())
  assert doc["settings"]["sweep_table_configs"] == [1, 8]  # the script's K flag reaches the suite
  traces = [p for p in (out / "profile").rglob("*") if p.is_file() and p.stat().st_size > 0]
  assert any(p.name.endswith(".xplane.pb") for p in traces), traces
  # Every gpu_table row at smoke size, the two FedZO rows, FFGB and FZooS included (issue 49 item 3).
  md = (out / "gpu_table" / "benchmark.md").read_text()
  for row in ("| fedavg | 4 |", "| fedzo_materialised (direction_block 0) | 4 |",
              "| fedzo_streamed (direction_block 4) | 16 |", "| decomfl | 16 |", "| hiso | 16 |",
              "| ffgb (mlp, 4 Adam steps x 8) | 4 |", "| fzoos (d = 8, M = 64, float64) | 2 |"):
    assert row in md, (row, md)
  assert "failed" not in md and "- fzoos: roofline not counted" in md
  doc = json.loads((out / "gpu_table" / "benchmark.json").read_text())
  _check_gpu_table_rows(doc["suites"]["gpu_table"], doc["settings"])
  steps = [line.split()[0] for line in (out / "timings.txt").read_text().splitlines()]
  assert steps == ["gpu_table", "sweep_table", "profile", "total"]
  assert str(out / "gpu_table" / "benchmark.md") in proc.stdout and "total" in proc.stdout
