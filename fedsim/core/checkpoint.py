"""Checkpoints of a running simulation with orbax-checkpoint (BUILD.md, "Checkpoints"; asynchronous).

A checkpoint is one orbax step (the step number is the round r reached) with a
single item, one PyTree saved by orbax's ``StandardCheckpointHandler``:

* ``state``: the algorithm state's leaves as a flat list of host (NumPy)
  arrays, typed PRNG keys stored as their raw ``jax.random.key_data`` and
  re-wrapped with ``jax.random.wrap_key_data`` on restore; zero-size leaves
  (e.g. FZooS's (N, 0) fit cache with ``rff_cache = 0``), which orbax refuses
  to save, are left out and rebuilt empty from the state's structure on
  restore (their indices are in the meta's ``empty``);
* ``meta``: one JSON document as a uint8 array: ``round``, the cumulative
  ledgers ``totals`` (exact Python integers, which may exceed int32),
  ``wall_time_s`` elapsed so far, the algorithm name, the key
  implementations and ``empty``.

One ``CheckpointManager`` serves a whole run (:func:`manager`;
:func:`fedsim.core.engine.simulate` opens it once and closes it in its
``finally``). Saves are asynchronous (``enable_async_checkpointing``):
:func:`save` copies the state to host memory (so the next chunk may donate its
device buffers), hands it to orbax and returns while orbax's background threads
write it; orbax makes a save wait for the previous one, and closing the manager
(:func:`close`) waits for the last and raises a write error. Orbax writes each
step to a ``<r>.orbax-checkpoint-tmp-*`` folder and renames it when complete,
so a kill during a save leaves the previous checkpoints intact; the temporary
folder a kill leaves is removed when the next writing manager opens the folder
(``cleanup_tmp_directories``), so a resume prints no warning. Only the last
``max_to_keep`` (2) are kept, the older ones deleted by orbax in the background
(``enable_background_delete``). Orbax's optional extras are off: no root
metadata file (``save_root_metadata``), no write metrics
(``prevent_write_metrics``).

When to save: the engine saves at chunk ends only (the state exists on the host
nowhere else). With a round cadence (``checkpoint_every = K``) the engine picks
the first chunk end at or after each multiple of K, so the saved rounds depend
only on K and ``eval_every``. With the time cadence (``checkpoint_every = -1``)
the manager carries a save decision policy,
:class:`SinceStartPolicy` (orbax's ``ContinuousCheckpointingPolicy`` with
``minimum_interval_secs``, its interval counted from the run's start too), and
the engine asks it at every chunk end (:func:`due`, about 30 microseconds): a
save is due when the interval has passed since the start and since the newest
save began, and none is due while a save is still being written. So saves cost
at most (one save's cost) / interval of the run, and a kill loses at most about
the interval plus one chunk's time (plus the write of a save in flight).

Orbax's fixed cost: about 20-40 ms of CPU per save on this machine's 2 cores,
whatever the state's size (a new asyncio loop and about nine threads started
per save, the temporary folder, ``_CHECKPOINT_METADATA``, the PyTree's
``_METADATA`` and OCDBT manifest, the rename, the deletion of the oldest step).
Asynchronous saves take the writing off the loop, not the thread starts and
bookkeeping; BUILD.md's "Checkpoint cost" has the measured ratios.

Restoring needs the state's structure, which :func:`restore` gets from
``jax.eval_shape(algorithm.init, *rng.init_keys(root))`` without running
``init``; restored arrays are bit-identical to the saved ones, so a resumed run
continues bitwise-identically (tests/core/test_checkpoint.py). Under
``jax.distributed`` every process calls :func:`save` (leaves that are not
fully addressable are gathered; orbax coordinates the processes and process 0
writes the host arrays) and :func:`restore` (the folder must be shared);
restored leaves are replicated global arrays. Checkpoints written by earlier
fedsim versions (two items, ``state`` and ``meta``, saved synchronously) are still
restored.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import json
import os
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

MAX_TO_KEEP = 2
# The time cadence's default interval (``checkpoint_every = -1``), seconds; ``fedsim.ExperimentConfig``'s
# ``checkpoint_interval_s`` default (tests/core/test_checkpoint_time.py checks they agree). BUILD.md,
# "Checkpoints by time", has the measurements it comes from.
DEFAULT_INTERVAL_S = 120.0


def _is_key(x) -> bool:
  return hasattr(x, "dtype") and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def _host(x) -> np.ndarray:
  """A host copy of leaf ``x`` (all of it: gathered when other processes hold parts)."""
  if isinstance(x, jax.Array) and not x.is_fully_addressable:
    if x.is_fully_replicated:
      return np.array(x.addressable_data(0))
    from jax.experimental import multihost_utils
    return np.array(multihost_utils.process_allgather(x, tiled=True))
  return np.array(x)


@dataclasses.dataclass(frozen=True)
class _Anchor:
  """A :class:`orbax.checkpoint.checkpoint_managers.PolicyCheckpointInfo` for the time a run started."""
  step: int
  time: datetime.datetime
  metrics: dict | None = None


@dataclasses.dataclass(kw_only=True)
class SinceStartPolicy(ocp.checkpoint_managers.ContinuousCheckpointingPolicy):
  """Orbax's ``ContinuousCheckpointingPolicy``, its interval also counted from ``start``.

  Orbax's policy saves at the first step it is asked about when the folder holds
  no checkpoint, and at the first step after a resume (the newest checkpoint is
  from an earlier process): a save right after the start, which a run shorter than
  the interval pays for nothing. Here the interval counts from the later of
  ``start`` (when the run opened its manager) and the newest save; the rest is
  orbax's: no save while one is in flight, the decision taken on the primary
  process and broadcast to all.

  Attributes:
    minimum_interval_secs: the interval, seconds (> 0; a float is accepted).
    start: timezone-aware (UTC), when the run started.
  """
  start: datetime.datetime

  def should_save(self, step, previous_steps: Sequence, *, context) -> bool:
    anchor = self.start
    last = previous_steps[-1].time if len(previous_steps) else None
    if last is not None and last.tzinfo is not None and last > anchor:  # orbax may list naive datetime.min
      anchor = last
    return super().should_save(step, [_Anchor(-1, anchor)], context=context)


def manager(directory: str, max_to_keep: int = MAX_TO_KEEP,
            interval_s: float | None = None) -> ocp.CheckpointManager:
  """An orbax ``CheckpointManager`` on ``directory`` keeping the last ``max_to_keep`` checkpoints.

  It creates the folder if missing and removes the temporary folders of saves a
  kill interrupted (``cleanup_tmp_directories``). One per run: it is a writer.
  Arrays go into orbax's default OCDBT store: ``use_ocdbt=False`` costs about a
  quarter less CPU per save, but orbax 0.12.8 then logs a warning at every save
  (its finalize merges per-process OCDBT stores unconditionally).

  Args:
    directory: the checkpoint folder.
    max_to_keep: how many of the newest checkpoints are kept.
    interval_s: None: the caller decides when to save (round cadence). A number
      > 0 (seconds): :func:`due` says whether a save is due, by
      :class:`SinceStartPolicy` (orbax's ``ContinuousCheckpointingPolicy``
      with ``minimum_interval_secs = interval_s``, counted from now and from the
      newest save; none while a save is in flight).
  """
  policy = None
  if interval_s is not None:
    if not interval_s > 0:
      raise ValueError(f"interval_s must be > 0; got {interval_s}")
    policy = SinceStartPolicy(minimum_interval_secs=interval_s,  # orbax types it int; it is a timedelta's seconds
                              start=datetime.datetime.now(tz=datetime.timezone.utc))
  opts = ocp.CheckpointManagerOptions(
      max_to_keep=max_to_keep, create=True, cleanup_tmp_directories=True, enable_async_checkpointing=True,
      enable_background_delete=True, save_root_metadata=False, prevent_write_metrics=True,
      save_decision_policy=policy)
  return ocp.CheckpointManager(os.path.abspath(directory), options=opts,
                               item_handlers=ocp.StandardCheckpointHandler())


def due(mngr: ocp.CheckpointManager, round_: int) -> bool:
  """Whether a save after round ``round_`` is due by ``mngr``'s save decision policy (:func:`manager`'s
  ``interval_s``); call it on every process at the same rounds (orbax broadcasts process 0's decision)."""
  return mngr.should_save(int(round_))


def close(mngr: ocp.CheckpointManager) -> None:
  """Waits for the save in flight (raising its error, e.g. a full disk), then closes ``mngr``."""
  try:
    mngr.wait_until_finished()
  finally:
    mngr.close()


def latest_round(directory: str | None) -> int | None:
  """The round of the newest complete checkpoint under ``directory``, or None (no directory / no
  checkpoint; a save in flight or killed is not one). Reads only (orbax's listing of finalized
  steps, no manager)."""
  if not directory or not os.path.isdir(directory):
    return None
  meta = ocp.path.step.latest_step_metadata(directory, ocp.path.step.standard_name_format())
  return None if meta is None else int(meta.step)


def save(mngr: ocp.CheckpointManager, state, round_: int, totals: dict, wall_time_s: float,
         algorithm: str = "", force: bool = False) -> None:
  """Saves ``state`` reached after ``round_`` rounds with cumulative ledgers ``totals``, asynchronously.

  Copies the state to host memory and returns while orbax writes it
  (:func:`close` waits; a write error is raised there or by the next save).

  Args:
    mngr: from :func:`manager`.
    state: the algorithm state pytree (jax arrays, typed keys allowed).
    round_: r, the orbax step.
    totals: {name: int} cumulative ledgers.
    wall_time_s: seconds elapsed in the run so far (a resumed run continues the clock).
    algorithm: the algorithm's name (checked on restore).
    force: save whatever the manager's save decision policy says (a run stopped by a signal);
      otherwise a step the policy does not want (or at or before the newest) is skipped.
  """
  leaves = jax.tree_util.tree_leaves(state)
  impls = {str(i): str(jax.random.key_impl(x)) for i, x in enumerate(leaves) if _is_key(x)}
  raw = [_host(jax.random.key_data(x) if _is_key(x) else x) for x in leaves]
  empty = [i for i, x in enumerate(raw) if x.size == 0]   # orbax cannot save them; nothing to keep
  raw = [x for x in raw if x.size]
  meta = {"round": int(round_), "totals": {k: int(v) for k, v in totals.items()},
          "wall_time_s": float(wall_time_s), "algorithm": algorithm, "key_impls": impls, "empty": empty}
  blob = np.frombuffer(json.dumps(meta).encode(), np.uint8)
  mngr.save(int(round_), args=ocp.args.StandardSave({"state": raw, "meta": blob}), force=force)


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
  leaves, treedef = jax.tree_util.tree_flatten(abstract_state)
  raw_abstract = jax.eval_shape(
      lambda ls: [jax.random.key_data(x) if _is_key(x) else x for x in ls], leaves)
  try:
    if (mngr.directory / str(step) / "state").is_dir():  # written before issue 36: items "state" and "meta"
      raw, meta = _restore_two_items(mngr.directory / str(step), raw_abstract)
    else:
      item = mngr.restore(step, args=ocp.args.StandardRestore())
      raw, meta = item["state"], json.loads(np.asarray(item["meta"]).tobytes())
  except (ValueError, KeyError, TypeError) as e:
    raise ValueError(f"checkpoint in {mngr.directory} is not readable: {e}") from None
  if algorithm and meta.get("algorithm") and meta["algorithm"] != algorithm:
    raise ValueError(f"checkpoint in {mngr.directory} is of {meta['algorithm']!r}, not {algorithm!r}")
  empty = set(meta.get("empty", []))   # zero-size leaves, not stored (save)
  stored_abstract = [a for i, a in enumerate(raw_abstract) if i not in empty]
  if len(raw) != len(stored_abstract) or any(
      tuple(x.shape) != tuple(a.shape) or x.dtype != a.dtype for x, a in zip(raw, stored_abstract)) or any(
      i >= len(raw_abstract) or raw_abstract[i].size for i in empty):
    raise ValueError(f"checkpoint in {mngr.directory} does not match this state's shapes/dtypes")
  multi = mesh is not None and jax.process_count() > 1
  impls = meta.get("key_impls", {})
  stored = iter(raw)
  out = []
  for i, a in enumerate(leaves):
    # A zero-size leaf is rebuilt empty, of the state's shape and dtype.
    x: Any = np.zeros(raw_abstract[i].shape, raw_abstract[i].dtype) if i in empty else np.asarray(next(stored))
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


def _restore_two_items(path, raw_abstract) -> tuple[list, dict]:
  """(leaves as host arrays, meta) of a step folder written by an earlier fedsim version: a Composite of the
  leaves (``state``, StandardSave) and ``meta`` (JSON)."""
  target = [np.zeros(a.shape, a.dtype) for a in raw_abstract]
  with ocp.Checkpointer(ocp.CompositeCheckpointHandler()) as c:
    item = c.restore(path, args=ocp.args.Composite(state=ocp.args.StandardRestore(target),
                                                   meta=ocp.args.JsonRestore()))
  return [np.asarray(x) for x in item["state"]], item["meta"]
