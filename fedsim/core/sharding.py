"""Sharding of the client axis over a ``jax.sharding.Mesh`` axis named ``clients``.

Client data (and per-client state) carry a leading axis N. Placing them with
``NamedSharding(mesh, P("clients"))`` lets XLA's SPMD partitioner split the
vmapped client update across devices; the average over clients becomes the
cross-device reduction. The same program runs on 1 device, on 8 fake CPU
devices (``XLA_FLAGS=--xla_force_host_platform_device_count=8``), a GPU or a
TPU slice.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

AXIS = "clients"


def client_mesh(num_devices: int | None = None) -> Mesh:
  """A 1-D mesh over the first ``num_devices`` devices (all by default), axis ``clients``.

  Raises:
    ValueError: more devices asked for than exist.
  """
  devices = jax.devices()
  n = len(devices) if num_devices is None else num_devices
  if not 1 <= n <= len(devices):
    raise ValueError(f"num_devices must be in [1, {len(devices)}]; got {n}")
  return Mesh(np.asarray(devices[:n]), (AXIS,))


def shard_clients(tree, mesh: Mesh, num_clients: int):
  """Places every leaf with leading axis ``num_clients`` sharded along ``clients``.

  Leaves without that leading axis, or when N is not a multiple of the device
  count, are replicated (the result is the same; only the placement differs).
  """
  ndev = mesh.devices.size
  split = NamedSharding(mesh, P(AXIS))
  rep = NamedSharding(mesh, P())

  def place(a):
    a = jax.numpy.asarray(a)
    ok = a.ndim >= 1 and a.shape[0] == num_clients and num_clients % ndev == 0
    return jax.device_put(a, split if ok else rep)

  return jax.tree_util.tree_map(place, tree)


def shard_task(task, mesh: Mesh):
  """A copy of ``task`` whose per-client arrays are sharded over ``mesh`` (the rest replicated)."""
  return dataclasses.replace(task, data=shard_clients(task.data, mesh, task.num_clients))
