"""The in-memory dataset that every loader returns.

Host-side numpy only: tasks turn it into device arrays after partitioning
(see :mod:`fedsim.data.federated`).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np


@dataclasses.dataclass(frozen=True, eq=False)
class Dataset:
  """A labelled train/test split.

  Attributes:
    name: short identifier, e.g. ``"digits"``, ``"mnist"``, ``"libsvm:a9a"``.
    x_train: (n_train, *feature_shape) float32, values in [0, 1]. Image
      datasets keep their image shape (digits (n, 8, 8), MNIST and
      Fashion-MNIST (n, 28, 28), CIFAR-10 (n, 32, 32, 3) NHWC);
      LIBSVM data is (n, num_features).
    y_train: (n_train,) int32 in 0..num_classes-1.
    x_test: (n_test, *feature_shape) float32, values in [0, 1].
    y_test: (n_test,) int32 in 0..num_classes-1.
    num_classes: C.
    info: JSON-serialisable provenance (source files, split rule, split seed,
      split sizes); written into a run's ``config.json``.

  ``eq=False``: arrays make field-wise ``==`` ambiguous, so instances compare
  (and hash) by identity.
  """

  name: str
  x_train: np.ndarray
  y_train: np.ndarray
  x_test: np.ndarray
  y_test: np.ndarray
  num_classes: int
  info: dict

  def __post_init__(self):
    for split in ("train", "test"):
      x = getattr(self, f"x_{split}")
      y = getattr(self, f"y_{split}")
      if x.dtype != np.float32 or y.dtype != np.int32:
        raise TypeError(f"{self.name}: x_{split} must be float32 and y_{split} int32; "
                        f"got {x.dtype}, {y.dtype}")
      if y.ndim != 1 or x.ndim < 2 or x.shape[0] != y.shape[0]:
        raise ValueError(f"{self.name}: x_{split} {x.shape} and y_{split} {y.shape} "
                         "must be (n, *feature_shape) and (n,)")
    if self.x_train.shape[1:] != self.x_test.shape[1:]:
      raise ValueError(f"{self.name}: train features {self.x_train.shape[1:]} != "
                       f"test features {self.x_test.shape[1:]}")

  @property
  def n_train(self) -> int:
    return int(self.x_train.shape[0])

  @property
  def n_test(self) -> int:
    return int(self.x_test.shape[0])

  @property
  def feature_shape(self) -> tuple[int, ...]:
    """Shape of one example, e.g. (8, 8) for digits, (num_features,) for LIBSVM."""
    return tuple(self.x_train.shape[1:])

  @property
  def num_features(self) -> int:
    """Number of scalar features per example (product of ``feature_shape``)."""
    return math.prod(self.feature_shape)
