"""Flags and set-up shared by the experiment binaries (run, sweep, benchmark).

Core flags have the same names in every binary (DESIGN.md). Algorithm
hyperparameters exist twice: ``--lr`` sets the value for every algorithm of
the run, ``--fedzo_lr`` for one; an algorithm otherwise keeps its own default
(a learning rate right for FedAvg is wrong for FedZO). Precedence:
``--<alg>_<hp>`` given > ``--<hp>`` given > the binary's per-algorithm default
(:data:`ALGORITHM_DEFAULTS`) > the algorithm's paper default.
"""

from __future__ import annotations

import difflib
import math
import sys

from absl import flags

from fedsim import algorithms, api, config
from fedsim.config import FieldError
from fedsim.core.errors import ConfigError
from fedsim.data import METHODS as PARTITIONS
from fedsim.data import DATASETS
from fedsim.tasks import TASKS

FLAGS = flags.FLAGS

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
  types, helps, choices = {}, {}, {}
  for cls in dict.fromkeys(entry[0] for entry in algorithms.REGISTRY.values()):
    for f in config.hparam_fields(cls):
      if not f.metadata["cli"]:
        continue
      typ = config.field_type(cls, f.name)
      if types.setdefault(f.name, typ) is not typ:
        raise TypeError(f"{cls.__name__}.{f.name} is {typ.__name__}, elsewhere {types[f.name].__name__}")
      if f.metadata["help"] not in helps.setdefault(f.name, []):
        helps[f.name].append(f.metadata["help"])
      if f.metadata["choices"] is not None:
        choices.setdefault(f.name, f.metadata["choices"])
  return {n: (t, " | ".join(helps[n])) for n, t in types.items()}, choices


HPARAMS, CHOICES = _derive_hparams()
# Hyperparameters that are core flags (always given, no per-algorithm default).
CORE_HPARAMS = ("clients_per_round",)

# This binary's per-algorithm defaults where the paper's value does not suit
# the embedded digits main job. FedZO's paper eta = 1e-3 (seed 001 §V-B,
# Fashion-MNIST, T unstated) reaches ~0.72 test accuracy on digits in 200
# rounds; 1e-2 reaches ~0.90. Pass --fedzo_lr=0.001 for the paper's value.
ALGORITHM_DEFAULTS = {"fedzo": {"lr": 1e-2}}


def define_flags():
  """Defines the core flags (DESIGN.md) and the hyperparameter flags."""
  flags.DEFINE_list("algorithm", ["fedavg", "fedzo"],
                    "comma-separated algorithms run side by side, each NAME or NAME:HP=VALUE[:HP=VALUE] "
                    f"(e.g. fedzo:local_steps=20); NAME in: {', '.join(algorithms.REGISTRY)}")
  flags.DEFINE_string("task", "softmax", f"task: {', '.join(TASKS)}")
  flags.DEFINE_string("dataset", "digits", f"dataset (supervised tasks): {', '.join(DATASETS)}")
  flags.DEFINE_string("data_dir", None, "folder (or LIBSVM file) with the dataset's files")
  flags.DEFINE_integer("num_clients", 100, "N, number of clients")
  flags.DEFINE_integer("clients_per_round", 10, "M, clients sampled per round (M = N: full participation)")
  flags.DEFINE_integer("rounds", 300, "T, communication rounds")
  flags.DEFINE_string("partition", "dirichlet", f"partition: {', '.join(PARTITIONS)}")
  flags.DEFINE_float("dirichlet_alpha", 0.5, "Dirichlet concentration of the label (or quantity) skew")
  flags.DEFINE_integer("shards_per_client", 2, "shards per client (--partition=shards)")
  flags.DEFINE_string("quantity_law", "lognormal", "client-size law (--partition=quantity): lognormal, dirichlet")
  flags.DEFINE_float("quantity_sigma", 1.0, "log-normal sigma of client sizes (--partition=quantity)")
  flags.DEFINE_float("heterogeneity", 5.0, "C, heterogeneity of the synthetic tasks")
  flags.DEFINE_integer("dim", 300, "d, dimension of the synthetic tasks")
  flags.DEFINE_integer("hidden_width", 64, "hidden units of --task=mlp")
  flags.DEFINE_integer("hidden_layers", 1, "hidden layers of --task=mlp (2 with --hidden_width=32 "
                       "--activation=leaky_relu: FFGB's MLP weak learner, seed 002 App. B.1)")
  flags.DEFINE_string("activation", "relu", "hidden activation of --task=mlp: relu, leaky_relu (slope 0.01)")
  # --task=shift_tabular (seed 002, FFGB.C / FFGB.L): N clients x --samples_per_client points in
  # --num_features dimensions with a feature-shift knob.
  flags.DEFINE_string("shift_kind", "w1", "shift_tabular shift: tv (shared support, reweighted), "
                      "w1 (translated clouds)")
  flags.DEFINE_float("feature_shift", 0.0, "shift_tabular knob: tv mixture weight in [0,1]; w1 spread >= 0")
  flags.DEFINE_string("tabular_loss", "square", "shift_tabular loss: square (FFGB.L), ce (3 classes)")
  flags.DEFINE_integer("target_class", 4, "attacked class (--task=attack_cw)")
  flags.DEFINE_float("attack_c", 1.0, "distortion weight c of the attack loss (FedZO eq. 21)")
  flags.DEFINE_string("classifier", "mlp", "attacked classifier (--task=attack_cw): mlp, softmax")
  flags.DEFINE_string("cache_dir", None, "where trained classifiers are cached (default ~/.cache/fedsim)")
  flags.DEFINE_float("spectrum_sigma", 3 ** 0.5, "std of log lambda (--task=illcond_quadratic; seed 003 §5.1)")
  flags.DEFINE_bool("isotropic", False, "all eigenvalues equal, same trace (--task=illcond_quadratic control)")
  flags.DEFINE_string("finetune_shift", "flip", "target shift of --task=finetune: flip, relabel, none")
  # --task=logistic_soft / ridge (seed 004 App. A; specs/fedlrgd.md §3.3).
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
  flags.DEFINE_integer("seed", 0, "root seed (data partition, initialisation, all randomness)")
  flags.DEFINE_integer("eval_every", 10, "rounds per compiled chunk / between evaluations")
  flags.DEFINE_string("output_dir", "runs/main", "where config.json, metrics and curves.png go")
  flags.DEFINE_integer("num_devices", 0, "devices of the 'clients' mesh axis (0 = all)")
  flags.DEFINE_float("homo_ratio", 0.1, "s: IID fraction of --partition=homo_ratio (FFGB §4)")
  flags.DEFINE_integer("comm_budget", 0, "models per client (FFGB m*K a round, FedAvg 2, both start "
                       "at 2); > 0 sets each algorithm's rounds to ceil((budget - 2) / cost)")
  # --task=attack / metric_opt (seed 000 §6.2-6.3; specs/fzoos.md §3.2-3.3).
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
  flags.DEFINE_bool("save_learners", False, "FFGB family: write each round's learners to "
                    "<output_dir>/<alg>/learners/ (needs store_learners >= eval_every)")
  flags.DEFINE_integer("blas_threads", 1, "threads of the BLAS/LAPACK libraries behind XLA's CPU linear "
                       "algebra (threadpoolctl; 0 = the libraries' default). 1 by default: jaxlib's "
                       "Cholesky/LU (FZooS GP and RFF fits, FFGB rf_ridge) runs 2 spinning OpenBLAS "
                       "threads that slow it 100x when other processes share the cores")
  # Checkpoint/resume and multi-host runs (issue 8; BUILD.md "Devices and hosts").
  flags.DEFINE_integer("checkpoint_every", 0, "save the full state every K rounds (at the first chunk "
                       "end at or after each multiple; last 2 kept) under <output_dir>/<alg>/checkpoints; "
                       "0 = off")
  flags.DEFINE_bool("resume", False, "continue each algorithm from its newest checkpoint in "
                    "<output_dir>/<alg>/checkpoints (metrics.jsonl kept up to it and appended)")
  flags.DEFINE_string("coordinator_address", None, "multi-host: host:port of process 0's "
                      "jax.distributed coordinator (needs --num_processes > 1)")
  flags.DEFINE_integer("num_processes", 1, "multi-host: number of processes (one per host/GPU); 1 = single process")
  flags.DEFINE_integer("process_id", 0, "multi-host: this process's index in [0, num_processes)")
  for name, (typ, help_) in HPARAMS.items():
    if name not in CORE_HPARAMS:
      _define(name, typ, None, f"{help_}; sets it for every algorithm of the run that has it "
              "(default: each algorithm's own)")
    for alg in algorithms.REGISTRY:
      f = _field(alg, name)
      if f is not None:
        default = {**algorithms.default_config(alg), **ALGORITHM_DEFAULTS.get(alg, {})}[name]
        _define(f"{alg}_{name}", typ, None, f"{config.describe(f)}; for {alg} only (default: {default})")


def _field(alg: str, name: str):
  """The dataclass field ``name`` of algorithm ``alg``'s config, or None."""
  return {f.name: f for f in config.hparam_fields(algorithms.REGISTRY[alg][0])}.get(name)


def _define(name, typ, default, help_):
  {float: flags.DEFINE_float, int: flags.DEFINE_integer, str: flags.DEFINE_string,
   bool: flags.DEFINE_bool}[typ](name, default, help_)


# ``NAME=VALUE`` override text -> the field's type: one parser for the CLI and fedsim.run.
_convert = api._convert


def parse_spec(spec: str):
  """Splits an ``--algorithm`` entry ``NAME[:HP=VALUE...]`` into (NAME, overrides).

  ``fedzo:local_steps=20:lr=0.001`` runs FedZO with H = 20 and eta = 1e-3 next to
  other entries (e.g. ``fedzo:local_steps=5``), each in its own output folder.

  Raises:
    ConfigError: unknown algorithm, hyperparameter, or a value of the wrong type.
  """
  name, *items = spec.split(":")
  if name not in algorithms.REGISTRY:
    raise ConfigError("algorithm", f"unknown {name!r}; accepted: {', '.join(algorithms.REGISTRY)}")
  fields, out = algorithms.config_fields(name), {}
  for item in items:
    key, eq, value = item.partition("=")
    if not eq or key not in fields or key not in HPARAMS:
      accepted = [f for f in fields if f in HPARAMS]
      close = difflib.get_close_matches(key, accepted, n=1) if eq else []
      hint = f"did you mean {close[0]}?" if close else f"accepted NAME=VALUE with NAME in: {', '.join(accepted)}"
      raise ConfigError("algorithm", f"bad override {item!r} in {spec!r}; {hint}")
    try:
      out[key] = _convert(HPARAMS[key][0], value)
    except ValueError:
      raise ConfigError("algorithm", f"{key}={value!r} in {spec!r} is not a {HPARAMS[key][0].__name__}")
  return name, out


def run_label(spec: str) -> str:
  """The output-folder name of an ``--algorithm`` entry (':' -> '-')."""
  return spec.replace(":", "-").replace("/", "_")


def hparams_for(spec: str) -> dict:
  """The hyperparameters an ``--algorithm`` entry runs with (see module docstring
  for precedence; ``NAME:HP=VALUE`` overrides come last)."""
  alg, overrides = parse_spec(spec)
  cfg = algorithms.default_config(alg)
  cfg.update(ALGORITHM_DEFAULTS.get(alg, {}))
  for name in HPARAMS:
    if name not in cfg or name in CORE_HPARAMS:
      continue
    if FLAGS[f"{alg}_{name}"].present:
      cfg[name] = FLAGS[f"{alg}_{name}"].value
    elif FLAGS[name].present:
      cfg[name] = FLAGS[name].value
  if "clients_per_round" in cfg:
    flag = FLAGS[f"{alg}_clients_per_round"]
    cfg["clients_per_round"] = flag.value if flag.present else FLAGS.clients_per_round
  if "rounds" in cfg:  # FZooS sizes its history from the run (seed 000 Alg. 2 keeps the trajectory)
    cfg["rounds"] = (comm_rounds(alg, cfg, FLAGS.num_clients, FLAGS.comm_budget)
                     if FLAGS.comm_budget > 0 else FLAGS.rounds)
  cfg.update(overrides)
  return cfg


def hparam_sources(spec: str) -> dict:
  """Where each hyperparameter of an ``--algorithm`` entry comes from (same precedence as
  :func:`hparams_for`): ``"algorithm entry"`` (``NAME:HP=VALUE``), ``"--ALG_HP"``, ``"--HP"``
  (given on the command line or in a flagfile), ``"binary default"``
  (:data:`ALGORITHM_DEFAULTS`), ``"registry preset"`` (the registry entry's overrides) or
  ``"default"`` (the config dataclass's)."""
  alg, overrides = parse_spec(spec)
  presets = algorithms.REGISTRY[alg][1]
  out = {}
  for name in algorithms.config_fields(alg):
    per_alg = f"{alg}_{name}" in FLAGS and FLAGS[f"{alg}_{name}"].present
    if name in overrides:
      out[name] = "algorithm entry"
    elif name == "rounds":
      out[name] = "--comm_budget" if FLAGS.comm_budget > 0 else "--rounds"
    elif per_alg:
      out[name] = f"--{alg}_{name}"
    elif name in HPARAMS and (name in CORE_HPARAMS or FLAGS[name].present):
      out[name] = f"--{name}"
    elif name in ALGORITHM_DEFAULTS.get(alg, {}):
      out[name] = "binary default"
    elif name in presets:
      out[name] = "registry preset"
    else:
      out[name] = "default"
  return out


def validate():
  """Checks every flag before anything is built or compiled.

  Raises:
    ConfigError: naming the flag and the accepted values.
  """
  for spec in FLAGS.algorithm:
    parse_spec(spec)
  if len({run_label(s) for s in FLAGS.algorithm}) != len(FLAGS.algorithm):
    raise ConfigError("algorithm", "an entry is repeated; give repeated algorithms different overrides")
  if not FLAGS.algorithm:
    raise ConfigError("algorithm", f"empty; accepted: {', '.join(algorithms.REGISTRY)}")
  for flag, accepted in (("task", TASKS), ("dataset", DATASETS), ("partition", PARTITIONS)):
    _check_one_of(flag, accepted)
  if FLAGS.num_clients < 1:
    raise ConfigError("num_clients", f"must be >= 1; got {FLAGS.num_clients}")
  if not 1 <= FLAGS.clients_per_round <= FLAGS.num_clients:
    raise ConfigError("clients_per_round",
                      f"must be in [1, num_clients={FLAGS.num_clients}]; got {FLAGS.clients_per_round}")
  if FLAGS.rounds < 0:
    raise ConfigError("rounds", f"must be >= 0; got {FLAGS.rounds}")
  if FLAGS.eval_every < 1:
    raise ConfigError("eval_every", f"must be >= 1; got {FLAGS.eval_every}")
  if not FLAGS.dirichlet_alpha > 0:
    raise ConfigError("dirichlet_alpha", f"must be > 0; got {FLAGS.dirichlet_alpha}")
  if FLAGS.shards_per_client < 1:
    raise ConfigError("shards_per_client", f"must be >= 1; got {FLAGS.shards_per_client}")
  validate_distributed()
  if FLAGS.checkpoint_every < 0:
    raise ConfigError("checkpoint_every", f"must be >= 0 (0 = off); got {FLAGS.checkpoint_every}")
  if FLAGS.blas_threads < 0:
    raise ConfigError("blas_threads", f"must be >= 0 (0 = the libraries' default); got {FLAGS.blas_threads}")
  import jax
  if not 0 <= FLAGS.num_devices <= jax.device_count():
    raise ConfigError("num_devices", f"must be in [0, {jax.device_count()}]; got {FLAGS.num_devices}")
  for spec in FLAGS.algorithm:
    alg, overrides = parse_spec(spec)
    hp = hparams_for(spec)
    where = lambda n: ("algorithm" if n in overrides else
                       f"{alg}_{n}" if f"{alg}_{n}" in FLAGS and FLAGS[f"{alg}_{n}"].present else n)
    try:  # every field's accepted values / range and the config's own cross-field rules
      algorithms.make_config(alg, **hp)
    except FieldError as e:
      raise ConfigError(where(e.field), e.message) from None
    if "clients_per_round" in hp and not 1 <= hp["clients_per_round"] <= FLAGS.num_clients:
      raise ConfigError(where("clients_per_round"), f"must be in [1, num_clients={FLAGS.num_clients}]; "
                        f"got {hp['clients_per_round']}")
    if hp.get("direction") == "orthogonal" and FLAGS.task == "quadratic" and hp["fd_directions"] > FLAGS.dim:
      raise ConfigError(where("fd_directions"), f"orthogonal directions need <= dim={FLAGS.dim}")
    if alg in FFGB_FAMILY:
      validate_ffgb(alg, hp, where)
  _check_flags_reach_an_algorithm()
  if FLAGS.task in ("attack", "metric_opt"):  # seed 000 §6.2-6.3
    _check_fzoos_task_flags()
  if not 0 <= FLAGS.homo_ratio <= 1:
    raise ConfigError("homo_ratio", f"must be in [0, 1]; got {FLAGS.homo_ratio}")
  if FLAGS.comm_budget < 0:
    raise ConfigError("comm_budget", f"must be >= 0 (0 = use --rounds); got {FLAGS.comm_budget}")
  if FLAGS.hidden_layers < 1:
    raise ConfigError("hidden_layers", f"must be >= 1; got {FLAGS.hidden_layers}")
  _check_one_of("activation", ("relu", "leaky_relu"))
  if FLAGS.task == "shift_tabular":
    _check_one_of("shift_kind", ("tv", "w1"))
    _check_one_of("tabular_loss", ("square", "ce"))
    hi = 1.0 if FLAGS.shift_kind == "tv" else math.inf
    if not (0 <= FLAGS.feature_shift <= hi and math.isfinite(FLAGS.feature_shift)):
      raise ConfigError("feature_shift", f"must be in [0, {hi:g}] for shift_kind={FLAGS.shift_kind} "
                        f"(finite); got {FLAGS.feature_shift}")
    bad = [a for a in FLAGS.algorithm if parse_spec(a)[0] not in FFGB_FAMILY]
    if bad:
      raise ConfigError("algorithm", f"--task=shift_tabular runs only {', '.join(FFGB_FAMILY)}; got {bad[0]}")


def _check_flags_reach_an_algorithm():
  """A hyperparameter flag given (command line or flagfile) must reach an algorithm of the run.

  Raises:
    ConfigError: a shared ``--HP`` that no algorithm of the run has, or an
      ``--ALG_HP`` whose ALG is not in ``--algorithm``.
  """
  run = list(dict.fromkeys(parse_spec(spec)[0] for spec in FLAGS.algorithm))
  for name in HPARAMS:
    if name not in CORE_HPARAMS and FLAGS[name].present and \
        not any(name in algorithms.config_fields(alg) for alg in run):
      having = [a for a in algorithms.REGISTRY if name in algorithms.config_fields(a)]
      raise ConfigError(name, f"no algorithm of the run ({', '.join(run)}) has {name}; it is a "
                        f"hyperparameter of {', '.join(having)}")
    for alg in algorithms.REGISTRY:
      flag = f"{alg}_{name}"
      if alg not in run and flag in FLAGS and FLAGS[flag].present:
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


def task_settings() -> dict:
  """The task fields of ``fedsim.ExperimentConfig`` from the flags (task, data, partition,
  ``task_options``), without the seed."""
  return dict(task=FLAGS.task, dataset=FLAGS.dataset, data_dir=FLAGS.data_dir,
              num_clients=FLAGS.num_clients, partition=FLAGS.partition,
              dirichlet_alpha=FLAGS.dirichlet_alpha, shards_per_client=FLAGS.shards_per_client,
              quantity_law=FLAGS.quantity_law, quantity_sigma=FLAGS.quantity_sigma,
              homo_ratio=FLAGS.homo_ratio,
              task_options=dict(hidden_width=FLAGS.hidden_width, dim=FLAGS.dim,
                                heterogeneity=FLAGS.heterogeneity, target_class=FLAGS.target_class,
                                attack_c=FLAGS.attack_c, classifier=FLAGS.classifier,
                                cache_dir=FLAGS.cache_dir, spectrum_sigma=FLAGS.spectrum_sigma,
                                isotropic=FLAGS.isotropic, finetune_shift=FLAGS.finetune_shift,
                                hidden_layers=FLAGS.hidden_layers, activation=FLAGS.activation,
                                shift_kind=FLAGS.shift_kind, feature_shift=FLAGS.feature_shift,
                                tabular_loss=FLAGS.tabular_loss,
                                **smooth_erm_kwargs(), **fzoos_task_kwargs()))


def build_task():
  """The task described by the flags (loads and partitions data), as ``fedsim.api.build_task``
  builds it from the same settings: ``make_task(task, seed=, <fields>, **task_options)``."""
  from fedsim.tasks import make_task
  settings = task_settings()
  options = settings.pop("task_options")
  return make_task(settings.pop("task"), seed=FLAGS.seed, **settings, **options)


def experiment_config(**overrides):
  """The ``fedsim.ExperimentConfig`` of the flags (``overrides`` replace fields).

  Each ``--algorithm`` entry's hyperparameters are resolved here (:func:`hparams_for`)
  and passed under its label, so the library runs exactly what the flags say.

  Raises:
    ConfigError: a bad setting (naming the field).
  """
  from fedsim.api import ExperimentConfig
  specs = tuple(FLAGS.algorithm)
  fields = dict(task_settings(), seed=FLAGS.seed, algorithms=specs,
                hparams={run_label(s): hparams_for(s) for s in specs},
                clients_per_round=FLAGS.clients_per_round, rounds=FLAGS.rounds,
                eval_every=FLAGS.eval_every, comm_budget=FLAGS.comm_budget,
                checkpoint_every=FLAGS.checkpoint_every, resume=FLAGS.resume,
                save_learners=FLAGS.save_learners, num_devices=FLAGS.num_devices,
                blas_threads=FLAGS.blas_threads, output_dir=FLAGS.output_dir)
  fields.update(overrides)
  return ExperimentConfig(**fields)


def _check_fzoos_task_flags():
  """--task=attack / metric_opt flag checks (exit 2 before anything is built)."""
  if FLAGS.portion is not None and not 0 < FLAGS.portion <= 1:
    raise ConfigError("portion", f"must be in (0, 1]; got {FLAGS.portion}")
  if not (math.isfinite(FLAGS.perturbation_box) and FLAGS.perturbation_box >= 0):
    raise ConfigError("perturbation_box", f"must be >= 0 (0 = task default); got {FLAGS.perturbation_box}")
  if FLAGS.model_train_steps < 0:
    raise ConfigError("model_train_steps", f"must be >= 0 (0 = task default); got {FLAGS.model_train_steps}")
  from fedsim.tasks.metric_opt import METRICS
  if FLAGS.task == "metric_opt":
    _check_one_of("opt_metric", METRICS)
  if FLAGS.task == "attack":
    if FLAGS.classifier not in ("cnn", "mlp"):
      raise ConfigError("classifier", f"unknown {FLAGS.classifier!r} for --task=attack; accepted: cnn, mlp")
    if FLAGS.dataset not in ("digits", "mnist"):
      raise ConfigError("dataset", f"--task=attack needs images; accepted: digits, mnist")


def _check_one_of(flag: str, accepted) -> None:
  """Raises ConfigError(flag, "unknown V; accepted: A, B") unless FLAGS.<flag> is in ``accepted``."""
  value = getattr(FLAGS, flag)
  if value not in accepted:
    raise ConfigError(flag, f"unknown {value!r}; accepted: {', '.join(accepted)}")


def fzoos_task_kwargs() -> dict:
  """The attack / metric_opt arguments of ``make_task`` from the flags (seed 000 §6.2-6.3)."""
  return dict(portion=FLAGS.portion, opt_metric=FLAGS.opt_metric, attack_target=FLAGS.attack_target,
              perturbation_box=FLAGS.perturbation_box, model_train_steps=FLAGS.model_train_steps)


def set_blas_threads(n: int) -> list:
  """Limits every loaded BLAS/LAPACK library to ``n`` threads (``fedsim.runner.set_blas_threads``)."""
  from fedsim.runner import set_blas_threads as set_threads
  return set_threads(n)


def smooth_erm_kwargs() -> dict:
  """The logistic_soft / ridge arguments of ``make_task`` from the flags (seed 004)."""
  return dict(samples_per_client=FLAGS.samples_per_client, num_features=FLAGS.num_features,
              server_samples=FLAGS.rank, max_rank=FLAGS.max_rank, mu=FLAGS.l2_penalty,
              data_heterogeneity=FLAGS.data_heterogeneity, server_shift=FLAGS.server_shift,
              feature_map=FLAGS.feature_map, holder_eta=FLAGS.holder_eta, raw_dim=FLAGS.raw_dim)


def parse_flags_or_exit(argv):
  """absl flags parser that turns a flag error into one line and exit status 2."""
  try:
    argv = FLAGS(argv)
  except flags.Error as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
  if "x64" in FLAGS and FLAGS.x64:  # before any array exists (specs/fedlrgd.md §6.3)
    import jax
    jax.config.update("jax_enable_x64", True)
  return argv


FFGB_FAMILY = ("ffgb", "ffgb_nores", "ffgb_c", "ffgb_l", "ffgb_code", "ffgb_nores_code")
FFGB_TASKS = ("softmax", "mlp", "cnn", "shift_tabular")  # tasks with per-client points x (seed 002)


def validate_ffgb(alg: str, hp: dict, where):
  """FFGB-family checks that involve the algorithm name, the task or other flags (seed 002;
  specs/ffgb.md §2, §6.4); each field's own range is checked by its dataclass (fedsim.config).

  Args:
    alg: an FFGB_FAMILY name; hp: its hyperparameters; where: hp name -> flag name.

  Raises:
    ConfigError: naming the flag and the accepted range.
  """
  if hp["weak_learner"] == "wo_lip" and alg != "ffgb_l":
    raise ConfigError(where("weak_learner"), f"wo_lip (eq. 25) needs FFGB.L's closed-form query "
                      f"gradient; accepted for {alg}: scaled, rf_ridge, mlp, cnn, wo_inf")
  if hp["weak_learner"] in ("wo_inf", "wo_lip") and hp["wo_family"] == "cnn" and (
      hp["weak_learner"] == "wo_lip" or FLAGS.task == "shift_tabular" or FLAGS.dataset == "libsvm"):
    raise ConfigError(where("wo_family"), "cnn needs image data (and wo_inf); accepted: mlp, rf, linear")
  if FLAGS.save_learners and hp["store_learners"] < FLAGS.eval_every:
    raise ConfigError(where("store_learners"), f"--save_learners needs >= eval_every={FLAGS.eval_every}; "
                      f"got {hp['store_learners']}")
  if hp["eta_schedule"] == "theory" and alg != "ffgb_l" and hp["mu"] <= 0:
    raise ConfigError(where("mu"), "eta_schedule=theory (c/(mu(tK+k+1)), Thm 3.1) needs mu > 0")
  if FLAGS.task not in FFGB_TASKS:
    raise ConfigError("task", f"{alg} needs a task with client points; accepted: {', '.join(FFGB_TASKS)}")
  if alg == "ffgb_l" and not (FLAGS.task == "shift_tabular" and FLAGS.tabular_loss == "square"):
    raise ConfigError("task", "ffgb_l needs square loss (problem (14)): --task=shift_tabular --tabular_loss=square")
  if hp["weak_learner"] == "cnn" and (FLAGS.task == "shift_tabular" or FLAGS.dataset == "libsvm"):
    raise ConfigError(where("weak_learner"), "cnn needs image data (--dataset=digits or mnist); "
                      "accepted otherwise: scaled, rf_ridge, mlp")


def comm_rounds(alg: str, hp: dict, num_clients: int, budget: int) -> int:
  """Rounds within ``--comm_budget`` (Figs. 1, 4; [code] comm starts at 2):
  ceil((budget - 2) / cost), cost = m K for the FFGB family, 2 otherwise."""
  if alg in FFGB_FAMILY:
    cost = (hp.get("clients_per_round") or num_clients) * hp["local_steps"]
  else:
    cost = 2
  return max(0, -(-(budget - 2) // cost))
