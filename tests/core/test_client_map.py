"""Blocked client maps compute what one vmap computes."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedsim import algorithms
from fedsim.core import simulate
from fedsim.core.client_map import map_clients


@pytest.mark.parametrize("block", [0, 1, 3, 4, 7, 10, 50])
def test_map_clients_equals_vmap(block):
  x = jnp.arange(10 * 3, dtype=jnp.float32).reshape(10, 3)
  keys = jax.random.split(jax.random.key(0), 10)
  w = jnp.asarray([1.0, -2.0, 0.5])
  def fn(w, xi, k):
    return (w * xi + jax.random.normal(k, (3,)), jnp.sum(xi))
  want = jax.vmap(fn, (None, 0, 0))(w, x, keys)
  got = map_clients(fn, (None, 0, 0), w, x, keys, client_block=block)
  for a, b in zip(got, want):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_blocked_round_matches_unblocked(digits10):
  runs = []
  for block in (0, 3):
    alg = algorithms.build("fedzo", digits10, lr=0.01, local_steps=2, clients_per_round=8,
                           client_block=block)
    state, recs = simulate(alg, digits10, 3, 3, jax.random.key(2))
    runs.append((np.asarray(state.x), recs[-1]))
  np.testing.assert_allclose(runs[1][0], runs[0][0], rtol=1e-5, atol=1e-6)
  assert runs[1][1]["queries"] == runs[0][1]["queries"]


@pytest.mark.parametrize("m, block", [(10, 3), (10, 4), (7, 2), (5, 1), (6, 6), (9, 0)])
def test_map_clients_equals_per_client_loop(m, block):
  # Output row i is fn(client i's arguments, shared arguments), for padded (M mod B != 0)
  # and exact blocks; integer arithmetic, so the reference is exact. Pytree arguments and
  # outputs; the shared argument (in_axes None) is seen whole by every client.
  rng = np.random.default_rng(m * 10 + block)
  xs = {"a": rng.integers(-50, 50, (m, 3)).astype(np.int32),
        "b": rng.integers(0, 9, (m,)).astype(np.int32)}
  shared = rng.integers(-5, 5, (3,)).astype(np.int32)
  ids = np.arange(m, dtype=np.int32)

  def fn(s, x, i):
    return {"dot": jnp.sum(s * x["a"]) + 1000 * i, "row": x["a"] * x["b"] + s}

  got = jax.jit(lambda s, x, i: map_clients(fn, (None, 0, 0), s, x, i, client_block=block))(
      shared, xs, ids)
  for i in range(m):
    assert int(got["dot"][i]) == int(shared @ xs["a"][i]) + 1000 * i
    np.testing.assert_array_equal(np.asarray(got["row"][i]), xs["a"][i] * xs["b"][i] + shared)
  assert got["dot"].shape == (m,) and got["row"].shape == (m, 3)
