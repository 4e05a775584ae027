"""Order-fixed (pairwise) sums over the client axis.

A plain ``jnp.sum`` over a sharded axis adds per-device partial sums, so its
rounding depends on the device count; sequential float32 accumulation of
thousands of terms also loses ~1e-5 relative. ``pairwise_sum`` adds
neighbours level by level (x[0::2] + x[1::2]) with elementwise operations only,
so the result is the same, bit for bit, however the axis is sharded, and its
error grows as log2(n) * eps instead of n * eps.
"""

import jax.numpy as jnp


def pairwise_sum(x, axis: int = 0):
  """Sum of ``x`` over ``axis`` in a fixed binary-tree order.

  Args:
    x: array of any float dtype and shape (..., n, ...).
    axis: the reduced axis.

  Returns:
    ``x`` summed over ``axis`` (that axis removed), same dtype.
  """
  x = jnp.moveaxis(x, axis, 0)
  n = x.shape[0]
  if n == 0:
    return jnp.zeros(x.shape[1:], x.dtype)
  size = 1 << max(n - 1, 0).bit_length()
  if size != n:  # zero padding adds exact zeros
    x = jnp.concatenate([x, jnp.zeros((size - n,) + x.shape[1:], x.dtype)])
  while x.shape[0] > 1:
    x = x[0::2] + x[1::2]
  return x[0]
