"""Federated black-box adversarial attack of FZooS (Shu et al. 2023, §6.2, App. E.2; specs/fzoos.md §3.2).

N clients each own a private classifier, trained (here, in JAX, at task set-up;
cached on disk keyed by the whole configuration) on the training images of a
random subset of ``round(P * 10)`` of the 10 classes, drawn independently per
client (App. E.2: a larger P means less heterogeneity; P = 1 gives identical
models). The clients jointly search one perturbation of one target image z
(label y) inside a box, x in [0, 1]^d (the normalised domain of specs §1):

    p(x)   = eps (2 clip(x, 0, 1) - 1)                     (box [-eps, eps]^d; MNIST eps = 0.3)
    a(x)   = clip(z + p(x), 0, 1)                          (the image stays valid)
    f_i(x) = Phi^(i)_y(a(x)) - max_{c != y} Phi^(i)_c(a(x))    (logit margin of client i's model)
    F(x)   = (1/N) sum_i f_i(x)                            (eq. 1)

Success ([code] ``funcs/adversarial.py``, untargeted): F(x) < 0. ``success_rate``
is the fraction of this run's target images with F < 0; the authors attack
one image per trial (15 trials), so a run attacks one target, chosen by
``target`` (default: the ``seed``-th eligible image), and the paper's success
rate is the mean of ``success_rate`` over 15 runs (``--seed 0..14``).

Targets are test images with F(x_0) > 0 (the ensemble margin is positive, so
the attack is not already won); those that every client model classifies
correctly (the paper's condition, specs §3.2) come first. With small P a
class may be missing from some client's training classes, so "every model
correct" can be empty; the margin condition keeps the task defined.

Deviation (documented): x_0 = 0.5, i.e. zero perturbation; the authors' code
starts at x = 0, which maps to p = -eps (specs §3.2, "looks like a quirk").

Models: ``cnn`` (the paper's MNIST model: two convolutions then two dense
layers, :class:`AttackCNN`) or ``mlp`` (one hidden ReLU layer of 64, cheaper on
CPU). Algorithms only *query* ``loss``.
"""

from __future__ import annotations

import dataclasses
import math
import os

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from fedsim.config import did_you_mean
from fedsim.core.errors import ConfigError
from fedsim.core.types import Task
from fedsim.data.dataset import Dataset
from fedsim.models import MLP, training
from fedsim.tasks import choices
from fedsim.tasks.attack_cw import _data_digest

MODELS = choices.ATTACK_MODELS
TRAIN_CONFIG = training.TrainConfig(steps=400, batch_size=64, learning_rate=3e-3)
DEFAULT_BOX = 0.3  # MNIST box of the authors' code (specs §3.2)
CACHE_FORMAT = 1


class AttackCNN(nn.Module):
  """conv(16, 5x5) - ReLU - maxpool 2 - conv(32, 5x5) - ReLU - maxpool 2 - dense(64) - ReLU -
  dense(C): "two convolution layers followed by two fully connected layers" (App. E.2).

  Input (B, H, W) images in [0, 1]; output (B, C) logits.
  """
  num_classes: int

  @nn.compact
  def __call__(self, x):
    if x.ndim == 3:
      x = x[..., None]
    for f in (16, 32):
      x = nn.Conv(f, (5, 5), padding="SAME")(x)
      x = nn.max_pool(nn.relu(x), (2, 2), strides=(2, 2))
    x = x.reshape(x.shape[:-3] + (-1,))
    x = nn.relu(nn.Dense(64)(x))
    return nn.Dense(self.num_classes)(x)


def logit_margin(logits, y):
  """Phi_y - max_{c != y} Phi_c; logits (..., C), y int (...) -> (...). Negative iff misclassified
  (up to ties)."""
  onehot = jax.nn.one_hot(y, logits.shape[-1], dtype=bool)
  true = jnp.sum(jnp.where(onehot, logits, 0.0), axis=-1)
  other = jnp.max(jnp.where(onehot, -jnp.inf, logits), axis=-1)
  return true - other


def perturbed_image(x, z, box):
  """a(x) = clip(z + box (2 clip(x, 0, 1) - 1), 0, 1); x (d,) in [0,1]^d, z ``(*shape)`` in [0, 1]."""
  p = box * (2.0 * jnp.clip(x, 0.0, 1.0) - 1.0)
  return jnp.clip(z + p.reshape(z.shape), 0.0, 1.0)


def client_classes(num_clients: int, portion: float, num_classes: int, seed: int) -> list[list[int]]:
  """Each client's training classes: round(P C) of the C classes (at least 1), sampled without
  replacement independently per client (App. E.2), from ``default_rng(seed)``."""
  k = max(1, min(num_classes, int(round(portion * num_classes))))
  rng = np.random.default_rng(seed)
  return [sorted(int(c) for c in rng.choice(num_classes, k, replace=False)) for _ in range(num_clients)]


def make_attack_task(dataset: Dataset, num_clients: int, *, seed: int = 0, portion: float = 0.7,
                     model: str = "cnn", box: float | None = None, target: int = -1,
                     cache_dir: str | os.PathLike | None = None,
                     train_config: training.TrainConfig = TRAIN_CONFIG) -> Task:
  """Builds the federated black-box attack (Shu et al. 2023, §6.2).

  Args:
    dataset: a :class:`fedsim.data.Dataset` with images in [0, 1] (digits, mnist).
    num_clients: N >= 1 (paper: 10).
    seed: seed of the class subsets, of each client's training (client i uses
      seed + i) and of the default target.
    portion: P in (0, 1] (paper MNIST README: 0.7).
    model: ``cnn`` or ``mlp``.
    box: eps > 0, the L-infinity box of the perturbation (default 0.3).
    target: index into the eligible targets (module docstring); -1 = ``seed``
      (modulo their number).
    cache_dir: classifier cache (default ``~/.cache/fedsim/classifiers``).
    train_config: Adam steps / batch / learning rate of every client model.

  Returns:
    A Task with ``init_params(key)`` = 0.5 (d,) (default float; zero perturbation),
    ``data["clients"]``: ``params`` (the client models, leading axis N), ``z``
    ``(N, *image shape)`` the target image (same for all), ``y`` (N,) its label;
    ``loss(x, row)`` = f_i(x); ``evaluate`` gives ``objective`` = F(x),
    ``success_rate`` (1.0 if F(x) < 0 else 0.0), ``ensemble_fooled`` (argmax of
    the mean logits != y) and ``min_client_margin``.

  Raises:
    ConfigError: bad ``portion`` / ``model`` / ``box`` / ``num_clients``, a
      dataset that is not images in [0, 1], or no eligible target.
    OSError: the classifier cache cannot be written.
  """
  if not (0.0 < portion <= 1.0):
    raise ConfigError("portion", f"must be in (0, 1]; got {portion}")
  if model not in MODELS:
    raise ConfigError("classifier", f"unknown {model!r}{did_you_mean(model, MODELS)} for --task=attack; "
                                    f"accepted: {', '.join(MODELS)}")
  box = DEFAULT_BOX if box is None or box == 0 else float(box)
  if not (math.isfinite(box) and box > 0):
    raise ConfigError("perturbation_box", f"must be > 0; got {box}")
  if num_clients < 1:
    raise ConfigError("num_clients", f"must be >= 1; got {num_clients}")
  if len(dataset.feature_shape) < 2:
    raise ConfigError("dataset", f"--task=attack needs images (digits, mnist); {dataset.name} is not")
  C = int(dataset.num_classes)
  shape = tuple(dataset.feature_shape)
  d = int(np.prod(shape))
  classes = client_classes(num_clients, portion, C, seed)
  net = AttackCNN(C) if model == "cnn" else MLP(C, (64,), feature_ndim=len(shape))
  digest = _data_digest(dataset)
  params, loaded, paths = [], [], []
  for i, cls in enumerate(classes):
    sel = np.isin(dataset.y_train, cls)
    key = {"format": CACHE_FORMAT, "task": "fzoos_attack", "dataset": dataset.name,
           "data_sha256": digest, "model": model, "num_classes": C, "classes": cls,
           "seed": int(seed) + i, "train": dataclasses.asdict(train_config)}
    p, path, hit = training.train_or_load(
        net, dataset.x_train[sel].astype(np.float32), dataset.y_train[sel], seed=int(seed) + i,
        config=train_config, key=key, cache_dir=cache_dir, prefix=f"{dataset.name}-attack-{model}")
    params.append(p)
    loaded.append(bool(hit))
    paths.append(path)
  stacked = jax.tree_util.tree_map(lambda *a: jnp.stack(a), *params)

  def logits(p, img):
    with jax.default_matmul_precision("highest"):
      return net.apply(p, img[None])[0]

  @jax.jit
  def clean_logits(xs):  # (n, *shape) -> (N, n, C)
    return jax.vmap(lambda p: jax.vmap(lambda im: logits(p, im))(xs))(stacked)

  x_test = np.asarray(dataset.x_test, np.float32)
  y_test = np.asarray(dataset.y_test, np.int32)
  lg = np.asarray(clean_logits(jnp.asarray(x_test)))
  margins = np.asarray(logit_margin(jnp.asarray(lg), jnp.asarray(y_test)[None]))  # (N, n)
  all_correct = np.all(margins > 0, axis=0)
  ens_pos = margins.mean(axis=0) > 0
  eligible = np.concatenate([np.flatnonzero(all_correct & ens_pos), np.flatnonzero(~all_correct & ens_pos)])
  if eligible.size == 0:
    raise ConfigError("portion", f"no test image has a positive ensemble margin at P={portion}")
  j = (int(seed) if target < 0 else int(target)) % eligible.size
  t = int(eligible[j])
  z, y = x_test[t], int(y_test[t])
  data = {"clients": {"params": stacked, "z": jnp.asarray(np.broadcast_to(z, (num_clients,) + shape)),
                      "y": jnp.full((num_clients,), y, jnp.int32)},
          "sizes": jnp.ones((num_clients,), jnp.int32), "eval": {}}

  def loss(x, row):
    return logit_margin(logits(row["params"], perturbed_image(x, row["z"], box)), row["y"])

  def evaluate(x, data):
    cl = data["clients"]
    lgs = jax.vmap(lambda p, zz: logits(p, perturbed_image(x, zz, box)))(cl["params"], cl["z"])
    m = logit_margin(lgs, cl["y"])
    F = jnp.mean(m)
    return {"objective": F, "success_rate": (F < 0).astype(jnp.float32),
            "ensemble_fooled": (jnp.argmax(jnp.mean(lgs, 0)) != cl["y"][0]).astype(jnp.float32),
            "min_client_margin": jnp.min(m)}

  info = {"dataset": dataset.name, "dim": d, "model": model, "portion": float(portion), "box": box,
          "client_classes": classes, "seed": int(seed), "train": dataclasses.asdict(train_config),
          "classifier_cache_paths": paths, "classifiers_loaded_from_cache": loaded,
          "target_test_index": t, "target_label": y, "target_rank": j,
          "num_eligible_targets": int(eligible.size),
          "num_all_correct_targets": int(np.sum(all_correct & ens_pos)),
          "client_test_accuracy": [float(np.mean(np.argmax(lg[i], -1) == y_test)) for i in range(num_clients)],
          "initial_client_margins": [float(v) for v in margins[:, t]],
          "init": "x0 = 0.5 (zero perturbation; the authors' code starts at p = -box)"}
  return Task(name="attack", num_clients=num_clients,
              init_params=lambda key: jnp.full((d,), 0.5), data=data, loss=loss,
              sample_batch=lambda client, key, batch_size: client, full_batch=lambda c: c,
              evaluate=evaluate, stochastic=False, info=info)
