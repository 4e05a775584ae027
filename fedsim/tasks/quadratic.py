"""The synthetic federated quadratic of the FZooS paper (Shu et al. 2023, §6.1, App. E.1
eq. 98; specs/fzoos.md §3.1).

    f_i(z) = (1/(10 d)) (sum_j [(1 + C (a_j^i - 1/N)) z_j^2 + (1 + C (b_j^i - 1/N)) z_j] + 1)
    (a_j^1..a_j^N) ~ Dir((1/N) 1_N), (b_j^1..b_j^N) ~ Dir((1/N) 1_N), i.i.d. over j.

Because sum_i a_j^i = sum_i b_j^i = 1, (1/N) sum_i f_i = F exactly for every
heterogeneity C, with F(z) = (1/(10 d)) (sum_j [z_j^2 + z_j] + 1), z* = -0.5,
F* = 1/(10 d) - 0.025.

Following the authors' code, the decision variable is x in [0,1]^d with
z = 20 clip(x, 0, 1) - 10 (x* = 0.475), and x_0 ~ U[0,1]^d.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from fedsim.core.types import Task


def to_z(x):
  """[0,1]^d -> [-10,10]^d, z = 20 clip(x, 0, 1) - 10 (authors' code)."""
  return 20.0 * jnp.clip(x, 0.0, 1.0) - 10.0


def make_quadratic_task(dim: int, num_clients: int, heterogeneity: float, seed: int = 0) -> Task:
  """Builds the federated quadratic.

  Args:
    dim: d.
    num_clients: N.
    heterogeneity: C >= 0 (paper: 0.5, 5, 50).
    seed: seed of the Dirichlet coefficients.

  Returns:
    A Task whose client_data holds ``a``, ``b`` (N, d) float32 Dirichlet draws
    (columns sum to 1) and ``C`` (N,) float32 (C in every row); ``loss(x, row)`` is f_i; ``evaluate`` gives
    ``objective`` = F(x) and ``optimality_gap`` = F(x) - F*.
  """
  rng = np.random.default_rng(seed)
  alpha = np.full(num_clients, 1.0 / num_clients)
  a = rng.dirichlet(alpha, size=dim).T.astype(np.float32)  # (N, d)
  b = rng.dirichlet(alpha, size=dim).T.astype(np.float32)
  N, C, d = num_clients, float(heterogeneity), dim
  # C travels as data (one copy per client row), not as a constant of the compiled programs, so
  # runs that differ only in C share their compilations (persistent cache, batched sweeps).
  data = {"clients": {"a": jnp.asarray(a), "b": jnp.asarray(b), "C": jnp.full((N,), C, jnp.float32)},
          "sizes": jnp.ones((num_clients,), jnp.int32), "eval": {}}
  f_star = 1.0 / (10 * d) - 0.025

  def local(x, row):
    z = to_z(x)
    qa = 1.0 + row["C"] * (row["a"] - 1.0 / N)
    qb = 1.0 + row["C"] * (row["b"] - 1.0 / N)
    return (jnp.sum(qa * z * z + qb * z) + 1.0) / (10.0 * d)

  def global_f(x):
    z = to_z(x)
    return (jnp.sum(z * z + z) + 1.0) / (10.0 * d)

  return Task(
      name="quadratic", num_clients=N,
      init_params=lambda key: jax.random.uniform(key, (d,)),
      data=data, loss=local,
      sample_batch=lambda client, key, batch_size: client, full_batch=lambda c: c,
      evaluate=lambda x, data: {"objective": global_f(x), "optimality_gap": global_f(x) - f_star},
      stochastic=False, info={"dim": d, "heterogeneity": C, "coefficient_seed": seed, "F_star": f_star})
