"""MNIST from the original IDX files (LeCun, Cortes & Burges, 1998).

IDX format (http://yann.lecun.com/exdb/mnist/): a big-endian header
``0x00 0x00 <dtype> <ndim>`` then ``ndim`` uint32 dimension sizes, then the
data row-major. MNIST uses dtype 0x08 (uint8): magic 0x00000803 for images
(n, rows, cols) and 0x00000801 for labels (n,). Files may be gzip-compressed.
Fashion-MNIST (Xiao, Rasul & Vollgraf, 2017) ships the same files, names and
format: :func:`load_fashion_mnist`.
"""

from __future__ import annotations

import gzip
import hashlib
import math
import os
import zlib
from pathlib import Path

import numpy as np

from fedsim.core.errors import DataError
from fedsim.data.dataset import Dataset

IMAGES_MAGIC = 0x00000803
LABELS_MAGIC = 0x00000801
_GZIP_MAGIC = b"\x1f\x8b"

TRAIN_IMAGES = "train-images-idx3-ubyte"
TRAIN_LABELS = "train-labels-idx1-ubyte"
TEST_IMAGES = "t10k-images-idx3-ubyte"
TEST_LABELS = "t10k-labels-idx1-ubyte"

# Datasets shipped as the four IDX files above: name -> (display name, source).
VARIANTS = {
    "mnist": ("MNIST", "MNIST IDX (LeCun, Cortes & Burges)"),
    "fashion_mnist": ("Fashion-MNIST", "Fashion-MNIST IDX (Xiao, Rasul & Vollgraf, 2017)"),
}


def read_idx(path: str | os.PathLike) -> np.ndarray:
  """Reads one uint8 IDX file, gzip-compressed or raw (detected from the bytes).

  Args:
    path: an images (magic 0x00000803) or labels (magic 0x00000801) file.

  Returns:
    uint8 array of the header's shape: (n, rows, cols) for images, (n,) for
    labels.

  Raises:
    DataError: naming ``path``, if the file cannot be read, the gzip stream is
      corrupt or truncated, the magic number is not one of the two above, a
      dimension is zero, or the data length differs from the header's.
  """
  path = os.fspath(path)
  try:
    with open(path, "rb") as f:
      raw = f.read()
  except OSError as e:
    raise DataError(path, f"cannot read IDX file: {e.strerror or e}") from e
  if raw[:2] == _GZIP_MAGIC:
    try:
      raw = gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as e:
      raise DataError(path, f"corrupt or truncated gzip data: {e}") from e
  if len(raw) < 4:
    raise DataError(path, f"too short for an IDX header ({len(raw)} bytes)")
  magic = int.from_bytes(raw[:4], "big")
  if magic not in (IMAGES_MAGIC, LABELS_MAGIC):
    raise DataError(path, f"bad IDX magic number 0x{magic:08x}; expected 0x{IMAGES_MAGIC:08x} "
                    f"(uint8 images) or 0x{LABELS_MAGIC:08x} (uint8 labels)")
  ndim = magic & 0xFF
  header = 4 + 4 * ndim
  if len(raw) < header:
    raise DataError(path, f"truncated IDX header: {len(raw)} bytes, need {header}")
  dims = tuple(int(d) for d in np.frombuffer(raw, ">u4", count=ndim, offset=4))
  if min(dims) == 0:
    raise DataError(path, f"IDX dimensions {dims} contain a zero")
  expected, actual = math.prod(dims), len(raw) - header
  if actual != expected:
    what = "truncated" if actual < expected else "trailing bytes"
    raise DataError(path, f"IDX header says {'x'.join(map(str, dims))} = {expected} bytes of "
                    f"data but the file has {actual} ({what})")
  return np.frombuffer(raw, np.uint8, offset=header).reshape(dims).copy()


def _find(data_dir: Path, base: str) -> Path | None:
  for name in (base, base + ".gz"):
    if (data_dir / name).is_file():
      return data_dir / name
  return None


def _md5(path: Path) -> str:
  return hashlib.md5(path.read_bytes()).hexdigest()


def _read_pair(images_path: Path, labels_path: Path) -> tuple[np.ndarray, np.ndarray]:
  images, labels = read_idx(images_path), read_idx(labels_path)
  if images.ndim != 3:
    raise DataError(str(images_path), f"expected an images file (3-D), got shape {images.shape}")
  if labels.ndim != 1:
    raise DataError(str(labels_path), f"expected a labels file (1-D), got shape {labels.shape}")
  if images.shape[0] != labels.shape[0]:
    raise DataError(str(labels_path), f"{labels.shape[0]} labels but {images_path.name} "
                    f"has {images.shape[0]} images")
  return images, labels


def load_mnist(data_dir: str | os.PathLike, seed: int = 0, *, variant: str = "mnist") -> Dataset:
  """Loads MNIST (or another ``variant`` in the same IDX layout) from ``data_dir``.

  If all four standard files are present (``train-images-idx3-ubyte``,
  ``train-labels-idx1-ubyte``, ``t10k-images-idx3-ubyte``,
  ``t10k-labels-idx1-ubyte``, each optionally ``.gz``) the official
  60,000/10,000 split is used. If only the two ``t10k`` files are present (as
  in CI's copy) the 10,000 test images are split 8,000/2,000
  (4/5 : 1/5), stratified by label with ``random_state=seed``; ``info["split"]``
  says so.

  Args:
    data_dir: folder holding the IDX files.
    seed: seed of the t10k-only split (unused with the official split).
    variant: a key of :data:`VARIANTS`: ``mnist`` or ``fashion_mnist``
      (Fashion-MNIST ships the same four file names and format); it sets the
      dataset's ``name``, ``info["source"]`` and the error messages.

  Returns:
    A :class:`Dataset` with x (n, 28, 28) float32 in [0, 1] (pixels / 255),
    y (n,) int32 in 0..9, ``num_classes`` = 1 + the largest label. ``info``
    records each file's path and md5.

  Raises:
    DataError: ``data_dir`` is not a folder, expected files are missing (the
      message names the folder and the file names), or a file is corrupt.
    ValueError: unknown ``variant``.
  """
  if variant not in VARIANTS:
    raise ValueError(f"unknown IDX dataset variant {variant!r}; accepted: {', '.join(VARIANTS)}")
  label, source = VARIANTS[variant]
  root = Path(data_dir)
  expected = (f"{TEST_IMAGES} and {TEST_LABELS}, plus {TRAIN_IMAGES} and {TRAIN_LABELS} "
              "for the official split (each optionally .gz)")
  if not root.is_dir():
    raise DataError(str(root), f"not a directory; expected a folder with {expected}")
  found = {base: _find(root, base)
           for base in (TRAIN_IMAGES, TRAIN_LABELS, TEST_IMAGES, TEST_LABELS)}
  missing = [base for base in (TEST_IMAGES, TEST_LABELS) if found[base] is None]
  has_train = [found[TRAIN_IMAGES] is not None, found[TRAIN_LABELS] is not None]
  if any(has_train) and not all(has_train):
    missing += [base for base in (TRAIN_IMAGES, TRAIN_LABELS) if found[base] is None]
  if missing:
    raise DataError(str(root), f"missing {label} file(s) {', '.join(missing)} (or .gz); "
                    f"expected {expected}")

  files = {base: {"path": str(p.resolve()), "md5": _md5(p)} for base, p in found.items() if p}
  test_images, test_labels = found[TEST_IMAGES], found[TEST_LABELS]
  train_images, train_labels = found[TRAIN_IMAGES], found[TRAIN_LABELS]
  assert test_images is not None and test_labels is not None  # else `missing` raised above
  x_test, y_test = _read_pair(test_images, test_labels)
  if train_images is not None and train_labels is not None:  # all(has_train)
    x_train, y_train = _read_pair(train_images, train_labels)
    if x_train.shape[1:] != x_test.shape[1:]:
      raise DataError(str(train_images), f"image shape {x_train.shape[1:]} differs from "
                      f"{test_images.name}'s {x_test.shape[1:]}")
    split = "official: train-* / t10k-*"
  else:
    x_all, y_all = x_test, y_test
    n = y_all.shape[0]
    if n < 10:
      raise DataError(str(test_images), f"only {n} images; too few to split")
    import sklearn.model_selection  # here: importing sklearn costs ~1.3 s of every start-up
    idx_train, idx_test = sklearn.model_selection.train_test_split(
        np.arange(n), test_size=n // 5, stratify=y_all, random_state=seed)
    idx_train, idx_test = np.sort(idx_train), np.sort(idx_test)
    x_train, y_train = x_all[idx_train], y_all[idx_train]
    x_test, y_test = x_all[idx_test], y_all[idx_test]
    split = (f"t10k-only: {idx_train.size}/{idx_test.size} fixed-seed split "
             "(stratified, sklearn train_test_split)")

  num_classes = int(max(y_train.max(), y_test.max())) + 1
  info = {
      "source": source,
      "data_dir": str(root.resolve()),
      "files": files,
      "split": split,
      "seed": int(seed),
      "n_train": int(y_train.shape[0]),
      "n_test": int(y_test.shape[0]),
  }
  def to_float(a):
    return a.astype(np.float32) / np.float32(255.0)

  return Dataset(name=variant, x_train=to_float(x_train), y_train=y_train.astype(np.int32),
                 x_test=to_float(x_test), y_test=y_test.astype(np.int32),
                 num_classes=num_classes, info=info)


def load_fashion_mnist(data_dir: str | os.PathLike, seed: int = 0) -> Dataset:
  """Loads Fashion-MNIST (Xiao, Rasul & Vollgraf, 2017) from IDX files in ``data_dir``.

  Fashion-MNIST is a drop-in replacement for MNIST: the same four file names
  (``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``,
  ``t10k-images-idx3-ubyte``, ``t10k-labels-idx1-ubyte``, each optionally
  ``.gz``), 28x28 grey images and 10 classes, so this is
  ``load_mnist(data_dir, seed, variant="fashion_mnist")`` (same split rules,
  same :class:`Dataset` layout, ``name`` ``fashion_mnist``). Loading never
  downloads: ``python -m fedsim.data fetch fashion_mnist`` puts the official
  files (https://github.com/zalandoresearch/fashion-mnist) in the data cache's
  ``fashion_mnist/`` (a folder of their own: the names collide with MNIST's).
  """
  return load_mnist(data_dir, seed, variant="fashion_mnist")
