"""Sharding of the client axis over a ``jax.sharding.Mesh`` axis named ``clients``.

Client data (and per-client state) carry a leading axis N. Placing them with
``NamedSharding(mesh, P("clients"))`` lets XLA's SPMD partitioner split the
vmapped client update across devices; the average over clients becomes the
cross-device reduction. The same program runs on 1 device, on 8 fake CPU
devices (``XLA_FLAGS=--xla_force_host_platform_device_count=8``), a GPU, a
TPU slice, or a mesh spanning several processes (``jax.distributed``).

Padding. A placed array's sharded axis must be a multiple of the
device count, so when N is not, :func:`shard_task` pads every leaf of
``data["clients"]`` with zero rows (``mask`` False: padded clients hold no
samples) up to the next multiple N_pad, and keeps ``data["sizes"]`` at its real
length N (replicated). ``data["sizes"].shape[0]`` is therefore the static,
self-describing count of real clients, and :func:`unpad` - called by the
engine inside every compiled chunk and evaluation - slices the client leaves
back to N before any algorithm or ``task.evaluate`` sees them. Padded clients
are thus never sampled (ids are drawn in [0, N), ``task.num_clients`` stays N),
never enter a full-participation average or a ``vmap`` over all clients, and
carry zero weight in every objective; XLA keeps the sliced arrays sharded
(it pads and masks the last shard internally), so the client update still
runs distributed.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

if TYPE_CHECKING:
  from jax.sharding import AbstractMesh

AXIS = "clients"


def client_mesh(num_devices: int | None = None) -> Mesh:
  """A 1-D mesh over the first ``num_devices`` devices (all by default), axis ``clients``.

  Under ``jax.distributed`` the devices are the global ones (every process's),
  so the mesh spans all hosts.

  Raises:
    ValueError: more devices asked for than exist.
  """
  devices = jax.devices()
  n = len(devices) if num_devices is None else num_devices
  if not 1 <= n <= len(devices):
    raise ValueError(f"num_devices must be in [1, {len(devices)}]; got {n}")
  return Mesh(np.asarray(devices[:n]), (AXIS,))


def padded_count(num_clients: int, num_devices: int) -> int:
  """N rounded up to a multiple of the device count: ceil(N / D) * D."""
  return -(-num_clients // num_devices) * num_devices


def global_array(a, sharding: NamedSharding) -> jax.Array:
  """Places the host value ``a`` with ``sharding`` as a (possibly multi-process) global array.

  Every process must pass the same value; each one only materialises the
  shards of its own devices (``jax.make_array_from_callback``), so this works
  in one process and under ``jax.distributed`` alike.
  """
  host = np.asarray(a)
  return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])


def shard_clients(tree, mesh: Mesh, num_clients: int):
  """Places every leaf with leading axis ``num_clients`` sharded along ``clients``.

  Leaves without that leading axis, or when N is not a multiple of the device
  count, are replicated (the result is the same; only the placement differs).
  :func:`shard_task` pads instead of replicating.
  """
  ndev = mesh.devices.size
  split = NamedSharding(mesh, P(AXIS))
  rep = NamedSharding(mesh, P())

  def place(a):
    a = np.asarray(a)
    ok = a.ndim >= 1 and a.shape[0] == num_clients and num_clients % ndev == 0
    return global_array(a, split if ok else rep)

  return jax.tree_util.tree_map(place, tree)


def pad_clients(tree, num_rows: int):
  """Pads every leaf's leading axis with zeros (False for bool) up to ``num_rows`` (host numpy)."""
  def pad(a):
    a = np.asarray(a)
    extra = num_rows - a.shape[0]
    if extra < 0:
      raise ValueError(f"cannot pad {a.shape[0]} rows down to {num_rows}")
    return np.concatenate([a, np.zeros((extra,) + a.shape[1:], a.dtype)]) if extra else a
  return jax.tree_util.tree_map(pad, tree)


def shard_task(task, mesh: Mesh):
  """A copy of ``task`` whose client arrays are sharded over ``mesh`` (the rest replicated).

  ``data["clients"]`` leaves are padded to N_pad = :func:`padded_count` (N,
  devices) rows and split along ``clients``; ``data["sizes"]`` keeps length N
  (split if N divides the device count, else replicated); every other leaf is
  replicated. ``task.num_clients`` stays N; ``task.info["padded_clients"]``
  records N_pad when padding happened. Works across processes (each process
  holds its own devices' shards; all must build the same task).
  """
  n, ndev = task.num_clients, mesh.devices.size
  data = task.data
  if not (isinstance(data, dict) and "clients" in data and "sizes" in data):
    return dataclasses.replace(task, data=shard_clients(data, mesh, n))
  n_pad = padded_count(n, ndev)
  split, rep = NamedSharding(mesh, P(AXIS)), NamedSharding(mesh, P())
  out = {}
  for name, sub in data.items():
    if name == "clients":
      out[name] = jax.tree_util.tree_map(lambda a: global_array(a, split), pad_clients(sub, n_pad))
    elif name == "sizes":
      out[name] = global_array(sub, split if n_pad == n else rep)
    else:
      out[name] = jax.tree_util.tree_map(lambda a: global_array(a, rep), sub)
  info = dict(task.info, padded_clients=n_pad) if n_pad != n else task.info
  return dataclasses.replace(task, data=out, info=info)


def unpad(data):
  """``data`` with the ``clients`` leaves cut back to the real N = ``data["sizes"].shape[0]``.

  A no-op (same objects) for unpadded data or data without ``clients``/``sizes``;
  jit-able (the slice is static). Called by the engine inside compiled code.
  """
  if not (isinstance(data, dict) and "clients" in data and "sizes" in data):
    return data
  n = data["sizes"].shape[0]
  leaves = jax.tree_util.tree_leaves(data["clients"])
  if all(leaf.shape[0] == n for leaf in leaves):
    return data
  return dict(data, clients=jax.tree_util.tree_map(lambda a: a[:n], data["clients"]))


def mesh_of(tree) -> Mesh | AbstractMesh | None:
  """The mesh of the first leaf placed with a ``NamedSharding``, or None."""
  for leaf in jax.tree_util.tree_leaves(tree):
    s = getattr(leaf, "sharding", None)
    if isinstance(s, NamedSharding):
      return s.mesh
  return None


def replicated_on(tree):
  """A function ``f(t)`` that constrains the pytree ``t`` (inside ``jit``) to be replicated over the
  mesh of ``tree`` (:func:`mesh_of`): every device then computes the whole of what follows from it,
  with the program a single device runs. The identity when ``tree`` is on no mesh or a 1-device one.

  For an algorithm whose per-client arithmetic must not depend on the placement (FZooS):
  splitting a ``vmap`` over the devices changes the batch each device computes, and with it the
  order XLA's CPU kernels (GEMM / GEMV, reductions) accumulate in, at the last bit of a result.
  """
  mesh = mesh_of(tree)
  if mesh is None or mesh.devices.size == 1:
    return lambda t: t
  rep = NamedSharding(mesh, P())
  return lambda t: jax.tree_util.tree_map(lambda a: jax.lax.with_sharding_constraint(a, rep), t)
