"""Running a per-client function over the client axis: ``vmap``, or ``vmap`` over
blocks of clients scanned one after another.

One ``vmap`` over all M clients materialises every client's intermediates at
once (FedZO: (M, b2, d) directions and (M, b2, b1, C) logits per step), which
stops fitting in cache (CPU) or memory (accelerators) at large M. ``client_block``
= B runs ceil(M / B) blocks of B clients in a ``lax.map``; the blocks are strided
(block j holds clients j, j + M/B, ...), so when the client axis is sharded
over devices every block spans all devices evenly. Each client's computation
and key are unchanged, so results match the single ``vmap`` up to XLA's
floating-point fusion choices.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

# Measured on 2 CPU cores (digits softmax, N = 1000, H = 5): FedZO 0.85 -> 0.50 s/round
# with blocks of 128-256 clients; FedAvg at N = 10,000 0.32 -> 0.26 s/round. On
# accelerators one wide vmap keeps the device busy, so no blocking by default.
CPU_CLIENT_BLOCK = 256


def default_client_block() -> int:
  """256 clients per block on CPU, 0 (one vmap) on GPU/TPU."""
  return CPU_CLIENT_BLOCK if jax.default_backend() == "cpu" else 0


def map_clients(fn, in_axes, *args, client_block: int | None = None):
  """``jax.vmap(fn, in_axes)(*args)``, computed in blocks of ``client_block`` clients.

  Args:
    fn: the per-client function.
    in_axes: as for ``jax.vmap``: 0 for arguments with a leading client axis M,
      None for shared ones (a tuple, one entry per argument).
    *args: the arguments.
    client_block: B; 0 (or B >= M) is one ``vmap`` over all M clients; None
      is :func:`default_client_block`.

  Returns:
    The stacked outputs, leading axis M.
  """
  mapped = [a for a, ax in zip(args, in_axes) if ax == 0]
  m = jax.tree_util.tree_leaves(mapped)[0].shape[0]
  if client_block is None:
    client_block = default_client_block()
  if client_block <= 0 or client_block >= m:
    return jax.vmap(fn, in_axes)(*args)
  nb = math.ceil(m / client_block)
  pad = nb * client_block - m

  def to_blocks(a):  # (M, ...) -> (nb, B, ...), strided: block j = clients j, j + nb, ...
    if pad:  # repeat the last client; its extra results are dropped
      a = jnp.concatenate([a, jnp.repeat(a[-1:], pad, axis=0)])
    return a.reshape((client_block, nb) + a.shape[1:]).swapaxes(0, 1)

  def from_blocks(a):
    return a.swapaxes(0, 1).reshape((nb * client_block,) + a.shape[2:])[:m]

  blocked = [jax.tree_util.tree_map(to_blocks, a) if ax == 0 else None for a, ax in zip(args, in_axes)]

  def run_block(block_args):
    full = [b if ax == 0 else a for a, b, ax in zip(args, block_args, in_axes)]
    return jax.vmap(fn, in_axes)(*full)

  out = jax.lax.map(run_block, blocked)
  return jax.tree_util.tree_map(from_blocks, out)
