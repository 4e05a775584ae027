"""Supervised classification tasks: ``softmax`` and ``mlp`` on any dataset.

f_i(theta) = (1/n_i) sum_{j in D_i} CE(model(theta, x_j), y_j) (cross-entropy,
the FedZO softmax experiment, Fang et al. 2022, §V-B; FedAvg, McMahan et al. 2017).
The reported ``objective`` is the pooled training loss
sum_i n_i f_i / sum_i n_i; ``test_accuracy`` and ``test_loss`` use the test split.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from fedsim.core.reduce import pairwise_sum
from fedsim.core.types import Task
from fedsim.data.dataset import Dataset
from fedsim.models import linear


def _ce(logits, y):
  return optax.softmax_cross_entropy_with_integer_labels(logits, y)


def make_model_task(name: str, model, dataset: Dataset, clients: dict, *, init_params=None,
                    info: dict | None = None) -> Task:
  """A classification task for a flax ``model``.

  Args:
    name: task name.
    model: a flax module (or a model with its ``init`` / ``apply``: ``fedsim.models.linear``) mapping
      ``(B, *feature_shape)`` float32 to (B, C) logits.
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
  def put(a, dtype):  # jnp.asarray(a, dtype), converted on the host: no XLA program (jnp stages a bool array)
    return jax.device_put(np.asarray(a, dtype))

  data: dict[str, Any] = {
      "clients": {"x": put(clients["x"], np.float32), "y": put(clients["y"], np.int32),
                  "mask": put(clients["mask"], np.bool_)},
      "sizes": put(clients["n"], np.int32),
      "eval": {"x": put(dataset.x_test, np.float32), "y": put(dataset.y_test, np.int32)},
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


def make_classification_task(name: str, dataset, clients: dict, *, hidden_width: int = 64,
                             info: dict | None = None) -> Task:
  """Builds ``softmax`` (multinomial logistic regression with bias) or ``mlp``
  (one hidden ReLU layer of ``hidden_width`` units) with :func:`make_model_task`.

  Raises:
    ValueError: unknown name.
  """
  fnd = len(dataset.x_train.shape[1:])
  if name == "softmax":  # fedsim.models.linear: no flax
    model: Any = linear.Softmax(dataset.num_classes, feature_ndim=fnd)
  elif name == "mlp":
    from fedsim.models.mlp import MLP
    model = MLP(dataset.num_classes, (hidden_width,), feature_ndim=fnd)
  else:
    raise ValueError(f"unknown classification model {name!r}")
  return make_model_task(name, model, dataset, clients, info=info)
