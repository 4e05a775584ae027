"""Training a small classifier once, deterministically, with an on-disk cache.

Used by tasks that need a fixed, well-trained model as part of their definition
(the black-box attack of FedZO, Fang et al. 2022, §V-A / eq. 21, attacks one shared
classifier). Training minimises the mean cross-entropy
(1/B) sum_b CE(model(theta, x_b), y_b) with optax Adam on i.i.d. mini-batches
(with replacement); the whole run is one jitted ``lax.scan``, so the result is
a deterministic function of the data, the seed and :class:`TrainConfig`.

The cache file is a numpy ``.npz`` holding the parameters flattened with
``flax.traverse_util.flatten_dict`` ("/"-joined keys) and a ``__meta__`` entry,
the JSON of the cache key; it is written atomically (temporary file, then
``os.replace``), so concurrent writers never leave a torn file; and
:func:`train_or_load` holds an exclusive lock on ``<file>.lock`` (POSIX
``fcntl.flock``) while it trains, so processes that need the same classifier at
once (``experiments.reproduce --run_jobs=2``) train it once: the others wait,
then load it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import logging
from flax import traverse_util

from fedsim.models.linear import Softmax

PyTree = Any

DEFAULT_CACHE_DIR = os.path.join("~", ".cache", "fedsim", "classifiers")
_META = "__meta__"


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  """Hyperparameters of :func:`train_classifier` (all part of the cache key).

  Attributes:
    steps: number of Adam steps.
    batch_size: mini-batch size B (capped at the training-set size).
    learning_rate: Adam step size.
  """
  steps: int = 500
  batch_size: int = 128
  learning_rate: float = 3e-3


def train_classifier(model: nn.Module | Softmax, x: np.ndarray, y: np.ndarray, seed: int,
                     config: TrainConfig = TrainConfig()) -> PyTree:
  """Trains ``model`` on (x, y) with Adam, in one jitted ``lax.scan``.

  Step t draws B indices i.i.d. uniformly from ``fold_in(key_data, t)`` and
  applies one Adam update to the mean cross-entropy of that batch.

  Args:
    model: a flax module mapping (B, *feature_shape) float32 to (B, C) logits.
    x: (n, *feature_shape) float32 training inputs.
    y: (n,) int labels in 0..C-1.
    seed: seed of the initialisation and of the batch draws.
    config: the hyperparameters.

  Returns:
    The trained parameters (a pytree of float32 arrays).

  Raises:
    ValueError: ``x`` and ``y`` disagree in length, or ``x`` is empty.
  """
  xj = jnp.asarray(x, jnp.float32)
  yj = jnp.asarray(y, jnp.int32)
  if xj.shape[0] != yj.shape[0] or xj.shape[0] == 0:
    raise ValueError(f"x {xj.shape} and y {yj.shape} must be non-empty (n, ...) and (n,)")
  n = xj.shape[0]
  batch = min(int(config.batch_size), n)
  key_init, key_data = jax.random.split(jax.random.key(seed))
  params = model.init(key_init, xj[:1])
  opt = optax.adam(config.learning_rate)

  def batch_loss(p, xb, yb):
    logits = model.apply(p, xb)
    return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, yb))

  @jax.jit
  def run(params, x, y):
    def step(carry, t):
      p, s = carry
      idx = jax.random.randint(jax.random.fold_in(key_data, t), (batch,), 0, n)
      g = jax.grad(batch_loss)(p, x[idx], y[idx])
      upd, s = opt.update(g, s, p)
      return (optax.apply_updates(p, upd), s), None
    (p, _), _ = jax.lax.scan(step, (params, opt.init(params)), jnp.arange(config.steps))
    return p

  with jax.default_matmul_precision("highest"):
    return run(params, xj, yj)


def cache_key_digest(key: dict) -> str:
  """SHA-256 hex digest of the canonical JSON (sorted keys) of ``key``."""
  return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()


def save_params(path: str | os.PathLike, params: PyTree, meta: dict) -> None:
  """Writes ``params`` and ``meta`` to ``path`` (.npz) atomically.

  Args:
    path: destination file; its folder is created if missing.
    params: a nested dict of arrays (flax variables).
    meta: JSON-serialisable metadata, stored as ``__meta__``.
  """
  path = Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  flat = traverse_util.flatten_dict(jax.device_get(params), sep="/")
  arrays: dict[str, Any] = {k: np.asarray(v) for k, v in flat.items()}  # Any: np.savez(**arrays) type-checks
  arrays[_META] = np.asarray(json.dumps(meta, sort_keys=True, default=str))
  fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp.npz")
  try:
    with os.fdopen(fd, "wb") as f:
      np.savez(f, **arrays)
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise


def load_params(path: str | os.PathLike, template: PyTree, meta: dict) -> PyTree | None:
  """Reads parameters written by :func:`save_params`, if they fit.

  Args:
    path: the .npz file.
    template: a pytree of the expected structure (arrays or ShapeDtypeStructs).
    meta: the metadata the file must carry (compared as canonical JSON).

  Returns:
    The parameters (float32 jnp arrays in ``template``'s structure), or None if
    the file is missing, unreadable, for another key, or of another shape.
  """
  path = Path(path)
  if not path.is_file():
    return None
  try:
    with np.load(path, allow_pickle=False) as z:
      stored = {k: z[k] for k in z.files}
  except (OSError, ValueError, EOFError):
    return None
  if str(stored.pop(_META, "")) != json.dumps(meta, sort_keys=True, default=str):
    return None
  want = traverse_util.flatten_dict(template, sep="/")
  if set(want) != set(stored):
    return None
  for k, v in want.items():
    if tuple(stored[k].shape) != tuple(v.shape) or stored[k].dtype != np.dtype(v.dtype):
      return None
  return traverse_util.unflatten_dict({k: jnp.asarray(stored[k]) for k in want}, sep="/")


@contextlib.contextmanager
def _exclusive(path: Path) -> Iterator[None]:
  """Holds an exclusive ``flock`` on ``path`` (created if missing) for the block; a no-op where
  ``fcntl`` does not exist (Windows: concurrent processes then may train the same model twice,
  which the atomic write keeps sound)."""
  try:
    import fcntl
  except ImportError:  # pragma: no cover - not POSIX
    yield
    return
  path.parent.mkdir(parents=True, exist_ok=True)
  with open(path, "a") as f:
    fcntl.flock(f.fileno(), fcntl.LOCK_EX)
    try:
      yield
    finally:
      fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def train_or_load(model: nn.Module | Softmax, x: np.ndarray, y: np.ndarray, *, seed: int,
                  config: TrainConfig, key: dict, cache_dir: str | os.PathLike | None = None,
                  prefix: str = "classifier") -> tuple[PyTree, str, bool]:
  """Loads the classifier cached under ``key``, or trains and caches it.

  Args:
    model: the flax module.
    x: (n, *feature_shape) float32 training inputs.
    y: (n,) int labels.
    seed: training seed (include it in ``key``).
    config: training hyperparameters (include them in ``key``).
    key: JSON-serialisable description of everything the parameters depend on
      (dataset, model, seed, hyperparameters); its SHA-256 names the file.
    cache_dir: cache folder; default ``~/.cache/fedsim/classifiers``.
    prefix: file-name prefix (sanitised to [A-Za-z0-9._-]).

  Returns:
    ``(params, path, loaded)``: the parameters, the cache file path, and
    whether they were loaded (True) or freshly trained (False). A caller that
    waited on another process training the same key loads its result.

  Raises:
    FieldError: (a ConfigError, field ``cache_dir``) the cache folder cannot be
      created (a file is in the way), or it is not writable and holds no model for ``key``.
    OSError: the cache file cannot be written.
  """
  from fedsim.config import FieldError
  cache_dir = Path(os.path.expanduser(os.fspath(cache_dir or DEFAULT_CACHE_DIR)))
  try:
    cache_dir.mkdir(parents=True, exist_ok=True)
  except OSError as e:
    raise FieldError("cache_dir", f"cannot create {cache_dir}: {e.strerror or e}") from None
  safe = "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in prefix)
  path = cache_dir / f"{safe}-{cache_key_digest(key)[:20]}.npz"
  template = jax.eval_shape(model.init, jax.random.key(0),
                            jax.ShapeDtypeStruct((1,) + tuple(np.shape(x)[1:]), jnp.float32))
  params = load_params(path, template, key)
  if params is not None:
    return params, str(path), True
  if not os.access(cache_dir, os.W_OK):
    raise FieldError("cache_dir", f"{cache_dir} is not writable (the model must be trained and cached)")
  with _exclusive(path.with_name(path.name + ".lock")):
    params = load_params(path, template, key)  # trained by whoever held the lock before us
    if params is not None:
      return params, str(path), True
    logging.info("training %s (%d samples, %d steps; cached to %s)", safe, len(y), config.steps, path)
    params = train_classifier(model, x, y, seed, config)
    save_params(path, params, key)
  return params, str(path), False
