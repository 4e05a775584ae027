"""The CNN's two implementations (fedsim/models/cnn.py) compute the same function."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedsim.models.cnn import CNN, PatchConv, max_pool_2x2

GEMM, XLA = CNN(10), CNN(10, impl="xla")


def _random_params(x, clients, seed=0):
  """(clients, ...) random parameters of the CNN on inputs like ``x``: N(0, 0.1^2) biases
  and weights (numpy's generator: no threefry compilation in a test)."""
  rng = np.random.default_rng(seed)
  shapes = jax.eval_shape(GEMM.init, jax.random.key(0), x)
  return jax.tree.map(lambda a: jnp.asarray(0.1 * rng.standard_normal((clients,) + a.shape), jnp.float32), shapes)


def test_same_parameters():
  # Same names, shapes and initial values (the paper's d: tests/tasks/test_hiso_tasks.py).
  pg, px = jax.jit(lambda k, x: (GEMM.init(k, x), XLA.init(k, x)))(jax.random.key(1), jnp.zeros((1, 8, 8)))
  assert jax.tree.structure(pg) == jax.tree.structure(px)
  for a, b in zip(jax.tree.leaves(pg), jax.tree.leaves(px)):
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("shape", [(5, 4, 8, 8), (3, 4, 7, 9, 3)])
def test_logits_and_gradients_agree_per_client(shape):
  # The engine's case: a leading client axis, each client its own filters (vmap).
  # (7, 9) with 3 channels: odd sizes exercise the floor pooling, C_in > 1 the
  # (row, column, channel) order of the patches against the kernel.
  x = jnp.asarray(np.random.default_rng(1).uniform(size=shape), jnp.float32)
  y = jnp.arange(shape[1]) % 10
  ps = _random_params(x[0], shape[0])

  def logits_and_grad(m):
    def one(q, xi):
      def loss(q):
        return jnp.mean(-jnp.take_along_axis(jax.nn.log_softmax(m.apply(q, xi)), y[:, None], 1))

      return m.apply(q, xi), jax.grad(loss)(q)
    return jax.jit(jax.vmap(one))(ps, x)

  (lg, gg), (lx, gx) = logits_and_grad(GEMM), logits_and_grad(XLA)
  np.testing.assert_allclose(lg, lx, rtol=1e-5, atol=1e-5)
  for a, b in zip(jax.tree.leaves(gg), jax.tree.leaves(gx)):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_patch_conv_is_same_convolution():
  x = jnp.asarray(np.random.default_rng(0).standard_normal((2, 6, 5, 3)), jnp.float32)
  pc = PatchConv(4, 3)
  p = jax.tree.map(lambda a: jnp.asarray(np.random.default_rng(1).standard_normal(a.shape), jnp.float32),
                   jax.eval_shape(pc.init, jax.random.key(1), x))
  ref = nn.Conv(4, (3, 3), padding="SAME").apply(p, x)
  np.testing.assert_allclose(jax.jit(pc.apply)(p, x), ref, rtol=1e-5, atol=1e-6)
  with pytest.raises(ValueError, match="odd kernel_size"):
    jax.eval_shape(PatchConv(4, 2).init, jax.random.key(1), x)


def test_max_pool_equals_flax_with_floor():
  x = jnp.asarray(np.random.default_rng(0).standard_normal((2, 7, 6, 3)), jnp.float32)
  np.testing.assert_array_equal(max_pool_2x2(x), nn.max_pool(x, (2, 2), strides=(2, 2)))


def test_unknown_impl_names_the_accepted_values():
  with pytest.raises(ValueError, match="accepted: gemm, xla"):
    jax.eval_shape(CNN(10, impl="cudnn").init, jax.random.key(0), jnp.zeros((1, 8, 8)))
