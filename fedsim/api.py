"""The library API: describe an experiment with :class:`ExperimentConfig`, run it with :func:`run`.

``experiments.run`` is this module behind flags: the same settings give the
same records, ``config.json``, ``<alg>/metrics.jsonl`` and ``curves.png``::

  import fedsim
  cfg = fedsim.ExperimentConfig(algorithms=("fedavg", "fedzo:local_steps=5"), rounds=20)
  histories = fedsim.run(cfg)            # {"fedavg": [record, ...], "fedzo-local_steps=5": [...]}
  histories["fedavg"][-1]["test_accuracy"]

A record is a dict of Python scalars: ``round``, the cumulative ledgers
(``queries``, ``bytes_up``, ``bytes_down``, ``participants``, ``empty_rounds``),
the task's evaluation (``objective``, e.g. ``test_accuracy``), the algorithm's
metrics and ``wall_time_s`` (see :func:`fedsim.core.engine.simulate`).

Importing this module is cheap: algorithms, tasks and data are imported when a
config is checked or run.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
import numbers
import os
import sys
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

from fedsim.config import FieldError, check_value, did_you_mean, field_type, hparam, hparam_fields
from fedsim.core.errors import ConfigError, DivergenceError

# fedsim's run defaults where the paper's value does not suit the embedded digits
# main job (experiments.run's too: its "binary default"): FedZO's paper eta = 1e-3
# (seed 001 §V-B) reaches ~0.72 test accuracy on digits in 200 rounds, 1e-2 reaches
# ~0.90. Give ``hparams={"fedzo": {"lr": 1e-3}}`` for the paper's value.
RUN_DEFAULTS = {"fedzo": {"lr": 1e-2}}

# The FFGB family (seed 002): scored on value caches, FFGB's communication cost.
FFGB_FAMILY = ("ffgb", "ffgb_nores", "ffgb_c", "ffgb_l", "ffgb_code", "ffgb_nores_code")

# Tasks that train or load cached models while being built (a progress line says so).
SLOW_TASKS = ("attack", "attack_cw", "metric_opt", "finetune")

# task_options defaults where make_task has none (experiments.run's flag defaults: --rank=8 is
# server_samples; seed 004 App. A).
TASK_OPTION_DEFAULTS = {
    "logistic_soft": {"samples_per_client": 40, "num_features": 2, "server_samples": 8, "max_rank": 32},
    "ridge": {"samples_per_client": 40, "num_features": 2, "server_samples": 8, "max_rank": 32},
}

# make_task arguments that are ExperimentConfig fields (not task_options).
_TASK_FIELDS = ("num_clients", "seed", "dataset", "data_dir", "partition", "dirichlet_alpha",
                "shards_per_client", "quantity_law", "quantity_sigma", "homo_ratio")


def _unknown(field: str, what: str, key: str, accepted) -> FieldError:
  accepted = list(accepted)
  return FieldError(field, f"unknown {what} {key!r}{did_you_mean(key, accepted)}; accepted: {', '.join(accepted)}")


def _entry_error(name: str, message: str) -> FieldError:
  """An error of one ``algorithms`` entry of algorithm ``name``: ``algorithms: NAME: MESSAGE`` from
  Python, ``--algorithm NAME: MESSAGE`` on the command line (``cli``)."""
  return FieldError("algorithms", f"{name}: {message}", cli=f"--algorithm {name}: {message}")


# How an error message names a setting that a user changes to get past it: from Python the
# ExperimentConfig field (``overwrite=True``), on the command line its flag (``--overwrite``).
_PYTHON_WORDS = {"overwrite": "overwrite=True", "resume": "resume=True", "output_dir": "output_dir"}
_FLAG_WORDS = {"overwrite": "--overwrite", "resume": "--resume", "output_dir": "--output_dir"}


def _setting_error(field: str, message: Callable[[dict], str]) -> FieldError:
  """FieldError of ``field`` whose message speaks Python (``message(_PYTHON_WORDS)``) and whose
  command-line text (``cli``) speaks flags (``message(_FLAG_WORDS)``)."""
  return FieldError(field, message(_PYTHON_WORDS), cli=f"--{field}: {message(_FLAG_WORDS)}")


class HparamError(ConfigError):
  """An algorithm's config rejects a hyperparameter value of an :class:`ExperimentConfig`.

  ``str(err)`` is ``"FIELD: LABEL HP (from SOURCE): MESSAGE"``, without ``--``.

  Attributes:
    flag: the ExperimentConfig field that supplied the value (``hparams``,
      ``algorithms`` for an entry's override, ``clients_per_round``, ``rounds``,
      ``comm_budget``; ``hparams`` for a default that another value makes invalid).
    label: the algorithm's label; hparam: the hyperparameter;
    source: where the value came from (see :meth:`ExperimentConfig.resolve`);
    message: what is accepted and the value given.
  """

  def __init__(self, field: str, label: str, hparam: str, source: str, message: str, name: str | None = None):
    ValueError.__init__(self, f"{field}: {label} {hparam} (from {source}): {message}")
    self.flag, self.label, self.hparam, self.source, self.message = field, label, hparam, source, message
    self.name = name or label  # the algorithm's registry name


class Resolved(NamedTuple):
  """One algorithm entry of an :class:`ExperimentConfig`, resolved (:meth:`ExperimentConfig.resolve`).

  Attributes:
    name: its name in ``fedsim.algorithms.REGISTRY``.
    values: every hyperparameter of its config -> the value it runs with.
    sources: every hyperparameter -> where that value came from.
  """

  name: str
  values: dict
  sources: dict


# A resolved value's source -> the ExperimentConfig field a user changes to change it.
_SOURCE_FIELDS = {"algorithm entry": "algorithms", "clients_per_round": "clients_per_round",
                  "rounds": "rounds", "comm_budget": "comm_budget"}


def run_label(spec: str) -> str:
  """The output-folder name (and history key) of an algorithm spec (':' -> '-', '/' -> '_')."""
  return spec.replace(":", "-").replace("/", "_")


def _field_type(cls, key: str):
  """The scalar type (bool, int, float or str) of config field ``key``; ``T | None`` -> T."""
  hint = typing.get_type_hints(cls).get(key, str)
  if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
    hint = next((a for a in typing.get_args(hint) if a is not type(None)), str)
  return hint if hint in (bool, int, float, str) else str


def _convert(typ, value: str):
  """``HP=VALUE`` text -> typ (bool: true/false/1/0, any case). Raises ValueError."""
  if typ is bool:
    low = value.lower()
    if low not in ("true", "false", "1", "0"):
      raise ValueError(value)
    return low in ("true", "1")
  return typ(value)


def parse_algorithm(entry) -> tuple[str, str, dict]:
  """One ``ExperimentConfig.algorithms`` entry -> (label, name, overrides).

  Args:
    entry: ``"NAME"``, ``"NAME:HP=VALUE[:HP=VALUE...]"`` (values parsed by the
      type of the algorithm config's field) or a ``(NAME, {HP: VALUE})`` pair.
      The label of a pair is that of the equivalent spec
      (``("fedzo", {"local_steps": 5})`` -> ``"fedzo-local_steps=5"``).

  Raises:
    ConfigError: unknown algorithm or hyperparameter (with a suggestion), a value
      that is not of the field's type, or a malformed entry.
  """
  from fedsim import algorithms
  if isinstance(entry, str):
    name, *items = entry.split(":")
    label, overrides, given = run_label(entry), {}, []
    for item in items:
      key, eq, value = item.partition("=")
      if not eq:
        raise _entry_error(name, f"bad override {item!r} in {entry!r}; expected HP=VALUE")
      given.append((key, value))
  elif (isinstance(entry, (tuple, list)) and len(entry) == 2 and isinstance(entry[0], str)
        and isinstance(entry[1], Mapping)):
    name, overrides, given = entry[0], dict(entry[1]), []
    label = run_label(":".join([name, *(f"{k}={v}" for k, v in overrides.items())]))
  else:
    raise FieldError("algorithms", f"entries are 'NAME', 'NAME:HP=VALUE' or (NAME, dict); got {entry!r}")
  if name not in algorithms.REGISTRY:
    raise _unknown("algorithms", "algorithm", name, algorithms.REGISTRY)
  fields = algorithms.config_fields(name)
  cls = algorithms.REGISTRY[name][0]
  for key, value in given:
    if key not in fields:
      raise _unknown_hparam(name, key, fields)
    typ = _field_type(cls, key)
    try:
      overrides[key] = _convert(typ, value)
    except ValueError:
      raise _entry_error(name, f"{key}={value!r} is not a{'n' if typ is int else ''} {typ.__name__}") from None
  for key in overrides:
    if key not in fields:
      raise _unknown_hparam(name, key, fields)
  return label, name, overrides


def _unknown_hparam(name: str, key: str, fields) -> FieldError:
  fields = list(fields)
  return _entry_error(name, f"unknown hyperparameter {key!r}{did_you_mean(key, fields)}; "
                      f"accepted: {', '.join(fields)}")


def comm_rounds(name: str, hp: dict, num_clients: int, budget: int) -> int:
  """Rounds within a communication budget (seed 002 Figs. 1, 4; [code] comm starts at 2).

  Returns:
    ceil((budget - 2) / cost), cost = m K models a round for the FFGB family
    (m = clients_per_round, all clients when None), 2 otherwise; >= 0.
  """
  if name in FFGB_FAMILY:
    cost = (hp.get("clients_per_round") or num_clients) * hp["local_steps"]
  else:
    cost = 2
  return max(0, -(-(budget - 2) // cost))


def _task_option_names() -> tuple[str, ...]:
  """The keys ``ExperimentConfig.task_options`` accepts (``make_task``'s other arguments)."""
  from fedsim.tasks import make_task
  from fedsim.tasks.logistic_soft import make_smooth_erm_task
  own = [p.name for p in inspect.signature(make_task).parameters.values()
         if p.kind is p.KEYWORD_ONLY and p.name not in _TASK_FIELDS]
  smooth = [p.name for p in inspect.signature(make_smooth_erm_task).parameters.values()
            if p.kind is p.KEYWORD_ONLY and p.name not in ("num_clients", "seed", "heterogeneity")]
  return tuple(own + ["data_heterogeneity"] + [n for n in smooth if n not in own])


@dataclasses.dataclass(frozen=True)
class ExperimentConfig:
  """One experiment: a task, algorithms run side by side on it, and how to run them.

  The defaults are the main job (``python -m experiments.run`` with no flags):
  digits, softmax, 100 clients, Dirichlet alpha = 0.5, 10 clients per round,
  FedAvg and FedZO side by side, 300 rounds. Checked when constructed.

  Attributes:
    task: a name of ``fedsim.tasks.TASKS``.
    dataset: a name of ``fedsim.data.DATASETS`` (supervised tasks).
    data_dir: folder (or LIBSVM file) with the dataset's files; None = the
      dataset's default.
    num_clients: N >= 1.
    partition: a name of ``fedsim.data.METHODS``; ``dirichlet_alpha``,
      ``shards_per_client``, ``quantity_law``, ``quantity_sigma`` and
      ``homo_ratio`` are its settings (``fedsim.data.partition``).
    task_options: further keyword arguments of ``fedsim.tasks.make_task``
      (``hidden_width``, ``dim``, ``heterogeneity``, ``classifier``,
      ``samples_per_client``, ``server_samples``, ...; over
      :data:`TASK_OPTION_DEFAULTS`); unknown keys raise.
    algorithms: like ``--algorithm``: a comma-separated string
      (``"fedavg,fedzo:lr=0.1"``) or a sequence of entries ``"NAME"``,
      ``"NAME:HP=VALUE[:HP=VALUE]"`` or ``(NAME, {HP: VALUE})``, NAME in
      ``fedsim.algorithms.REGISTRY``; stored as a tuple of entries. Each runs
      under its label (``"fedzo:local_steps=5"`` -> ``"fedzo-local_steps=5"``).
    hparams: ``{NAME or label: {HP: VALUE}}``. An algorithm's hyperparameters
      are, later winning: its config's (paper) defaults with the registry's
      overrides, :data:`RUN_DEFAULTS`, ``clients_per_round``, ``hparams[NAME]``,
      the entry's own overrides, ``hparams[label]``; each is checked by the
      algorithm's config dataclass when the config is made, and where it came
      from is recorded (:meth:`resolve`; config.json, the start-up log).
    clients_per_round: M, for every algorithm that samples clients.
    rounds: T >= 0 communication rounds (per algorithm ``comm_budget`` may
      replace it).
    eval_every: rounds per compiled chunk / between evaluations (>= 1).
    seed: root seed >= 0 (data partition, initialisation, all randomness).
    comm_budget: > 0 sets each algorithm's rounds to ``comm_rounds(...)``.
    checkpoint_every: K > 0 saves each algorithm's state every K rounds under
      ``<output_dir>/<label>/checkpoints`` (needs an output directory); -1 saves
      it every ``checkpoint_interval_s`` seconds (at chunk ends); 0 never.
    checkpoint_interval_s: seconds between saves with ``checkpoint_every = -1``.
    resume: continue each algorithm from its newest checkpoint there
      (metrics.jsonl kept up to it and appended; a finished algorithm is kept);
      refused when the output directory's ``config.json`` has other settings
      (:func:`record_settings`) or there is no checkpoint to continue from
      (:func:`check_rerun`).
    overwrite: recompute the run an output directory holds (with the same
      settings or others); without it, and without ``resume``, a directory
      holding another run or this run unfinished is refused, and one holding
      this run finished is left as it is (:func:`run` returns its records).
    save_learners: FFGB family: write each round's learners under
      ``<output_dir>/<label>/learners``.
    num_devices: devices of the ``clients`` mesh axis (0 = all).
    blas_threads: BLAS/LAPACK threads (process-wide; 0 = the libraries' default),
      see :func:`fedsim.runner.set_blas_threads`.
    compilation_cache: JAX's persistent compilation cache (process-wide):
      ``"auto"`` = ``~/.cache/fedsim/jax`` (``$XDG_CACHE_HOME/fedsim/jax``),
      ``""`` = off, else a folder; see :func:`fedsim.runner.enable_compilation_cache`.
    xla_cpu_emitters: XLA's CPU code emitters for the engine's programs
      (process-wide; :mod:`fedsim.core.compile_options`): ``"classic"`` (LLVM IR;
      compiles 1.4x-2x faster) or ``"fusion"`` (XLA's default; runs FedAvg on
      the MLP 9-13% faster, DeComFL / HiSo 3-10% slower). Results are the same bits.
    watchdog_s: > 0: a run that makes no progress (a set-up step, the start of an
      algorithm's compilation, an evaluation record) for this many seconds prints
      one line summarising its threads' stacks to stderr, writes every stack to
      ``<output_dir>/watchdog-<process>.txt`` and ends the process with status
      :data:`fedsim.results.EXIT_HUNG` (:mod:`fedsim.core.watchdog`); 0 = off.
    profile_dir: a folder for a JAX profiler trace of each algorithm's rounds 2-3
      (``PROFILE_DIR/LABEL``; :func:`fedsim.core.engine.simulate`'s ``profile_dir``);
      ``""`` = off. Results are unchanged.
    output_dir: where outputs go (None: nothing written); ``run``'s argument wins.
    progress: print one line per evaluation (and per divergence) to stdout/stderr.
    flags: the command-line flags this config was made from (recorded in
      config.json by the CLI); None from Python.
    source_names: how config.json and the start-up log name the sources of
      :meth:`resolve` (the CLI names its flags this way): keys are a source
      (``RUN_DEFAULTS``, ``clients_per_round``, ``rounds``, ``comm_budget``,
      ``hparams[KEY]``) or ``hparams[KEY].HP`` for one value; None: the sources' own names.

  Each field set from the command line is declared with :func:`fedsim.config.hparam`
  (help, accepted range): ``experiments/common.py`` makes its flag from that.

  Raises:
    ConfigError: (at construction; a :class:`fedsim.config.FieldError` worded for
      Python, ``"FIELD: MESSAGE"``) naming the field, the accepted values and the
      value given; unknown names or keys come with a "did you mean" suggestion; an
      ``algorithms`` entry's error names the entry's algorithm and hyperparameter.
  """

  # Each run setting's help and accepted range (fedsim.config.hparam metadata): checked when the config is
  # made (Python and CLI alike); experiments/common.py makes the flag of each from it.
  task: str = hparam("softmax", help="task (a name of fedsim.tasks.TASKS)")
  dataset: str = hparam("digits", help="dataset of the supervised tasks (a name of fedsim.data.DATASETS)")
  data_dir: str | None = hparam(None, help="folder (or LIBSVM file) with the dataset's files; None = its default")
  num_clients: int = hparam(100, help="N, number of clients", low=1)
  partition: str = hparam("dirichlet", help="how the data is split over clients (a name of fedsim.data.METHODS)")
  dirichlet_alpha: float = hparam(0.5, help="Dirichlet concentration of the label (or quantity) skew", low=0,
                                  low_open=True)
  shards_per_client: int = hparam(2, help="shards per client (partition shards)", low=1)
  quantity_law: str = hparam("lognormal", help="client-size law of partition quantity: lognormal, dirichlet")
  quantity_sigma: float = hparam(1.0, help="log-normal sigma of client sizes (partition quantity)", low=0,
                                 finite=True)
  homo_ratio: float = hparam(0.1, help="s: IID fraction of partition homo_ratio (FFGB §4)", low=0, high=1)
  task_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  algorithms: tuple = ("fedavg", "fedzo")
  hparams: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
  clients_per_round: int = hparam(10, help="M, clients sampled per round (M = N: full participation)", low=1)
  rounds: int = hparam(300, help="T, communication rounds", low=0)
  eval_every: int = hparam(10, help="rounds per compiled chunk / between evaluations", low=1)
  seed: int = hparam(0, help="root seed (data partition, initialisation, all randomness)", low=0)
  comm_budget: int = hparam(0, help="models per client (FFGB m*K a round, FedAvg 2, both start at 2); > 0 sets "
                            "each algorithm's rounds to ceil((budget - 2) / cost); 0 = use rounds", low=0)
  checkpoint_every: int = hparam(0, help="save the full state every K rounds (at the first chunk end at or after "
                                 "each multiple, the same rounds in every run; last 2 kept) under OUTPUT_DIR/LABEL/"
                                 "checkpoints; -1 = by time, every checkpoint_interval_s seconds (the usual way to "
                                 "turn checkpoints on); 0 = off", low=-1)
  # = fedsim.core.checkpoint.DEFAULT_INTERVAL_S (tests/core/test_checkpoint_time.py)
  checkpoint_interval_s: float = hparam(120.0, help="with checkpoint_every=-1: save at the first chunk end at least "
                                        "this many seconds after the start and after the previous save began (none "
                                        "while one is being written): a kill loses at most about this plus one "
                                        "chunk's (eval_every rounds') time, and saves cost at most one save's time / "
                                        "this (BUILD.md, 'Checkpoints by time')", low=0, low_open=True, finite=True,
                                        source="orbax ContinuousCheckpointingPolicy, counted from the start")
  resume: bool = hparam(False, help="continue each algorithm from its newest checkpoint in OUTPUT_DIR/LABEL/"
                        "checkpoints (metrics.jsonl kept up to it and appended); refused when OUTPUT_DIR/"
                        "config.json has other settings (each named, stored and given) or there is no "
                        "checkpoint to continue from")
  overwrite: bool = hparam(False, help="recompute the run that the output directory holds (without this or "
                           "resume a directory holding another run, or this one unfinished, is refused; one "
                           "holding this run finished is left untouched)")
  save_learners: bool = hparam(False, help="FFGB family: write each round's learners to OUTPUT_DIR/LABEL/learners/ "
                               "(needs store_learners >= eval_every)")
  num_devices: int = hparam(0, help="devices of the 'clients' mesh axis (0 = all)", low=0)
  blas_threads: int = hparam(1, help="threads of the BLAS/LAPACK libraries behind XLA's CPU linear algebra "
                             "(threadpoolctl; 0 = the libraries' default). 1 by default: jaxlib's Cholesky/LU "
                             "(FZooS GP and RFF fits, FFGB rf_ridge) runs 2 spinning OpenBLAS threads that slow "
                             "it 100x when other processes share the cores", low=0)
  compilation_cache: str = hparam("auto", help="JAX's persistent compilation cache, so a second run of the same "
                                  "configuration does not compile again: auto = ~/.cache/fedsim/jax "
                                  "($XDG_CACHE_HOME/fedsim/jax), empty = off, else a folder")
  xla_cpu_emitters: str = hparam("classic", help="XLA's CPU code emitters for the engine's programs "
                                 "(fedsim.core.compile_options): classic compiles 1.4x-2x faster, fusion (XLA's "
                                 "default) runs FedAvg on the MLP 9-13% faster; same results")
  watchdog_s: float = hparam(0.0, help="seconds without progress (a set-up step, the start of an algorithm's "
                             "compilation, an evaluation record) before the run prints its threads' stacks in one "
                             "line and exits with status 4 (fedsim.results.EXIT_HUNG); 0 = off", low=0, finite=True)
  profile_dir: str = hparam("", help="a folder for a JAX profiler trace of each algorithm's rounds 2-3 (the chunk "
                            "after the first, compiled by then; E+1..2E with eval_every E; none when the run is one "
                            "chunk) under PROFILE_DIR/LABEL; open it in TensorBoard's profile plugin or "
                            "ui.perfetto.dev; empty = off")
  output_dir: str | None = hparam(None, help="where config.json, metrics and curves.png go (from Python, "
                                  "None: nothing written)")
  progress: bool = True
  flags: Mapping[str, Any] | None = None
  source_names: Mapping[str, str] | None = None

  def __post_init__(self):
    # Like --algorithm: a comma-separated string or a sequence of entries (a string entry may hold
    # several, comma-separated: no entry has a comma of its own).
    given = [self.algorithms] if isinstance(self.algorithms, str) else self.algorithms
    if not isinstance(given, Iterable) or isinstance(given, Mapping):
      raise FieldError("algorithms", "must be a comma-separated string ('fedavg,fedzo:lr=0.1') or a list of "
                       f"entries ('NAME', 'NAME:HP=VALUE' or (NAME, {{HP: VALUE}})); got {self.algorithms!r}")
    entries = tuple(part.strip() if isinstance(e, str) else e
                    for e in given for part in (e.split(",") if isinstance(e, str) else [e]))
    object.__setattr__(self, "algorithms", tuple(e for e in entries if e != ""))
    object.__setattr__(self, "task_options", dict(self.task_options))
    if not isinstance(self.hparams, Mapping) or not all(
        isinstance(v, Mapping) for v in self.hparams.values()):
      raise FieldError("hparams", f"must map NAME or label -> {{HP: VALUE}}; got {self.hparams!r}")
    object.__setattr__(self, "hparams", {k: dict(v) for k, v in self.hparams.items()})
    if self.source_names is not None:
      if not isinstance(self.source_names, Mapping) or not all(
          isinstance(k, str) and isinstance(v, str) for k, v in self.source_names.items()):
        raise FieldError("source_names", f"must map a source -> its name; got {self.source_names!r}")
      object.__setattr__(self, "source_names", dict(self.source_names))
    self._check_types()
    self._check_ranges()
    self._check_names()
    self.resolve()  # every algorithm entry, hparams key and hyperparameter value

  def _check_types(self):
    hints = typing.get_type_hints(type(self))
    for f in dataclasses.fields(self):
      v, hint = getattr(self, f.name), hints[f.name]
      if hint is bool:
        ok = isinstance(v, (bool, numbers.Integral)) and v in (0, 1)
      elif hint is int:
        ok = isinstance(v, numbers.Integral) and not isinstance(v, bool)
      elif hint is float:
        ok = isinstance(v, numbers.Real) and not isinstance(v, bool)
      elif hint is str:
        ok = isinstance(v, str)
      elif hint == (str | None):
        ok = v is None or isinstance(v, (str, os.PathLike))
      else:
        continue
      if not ok:
        kind = {bool: "a bool", int: "an integer", float: "a number"}.get(hint, "a string")
        raise FieldError(f.name, f"must be {kind}; got {v!r}")

  def _check_ranges(self):
    """Each field's declared range (its ``hparam`` metadata), then the rules between fields."""
    for f in hparam_fields(type(self)):
      check_value(f.name, getattr(self, f.name), f.metadata, field_type(type(self), f.name),
                  optional=f.default is None)
    if not self.clients_per_round <= self.num_clients:
      raise FieldError("clients_per_round", f"must be in [1, num_clients={self.num_clients}]; "
                       f"got {self.clients_per_round}")
    if self.resume and self.overwrite:
      raise FieldError("overwrite", "cannot be combined with resume (continue the run or replace it)")
    if not self.algorithms:
      from fedsim import algorithms
      raise FieldError("algorithms", f"empty; accepted: {', '.join(algorithms.REGISTRY)}")

  def _check_names(self):
    from fedsim.core.compile_options import EMITTERS
    from fedsim.data import DATASETS
    from fedsim.data import METHODS as PARTITIONS
    from fedsim.data.partitions import QUANTITY_LAWS
    from fedsim.tasks import TASKS
    for name, accepted in (("task", TASKS), ("dataset", DATASETS), ("partition", PARTITIONS),
                           ("quantity_law", QUANTITY_LAWS), ("xla_cpu_emitters", EMITTERS)):
      if getattr(self, name) not in accepted:
        raise _unknown(name, name, getattr(self, name), accepted)
    accepted = _task_option_names()
    for key in self.task_options:
      if key not in accepted:
        raise _unknown("task_options", "task option", key, accepted)

  def resolve(self) -> dict[str, Resolved]:
    """Each algorithm entry's hyperparameters, with where each value came from.

    Sources, later winning: ``default`` (the config dataclass), ``registry
    preset`` (``fedsim.algorithms.REGISTRY``), ``RUN_DEFAULTS``,
    ``clients_per_round``, ``hparams[NAME]``, ``algorithm entry`` (``NAME:HP=V``
    or a pair's dict), ``hparams[label]``; FZooS's ``rounds`` is ``rounds`` (or
    ``comm_budget``) unless given. ``source_names`` renames them.

    Returns:
      ``{label: Resolved(name, values, sources)}``, in ``algorithms`` order.

    Raises:
      ConfigError: a bad entry, a repeated label, an ``hparams`` key that names no
        entry, or a hyperparameter the algorithm does not have.
      HparamError: (a ConfigError) a value the algorithm's config rejects, or a
        ``clients_per_round`` outside [1, num_clients].
    """
    from fedsim import algorithms
    parsed = [parse_algorithm(e) for e in self.algorithms]
    labels = [label for label, _, _ in parsed]
    if len(set(labels)) != len(labels):
      raise FieldError("algorithms", "an entry is repeated; give repeated algorithms different overrides")
    names = {name for _, name, _ in parsed}
    for key, hp in self.hparams.items():
      if key not in names and key not in labels:
        raise _unknown("hparams", "algorithm", key, dict.fromkeys([*labels, *sorted(names - set(labels))]))
      name = key if key in names else parsed[labels.index(key)][1]
      fields = algorithms.config_fields(name)
      for k in hp:
        if k not in fields:
          raise _unknown("hparams", f"{key} hyperparameter", k, fields)
    out = {}
    for label, name, overrides in parsed:
      values = algorithms.default_config(name)
      sources = dict.fromkeys(values, "default")
      layers = [("registry preset", algorithms.REGISTRY[name][1]), ("RUN_DEFAULTS", RUN_DEFAULTS.get(name, {})),
                ("clients_per_round", {"clients_per_round": self.clients_per_round}),
                (f"hparams[{name}]", self.hparams.get(name, {})), ("algorithm entry", overrides),
                (f"hparams[{label}]", self.hparams.get(label, {}) if label != name else {})]
      for source, layer in layers:
        for k, v in layer.items():
          if k in values:
            values[k], sources[k] = v, source
      if "rounds" in values and sources["rounds"] in ("default", "registry preset", "RUN_DEFAULTS"):
        values["rounds"] = self.rounds_for(name, values)  # FZooS sizes its history from the run
        sources["rounds"] = "comm_budget" if self.comm_budget > 0 else "rounds"
      self._check_values(label, name, values, sources)
      out[label] = Resolved(name, values, {k: self._source_name(s, k) for k, s in sources.items()})
    return out

  def _check_values(self, label: str, name: str, values: dict, sources: dict):
    """Raises HparamError unless algorithm ``name``'s config accepts ``values``."""
    from fedsim import algorithms

    def error(hp, message):
      src = sources.get(hp, "default")
      return HparamError(_SOURCE_FIELDS.get(src, "hparams"), label, hp, self._source_name(src, hp), message, name)
    try:
      algorithms.make_config(name, **values)
    except ConfigError as e:
      raise error(getattr(e, "field", e.flag), getattr(e, "message", str(e))) from None
    m = values.get("clients_per_round")
    if m is not None and not 1 <= m <= self.num_clients:
      raise error("clients_per_round", f"must be in [1, num_clients={self.num_clients}]; got {m}")

  def _source_name(self, source: str, hp: str) -> str:
    names = self.source_names or {}
    return names.get(f"{source}.{hp}", names.get(source, source))

  def algorithm_hparams(self) -> dict[str, tuple[str, dict]]:
    """``{label: (NAME, hyperparameters)}``, in ``algorithms`` order (:meth:`resolve` without sources)."""
    return {label: (r.name, r.values) for label, r in self.resolve().items()}

  def rounds_for(self, name: str, hp: dict) -> int:
    """Rounds algorithm ``name`` runs with hyperparameters ``hp`` (``comm_budget`` or ``rounds``)."""
    if self.comm_budget > 0:
      return comm_rounds(name, hp, self.num_clients, self.comm_budget)
    return self.rounds

  def task_kwargs(self) -> dict:
    """Keyword arguments of ``fedsim.tasks.make_task`` (besides the task's name)."""
    return {**{k: getattr(self, k) for k in _TASK_FIELDS}, **TASK_OPTION_DEFAULTS.get(self.task, {}),
            **self.task_options}

  def to_json(self) -> dict:
    """A JSON-friendly dict of the fields (config.json's ``experiment``)."""
    out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
           if f.name not in ("flags", "source_names")}
    out["algorithms"] = [e if isinstance(e, str) else [e[0], dict(e[1])] for e in self.algorithms]
    return out


# ExperimentConfig fields that do not change a run's records: a resume may change them
# (``rounds``/``comm_budget`` extend or shorten it; a hyperparameter they set, FZooS's
# ``rounds``, is compared with the algorithms'). ``hparams``/``algorithms`` are compared
# as each label's resolved hyperparameters.
RECORD_EXEMPT = ("rounds", "comm_budget", "checkpoint_every", "resume", "overwrite", "save_learners",
                 "num_devices", "blas_threads", "compilation_cache", "xla_cpu_emitters", "watchdog_s", "profile_dir",
                 "output_dir", "progress", "checkpoint_interval_s",
                 "flags", "source_names", "hparams", "algorithms")
_TASK_OPTIONS_EXEMPT = ("cache_dir",)


def record_settings(experiment: Mapping, algorithms: Mapping) -> dict:
  """The settings that decide a run's records, from config.json's ``experiment`` and
  ``algorithms`` (or :meth:`ExperimentConfig.to_json` and the resolved hyperparameters):
  every field but :data:`RECORD_EXEMPT`, ``task_options`` without ``cache_dir``, and
  ``{label: {"algorithm": NAME, HP: VALUE}}``; JSON-normalised (non-finite floats as text)."""
  from fedsim.files import strict_json
  out = {k: v for k, v in experiment.items() if k not in RECORD_EXEMPT}
  out["task_options"] = {k: v for k, v in dict(out.get("task_options") or {}).items()
                         if k not in _TASK_OPTIONS_EXEMPT}
  out["algorithms"] = {label: dict(hp) for label, hp in algorithms.items()}
  return json.loads(json.dumps(strict_json(out), default=str))


def settings_diff(stored: Mapping, given: Mapping, prefix: str = "") -> list[tuple[str, Any, Any]]:
  """``[(name, stored value, given value)]`` for every key whose value differs; nested dicts
  are compared key by key (named ``outer.inner``); a missing key's value is None."""
  out = []
  for k in list(dict.fromkeys([*stored, *given])):
    a, b = stored.get(k), given.get(k)
    if isinstance(a, Mapping) and isinstance(b, Mapping):
      out += settings_diff(a, b, f"{prefix}{k}.")
    elif a != b:
      out.append((f"{prefix}{k}", a, b))
  return out


def describe_diff(diff: list[tuple[str, Any, Any]]) -> str:
  """``"lr (fedzo): stored 0.01, given 0.5; ..."`` (``algorithms.LABEL.HP`` named ``HP (LABEL)``,
  ``task_options.KEY`` named ``KEY``)."""
  parts = []
  for name, a, b in diff:
    head, _, rest = name.partition(".")
    if head == "algorithms" and "." in rest:
      label, _, hp = rest.partition(".")
      name = f"{hp} ({label})"
    elif head == "algorithms" and rest:
      name = f"algorithm {rest}"
    elif head == "task_options" and rest:
      name = rest
    parts.append(f"{name}: stored {a!r}, given {b!r}")
  return "; ".join(parts)


def check_output_dir(path: str) -> None:
  """Checks that run outputs can be written under ``path`` (created later if missing).

  Raises:
    ConfigError: (field ``output_dir``) ``path`` is a file, lies under a file, or
      its nearest existing folder is not writable.
  """
  import tempfile
  full = os.path.abspath(path)
  if os.path.lexists(full) and not os.path.isdir(full):
    raise FieldError("output_dir", f"{path} exists and is not a folder")
  folder = full
  while not os.path.lexists(folder):
    folder = os.path.dirname(folder)
  if not os.path.isdir(folder):
    raise FieldError("output_dir", f"{path} is under {folder}, which is not a folder")
  try:
    with tempfile.TemporaryFile(dir=folder):
      pass
  except OSError as e:
    where = "" if folder == full else f" (in {folder})"
    raise FieldError("output_dir", f"{path} is not writable{where}: {e.strerror or e}") from None


def _stored_run(out_dir: str):
  """(config.json's dict or None, its path); a config.json that is not JSON is refused."""
  path = os.path.join(out_dir, "config.json")
  if not os.path.exists(path):
    return None, path
  try:
    with open(path) as f:
      stored = json.load(f)
  except (OSError, ValueError) as e:
    why = str(e)
    raise _setting_error("output_dir", lambda w: f"{path} is not readable JSON ({why}); pass {w['overwrite']} to "
                         f"replace the run, or use another {w['output_dir']}") from None
  return (stored if isinstance(stored, dict) else {}), path


def check_record(config: ExperimentConfig, out_dir: str, hps: Mapping[str, tuple[str, dict]]) -> list[str]:
  """Checks that running ``config`` in ``out_dir`` keeps the directory a true record of one run.

  A directory holding a run (``config.json``) with other record settings
  (:func:`record_settings`), or, for a new run, another ``rounds`` / ``comm_budget``,
  is refused unless ``overwrite``; ``resume`` is refused unless the record settings
  are equal (it may change the rounds).

  Returns:
    The labels of the stored run (their folders are replaced unless resuming).

  Raises:
    ConfigError: ``resume`` or ``output_dir``, naming each differing setting with the
      stored and the given value.
  """
  stored, path = _stored_run(out_dir)
  if stored is None:
    return []
  old = record_settings(stored.get("experiment") or {}, stored.get("algorithms") or {})
  new = record_settings(config.to_json(), {label: {"algorithm": name, **hp} for label, (name, hp) in hps.items()})
  diff = settings_diff(old, new)
  if not config.resume:  # a new run's length is part of the record (a resume may extend it)
    experiment = stored.get("experiment") or {}
    diff += settings_diff({k: experiment.get(k) for k in ("rounds", "comm_budget")},
                          {"rounds": config.rounds, "comm_budget": config.comm_budget})
  if diff and config.resume:
    raise _setting_error("resume", lambda w: f"{out_dir} holds a run with other settings ({describe_diff(diff)}); "
                         f"resume with its settings, or start anew with {w['overwrite']} or another "
                         f"{w['output_dir']}")
  if diff and not config.overwrite:
    raise _setting_error("output_dir", lambda w: f"{out_dir} holds another run ({describe_diff(diff)}); pass "
                         f"{w['overwrite']} to replace it, {w['resume']} with its settings to continue it, or "
                         f"use another {w['output_dir']}")
  return list((stored.get("algorithms") or {}).keys())


def _say(config: ExperimentConfig, field: str, value: str = "True") -> str:
  """How a message names setting ``field``: ``--field`` (``--field=value``) when the config came
  from the command line (``config.flags``), else ``field=value`` (Python)."""
  if config.flags is not None:
    return f"--{field}" if value == "True" else f"--{field}={value}"
  return f"{field}={value}"


class _Stored(NamedTuple):
  """One label of the run an output directory holds: its records, its rounds, its newest checkpoint."""

  history: list
  target: int
  checkpoint: int | None

  @property
  def complete(self) -> bool:
    """Its last record is at (or past) its rounds, or stopped it on a non-finite objective."""
    last = self.history[-1] if self.history else None
    return last is not None and (last["round"] >= self.target or not math.isfinite(last["objective"]))

  @property
  def progress(self) -> bool:
    """It has records past round 0 (work a new run would redo)."""
    return bool(self.history) and self.history[-1]["round"] > 0

  def describe(self, label: str) -> str:
    if self.complete:
      return f"{label} complete"
    if not self.history:
      return f"{label} not started"
    ckpt = f"checkpoint at round {self.checkpoint}" if self.checkpoint is not None else "no checkpoint"
    return f"{label} at round {self.history[-1]['round']} of {self.target}, {ckpt}"


def check_rerun(config: ExperimentConfig, out_dir: str, hps: Mapping[str, tuple[str, dict]]) -> dict[str, list]:
  """What running ``config`` again in ``out_dir`` does, when that directory holds a run with the
  same record settings (:func:`check_record` passed): a rerun never recomputes or drops records silently.

  * A finished run (every label's ``metrics.jsonl`` reaches its rounds, or stopped on a
    non-finite objective): its records are returned and nothing is run or written.
  * An unfinished run is refused unless ``resume`` (it continues from each label's newest
    checkpoint; finished labels are kept) or ``overwrite`` (it is recomputed); a run that
    recorded nothing past round 0 starts anew.
  * ``resume`` is refused when there is nothing to resume from: no run in ``out_dir``, or a
    label with records past round 0 and no checkpoint, or no checkpoint and no finished label.

  Returns:
    {label: stored records} of the finished labels (all of them: the run is complete).

  Raises:
    ConfigError: (``output_dir``, or ``resume`` when resuming) one line naming each label's
      state and the settings that would work (``resume``, ``overwrite``, ``checkpoint_every``).
  """
  from fedsim.core import checkpoint
  from fedsim.results import read_metrics
  if not os.path.exists(os.path.join(out_dir, "config.json")):
    if config.resume:
      raise ConfigError("resume", f"nothing to resume: {out_dir} holds no run; start it without "
                        f"{_say(config, 'resume')}")
    return {}
  if config.overwrite:
    return {}
  runs = {}
  for label, (name, hp) in hps.items():
    path = os.path.join(out_dir, label, "metrics.jsonl")
    try:
      history = read_metrics(path) if os.path.exists(path) else []
    except ValueError as e:
      raise ConfigError("output_dir", f"{e}; {_say(config, 'overwrite')} to recompute the run") from None
    runs[label] = _Stored(history, config.rounds_for(name, hp),
                          checkpoint.latest_round(os.path.join(out_dir, label, "checkpoints")))
  done = {label: r.history for label, r in runs.items() if r.complete}
  if len(done) == len(runs):
    return done
  where = "; ".join(r.describe(label) for label, r in runs.items())
  lost = [label for label, r in runs.items() if not r.complete and r.progress and r.checkpoint is None]
  recompute = (f"{_say(config, 'overwrite')} recomputes it (add {_say(config, 'checkpoint_every', 'K')} so "
               f"that {_say(config, 'resume')} can continue it after an interruption)")
  if config.resume:
    if lost or not (done or any(r.checkpoint is not None for r in runs.values())):
      raise ConfigError("resume", f"no checkpoint to resume from in {out_dir} ({where}); {recompute}")
    return done
  if not any(r.progress for r in runs.values()):
    return {}  # nothing past round 0 recorded: nothing to lose
  if lost:
    raise ConfigError("output_dir", f"{out_dir} holds this run unfinished, without checkpoints ({where}); "
                      f"{recompute}")
  raise ConfigError("output_dir", f"{out_dir} holds this run unfinished ({where}); {_say(config, 'resume')} "
                    f"to continue it, or {_say(config, 'overwrite')} to recompute it")


def complete_line(config: ExperimentConfig, out_dir: str, histories: Mapping[str, list]) -> str:
  """``complete: 200 rounds in DIR; --overwrite to recompute`` (per label when their rounds differ;
  labels stopped on a non-finite objective named)."""
  last = {label: h[-1]["round"] for label, h in histories.items()}
  rounds = (f"{next(iter(last.values()))}" if len(set(last.values())) == 1
            else ", ".join(f"{label} {r}" for label, r in last.items()))
  gone = diverged(dict(histories))
  stopped = f" ({', '.join(gone)} stopped on a non-finite objective)" if gone else ""
  return f"complete: {rounds} rounds in {out_dir}{stopped}; {_say(config, 'overwrite')} to recompute"


def build_task(config: ExperimentConfig):
  """The task of ``config`` (loads and partitions data; may train cached models).

  Raises:
    ConfigError: a bad task setting or data file (naming it).
  """
  from fedsim.tasks import make_task
  return make_task(config.task, **config.task_kwargs())


def diverged(histories: dict[str, list[dict]]) -> list[str]:
  """Labels of the algorithms whose last objective is NaN or inf (they stopped there)."""
  return [label for label, h in histories.items() if h and not math.isfinite(h[-1]["objective"])]


def _version():
  from importlib import metadata
  try:
    return metadata.version("fedsim")
  except metadata.PackageNotFoundError:
    return "unknown"


def run(config: ExperimentConfig, output_dir: str | None = None,
        callbacks: tuple[Callable[[str, dict], None], ...] = ()) -> dict[str, list[dict]]:
  """Runs every algorithm of ``config`` on its task, one after the other.

  Everything is checked (task built, each algorithm built once) before anything
  is written or compiled. With an output directory, writes ``config.json``,
  ``<label>/metrics.jsonl`` (as records arrive) and ``curves.png`` (after each
  algorithm), like ``experiments.run``; only process 0 of a multi-host run
  (``fedsim.core.distributed``) writes or prints. ``config.json``'s
  ``hyperparameters`` holds, per label, each hyperparameter's value and source
  (:meth:`ExperimentConfig.resolve`); with ``progress``, one start-up line per
  algorithm lists its values that are not the config's defaults, with their
  sources (:func:`fedsim.runner.provenance_line`). A NaN/inf objective stops that
  algorithm (its records so far are kept, the last one non-finite; see
  :func:`diverged`) and the run goes on with the next.

  Args:
    config: the experiment.
    output_dir: where the outputs go; None uses ``config.output_dir`` (None too:
      nothing is written).
    callbacks: each is called as ``callback(label, record)`` after every new
      evaluation (all processes).

  Returns:
    ``{label: [record, ...]}`` in ``config.algorithms`` order (a resumed run's
    kept records first). When the output directory already holds this run
    finished (same settings, every algorithm at its rounds), its stored
    records, without running or writing anything (one line with ``progress``:
    ``complete: N rounds in DIR; overwrite=True to recompute``).

  The output directory is checked before the task is built
  (:func:`check_output_dir`, :func:`check_record`): it must be writable, and a
  directory that holds a run with other settings is refused unless ``overwrite``
  (or ``resume`` with the same settings); with the same settings, a finished
  run is returned as stored and an unfinished one is refused unless ``resume``
  or ``overwrite`` (:func:`check_rerun`). A new run replaces the algorithm
  folders of the run it finds there. Every file is written atomically or
  appended line by line (:mod:`fedsim.files`); ``metrics.jsonl`` is strict JSON
  (a NaN/inf value is ``null``, listed under the record's ``nonfinite``).

  With ``config.watchdog_s > 0`` the run is watched (:mod:`fedsim.core.watchdog`): no progress
  (a set-up step, the start of an algorithm, an evaluation record) for that long prints one
  line naming each thread's innermost frames to stderr and ends the process with status
  :data:`fedsim.results.EXIT_HUNG` (4), from any process of a multi-host run; there an error
  (a dead peer's collective fails) leaves it watching, so a process that cannot shut down
  (the runtime waits for the dead peer) is ended too.

  Raises:
    ConfigError: a bad setting (naming it), checkpointing without an output
      directory, an unusable output directory or one holding another run (or
      this run unfinished, or nothing to resume), or an algorithm that rejects
      the task (field ``algorithm``).
    OutputError: (a ConfigError, field ``output_dir``) an output file cannot be
      written (e.g. the disk is full); the records written so far are kept.
  """
  import jax

  from fedsim.core.watchdog import Watchdog

  out_dir = output_dir if output_dir is not None else config.output_dir
  dump = None  # written when it fires, if the output directory exists by then
  if config.watchdog_s > 0 and out_dir is not None:
    dump = os.path.join(os.fspath(out_dir), f"watchdog-{jax.process_index()}.txt")
  # Multi-process: an error (a dead peer's collective) is followed by a shutdown that waits for the
  # peer forever, so the watchdog keeps guarding the exit.
  with Watchdog(config.watchdog_s, dump_path=dump, guard_error_exit=jax.process_count() > 1) as watchdog:
    return _run(config, out_dir, callbacks, watchdog)


def _run(config: ExperimentConfig, out_dir, callbacks, watchdog) -> dict[str, list[dict]]:
  """:func:`run`'s body; ``watchdog.beat`` marks each step of progress."""
  import jax

  from fedsim import algorithms
  from fedsim.core import compile_options, distributed
  from fedsim.core.engine import simulate
  from fedsim.core.sharding import client_mesh, shard_task
  from fedsim.runner import ProgressWriter, enable_compilation_cache, plot_curves, provenance_line, set_blas_threads

  out_dir = os.fspath(out_dir) if out_dir is not None else None
  if (config.checkpoint_every != 0 or config.resume or config.save_learners) and out_dir is None:
    raise FieldError("output_dir", "checkpoint_every, resume and save_learners need an output directory")
  if config.num_devices > jax.device_count():
    raise FieldError("num_devices", f"must be in [0, {jax.device_count()}]; got {config.num_devices}")
  main = distributed.is_main()
  echo = config.progress and main
  resolved = config.resolve()
  hps = {label: (r.name, r.values) for label, r in resolved.items()}
  stale: list[str] = []
  done: dict[str, list] = {}
  if out_dir is not None:  # before anything is built or written (another run, a finished one, a bad directory)
    stale = check_record(config, out_dir, hps)
    done = check_rerun(config, out_dir, hps)
    if len(done) == len(hps):  # finished: its records, nothing run or written
      if echo:
        print(complete_line(config, out_dir, done), flush=True)
      return {label: done[label] for label in hps}
    check_output_dir(out_dir)
  enable_compilation_cache(config.compilation_cache)  # before the first compilation (task models)
  compile_options.set_cpu_emitters(config.xla_cpu_emitters)  # before the engine builds its programs
  if echo and config.task in SLOW_TASKS:
    print(f"building task {config.task} (trains or loads cached models) ...", flush=True)
  watchdog.beat("set-up")
  task = build_task(config)
  watchdog.beat("task built")
  for label, (name, hp) in hps.items():
    try:  # builders check their own settings (shapes, laws) without compiling
      algorithms.build(name, task, **hp)
    except ValueError as e:
      if isinstance(e, ConfigError):
        raise
      raise ConfigError("algorithm", f"{label}: {e}") from None

  set_blas_threads(config.blas_threads)
  mesh = client_mesh(config.num_devices or None)
  task = shard_task(task, mesh)
  watchdog.beat("algorithms checked, task sharded")
  record = {**({"flags": dict(config.flags)} if config.flags is not None else {}),
            "version": _version(), "jax_version": jax.__version__, "backend": jax.default_backend(),
            "devices": mesh.devices.size, "processes": jax.process_count(),
            "task": {"name": task.name, "dim": task.dim, **task.info},
            "algorithms": {label: {"algorithm": name, **hp} for label, (name, hp) in hps.items()},
            "hyperparameters": {label: {k: {"value": v, "source": r.sources[k]} for k, v in r.values.items()}
                                for label, r in resolved.items()},
            "experiment": config.to_json()}
  if out_dir is not None:
    try:
      os.makedirs(out_dir, exist_ok=True)  # every process (checkpoints need it)
      if main:
        if not config.resume:  # a new run (or --overwrite): the old one's folders (and curves) go
          if os.path.exists(os.path.join(out_dir, "curves.png")):
            os.remove(os.path.join(out_dir, "curves.png"))
          import shutil
          for label in dict.fromkeys([*stale, *hps]):
            if os.path.isdir(os.path.join(out_dir, label)):
              shutil.rmtree(os.path.join(out_dir, label))
        from fedsim.files import atomic_write, strict_json
        atomic_write(os.path.join(out_dir, "config.json"),
                     json.dumps(strict_json(record), indent=2, default=str, allow_nan=False) + "\n")
    except OSError as e:
      from fedsim.core.errors import OutputError
      raise OutputError(f"cannot write {out_dir}: {e.strerror or e}") from None
  if echo:
    entries = [e if isinstance(e, str) else label for e, label in zip(config.algorithms, hps)]
    print(f"task {task.name}: d = {task.dim}, N = {task.num_clients}; "
          f"algorithms {', '.join(entries)}; output {out_dir}", flush=True)
    for label, r in resolved.items():
      print(provenance_line(label, r.values, r.sources), flush=True)

  histories = {}
  title = f"{task.name} on {task.info.get('dataset', task.name)}, N = {task.num_clients}"
  for label, (name, hp) in hps.items():
    if label in done:  # resuming: a finished algorithm keeps its records
      histories[label] = done[label]
      continue
    # Built on the sharded task (cheap: builders only close over functions).
    alg = algorithms.build(name, task, **hp)
    alg_dir = os.path.join(out_dir, label) if out_dir is not None else None
    if alg_dir is not None:
      os.makedirs(alg_dir, exist_ok=True)
    rounds, run_task = config.rounds_for(name, hp), task
    if name in FFGB_FAMILY:  # scored on its value caches (fedsim.tasks.functional)
      from fedsim.tasks.functional import cache_view
      run_task = cache_view(task)
      if config.save_learners:
        from fedsim.algorithms import ffgb
        assert alg_dir is not None  # save_learners needs an output directory (checked above)
        alg = ffgb.attach_learner_writer(alg, os.path.join(alg_dir, "learners"), alg.hparams, name)
    ckpt_dir = os.path.join(alg_dir, "checkpoints") if alg_dir is not None else None
    resumed = None
    if config.resume:
      from fedsim.core import checkpoint
      assert ckpt_dir is not None  # resume needs an output directory (checked above)
      resumed = checkpoint.latest_round(ckpt_dir)
    writer = ProgressWriter(label, os.path.join(alg_dir, "metrics.jsonl") if alg_dir else None,
                            rounds, keep_until=resumed, write=main, echo=config.progress,
                            callbacks=(*callbacks, lambda lab, rec: watchdog.beat(f"{lab} round {rec['round']}")))
    if resumed is not None and echo:
      print(f"[{label}] resuming from round {resumed} ({ckpt_dir})", flush=True)
    watchdog.beat(f"{label} compiling")
    try:
      simulate(alg, run_task, rounds, config.eval_every, jax.random.key(config.seed), on_eval=writer,
               checkpoint_dir=ckpt_dir, checkpoint_every=config.checkpoint_every, resume=config.resume,
               checkpoint_interval_s=config.checkpoint_interval_s,
               profile_dir=os.path.join(config.profile_dir, label) if config.profile_dir else None)
    except DivergenceError as e:
      writer.close()
      if echo:
        print(f"[{label}] diverged: {e}", file=sys.stderr, flush=True)
    finally:
      writer.close()
      histories[label] = writer.history
    if main and out_dir is not None and _plottable(histories):
      try:
        plot_curves(histories, os.path.join(out_dir, "curves.png"), title=title)
      except OSError as e:
        from fedsim.core.errors import OutputError
        raise OutputError(f"cannot write {out_dir}/curves.png: {e.strerror or e}; metrics are kept") from None
  if echo and out_dir is not None:
    curves = ", curves.png" if _plottable(histories) else " (no curves.png: no algorithm ran a round)"
    print(f"wrote {out_dir}/config.json, */metrics.jsonl{curves}", flush=True)
  return histories


def _plottable(histories: dict[str, list[dict]]) -> bool:
  """Whether curves.png has a curve to draw: some algorithm has records of two rounds (rounds=0 has one)."""
  return any(len(h) > 1 for h in histories.values())
