"""From a dataset and a partition to the padded per-client arrays of the Task contract.

Every client is one row of a batch (see DESIGN.md, "Task"): leaves have a
leading client axis N, padded to the largest client with a boolean ``mask``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from fedsim.config import DataFieldError, FieldError, did_you_mean
from fedsim.core.errors import ConfigError, DataError
from fedsim.data import fetch
from fedsim.data.cifar10 import load_cifar10
from fedsim.data.dataset import Dataset
from fedsim.data.digits import load_digits
from fedsim.data.libsvm import load_libsvm
from fedsim.data.mnist import load_fashion_mnist, load_mnist

DATASETS = ("digits", "mnist", "libsvm", "fashion_mnist", "cifar10")

# --dataset names read from --data_dir (no offline default): name -> (what it must hold, loader).
_FROM_DIR = {
    "mnist": ("a folder with the MNIST IDX files", load_mnist),
    "fashion_mnist": ("a folder with the Fashion-MNIST IDX files, named as MNIST's", load_fashion_mnist),
    "cifar10": ("the cifar-10-batches-bin folder of the CIFAR-10 binary release, or its parent",
                load_cifar10),
    "libsvm": ("a LIBSVM file or a folder with <name> and <name>.t", load_libsvm),
}


def to_client_arrays(x: np.ndarray, y: np.ndarray,
                     parts: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
  """Gathers each client's samples into zero-padded rows.

  Args:
    x: (n, *feature_shape) features.
    y: (n,) int labels.
    parts: N index arrays into ``x`` / ``y`` (e.g. from
      :func:`fedsim.data.partitions.partition`); order within a part is kept.

  Returns:
    A dict with
      ``"x"``: (N, n_max, *feature_shape) float32,
      ``"y"``: (N, n_max) int32,
      ``"mask"``: (N, n_max) bool, True on the first ``n[k]`` entries of row k,
      ``"n"``: (N,) int32 client sizes,
    where n_max = max(n). Padding entries are 0 in ``x`` and ``y``.

  Raises:
    ValueError: ``x`` and ``y`` disagree in length, ``parts`` is empty, or an
      index is out of range.
  """
  x, y = np.asarray(x), np.asarray(y)
  if x.shape[:1] != y.shape or y.ndim != 1:
    raise ValueError(f"x {x.shape} and y {y.shape} must be (n, ...) and (n,)")
  if len(parts) == 0:
    raise ValueError("parts is empty; need at least one client")
  parts = [np.asarray(p, np.int64).reshape(-1) for p in parts]
  for k, p in enumerate(parts):
    if p.size and (p.min() < 0 or p.max() >= y.shape[0]):
      raise ValueError(f"client {k}: index out of range [0, {y.shape[0]})")
  sizes = np.array([p.size for p in parts], np.int32)
  n_max = int(sizes.max())
  num = len(parts)
  out_x = np.zeros((num, n_max) + x.shape[1:], np.float32)
  out_y = np.zeros((num, n_max), np.int32)
  mask = np.zeros((num, n_max), bool)
  for k, p in enumerate(parts):
    out_x[k, :p.size] = x[p]
    out_y[k, :p.size] = y[p]
    mask[k, :p.size] = True
  return {"x": out_x, "y": out_y, "mask": mask, "n": sizes}


def _from_cache(name: str, what: str, loader, seed: int) -> Dataset:
  """``loader`` on the cache's ``<cache>/<name>`` (:mod:`fedsim.data.fetch`); never downloads."""
  folder = fetch.dataset_dir(name)
  command = f"`python -m fedsim.data fetch {name}`"
  if not folder.is_dir():
    raise FieldError("data_dir", f"dataset={name!r} is not in the data cache ({folder}); run {command} "
                     f"or give data_dir ({what})",
                     cli=f"--data_dir: --dataset={name} is not in the data cache ({folder}); run {command} "
                         f"or give --data_dir ({what})")
  try:
    return loader(folder, seed=seed)
  except DataError as e:
    message = str(e).removeprefix(f"{e.path}: ")
    error = DataError(e.path, f"{message}; {command} fetches it into the data cache")
    raise DataFieldError("data_dir", error) from None


def load_dataset(name: str, data_dir: str | os.PathLike | None = None, seed: int = 0) -> Dataset:
  """Loads a dataset by its ``--dataset`` name.

  Args:
    name: ``digits`` (embedded, ignores ``data_dir``), ``mnist`` or
      ``fashion_mnist`` (``data_dir`` holds the IDX files), ``cifar10``
      (``data_dir`` is the binary release's ``cifar-10-batches-bin`` folder or
      its parent; :func:`fedsim.data.cifar10.load_cifar10`) or ``libsvm``
      (``data_dir`` is a LIBSVM file or a folder with ``<name>`` and
      ``<name>.t``).
    data_dir: the ``--data_dir`` flag. None (or ``""``): ``mnist``, ``fashion_mnist`` and
      ``cifar10`` are read from the data cache, ``<cache>/<name>``
      (:func:`fedsim.data.fetch.cache_root`: ``$FEDSIM_DATA``, default
      ``~/.cache/fedsim/data``), filled by ``python -m fedsim.data fetch <name>``;
      nothing is downloaded here. ``libsvm`` has no default.
    seed: the split seed (see each loader).

  Returns:
    The :class:`Dataset`.

  Raises:
    ConfigError: unknown ``dataset``.
    FieldError: (field ``data_dir``) ``data_dir`` missing for ``libsvm``, or
      missing and the cache has no ``<cache>/<name>`` folder (the message names
      the folder and ``python -m fedsim.data fetch <name>``).
    DataFieldError: (a DataError and a FieldError, field ``data_dir``) ``data_dir``
      (or the cache's folder) is not what the dataset needs, or its files are
      missing or corrupt: ``data_dir: PATH: MESSAGE``, on the command line
      ``--data_dir PATH: MESSAGE`` (for the cache, MESSAGE ends naming the fetch command).
  """
  if name == "digits":
    return load_digits(seed=seed)
  if name in _FROM_DIR:
    what, loader = _FROM_DIR[name]
    if data_dir is None or str(data_dir) == "":
      if name not in fetch.REGISTRY:  # libsvm: which file is the user's to say
        raise FieldError("data_dir", f"dataset={name!r} needs data_dir ({what})",
                         cli=f"--data_dir: --dataset={name} needs --data_dir ({what})")
      return _from_cache(name, what, loader, seed)
    try:
      return loader(data_dir, seed=seed)
    except DataError as e:
      raise DataFieldError("data_dir", e) from None
  raise ConfigError("dataset", f"unknown {name!r}{did_you_mean(name, DATASETS)}; accepted: {', '.join(DATASETS)}")
