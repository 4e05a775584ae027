"""The key hierarchy (DESIGN.md, "Randomness").

One root key per run. Named streams are split off it with ``fold_in`` on a fixed
stream id, so adding a stream never changes another stream's numbers:

* ``stream(root, "rounds")``: round r uses ``round_key(stream, r)``.
* inside a round, ``round_subkeys(round_key)`` gives the sampling, clients and
  server keys; client i's key is ``client_key(clients_key, i)`` with the
  *global* id i, so a client's randomness never depends on which clients share
  a batch, on padding, or on how the client axis is sharded.
* ``stream(root, "shared")``: perturbations shared by all clients (DeComFL/HiSo
  seeds, FZooS random Fourier features).
* ``stream(root, "init")``: the initial state (x_0 and any per-client state).

An algorithm's ``init`` receives both the init stream and the shared stream
(:func:`init_keys`; ``FederatedAlgorithm.init(key, shared_key)``), so the
shared perturbations of a run are a function of the root key alone: the same
for every party and unchanged when the init stream changes.

:func:`root_key` and :func:`stream` on a concrete key compute the threefry words on the host
(:func:`_threefry2x32`, NumPy) rather than in XLA programs: the same keys, bit for bit
(``tests/core/test_rng.py``), without compiling (or loading) three small programs when a run starts.
"""

import zlib

import jax
import numpy as np

STREAMS = ("init", "rounds", "shared", "eval")
_MASK = 0xFFFFFFFF


def _threefry2x32(k0: int, k1: int, x0: int, x1: int) -> tuple[int, int]:
  """Threefry-2x32 with 20 rounds (Salmon et al. 2011, "Parallel random numbers: as easy as 1, 2,
  3"; JAX's ``threefry_2x32``) of one block (x0, x1) under the key (k0, k1); words are uint32."""
  ks = (k0, k1, k0 ^ k1 ^ 0x1BD11BDA)
  rotations = ((13, 15, 26, 6), (17, 29, 16, 24))
  x0, x1 = (x0 + ks[0]) & _MASK, (x1 + ks[1]) & _MASK
  for i in range(5):
    for r in rotations[i % 2]:
      x0 = (x0 + x1) & _MASK
      x1 = (((x1 << r) | (x1 >> (32 - r))) & _MASK) ^ x0
    x0 = (x0 + ks[(i + 1) % 3]) & _MASK
    x1 = (x1 + ks[(i + 2) % 3] + i + 1) & _MASK
  return x0, x1


def _host_threefry(key) -> bool:
  """Whether ``key`` is a concrete (not traced) scalar threefry key on one device."""
  return (isinstance(key, jax.Array) and not isinstance(key, jax.core.Tracer) and key.shape == ()
          and jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key)
          and str(jax.random.key_impl(key)) == "threefry2x32" and len(key.sharding.device_set) == 1)


def root_key(seed: int) -> jax.Array:
  """``jax.random.key(seed)``: the run's root key (for a seed in [0, 2^31) under the default
  threefry implementation, made from its words, [0, seed], on the host)."""
  if (isinstance(seed, (int, np.integer)) and 0 <= int(seed) < 2 ** 31
      and jax.config.jax_default_prng_impl == "threefry2x32"):
    return jax.random.wrap_key_data(np.array([0, int(seed)], np.uint32), impl="threefry2x32")
  return jax.random.key(seed)


def stream(root: jax.Array, name: str) -> jax.Array:
  """The key of the named stream; ``name`` must be one of :data:`STREAMS`.

  Raises:
    KeyError: unknown stream name.
  """
  if name not in STREAMS:
    raise KeyError(f"unknown key stream {name!r}; accepted: {', '.join(STREAMS)}")
  data = zlib.crc32(name.encode()) & 0x7FFFFFFF
  if _host_threefry(root):  # fold_in(root, data) = threefry_2x32(root, (0, data)), on the host
    k0, k1 = (int(w) for w in np.asarray(jax.random.key_data(root)))
    words = np.array(_threefry2x32(k0, k1, 0, data), np.uint32)
    key = jax.random.wrap_key_data(words, impl="threefry2x32")
    return jax.device_put(key, root.sharding) if root.committed else key  # placed as fold_in places it
  return jax.random.fold_in(root, data)


def init_keys(root: jax.Array) -> tuple[jax.Array, jax.Array]:
  """``(stream(root, "init"), stream(root, "shared"))``: the two keys
  ``FederatedAlgorithm.init(key, shared_key)`` receives."""
  return stream(root, "init"), stream(root, "shared")


def round_key(rounds_stream: jax.Array, r) -> jax.Array:
  """Key of round r: ``fold_in(rounds_stream, r)``."""
  return jax.random.fold_in(rounds_stream, r)


def round_subkeys(key_round: jax.Array):
  """Splits a round key into (sampling, clients, server) keys."""
  k_sample, k_clients, k_server = jax.random.split(key_round, 3)
  return k_sample, k_clients, k_server


def client_key(clients_key: jax.Array, client_id) -> jax.Array:
  """Key of client ``client_id`` (global id) in this round: ``fold_in(clients_key, id)``."""
  return jax.random.fold_in(clients_key, client_id)


def client_keys(clients_key: jax.Array, client_ids: jax.Array) -> jax.Array:
  """Vectorised :func:`client_key`; ``client_ids`` (M,) int -> keys (M,)."""
  return jax.vmap(lambda i: jax.random.fold_in(clients_key, i))(client_ids)
