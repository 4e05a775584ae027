"""Streamed FedZO directions (issue 37 item 2): the eq.-2 estimator (seed 001) drawn block by block.

* ``normal_window`` is the full ``jax.random.normal(key, (num, dim))`` draw, bit for bit, on any
  window of rows or columns (float32, float64; odd sizes; vmapped keys; raw uint32 keys).
* ``direction_block=0`` and the CPU default are today's materialised formula, bit for bit.
* ``direction_block=B >= 1`` is eq. 2 with the same directions (float64: to 1e-12; float32: to
  rounding), NOT bit for bit: XLA picks CPU kernels by array size, so (M, B, ...) blocks round
  differently from (M, b2, ...) (fedsim/estimators/finite_difference.py, module docstring).
* Compiled memory: vmapped over N clients, the streamed estimator and a FedZO round hold less
  temporary memory than one (N, b2, d) array; the materialised ones hold more.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedsim import algorithms
from fedsim.core import rng
from fedsim.estimators import direction_scale, directions, fd_gradient
from fedsim.estimators import finite_difference as fd
from fedsim.tasks.quadratic import make_quadratic_task

SHAPES = [(1, 1), (3, 7), (20, 650), (7, 2001), (5, 33)]


def _reference(f, x, key, b2, mu, law):
  """Today's fd_gradient (before issue 37), written out: all b2 directions at once."""
  d = x.shape[0]
  v = directions(key, b2, d, law, x.dtype)
  with jax.default_matmul_precision("highest"):
    f0 = f(x)
    fp = jax.vmap(lambda vi: f(x + mu * vi))(v)
    return direction_scale(law, d) / (mu * b2) * (v.T @ (fp - f0))


def _bits_equal(a, b):
  a, b = np.asarray(a), np.asarray(b)
  return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("x64", [False, True])
@pytest.mark.parametrize("num, dim", SHAPES)
def test_normal_window_is_the_full_draw_bit_for_bit(num, dim, x64):
  with jax.enable_x64(x64):
    dtype = jnp.float64 if x64 else jnp.float32
    key = jax.random.key(42)
    full = np.asarray(jax.jit(lambda k: jax.random.normal(k, (num, dim), dtype))(key))
    window = jax.jit(fd.normal_window, static_argnums=(1, 4, 5, 6))
    for r in range(num):                                             # every row alone
      assert _bits_equal(window(key, dim, r, 0, 1, dim, dtype), full[r:r + 1])
    rows = max(1, num // 2)                                          # a block of rows at a traced offset
    assert _bits_equal(window(key, dim, num - rows, 0, rows, dim, dtype), full[num - rows:])
    c0, cols = dim // 3, max(1, dim // 2)                            # a block of columns
    cols = min(cols, dim - c0)
    assert _bits_equal(window(key, dim, 0, c0, num, cols, dtype), full[:, c0:c0 + cols])
    # Vmapped over clients' keys, as in a FedZO round.
    keys = jax.random.split(key, 3)
    got = jax.jit(jax.vmap(lambda k: fd.normal_window(k, dim, 0, 0, num, dim, dtype)))(keys)
    assert _bits_equal(got, jax.vmap(lambda k: jax.random.normal(k, (num, dim), dtype))(keys))


def test_normal_window_takes_raw_keys_and_streamable_says_when():
  raw = jax.random.PRNGKey(5)                                        # legacy uint32[2] key
  assert fd.streamable(raw, 4, 9) and fd.streamable(jax.random.key(5), 4, 9)
  assert _bits_equal(fd.normal_window(raw, 9, 1, 0, 2, 9), jax.random.normal(raw, (4, 9))[1:3])
  assert not fd.streamable(jax.random.key(5, impl="rbg"), 4, 9)     # another generator: materialised
  assert not fd.streamable(jax.random.key(5), 2 ** 16, 2 ** 16)      # counters past 32 bits
  assert fd.default_direction_block() == 0                           # the CPU default: materialised


def _problem(d=13, b1=6, dtype=jnp.float32, seed=0):
  r = np.random.default_rng(seed)
  a = jnp.asarray(r.normal(size=(b1, d)) / np.sqrt(d), dtype)
  y = jnp.asarray(r.normal(size=b1), dtype)
  x = jnp.asarray(r.normal(size=d) * 0.3, dtype)
  def f(z):  # a smooth, non-quadratic mini-batch mean
    return jnp.mean(jnp.log1p(jnp.exp(a @ z - y))) + 0.1 * jnp.sum(jnp.sin(z))
  return f, x


@pytest.mark.parametrize("law", fd.LAWS)
def test_materialised_path_and_cpu_default_are_todays_formula_bit_for_bit(law):
  f, x = _problem()
  keys = jax.random.split(jax.random.key(7), 5)
  ref = jax.jit(jax.vmap(lambda k: _reference(f, x, k, 6, 0.05, law)))(keys)
  for block in (0, None):                                            # None: the CPU default
    got = jax.jit(jax.vmap(lambda k, b=block: fd_gradient(f, x, k, 6, 0.05, law, b)))(keys)
    assert _bits_equal(got, ref), (law, block)


@pytest.mark.parametrize("law, b2, block", [(law, b2, block) for law in ("sphere", "gaussian")
                                             for b2, block in [(6, 1), (6, 4), (7, 3), (5, 2)]]
                         + [("orthogonal", 7, 3)])
def test_streamed_is_eq2_with_the_same_directions(law, b2, block):
  """float64: equal to 1e-12 (a wrong, missing or padded direction moves it by O(1 / b2));
  float32: equal to rounding, amplified by d / mu. ``orthogonal`` stays materialised (a QR of
  the whole (b2, d) draw): bit for bit."""
  keys = jax.random.split(jax.random.key(3), 4)
  with jax.enable_x64(True):
    f, x = _problem(dtype=jnp.float64)
    ref = np.asarray(jax.jit(jax.vmap(lambda k: _reference(f, x, k, b2, 0.05, law)))(keys))
    got = np.asarray(jax.jit(jax.vmap(lambda k: fd_gradient(f, x, k, b2, 0.05, law, block)))(keys))
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max())
  f, x = _problem()
  ref = np.asarray(jax.jit(jax.vmap(lambda k: _reference(f, x, k, b2, 0.05, law)))(keys))
  got = np.asarray(jax.jit(jax.vmap(lambda k: fd_gradient(f, x, k, b2, 0.05, law, block)))(keys))
  np.testing.assert_allclose(got, ref, rtol=0, atol=2e-4 * np.abs(ref).max())
  if law == "orthogonal":
    assert _bits_equal(got, ref)


def test_bad_direction_block_and_law():
  f, x = _problem()
  with pytest.raises(ValueError, match="direction_block must be >= 0"):
    fd_gradient(f, x, jax.random.key(0), 4, 0.1, "sphere", -1)
  with pytest.raises(ValueError, match="accepted: sphere, gaussian, orthogonal"):
    fd_gradient(f, x, jax.random.key(0), 4, 0.1, "cauchy", 2)


# ----------------------------------------------------------------------------- compiled memory

N, B2, D, B1 = 64, 16, 2000, 8
ONE_ARRAY = N * B2 * D * 4  # bytes of one (N, b2, d) float32 array: 8.2 MB


def _estimator_temp_bytes(block):
  a, x = jnp.zeros((N, B1, D)), jnp.zeros((N, D))
  keys = jax.random.split(jax.random.key(0), N)
  def one(a, x, k):
    return fd_gradient(lambda z: jnp.mean((a @ z - 1.0) ** 2), x, k, B2, 0.01, "sphere", block)
  return jax.jit(jax.vmap(one)).lower(a, x, keys).compile().memory_analysis().temp_size_in_bytes


def _round_temp_bytes(block):
  task = make_quadratic_task(D, N, 5.0)
  alg = algorithms.build("fedzo", task, fd_directions=B2, local_steps=2, clients_per_round=N, client_block=0,
                         direction_block=block)
  root = jax.random.key(0)
  state = alg.init(*rng.init_keys(root))
  lowered = jax.jit(alg.round).lower(state, rng.round_key(rng.stream(root, "rounds"), 0), task.data)
  return lowered.compile().memory_analysis().temp_size_in_bytes


def test_streamed_estimator_holds_no_n_b2_d_array():
  """Vmapped over N = 64 clients, b2 = 16, d = 2000: the materialised estimator's temporaries
  exceed one (N, b2, d) array (about 4 of them: directions, perturbed points, threefry's
  counters); blocks of 1 or 2 directions stay below it (about 5 arrays of (N, B, d))."""
  assert _estimator_temp_bytes(0) > 2 * ONE_ARRAY
  for block in (1, 2):
    assert _estimator_temp_bytes(block) < ONE_ARRAY, block


def test_fedzo_round_holds_no_n_b2_d_array():
  """One FedZO round (seed 001 Alg. 1) on the quadratic, N = 64 clients in one vmap, b2 = 16, d = 2000."""
  assert _round_temp_bytes(0) > 2 * ONE_ARRAY
  assert _round_temp_bytes(2) < ONE_ARRAY
