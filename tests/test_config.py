"""Config dataclasses as the single source of truth (issue 16): field metadata -> validation.

The expected messages and ranges below are written by hand from the papers' and the
CLI's documented ranges (not read back from the metadata under test).
"""

import dataclasses
import math
import os
import pathlib

import jax
import pytest

from fedsim import algorithms, api, config
from fedsim.algorithms.fedavg import FedAvgConfig
from fedsim.algorithms.fedzo import FedZOConfig
from fedsim.algorithms.ffgb import FFGBConfig
from fedsim.algorithms.hiso import HiSoConfig
from fedsim.core.errors import ConfigError
from tests.cli_probe import validate_flag_sets

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _error(fn):
  with pytest.raises(ConfigError) as info:
    fn()
  assert "--" not in str(info.value), str(info.value)
  return info.value


@pytest.mark.parametrize("make, field, message", [
    (lambda: FedAvgConfig(lr=-1), "lr", "must be > 0 and finite; got -1"),
    (lambda: FedAvgConfig(lr=math.inf), "lr", "must be > 0 and finite; got inf"),
    (lambda: FedAvgConfig(beta2=1.0), "beta2", "must be in [0, 1); got 1.0"),  # Reddi et al. 2021
    (lambda: FedAvgConfig(local_steps=0), "local_steps", "must be >= 1; got 0"),
    (lambda: FedAvgConfig(local_steps=2.5), "local_steps", "must be an integer; got 2.5"),
    (lambda: FedAvgConfig(lr="fast"), "lr", "must be a number; got 'fast'"),
    (lambda: FedAvgConfig(lr=None), "lr", "must be given; got None"),
    (lambda: FedZOConfig(snr_db=math.nan), "snr_db", "must be a number or +inf (not -inf); got nan"),
    (lambda: FedZOConfig(snr_db=-math.inf), "snr_db", "must be a number or +inf (not -inf); got -inf"),
    (lambda: FFGBConfig(gamma=0.0), "gamma", "must be in (0, 1]; got 0.0"),  # seed 002 eq. 13
    (lambda: HiSoConfig(nu=1.5), "nu", "must be in [0, 1]; got 1.5"),
    (lambda: FedZOConfig(direction="cube"), "direction",
     "unknown 'cube'; accepted: sphere, gaussian, orthogonal"),
    (lambda: FedZOConfig(accept_if_improves=2), "accept_if_improves", "unknown 2; accepted: 0, 1"),
    # Cross-field rules in __post_init__.
    (lambda: FedZOConfig(transceiver="full", noise_model="code_compat"), "noise_model",
     "code_compat (the authors' closed-form noise std) cannot be simulated by transceiver=full; "
     "accepted with full: real_full, complex_real_part"),
    (lambda: HiSoConfig(clip_lo=2.0, clip_hi=1.0), "clip_hi", "must be >= clip_lo=2.0; got 1.0"),
    (lambda: FedAvgConfig().replace(tau=0.0), "tau", "must be > 0 and finite; got 0.0"),
])
def test_bad_value_names_the_field_the_accepted_range_and_the_value(make, field, message):
  err = _error(make)
  assert isinstance(err, config.FieldError) and err.flag == field
  assert str(err) == f"{field}: {message}"


def test_boundary_and_optional_values_are_accepted():
  FedAvgConfig(beta2=0.0, local_steps=1, clients_per_round=None, client_block=0)
  FedZOConfig(snr_db=math.inf, h_min=0.0)         # inf dB = noise-free channel
  FFGBConfig(gamma=1.0, eta_cap=math.inf)         # gamma = 1: exact oracle; eta_cap inf = off
  HiSoConfig(nu=0.0, eps=0.0, clip_lo=1.0, clip_hi=1.0)


def test_build_rejects_unknown_and_invalid_hyperparameters_before_building():
  # task=None: the error must come before the builder touches the task.
  err = _error(lambda: algorithms.build("fedavg", None, local_step=50))
  assert err.flag == "local_step" and "did you mean local_steps?" in str(err)
  err = _error(lambda: algorithms.build("fedavg", None, lr=-1.0))
  assert err.flag == "lr" and "got -1.0" in str(err)
  err = _error(lambda: algorithms.build("fedzo", None, zzz=1))
  assert "accepted: lr, smoothing" in str(err)    # no close name: the accepted names
  with pytest.raises(ConfigError, match="unknown 'fedavgg'"):
    algorithms.build("fedavgg", None)


def test_check_keys_suggests_the_closest_field():
  err = _error(lambda: config.check_keys(FFGBConfig, ["eta0", "oracle_step"]))
  assert str(err) == "oracle_step: unknown setting of FFGBConfig; did you mean oracle_steps?"
  config.check_keys(FFGBConfig, ["eta0", "oracle_steps"])


@pytest.mark.parametrize("name", list(algorithms.REGISTRY))
def test_every_registered_config_field_has_help_and_valid_defaults(name):
  cls = algorithms.REGISTRY[name][0]
  for f in dataclasses.fields(cls):
    assert f.metadata.get("help", "").strip(), f"{cls.__name__}.{f.name} has no help"
    assert "--" not in f.metadata["help"], f"{cls.__name__}.{f.name}: help worded as a flag"
  cfg = cls(**algorithms.default_config(name))    # the registry's defaults pass validation
  assert dict(cfg) == algorithms.default_config(name)


def test_pytree_rebuild_is_not_validated():
  # chex calls __post_init__ when JAX rebuilds the dataclass from arbitrary leaves.
  leaves, treedef = jax.tree_util.tree_flatten(FedAvgConfig())
  rebuilt = jax.tree_util.tree_unflatten(treedef, [object()] * len(leaves))
  assert isinstance(rebuilt, FedAvgConfig)
  assert jax.jit(lambda lr: FedAvgConfig(lr=lr).lr * 2)(0.5) == 1.0   # traced values pass


def test_cli_override_suggestion():
  # The library's parser and message (fedsim.api.parse_algorithm), under the CLI's flag name.
  from experiments import common
  with pytest.raises(ConfigError, match=r"did you mean 'local_steps'\?") as err:
    common.parse_spec("fedavg:local_step=5")
  assert err.value.flag == "algorithm"
  with pytest.raises(ConfigError) as lib:
    api.ExperimentConfig(algorithms=("fedavg:local_step=5",))
  # The same message, each naming the entry's algorithm: Python under the field, the CLI under the flag.
  assert str(lib.value).startswith("algorithms: fedavg: unknown hyperparameter 'local_step'")
  assert str(err.value) == "--algorithm " + str(lib.value).split(": ", 1)[1]


def test_cli_rejects_a_value_no_algorithm_of_the_run_takes():
  cases = [["--algorithm=fedavg", "--fd_directions=5"],          # only ZO methods have it
           ["--algorithm=fedavg", "--fedzo_lr=0.1"],             # fedzo is not in the run
           ["--algorithm=fedavg,fedzo", "--fd_directions=5"],    # reaches fedzo: fine
           ["--algorithm=fedzo", "--smoothing=-1"]]                # the dataclass's range, flag named
  got = validate_flag_sets(cases)
  assert got[0][0] == "fd_directions" and "no algorithm of the run (fedavg)" in got[0][1]
  assert got[1][0] == "fedzo_lr" and "fedzo is not an algorithm of the run" in got[1][1]
  assert got[2] is None
  assert got[3] == ["smoothing", "--smoothing: must be > 0 and finite; got -1.0"]


def test_table_rows_mark_the_settings_without_a_flag():
  """config.table_rows (HYPERPARAMETERS.md, experiments.hparams): a field declared cli=False is named
  "NAME (no flag)", every other by its name alone."""
  from fedsim.algorithms.fzoos import FZooSConfig
  names = [row[0] for row in config.table_rows(FZooSConfig)]
  assert "rounds (no flag)" in names and "lr" in names and "lr (no flag)" not in names


@pytest.mark.parametrize("value, typ, optional, message", [
    ("5", int, False, "n: expected int, got str: '5' is not an integer"),
    (True, int, False, "n: expected int, got bool: True is not an integer"),
    (None, float, False, "n: expected float, got None"),
    (2, bool, False, "n: expected bool, got int: 2 is not a bool"),
    (1.5, str, True, "n: expected str or None, got float: 1.5 is not a string"),
])
def test_check_type_names_the_expected_and_the_given_type(value, typ, optional, message):
  with pytest.raises(config.FieldTypeError) as info:
    config.check_type("n", value, typ, optional)
  assert str(info.value) == message and isinstance(info.value, TypeError) and isinstance(info.value, ConfigError)


def test_check_type_accepts_what_the_type_means():
  import numpy as np
  for value, typ in [(3, int), (np.int64(3), int), (3, float), (0.5, float), (1, bool), (False, bool), ("a", str)]:
    config.check_type("n", value, typ)
  config.check_type("n", None, int, optional=True)
  config.check_type("n", pathlib.Path(REPO), str, optional=True)   # a path, where optional


def test_task_options_are_declared_once_and_agree_with_make_task_and_the_cli():
  """fedsim.tasks.TaskOptions is the declaration; make_task's own defaults, make_smooth_erm_task's and
  experiments.run's flags must not drift from it (a CLI run and an API run record the same options)."""
  import inspect

  from experiments import common, run  # noqa: F401 (run defines the flags)
  from fedsim.tasks import OPTION_FLAGS, TaskOptions, make_task, option_defaults
  from fedsim.tasks.logistic_soft import make_smooth_erm_task
  declared = option_defaults()
  assert [f.name for f in dataclasses.fields(TaskOptions)] == list(declared)
  own = {p.name: p.default for p in inspect.signature(make_task).parameters.values()
         if p.kind is p.KEYWORD_ONLY and p.name in declared}
  smooth = {{"heterogeneity": "data_heterogeneity"}.get(p.name, p.name): p.default
            for p in inspect.signature(make_smooth_erm_task).parameters.values()
            if p.kind is p.KEYWORD_ONLY and p.default is not p.empty and p.name not in ("seed",)}
  assert own == {k: declared[k] for k in own} and smooth == {k: declared[k] for k in smooth}
  # Every keyword of make_task that is not a data setting (an ExperimentConfig field) is declared.
  fields = {f.name for f in dataclasses.fields(api.ExperimentConfig)}
  keyword = {p.name for p in inspect.signature(make_task).parameters.values() if p.kind is p.KEYWORD_ONLY}
  assert keyword - fields <= set(declared)
  # The CLI: a flag per option (label_noise has none) with the declared default, named as OPTION_FLAGS says.
  assert set(common.TASK_OPTION_FLAGS.values()) == set(declared) - {"label_noise"}
  for flag, key in common.TASK_OPTION_FLAGS.items():
    assert OPTION_FLAGS.get(key, key) == flag
    assert common.FLAGS[flag].default == declared[key], flag
  for f in dataclasses.fields(TaskOptions):
    assert f.metadata["help"].strip() and "--" not in f.metadata["help"], f.name
