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
import functools
import os
import sys
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

from fedsim.config import (
  FieldError,
  FieldTypeError,
  check_type,
  check_value,
  did_you_mean,
  field_type,
  hparam,
  hparam_fields,
)
from fedsim.core.errors import ConfigError, DivergenceError

# fedsim's run defaults where the paper's value does not suit the embedded digits
# main job (experiments.run's too: its "binary default"): FedZO's paper eta = 1e-3
# (Fang et al. 2022, §V-B) reaches ~0.72 test accuracy on digits in 200 rounds, 1e-2 reaches
# ~0.90. Give ``hparams={"fedzo": {"lr": 1e-3}}`` for the paper's value.
RUN_DEFAULTS = {"fedzo": {"lr": 1e-2}}

# The FFGB family (Shen et al. 2022): scored on value caches, FFGB's communication cost.
FFGB_FAMILY = ("ffgb", "ffgb_nores", "ffgb_c", "ffgb_l", "ffgb_code", "ffgb_nores_code")

# Tasks that train or load cached models while being built (a progress line says so).
SLOW_TASKS = ("attack", "attack_cw", "metric_opt", "finetune")

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
  """Rounds within a communication budget (Shen et al. 2022, Figs. 1, 4; [code] comm starts at 2).

  Returns:
    ceil((budget - 2) / cost), cost = m K models a round for the FFGB family
    (m = clients_per_round, all clients when None), 2 otherwise; >= 0.
  """
  if name in FFGB_FAMILY:
    cost = (hp.get("clients_per_round") or num_clients) * hp["local_steps"]
  else:
    cost = 2
  return max(0, -(-(budget - 2) // cost))


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
      ``samples_per_client``, ``server_samples``, ...), each declared with its
      default, help and accepted values by ``fedsim.tasks.TaskOptions``; unknown
      keys and bad values raise when the config is made. The run (and config.json)
      uses every option, the ones not given at their defaults
      (:meth:`resolved_task_options`), as ``experiments.run`` does.
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
      Python, ``"FIELD: MESSAGE"``, never ``--FIELD``) naming the field, the accepted
      values and the value given; unknown names or keys come with a "did you mean"
      suggestion; an ``algorithms`` entry's error names the entry's algorithm and
      hyperparameter; a task option's names the option (``hidden_width: must be >= 1;
      got -3``); an algorithm that cannot run on the task (``fedsim.algorithms.TASK_NEEDS``,
      function-space tasks) names ``task`` (or the task option, or ``algorithms``).
    FieldTypeError: (a FieldError and a TypeError) a value of the wrong type
      (``rounds: expected int, got str: '10' is not an integer``) or an unknown
      keyword argument (with a "did you mean" suggestion).
  """

  # Each run setting's help and accepted range (fedsim.config.hparam metadata): checked when the config is
  # made (Python and CLI alike); experiments/common.py makes the flag of each from it.
  task: str = hparam("softmax", help="task (a name of fedsim.tasks.TASKS)")
  dataset: str = hparam("digits", help="dataset of the supervised tasks (a name of fedsim.data.DATASETS)")
  data_dir: str | None = hparam(None, help="folder (or LIBSVM file) with the dataset's files; None = its folder "
                                "in the data cache, $FEDSIM_DATA (python -m fedsim.data fetch NAME)")
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
    if not isinstance(self.task_options, Mapping):
      raise FieldTypeError("task_options", f"expected a dict of task options, got {type(self.task_options).__name__}")
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
    resolved = self.resolve()  # every algorithm entry, hparams key and hyperparameter value
    self._check_task_needs(resolved)

  def _check_types(self):
    hints = typing.get_type_hints(type(self))
    for f in dataclasses.fields(self):
      hint = hints[f.name]
      if hint in (bool, int, float, str) or hint == (str | None):
        check_type(f.name, getattr(self, f.name), field_type(type(self), f.name), optional=hint == (str | None))

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
    from fedsim.tasks import check_options
    check_options(self.task, self.task_options, self.dataset)

  def _check_task_needs(self, resolved: dict[str, Resolved]):
    """Raises FieldError when an algorithm cannot run on the task (``fedsim.algorithms.unmet_need``)."""
    from fedsim import algorithms
    from fedsim.tasks import OPTION_FLAGS, option_error
    options = self.resolved_task_options()
    for r in resolved.values():
      unmet = algorithms.unmet_need(r.name, r.values, self.task, options)
      if unmet is None:
        continue
      need, key = unmet
      if not need.tasks:  # a function-space task
        family = [n for n, (cls, _, _) in algorithms.REGISTRY.items() if cls is algorithms.FFGBConfig]
        raise _entry_error(r.name, f"task {self.task} is a function-space task (value caches, no parameter "
                           f"vector): it runs the FFGB family ({', '.join(family)}), not {r.name}")
      if key is not None:
        raise option_error(key, f"must be {need.options[key]!r} for {r.name} (it needs {need.what}); "
                                f"got {options[key]!r}")
      cond = "".join(f" with {k}={v!r}" for k, v in need.when.items())
      instead = f" (or {need.instead})" if need.instead else ""

      def say(flags: bool, need=need, r=r, cond=cond, instead=instead) -> str:
        opts = "".join(f" --{OPTION_FLAGS.get(k, k)}={v}" if flags else f" with task_options {k}={v!r}"
                       for k, v in need.options.items())
        tasks = (f"--task={need.tasks[0]}{opts}" if flags else f"task={need.tasks[0]!r}{opts}"
                 ) if len(need.tasks) == 1 else f"one of {', '.join(need.tasks)}"
        return f"{r.name}{cond} needs {need.what}: {tasks}{instead}; got {self.task!r}"
      raise FieldError("task", say(False), cli=f"--task: {say(True)}")

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
    kept = values.get("store_learners")
    if self.save_learners and kept is not None and kept < self.eval_every:  # every evaluation's learners
      raise error("store_learners", f"must be >= eval_every={self.eval_every} with save_learners; got {kept}")

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

  def resolved_task_options(self) -> dict:
    """Every task option (``fedsim.tasks.TaskOptions``) -> its value: ``task_options``'s, else the default."""
    from fedsim.tasks import resolve_options
    return resolve_options(self.task_options)

  def task_kwargs(self) -> dict:
    """Keyword arguments of ``fedsim.tasks.make_task`` (besides the task's name): the data settings and
    every task option (:meth:`resolved_task_options`)."""
    return {**{k: getattr(self, k) for k in _TASK_FIELDS}, **self.resolved_task_options()}

  def to_json(self) -> dict:
    """A JSON-friendly dict of the fields (config.json's ``experiment``); ``task_options`` holds every
    option (:meth:`resolved_task_options`), so a config that gives an option at its default and one
    that leaves it out record the same (``experiments.run`` gives every option)."""
    out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
           if f.name not in ("flags", "source_names")}
    out["task_options"] = self.resolved_task_options()
    out["algorithms"] = [e if isinstance(e, str) else [e[0], dict(e[1])] for e in self.algorithms]
    return out


_FIELD_NAMES = tuple(f.name for f in dataclasses.fields(ExperimentConfig))


def _checked_init(init):
  """ExperimentConfig's ``__init__``, refusing an unknown keyword argument with a suggestion first."""
  @functools.wraps(init)
  def __init__(self, *args, **kwargs):
    for key in kwargs:
      if key not in _FIELD_NAMES:
        raise FieldTypeError(key, f"unknown setting of ExperimentConfig{did_you_mean(key, _FIELD_NAMES)}; "
                                  f"accepted: {', '.join(_FIELD_NAMES)}")
    init(self, *args, **kwargs)
  return __init__


ExperimentConfig.__init__ = _checked_init(ExperimentConfig.__init__)  # type: ignore[method-assign]


def check_run_arguments(config, output_dir, callbacks) -> tuple[ExperimentConfig, Any, tuple]:
  """:func:`run`'s arguments, checked before any work: ``(config, output_dir, callbacks)`` with
  ``callbacks`` a tuple (a single callable is one callback).

  Raises:
    FieldTypeError: (a ConfigError and a TypeError) ``config`` is not an ExperimentConfig (a dict:
      make one with ``fedsim.ExperimentConfig(**settings)``), ``output_dir`` is not a path or None, or
      a callback is not callable.
  """
  if not isinstance(config, ExperimentConfig):
    hint = "; make one: fedsim.run(fedsim.ExperimentConfig(**settings))" if isinstance(config, Mapping) else ""
    raise FieldTypeError("config", f"expected ExperimentConfig, got {type(config).__name__}{hint}")
  if output_dir is not None and not isinstance(output_dir, (str, os.PathLike)):
    raise FieldTypeError("output_dir", f"expected a path (str) or None, got {type(output_dir).__name__}")
  if callable(callbacks):
    callbacks = (callbacks,)
  if not isinstance(callbacks, Iterable) or isinstance(callbacks, (str, Mapping)):
    raise FieldTypeError("callbacks", f"expected a sequence of callables callback(label, record), "
                                      f"got {type(callbacks).__name__}")
  callbacks = tuple(callbacks)
  for i, cb in enumerate(callbacks):
    if not callable(cb):
      raise FieldTypeError("callbacks", f"item {i}: expected a callable callback(label, record), "
                                        f"got {type(cb).__name__}: {cb!r}")
  return config, output_dir, callbacks


def build_task(config: ExperimentConfig):
  """The task of ``config`` (loads and partitions data; may train cached models).

  Raises:
    ConfigError: a bad task setting or data file (naming it).
  """
  from fedsim.tasks import make_task
  return make_task(config.task, **config.task_kwargs())




# The output folder's policy lives in fedsim.run_folder; these names stay importable from here.
from fedsim.run_folder import (  # noqa: E402
  Histories,
  check_output_dir,
  check_record,
  describe_diff,
  diverged,
  record_settings,
  settings_diff,
)

__all__ = ["ExperimentConfig", "Histories", "run", "build_task", "check_output_dir", "check_record", "describe_diff",
           "diverged", "record_settings", "settings_diff"]


def run(config: ExperimentConfig, output_dir: str | None = None,
        callbacks: tuple[Callable[[str, dict], None], ...] = ()) -> Histories:
  """Runs every algorithm of ``config`` on its task, one after the other.

  The story: resolve the settings; claim the output folder (:class:`fedsim.run_folder.RunFolder`:
  another run, other code, a live writer or an unfinished run is refused; this run finished is
  returned as stored); build the task and check every algorithm before anything is written or
  compiled; write ``config.json`` (settings, each hyperparameter's value and source, the code's
  provenance, :mod:`fedsim.provenance`); run each algorithm in compiled chunks, appending
  ``<label>/metrics.jsonl`` and redrawing ``curves.png``. Only process 0 of a multi-host run
  writes or prints. A NaN/inf objective stops that algorithm (its records are kept; see
  :func:`diverged`) and the run goes on. SIGINT and SIGTERM stop it at the end of the current
  chunk (:mod:`fedsim.interrupts`). ``config.watchdog_s > 0`` ends a run that makes no progress
  for that long (:mod:`fedsim.core.watchdog`, exit status 4).

  Args:
    config: the experiment.
    output_dir: where the outputs go; None uses ``config.output_dir`` (None too: nothing is written).
    callbacks: each is called as ``callback(label, record)`` after every new evaluation (all processes).

  Returns:
    :class:`~fedsim.run_folder.Histories`: ``{label: [record, ...]}`` in ``config.algorithms`` order
    (a resumed run's kept records first), with ``stored`` (True: read from the folder, nothing run),
    ``output_dir`` and ``provenance``.

  Raises:
    ConfigError: a bad setting (naming it), an unusable or refused output folder
      (:mod:`fedsim.run_folder`), or an algorithm that rejects the task (field ``algorithm``).
    OutputError: (a ConfigError, field ``output_dir``) an output file cannot be written; the
      records written so far are kept.
    Interrupted: SIGINT or SIGTERM stopped the run (a ``KeyboardInterrupt``; its message says
      where ``resume`` continues).
  """
  config, output_dir, callbacks = check_run_arguments(config, output_dir, callbacks)
  import jax

  from fedsim.core import distributed
  from fedsim.core.watchdog import Watchdog
  from fedsim.interrupts import GracefulStop
  from fedsim.run_folder import RunFolder, stored_histories

  where = output_dir if output_dir is not None else config.output_dir
  out_dir = os.fspath(where) if where is not None else None
  if (config.checkpoint_every != 0 or config.resume or config.save_learners) and out_dir is None:
    raise FieldError("output_dir", "checkpoint_every, resume and save_learners need an output directory")
  if config.num_devices > jax.device_count():
    raise FieldError("num_devices", f"must be in [0, {jax.device_count()}]; got {config.num_devices}")
  main, echo = distributed.is_main(), config.progress and distributed.is_main()
  resolved = config.resolve()
  dump = os.path.join(out_dir, f"watchdog-{jax.process_index()}.txt") if config.watchdog_s > 0 and out_dir else None
  # Multi-process: an error (a dead peer's collective) is followed by a shutdown that waits for the
  # peer forever, so the watchdog keeps guarding the exit.
  with Watchdog(config.watchdog_s, dump_path=dump, guard_error_exit=jax.process_count() > 1) as watchdog, \
       RunFolder.claim(config, out_dir, {k: (r.name, r.values) for k, r in resolved.items()}, main) as folder:
    if folder.finished is not None:  # this run, finished by this code: its records, nothing run or written
      return stored_histories(config, folder, echo)
    task = _build(config, resolved, watchdog)
    folder.start(_config_record(config, task, resolved), config.resume, main)
    if echo:
      _announce(config, task, resolved, folder.path)
    histories = Histories(output_dir=folder.path, provenance=folder.provenance)
    with GracefulStop(enabled=jax.process_count() == 1, echo=echo) as stop:
      for label, r in resolved.items():
        histories[label] = folder.done.get(label) or _run_algorithm(config, task, label, r, folder, callbacks,
                                                                   watchdog, stop, main)
        _plot(histories, folder.path, task, main)
        if stop() and label != next(reversed(resolved)):  # between algorithms: this one is finished
          from fedsim.core.errors import Interrupted
          last = histories[label][-1]["round"] if histories[label] else 0
          raise Interrupted(last, last if folder.path is not None else None, stop.requested, label, folder.path)
  if echo and out_dir is not None:
    curves = ", curves.png" if _plottable(histories) else " (no curves.png: no algorithm ran a round)"
    print(f"wrote {out_dir}/config.json, */metrics.jsonl{curves}", flush=True)
  return histories


def _build(config: ExperimentConfig, resolved: Mapping[str, Resolved], watchdog):
  """The task, built and sharded, after every algorithm has checked its settings against it.

  Raises:
    ConfigError: a bad task setting or data file; an algorithm that rejects the task (field
      ``algorithm``).
  """
  from fedsim import algorithms
  from fedsim.core import compile_options
  from fedsim.core.sharding import client_mesh, shard_task
  from fedsim.runner import enable_compilation_cache, set_blas_threads
  enable_compilation_cache(config.compilation_cache)  # before the first compilation (task models)
  compile_options.set_cpu_emitters(config.xla_cpu_emitters)  # before the engine builds its programs
  if config.progress and config.task in SLOW_TASKS:
    print(f"building task {config.task} (trains or loads cached models) ...", flush=True)
  watchdog.beat("set-up")
  task = build_task(config)
  watchdog.beat("task built")
  for r in resolved.values():
    try:  # builders check their own settings (shapes, laws) without compiling
      algorithms.build(r.name, task, **r.values)
    except ValueError as e:
      if isinstance(e, ConfigError):
        raise
      raise _entry_error(r.name, str(e)) from None
  set_blas_threads(config.blas_threads)
  task = shard_task(task, client_mesh(config.num_devices or None))
  watchdog.beat("algorithms checked, task sharded")
  return task


def _config_record(config: ExperimentConfig, task, resolved: Mapping[str, Resolved]) -> dict:
  """config.json's settings: flags, versions, backend, task, algorithms and hyperparameter sources."""
  import jax

  from fedsim.core.sharding import mesh_of
  from fedsim.provenance import version
  mesh = mesh_of(task.data)
  return {**({"flags": dict(config.flags)} if config.flags is not None else {}),
          "version": version(), "jax_version": jax.__version__, "backend": jax.default_backend(),
          "devices": mesh.devices.size if mesh is not None else 1, "processes": jax.process_count(),
          "task": {"name": task.name, "dim": task.dim, **task.info},
          "algorithms": {label: {"algorithm": r.name, **r.values} for label, r in resolved.items()},
          "hyperparameters": {label: {k: {"value": v, "source": r.sources[k]} for k, v in r.values.items()}
                              for label, r in resolved.items()},
          "experiment": config.to_json()}


def _announce(config: ExperimentConfig, task, resolved: Mapping[str, Resolved], out_dir: str | None) -> None:
  from fedsim.runner import provenance_line
  entries = [e if isinstance(e, str) else label for e, label in zip(config.algorithms, resolved)]
  print(f"task {task.name}: d = {task.dim}, N = {task.num_clients}; "
        f"algorithms {', '.join(entries)}; output {out_dir}", flush=True)
  for label, r in resolved.items():
    print(provenance_line(label, r.values, r.sources), flush=True)


def _run_algorithm(config: ExperimentConfig, task, label: str, r: Resolved, folder, callbacks, watchdog, stop,
                   main: bool) -> list[dict]:
  """One algorithm's run: its records (kept on divergence or interruption).

  Raises:
    Interrupted: ``stop`` was requested (label, folder and checkpoint round filled in).
  """

  from fedsim import algorithms
  from fedsim.core.engine import simulate
  from fedsim.core.errors import Interrupted
  from fedsim.run_folder import latest_checkpoint
  from fedsim.runner import ProgressWriter
  alg = algorithms.build(r.name, task, **r.values)  # on the sharded task (cheap: builders close over functions)
  alg_dir = folder.label_dir(label)
  rounds, run_task = config.rounds_for(r.name, r.values), task
  if r.name in FFGB_FAMILY:  # scored on its value caches (fedsim.tasks.functional)
    from fedsim.tasks.functional import cache_view
    run_task = cache_view(task)
    if config.save_learners:
      from fedsim.algorithms import ffgb
      assert alg_dir is not None  # save_learners needs an output directory (checked in run)
      alg = ffgb.attach_learner_writer(alg, os.path.join(alg_dir, "learners"), alg.hparams, r.name)
  ckpt_dir = os.path.join(alg_dir, "checkpoints") if alg_dir is not None else None
  resumed = latest_checkpoint(ckpt_dir) if config.resume and ckpt_dir is not None else None
  writer = ProgressWriter(label, os.path.join(alg_dir, "metrics.jsonl") if alg_dir else None,
                          rounds, keep_until=resumed, write=main, echo=config.progress,
                          callbacks=(*callbacks, lambda lab, rec: watchdog.beat(f"{lab} round {rec['round']}")))
  if resumed is not None and config.progress and main:
    print(f"[{label}] resuming from round {resumed} ({ckpt_dir})", flush=True)
  watchdog.beat(f"{label} compiling")
  try:
    simulate(alg, run_task, rounds, config.eval_every, config.seed, on_eval=writer,
             checkpoint_dir=ckpt_dir, checkpoint_every=config.checkpoint_every, resume=config.resume,
             checkpoint_interval_s=config.checkpoint_interval_s,
             profile_dir=os.path.join(config.profile_dir, label) if config.profile_dir else None,
             on_compile=writer.compiled, stop=stop)
  except DivergenceError as e:
    if config.progress and main:
      print(f"[{label}] diverged: {e}", file=sys.stderr, flush=True)
  except Interrupted as e:
    writer.close()
    e.signum, e.label, e.output_dir = stop.requested, label, folder.path
    e.checkpoint_round = latest_checkpoint(ckpt_dir) if ckpt_dir is not None else None
    raise
  finally:
    writer.close()
  return writer.history


def _plot(histories: Mapping[str, list[dict]], out_dir: str | None, task, main: bool) -> None:
  """Redraws ``curves.png`` (process 0, with an output folder and a curve to draw).

  Raises:
    OutputError: it cannot be written (the metrics are kept).
  """
  if not (main and out_dir is not None and _plottable(histories)):
    return
  from fedsim.runner import plot_curves
  try:
    plot_curves(dict(histories), os.path.join(out_dir, "curves.png"),
                title=f"{task.name} on {task.info.get('dataset', task.name)}, N = {task.num_clients}")
  except OSError as e:
    from fedsim.core.errors import OutputError
    raise OutputError(f"cannot write {out_dir}/curves.png: {e.strerror or e}; metrics are kept") from None


def _plottable(histories: Mapping[str, list[dict]]) -> bool:
  """Whether curves.png has a curve to draw: some algorithm has records of two rounds (rounds=0 has one)."""
  return any(len(h) > 1 for h in histories.values())
