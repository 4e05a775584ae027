"""fedsim.core.reduce.pairwise_sum against NumPy: the documented binary-tree order
(x[0::2] + x[1::2] level by level, zero-padded to a power of two), float64 sums,
weighted client sums with padded clients."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedsim.core.reduce import pairwise_sum


def ref_tree_sum(x):
  """The tree order in NumPy float32: pad axis 0 with zeros to 2^ceil(log2 n), then add
  neighbours (0+1, 2+3, ...) level by level."""
  x = np.asarray(x, np.float32)
  n = x.shape[0]
  size = 1
  while size < n:
    size *= 2
  x = np.concatenate([x, np.zeros((size - n,) + x.shape[1:], np.float32)])
  while x.shape[0] > 1:
    x = (x[0::2] + x[1::2]).astype(np.float32)
  return x[0]


def _spread(rng, shape):
  """float32 values over six decades, so that the summation order changes the rounding."""
  return (rng.normal(size=shape) * 10.0 ** rng.uniform(-3, 3, size=shape)).astype(np.float32)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 7, 8, 9, 13, 16, 17])
def test_bitwise_equal_to_numpy_tree(n):
  rng = np.random.default_rng(n)
  x = _spread(rng, (n, 4, 3))
  for axis in (0, 1, 2, -1):  # the reduced length is n, 4 or 3
    got = np.asarray(jax.jit(pairwise_sum, static_argnums=1)(jnp.asarray(x), axis))
    want = ref_tree_sum(np.moveaxis(x, axis, 0))
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    # ... and within the pairwise error bound of the float64 sum.
    exact = np.moveaxis(x, axis, 0).astype(np.float64).sum(0)
    scale = np.abs(np.moveaxis(x, axis, 0)).astype(np.float64).sum(0)
    bound = (np.ceil(np.log2(max(x.shape[axis], 2))) + 1) * np.finfo(np.float32).eps * scale
    assert np.all(np.abs(got - exact) <= bound)


def test_order_matters_for_these_values():
  # The bitwise test has power: on such data, sequential float32 accumulation and the
  # halves order (x[:n/2] + x[n/2:]) give different bits than the neighbour tree.
  rng = np.random.default_rng(0)
  differs_seq = differs_halves = 0
  for _ in range(50):
    x = _spread(rng, (8, 16))
    tree = ref_tree_sum(x)
    seq = np.zeros(16, np.float32)
    for row in x:
      seq = (seq + row).astype(np.float32)
    h = x
    while h.shape[0] > 1:
      h = (h[: h.shape[0] // 2] + h[h.shape[0] // 2:]).astype(np.float32)
    differs_seq += np.any(seq != tree)
    differs_halves += np.any(h[0] != tree)
  assert differs_seq > 10 and differs_halves > 10


def test_weighted_client_sum_with_padding():
  # sum_i w_i x_i over 5 real clients; 3 padded clients have weight 0 (and garbage x):
  # equal to the float64 NumPy weighted sum, and bit-identical to the sum over the real
  # clients alone (zero rows add exact zeros).
  rng = np.random.default_rng(1)
  x = _spread(rng, (8, 4))
  x[5:] = 1e30
  w = np.array([0.1, 0.3, 0.2, 0.25, 0.15, 0, 0, 0], np.float32)
  got = np.asarray(pairwise_sum(jnp.asarray(w[:, None] * np.where(w[:, None] > 0, x, 0))))
  want = (w[:5, None].astype(np.float64) * x[:5].astype(np.float64)).sum(0)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6 * np.abs(x[:5]).max())
  real_only = np.asarray(pairwise_sum(jnp.asarray(w[:5, None] * x[:5])))
  np.testing.assert_array_equal(got, real_only)
  np.testing.assert_array_equal(real_only, ref_tree_sum(w[:5, None] * x[:5]))


def test_trailing_zero_padding_is_exact():
  rng = np.random.default_rng(2)
  x = _spread(rng, (5, 3))
  base = np.asarray(pairwise_sum(jnp.asarray(x)))
  for pad in (1, 3, 11, 27):
    padded = np.concatenate([x, np.zeros((pad, 3), np.float32)])
    np.testing.assert_array_equal(np.asarray(pairwise_sum(jnp.asarray(padded))), base)


def test_empty_axis_and_dtype():
  out = pairwise_sum(jnp.zeros((0, 3, 2), jnp.float32))
  assert out.shape == (3, 2) and out.dtype == jnp.float32 and not np.any(np.asarray(out))
  out = pairwise_sum(jnp.zeros((4, 0), jnp.float32), axis=1)
  assert out.shape == (4,) and not np.any(np.asarray(out))
  assert pairwise_sum(jnp.zeros((0, 2), jnp.bfloat16)).dtype == jnp.bfloat16
  xb = jnp.asarray([1.0, 2.0, 3.0], jnp.bfloat16)
  assert pairwise_sum(xb).dtype == jnp.bfloat16 and float(pairwise_sum(xb)) == 6.0


def test_many_terms_accuracy():
  # 100,003 copies of 0.1f: pairwise error <= ~log2(n) eps relative; a float32 running sum of
  # this many terms is off by ~1e-3 relative.
  n = 100_003
  v = np.float32(0.1)
  got = float(jax.jit(pairwise_sum)(jnp.full((n,), v)))
  exact = n * float(v)
  assert abs(got - exact) / exact < 18 * np.finfo(np.float32).eps
