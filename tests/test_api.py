"""The library API (fedsim/api.py): ``fedsim.run(fedsim.ExperimentConfig(...))`` gives the
CLI's records and files, calls callbacks, stops diverging algorithms, rejects bad settings;
the README's Python example runs."""

import json
import math
import os
import re
import subprocess
import sys

import pytest

import fedsim

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# One small digits setting, as flags and as a config.
FLAGS = ["--algorithm=fedavg,fedzo:local_steps=3", "--num_clients=12", "--clients_per_round=4",
         "--rounds=4", "--eval_every=2", "--lr=0.05"]
CONFIG = dict(num_clients=12, clients_per_round=4, rounds=4, eval_every=2,
              algorithms=("fedavg", "fedzo:local_steps=3"),
              hparams={"fedavg": {"lr": 0.05}, "fedzo": {"lr": 0.05}}, progress=False)
LABELS = ["fedavg", "fedzo-local_steps=3"]


def _strip(records):
  return [{k: v for k, v in r.items() if k != "wall_time_s"} for r in records]


def _jsonl(path):
  with open(path) as f:
    return [json.loads(line) for line in f]


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
  out = tmp_path_factory.mktemp("cli")
  proc = subprocess.run([sys.executable, "-m", "experiments.run", *FLAGS, f"--output_dir={out}"],
                        cwd=REPO, env=dict(os.environ, JAX_PLATFORMS="cpu"), capture_output=True,
                        text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return out


@pytest.fixture(scope="module")
def api_run(tmp_path_factory):
  out = tmp_path_factory.mktemp("api")
  seen = []
  histories = fedsim.run(fedsim.ExperimentConfig(**CONFIG), output_dir=str(out),
                         callbacks=(lambda label, rec: seen.append((label, dict(rec))),))
  return out, histories, seen


@pytest.mark.slow  # long; .ci/run runs it (pytest -m slow)
def test_run_returns_the_clis_metrics(cli_run, api_run):
  _, histories, _ = api_run
  assert list(histories) == LABELS
  for label in LABELS:
    cli = _jsonl(cli_run / label / "metrics.jsonl")
    assert [r["round"] for r in cli] == [0, 2, 4]
    assert _strip(histories[label]) == _strip(cli)   # same seed, same numbers (bitwise)
  cfg = json.loads((cli_run / "config.json").read_text())
  assert cfg["algorithms"]["fedzo-local_steps=3"]["local_steps"] == 3
  assert cfg["experiment"]["algorithms"] == ["fedavg", "fedzo:local_steps=3"]


@pytest.mark.slow  # long; .ci/run runs it (pytest -m slow)
def test_run_writes_the_clis_three_outputs(cli_run, api_run):
  out, histories, _ = api_run
  for label in LABELS:
    assert _jsonl(out / label / "metrics.jsonl") == histories[label]
  assert (out / "curves.png").stat().st_size > 1000
  api_cfg = json.loads((out / "config.json").read_text())
  cli_cfg = json.loads((cli_run / "config.json").read_text())
  assert "flags" in cli_cfg and "flags" not in api_cfg
  for key in ("algorithms", "task", "devices", "processes", "backend"):
    assert api_cfg[key] == cli_cfg[key], key


def test_callback_receives_each_record(api_run):
  _, histories, seen = api_run
  assert seen == [(label, rec) for label in LABELS for rec in histories[label]]
  assert [r for _, r in seen][:3] == histories["fedavg"]


@pytest.mark.slow  # long; .ci/run runs it (pytest -m slow)
def test_run_equals_simulate_on_the_same_task():
  """Independent of the CLI: the engine called by hand on make_task's task."""
  import jax

  from fedsim import algorithms
  from fedsim.tasks import make_task
  config = fedsim.ExperimentConfig(num_clients=6, clients_per_round=3, rounds=2, eval_every=1,
                                   algorithms=("fedavg",), hparams={"fedavg": {"lr": 0.2}},
                                   seed=3, progress=False)
  got = fedsim.run(config)["fedavg"]
  task = make_task("softmax", num_clients=6, seed=3)
  alg = algorithms.build("fedavg", task, lr=0.2, clients_per_round=3)
  _, want = fedsim.simulate(alg, task, 2, 1, jax.random.key(3))
  assert _strip(got) == _strip(want) and [r["round"] for r in got] == [0, 1, 2]


def test_divergence_stops_that_algorithm_and_keeps_its_records(capsys):
  # Ridge regression (L1 ~ 1): a step of 1e6 overflows within a few rounds.
  config = fedsim.ExperimentConfig(task="ridge", num_clients=3, clients_per_round=3, rounds=20,
                                   eval_every=2, algorithms=("gd:step_size=1e6", "gd"))
  histories = fedsim.run(config)
  bad = histories["gd-step_size=1e6"]
  assert not math.isfinite(bad[-1]["objective"]) and bad[-1]["round"] < 20
  assert all(math.isfinite(r["objective"]) for r in bad[:-1])
  assert histories["gd"][-1]["round"] == 20                       # the next algorithm still ran
  assert fedsim.api.diverged(histories) == ["gd-step_size=1e6"]
  assert "[gd-step_size=1e6] diverged" in capsys.readouterr().err


@pytest.mark.parametrize("kwargs, field, words", [
    (dict(algorithms=("fedavgg",)), "algorithms", "did you mean 'fedavg'"),
    (dict(algorithms=("fedzo:local_step=3",)), "algorithms", "did you mean 'local_steps'"),
    (dict(algorithms=(("fedzo", {"lr": 0.1, "smooth": 1}),)), "algorithms", "did you mean 'smoothing'"),
    (dict(algorithms=("fedzo:lr=fast",)), "algorithms", "not a float"),
    (dict(hparams={"fedavg": {"local_step": 3}}), "hparams", "did you mean 'local_steps'"),
    (dict(hparams={"fedzoo": {"lr": 1.0}}), "hparams", "did you mean 'fedzo'"),
    (dict(task_options={"hidden_widht": 8}), "task_options", "did you mean 'hidden_width'"),
    (dict(task="lasso"), "task", "accepted: softmax"),
    (dict(num_clients=5), "clients_per_round", "[1, num_clients=5]"),
    (dict(rounds=-1), "rounds", ">= 0"),
    (dict(eval_every=0), "eval_every", ">= 1"),
    (dict(rounds="5"), "rounds", "an integer"),
    (dict(algorithms=("fedavg", "fedavg")), "algorithms", "repeated"),
])
def test_bad_settings_raise_config_error_naming_the_field(kwargs, field, words):
  with pytest.raises(fedsim.ConfigError) as err:
    fedsim.ExperimentConfig(**kwargs)
  assert err.value.flag == field and words in str(err.value), str(err.value)


def test_checkpointing_needs_an_output_directory():
  config = fedsim.ExperimentConfig(rounds=0, checkpoint_every=2, algorithms=("fedavg",))
  with pytest.raises(fedsim.ConfigError, match="output_dir"):
    fedsim.run(config)


def test_hparams_precedence_and_pair_labels():
  config = fedsim.ExperimentConfig(
      algorithms=("fedzo", "fedzo:lr=0.3", ("fedzo", {"local_steps": 7})),
      hparams={"fedzo": {"lr": 0.2, "local_steps": 2}, "fedzo-lr=0.3": {"batch_size": 9}})
  hp = {label: h for label, (_, h) in config.algorithm_hparams().items()}
  assert list(hp) == ["fedzo", "fedzo-lr=0.3", "fedzo-local_steps=7"]
  assert (hp["fedzo"]["lr"], hp["fedzo"]["local_steps"]) == (0.2, 2)
  assert (hp["fedzo-lr=0.3"]["lr"], hp["fedzo-lr=0.3"]["batch_size"]) == (0.3, 9)
  assert (hp["fedzo-local_steps=7"]["lr"], hp["fedzo-local_steps=7"]["local_steps"]) == (0.2, 7)
  assert hp["fedzo"]["clients_per_round"] == 10                   # config.clients_per_round
  # FedZO's run default (0.01, experiments.run's too) over the paper's 1e-3:
  assert fedsim.ExperimentConfig(algorithms=("fedzo",)).algorithm_hparams()["fedzo"][1]["lr"] == 0.01


def test_resolve_names_each_values_source():
  config = fedsim.ExperimentConfig(
      algorithms=("fedzo", "fedzo:lr=0.3", ("fedzo", {"local_steps": 7}), "fedadam", "fzoos"),
      hparams={"fedzo": {"local_steps": 2}, "fedzo-lr=0.3": {"batch_size": 9, "local_steps": 3}},
      clients_per_round=5, comm_budget=12)
  got = {label: {k: (r.values[k], s) for k, s in r.sources.items() if s != "default"}
         for label, r in config.resolve().items()}
  assert got == {
      "fedzo": {"lr": (0.01, "RUN_DEFAULTS"), "local_steps": (2, "hparams[fedzo]"),
                "clients_per_round": (5, "clients_per_round")},
      "fedzo-lr=0.3": {"lr": (0.3, "algorithm entry"), "batch_size": (9, "hparams[fedzo-lr=0.3]"),
                       "local_steps": (3, "hparams[fedzo-lr=0.3]"), "clients_per_round": (5, "clients_per_round")},
      "fedzo-local_steps=7": {"lr": (0.01, "RUN_DEFAULTS"), "local_steps": (7, "algorithm entry"),
                              "clients_per_round": (5, "clients_per_round")},
      "fedadam": {"clients_per_round": (5, "clients_per_round"), "server_optimizer": ("adam", "registry preset"),
                  "server_lr": (0.01, "registry preset")},
      "fzoos": {"rounds": (5, "comm_budget")},                   # ceil((12 - 2) / 2)
  }
  assert config.resolve()["fedzo"].values == config.algorithm_hparams()["fedzo"][1]
  # source_names renames a source, or one value's (the CLI names its flags this way).
  named = fedsim.ExperimentConfig(algorithms=("fedzo",), hparams={"fedzo": {"lr": 0.1, "smoothing": 0.01}},
                                  source_names={"hparams[fedzo]": "--fedzo_X", "hparams[fedzo].lr": "--lr"})
  sources = named.resolve()["fedzo"].sources
  assert (sources["lr"], sources["smoothing"], sources["clients_per_round"]) == ("--lr", "--fedzo_X",
                                                                                "clients_per_round")


@pytest.mark.parametrize("kwargs, field, message", [
    (dict(hparams={"fedzo": {"smoothing": -1.0}}), "hparams",
     "hparams: fedzo smoothing (from hparams[fedzo]): must be > 0 and finite; got -1.0"),
    (dict(algorithms=("fedzo:lr=-1",)), "algorithms",
     "algorithms: fedzo-lr=-1 lr (from algorithm entry): must be > 0 and finite; got -1.0"),
    (dict(algorithms=("fedzo",), hparams={"fedzo": {"clients_per_round": 200}}), "hparams",
     "hparams: fedzo clients_per_round (from hparams[fedzo]): must be in [1, num_clients=100]; got 200"),
])
def test_bad_hyperparameter_values_raise_when_the_config_is_made(kwargs, field, message):
  with pytest.raises(fedsim.ConfigError) as err:
    fedsim.ExperimentConfig(**kwargs)
  assert err.value.flag == field and str(err.value) == message


def test_config_json_records_each_values_source(api_run):
  out, _, _ = api_run
  hp = json.loads((out / "config.json").read_text())["hyperparameters"]
  assert list(hp) == LABELS
  assert hp["fedavg"]["lr"] == {"value": 0.05, "source": "hparams[fedavg]"}
  assert hp["fedzo-local_steps=3"]["local_steps"] == {"value": 3, "source": "algorithm entry"}
  assert hp["fedzo-local_steps=3"]["clients_per_round"] == {"value": 4, "source": "clients_per_round"}
  assert hp["fedavg"]["batch_size"]["source"] == "default"


def test_import_is_light_and_exports_the_public_surface():
  code = ("import sys, fedsim; assert 'absl.flags' not in sys.modules and 'experiments' not in sys.modules;"
          "assert 'fedsim.algorithms' not in sys.modules;"
          "assert 'fedavg' in fedsim.algorithms.REGISTRY and 'softmax' in fedsim.tasks.TASKS;"
          "from fedsim.core.engine import simulate; assert fedsim.simulate is simulate;"
          "assert {'ExperimentConfig', 'run', 'ConfigError'} <= set(dir(fedsim))")
  proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                        timeout=120, env=dict(os.environ, JAX_PLATFORMS="cpu"))
  assert proc.returncode == 0, proc.stderr[-2000:]


def test_readme_python_example_runs(tmp_path, monkeypatch, capsys):
  with open(os.path.join(REPO, "README.md")) as f:
    section = f.read().split("\n## Python API\n")[1].split("\n## ")[0]
  blocks = re.findall(r"```python\n(.*?)```", section, re.S)
  assert len(blocks) == 1 and "fedsim.run(" in blocks[0]
  monkeypatch.chdir(tmp_path)
  namespace = {}
  exec(compile(blocks[0], "README.md", "exec"), namespace)
  histories = namespace["histories"]
  assert list(histories) == ["fedavg", "fedzo-local_steps=5"]
  for label, records in histories.items():
    assert [r["round"] for r in records] == [0, 2, 4]
    assert _jsonl(tmp_path / "runs" / "api_example" / label / "metrics.jsonl") == records
  assert (tmp_path / "runs" / "api_example" / "curves.png").exists()
  assert "[fedzo-local_steps=5] round 4/4" in capsys.readouterr().out


def test_an_algorithms_clients_per_round_may_be_every_client():
  """hparams' clients_per_round is accepted from 1 to num_clients inclusive (full participation), refused
  beyond and below."""
  for m in (1, 100):
    fedsim.ExperimentConfig(algorithms=("fedzo",), hparams={"fedzo": {"clients_per_round": m}})
  for m in (0, 101):
    with pytest.raises(fedsim.ConfigError, match="must be (in|>= 1)"):
      fedsim.ExperimentConfig(algorithms=("fedzo",), hparams={"fedzo": {"clients_per_round": m}})


def test_a_single_process_runs_watchdog_does_not_guard_the_exit(monkeypatch):
  """fedsim.run's watchdog guards the exit after an error only under jax.distributed (a dead peer can hang
  the shutdown); in one process it is stopped, so it cannot end the caller's process later."""
  from fedsim.core import watchdog
  made = []
  real = watchdog.Watchdog

  def spy(*args, **kwargs):
    made.append(kwargs)
    return real(*args, **kwargs)
  monkeypatch.setattr(watchdog, "Watchdog", spy)
  cfg = fedsim.ExperimentConfig(algorithms="fedavg", num_clients=4, clients_per_round=2, rounds=0, progress=False)
  fedsim.run(cfg)
  assert made and made[0]["guard_error_exit"] is False


@pytest.mark.parametrize("progress", [True, False])
def test_the_closing_wrote_line_follows_progress(tmp_path, capsys, progress):
  """fedsim.run prints "wrote DIR/config.json, ..." at the end when progress is on, and nothing when off."""
  cfg = fedsim.ExperimentConfig(algorithms="fedavg", num_clients=4, clients_per_round=2, rounds=0, progress=progress)
  fedsim.run(cfg, output_dir=str(tmp_path))
  assert (f"wrote {tmp_path}/config.json" in capsys.readouterr().out) is progress
