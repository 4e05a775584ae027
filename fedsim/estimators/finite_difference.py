"""Two-point finite-difference (zeroth-order) gradient estimators.

The mini-batch estimator of FedZO (Fang et al. 2022, eq. 2):

    e = 1/(b1 b2) sum_m sum_n (d v_n / mu) (F(x + mu v_n, xi_m) - F(x, xi_m)),

with v_n i.i.d. uniform on the unit sphere S^{d-1}. The caller passes ``f``, the
mini-batch mean (1/b1) sum_m F(., xi_m), so the same batch serves x and every
x + mu v_n (common random numbers) and F(x, .) is computed once, not b2 times.

Direction laws (``law``):

* ``sphere``: v ~ U(S^{d-1}), scale d (FedZO, Fang et al. 2022, eq. 2). Unbiased for the
  ball-smoothed gradient; exactly unbiased for quadratics.
* ``gaussian``: u ~ N(0, I_d), scale 1 (Gaussian smoothing, Nesterov & Spokoiny).
* ``orthogonal``: Gaussian directions orthonormalised (QR), scale d: each column
  is marginally uniform on the sphere, so the estimate is unbiased like
  ``sphere`` and the b2 directions never repeat a subspace. The FZooS paper's
  baselines (Shu et al. 2023, §2.2 of specs/fzoos.md) use these directions; their code
  divides by Q only (scale 1), which Adam's scale invariance hides.

Materialised or streamed directions (``fd_gradient``'s ``direction_block``): the
materialised path draws the b2 directions as one (b2, d) array and evaluates f
at all b2 points at once, so under a vmap over M clients (M, b2, d) directions
and perturbed points exist. The streamed path draws blocks of B directions
where they are used (:func:`normal_window`: the same numbers as the (b2, d)
draw, bit for bit), evaluates f on the block and accumulates v^T (f(x + mu v) -
f(x)) over blocks in a ``lax.scan``, so only (M, B, d) exist. Same key, same
directions, same formula; the result equals the materialised one up to
floating-point rounding, not bit for bit: XLA picks its CPU kernels by array
size (YNNPACK fusions from 4096 elements, tree-rewritten reductions below), so
the row norms, f's matmuls and reductions and the final sum over directions of
a (M, B, ...) block round differently from those of (M, b2, ...), and f's
1-ulp differences are amplified by d / mu. Measured (max |dx| / max |x|
after 2 FedZO rounds, B = 1 or 4): digits softmax main job 2.9e-3, MNIST softmax
(Figs. 4-5) 3-4e-3, attack_cw 4-6e-4, logistic_soft 7e-6; benchmark softmax at
N = 1000: 5e-4, where client_block 100 instead of 256 already changes x by 6e-4.
Hence the default: materialised on CPU (today's results, bit for bit; CPU client
blocks, fedsim.core.client_map, already bound the directions to (256, b2, d)),
streamed on accelerators, where one vmap over all clients would hold (M, b2, d).
``orthogonal`` (a QR of the whole draw) is always materialised, per client.
"""

import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax.extend import random as jex_random

LAWS = ("sphere", "gaussian", "orthogonal")
# Directions per block of fd_gradient's streamed path off CPU: under a vmap over M clients
# only (M, DIRECTION_BLOCK, d) directions exist at once instead of (M, b2, d).
DIRECTION_BLOCK = 4


def default_direction_block() -> int:
  """0 (materialised: today's results, bit for bit) on CPU, :data:`DIRECTION_BLOCK` on GPU/TPU."""
  return 0 if jax.default_backend() == "cpu" else DIRECTION_BLOCK


def directions(key: jax.Array, num: int, dim: int, law: str = "sphere",
               dtype=jnp.float32) -> jax.Array:
  """Draws ``num`` perturbation directions.

  Args:
    key: PRNG key.
    num: b2, number of directions (static).
    dim: d (static).
    law: one of :data:`LAWS`. ``orthogonal`` needs num <= dim.
    dtype: float dtype of the result.

  Returns:
    (num, dim) array; rows unit-norm for ``sphere`` / ``orthogonal``.

  Raises:
    ValueError: unknown law, or ``orthogonal`` with num > dim.
  """
  g = jax.random.normal(key, (num, dim), dtype)
  if law == "gaussian":
    return g
  if law == "sphere":
    return _rows_on_sphere(g)
  if law == "orthogonal":
    if num > dim:
      raise ValueError(f"orthogonal directions need fd_directions <= dim; got {num} > {dim}")
    q, r = jnp.linalg.qr(g.T)          # (dim, num), orthonormal columns
    q = q * jnp.sign(jnp.diagonal(r))  # Haar-uniform (sign fix of the QR factor)
    return q.T
  raise ValueError(f"unknown direction law {law!r}; accepted: {', '.join(LAWS)}")


def _rows_on_sphere(g: jax.Array) -> jax.Array:
  """Each row of g (num, dim) divided by its norm: Gaussian rows become uniform on S^{d-1}."""
  return g * jax.lax.rsqrt(jnp.sum(g * g, axis=1, keepdims=True))


def check_directions(law: str, num: int, dim: int, task: str = "") -> None:
  """Raises ConfigError (``fd_directions``) before anything compiles where :func:`directions`
  would fail while tracing: ``orthogonal`` with num > dim."""
  if law == "orthogonal" and num > dim:
    from fedsim.core.errors import ConfigError
    on = f" on task {task}" if task else ""
    raise ConfigError("fd_directions", f"orthogonal directions need fd_directions <= dim = {dim}{on}; got {num}; "
                      f"use fd_directions <= {dim}, or direction=sphere or gaussian")


def direction_scale(law: str, dim: int) -> float:
  """The factor multiplying (F(x+mu v) - F(x)) v / mu: d on the sphere, 1 for Gaussians."""
  return float(dim) if law in ("sphere", "orthogonal") else 1.0


# ----------------------------------------------------------------------------- streamed directions
#
# With jax_threefry_partitionable (the default since JAX 0.5), entry (n, j) of
# jax.random.normal(key, (num, dim)) is a function of the key and its flat index
# n dim + j only: the bits are threefry2x32(key, (hi, lo) of the 64-bit counter
# n dim + j) (xor'd halves for 32 bits, hi << 32 | lo for 64), then JAX's bits ->
# uniform -> erfinv transform. _WINDOW is a PRNG implementation whose key data
# (k1, k2, base, stride) makes random_bits of shape (r, c) use counters
# base + i stride + j, so that jax.random.normal itself (the same transform)
# returns any window of rows and columns of the full draw, bit for bit.


def _window_bits(key_data: jax.Array, bit_width: int, shape) -> jax.Array:
  k1, k2, base, stride = key_data[0], key_data[1], key_data[2], key_data[3]
  if len(shape) != 2:
    raise ValueError(f"direction windows are 2-D; got shape {shape}")
  lo = (base + jax.lax.broadcasted_iota(jnp.uint32, shape, 0) * stride
        + jax.lax.broadcasted_iota(jnp.uint32, shape, 1))
  bits1, bits2 = jex_random.threefry2x32_p.bind(k1, k2, jnp.zeros(shape, jnp.uint32), lo)
  if bit_width == 64:
    return jax.lax.shift_left(bits1.astype(jnp.uint64), jnp.uint64(32)) | bits2.astype(jnp.uint64)
  if bit_width == 32:
    return bits1 ^ bits2
  return (bits1 ^ bits2).astype({8: jnp.uint8, 16: jnp.uint16}[bit_width])


def _window_only(*args):
  raise NotImplementedError("direction-window keys only draw random bits (normal_window)")


_WINDOW = jex_random.define_prng_impl(key_shape=(4,), seed=_window_only, split=_window_only,
                                      random_bits=_window_bits, fold_in=_window_only,
                                      name="fedsim_threefry2x32_window", tag="fdw")


def streamable(key: jax.Array, num: int, dim: int) -> bool:
  """Whether :func:`normal_window` reproduces ``jax.random.normal(key, (num, dim))``: a
  threefry2x32 key (typed, or raw uint32 under the default threefry2x32 implementation),
  ``jax_threefry_partitionable`` on, and num * dim < 2^32 (32-bit counters)."""
  if not jax.config.jax_threefry_partitionable:  # type: ignore[attr-defined]  # dynamic config attribute
    return False
  if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
    impl = str(jax.random.key_impl(key))
  else:
    impl = str(jax.config.jax_default_prng_impl)  # type: ignore[attr-defined]  # dynamic config attribute
  return impl == "threefry2x32" and num * dim < 2 ** 32


def normal_window(key: jax.Array, dim: int, row0, col0, rows: int, cols: int, dtype=jnp.float32) -> jax.Array:
  """Rows row0..row0+rows-1, columns col0..col0+cols-1 of ``jax.random.normal(key, (num, dim), dtype)``.

  Bit for bit the same numbers as the full draw (any num covering the window), without
  drawing the rest: directions of :func:`directions` can be generated block by block.
  Columns past dim - 1 continue into the next row's counters (callers drop them).

  Args:
    key: a key for which :func:`streamable` holds (a single key; vmap for batches).
    dim: d, the row length of the full draw (static).
    row0, col0: first row and column (int, may be traced).
    rows, cols: window shape (static).
    dtype: float dtype (float64 needs jax_enable_x64).

  Returns:
    (rows, cols) array of ``dtype``.
  """
  data = jax.random.key_data(key) if jnp.issubdtype(key.dtype, jax.dtypes.prng_key) else key
  base = jnp.asarray(row0, jnp.uint32) * jnp.uint32(dim) + jnp.asarray(col0, jnp.uint32)
  window = jax.random.wrap_key_data(jnp.stack([data[0], data[1], base, jnp.uint32(dim)]), impl=_WINDOW)
  return jax.random.normal(window, (rows, cols), dtype)


def fd_gradient(f: Callable[[jax.Array], jax.Array], x: jax.Array, key: jax.Array,
                num_directions: int, smoothing, law: str = "sphere",
                direction_block: int | None = None) -> jax.Array:
  """The mini-batch two-point estimator of Fang et al. 2022, eq. 2 (FedZO).

  Args:
    f: ``(d,) -> scalar``, the mini-batch mean objective (1/b1) sum_m F(x, xi_m);
      only queried, never differentiated.
    x: (d,) float, the point.
    key: PRNG key for the directions.
    num_directions: b2 (static).
    smoothing: mu > 0, the smoothing radius (may be traced).
    law: direction law, see module docstring.
    direction_block: B, directions drawn and evaluated per block (static): 0 = all
      b2 at once (the (b2, d) directions materialised); B >= 1 streams ceil(b2 / B)
      equal blocks of at most B rows (the last one padded, its extra rows dropped);
      None = :func:`default_direction_block`.
      B >= b2, the ``orthogonal`` law (a QR of the whole (b2, d) draw, so it is
      materialised per client), or a key :func:`streamable` rejects take the
      materialised path. Streamed equals materialised up to rounding (module docstring).

  Returns:
    (d,) estimate ``(scale / (mu b2)) sum_n v_n (f(x + mu v_n) - f(x))`` of ``x.dtype``.
    Costs ``b1 (b2 + 1)`` sample queries (f is a b1-sample mean).

  Raises:
    ValueError: unknown law, ``orthogonal`` with b2 > d, or direction_block < 0.
  """
  d = x.shape[0]
  block = default_direction_block() if direction_block is None else direction_block
  if block < 0:
    raise ValueError(f"direction_block must be >= 0; got {block}")
  if law not in LAWS:
    raise ValueError(f"unknown direction law {law!r}; accepted: {', '.join(LAWS)}")
  if block == 0 or block >= num_directions or law == "orthogonal" or not streamable(key, num_directions, d):
    return _fd_materialised(f, x, key, num_directions, smoothing, law)
  return _fd_streamed(f, x, key, num_directions, smoothing, law, block)


def _fd_materialised(f, x, key, num_directions, smoothing, law):
  """Eq. 2 with the (b2, d) directions drawn at once and f vmapped over all b2 points."""
  d = x.shape[0]
  v = directions(key, num_directions, d, law, x.dtype)
  with jax.default_matmul_precision("highest"):
    f0 = f(x)
    fp = jax.vmap(lambda vi: f(x + smoothing * vi))(v)
    scale = direction_scale(law, d) / (smoothing * num_directions)
    return scale * (v.T @ (fp - f0))


def _fd_streamed(f, x, key, num, smoothing, law, block):
  """Eq. 2 over blocks of directions (``sphere`` or ``gaussian``), rows k B .. k B + B - 1 of
  the same (b2, d) draw as :func:`directions`: sum_k V_k^T (f(x + mu V_k) - f(x))."""
  d, dtype = x.shape[0], x.dtype
  num_blocks = math.ceil(num / block)
  block = math.ceil(num / num_blocks)  # balanced blocks: the last one pads fewest rows
  with jax.default_matmul_precision("highest"):
    f0 = f(x)

    def step(acc, k):
      v = normal_window(key, d, k * block, 0, block, d, dtype)
      if law == "sphere":
        v = _rows_on_sphere(v)
      fp = jax.vmap(lambda vi: f(x + smoothing * vi))(v)
      w = jnp.where(k * block + jnp.arange(block) < num, fp - f0, 0)  # rows past b2 - 1 pad the last block
      return acc + v.T @ w, None

    acc, _ = jax.lax.scan(step, jnp.zeros((d,), dtype), jnp.arange(num_blocks))
    scale = direction_scale(law, d) / (smoothing * num)
    return scale * acc
