"""Flags shared by the experiment binaries (run, sweep, benchmark), as a ``fedsim.ExperimentConfig``.

Core flags have the same names in every binary (DESIGN.md); each sets the
``ExperimentConfig`` field of its name or, for task settings, an entry of its
``task_options`` (:data:`TASK_OPTION_FLAGS`). Algorithm hyperparameters exist
twice: ``--lr`` sets the value for every algorithm of the run that has ``lr``,
``--fedzo_lr`` for one; both become ``hparams[NAME]`` of the config, so the
library's one resolution (``ExperimentConfig.resolve``) decides: ``NAME:HP=VALUE``
entry > ``--<alg>_<hp>`` > ``--<hp>`` > the run default (``fedsim.api.RUN_DEFAULTS``,
"binary default") > the registry preset > the algorithm's paper default.
config.json and the start-up log name each value's source: ``--HP`` / ``--ALG_HP``
(command line), ``flagfile PATH (--HP)``, ``algorithm entry``, ``binary default``,
``registry preset``, ``default``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import re
import sys

from absl import flags

from fedsim import algorithms, api, config
from fedsim.config import did_you_mean
from fedsim.core import compile_options
from fedsim.core.errors import ConfigError
from fedsim.data import DATASETS
from fedsim.data import METHODS as PARTITIONS
from fedsim.runner import set_blas_threads  # noqa: F401 (re-exported: experiments.benchmark)
from fedsim.tasks import TASKS

FLAGS = flags.FLAGS

FFGB_FAMILY = api.FFGB_FAMILY  # the library's (Shen et al. 2022)

# Hyperparameters settable for all algorithms (--NAME) or one (--ALG_NAME): derived from
# the algorithms' config dataclasses (fedsim.config metadata), the single source of their
# types, help, accepted values and ranges. HPARAMS: name -> (type, help); CHOICES: name ->
# accepted values. Fields declared with cli=False (set by the registry entry or the run,
# e.g. FedOpt's server_optimizer, FZooS's rounds) get no flag.


def _derive_hparams():
  """(HPARAMS, CHOICES) from every registered algorithm's config dataclass.

  Raises:
    TypeError: two config classes declare the same field with different types.
  """
  types: dict = {}
  helps: dict[str, dict[str, list[str]]] = {}  # name -> help -> the algorithms whose field has it
  choices: dict = {}
  for alg, (cls, _, _) in algorithms.REGISTRY.items():
    for f in config.hparam_fields(cls):
      if not f.metadata["cli"]:
        continue
      typ = config.field_type(cls, f.name)
      if types.setdefault(f.name, typ) is not typ:
        raise TypeError(f"{cls.__name__}.{f.name} is {typ.__name__}, elsewhere {types[f.name].__name__}")
      helps.setdefault(f.name, {}).setdefault(f.metadata["help"], []).append(alg)
      if f.metadata["choices"] is not None:
        choices.setdefault(f.name, f.metadata["choices"])
  return {n: (t, _shared_help(n, helps[n])) for n, t in types.items()}, choices


def _shared_help(name: str, helps: dict[str, list[str]]) -> str:
  """The help of the shared flag ``--NAME``: the fields' help when they all say the same, else the
  most common one, naming whose it is and where the others' are (each help is given once)."""
  text, algs = max(helps.items(), key=lambda item: len(item[1]))
  if len(helps) == 1:
    return text
  return (f"{text} ({', '.join(algs[:3])}{', ...' if len(algs) > 3 else ''}; for other algorithms it differs: "
          f"see --ALG_{name} or python -m experiments.hparams ALG)")


HPARAMS, CHOICES = _derive_hparams()
# Hyperparameters that are core flags (always given, no per-algorithm default).
CORE_HPARAMS = ("clients_per_round",)

# Flags that set an entry of ExperimentConfig.task_options (make_task's keyword): flag -> key.
# The other core flags named like an ExperimentConfig field set that field.
TASK_OPTION_FLAGS = {
    **{n: n for n in ("hidden_width", "dim", "heterogeneity", "target_class", "attack_c", "classifier",
                      "cache_dir", "spectrum_sigma", "spectrum_rank", "isotropic", "finetune_shift", "hidden_layers",
                      "activation", "shift_kind", "feature_shift", "tabular_loss", "samples_per_client",
                      "num_features")},
    "rank": "server_samples", "max_rank": "max_rank", "l2_penalty": "mu",
    **{n: n for n in ("data_heterogeneity", "server_shift", "feature_map", "holder_eta", "raw_dim",
                      "portion", "opt_metric", "attack_target", "perturbation_box", "model_train_steps")},
}
# ExperimentConfig fields that no flag of their name sets.
_NOT_FLAGS = ("algorithms", "hparams", "task_options", "progress", "flags", "source_names")


def define_flags():
  """Defines the core flags (DESIGN.md): one per ``fedsim.ExperimentConfig`` field (made from its
  metadata), the task options and the multi-host flags; then the hyperparameter flags. Once per process:
  a second call (``experiments.run`` imported after ``experiments.sweep``, or the other way) does nothing."""
  if "algorithm" in flags.FLAGS:
    return
  flags.DEFINE_list("algorithm", ["fedavg", "fedzo"],
                    "comma-separated algorithms run side by side, each NAME or NAME:HP=VALUE[:HP=VALUE] "
                    f"(e.g. fedzo:local_steps=20); NAME in: {', '.join(algorithms.REGISTRY)}")
  flags.DEFINE_float("heterogeneity", 5.0, "C, heterogeneity of the synthetic tasks")
  flags.DEFINE_integer("dim", 300, "d, dimension of the synthetic tasks")
  flags.DEFINE_integer("hidden_width", 64, "hidden units of --task=mlp")
  flags.DEFINE_integer("hidden_layers", 1, "hidden layers of --task=mlp (2 with --hidden_width=32 "
                       "--activation=leaky_relu: FFGB's MLP weak learner, Shen et al. 2022, App. B.1)")
  flags.DEFINE_string("activation", "relu", "hidden activation of --task=mlp: relu, leaky_relu (slope 0.01)")
  # --task=shift_tabular (Shen et al. 2022, FFGB.C / FFGB.L): N clients x --samples_per_client points in
  # --num_features dimensions with a feature-shift knob.
  flags.DEFINE_string("shift_kind", "w1", "shift_tabular shift: tv (shared support, reweighted), "
                      "w1 (translated clouds)")
  flags.DEFINE_float("feature_shift", 0.0, "shift_tabular knob: tv mixture weight in [0,1]; w1 spread >= 0")
  flags.DEFINE_string("tabular_loss", "square", "shift_tabular loss: square (FFGB.L), ce (3 classes)")
  flags.DEFINE_integer("target_class", 4, "attacked class (--task=attack_cw)")
  flags.DEFINE_float("attack_c", 1.0, "distortion weight c of the attack loss (FedZO eq. 21)")
  flags.DEFINE_string("classifier", "mlp", "attacked classifier (--task=attack_cw): mlp, softmax")
  flags.DEFINE_string("cache_dir", None, "where trained classifiers are cached (default ~/.cache/fedsim)")
  flags.DEFINE_float("spectrum_sigma", 3 ** 0.5, "std of log lambda (--task=illcond_quadratic; Li et al. 2025, §5.1)")
  flags.DEFINE_integer("spectrum_rank", 0, "k > 0: only k log-normal eigenvalues, the other d - k 1e-4 "
                       "(--task=illcond_quadratic; a low effective rank fixed as d grows); 0: all d")
  flags.DEFINE_bool("isotropic", False, "all eigenvalues equal, same trace (--task=illcond_quadratic control)")
  flags.DEFINE_string("finetune_shift", "flip", "target shift of --task=finetune: flip, relabel, none")
  # --task=logistic_soft / ridge (Jadbabaie et al. 2023, App. A; specs/fedlrgd.md §3.3).
  flags.DEFINE_integer("rank", 8, "r: the server's samples = FedLRGD's approximate rank (logistic_soft, ridge)")
  flags.DEFINE_integer("max_rank", 32, "R >= r: static padding of the server data (same R: no recompilation)")
  flags.DEFINE_integer("num_features", 2, "p: features of logistic_soft / ridge")
  flags.DEFINE_integer("samples_per_client", 40, "s: samples per client (logistic_soft, ridge)")
  flags.DEFINE_float("l2_penalty", 0.1, "mu: L2 weight / strong convexity (logistic_soft, ridge)")
  flags.DEFINE_float("data_heterogeneity", 0.0, "h in [0,1): client c's data on the box [a_c, a_c+1-h], a_c ~ U[0,h]")
  flags.DEFINE_float("server_shift", 0.0, "delta in [0,1): server data on [0,1-delta], clients on [delta,1]")
  flags.DEFINE_string("feature_map", "identity", "logistic_soft / ridge features: identity, holder")
  flags.DEFINE_float("holder_eta", 2.5, "Hölder order eta of --feature_map=holder (||u - c_j||^eta)")
  flags.DEFINE_integer("raw_dim", 1, "D: dimension of the raw points of --feature_map=holder")
  flags.DEFINE_bool("x64", False, "enable float64 (jax_enable_x64) before anything is built; same random "
                    "draws (FedLRGD: its weight solve is float64 either way, its GD steps need x64 at r >= 16)")
  # --task=attack / metric_opt (Shu et al. 2023, §6.2-6.3; specs/fzoos.md §3.2-3.3).
  flags.DEFINE_float("portion", None, "P in (0,1]: each client's share of the classes (attack: "
                     "default 0.7; metric_opt: class shards, default 0.3); larger P = less heterogeneous")
  flags.DEFINE_string("opt_metric", "precision", "metric_opt objective 1 - macro METRIC: "
                      "precision, recall, f1, jaccard")
  flags.DEFINE_integer("attack_target", -1, "attack: index of the eligible target image (-1 = --seed)")
  flags.DEFINE_integer("model_train_steps", 0, "attack / metric_opt: Adam steps of the task's "
                       "classifiers (0 = task default: attack 400, metric_opt 2000); fewer steps leave "
                       "more test points near a decision boundary")
  flags.DEFINE_float("perturbation_box", 0.0, "attack / metric_opt box eps of the perturbation "
                     "(0 = task default: attack 0.3, metric_opt 0.2)")
  _define_config_flags()
  flags.DEFINE_string("coordinator_address", None, "multi-host: host:port of process 0's "
                      "jax.distributed coordinator (needs --num_processes > 1)")
  flags.DEFINE_integer("num_processes", 1, "multi-host: number of processes (one per host/GPU); 1 = single process")
  flags.DEFINE_integer("process_id", 0, "multi-host: this process's index in [0, num_processes)")
  for name, (typ, help_) in HPARAMS.items():  # after the others: --helpfull lists them last
    if name not in CORE_HPARAMS:
      _define(name, typ, None, f"{help_}; sets it for every algorithm of the run that has it "
              "(default: each algorithm's own)")
    for alg in algorithms.REGISTRY:
      f = _field(alg, name)
      if f is not None:
        default = {**algorithms.default_config(alg), **api.RUN_DEFAULTS.get(alg, {})}[name]
        _define(f"{alg}_{name}", typ, None, f"{config.describe(f)}; for {alg} only (default: {default})")


# ExperimentConfig fields whose flag has another default (experiments.sweep sets output_dir's again).
CLI_DEFAULTS = {"output_dir": "runs/main"}


def _define_config_flags():
  """A flag for each ExperimentConfig field declared with ``fedsim.config.hparam`` (name, type, default,
  help with its range: the field's), but the ones in :data:`_NOT_FLAGS`."""
  names = {"task": TASKS, "dataset": DATASETS, "partition": PARTITIONS}
  for f in config.hparam_fields(api.ExperimentConfig):
    if f.name in _NOT_FLAGS:
      continue
    help_ = config.describe(f) + (f": {', '.join(names[f.name])}" if f.name in names else "")
    default = CLI_DEFAULTS.get(f.name, f.default)
    if f.name == "xla_cpu_emitters":
      flags.DEFINE_enum(f.name, default, list(compile_options.EMITTERS), help_)
    else:
      _define(f.name, config.field_type(api.ExperimentConfig, f.name), default, help_)


def _field(alg: str, name: str):
  """The dataclass field ``name`` of algorithm ``alg``'s config, or None."""
  return {f.name: f for f in config.hparam_fields(algorithms.REGISTRY[alg][0])}.get(name)


def _define(name, typ, default, help_):
  {float: flags.DEFINE_float, int: flags.DEFINE_integer, str: flags.DEFINE_string,
   bool: flags.DEFINE_bool}[typ](name, default, help_)


# --- where a flag's value comes from -----------------------------------------------------

_ARGV: list[str] = []  # the command line parse_flags_or_exit parsed (flagfiles not expanded)
_ORIGINS: dict[tuple, dict] = {}  # flag_origins(_ARGV), by argv


def flag_origins(argv) -> dict[str, str | None]:
  """Flag name -> the flagfile that set it last in ``argv`` (None: the command line).

  Expands ``--flagfile`` as absl does (recursively, in order; the last occurrence of
  a flag wins), so a flag set on the command line and then again by a later
  flagfile is that flagfile's.
  """
  out = {}

  def walk(args, origin):
    i = 0
    while i < len(args):
      arg, i = args[i], i + 1
      if arg == "--":
        break
      if not arg.startswith("-"):
        continue
      name, eq, value = arg.lstrip("-").partition("=")
      if name == "flagfile":
        if not eq and i < len(args):
          value, i = args[i], i + 1
        try:
          with open(value) as f:
            lines = [line.strip() for line in f]
        except OSError:
          continue
        walk([line for line in lines if line and not line.startswith(("#", "//"))], value)
      else:
        if name not in FLAGS and name.startswith("no") and name[2:] in FLAGS:
          name = name[2:]
        out[name] = origin
  walk(list(argv[1:]), None)
  return out


def flag_source(flag: str) -> str:
  """How config.json names a flag's value: ``--FLAG`` (command line or its default) or
  ``flagfile PATH (--FLAG)``."""
  if tuple(_ARGV) not in _ORIGINS:
    _ORIGINS[tuple(_ARGV)] = flag_origins(_ARGV)
  origin = _ORIGINS[tuple(_ARGV)].get(flag) if FLAGS[flag].present else None
  return f"flagfile {origin} (--{flag})" if origin else f"--{flag}"


def _flag_of(source: str, hp: str) -> str:
  """The flag a source names (:func:`flag_source`; ``algorithm entry`` -> ``algorithm``); else ``hp``."""
  m = re.fullmatch(r"--(\w+)|flagfile .* \(--(\w+)\)", source)
  if m:
    return m.group(1) or m.group(2)
  return "algorithm" if source == "algorithm entry" else hp


# ExperimentConfig fields whose flag has another name.
_FIELD_FLAGS = {"algorithms": "algorithm"}


def flag_error(flag: str, line: str) -> ConfigError:
  """A ConfigError of ``flag`` whose text is ``line`` (e.g. ``--algorithm fedzo: lr must be > 0 ...``)."""
  err = ConfigError(flag, "")
  err.args = (line,)
  return err


@contextlib.contextmanager
def cli_errors():
  """Re-raises the library's ConfigErrors under the flag that set the value (exit 2, one line): an
  ``--algorithm`` entry's as ``--algorithm NAME: HP ...``, a message naming other settings in their
  flag form (``FieldError.cli``)."""
  try:
    yield
  except api.HparamError as e:
    flag = _flag_of(e.source, e.hparam)
    if flag == "algorithm":
      sep = " " if e.message.startswith("must") else ": "  # "lr must be > 0", "direction: unknown 'x'"
      raise flag_error(flag, f"--algorithm {e.name}: {e.hparam}{sep}{e.message}") from None
    raise ConfigError(flag, e.message) from None
  except config.FieldError as e:
    flag = _FIELD_FLAGS.get(e.field, e.field)
    raise (flag_error(flag, e.cli) if e.cli else ConfigError(flag, e.message)) from None


# --- flags -> ExperimentConfig -----------------------------------------------------------

def parse_spec(spec: str):
  """Splits an ``--algorithm`` entry ``NAME[:HP=VALUE...]`` into (NAME, overrides)
  (``fedsim.api.parse_algorithm``, errors under ``--algorithm``).

  ``fedzo:local_steps=20:lr=0.001`` runs FedZO with H = 20 and eta = 1e-3 next to
  other entries (e.g. ``fedzo:local_steps=5``), each in its own output folder.

  Raises:
    ConfigError: unknown algorithm, hyperparameter, or a value of the wrong type.
  """
  with cli_errors():
    _, name, overrides = api.parse_algorithm(spec)
  return name, overrides


def _flag_hparams():
  """``hparams[NAME]`` from the hyperparameter flags given (``--ALG_HP`` over ``--HP``), and
  the ``source_names`` of those values."""
  hparams, names = {}, {}
  for alg in dict.fromkeys(parse_spec(spec)[0] for spec in FLAGS.algorithm):
    for hp in algorithms.config_fields(alg):
      shared = hp if hp in HPARAMS and hp not in CORE_HPARAMS else None
      for flag in (shared, f"{alg}_{hp}"):
        if flag is not None and flag in FLAGS and FLAGS[flag].present:
          hparams.setdefault(alg, {})[hp] = FLAGS[flag].value
          names[f"hparams[{alg}].{hp}"] = flag_source(flag)
  return hparams, names


def config_fields() -> dict:
  """The keyword arguments of ``fedsim.ExperimentConfig`` the flags give (unchecked)."""
  hparams, names = _flag_hparams()
  fields = {f.name: FLAGS[f.name].value for f in dataclasses.fields(api.ExperimentConfig)
            if f.name not in _NOT_FLAGS}
  fields.update(algorithms=tuple(FLAGS.algorithm), hparams=hparams,
                task_options={key: FLAGS[flag].value for flag, key in TASK_OPTION_FLAGS.items()},
                source_names={"RUN_DEFAULTS": "binary default",
                              **{k: flag_source(k) for k in ("clients_per_round", "rounds", "comm_budget")},
                              **names})
  return fields


def experiment_config(**overrides):
  """The ``fedsim.ExperimentConfig`` of the flags (``overrides`` replace fields), checked.

  Raises:
    ConfigError: a bad setting, naming the flag that set it.
  """
  check_flags_reach_an_algorithm()
  with cli_errors():
    cfg = api.ExperimentConfig(**{**config_fields(), **overrides})
  check_config(cfg)
  return cfg


def validate():
  """Checks every flag before anything is built or compiled; returns :func:`experiment_config`.

  Raises:
    ConfigError: naming the flag and the accepted values.
  """
  return experiment_config()


def check_flags_reach_an_algorithm(given=()):
  """A hyperparameter flag given (command line, flagfile, or ``given``) must reach an
  algorithm of the run.

  Raises:
    ConfigError: a shared ``--HP`` that no algorithm of the run has, or an
      ``--ALG_HP`` whose ALG is not in ``--algorithm``.
  """
  run = list(dict.fromkeys(parse_spec(spec)[0] for spec in FLAGS.algorithm))
  def present(flag):
    return flag in given or (flag in FLAGS and FLAGS[flag].present)
  for name in HPARAMS:
    if name not in CORE_HPARAMS and present(name) and \
        not any(name in algorithms.config_fields(alg) for alg in run):
      having = [a for a in algorithms.REGISTRY if name in algorithms.config_fields(a)]
      raise ConfigError(name, f"no algorithm of the run ({', '.join(run)}) has {name}; it is a "
                        f"hyperparameter of {', '.join(having)}")
    for alg in algorithms.REGISTRY:
      flag = f"{alg}_{name}"
      if alg not in run and present(flag):
        raise ConfigError(flag, f"{alg} is not an algorithm of the run ({', '.join(run)})")


def validate_distributed():
  """Checks the multi-host flags without touching JAX (they are used before any backend starts).

  Raises:
    ConfigError: naming the flag and the accepted values.
  """
  if FLAGS.num_processes < 1:
    raise ConfigError("num_processes", f"must be >= 1; got {FLAGS.num_processes}")
  if not 0 <= FLAGS.process_id < FLAGS.num_processes:
    raise ConfigError("process_id", f"must be in [0, num_processes={FLAGS.num_processes}); "
                      f"got {FLAGS.process_id}")
  if FLAGS.num_processes > 1:
    host, _, port = (FLAGS.coordinator_address or "").rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
      raise ConfigError("coordinator_address", f"must be HOST:PORT (e.g. localhost:1234) with "
                        f"--num_processes > 1; got {FLAGS.coordinator_address!r}")


# --- checks the library does not do (task settings, algorithm x task) ---------------------

FFGB_TASKS = ("softmax", "mlp", "cnn", "lenet", "shift_tabular")  # tasks with per-client points x (Shen et al. 2022)


def check_config(cfg) -> None:
  """The CLI's checks of an ExperimentConfig made from its flags that the library leaves to
  the task and algorithm builders (so they fail before anything is built): task options,
  and hyperparameters that depend on the task (each value's range is the library's).

  Raises:
    ConfigError: naming the flag that set the value and the accepted values.
  """
  opts = cfg.task_options
  for r in cfg.resolve().values():
    def where(hp, r=r):
      return _flag_of(r.sources.get(hp, "default"), hp)
    hp = r.values
    if hp.get("direction") == "orthogonal" and cfg.task == "quadratic" and hp["fd_directions"] > opts["dim"]:
      raise ConfigError(where("fd_directions"), f"orthogonal directions need <= dim={opts['dim']}")
    if r.name in FFGB_FAMILY:
      validate_ffgb(r.name, hp, where, cfg)
  if cfg.task in ("attack", "metric_opt"):  # Shu et al. 2023, §6.2-6.3
    _check_fzoos_task_options(cfg)
  if opts["hidden_layers"] < 1:
    raise ConfigError("hidden_layers", f"must be >= 1; got {opts['hidden_layers']}")
  _check_one_of("activation", opts["activation"], ("relu", "leaky_relu"))
  if cfg.task == "shift_tabular":
    _check_one_of("shift_kind", opts["shift_kind"], ("tv", "w1"))
    _check_one_of("tabular_loss", opts["tabular_loss"], ("square", "ce"))
    hi, shift = (1.0 if opts["shift_kind"] == "tv" else math.inf), opts["feature_shift"]
    if not (0 <= shift <= hi and math.isfinite(shift)):
      raise ConfigError("feature_shift", f"must be in [0, {hi:g}] for shift_kind={opts['shift_kind']} "
                        f"(finite); got {shift}")
    bad = [label for label, r in cfg.resolve().items() if r.name not in FFGB_FAMILY]
    if bad:
      raise ConfigError("algorithm", f"--task=shift_tabular runs only {', '.join(FFGB_FAMILY)}; got {bad[0]}")


def _check_fzoos_task_options(cfg):
  """--task=attack / metric_opt checks (exit 2 before anything is built)."""
  opts = cfg.task_options
  if opts["portion"] is not None and not 0 < opts["portion"] <= 1:
    raise ConfigError("portion", f"must be in (0, 1]; got {opts['portion']}")
  if not (math.isfinite(opts["perturbation_box"]) and opts["perturbation_box"] >= 0):
    raise ConfigError("perturbation_box", f"must be >= 0 (0 = task default); got {opts['perturbation_box']}")
  if opts["model_train_steps"] < 0:
    raise ConfigError("model_train_steps", f"must be >= 0 (0 = task default); got {opts['model_train_steps']}")
  from fedsim.tasks.metric_opt import METRICS
  if cfg.task == "metric_opt":
    _check_one_of("opt_metric", opts["opt_metric"], METRICS)
  if cfg.task == "attack":
    if opts["classifier"] not in ("cnn", "mlp"):
      hint = did_you_mean(opts["classifier"], ("cnn", "mlp"))
      raise ConfigError("classifier", f"unknown {opts['classifier']!r}{hint} for --task=attack; accepted: cnn, mlp")
    if cfg.dataset not in ("digits", "mnist"):
      raise ConfigError("dataset", "--task=attack needs images; accepted: digits, mnist")


def _check_one_of(flag: str, value, accepted) -> None:
  """Raises ConfigError(flag, "unknown V; accepted: A, B") unless ``value`` is in ``accepted``."""
  if value not in accepted:
    raise ConfigError(flag, f"unknown {value!r}{did_you_mean(value, accepted)}; accepted: {', '.join(accepted)}")


def validate_ffgb(alg: str, hp: dict, where, cfg):
  """FFGB-family checks that involve the algorithm name, the task or other settings (Shen et al. 2022;
  specs/ffgb.md §2, §6.4); each field's own range is checked by its dataclass (fedsim.config).

  Args:
    alg: an FFGB_FAMILY name; hp: its hyperparameters; where: hp name -> flag name;
    cfg: the ExperimentConfig.

  Raises:
    ConfigError: naming the flag and the accepted range.
  """
  task, tabular_loss = cfg.task, cfg.task_options["tabular_loss"]
  no_images = task == "shift_tabular" or cfg.dataset == "libsvm"
  if hp["weak_learner"] == "wo_lip" and alg != "ffgb_l":
    raise ConfigError(where("weak_learner"), f"wo_lip (eq. 25) needs FFGB.L's closed-form query "
                      f"gradient; accepted for {alg}: scaled, rf_ridge, mlp, cnn, wo_inf")
  if hp["weak_learner"] in ("wo_inf", "wo_lip") and hp["wo_family"] == "cnn" and (
      hp["weak_learner"] == "wo_lip" or no_images):
    raise ConfigError(where("wo_family"), "cnn needs image data (and wo_inf); accepted: mlp, rf, linear")
  if cfg.save_learners and hp["store_learners"] < cfg.eval_every:
    raise ConfigError(where("store_learners"), f"--save_learners needs >= eval_every={cfg.eval_every}; "
                      f"got {hp['store_learners']}")
  if hp["eta_schedule"] == "theory" and alg != "ffgb_l" and hp["mu"] <= 0:
    raise ConfigError(where("mu"), "eta_schedule=theory (c/(mu(tK+k+1)), Thm 3.1) needs mu > 0")
  if task not in FFGB_TASKS:
    raise ConfigError("task", f"{alg} needs a task with client points; accepted: {', '.join(FFGB_TASKS)}")
  if alg == "ffgb_l" and not (task == "shift_tabular" and tabular_loss == "square"):
    raise ConfigError("task", "ffgb_l needs square loss (problem (14)): --task=shift_tabular --tabular_loss=square")
  if hp["weak_learner"] == "cnn" and no_images:
    raise ConfigError(where("weak_learner"), "cnn needs image data (--dataset=digits, mnist, fashion_mnist "
                      "or cifar10); accepted otherwise: scaled, rf_ridge, mlp")


# --- --help: the run's own flags, grouped -------------------------------------------------

HELP_GROUPS = (
    ("experiment", ("rounds", "eval_every", "seed", "num_clients", "clients_per_round", "comm_budget", "flagfile")),
    ("data", ("dataset", "data_dir", "partition", "dirichlet_alpha", "shards_per_client", "quantity_law",
              "quantity_sigma", "homo_ratio")),
    ("task (each option applies to the tasks it names)", ("task", *TASK_OPTION_FLAGS)),
    ("algorithm selection", ("algorithm",)),
    ("output", ("output_dir", "overwrite", "resume", "checkpoint_every", "checkpoint_interval_s", "save_learners")),
    ("compute", ("x64", "num_devices", "blas_threads", "compilation_cache", "xla_cpu_emitters", "watchdog_s",
                 "profile_dir")),
    ("multi-host", ("coordinator_address", "num_processes", "process_id")),
)
HELP_FLAGS = ("--help", "-help", "-h", "--h", "-?", "--helpshort", "-helpshort")
_WIDTH = 118


def _is_hparam_flag(name: str) -> bool:
  return (name in HPARAMS and name not in CORE_HPARAMS) or any(
      name.startswith(f"{alg}_") and name[len(alg) + 1:] in HPARAMS for alg in algorithms.REGISTRY)


def _flag_line(flag) -> list[str]:
  """``  --name=DEFAULT  help`` in at most three lines of :data:`_WIDTH` (--helpfull has the whole help)."""
  import textwrap
  if isinstance(flag.default, bool):
    head = f"  --[no]{flag.name} (default {'true' if flag.default else 'false'})"
  elif flag.default is None or flag.default == "" or flag.default == []:
    head = f"  --{flag.name}"
  elif isinstance(flag.default, float):
    head = f"  --{flag.name}={flag.default:g}"
  else:
    head = f"  --{flag.name}={flag.default_as_str.strip(chr(39))}"
  lines = textwrap.wrap(" ".join(flag.help.split()), width=_WIDTH, initial_indent=head.ljust(34) + "  ",
                        subsequent_indent=" " * 36, max_lines=None if flag.name == "algorithm" else 3,
                        placeholder=" ...")
  return lines or [head]


def help_text() -> str:
  """What ``--help`` prints: the binary's summary and usage, then its own flags by group (the
  algorithms' hyperparameter flags are summarised), ending with how to see one algorithm's."""
  main = sys.modules.get("__main__")
  doc = (getattr(main, "__doc__", None) or "").strip("\n")
  paragraphs = doc.split("\n\n")
  intro = paragraphs[0]
  usage = next((p for p in paragraphs[1:4] if p.startswith("  python -m")), "")
  out = [intro] + (["", usage] if usage else [])
  own = [f for f in FLAGS.get_flags_for_module(sys.modules[__name__]) if not _is_hparam_flag(f.name)]
  by_name = {f.name: f for f in own}
  by_name["flagfile"] = flags.FlagHolder  # absl's own (no Flag object): its line is written here
  binary = [f for f in FLAGS.get_flags_for_module(sys.argv[0]) if f.name not in by_name] if sys.argv else []
  grouped = {n for _, names in HELP_GROUPS for n in names}
  groups = [(title, [by_name[n] for n in names if n in by_name]) for title, names in HELP_GROUPS]
  groups.append(("other", [f for f in own if f.name not in grouped]))
  if binary:
    groups.insert(0, (f"{os.path.basename(sys.argv[0]).removesuffix('.py')}", binary))
  for title, members in groups:
    if not members:
      continue
    out += ["", f"{title}:"]
    for f in members:
      out += (["  --flagfile=FILE".ljust(36) + "read flags from FILE, one a line (# comments; repeatable, nestable)"]
              if f is flags.FlagHolder else _flag_line(f))
    if title == "algorithm selection":
      shared = [n for n in HPARAMS if n not in CORE_HPARAMS]
      out += [f"  hyperparameters ({len(shared)} names): --HP=V sets HP for every algorithm of the run that has "
              "it, --ALG_HP=V for ALG", "    only, an --algorithm=ALG:HP=V entry for that entry (later wins: "
              "entry > --ALG_HP > --HP > the algorithm's default)"]
  out += ["", "One algorithm's hyperparameters (type, default, accepted values, source):",
          "  python -m experiments.hparams NAME        (e.g. python -m experiments.hparams fedzo)",
          "Every flag, absl's included: --helpfull"]
  return "\n".join(out)


def parse_flags_or_exit(argv):
  """absl flags parser that turns a flag error into one line and exit status 2.

  ``--help`` (``-h``, ``--helpshort``) prints :func:`help_text` and exits 0; ``--helpfull``
  prints absl's list of every flag and exits 0. A positional argument, or a flagfile that cannot
  be read, is an error (one line).
  """
  _ARGV[:] = argv
  args = list(argv[1:])
  args = args[:args.index("--")] if "--" in args else args
  if any(a in HELP_FLAGS for a in args):
    print(help_text())
    sys.exit(0)
  if any(a in ("--helpfull", "-helpfull") for a in args):  # absl's, exit 0 (absl exits 1)
    from absl import app
    app.usage(shorthelp=False, writeto_stdout=True)
    sys.exit(0)
  try:
    argv = FLAGS(argv)
  except flags.CantOpenFlagFileError as e:
    m = re.search(r"\[Errno \d+\] ([^:]*): '(.*)'$", str(e))
    why = f"cannot read {m.group(2)}: {m.group(1)}" if m else str(e).replace("ERROR:: ", "")
    print(f"error: --flagfile: {why}", file=sys.stderr)
    sys.exit(2)
  except flags.Error as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
  if len(argv) > 1:
    print(f"error: unexpected argument {argv[1]!r}: flags are --NAME=VALUE (--help lists them)", file=sys.stderr)
    sys.exit(2)
  if "x64" in FLAGS and FLAGS.x64:  # before any array exists (specs/fedlrgd.md §6.3)
    import jax
    jax.config.update("jax_enable_x64", True)
  return argv
