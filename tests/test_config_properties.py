"""Property-based tests of the configuration space (issue 18, item 3).

Hypothesis draws configurations (task, partition, algorithm, hyperparameters inside and
outside their documented ranges, misspelt keys, clients, devices). Each must either raise
a ``ConfigError`` naming an out-of-range setting before anything compiles, or run a few
rounds with finite metrics, the documented per-round ledgers and identical records when
re-run with the same seed. A sample goes through the CLI: exit 2 and one line, never a
traceback. Bounded by ``max_examples`` and tiny tasks; the number of configurations tried
is printed (``pytest -s``).
"""

import json
import math
import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fedsim
import fedsim.core.engine

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAN, INF = float("nan"), float("inf")

TRIED = {"python": 0, "refused": 0, "ran": 0, "cli": 0}

BAD_VALUES = {"num_clients": st.integers(-1, 0), "clients_per_round": st.sampled_from([-1, 0, 99]),
              "dirichlet_alpha": st.sampled_from([-0.5, 0.0]), "rounds": st.just(-1),
              "eval_every": st.integers(-1, 0), "num_devices": st.just(2),
              "lr": st.sampled_from([0.0, -0.1, NAN, INF]), "local_steps": st.integers(-1, 0),
              "batch_size": st.integers(-1, 0), "step_size": st.sampled_from([-1.0, 0.0]),
              "local_step": st.just(2)}  # local_step: a misspelt hyperparameter


@st.composite
def draws(draw):
  """A configuration with up to two settings out of their documented ranges."""
  alg = draw(st.sampled_from(["fedavg", "fedzo", "fedadam", "gd"]))
  hp_names = ["step_size"] if alg == "gd" else ["lr", "local_steps", "batch_size", "local_step"]
  bad = draw(st.sets(st.sampled_from(["num_clients", "clients_per_round", "dirichlet_alpha", "rounds",
                                      "eval_every", "num_devices", *hp_names]), max_size=2))
  n = draw(BAD_VALUES["num_clients"]) if "num_clients" in bad else draw(st.integers(1, 5))
  d = dict(task=draw(st.sampled_from(["ridge", "quadratic"])), alg=alg, num_clients=n,
           clients_per_round=draw(st.integers(1, max(n, 1))),
           partition=draw(st.sampled_from(["iid", "dirichlet", "shards"])),
           dirichlet_alpha=draw(st.sampled_from([0.3, 1.0])), rounds=draw(st.integers(0, 3)),
           eval_every=draw(st.integers(1, 2)), num_devices=draw(st.integers(0, 1)), seed=draw(st.integers(0, 3)))
  valid_hp = {"lr": st.floats(1e-3, 0.05), "local_steps": st.integers(1, 3), "batch_size": st.integers(1, 4),
              "step_size": st.sampled_from([0.01, 0.05])}
  hp = {k: draw(v) for k, v in valid_hp.items() if k in hp_names and draw(st.booleans())}
  for name in bad - {"num_clients"}:
    (hp if name in hp_names else d)[name] = draw(BAD_VALUES[name])
  d["hp"] = hp
  return d


def _out_of_range(d) -> set:
  """The settings of a draw outside their documented ranges (ExperimentConfig, the algorithm configs)."""
  import jax
  bad = set()
  if d["num_clients"] < 1:
    bad.add("num_clients")
  if not 1 <= d["clients_per_round"] <= max(d["num_clients"], 0):
    bad.add("clients_per_round")
  if d["dirichlet_alpha"] <= 0:
    bad.add("dirichlet_alpha")
  if d["rounds"] < 0:
    bad.add("rounds")
  if d["eval_every"] < 1:
    bad.add("eval_every")
  if d["num_devices"] > jax.device_count():
    bad.add("num_devices")
  hp = d["hp"]
  if "local_step" in hp or (d["alg"] == "gd" and "lr" in hp):
    bad.add("hparams")  # no such hyperparameter
  if "lr" in hp and not (math.isfinite(hp["lr"]) and hp["lr"] > 0):
    bad.add("lr")
  for k in ("local_steps", "batch_size"):
    if k in hp and hp[k] < 1:
      bad.add(k)
  if "step_size" in hp and hp["step_size"] <= 0:
    bad.add("step_size")
  return bad


def _config(d):
  opts = {"dim": 4} if d["task"] == "quadratic" else {}
  return fedsim.ExperimentConfig(
      task=d["task"], num_clients=d["num_clients"], clients_per_round=d["clients_per_round"],
      partition=d["partition"], dirichlet_alpha=d["dirichlet_alpha"], task_options=opts,
      algorithms=(d["alg"],), hparams={d["alg"]: d["hp"]} if d["hp"] else {}, rounds=d["rounds"],
      eval_every=d["eval_every"], num_devices=d["num_devices"], seed=d["seed"], progress=False)


def _strip(hist):
  return [{k: v for k, v in r.items() if k != "wall_time_s"} for r in hist]


@pytest.mark.slow
@settings(max_examples=24, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(d=draws())
def test_each_configuration_is_refused_naming_a_bad_setting_or_runs_exactly(d, compiles):
  TRIED["python"] += 1
  bad = _out_of_range(d)
  started = compiles
  started.clear()
  try:
    config = _config(d)
    hist = fedsim.run(config)[d["alg"]]
  except fedsim.ConfigError as e:
    TRIED["refused"] += 1
    assert not started, f"refused after compiling: {e}"
    named = {e.flag, getattr(e, "hparam", None)}
    # the error names a bad setting (or, for an in-range draw, a setting the task rejects)
    assert not bad or named & bad or (e.flag == "hparams" and "hparams" in bad), (str(e), bad)
    return
  TRIED["ran"] += 1
  assert not bad, f"ran with out-of-range settings {bad}"
  rounds = list(range(0, config.rounds, config.eval_every)) + [config.rounds]
  assert [r["round"] for r in hist] == rounds
  assert all(math.isfinite(v) for r in hist for v in r.values() if isinstance(v, float))
  hp = config.algorithm_hparams()[d["alg"]][1]
  per_round = config.num_clients if d["alg"] == "gd" else (hp.get("clients_per_round") or config.num_clients)
  for r in hist:
    assert r["participants"] == per_round * r["round"] and r["empty_rounds"] == 0
    if d["alg"] != "gd":
      dirs = hp["fd_directions"] + 1 if d["alg"] == "fedzo" else 1
      assert r["queries"] == per_round * r["round"] * hp["local_steps"] * hp["batch_size"] * dirs
  up = {r["bytes_up"] / r["participants"] for r in hist if r["participants"]}
  assert len(up) <= 1 and all(u % 4 == 0 for u in up)       # d float32 values per participant
  assert _strip(fedsim.run(config)[d["alg"]]) == _strip(hist)  # same seed, same records


@pytest.fixture(scope="module")
def compiles():
  """A list that gets an entry whenever ``fedsim.run`` enters the engine (compiles)."""
  started, real, mp = [], fedsim.core.engine.simulate, pytest.MonkeyPatch()
  mp.setattr(fedsim.core.engine, "simulate", lambda *a, **k: (started.append(1), real(*a, **k))[1])
  yield started
  mp.undo()


_PROBE = r"""
import contextlib, io, json, sys, traceback
from experiments import common, run
out = []
for argv in json.loads(sys.argv[1]):
  err = io.StringIO()
  code = 0
  with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
    try:
      common.FLAGS.unparse_flags()
      common.parse_flags_or_exit(["run", *argv])
      run.main([])
    except SystemExit as e:
      code = e.code if isinstance(e.code, int) else 1
    except BaseException:
      code, _ = "traceback", err.write(traceback.format_exc())
  out.append([code, err.getvalue()])
print(json.dumps(out))
"""


def _flags(d, out_dir):
  flags = [f"--task={d['task']}", f"--algorithm={d['alg']}", f"--num_clients={d['num_clients']}",
           f"--clients_per_round={d['clients_per_round']}", f"--partition={d['partition']}",
           f"--dirichlet_alpha={d['dirichlet_alpha']}", f"--rounds={min(d['rounds'], 1)}",
           f"--eval_every={d['eval_every']}", f"--num_devices={d['num_devices']}", f"--seed={d['seed']}",
           "--dim=4", f"--output_dir={out_dir}"]
  return flags + [f"--{d['alg']}_{k}={v}" for k, v in d["hp"].items()]


def test_the_cli_exits_2_with_one_line_never_a_traceback(tmp_path):
  cases = []

  @settings(max_examples=16, deadline=None, derandomize=True, database=None)
  @given(d=draws())
  def collect(d):
    cases.append((d, _flags(d, tmp_path / f"run{len(cases)}")))
  collect()
  proc = subprocess.run([sys.executable, "-c", _PROBE, json.dumps([[str(a) for a in f] for _, f in cases])],
                        cwd=REPO, capture_output=True, text=True, timeout=600,
                        env=dict(os.environ, JAX_PLATFORMS="cpu"))
  assert proc.returncode == 0, proc.stderr[-3000:]
  outcomes = json.loads(proc.stdout.strip().splitlines()[-1])
  TRIED["cli"] += len(cases)
  for (d, flags), (code, err) in zip(cases, outcomes):
    assert code != "traceback", f"{flags}: {err[-2000:]}"
    if _out_of_range(d):
      assert code == 2, (flags, code, err)
    if code == 2:
      lines = err.strip().splitlines()
      assert len(lines) == 1 and lines[0].startswith("error: "), (flags, err)
    else:
      assert code == 0, (flags, code, err)


def teardown_module():
  print(f"\nproperty tests: {TRIED['python']} configurations from Python ({TRIED['refused']} refused, "
        f"{TRIED['ran']} ran twice), {TRIED['cli']} through the CLI")
