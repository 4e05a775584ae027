"""scikit-learn's 8x8 handwritten digits: the embedded default dataset.

Source: the UCI "Optical Recognition of Handwritten Digits" test set (Alpaydin &
Kaynak 1998), 1,797 images, 10 classes, shipped inside the scikit-learn wheel
(``sklearn.datasets.load_digits``); no download needed.

The file is read from the installed wheel and split here with scikit-learn's
stratified rule, without importing scikit-learn (about 1.2 s of every start-up);
the split is the one ``sklearn.model_selection.train_test_split`` gives
(tests/data/test_splits.py compares them).
"""

from __future__ import annotations

import gzip
import importlib.metadata
import importlib.util
import math
import os

import numpy as np

from fedsim.core.errors import ConfigError
from fedsim.data.dataset import Dataset


def load_digits(seed: int = 0, test_fraction: float = 0.2) -> Dataset:
  """Loads the digits with a fixed stratified train/test split.

  Args:
    seed: ``random_state`` of the stratified split.
    test_fraction: share of each class held out for testing, in (0, 1).

  Returns:
    A :class:`Dataset` with x (n, 8, 8) float32 in [0, 1] (pixel counts 0..16
    divided by 16), y (n,) int32 in 0..9; 1,437 / 360 examples at the default
    ``test_fraction``. Both splits are in the original file order.

  Raises:
    ConfigError: ``test_fraction`` outside (0, 1).
  """
  if not 0.0 < test_fraction < 1.0:
    raise ConfigError("test_fraction", f"must be in (0, 1); got {test_fraction}")
  x, y = _read_digits()
  idx_train, idx_test = stratified_split(y, test_fraction, seed)
  info = {
      "source": "sklearn.datasets.load_digits",
      "sklearn_version": importlib.metadata.version("scikit-learn"),
      "split": f"stratified {1 - test_fraction:g}/{test_fraction:g} "
               "(sklearn train_test_split)",
      "seed": int(seed),
      "test_fraction": float(test_fraction),
      "n_train": int(idx_train.size),
      "n_test": int(idx_test.size),
  }
  return Dataset(name="digits", x_train=x[idx_train], y_train=y[idx_train],
                 x_test=x[idx_test], y_test=y[idx_test], num_classes=10, info=info)


def _read_digits() -> tuple[np.ndarray, np.ndarray]:
  """The 1,797 images (n, 8, 8) float32 in [0, 1] and labels (n,) int32, in file order, read from
  scikit-learn's ``datasets/data/digits.csv.gz`` (what ``sklearn.datasets.load_digits`` reads).

  Raises:
    ConfigError: (``dataset``) scikit-learn is not installed.
  """
  spec = importlib.util.find_spec("sklearn")  # finds the package without importing it
  if spec is None or not spec.submodule_search_locations:
    raise ConfigError("dataset", "digits needs scikit-learn installed (its wheel holds the data)")
  path = os.path.join(list(spec.submodule_search_locations)[0], "datasets", "data", "digits.csv.gz")
  with gzip.open(path, "rt", encoding="utf-8") as f:
    data = np.loadtxt(f, delimiter=",")
  x = (data[:, :-1].reshape(-1, 8, 8) / 16.0).astype(np.float32)
  return x, data[:, -1].astype(np.int32)


def stratified_split(y: np.ndarray, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
  """Train and test indices (each sorted) of a stratified split of labels ``y`` (n,).

  scikit-learn's rule (``StratifiedShuffleSplit`` with ``random_state=seed``, as
  ``train_test_split(..., stratify=y)`` calls it): n_test = ceil(f n); per class, the
  counts are the approximate mode of the multivariate hypergeometric (floors, then
  the largest remainders, ties drawn at random), first for train then for test;
  each class's indices are permuted and cut. The same NumPy ``RandomState`` draws
  in the same order give the same indices.

  Raises:
    ValueError: a class with fewer than 2 members, or fewer train / test rows than classes.
  """
  n = y.shape[0]
  n_test = math.ceil(test_fraction * n)
  n_train = n - n_test
  classes, y_indices, class_counts = np.unique(y, return_inverse=True, return_counts=True)
  if class_counts.min() < 2 or n_train < classes.size or n_test < classes.size:
    raise ValueError(f"cannot split {n} rows of {classes.size} classes (smallest {class_counts.min()}) "
                     f"into {n_train} / {n_test} stratified")
  class_indices = np.split(np.argsort(y_indices, kind="stable"), np.cumsum(class_counts)[:-1])
  rng = np.random.RandomState(seed)
  n_i = _approximate_mode(class_counts, n_train, rng)
  t_i = _approximate_mode(class_counts - n_i, n_test, rng)
  train: list = []
  test: list = []
  for i in range(classes.size):
    perm = class_indices[i].take(rng.permutation(class_counts[i]), mode="clip")
    train.extend(perm[:n_i[i]])
    test.extend(perm[n_i[i]:n_i[i] + t_i[i]])
  return np.sort(np.asarray(train, np.int64)), np.sort(np.asarray(test, np.int64))


def _approximate_mode(class_counts: np.ndarray, n_draws: int, rng: np.random.RandomState) -> np.ndarray:
  """scikit-learn's ``utils.extmath._approximate_mode``: per-class draws summing to ``n_draws``."""
  continuous = class_counts / class_counts.sum() * n_draws
  floored = np.floor(continuous)
  need_to_add = int(n_draws - floored.sum())
  if need_to_add > 0:
    remainder = continuous - floored
    for value in np.sort(np.unique(remainder))[::-1]:
      (inds,) = np.where(remainder == value)
      add_now = min(len(inds), need_to_add)
      floored[rng.choice(inds, size=add_now, replace=False)] += 1
      need_to_add -= add_now
      if need_to_add == 0:
        break
  return floored.astype(np.int64)
