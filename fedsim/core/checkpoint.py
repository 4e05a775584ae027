"""Checkpoints of a running simulation with orbax-checkpoint (issue 8, "Checkpoints").

A checkpoint is one orbax step (the step number is the round r reached) with
two items:

* ``state``: the algorithm state's leaves as a flat list of arrays, typed PRNG
  keys stored as their raw ``jax.random.key_data`` (uint32) and re-wrapped with
  ``jax.random.wrap_key_data`` on restore (their implementation names are in
  ``meta``); zero-size leaves (e.g. FZooS's (N, 0) fit cache with ``rff_cache = 0``),
  which orbax refuses to save, are left out and rebuilt empty from the state's
  structure on restore (their indices are in ``meta["empty"]``);
* ``meta`` (JSON): ``round``, the cumulative ledgers ``totals`` (exact Python
  integers, which may exceed int32), ``wall_time_s`` elapsed so far, the
  algorithm name and the key implementations.

Saves are synchronous (the next chunk may donate the state's buffers on
accelerators) and only the last ``max_to_keep`` (2) are kept. Restoring needs
the state's structure, which :func:`restore` gets from
``jax.eval_shape(algorithm.init, *rng.init_keys(root))`` without running ``init``; restored
arrays are bit-identical to the saved ones, so a resumed run continues
bitwise-identically (tests/core/test_checkpoint.py). Under ``jax.distributed``
every process calls :func:`save`/:func:`restore` (orbax coordinates them; the
directory must be shared) and restored leaves are replicated global arrays.
"""

from __future__ import annotations

import os
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

MAX_TO_KEEP = 2


def _is_key(x) -> bool:
  return hasattr(x, "dtype") and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def manager(directory: str, max_to_keep: int = MAX_TO_KEEP) -> ocp.CheckpointManager:
  """An orbax ``CheckpointManager`` on ``directory`` (created if missing) keeping the last ``max_to_keep``."""
  directory = os.path.abspath(directory)
  opts = ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True,
                                      enable_async_checkpointing=False)
  return ocp.CheckpointManager(directory, options=opts, item_names=("state", "meta"))


def latest_round(directory: str) -> int | None:
  """The round of the newest checkpoint under ``directory``, or None (no directory / no checkpoint)."""
  if not directory or not os.path.isdir(directory):
    return None
  with manager(directory) as m:
    return m.latest_step()


def save(mngr: ocp.CheckpointManager, state, round_: int, totals: dict, wall_time_s: float,
         algorithm: str = "") -> None:
  """Saves ``state`` reached after ``round_`` rounds with cumulative ledgers ``totals``.

  Args:
    mngr: from :func:`manager`.
    state: the algorithm state pytree (jax arrays, typed keys allowed).
    round_: r, the orbax step.
    totals: {name: int} cumulative ledgers.
    wall_time_s: seconds elapsed in the run so far (a resumed run continues the clock).
    algorithm: the algorithm's name (checked on restore).
  """
  leaves = jax.tree_util.tree_leaves(state)
  impls = {str(i): str(jax.random.key_impl(x)) for i, x in enumerate(leaves) if _is_key(x)}
  raw = [jax.random.key_data(x) if _is_key(x) else x for x in leaves]
  empty = [i for i, x in enumerate(raw) if x.size == 0]   # orbax cannot save them; nothing to keep
  raw = [x for x in raw if x.size]
  meta = {"round": int(round_), "totals": {k: int(v) for k, v in totals.items()},
          "wall_time_s": float(wall_time_s), "algorithm": algorithm, "key_impls": impls, "empty": empty}
  mngr.save(int(round_), args=ocp.args.Composite(state=ocp.args.StandardSave(raw),
                                                 meta=ocp.args.JsonSave(meta)))
  mngr.wait_until_finished()


def restore(mngr: ocp.CheckpointManager, abstract_state, mesh=None, algorithm: str = ""):
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
  step = mngr.latest_step()
  if step is None:
    return None
  meta = mngr.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]
  if algorithm and meta.get("algorithm") and meta["algorithm"] != algorithm:
    raise ValueError(f"checkpoint in {mngr.directory} is of {meta['algorithm']!r}, not {algorithm!r}")
  leaves, treedef = jax.tree_util.tree_flatten(abstract_state)
  raw_abstract = jax.eval_shape(
      lambda ls: [jax.random.key_data(x) if _is_key(x) else x for x in ls], leaves)
  multi = mesh is not None and jax.process_count() > 1
  rep = NamedSharding(mesh, P()) if multi else None
  empty = set(meta.get("empty", []))   # zero-size leaves, not stored (save)
  stored_abstract = [a for i, a in enumerate(raw_abstract) if i not in empty]
  target: list[jax.ShapeDtypeStruct] | list[np.ndarray]
  if multi:
    target = [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=rep) for a in stored_abstract]
  else:
    target = [np.zeros(a.shape, a.dtype) for a in stored_abstract]
  try:
    raw = mngr.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(target)))["state"]
  except (ValueError, KeyError, TypeError) as e:
    raise ValueError(f"checkpoint in {mngr.directory} does not match this state: {e}") from None
  impls = meta.get("key_impls", {})
  out = []
  if len(raw) != len(stored_abstract) or any(
      tuple(x.shape) != tuple(a.shape) or x.dtype != a.dtype for x, a in zip(raw, stored_abstract)) or any(
      i >= len(raw_abstract) or raw_abstract[i].size for i in empty):
    raise ValueError(f"checkpoint in {mngr.directory} does not match this state's shapes/dtypes")
  stored = iter(raw)
  for i, a in enumerate(leaves):
    x: Any
    if i in empty:   # rebuilt: an empty array of the state's shape and dtype
      zeros = np.zeros(raw_abstract[i].shape, raw_abstract[i].dtype)
      x = jax.make_array_from_callback(zeros.shape, rep, zeros.__getitem__) if rep else zeros
    else:
      x = next(stored)
    if not multi:
      x = jax.device_put(np.asarray(x))
    if _is_key(a):
      x = jax.random.wrap_key_data(x, impl=impls.get(str(i)))
    out.append(x)
  return jax.tree_util.tree_unflatten(treedef, out), meta
