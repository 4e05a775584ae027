"""Checkpoints of a running simulation (issue 8, "Checkpoints"; written off the critical path, issue 36).

A checkpoint is one file ``round_<r>.npz`` under the checkpoint folder (r: the
round reached), an uncompressed NumPy archive of:

* ``leaf_<i>``: the algorithm state's leaves, each as its raw bytes (uint8);
  typed PRNG keys are stored as their raw ``jax.random.key_data`` and
  re-wrapped with ``jax.random.wrap_key_data`` on restore;
* ``meta``: one JSON string with ``round``, the cumulative ledgers ``totals``
  (exact Python integers, which may exceed int32), ``wall_time_s`` elapsed so
  far, the algorithm name, the key implementations and each leaf's dtype and
  shape.

Saves are asynchronous: :meth:`Checkpointer.save` copies the state to host
memory (so the next chunk may donate its device buffers) and returns; a
background thread writes the file. A save first waits for the previous one,
and :meth:`Checkpointer.close` (the ``with`` block's end;
:func:`fedsim.core.engine.simulate`'s ``finally``) waits for the last; a write
error is raised there. Each file is written to ``.round_<r>.npz.*.tmp`` beside
it, flushed, fsynced and renamed into place (:func:`fedsim.files.atomic_open`),
so a kill during a save leaves the previous checkpoints intact; the temporary
files a kill leaves are removed when the next writing :class:`Checkpointer`
opens the folder. Only the last ``max_to_keep`` (2) are kept.

Why not orbax-checkpoint's ``CheckpointManager`` (used before issue 36): it
spends about 25 ms of CPU per save on this machine's 2 cores whatever the
state's size (new asyncio loops and worker threads per save, two items' temporary
folders and metadata files, a synchronous delete of the oldest step), while 20
rounds of the main job take about 30 ms, so ``--checkpoint_every=20`` doubled
the run; its asynchronous mode only moves that CPU to a thread that competes
for the same cores (measured slower still). A file here costs under 1 ms.
Folders written by that orbax version (``<r>/`` step folders) are still read:
:func:`restore` and :func:`latest_round` see their steps (orbax imported only then).

Restoring needs the state's structure, which :func:`restore` gets from
``jax.eval_shape(algorithm.init, *rng.init_keys(root))`` without running
``init``; restored arrays are bit-identical to the saved ones, so a resumed run
continues bitwise-identically (tests/core/test_checkpoint.py). Under
``jax.distributed`` every process calls :meth:`Checkpointer.save` (leaves that
are not fully addressable are gathered) and process 0 writes; every process
reads the newest checkpoint (the folder must be shared) and restored leaves
are replicated global arrays.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import json
import os
import re
import shutil
import threading
from typing import Any

import jax
import numpy as np

MAX_TO_KEEP = 2
_FILE = re.compile(r"round_(\d+)\.npz")
_LEGACY = re.compile(r"\d+")  # orbax step folders (fedsim before issue 36)


def _is_key(x) -> bool:
  return hasattr(x, "dtype") and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def _path(directory: str, round_: int) -> str:
  return os.path.join(directory, f"round_{int(round_)}.npz")


def _rounds(directory: str) -> dict[int, tuple[str, str]]:
  """{round: (kind, path)} of the complete checkpoints under ``directory``: ``npz`` files and
  ``orbax`` step folders (a folder with ``_CHECKPOINT_METADATA``, renamed into place when complete)."""
  out: dict[int, tuple[str, str]] = {}
  try:
    names = os.listdir(directory)
  except OSError:
    return out
  for name in names:
    path = os.path.join(directory, name)
    if m := _FILE.fullmatch(name):
      out[int(m.group(1))] = ("npz", path)
    elif _LEGACY.fullmatch(name) and os.path.isfile(os.path.join(path, "_CHECKPOINT_METADATA")):
      out.setdefault(int(name), ("orbax", path))
  return out


def _host(x) -> np.ndarray:
  """A host copy of leaf ``x`` (all of it: gathered when other processes hold parts)."""
  if isinstance(x, jax.Array) and not x.is_fully_addressable:
    if x.is_fully_replicated:
      return np.array(x.addressable_data(0))
    from jax.experimental import multihost_utils
    return np.array(multihost_utils.process_allgather(x, tiled=True))
  return np.array(x)


class Checkpointer:
  """The checkpoints of one run under ``directory``: asynchronous saves, the newest restored.

  Use as a context manager (or call :meth:`close`): leaving it waits for the save
  in flight. One writer per folder (like every fedsim file).
  """

  def __init__(self, directory: str, max_to_keep: int = MAX_TO_KEEP, read_only: bool = False):
    """Opens ``directory`` (created unless ``read_only``; a writer removes the temporary files of
    saves a kill interrupted)."""
    self.directory = os.path.abspath(directory)
    self.max_to_keep, self.read_only = max_to_keep, read_only
    self.writes = jax.process_index() == 0 and not read_only
    self._thread: threading.Thread | None = None
    self._error: BaseException | None = None
    if self.writes:
      os.makedirs(self.directory, exist_ok=True)
      for stale in glob.glob(os.path.join(glob.escape(self.directory), ".round_*.npz.*.tmp")):
        with contextlib.suppress(OSError):
          os.unlink(stale)

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()

  def all_steps(self) -> list[int]:
    """The rounds of the complete checkpoints, ascending."""
    return sorted(_rounds(self.directory))

  def latest_step(self) -> int | None:
    """The newest complete checkpoint's round, or None."""
    steps = self.all_steps()
    return steps[-1] if steps else None

  def wait_until_finished(self) -> None:
    """Waits for the save in flight; raises its error (an OSError, e.g. a full disk)."""
    if self._thread is not None:
      self._thread.join()
      self._thread = None
    if self._error is not None:
      error, self._error = self._error, None
      raise error

  def close(self) -> None:
    """Waits for the save in flight (:meth:`wait_until_finished`)."""
    self.wait_until_finished()

  def save(self, round_: int, leaves: list, meta: dict) -> None:
    """Starts writing ``leaves`` (host arrays) and ``meta`` as round ``round_``'s checkpoint."""
    self.wait_until_finished()
    if not self.writes:
      return
    self._thread = threading.Thread(target=self._write, args=(int(round_), leaves, meta),
                                    name=f"fedsim-checkpoint-{round_}", daemon=False)
    self._thread.start()

  def _write(self, round_: int, leaves: list, meta: dict) -> None:
    try:
      from fedsim.files import atomic_open
      arrays: dict[str, Any] = {f"leaf_{i}": np.ascontiguousarray(x).reshape(-1).view(np.uint8)
                                for i, x in enumerate(leaves)}
      arrays["meta"] = np.array(json.dumps(meta))
      with atomic_open(_path(self.directory, round_), "wb") as f:
        np.savez(f, **arrays)
        if os.environ.get("FEDSIM_CHECKPOINT_STALL_ROUND") == str(round_):  # test hook: a save in flight
          threading.Event().wait()
      kept = _rounds(self.directory)
      for old in sorted(kept)[:-self.max_to_keep]:
        kind, path = kept[old]
        if kind == "npz":
          os.unlink(path)
        else:
          shutil.rmtree(path, ignore_errors=True)
    except BaseException as e:  # raised in the caller's thread by wait_until_finished
      self._error = e

  def meta(self, round_: int) -> dict:
    """The ``meta`` of round ``round_``'s checkpoint (``round``, ``totals``, ``wall_time_s``, ...)."""
    kind, path = _rounds(self.directory)[round_]
    if kind == "orbax":
      return _orbax_restore(self.directory, round_, None)[1]
    with np.load(path, allow_pickle=False) as z:
      return json.loads(str(z["meta"]))


def manager(directory: str, max_to_keep: int = MAX_TO_KEEP, read_only: bool = False) -> Checkpointer:
  """A :class:`Checkpointer` on ``directory`` keeping the last ``max_to_keep`` checkpoints."""
  return Checkpointer(directory, max_to_keep, read_only)


def latest_round(directory: str | None) -> int | None:
  """The round of the newest complete checkpoint under ``directory``, or None (no directory / no
  checkpoint; a save in flight or killed is not one). Reads only."""
  if not directory or not os.path.isdir(directory):
    return None
  return Checkpointer(directory, read_only=True).latest_step()


def save(mngr: Checkpointer, state, round_: int, totals: dict, wall_time_s: float, algorithm: str = "") -> None:
  """Saves ``state`` reached after ``round_`` rounds with cumulative ledgers ``totals``, asynchronously.

  Waits for the previous save of ``mngr``, copies the state to host memory and returns
  while a background thread writes it (``mngr.close()`` waits; a write error is raised
  there or by the next save).

  Args:
    mngr: from :func:`manager`.
    state: the algorithm state pytree (jax arrays, typed keys allowed).
    round_: r, the checkpoint's round.
    totals: {name: int} cumulative ledgers.
    wall_time_s: seconds elapsed in the run so far (a resumed run continues the clock).
    algorithm: the algorithm's name (checked on restore).
  """
  leaves = jax.tree_util.tree_leaves(state)
  impls = {str(i): str(jax.random.key_impl(x)) for i, x in enumerate(leaves) if _is_key(x)}
  raw = [_host(jax.random.key_data(x) if _is_key(x) else x) for x in leaves]
  meta = {"round": int(round_), "totals": {k: int(v) for k, v in totals.items()},
          "wall_time_s": float(wall_time_s), "algorithm": algorithm, "key_impls": impls,
          "leaves": [[x.dtype.name, list(x.shape)] for x in raw]}
  mngr.save(int(round_), raw, meta)


def restore(mngr: Checkpointer, abstract_state, mesh=None, algorithm: str = ""):
  """Restores the newest checkpoint.

  Args:
    mngr: from :func:`manager`.
    abstract_state: the state's structure, shapes and dtypes
      (``jax.eval_shape(algorithm.init, *rng.init_keys(root))``).
    mesh: under ``jax.distributed``, the global mesh: leaves come back as
      arrays replicated over it. In one process (``mesh`` None or a
      single-process mesh) they come back as uncommitted arrays on the default
      device, like ``init``'s output.
    algorithm: the algorithm's name; must match the saved one when both are given.

  Returns:
    (state, meta) with meta as saved (``round``, ``totals``, ``wall_time_s``), or
    None when there is no checkpoint.

  Raises:
    ValueError: the checkpoint belongs to another algorithm or state structure.
  """
  multi = mesh is not None and jax.process_count() > 1
  step = mngr.latest_step()
  if multi:  # every process restores process 0's newest (a shared folder, listed alike)
    from jax.experimental import multihost_utils
    step = int(multihost_utils.broadcast_one_to_all(np.int64(-1 if step is None else step)))
    step = None if step < 0 else step
  if step is None:
    return None
  leaves, treedef = jax.tree_util.tree_flatten(abstract_state)
  raw_abstract = jax.eval_shape(
      lambda ls: [jax.random.key_data(x) if _is_key(x) else x for x in ls], leaves)
  kind, path = _rounds(mngr.directory)[step]
  if kind == "orbax":
    raw, meta = _orbax_restore(mngr.directory, step, raw_abstract)
  else:
    with np.load(path, allow_pickle=False) as z:
      meta = json.loads(str(z["meta"]))
      try:
        raw = [z[f"leaf_{i}"].view(np.dtype(jax.numpy.dtype(name))).reshape(shape)
               for i, (name, shape) in enumerate(meta["leaves"])]
      except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"checkpoint {path} is not readable: {e}") from None
  if algorithm and meta.get("algorithm") and meta["algorithm"] != algorithm:
    raise ValueError(f"checkpoint in {mngr.directory} is of {meta['algorithm']!r}, not {algorithm!r}")
  if len(raw) != len(raw_abstract) or any(
      tuple(x.shape) != tuple(a.shape) or x.dtype != a.dtype for x, a in zip(raw, raw_abstract)):
    raise ValueError(f"checkpoint in {mngr.directory} does not match this state's shapes/dtypes")
  impls = meta.get("key_impls", {})
  out = []
  for i, (a, x) in enumerate(zip(leaves, raw)):
    x = np.asarray(x)
    if multi:
      from jax.sharding import NamedSharding
      from jax.sharding import PartitionSpec as P
      x = jax.make_array_from_callback(x.shape, NamedSharding(mesh, P()), functools.partial(_index, x))
    else:
      x = jax.device_put(x)
    if _is_key(a):
      x = jax.random.wrap_key_data(x, impl=impls.get(str(i)))
    out.append(x)
  return jax.tree_util.tree_unflatten(treedef, out), meta


def _index(x: np.ndarray, idx):
  return x[idx]


def _orbax_restore(directory: str, step: int, raw_abstract):
  """(leaves as host arrays or None when ``raw_abstract`` is None, meta) of an orbax step folder
  (checkpoints written before issue 36)."""
  import orbax.checkpoint as ocp
  opts = ocp.CheckpointManagerOptions(read_only=True, create=False, max_to_keep=None, save_interval_steps=0)
  with ocp.CheckpointManager(directory, options=opts, item_names=("state", "meta")) as m:
    meta = m.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]
    if raw_abstract is None:
      return None, meta
    target = [np.zeros(a.shape, a.dtype) for a in raw_abstract]
    try:
      raw = m.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(target)))["state"]
    except (ValueError, KeyError, TypeError) as e:
      raise ValueError(f"checkpoint in {directory} does not match this state: {e}") from None
  return [np.asarray(x) for x in raw], meta
