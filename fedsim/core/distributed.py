"""Multi-process runs with JAX's own distributed runtime (BUILD.md, "Devices and hosts").

One Python process per host (or per GPU) runs the same program. Each calls
:func:`initialize` before any other JAX use; afterwards ``jax.devices()`` lists
every process's devices, the ``clients`` mesh (``sharding.client_mesh``) spans
them all, ``sharding.shard_task`` builds the task's arrays as global arrays
(each process materialises only its own devices' shards) and the engine's
compiled chunks run as one SPMD program with cross-process collectives (gloo
on CPU, NCCL on GPU, ICI/DCN on TPU). Values that reach the host (ledgers,
metrics) go through :func:`fetch`; only process 0 writes outputs
(:func:`is_main`).

If a process dies, the others do not wait for it forever, even when blocked in
a collective the dead one would have joined: the coordination service (in
process 0) declares a process dead after :data:`HEARTBEAT_TIMEOUT_S` seconds
without a heartbeat, and the survivors abort (SIGABRT: status 134, or -6 from
``subprocess``) with the runtime's message on stderr ("Terminating process
because the JAX distributed service detected fatal errors ... another task
died"). If process 0 itself dies, the others abort at once, with the same
message (measured on localhost CPU: 0.1 s; process 1 killed: about 25 s).
"""

from __future__ import annotations

import os

import jax
import numpy as np

# Seconds without a heartbeat after which a process counts as dead and the others abort
# (jax's default is 100); the environment variable FEDSIM_HEARTBEAT_TIMEOUT_S overrides it.
HEARTBEAT_TIMEOUT_S = 30


def initialize(coordinator_address: str | None, num_processes: int, process_id: int,
               heartbeat_timeout_s: int | None = None) -> bool:
  """Joins the distributed runtime (``jax.distributed.initialize``) when ``num_processes`` > 1.

  Must run before anything touches a JAX backend. On CPU, cross-process
  collectives use gloo (``jax_cpu_collectives_implementation``).

  Args:
    coordinator_address: ``host:port`` of process 0's coordinator service.
    num_processes: P >= 1; 1 is a plain single-process run (nothing happens).
    process_id: this process's index in [0, P).
    heartbeat_timeout_s: seconds without a heartbeat after which a process is
      declared dead and the survivors abort with a message instead of hanging
      (None: ``$FEDSIM_HEARTBEAT_TIMEOUT_S``, else :data:`HEARTBEAT_TIMEOUT_S`).

  Returns:
    True when the runtime was initialised.
  """
  if num_processes <= 1:
    return False
  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  if heartbeat_timeout_s is None:
    heartbeat_timeout_s = int(os.environ.get("FEDSIM_HEARTBEAT_TIMEOUT_S", HEARTBEAT_TIMEOUT_S))
  jax.distributed.initialize(coordinator_address=coordinator_address, num_processes=num_processes,
                             process_id=process_id, heartbeat_timeout_seconds=heartbeat_timeout_s)
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
