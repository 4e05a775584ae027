"""Uniform client sampling (FedAvg, McMahan et al. 2017; FedZO Fang et al. 2022, Alg. 1 line 3)."""

import jax
import jax.numpy as jnp


def sample_clients(key: jax.Array, num_clients: int, clients_per_round: int) -> jax.Array:
  """Indices of the clients that take part in a round.

  Args:
    key: the round's sampling key.
    num_clients: N (static).
    clients_per_round: M (static), 1 <= M <= N. M == N is full participation
      (returns ``arange(N)``, no randomness used).

  Returns:
    (M,) int32 distinct client ids, drawn uniformly without replacement.

  Raises:
    ValueError: M outside [1, N].
  """
  if not 1 <= clients_per_round <= num_clients:
    raise ValueError(f"clients_per_round must be in [1, {num_clients}]; got {clients_per_round}")
  if clients_per_round == num_clients:
    return jnp.arange(num_clients, dtype=jnp.int32)
  # Top-M of i.i.d. uniform keys == a uniform M-subset; O(N) and shards well.
  # float32 keys in both precisions: x64 runs sample the same clients.
  u = jax.random.uniform(key, (num_clients,), jnp.float32)
  _, idx = jax.lax.top_k(u, clients_per_round)
  return idx.astype(jnp.int32)
