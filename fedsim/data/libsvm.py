"""LIBSVM / SVMlight sparse text format (Chang & Lin, LIBSVM datasets page).

One example per line: ``<label> <index>:<value> <index>:<value> ...`` with
1-based feature indices; text after ``#`` is a comment. A dataset with its own
test split is shipped as ``<name>`` and ``<name>.t``.
"""

from __future__ import annotations

import hashlib
import math
import os
from pathlib import Path

import numpy as np

from fedsim.core.errors import DataError
from fedsim.data.dataset import Dataset

TEST_FRACTION = 0.2


def read_libsvm(path: str | os.PathLike,
                num_features: int | None = None) -> tuple[np.ndarray, np.ndarray]:
  """Parses one LIBSVM file into dense arrays.

  Blank lines, comment-only lines and ``qid:`` tokens are skipped.

  Args:
    path: the text file.
    num_features: width of the result; ``None`` means the largest index in the
      file. An index above it is an error.

  Returns:
    x: (n, num_features) float32 (absent features are 0).
    labels: (n,) float64 raw labels as written (e.g. -1/+1 or 1..C).

  Raises:
    DataError: naming ``path`` (and the 1-based line number for a malformed
      line: bad label, token without ``:``, non-integer or < 1 or too large
      index, repeated index, non-numeric or non-finite value), or the file is
      unreadable or holds no examples.
  """
  path = os.fspath(path)
  labels: list[float] = []
  rows: list[int] = []
  cols: list[int] = []
  vals: list[float] = []
  try:
    with open(path, encoding="utf-8") as f:
      for lineno, line in enumerate(f, 1):
        line = line.split("#", 1)[0].strip()
        if not line:
          continue
        tokens = line.split()
        def bad(msg, lineno=lineno):  # binds this line's number (used within the iteration only)
          return DataError(path, f"line {lineno}: {msg}")
        try:
          label = float(tokens[0])
        except ValueError:
          raise bad(f"bad label {tokens[0]!r}; expected a number") from None
        if not math.isfinite(label):
          raise bad(f"label {tokens[0]!r} is not finite")
        row = len(labels)
        seen = set()
        for tok in tokens[1:]:
          idx_s, sep, val_s = tok.partition(":")
          if not sep:
            raise bad(f"bad feature {tok!r}; expected index:value")
          if idx_s == "qid":
            continue
          try:
            idx = int(idx_s)
          except ValueError:
            raise bad(f"bad feature index {idx_s!r} in {tok!r}; expected an integer") from None
          if idx < 1:
            raise bad(f"feature index {idx} in {tok!r}; indices are 1-based")
          if num_features is not None and idx > num_features:
            raise bad(f"feature index {idx} exceeds num_features={num_features}")
          if idx in seen:
            raise bad(f"feature index {idx} repeated")
          seen.add(idx)
          try:
            val = float(val_s)
          except ValueError:
            raise bad(f"bad feature value {val_s!r} in {tok!r}; expected a number") from None
          if not math.isfinite(val):
            raise bad(f"feature value {val_s!r} in {tok!r} is not finite")
          rows.append(row)
          cols.append(idx - 1)
          vals.append(val)
        labels.append(label)
  except OSError as e:
    raise DataError(path, f"cannot read LIBSVM file: {e.strerror or e}") from e
  except UnicodeDecodeError as e:
    raise DataError(path, f"not a UTF-8 text file ({e.reason} at byte {e.start})") from e
  if not labels:
    raise DataError(path, "no examples (only blank or comment lines)")
  width = num_features if num_features is not None else (max(cols) + 1 if cols else 0)
  x = np.zeros((len(labels), width), np.float32)
  x[np.asarray(rows, np.int64), np.asarray(cols, np.int64)] = np.asarray(vals, np.float64)
  return x, np.asarray(labels, np.float64)


def _find_pair(folder: Path) -> tuple[Path, Path]:
  names = sorted(p.name for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))
  names_set = set(names)
  pairs = [n for n in names if n + ".t" in names_set]
  if len(pairs) != 1:
    found = ", ".join(f"{n} + {n}.t" for n in pairs) or "none"
    raise DataError(str(folder), "expected exactly one LIBSVM train/test pair <name> and "
                    f"<name>.t; found {len(pairs)} ({found})")
  return folder / pairs[0], folder / (pairs[0] + ".t")


def _pad(x: np.ndarray, width: int) -> np.ndarray:
  return np.pad(x, ((0, 0), (0, width - x.shape[1])))


def _json_number(v: float) -> int | float:
  return int(v) if float(v).is_integer() else float(v)


def load_libsvm(data_path: str | os.PathLike, seed: int = 0) -> Dataset:
  """Loads a LIBSVM classification dataset.

  ``data_path`` is either one LIBSVM file, split 80/20 into train/test by a
  ``numpy.random.default_rng(seed)`` permutation, or a folder holding exactly
  one pair ``<name>`` (train) and ``<name>.t`` (test), LIBSVM's own split.

  Labels become 0..C-1 in the order of the sorted distinct raw labels over
  train and test. Features are min/max scaled per feature with the training
  split's statistics: train lands in [0, 1], test is clipped to [0, 1], and
  features constant on the training split become 0. The feature count is the
  largest index over both files.

  Args:
    data_path: a LIBSVM file or a folder with ``<name>`` and ``<name>.t``.
    seed: seed of the 80/20 split (unused for a folder).

  Returns:
    A :class:`Dataset` named ``"libsvm:<name>"`` with x (n, num_features)
    float32 in [0, 1] and y (n,) int32; ``info["label_values"]`` lists the raw
    label of each class id.

  Raises:
    DataError: the path does not exist, a folder does not hold exactly one
      pair, a file is malformed, there are fewer than 2 examples to split,
      fewer than 2 classes, or no features.
  """
  root = Path(data_path)
  if root.is_dir():
    train_path, test_path = _find_pair(root)
    x_train, raw_train = read_libsvm(train_path)
    x_test, raw_test = read_libsvm(test_path)
    width = max(x_train.shape[1], x_test.shape[1])
    x_train, x_test = _pad(x_train, width), _pad(x_test, width)
    sources = [train_path, test_path]
    split = f"libsvm: {train_path.name} / {test_path.name}"
  elif root.is_file():
    x, raw = read_libsvm(root)
    n = raw.shape[0]
    if n < 2:
      raise DataError(str(root), f"{n} example(s); need at least 2 for a train/test split")
    n_test = min(max(1, round(TEST_FRACTION * n)), n - 1)
    perm = np.random.default_rng(seed).permutation(n)
    idx_train, idx_test = np.sort(perm[n_test:]), np.sort(perm[:n_test])
    x_train, raw_train, x_test, raw_test = x[idx_train], raw[idx_train], x[idx_test], raw[idx_test]
    sources = [root]
    split = f"single file: {idx_train.size}/{idx_test.size} fixed-seed random split"
  else:
    raise DataError(str(root), "no such LIBSVM file or folder")

  where = str(root)
  if x_train.shape[1] == 0:
    raise DataError(where, "no features (no index:value pairs)")
  classes = np.unique(np.concatenate([raw_train, raw_test]))
  if classes.size < 2:
    raise DataError(where, f"only one distinct label ({_json_number(classes[0])}); "
                    "need at least 2 classes")
  y_train = np.searchsorted(classes, raw_train).astype(np.int32)
  y_test = np.searchsorted(classes, raw_test).astype(np.int32)

  lo = x_train.min(axis=0).astype(np.float64)
  span = x_train.max(axis=0).astype(np.float64) - lo
  const = span <= 0
  span = np.where(const, 1.0, span)

  def scale(a):
    z = (a.astype(np.float64) - lo) / span
    z[:, const] = 0.0
    return np.clip(z, 0.0, 1.0).astype(np.float32)

  info = {
      "source": "LIBSVM",
      "files": [{"path": str(p.resolve()), "md5": hashlib.md5(p.read_bytes()).hexdigest()}
                for p in sources],
      "split": split,
      "seed": int(seed),
      "n_train": int(y_train.size),
      "n_test": int(y_test.size),
      "num_features": int(x_train.shape[1]),
      "label_values": [_json_number(v) for v in classes],
      "scaling": "per-feature min/max of the training split; test clipped to [0, 1]; "
                 "constant features -> 0",
  }
  name = sources[0].name
  return Dataset(name=f"libsvm:{name}", x_train=scale(x_train), y_train=y_train,
                 x_test=scale(x_test), y_test=y_test, num_classes=int(classes.size), info=info)
