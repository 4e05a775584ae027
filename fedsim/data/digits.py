"""scikit-learn's 8x8 handwritten digits: the embedded default dataset.

Source: the UCI "Optical Recognition of Handwritten Digits" test set (Alpaydin &
Kaynak 1998), 1,797 images, 10 classes, shipped inside the scikit-learn wheel
(``sklearn.datasets.load_digits``); no download needed.
"""

from __future__ import annotations

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
  import sklearn  # here, not at module level: importing it costs ~1.3 s of every CLI start-up
  import sklearn.datasets
  import sklearn.model_selection
  bunch = sklearn.datasets.load_digits()
  x = (np.asarray(bunch.images, np.float64) / 16.0).astype(np.float32)
  y = np.asarray(bunch.target, np.int32)
  idx_train, idx_test = sklearn.model_selection.train_test_split(
      np.arange(len(y)), test_size=test_fraction, stratify=y, random_state=seed)
  idx_train, idx_test = np.sort(idx_train), np.sort(idx_test)
  info = {
      "source": "sklearn.datasets.load_digits",
      "sklearn_version": sklearn.__version__,
      "split": f"stratified {1 - test_fraction:g}/{test_fraction:g} "
               "(sklearn train_test_split)",
      "seed": int(seed),
      "test_fraction": float(test_fraction),
      "n_train": int(idx_train.size),
      "n_test": int(idx_test.size),
  }
  return Dataset(name="digits", x_train=x[idx_train], y_train=y[idx_train],
                 x_test=x[idx_test], y_test=y[idx_test], num_classes=10, info=info)
