"""Multi-process runs with JAX's own distributed runtime (issue 8, "Devices and hosts").

One Python process per host (or per GPU) runs the same program. Each calls
:func:`initialize` before any other JAX use; afterwards ``jax.devices()`` lists
every process's devices, the ``clients`` mesh (``sharding.client_mesh``) spans
them all, ``sharding.shard_task`` builds the task's arrays as global arrays
(each process materialises only its own devices' shards) and the engine's
compiled chunks run as one SPMD program with cross-process collectives (gloo
on CPU, NCCL on GPU, ICI/DCN on TPU). Values that reach the host (ledgers,
metrics) go through :func:`fetch`; only process 0 writes outputs
(:func:`is_main`).
"""

from __future__ import annotations

import jax
import numpy as np


def initialize(coordinator_address: str | None, num_processes: int, process_id: int) -> bool:
  """Joins the distributed runtime (``jax.distributed.initialize``) when ``num_processes`` > 1.

  Must run before anything touches a JAX backend. On CPU, cross-process
  collectives use gloo (``jax_cpu_collectives_implementation``).

  Args:
    coordinator_address: ``host:port`` of process 0's coordinator service.
    num_processes: P >= 1; 1 is a plain single-process run (nothing happens).
    process_id: this process's index in [0, P).

  Returns:
    True when the runtime was initialised.
  """
  if num_processes <= 1:
    return False
  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  jax.distributed.initialize(coordinator_address=coordinator_address, num_processes=num_processes,
                             process_id=process_id)
  return True


def is_main() -> bool:
  """True in process 0 (the one that writes outputs), and in single-process runs."""
  return jax.process_index() == 0


def fetch(tree):
  """Host (numpy) values of a pytree of jax arrays, also when they span several processes.

  Fully replicated arrays are read from a local copy; others are gathered
  (``multihost_utils.process_allgather``, tiled), which every process must call.
  In one process this is ``jax.device_get``.
  """
  if jax.process_count() == 1:
    return jax.device_get(tree)
  from jax.experimental import multihost_utils

  def one(x):
    if not isinstance(x, jax.Array) or x.is_fully_replicated or x.is_fully_addressable:
      return np.asarray(x)
    return np.asarray(multihost_utils.process_allgather(x, tiled=True))
  return jax.tree_util.tree_map(one, tree)
