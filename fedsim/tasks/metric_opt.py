"""Federated non-differentiable metric optimisation of FZooS (Shu et al. 2023, §6.3, App. E.3;
specs/fzoos.md §3.3).

An MLP (hidden widths (30, 14), [code] ``MLPClassifier(hidden_layer_sizes=(30, 14))``) is
trained once with cross-entropy on the dataset's training split (cached on disk),
giving theta* (p parameters). The clients hold class-shard splits of the *test*
split ([code] ``generate_noniid_data``): every class is cut into max(1, int(P N))
shards and the shards are dealt to clients in the order of repeated random
permutations of the N clients, so a client holds about P C shards (a larger P
means less heterogeneity: the Fig. 3 caption and the code; App. E.3's text
says the opposite, specs NOTE). The decision variable is a perturbation of
theta* in a box, x in [0, 1]^p:

    theta(x) = theta* + eps (2 clip(x, 0, 1) - 1)        ([code] eps = 0.2; x_0 = 0.5: theta*)
    f_i(x)   = 1 - metric(y_i, argmax MLP(theta(x), X_i))   (macro average; App. E.3)
    F(x)     = (1/N) sum_i f_i(x)                        (eq. 1)

``metric``: ``precision`` (main text, Fig. 3), ``recall``, ``f1``, ``jaccard``
(Figs. 10-12). The macro averages follow ``sklearn.metrics`` (``average="macro"``,
labels = the classes present in y_true or y_pred, 0 where a ratio is 0/0),
computed with masked counts in jnp so the objective is jittable; f_i is
piecewise constant in x (non-differentiable), only queried.

Deviation: the paper's Covertype (54 features, 7 classes, d = 2189) needs a
download; any LIBSVM file works through ``--dataset=libsvm --data_dir`` (the
paper's d = 2189 for covtype's 54-30-14-7 network), and ``digits`` (64-30-14-10,
d = 2534) is the offline default.
"""

from __future__ import annotations

import dataclasses
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from fedsim.config import did_you_mean
from fedsim.core.errors import ConfigError
from fedsim.core.types import Task
from fedsim.data.dataset import Dataset
from fedsim.data.federated import to_client_arrays
from fedsim.models import MLP, training
from fedsim.tasks import choices
from fedsim.tasks.attack_cw import _data_digest

METRICS = choices.OPT_METRICS
HIDDEN = (30, 14)
TRAIN_CONFIG = training.TrainConfig(steps=2000, batch_size=128, learning_rate=3e-3)
DEFAULT_BOX = 0.2
CACHE_FORMAT = 1


def macro_metric(y_true, y_pred, mask, num_classes: int, metric: str = "precision"):
  """Macro-averaged precision / recall / F1 / Jaccard of masked labels, as ``sklearn.metrics``.

  Args:
    y_true, y_pred: (n,) int labels in [0, num_classes).
    mask: (n,) bool, the samples that count.
    num_classes: C (static).
    metric: one of :data:`METRICS`.

  Returns:
    float scalar: the mean over classes present in y_true or y_pred (masked) of
    tp/(tp+fp), tp/(tp+fn), 2tp/(2tp+fp+fn) or tp/(tp+fp+fn), 0 where the
    denominator is 0 (sklearn's ``zero_division`` default); 0 if no sample.

  Raises:
    ValueError: unknown metric.
  """
  if metric not in METRICS:
    raise ValueError(f"unknown metric {metric!r}; accepted: {', '.join(METRICS)}")
  m = mask.astype(jnp.float32)
  t = jax.nn.one_hot(y_true, num_classes) * m[:, None]
  p = jax.nn.one_hot(y_pred, num_classes) * m[:, None]
  tp = jnp.sum(t * p, 0)
  n_pred = jnp.sum(p, 0)
  n_true = jnp.sum(t, 0)
  num, den = {"precision": (tp, n_pred), "recall": (tp, n_true), "f1": (2 * tp, n_pred + n_true),
              "jaccard": (tp, n_pred + n_true - tp)}[metric]
  per = jnp.where(den > 0, num / jnp.where(den > 0, den, 1.0), 0.0)
  present = ((n_pred + n_true) > 0).astype(jnp.float32)
  return jnp.sum(per * present) / jnp.maximum(jnp.sum(present), 1.0)


def class_shards(labels: np.ndarray, num_clients: int, portion: float, seed: int) -> list[np.ndarray]:
  """[code] ``generate_noniid_data``: each class cut into k = max(1, int(P N)) shards (random
  order within the class), dealt to the clients of repeated ``permutation(N)``.

  Returns:
    N index arrays (sorted).

  Raises:
    ConfigError: a client would get no sample (``portion``).
  """
  rng = np.random.default_rng(seed)
  k = max(1, int(portion * num_clients))
  queue: list[int] = []
  out: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
  for c in np.unique(labels):
    idx = rng.permutation(np.flatnonzero(labels == c))
    for shard in np.array_split(idx, k):
      if not queue:
        queue = list(rng.permutation(num_clients))
      out[queue.pop(0)].append(shard)
  parts = [np.sort(np.concatenate(s)) if s else np.zeros(0, np.int64) for s in out]
  if any(p.size == 0 for p in parts):
    raise ConfigError("portion", f"P={portion} leaves a client without data "
                      f"({len(np.unique(labels))} classes x {k} shards over {num_clients} clients)")
  return parts


def train_mlp(dataset: Dataset, seed: int, train_config: training.TrainConfig = TRAIN_CONFIG,
              cache_dir: str | os.PathLike | None = None):
  """theta*: the (30, 14) MLP trained with cross-entropy on the training split, cached on disk
  keyed by (dataset digest, architecture, seed, training config). Returns (params, path, loaded)."""
  C = int(dataset.num_classes)
  xtr = np.asarray(dataset.x_train, np.float32).reshape(dataset.n_train, -1)
  key = {"format": CACHE_FORMAT, "task": "fzoos_metric_opt", "dataset": dataset.name,
         "data_sha256": _data_digest(dataset), "hidden": list(HIDDEN), "num_classes": C,
         "seed": int(seed), "train": dataclasses.asdict(train_config)}
  return training.train_or_load(MLP(C, HIDDEN), xtr, dataset.y_train, seed=int(seed), config=train_config,
                                key=key, cache_dir=cache_dir, prefix=f"{dataset.name}-metric-mlp")


def make_metric_opt_task(dataset: Dataset, num_clients: int, *, seed: int = 0, portion: float = 0.3,
                         metric: str = "precision", box: float | None = None,
                         cache_dir: str | os.PathLike | None = None,
                         train_config: training.TrainConfig = TRAIN_CONFIG) -> Task:
  """Builds the federated metric optimisation (Shu et al. 2023, §6.3).

  Args:
    dataset: any :class:`fedsim.data.Dataset` (features flattened).
    num_clients: N (paper 7).
    seed: seed of the MLP training and of the shard split.
    portion: P in (0, 1] ([code] README 0.3).
    metric: precision, recall, f1, jaccard.
    box: eps > 0 (default 0.2).
    cache_dir: MLP cache folder.
    train_config: Adam training of theta*.

  Returns:
    A Task with ``init_params`` 0.5 (p,) (theta*), ``data["clients"]`` ``x``
    (N, n_max, features) float32, ``y`` (N, n_max) int32, ``mask``;
    ``loss(x, row)`` = f_i; ``evaluate``: ``objective`` F(x) = mean_i f_i and
    ``global_metric`` (the metric on the union of the client data).

  Raises:
    ConfigError: bad metric / portion / box, or a client left without data.
  """
  if metric not in METRICS:
    raise ConfigError("opt_metric", f"unknown {metric!r}{did_you_mean(metric, METRICS)}; "
                                    f"accepted: {', '.join(METRICS)}")
  if not (0.0 < portion <= 1.0):
    raise ConfigError("portion", f"must be in (0, 1]; got {portion}")
  box = DEFAULT_BOX if box is None or box == 0 else float(box)
  if not (math.isfinite(box) and box > 0):
    raise ConfigError("perturbation_box", f"must be > 0; got {box}")
  C = int(dataset.num_classes)
  xte = np.asarray(dataset.x_test, np.float32).reshape(dataset.n_test, -1)
  net = MLP(C, HIDDEN)
  theta, path, hit = train_mlp(dataset, seed, train_config, cache_dir)
  flat, unravel = ravel_pytree(theta)
  p = int(flat.shape[0])
  parts = class_shards(np.asarray(dataset.y_test), num_clients, portion, seed)
  cl = to_client_arrays(xte, np.asarray(dataset.y_test), parts)
  data = {"clients": {"x": jnp.asarray(cl["x"], jnp.float32), "y": jnp.asarray(cl["y"], jnp.int32),
                      "mask": jnp.asarray(cl["mask"])},
          "sizes": jnp.asarray(cl["n"], jnp.int32), "eval": {}}

  def predict(x, feats):
    th = unravel(flat + box * (2.0 * jnp.clip(x, 0.0, 1.0) - 1.0).astype(flat.dtype))
    with jax.default_matmul_precision("highest"):
      return jnp.argmax(net.apply(th, feats), -1)  # type: ignore[arg-type]  # flax: apply without mutable

  def loss(x, row):
    return 1.0 - macro_metric(row["y"], predict(x, row["x"]), row["mask"], C, metric)

  def evaluate(x, data):
    c = data["clients"]
    f = jax.vmap(lambda row: loss(x, row))(c)
    preds = jax.vmap(lambda feats: predict(x, feats))(c["x"])
    glob = macro_metric(c["y"].reshape(-1), preds.reshape(-1), c["mask"].reshape(-1), C, metric)
    return {"objective": jnp.mean(f), "global_metric": glob}

  logits = net.apply(theta, jnp.asarray(xte))
  acc = float(np.mean(np.asarray(jnp.argmax(logits, -1)) == dataset.y_test))  # type: ignore[arg-type]  # flax apply
  info = {"dataset": dataset.name, "dim": p, "hidden": list(HIDDEN), "metric": metric, "portion": float(portion),
          "box": box, "seed": int(seed), "train": dataclasses.asdict(train_config),
          "mlp_test_accuracy": acc, "mlp_cache_path": path, "mlp_loaded_from_cache": bool(hit),
          "client_sizes": [int(v) for v in cl["n"]],
          "client_classes": [sorted(int(v) for v in np.unique(dataset.y_test[q])) for q in parts]}
  return Task(name="metric_opt", num_clients=num_clients, init_params=lambda k: jnp.full((p,), 0.5),
              data=data, loss=loss, sample_batch=lambda client, k, b: client, full_batch=lambda c: c,
              evaluate=evaluate, stochastic=False, info=info)
