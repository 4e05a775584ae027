"""Objectives: supervised classification (softmax, mlp) and synthetic functions (quadratic).

``make_task`` builds a task from experiment settings; every task is a
:class:`fedsim.core.types.Task` and never knows which algorithm runs it.
"""

from __future__ import annotations

import dataclasses

from fedsim.config import did_you_mean
from fedsim.core.errors import ConfigError
from fedsim.tasks.classification import make_classification_task
from fedsim.tasks.quadratic import make_quadratic_task

TASKS: tuple[str, ...] = ("softmax", "mlp", "quadratic", "attack_cw", "illcond_quadratic", "cnn", "finetune")
TASKS += ("lenet",)  # Shen et al. 2022 (FFGB) App. B.1: its CIFAR-10 weak learner, the model FedAvg trains
TASKS += ("logistic_soft", "ridge")  # Jadbabaie et al. 2023 (FedLRGD): smooth ERM with a server dataset
TASKS += ("ackley", "levy")  # Shu et al. 2023 (FZooS) [code]: federated Ackley / Levy
TASKS += ("attack", "metric_opt")  # Shu et al. 2023 (FZooS) §6.2-6.3: black-box attack, metric optimisation
TASKS += ("shift_tabular",)  # Shen et al. 2022 (FFGB.C / FFGB.L): TV / W1 feature shift, function space
SUPERVISED = ("softmax", "mlp")


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
      raise ConfigError("dim", f"must be >= 1; got {dim}")
    if heterogeneity < 0:
      raise ConfigError("heterogeneity", f"must be >= 0; got {heterogeneity}")
    return make_quadratic_task(dim, num_clients, heterogeneity, seed=seed)
  if name in ("ackley", "levy"):
    from fedsim.tasks.synthetic import make_synthetic_task
    if dim < 2:
      raise ConfigError("dim", f"must be >= 2; got {dim}")
    if heterogeneity < 0:
      raise ConfigError("heterogeneity", f"must be >= 0; got {heterogeneity}")
    return make_synthetic_task(name, dim, num_clients, heterogeneity, seed=seed)
  if name in ("logistic_soft", "ridge"):
    from fedsim.tasks.logistic_soft import make_smooth_erm_task
    kw = dict(smooth_erm)
    if "data_heterogeneity" in kw:  # ``heterogeneity`` is the synthetic tasks' C
      kw["heterogeneity"] = kw.pop("data_heterogeneity")
    try:
      return make_smooth_erm_task(name, num_clients=num_clients, seed=seed, **kw)
    except ValueError as e:  # the message starts with the flag's name
      flag, _, msg = str(e).partition(" ")
      raise ConfigError(flag, msg) from None
  if name == "shift_tabular":  # FFGB-family only (fedsim.tasks.functional.make_shift_task)
    from fedsim.tasks.functional import make_shift_task
    try:
      return make_shift_task(num_clients, smooth_erm.get("samples_per_client", 40),
                             smooth_erm.get("num_features", 2), kind=shift_kind, shift=feature_shift,
                             loss=tabular_loss, seed=seed)
    except ValueError as e:  # the message starts with the flag's name
      flag, _, msg = str(e).partition(" ")
      raise ConfigError(flag, msg) from None
  if name == "illcond_quadratic":
    if dim < 1:
      raise ConfigError("dim", f"must be >= 1; got {dim}")
    if not heterogeneity >= 0:
      raise ConfigError("heterogeneity", f"must be >= 0; got {heterogeneity}")
    if not spectrum_sigma >= 0:
      raise ConfigError("spectrum_sigma", f"must be >= 0; got {spectrum_sigma}")
    if spectrum_rank < 0:
      raise ConfigError("spectrum_rank", f"must be >= 0 (0: every eigenvalue log-normal); got {spectrum_rank}")
    from fedsim.tasks.illcond_quadratic import make_illcond_quadratic_task
    return make_illcond_quadratic_task(dim, num_clients, heterogeneity, sigma=spectrum_sigma,
                                       isotropic=isotropic, seed=seed, rank=spectrum_rank)
  if name not in TASKS:
    raise ConfigError("task", f"unknown {name!r}{did_you_mean(name, TASKS)}; accepted: {', '.join(TASKS)}")
  if name in ("mlp", "finetune") and hidden_width < 1:
    raise ConfigError("hidden_width", f"must be >= 1; got {hidden_width}")
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
      raise ConfigError("finetune_shift", f"unknown {finetune_shift!r}{did_you_mean(finetune_shift, SHIFTS)}; "
                                          f"accepted: {', '.join(SHIFTS)}")
    if finetune_shift == "flip" and len(ds.feature_shape) < 2:
      raise ConfigError("finetune_shift", f"'flip' needs image data; {ds.name} is not")
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
      raise ConfigError("task", f"cnn needs image data; {ds.name} is not")
    from fedsim.models.cnn import CNN
    from fedsim.tasks.classification import make_model_task
    return make_model_task(name, CNN(ds.num_classes), ds, clients, info=info)
  if name == "lenet":
    from fedsim.models.weak_learners import weak_learner_cnn
    from fedsim.tasks.classification import make_model_task
    try:
      lenet = weak_learner_cnn(ds.num_classes, ds.feature_shape, "task")
    except ValueError:
      raise ConfigError("task", f"lenet needs image data; {ds.name} is not") from None
    return make_model_task(name, lenet, ds, clients, info=info)
  if name == "mlp" and (hidden_layers != 1 or activation != "relu"):
    # ``hidden_layers`` x ``hidden_width`` with ``activation``: --hidden_layers=2
    # --hidden_width=32 --activation=leaky_relu is FFGB's MLP weak learner (Shen et al. 2022
    # App. B.1), so FedAvg trains the same network (specs/ffgb.md §3.1).
    from fedsim.models.mlp import ACTIVATIONS, MLP
    from fedsim.tasks.classification import make_model_task
    if hidden_layers < 1:
      raise ConfigError("hidden_layers", f"must be >= 1; got {hidden_layers}")
    if activation not in ACTIVATIONS:
      raise ConfigError("activation", f"unknown {activation!r}{did_you_mean(activation, ACTIVATIONS)}; "
                                      f"accepted: {', '.join(ACTIVATIONS)}")
    model = MLP(ds.num_classes, (hidden_width,) * hidden_layers, feature_ndim=len(ds.feature_shape),
                activation=activation)
    info.update(hidden_widths=[hidden_width] * hidden_layers, activation=activation)
    return make_model_task(name, model, ds, clients, info=info)
  return make_classification_task(name, ds, clients, hidden_width=hidden_width, info=info)
