"""CIFAR-10 from the standard binary release (Krizhevsky, 2009).

Where to get it: the "CIFAR-10 binary version (suitable for C programs)",
``cifar-10-binary.tar.gz`` from https://www.cs.toronto.edu/~kriz/cifar.html.
``python -m fedsim.data fetch cifar10`` downloads and extracts it into the data
cache (:mod:`fedsim.data.fetch`), which runs read when ``--data_dir`` is not
given; or extract it yourself (``tar xzf cifar-10-binary.tar.gz``) and point
``--data_dir`` at the resulting ``cifar-10-batches-bin/`` folder or at its parent.
The Python ("pickle") release is not read: fedsim never unpickles data files.

Binary format: ``data_batch_1.bin`` .. ``data_batch_5.bin`` (training) and
``test_batch.bin`` (test), each a plain sequence of 3073-byte records (10,000
per file in the release): 1 label byte (0..9), then 3,072 uint8 pixels of a
32x32 colour image, channel-major: the 1,024 red values, then the 1,024 green,
then the 1,024 blue, each channel row-major (row 0 left to right first).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np

from fedsim.core.errors import DataError
from fedsim.data.dataset import Dataset

FOLDER = "cifar-10-batches-bin"
TRAIN_FILES = tuple(f"data_batch_{i}.bin" for i in range(1, 6))
TEST_FILE = "test_batch.bin"
HEIGHT = WIDTH = 32
CHANNELS = 3
PIXELS = HEIGHT * WIDTH * CHANNELS  # 3072
RECORD_BYTES = 1 + PIXELS  # 3073
CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")

_EXPECTED = (f"--data_dir must be the folder holding {', '.join(TRAIN_FILES)} and {TEST_FILE} "
             f"(the {FOLDER}/ folder extracted from cifar-10-binary.tar.gz) or its parent")


def _read_batch_bytes(path: Path) -> tuple[np.ndarray, np.ndarray, str]:
  """Reads one binary batch; returns (images NHWC uint8, labels uint8, md5 of the file)."""
  try:
    raw = path.read_bytes()
  except OSError as e:
    raise DataError(str(path), f"cannot read CIFAR-10 batch: {e.strerror or e}; {_EXPECTED}") from e
  if not raw:
    raise DataError(str(path), f"empty file; expected {RECORD_BYTES}-byte records; {_EXPECTED}")
  if len(raw) % RECORD_BYTES:
    raise DataError(str(path), f"{len(raw)} bytes is not a multiple of the {RECORD_BYTES}-byte record "
                    f"(1 label + {PIXELS} pixels): truncated, or not a CIFAR-10 binary batch; "
                    f"check --data_dir")
  n = len(raw) // RECORD_BYTES
  records = np.frombuffer(raw, np.uint8).reshape(n, RECORD_BYTES)
  labels = records[:, 0].copy()
  bad = np.flatnonzero(labels >= len(CLASSES))
  if bad.size:
    i = int(bad[0])
    raise DataError(str(path), f"record {i} (byte offset {i * RECORD_BYTES}) has label {labels[i]}; "
                    f"CIFAR-10 labels are 0..{len(CLASSES) - 1} ({bad.size} bad record(s)); "
                    "not a CIFAR-10 binary batch? check --data_dir")
  images = records[:, 1:].reshape(n, CHANNELS, HEIGHT, WIDTH).transpose(0, 2, 3, 1)
  return np.ascontiguousarray(images), labels, hashlib.md5(raw).hexdigest()


def read_cifar10_batch(path: str | os.PathLike) -> tuple[np.ndarray, np.ndarray]:
  """Reads one CIFAR-10 binary batch file (``data_batch_*.bin`` or ``test_batch.bin``).

  Args:
    path: the file.

  Returns:
    images: (n, 32, 32, 3) uint8, NHWC with channels R, G, B: the file's pixel
      byte ``c * 1024 + 32 * row + col`` of a record is ``images[i, row, col, c]``.
    labels: (n,) uint8 in 0..9.

  Raises:
    DataError: naming ``path``, if the file cannot be read, is empty, its size
      is not a multiple of 3073 bytes (truncated), or a label is above 9.
  """
  images, labels, _ = _read_batch_bytes(Path(path))
  return images, labels


def resolve_dir(data_dir: str | os.PathLike) -> Path:
  """The folder holding the ``.bin`` files: ``data_dir`` itself, or its ``cifar-10-batches-bin/``.

  ``data_dir`` is used when it holds any of the six batch files; otherwise its
  ``cifar-10-batches-bin`` subfolder when that exists; otherwise ``data_dir``
  (so that the missing-file error names it).

  Raises:
    DataError: ``data_dir`` is not a directory.
  """
  root = Path(data_dir)
  if not root.is_dir():
    raise DataError(str(root), f"not a directory; {_EXPECTED}")
  names = TRAIN_FILES + (TEST_FILE,)
  if not any((root / name).is_file() for name in names) and (root / FOLDER).is_dir():
    return root / FOLDER
  return root


def load_cifar10(data_dir: str | os.PathLike, seed: int = 0) -> Dataset:
  """Loads CIFAR-10 from the binary release in ``data_dir`` (see the module docstring).

  The official split: the five ``data_batch_*.bin`` files, concatenated in
  order, are the training set (50,000 images in the release) and
  ``test_batch.bin`` the test set (10,000). All six files are required; a file
  may hold any whole number of records.

  Args:
    data_dir: the ``cifar-10-batches-bin/`` folder holding the ``.bin`` files,
      or its parent.
    seed: unused (the split is fixed); kept for the loaders' common signature
      and recorded in ``info``.

  Returns:
    A :class:`Dataset` named ``cifar10`` with x (n, 32, 32, 3) float32 in
    [0, 1] (pixels / 255), NHWC with RGB channels (d = 3,072 features per
    image; ``Dataset.num_features``), y (n,) int32 in 0..9, ``num_classes`` = 10
    (``info["classes"]`` lists the class names in label order). ``info``
    records each file's path and md5.

  Raises:
    DataError: ``data_dir`` is not a folder, a file is missing (the message
      names the folder and the missing files), unreadable, truncated (size not
      a multiple of 3073 bytes) or holds a label above 9.
  """
  root = resolve_dir(data_dir)
  missing = [name for name in TRAIN_FILES + (TEST_FILE,) if not (root / name).is_file()]
  if missing:
    hint = ""
    if (root / "data_batch_1").is_file() or (root / "cifar-10-batches-py").is_dir():
      hint = " (this looks like the Python/pickle release, which fedsim does not read)"
    raise DataError(str(root), f"missing CIFAR-10 file(s) {', '.join(missing)}{hint}; {_EXPECTED}")

  files, parts = {}, {}
  for name in TRAIN_FILES + (TEST_FILE,):
    path = root / name
    images, labels, md5 = _read_batch_bytes(path)
    parts[name] = (images, labels)
    files[name] = {"path": str(path.resolve()), "md5": md5}
  x_train = np.concatenate([parts[name][0] for name in TRAIN_FILES])
  y_train = np.concatenate([parts[name][1] for name in TRAIN_FILES])
  x_test, y_test = parts.pop(TEST_FILE)
  parts.clear()

  def to_float(a):
    x = a.astype(np.float32)
    x /= np.float32(255.0)
    return x

  info = {
      "source": "CIFAR-10 binary release (Krizhevsky, 2009)",
      "data_dir": str(root.resolve()),
      "files": files,
      "split": "official: data_batch_1..5 / test_batch",
      "layout": "NHWC (n, 32, 32, 3), channels R, G, B",
      "classes": list(CLASSES),
      "seed": int(seed),
      "n_train": int(y_train.shape[0]),
      "n_test": int(y_test.shape[0]),
  }
  return Dataset(name="cifar10", x_train=to_float(x_train), y_train=y_train.astype(np.int32),
                 x_test=to_float(x_test), y_test=y_test.astype(np.int32),
                 num_classes=len(CLASSES), info=info)
