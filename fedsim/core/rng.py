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
"""

import zlib

import jax

STREAMS = ("init", "rounds", "shared", "eval")


def stream(root: jax.Array, name: str) -> jax.Array:
  """The key of the named stream; ``name`` must be one of :data:`STREAMS`.

  Raises:
    KeyError: unknown stream name.
  """
  if name not in STREAMS:
    raise KeyError(f"unknown key stream {name!r}; accepted: {', '.join(STREAMS)}")
  return jax.random.fold_in(root, zlib.crc32(name.encode()) & 0x7FFFFFFF)


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
