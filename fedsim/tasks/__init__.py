"""Objectives: supervised classification (softmax, mlp) and synthetic functions (quadratic).

``make_task`` builds a task from experiment settings; every task is a
:class:`fedsim.core.types.Task` and never knows which algorithm runs it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from fedsim.config import FieldError, check_type, check_value, did_you_mean, field_type, hparam, hparam_fields
from fedsim.models import ACTIVATIONS
from fedsim.tasks.choices import ATTACK_CW_CLASSIFIERS, FINETUNE_SHIFTS, OPT_METRICS
from fedsim.tasks.choices import ATTACK_MODELS as ATTACK_CLASSIFIERS
from fedsim.tasks.classification import make_classification_task
from fedsim.tasks.functional import SHIFT_KINDS, TABULAR_LOSSES
from fedsim.tasks.logistic_soft import FEATURE_MAPS
from fedsim.tasks.quadratic import make_quadratic_task

TASKS: tuple[str, ...] = ("softmax", "mlp", "quadratic", "attack_cw", "illcond_quadratic", "cnn", "finetune")
TASKS += ("lenet",)  # Shen et al. 2022 (FFGB) App. B.1: its CIFAR-10 weak learner, the model FedAvg trains
TASKS += ("logistic_soft", "ridge")  # Jadbabaie et al. 2023 (FedLRGD): smooth ERM with a server dataset
TASKS += ("ackley", "levy")  # Shu et al. 2023 (FZooS) [code]: federated Ackley / Levy
TASKS += ("attack", "metric_opt")  # Shu et al. 2023 (FZooS) §6.2-6.3: black-box attack, metric optimisation
TASKS += ("shift_tabular",)  # Shen et al. 2022 (FFGB.C / FFGB.L): TV / W1 feature shift, function space
SUPERVISED = ("softmax", "mlp")
# Tasks without a parameter vector (value caches: fedsim.tasks.functional); only the FFGB family runs them.
FUNCTION_SPACE = ("shift_tabular",)


@dataclasses.dataclass(frozen=True)
class TaskOptions:
  """Every task option (``fedsim.ExperimentConfig.task_options``, :func:`make_task`'s keyword arguments
  besides the data settings): its default, help and accepted values, declared once
  (:func:`fedsim.config.hparam`). Each task reads the options its help names and ignores the others.

  :func:`resolve_options` fills in the defaults; :func:`check_options` checks values when an
  ``ExperimentConfig`` is made (before any data is loaded). ``experiments.run`` has a flag per
  option, of the option's name but for :data:`OPTION_FLAGS`.
  """

  hidden_width: int = hparam(64, help="hidden units of the MLP (tasks mlp, finetune)", low=1)
  hidden_layers: int = hparam(1, help="hidden layers of the MLP (task mlp; 2 with hidden_width=32 and "
                              "activation=leaky_relu: FFGB's MLP weak learner, Shen et al. 2022, App. B.1)", low=1)
  activation: str = hparam("relu", help="hidden activation of the MLP (task mlp; leaky_relu: slope 0.01)",
                           choices=ACTIVATIONS)
  dim: int = hparam(300, help="d, dimension of the synthetic tasks (quadratic, illcond_quadratic; ackley and "
                    "levy need d >= 2)", low=1)
  heterogeneity: float = hparam(5.0, help="C, heterogeneity of the synthetic tasks", low=0, finite=True)
  target_class: int = hparam(4, help="attacked class (task attack_cw)", low=0)
  attack_c: float = hparam(1.0, help="distortion weight c of the attack loss (task attack_cw; FedZO eq. 21)",
                           low=0, finite=True)
  classifier: str = hparam("mlp", help="attacked classifier: attack_cw: mlp, softmax; attack: cnn, mlp")
  cache_dir: str | None = hparam(None, help="where trained classifiers are cached (None: ~/.cache/fedsim)")
  spectrum_sigma: float = hparam(3 ** 0.5, help="std of log lambda (task illcond_quadratic; Li et al. 2025, §5.1)",
                                 low=0, finite=True)
  spectrum_rank: int = hparam(0, help="k > 0: only k log-normal eigenvalues, the other d - k 1e-4 (task "
                              "illcond_quadratic); 0: all d", low=0)
  isotropic: bool = hparam(False, help="all eigenvalues equal, same trace (task illcond_quadratic control)")
  finetune_shift: str = hparam("flip", help="target shift of task finetune (flip needs image data)",
                               choices=FINETUNE_SHIFTS)
  shift_kind: str = hparam("w1", help="shift of task shift_tabular: tv (shared support, reweighted), w1 "
                           "(translated clouds)", choices=SHIFT_KINDS)
  feature_shift: float = hparam(0.0, help="shift knob of task shift_tabular: tv mixture weight in [0, 1]; "
                                "w1 spread >= 0", low=0, finite=True)
  tabular_loss: str = hparam("square", help="loss of task shift_tabular: square (FFGB.L), ce (3 classes)",
                             choices=TABULAR_LOSSES)
  samples_per_client: int = hparam(40, help="s, samples per client (logistic_soft, ridge, shift_tabular)", low=1)
  num_features: int = hparam(2, help="p, features (logistic_soft, ridge, shift_tabular)", low=1)
  server_samples: int = hparam(8, help="r, the server's samples = FedLRGD's approximate rank (logistic_soft, "
                               "ridge; <= max_rank; Jadbabaie et al. 2023, App. A)", low=1)
  max_rank: int = hparam(32, help="R >= r: static padding of the server data (logistic_soft, ridge)", low=1)
  mu: float = hparam(0.1, help="L2 weight / strong convexity (logistic_soft, ridge)", low=0, low_open=True,
                     finite=True)
  data_heterogeneity: float = hparam(0.0, help="h: client c's data on the box [a_c, a_c+1-h], a_c ~ U[0,h] "
                                     "(logistic_soft, ridge)", low=0, high=1, high_open=True)
  server_shift: float = hparam(0.0, help="delta: server data on [0,1-delta], clients on [delta,1] "
                               "(logistic_soft, ridge)", low=0, high=1, high_open=True)
  feature_map: str = hparam("identity", help="features of logistic_soft / ridge", choices=FEATURE_MAPS)
  holder_eta: float = hparam(2.5, help="Hölder order eta of feature_map=holder", low=0, low_open=True,
                             finite=True)
  raw_dim: int = hparam(1, help="D: dimension of the raw points of feature_map=holder", low=1)
  label_noise: float = hparam(0.5, help="label noise of logistic_soft", low=0, finite=True)
  portion: float | None = hparam(None, help="P: each client's share of the classes (attack: default 0.7; "
                                 "metric_opt: default 0.3)", low=0, low_open=True, high=1)
  perturbation_box: float = hparam(0.0, help="box eps of the perturbation (attack, metric_opt; 0: the task's "
                                   "default)", low=0, finite=True)
  attack_target: int = hparam(-1, help="attack: index of the eligible target image (-1: the seed)", low=-1)
  opt_metric: str = hparam("precision", help="metric_opt objective 1 - macro METRIC", choices=OPT_METRICS)
  model_train_steps: int = hparam(0, help="attack / metric_opt: Adam steps of the task's classifiers (0: the "
                                  "task's default)", low=0)


# Options whose experiments.run flag has another name: option -> flag.
OPTION_FLAGS = {"server_samples": "rank", "mu": "l2_penalty"}
_OPTION_OF_FLAG = {flag: key for key, flag in OPTION_FLAGS.items()}
# Images: the datasets task attack accepts (Shu et al. 2023, §6.2).
ATTACK_DATASETS = ("digits", "mnist")


def option_defaults() -> dict[str, Any]:
  """Every task option -> its default (:class:`TaskOptions`)."""
  return {f.name: f.default for f in hparam_fields(TaskOptions)}


def resolve_options(options: Mapping[str, Any]) -> dict[str, Any]:
  """Every task option -> the value ``options`` gives, else its default, in :class:`TaskOptions` order."""
  return {**option_defaults(), **options}


def option_error(key: str, message: str) -> FieldError:
  """A FieldError of task option ``key``: ``KEY: MESSAGE`` from Python, ``--FLAG: MESSAGE`` on the
  command line (its flag: :data:`OPTION_FLAGS`)."""
  return FieldError(key, message, cli=f"--{OPTION_FLAGS.get(key, key)}: {message}")


def check_options(task: str, options: Mapping[str, Any], dataset: str | None = None) -> None:
  """Checks task options (each given option's type and range, then the rules of ``task``), without
  loading data.

  Args:
    task: a name of :data:`TASKS`; options: ``{OPTION: VALUE}`` (unknown keys raise);
    dataset: the data set the task loads (task attack needs images), or None.

  Raises:
    FieldError: naming the option (``KEY: MESSAGE``; the command line's flag in ``cli``), what is
      accepted and the value given; an unknown option with a "did you mean" suggestion.
  """
  fields = {f.name: f for f in hparam_fields(TaskOptions)}
  for key, value in options.items():
    if key not in fields:
      raise FieldError("task_options", f"unknown task option {key!r}{did_you_mean(key, fields)}; "
                                       f"accepted: {', '.join(fields)}")
    f = fields[key]
    try:
      check_type(key, value, field_type(TaskOptions, key), optional=f.default is None)
      check_value(key, value, f.metadata, field_type(TaskOptions, key), optional=f.default is None)
    except FieldError as e:
      raise option_error(key, e.message) from None
  opts = resolve_options(options)
  if task in ("ackley", "levy") and opts["dim"] < 2:
    raise option_error("dim", f"must be >= 2 for task {task}; got {opts['dim']}")
  if opts["server_samples"] > opts["max_rank"] and task in ("logistic_soft", "ridge"):
    raise option_error("server_samples", f"must be in [1, max_rank={opts['max_rank']}]; "
                                         f"got {opts['server_samples']}")
  if task == "shift_tabular" and opts["shift_kind"] == "tv" and opts["feature_shift"] > 1:
    raise option_error("feature_shift", f"must be in [0, 1] for shift_kind=tv; got {opts['feature_shift']}")
  classifiers = {"attack": ATTACK_CLASSIFIERS, "attack_cw": ATTACK_CW_CLASSIFIERS}.get(task)
  if classifiers is not None and opts["classifier"] not in classifiers:
    raise option_error("classifier", f"unknown {opts['classifier']!r}{did_you_mean(opts['classifier'], classifiers)}"
                                     f" for task {task}; accepted: {', '.join(classifiers)}")
  if task == "attack" and dataset is not None and dataset not in ATTACK_DATASETS:
    raise FieldError("dataset", f"task attack needs images; accepted: {', '.join(ATTACK_DATASETS)}; got {dataset!r}")


def make_task(name: str, *, num_clients: int, seed: int = 0, dataset: str = "digits",
              data_dir: str | None = None, partition: str = "dirichlet", dirichlet_alpha: float = 0.5,
              shards_per_client: int = 2, quantity_law: str = "lognormal", quantity_sigma: float = 1.0,
              hidden_width: int = 64, dim: int = 300, heterogeneity: float = 5.0,
              target_class: int = 4, attack_c: float = 1.0, classifier: str = "mlp",
              cache_dir: str | None = None, spectrum_sigma: float = 3 ** 0.5, spectrum_rank: int = 0,
              isotropic: bool = False, finetune_shift: str = "flip", homo_ratio: float = 0.1,
              hidden_layers: int = 1, activation: str = "relu", shift_kind: str = "w1",
              feature_shift: float = 0.0, tabular_loss: str = "square", portion: float | None = None,
              perturbation_box: float = 0.0, attack_target: int = -1, opt_metric: str = "precision",
              model_train_steps: int = 0, **smooth_erm):
  """Builds task ``name``.

  Supervised tasks load ``dataset`` (fedsim.data.load_dataset), split its
  training set over ``num_clients`` clients with ``partition`` (seeded by
  ``seed``), and pad client arrays to the largest client. ``quadratic`` uses
  ``dim``, ``num_clients`` and ``heterogeneity`` (C). ``attack_cw`` (FedZO eq. 21)
  trains (or loads from ``cache_dir``) a ``classifier`` on ``dataset`` and splits
  its correctly classified ``target_class`` training images over the clients
  with quantity skew (``quantity_law``, ``quantity_sigma``); ``attack_c`` is the
  distortion weight c. ``illcond_quadratic`` (Li et al. 2025, §5.1 toy) uses ``dim``,
  ``heterogeneity`` (spread of the client optima), ``spectrum_sigma`` (std of
  log lambda), ``spectrum_rank`` (k > 0: only k log-normal eigenvalues, the rest
  1e-4, a low effective rank fixed as d grows) and ``isotropic`` (all eigenvalues
  equal, same trace); ``cnn`` is
  the small CNN of Li et al. 2025, §6 on ``dataset``; ``lenet`` is FFGB's CIFAR-10 weak
  learner (Shen et al. 2022, App. B.1: the PyTorch-tutorial CNN, conv 6 - 16 5x5, FC 32 - 32,
  leaky ReLU; fedsim.models.weak_learners.weak_learner_cnn) as a parametric model,
  so FedAvg trains the same network as FFGB's ``cnn`` oracle (specs/ffgb.md §3.1); ``finetune`` pre-trains an MLP
  on ``dataset`` and fine-tunes it on its ``finetune_shift`` (flip, relabel, none).
  ``logistic_soft`` (Jadbabaie et al. 2023, App. A) and ``ridge`` (the exact-rank case) take
  ``num_clients``, ``seed`` and the keyword arguments of
  ``fedsim.tasks.logistic_soft.make_smooth_erm_task`` in ``smooth_erm``
  (``samples_per_client``, ``num_features``, ``server_samples`` (the rank r),
  ``max_rank``, ``mu``, ``data_heterogeneity``, ``server_shift``, ``feature_map``,
  ``holder_eta``, ``raw_dim``); errors name the flag.
  ``attack`` / ``metric_opt`` (Shu et al. 2023, §6.2-6.3, fedsim.tasks.attack /
  fedsim.tasks.metric_opt) take ``portion`` (None: 0.7 for attack, 0.3 for
  metric_opt), ``perturbation_box`` (0: the task's default), ``model_train_steps`` (Adam
  steps of the task's classifiers; 0: the task's default), ``attack_target``
  and ``opt_metric``; ``attack`` uses ``classifier`` (cnn, mlp).

  Raises:
    ConfigError: unknown task, or a dataset / partition error (naming the flag
      or file).
  """
  if name == "quadratic":
    if dim < 1:
      raise option_error("dim", f"must be >= 1; got {dim}")
    if heterogeneity < 0:
      raise option_error("heterogeneity", f"must be >= 0; got {heterogeneity}")
    return make_quadratic_task(dim, num_clients, heterogeneity, seed=seed)
  if name in ("ackley", "levy"):
    from fedsim.tasks.synthetic import make_synthetic_task
    if dim < 2:
      raise option_error("dim", f"must be >= 2; got {dim}")
    if heterogeneity < 0:
      raise option_error("heterogeneity", f"must be >= 0; got {heterogeneity}")
    return make_synthetic_task(name, dim, num_clients, heterogeneity, seed=seed)
  if name in ("logistic_soft", "ridge"):
    from fedsim.tasks.logistic_soft import make_smooth_erm_task
    kw = dict(smooth_erm)
    if "data_heterogeneity" in kw:  # ``heterogeneity`` is the synthetic tasks' C
      kw["heterogeneity"] = kw.pop("data_heterogeneity")
    try:
      return make_smooth_erm_task(name, num_clients=num_clients, seed=seed, **kw)
    except ValueError as e:  # the message starts with the option's name (or its flag's)
      key, _, msg = str(e).partition(" ")
      raise option_error(_OPTION_OF_FLAG.get(key, key), msg) from None
  if name == "shift_tabular":  # FFGB-family only (fedsim.tasks.functional.make_shift_task)
    from fedsim.tasks.functional import make_shift_task
    try:
      return make_shift_task(num_clients, smooth_erm.get("samples_per_client", 40),
                             smooth_erm.get("num_features", 2), kind=shift_kind, shift=feature_shift,
                             loss=tabular_loss, seed=seed)
    except ValueError as e:  # the message starts with the option's name (or its flag's)
      key, _, msg = str(e).partition(" ")
      raise option_error(_OPTION_OF_FLAG.get(key, key), msg) from None
  if name == "illcond_quadratic":
    if dim < 1:
      raise option_error("dim", f"must be >= 1; got {dim}")
    if not heterogeneity >= 0:
      raise option_error("heterogeneity", f"must be >= 0; got {heterogeneity}")
    if not spectrum_sigma >= 0:
      raise option_error("spectrum_sigma", f"must be >= 0; got {spectrum_sigma}")
    if spectrum_rank < 0:
      raise option_error("spectrum_rank", f"must be >= 0 (0: every eigenvalue log-normal); got {spectrum_rank}")
    from fedsim.tasks.illcond_quadratic import make_illcond_quadratic_task
    return make_illcond_quadratic_task(dim, num_clients, heterogeneity, sigma=spectrum_sigma,
                                       isotropic=isotropic, seed=seed, rank=spectrum_rank)
  if name not in TASKS:
    raise FieldError("task", f"unknown {name!r}{did_you_mean(name, TASKS)}; accepted: {', '.join(TASKS)}")
  if name in ("mlp", "finetune") and hidden_width < 1:
    raise option_error("hidden_width", f"must be >= 1; got {hidden_width}")
  from fedsim import data as fdata
  ds = fdata.load_dataset(dataset, data_dir, seed=0)
  if name in ("attack", "metric_opt"):  # Shu et al. 2023 (FZooS) §6.2-6.3
    portion = float(portion if portion is not None else (0.7 if name == "attack" else 0.3))
    box = float(perturbation_box or 0.0)
    if name == "attack":
      from fedsim.tasks.attack import TRAIN_CONFIG, make_attack_task
      tc = dataclasses.replace(TRAIN_CONFIG, steps=int(model_train_steps)) if model_train_steps else TRAIN_CONFIG
      return make_attack_task(ds, num_clients, seed=seed, portion=portion, model=classifier, box=box,
                              target=int(attack_target), cache_dir=cache_dir, train_config=tc)
    from fedsim.tasks.metric_opt import TRAIN_CONFIG as MO_TRAIN
    from fedsim.tasks.metric_opt import make_metric_opt_task
    tc = dataclasses.replace(MO_TRAIN, steps=int(model_train_steps)) if model_train_steps else MO_TRAIN
    return make_metric_opt_task(ds, num_clients, seed=seed, portion=portion,
                                metric=opt_metric, box=box,
                                cache_dir=cache_dir, train_config=tc)
  if name == "attack_cw":
    from fedsim.tasks.attack_cw import make_attack_cw_task
    return make_attack_cw_task(ds, num_clients, seed=seed, target_class=target_class, c=attack_c,
                               classifier=classifier, cache_dir=cache_dir, quantity_law=quantity_law,
                               quantity_sigma=quantity_sigma, dirichlet_alpha=dirichlet_alpha)
  if name == "finetune":
    from fedsim.tasks.finetune import SHIFTS, make_finetune_task
    if finetune_shift not in SHIFTS:
      raise option_error("finetune_shift", f"unknown {finetune_shift!r}{did_you_mean(finetune_shift, SHIFTS)}; "
                                          f"accepted: {', '.join(SHIFTS)}")
    if finetune_shift == "flip" and len(ds.feature_shape) < 2:
      raise option_error("finetune_shift", f"'flip' needs image data; {ds.name} is not")
    return make_finetune_task(ds, num_clients, seed=seed, shift=finetune_shift,
                              hidden_width=hidden_width, partition=partition,
                              dirichlet_alpha=dirichlet_alpha, cache_dir=cache_dir,
                              shards_per_client=shards_per_client, quantity_law=quantity_law,
                              quantity_sigma=quantity_sigma)
  parts = fdata.partition(ds.y_train, num_clients, partition, seed, dirichlet_alpha=dirichlet_alpha,
                          shards_per_client=shards_per_client, quantity_law=quantity_law,
                          quantity_sigma=quantity_sigma, homo_ratio_s=homo_ratio)
  clients = fdata.to_client_arrays(ds.x_train, ds.y_train, parts)
  info = {"dataset": ds.name, "dataset_info": ds.info, "partition": partition,
          "label_skew": float(fdata.label_skew(ds.y_train, parts, ds.num_classes))}
  if name == "cnn":
    if len(ds.feature_shape) < 2:
      raise FieldError("task", f"cnn needs image data; {ds.name} is not")
    from fedsim.models.cnn import CNN
    from fedsim.tasks.classification import make_model_task
    return make_model_task(name, CNN(ds.num_classes), ds, clients, info=info)
  if name == "lenet":
    from fedsim.models.weak_learners import weak_learner_cnn
    from fedsim.tasks.classification import make_model_task
    try:
      lenet = weak_learner_cnn(ds.num_classes, ds.feature_shape, "task")
    except ValueError:
      raise FieldError("task", f"lenet needs image data; {ds.name} is not") from None
    return make_model_task(name, lenet, ds, clients, info=info)
  if name == "mlp" and (hidden_layers != 1 or activation != "relu"):
    # ``hidden_layers`` x ``hidden_width`` with ``activation``: --hidden_layers=2
    # --hidden_width=32 --activation=leaky_relu is FFGB's MLP weak learner (Shen et al. 2022
    # App. B.1), so FedAvg trains the same network (specs/ffgb.md §3.1).
    from fedsim.models.mlp import ACTIVATIONS, MLP
    from fedsim.tasks.classification import make_model_task
    if hidden_layers < 1:
      raise option_error("hidden_layers", f"must be >= 1; got {hidden_layers}")
    if activation not in ACTIVATIONS:
      raise option_error("activation", f"unknown {activation!r}{did_you_mean(activation, ACTIVATIONS)}; "
                                      f"accepted: {', '.join(ACTIVATIONS)}")
    model = MLP(ds.num_classes, (hidden_width,) * hidden_layers, feature_ndim=len(ds.feature_shape),
                activation=activation)
    info.update(hidden_widths=[hidden_width] * hidden_layers, activation=activation)
    return make_model_task(name, model, ds, clients, info=info)
  return make_classification_task(name, ds, clients, hidden_width=hidden_width, info=info)
