"""Issue 36 item 2 from Python: ``fedsim.ExperimentConfig`` refuses bad settings when it is made,
naming the field in Python's words (``overwrite=True``, not ``--overwrite``); every numeric field
has a declared range, checked from Python and the CLI alike. The CLI side is
tests/experiments/test_cli_help_and_errors.py."""

import dataclasses
import json
import warnings

import pytest

import fedsim
from fedsim import api, config
from tests.cli_probe import validate_flag_sets

NUMERIC = [f for f in dataclasses.fields(fedsim.ExperimentConfig)
           if "help" in f.metadata and config.field_type(fedsim.ExperimentConfig, f.name) in (int, float)]


def _refused(**kwargs) -> config.FieldError:
  with pytest.raises(config.FieldError) as info:
    fedsim.ExperimentConfig(**kwargs)
  assert "--" not in str(info.value), str(info.value)   # Python's words
  return info.value


def test_seed_must_be_non_negative():
  err = _refused(seed=-1)
  assert (err.flag, str(err)) == ("seed", "seed: must be >= 0; got -1")
  fedsim.ExperimentConfig(seed=0)


def test_every_numeric_field_has_a_declared_range_checked_in_python_and_on_the_cli():
  names = {f.name for f in NUMERIC}
  assert {"seed", "rounds", "num_clients", "quantity_sigma", "dirichlet_alpha", "homo_ratio",
          "blas_threads"} <= names
  cases = []
  for f in NUMERIC:
    meta = f.metadata
    assert meta["low"] is not None or meta["high"] is not None, f"{f.name} has no declared range"
    bad = meta["low"] - 1 if meta["low"] is not None else meta["high"] + 1
    bad = int(bad) if config.field_type(fedsim.ExperimentConfig, f.name) is int else float(bad)
    assert _refused(**{f.name: bad}).flag == f.name
    cases.append([f"--{f.name}={bad}"])
  for f, got in zip(NUMERIC, validate_flag_sets(cases)):
    assert got is not None and got[0] == f.name and got[1].startswith(f"--{f.name}: must be"), (f.name, got)


def test_algorithms_takes_a_comma_string_like_the_flag_or_a_list():
  want = ("fedavg", "fedzo:lr=0.1")
  assert fedsim.ExperimentConfig(algorithms="fedavg,fedzo:lr=0.1").algorithms == want
  assert fedsim.ExperimentConfig(algorithms=["fedavg", "fedzo:lr=0.1"]).algorithms == want
  assert fedsim.ExperimentConfig(algorithms="fedavg").algorithms == ("fedavg",)
  err = _refused(algorithms=5)
  assert "comma-separated string" in str(err) and "list of entries" in str(err)


@pytest.mark.parametrize("entry, message", [
    ("fedzo:local_steps=0", "algorithms: fedzo-local_steps=0 local_steps (from algorithm entry): must be >= 1; got 0"),
    ("fedzo:lr=-1", "algorithms: fedzo-lr=-1 lr (from algorithm entry): must be > 0 and finite; got -1.0"),
    ("fedzo:direction=spher", "algorithms: fedzo-direction=spher direction (from algorithm entry): unknown 'spher' "
     "(did you mean 'sphere'?); accepted: sphere, gaussian, orthogonal"),
    ("fedzo:lrr=1", "algorithms: fedzo: unknown hyperparameter 'lrr' (did you mean 'lr'?); accepted: lr, "),
    ("fedzo:local_steps=x", "algorithms: fedzo: local_steps='x' is not an int"),
])
def test_an_entry_error_names_the_algorithm_and_the_field(entry, message):
  with pytest.raises(fedsim.ConfigError) as info:
    fedsim.ExperimentConfig(algorithms=("fedavg", entry))
  assert info.value.flag == "algorithms" and str(info.value).startswith(message), str(info.value)


@pytest.mark.parametrize("kwargs, words", [
    (dict(quantity_law="lognorm"), "unknown quantity_law 'lognorm' (did you mean 'lognormal'?)"),
    (dict(task="softmx"), "unknown task 'softmx' (did you mean 'softmax'?)"),
    (dict(xla_cpu_emitters="fusio"), "(did you mean 'fusion'?)"),
])
def test_unknown_names_get_a_suggestion(kwargs, words):
  assert words in str(_refused(**kwargs))


def _stored_run(path, config, **changes):
  experiment = {**config.to_json(), **changes}
  (path / "config.json").write_text(json.dumps({"experiment": experiment, "algorithms": {
      label: {"algorithm": name, **hp} for label, (name, hp) in config.algorithm_hparams().items()}}))


def test_a_refused_directory_speaks_python_and_the_cli_speaks_flags(tmp_path):
  from experiments import common
  cfg = fedsim.ExperimentConfig(algorithms=("fedavg",), rounds=3, progress=False)
  _stored_run(tmp_path, cfg, rounds=5)
  hps = cfg.algorithm_hparams()
  with pytest.raises(config.FieldError) as info:
    api.check_record(cfg, str(tmp_path), hps)
  assert info.value.flag == "output_dir" and "--" not in str(info.value)
  assert str(info.value) == (f"output_dir: {tmp_path} holds another run (rounds: stored 5, given 3); pass "
                             "overwrite=True to replace it, resume=True with its settings to continue it, or use "
                             "another output_dir")
  with pytest.raises(fedsim.ConfigError) as cli, common.cli_errors():
    api.check_record(cfg, str(tmp_path), hps)
  assert str(cli.value) == (f"--output_dir: {tmp_path} holds another run (rounds: stored 5, given 3); pass "
                            "--overwrite to replace it, --resume with its settings to continue it, or use "
                            "another --output_dir")
  resume = dataclasses.replace(cfg, resume=True, seed=1)
  with pytest.raises(config.FieldError, match=r"start anew with overwrite=True or another output_dir$"):
    api.check_record(resume, str(tmp_path), hps)
  (tmp_path / "config.json").write_text("{")
  with pytest.raises(config.FieldError, match=r"pass overwrite=True to replace the run, or use another output_dir$"):
    api.check_record(cfg, str(tmp_path), hps)


def test_rounds_0_writes_no_plot_and_warns_nothing(tmp_path):
  cfg = fedsim.ExperimentConfig(algorithms="fedavg", num_clients=4, clients_per_round=2, rounds=0, progress=False)
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    histories = fedsim.run(cfg, output_dir=str(tmp_path))
  assert [r["round"] for r in histories["fedavg"]] == [0]
  assert (tmp_path / "config.json").exists() and not (tmp_path / "curves.png").exists()
