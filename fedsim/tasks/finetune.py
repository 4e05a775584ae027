"""Classification with any flax model (``cnn``), and a federated fine-tuning
proxy (``finetune``) for seed 003's LLM runs (§6, Table 2 / Table 5), whose
weights and data cannot be downloaded here (specs/hiso.md §3.4, substitute (b)).

``make_model_task`` is the classification task of fedsim.tasks.classification
with the model passed in (f_i = mean cross-entropy over client i's samples;
``objective`` = pooled training loss; ``test_accuracy`` / ``test_loss`` on the
test split) and an optional fixed initial point.

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
import optax

from fedsim.core.reduce import pairwise_sum
from fedsim.core.types import Task
from fedsim.data.dataset import Dataset
from fedsim.models import MLP
from fedsim.models import training

SHIFTS = ("flip", "relabel", "none")
PRETRAIN = training.TrainConfig(steps=500, batch_size=128, learning_rate=3e-3)
CACHE_FORMAT = 1


def _ce(logits, y):
  return optax.softmax_cross_entropy_with_integer_labels(logits, y)


def make_model_task(name: str, model, dataset: Dataset, clients: dict, *, init_params=None,
                    info: dict | None = None) -> Task:
  """A classification task for a flax ``model``.

  Args:
    name: task name.
    model: flax module mapping (B, *feature_shape) float32 to (B, C) logits.
    dataset: x in [0, 1], int labels; its test split is the evaluation set.
    clients: ``fedsim.data.to_client_arrays`` output (``x`` (N, n_max, ...),
      ``y``, ``mask``, ``n``).
    init_params: fixed initial parameters (a pytree), or None for
      ``model.init(key, ...)``.
    info: extra task description.

  Returns:
    The Task (``has_accuracy``).
  """
  feature_shape = tuple(dataset.x_train.shape[1:])
  data = {
      "clients": {"x": jnp.asarray(clients["x"], jnp.float32),
                  "y": jnp.asarray(clients["y"], jnp.int32), "mask": jnp.asarray(clients["mask"])},
      "sizes": jnp.asarray(clients["n"], jnp.int32),
      "eval": {"x": jnp.asarray(dataset.x_test, jnp.float32), "y": jnp.asarray(dataset.y_test, jnp.int32)},
  }

  def init(key):
    if init_params is not None:
      return init_params
    return model.init(key, jnp.zeros((1,) + feature_shape, jnp.float32))

  def loss(params, batch):
    ce = _ce(model.apply(params, batch["x"]), batch["y"])
    m = batch["mask"].astype(ce.dtype)
    return jnp.sum(ce * m) / jnp.maximum(jnp.sum(m), 1.0)

  def per_example_loss(params, example):
    return _ce(model.apply(params, example["x"][None]), example["y"][None])[0]

  def sample_batch(client, key, batch_size):
    # i.i.d. uniform over the client's n_i real samples (with replacement).
    n = jnp.maximum(jnp.sum(client["mask"]), 1)
    idx = jnp.minimum((jax.random.uniform(key, (batch_size,)) * n).astype(jnp.int32), n - 1)
    return {"x": client["x"][idx], "y": client["y"][idx], "mask": jnp.ones((batch_size,), bool)}

  def evaluate(params, data):
    c = data["clients"]
    ce = jax.vmap(lambda x, y: _ce(model.apply(params, x), y))(c["x"], c["y"])  # (N, n_max)
    total = pairwise_sum(jnp.where(c["mask"], ce, 0.0).reshape(-1))
    test = data["eval"]
    logits = model.apply(params, test["x"])
    n_test = test["y"].shape[0]
    return {
        "objective": total / pairwise_sum(data["sizes"].astype(ce.dtype)),
        "test_loss": pairwise_sum(_ce(logits, test["y"])) / n_test,
        "test_accuracy": pairwise_sum((jnp.argmax(logits, -1) == test["y"]).astype(ce.dtype)) / n_test,
    }

  meta = {"num_classes": dataset.num_classes, "feature_shape": list(feature_shape),
          "n_train": int(np.sum(clients["n"])), "n_test": int(dataset.x_test.shape[0]),
          "max_client_size": int(clients["x"].shape[1]), "min_client_size": int(np.min(clients["n"]))}
  meta.update(info or {})
  return Task(name=name, num_clients=int(data["sizes"].shape[0]), init_params=init, data=data,
              loss=loss, sample_batch=sample_batch, full_batch=lambda c: c, evaluate=evaluate,
              per_example_loss=per_example_loss, has_accuracy=True, info=meta)


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
      raise ValueError("shift 'flip' needs image data (n, H, W)")
    xs = {s: np.ascontiguousarray(getattr(dataset, f"x_{s}")[..., ::-1]) for s in ("train", "test")}
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
    return jnp.mean((jnp.argmax(model.apply(p, x), -1) == y).astype(jnp.float32))

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
