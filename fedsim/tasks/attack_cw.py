"""Federated black-box adversarial attack (C&W-style loss; FedZO, Fang et al. 2022, §V-A, eq. 21).

The offline substitute of specs/fedzo.md §3.4: one shared classifier (a flax MLP
or softmax regression trained here, on the dataset's training split) is the
black box; the clients hold disjoint, randomly sized subsets of the training
images of one class that it classifies correctly, and jointly search for one
*universal* perturbation x in tanh space that pushes every image off its class::

    a_i(x) = ½ tanh(atanh(2 z_i) + x)                                  (eq. 21)
    psi_i(x) = max{Phi_y(a_i(x)) - max_{j != y} Phi_j(a_i(x)), 0} + c ||a_i(x) - z_i||²
    f_n(x) = (1/|D_n|) sum_{i in D_n} psi_i(x),    F(x) = (1/N) sum_n f_n(x)   (eq. 1)

z_i = image - 0.5 in [-0.5, 0.5] (clipped to ±(0.5 - 1e-6) so that atanh(2 z)
stays finite, specs/fedzo.md §6 pitfalls); Phi are the classifier's raw logits
(the authors' code: no softmax, no confidence margin kappa), with the classifier
reading the image on its own [0, 1] scale, a + 0.5. The attack is untargeted.
x^0 = 0 (the authors' code; specs/fedzo.md §8), so a_i(x^0) = z_i.

Algorithms only *query* ``loss``; differentiating it is for diagnostics only.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os

import jax
import jax.numpy as jnp
import numpy as np

from fedsim.config import did_you_mean
from fedsim.core.errors import ConfigError
from fedsim.core.reduce import pairwise_sum
from fedsim.core.types import Task
from fedsim.data import load_dataset, quantity, to_client_arrays
from fedsim.data.dataset import Dataset
from fedsim.models import MLP, training
from fedsim.models.linear import Softmax
from fedsim.tasks import choices

CLASSIFIERS = choices.ATTACK_CW_CLASSIFIERS
HIDDEN_WIDTHS = (64,)
TRAIN_CONFIG = training.TrainConfig(steps=500, batch_size=128, learning_rate=3e-3)
PIXEL_EPS = 1e-6
CACHE_FORMAT = 1


def to_attack_space(images):
  """Maps [0, 1] pixels to z = image - 0.5, clipped to ±(0.5 - 1e-6).

  Args:
    images: (..., d) float array with values in [0, 1].

  Returns:
    z, same shape, float32, in [-(0.5 - 1e-6), 0.5 - 1e-6], so that
    atanh(2 z) is finite (specs/fedzo.md §6, atanh(±1) pitfall).
  """
  z = np.asarray(images, np.float64) - 0.5
  return np.clip(z, -(0.5 - PIXEL_EPS), 0.5 - PIXEL_EPS).astype(np.float32)


def adversarial_image(x, z):
  """a(x) = ½ tanh(atanh(2 z) + x) (eq. 21), in (-0.5, 0.5).

  ``z`` is clipped again to ±(0.5 - 1e-6) (idempotent on task data), so raw
  pixels at ±0.5 give a finite atanh and finite gradients.

  Args:
    x: (d,) float32 perturbation in tanh space.
    z: (..., d) float32 images in attack space.

  Returns:
    (..., d) float32 adversarial images.
  """
  z = jnp.clip(z, -(0.5 - PIXEL_EPS), 0.5 - PIXEL_EPS)
  return 0.5 * jnp.tanh(jnp.arctanh(2.0 * z) + x)


def cw_terms(logits_fn, x, z, y):
  """The two terms of psi (eq. 21) and the misclassification flag, per image.

  Args:
    logits_fn: (..., d) images in attack space -> (..., C) raw logits Phi.
    x: (d,) float32 perturbation.
    z: (..., d) float32 images in attack space.
    y: (...) int32 true labels.

  Returns:
    ``(margin, distortion, fooled)``, each of shape (...):
    margin = max{Phi_y(a) - max_{j != y} Phi_j(a), 0} (float32),
    distortion = ||a - z||² summed over the d pixels (float32),
    fooled = argmax_j Phi_j(a) != y (bool).
  """
  a = adversarial_image(x, z)
  logits = logits_fn(a)
  onehot = jax.nn.one_hot(y, logits.shape[-1], dtype=bool)
  true = jnp.sum(jnp.where(onehot, logits, 0.0), axis=-1)
  other = jnp.max(jnp.where(onehot, -jnp.inf, logits), axis=-1)
  margin = jnp.maximum(true - other, 0.0)
  distortion = jnp.sum(jnp.square(a - z), axis=-1)
  fooled = jnp.argmax(logits, axis=-1) != y
  return margin, distortion, fooled


def _masked_mean(v, mask):
  m = mask.astype(v.dtype)
  return jnp.sum(v * m, axis=-1) / jnp.maximum(jnp.sum(m, axis=-1), 1.0)


def _data_digest(ds: Dataset) -> str:
  h = hashlib.sha256()
  for arr in (ds.x_train, ds.y_train):
    h.update(str((arr.dtype.str, arr.shape)).encode())
    h.update(np.ascontiguousarray(arr).tobytes())
  return h.hexdigest()


def make_attack_cw_task(dataset: Dataset | str, num_clients: int, *, seed: int = 0,
                        target_class: int = 4, c: float = 1.0, classifier: str = "mlp",
                        cache_dir: str | os.PathLike | None = None,
                        quantity_law: str = "lognormal", quantity_sigma: float = 1.0,
                        dirichlet_alpha: float = 0.5) -> Task:
  """Builds the federated universal black-box attack of eq. 21.

  Set-up: trains (or loads from ``cache_dir``) the classifier on the whole
  training split; keeps the training images of ``target_class`` that it
  classifies correctly (checked through the same a(0) pipeline as the loss, so
  the attack accuracy at x = 0 is 0); splits them over the clients with
  quantity skew (:func:`fedsim.data.partitions.quantity`: disjoint, every image
  once, no client empty); pads each client to the largest with a mask.

  Args:
    dataset: a :class:`fedsim.data.Dataset` with inputs in [0, 1] (digits
      (n, 8, 8), MNIST (n, 28, 28), ...) or a name for
      :func:`fedsim.data.load_dataset` (no ``data_dir``, split seed 0).
    num_clients: N >= 1, at most the number of target images.
    seed: seed of the classifier's training and of the partition.
    target_class: the attacked class y (the paper: 4, "deer").
    c: weight of the distortion term, >= 0 (the paper: 1).
    classifier: ``mlp`` (one hidden ReLU layer of 64) or ``softmax``.
    cache_dir: classifier cache folder (default ``~/.cache/fedsim/classifiers``).
    quantity_law: ``lognormal`` or ``dirichlet`` client-size law.
    quantity_sigma: log-normal sigma (>= 0; 0 gives equal sizes).
    dirichlet_alpha: Dirichlet concentration for ``quantity_law="dirichlet"``.

  Returns:
    A Task with
      ``init_params(key)``: zeros (d,) float32, d = pixels per image (x^0 = 0);
      ``data["clients"]``: ``z`` (N, n_max, d) float32 images in attack space,
      ``y`` (N, n_max) int32 (= target_class), ``mask`` (N, n_max) bool,
      ``index`` (N, n_max) int32 row of ``dataset.x_train`` (-1 on padding);
      ``data["sizes"]`` (N,) int32; ``data["eval"]``: ``z`` (m, d), ``y`` (m,)
      the correctly classified test images of the target class;
      ``loss(x, batch)``: f_n on the batch (masked mean of psi), float32 ();
      ``per_example_loss(x, {"z": (d,), "y": ()})``: psi_i;
      ``evaluate(x, data)``: ``objective`` (1/N) sum_n f_n(x) on the full local
      sets, ``margin_loss`` and ``distortion`` (its two terms, same weights,
      objective = margin_loss + c distortion), ``attack_accuracy`` (fraction of
      all target images misclassified) and ``attack_accuracy_test``.

    The classifier's weights are the black box's definition and are closed
    over as constants (a few 10^4 floats); the images travel in ``data``.

  Raises:
    ConfigError: unknown ``classifier``; ``target_class`` outside the labels or
      with no correctly classified training image; ``c`` < 0 or not finite;
      ``num_clients`` < 1 or more than the target images, or a bad
      ``quantity_law`` / ``quantity_sigma`` / ``dirichlet_alpha`` (from
      :func:`fedsim.data.partitions.quantity`); dataset errors from
      :func:`fedsim.data.load_dataset`.
    OSError: the classifier cache cannot be written.
  """
  if isinstance(dataset, str):
    dataset = load_dataset(dataset, None, seed=0)
  if classifier not in CLASSIFIERS:
    raise ConfigError("classifier", f"unknown {classifier!r}{did_you_mean(classifier, CLASSIFIERS)}; "
                                    f"accepted: {', '.join(CLASSIFIERS)}")
  c = float(c)
  if not (math.isfinite(c) and c >= 0):
    raise ConfigError("attack_c", f"must be finite and >= 0; got {c}")
  num_classes = int(dataset.num_classes)
  if int(target_class) != target_class or not 0 <= target_class < num_classes:
    raise ConfigError("target_class", f"must be an integer in [0, {num_classes}); got {target_class}")
  target_class = int(target_class)

  d = dataset.num_features
  x_train = dataset.x_train.reshape(dataset.n_train, d)
  x_test = dataset.x_test.reshape(dataset.n_test, d)
  model: MLP | Softmax
  if classifier == "mlp":
    model = MLP(num_classes, HIDDEN_WIDTHS)
  else:
    model = Softmax(num_classes)

  key = {"format": CACHE_FORMAT, "dataset": dataset.name, "dataset_info": dataset.info,
         "data_sha256": _data_digest(dataset), "num_classes": num_classes,
         "classifier": classifier,
         "hidden_widths": list(HIDDEN_WIDTHS) if classifier == "mlp" else [],
         "seed": int(seed), "train": dataclasses.asdict(TRAIN_CONFIG)}
  theta, cache_path, loaded = training.train_or_load(
      model, x_train, dataset.y_train, seed=int(seed), config=TRAIN_CONFIG, key=key,
      cache_dir=cache_dir, prefix=f"{dataset.name}-{classifier}")

  def logits_fn(a):
    # Full float32 matmuls (GPUs default to TF32, which finite differences cannot afford).
    with jax.default_matmul_precision("highest"):
      return model.apply(theta, a + 0.5)

  def terms(x, z, y):
    return cw_terms(logits_fn, x, z, y)

  @jax.jit
  def clean_stats(x_img, y):
    # Test accuracy on the original [0, 1] images, and the a(0) misclassification flags.
    acc = jnp.mean((jnp.argmax(logits_fn(x_img - 0.5), -1) == y).astype(jnp.float32))
    z = jnp.clip(x_img - 0.5, -(0.5 - PIXEL_EPS), 0.5 - PIXEL_EPS)
    return acc, terms(jnp.zeros((d,), jnp.float32), z, y)[2]

  test_acc, _ = clean_stats(jnp.asarray(x_test), jnp.asarray(dataset.y_test))
  cand = np.flatnonzero(dataset.y_train == target_class)
  cand_test = np.flatnonzero(dataset.y_test == target_class)
  if cand.size == 0:
    raise ConfigError("target_class", f"no training image of class {target_class}")
  z_cand = to_attack_space(x_train[cand])
  z_cand_test = to_attack_space(x_test[cand_test])
  y_t = np.full(cand.size, target_class, np.int32)
  _, fooled = clean_stats(jnp.asarray(x_train[cand]), jnp.asarray(y_t))
  _, fooled_test = clean_stats(jnp.asarray(x_test[cand_test]),
                               jnp.asarray(np.full(cand_test.size, target_class, np.int32)))
  keep = ~np.asarray(fooled)
  keep_test = ~np.asarray(fooled_test)
  targets, z_targets = cand[keep], z_cand[keep]
  if targets.size == 0:
    raise ConfigError("target_class", f"the classifier misclassifies every training image of "
                      f"class {target_class}")

  parts = quantity(np.full(targets.size, target_class), num_clients, seed, law=quantity_law,
                   alpha=dirichlet_alpha, sigma=quantity_sigma)
  clients = to_client_arrays(z_targets, np.full(targets.size, target_class, np.int32), parts)
  index = np.full(clients["mask"].shape, -1, np.int32)
  for k, p in enumerate(parts):
    index[k, :p.size] = targets[p]
  data = {
      "clients": {"z": jnp.asarray(clients["x"]), "y": jnp.asarray(clients["y"]),
                  "mask": jnp.asarray(clients["mask"]), "index": jnp.asarray(index)},
      "sizes": jnp.asarray(clients["n"], jnp.int32),
      "eval": {"z": jnp.asarray(z_cand_test[keep_test]),
               "y": jnp.full((int(keep_test.sum()),), target_class, jnp.int32)},
  }

  def psi(x, z, y):
    margin, dist, _ = terms(x, z, y)
    return margin + c * dist

  def init_params(key):
    del key  # x^0 = 0 (authors' code).
    return jnp.zeros((d,), jnp.float32)

  def loss(x, batch):
    return _masked_mean(psi(x, batch["z"], batch["y"]), batch["mask"])

  def per_example_loss(x, example):
    return psi(x, example["z"], example["y"])

  def sample_batch(client, key, batch_size):
    # i.i.d. uniform over the client's n_i real rows (with replacement, FedZO eq. 2).
    n = jnp.maximum(jnp.sum(client["mask"].astype(jnp.int32)), 1)
    idx = jnp.minimum((jax.random.uniform(key, (batch_size,)) * n).astype(jnp.int32), n - 1)
    return {"z": client["z"][idx], "y": client["y"][idx],
            "mask": jnp.ones((batch_size,), bool)}

  def evaluate(x, data):
    cl = data["clients"]
    margin, dist, fooled = jax.vmap(lambda z, y: terms(x, z, y))(cl["z"], cl["y"])  # (N, n_max)
    mask = cl["mask"]
    f_margin = _masked_mean(margin, mask)  # (N,)
    f_dist = _masked_mean(dist, mask)
    f_n = _masked_mean(margin + c * dist, mask)
    num = f_n.shape[0]
    total = pairwise_sum(data["sizes"].astype(jnp.float32))
    hits = pairwise_sum(jnp.where(mask, fooled, False).astype(jnp.float32).reshape(-1))
    ev = data["eval"]
    fooled_test = terms(x, ev["z"], ev["y"])[2].astype(jnp.float32)
    n_test = max(int(ev["y"].shape[0]), 1)
    return {
        "objective": pairwise_sum(f_n) / num,
        "margin_loss": pairwise_sum(f_margin) / num,
        "distortion": pairwise_sum(f_dist) / num,
        "attack_accuracy": hits / jnp.maximum(total, 1.0),
        "attack_accuracy_test": pairwise_sum(fooled_test) / n_test,
    }

  sizes = np.asarray(clients["n"])
  info = {
      "dataset": dataset.name, "dataset_info": dataset.info, "dim": int(d),
      "classifier": classifier, "classifier_test_accuracy": float(test_acc),
      "classifier_cache_path": cache_path, "classifier_loaded_from_cache": bool(loaded),
      "classifier_train": dataclasses.asdict(TRAIN_CONFIG),
      "hidden_widths": list(HIDDEN_WIDTHS) if classifier == "mlp" else [],
      "target_class": target_class, "c": c, "seed": int(seed),
      "num_target_candidates": int(cand.size), "num_targets": int(targets.size),
      "num_test_targets": int(keep_test.sum()),
      "partition": "quantity", "quantity_law": quantity_law,
      "quantity_sigma": float(quantity_sigma), "dirichlet_alpha": float(dirichlet_alpha),
      "client_sizes": {"min": int(sizes.min()), "max": int(sizes.max()),
                       "mean": float(sizes.mean()), "sizes": [int(s) for s in sizes]},
  }
  return Task(name="attack_cw", num_clients=int(num_clients), init_params=init_params, data=data,
              loss=loss, sample_batch=sample_batch, full_batch=lambda client: client,
              evaluate=evaluate, per_example_loss=per_example_loss, has_accuracy=False,
              info=info)
