"""Classification with any flax model (``cnn``), and a federated fine-tuning
proxy (``finetune``) for Li et al. 2025's LLM runs (§6, Table 2 / Table 5), whose
weights and data cannot be downloaded here (specs/hiso.md §3.4, substitute (b)).

``make_model_task`` (fedsim.tasks.classification) builds both, with the
model passed in and, for ``finetune``, a fixed initial point.

``finetune``: a flax MLP is pre-trained (first order, Adam, deterministic and
cached; fedsim.models.training) on the *source* distribution, the dataset's
training split as is. The federated task is the *target* distribution, a shift
of the same data:

* ``flip``: images mirrored left-right (a covariate shift; labels unchanged);
* ``relabel``: labels y -> (y + 1) mod C (a new task on the same features);
* ``none``: no shift (continued training).

The target training split is partitioned over the clients (``partition``,
e.g. Dirichlet alpha = 1); the run starts from the pre-trained weights (full
parameter fine-tuning, as the paper's Limitations imply) and is scored on the
target test split. ``info`` records the pre-trained model's source and target
test accuracies.
"""

from __future__ import annotations

import dataclasses
import hashlib

import jax
import jax.numpy as jnp
import numpy as np

from fedsim.core.types import Task
from fedsim.data.dataset import Dataset
from fedsim.models import MLP, training
from fedsim.tasks import choices
from fedsim.tasks.classification import make_model_task

SHIFTS = choices.FINETUNE_SHIFTS
PRETRAIN = training.TrainConfig(steps=500, batch_size=128, learning_rate=3e-3)
CACHE_FORMAT = 1


def shift_dataset(dataset: Dataset, shift: str) -> Dataset:
  """The target distribution: ``dataset`` with ``shift`` applied to both splits.

  Raises:
    ValueError: unknown shift.
  """
  if shift not in SHIFTS:
    raise ValueError(f"unknown shift {shift!r}; accepted: {', '.join(SHIFTS)}")
  if shift == "none":
    return dataset
  if shift == "flip":
    if len(dataset.feature_shape) < 2:
      raise ValueError("shift 'flip' needs image data (n, H, W) or (n, H, W, C)")
    # x (n, H, W) or (n, H, W, C) (NHWC, e.g. CIFAR-10): mirror the width axis, not the channels.
    xs = {s: np.ascontiguousarray(getattr(dataset, f"x_{s}")[:, :, ::-1]) for s in ("train", "test")}
    return dataclasses.replace(dataset, name=f"{dataset.name}-flip", x_train=xs["train"],
                               x_test=xs["test"], info={**dataset.info, "shift": "flip"})
  c = dataset.num_classes
  ys = {s: ((getattr(dataset, f"y_{s}") + 1) % c).astype(np.int32) for s in ("train", "test")}
  return dataclasses.replace(dataset, name=f"{dataset.name}-relabel", y_train=ys["train"],
                             y_test=ys["test"], info={**dataset.info, "shift": "relabel"})


def _digest(dataset: Dataset) -> str:
  h = hashlib.sha256()
  for a in (dataset.x_train, dataset.y_train):
    h.update(np.ascontiguousarray(a).tobytes())
  return h.hexdigest()


def make_finetune_task(dataset: Dataset, num_clients: int, *, seed: int = 0, shift: str = "flip",
                       hidden_width: int = 64, partition: str = "dirichlet",
                       dirichlet_alpha: float = 1.0, cache_dir: str | None = None,
                       **partition_kwargs) -> Task:
  """Builds the fine-tuning proxy.

  Args:
    dataset: the source data (its shift is the target).
    num_clients: N.
    seed: pre-training seed and partition seed.
    shift: one of :data:`SHIFTS`.
    hidden_width: width of the MLP's hidden layer.
    partition, dirichlet_alpha, partition_kwargs: the target split over clients
      (fedsim.data.partition).
    cache_dir: where the pre-trained weights are cached.

  Raises:
    ValueError: unknown shift; ConfigError: a partition error.
  """
  from fedsim import data as fdata
  target = shift_dataset(dataset, shift)
  model = MLP(dataset.num_classes, (hidden_width,), feature_ndim=len(dataset.feature_shape))
  key = {"format": CACHE_FORMAT, "purpose": "finetune-source", "dataset": dataset.name,
         "dataset_info": dataset.info, "data_sha256": _digest(dataset),
         "num_classes": dataset.num_classes, "hidden_width": int(hidden_width), "seed": int(seed),
         "train": dataclasses.asdict(PRETRAIN)}
  params, cache_path, loaded = training.train_or_load(
      model, dataset.x_train, dataset.y_train, seed=int(seed), config=PRETRAIN, key=key,
      cache_dir=cache_dir, prefix=f"{dataset.name}-finetune-mlp{hidden_width}")

  @jax.jit
  def accuracy(p, x, y):
    return jnp.mean((jnp.argmax(model.apply(p, x), -1) == y).astype(jnp.float32))  # type: ignore[arg-type]  # flax apply

  src_acc = float(accuracy(params, dataset.x_test, dataset.y_test))
  tgt_acc = float(accuracy(params, target.x_test, target.y_test))
  parts = fdata.partition(target.y_train, num_clients, partition, seed,
                          dirichlet_alpha=dirichlet_alpha, **partition_kwargs)
  clients = fdata.to_client_arrays(target.x_train, target.y_train, parts)
  info = {"dataset": target.name, "dataset_info": target.info, "shift": shift,
          "partition": partition, "pretrain": dataclasses.asdict(PRETRAIN),
          "pretrain_cache": cache_path, "pretrain_loaded": loaded,
          "pretrained_source_test_accuracy": src_acc, "pretrained_target_test_accuracy": tgt_acc,
          "label_skew": float(fdata.label_skew(target.y_train, parts, target.num_classes))}
  return make_model_task("finetune", model, target, clients, init_params=params, info=info)
