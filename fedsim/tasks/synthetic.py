"""Federated Ackley and Levy (the FZooS authors' code, funcs/synthetics.py; specs/fzoos.md §3.1).

    f_i(x) = Base(c1_i * (z - c2_i)),   z = 20 clip(x, 0, 1) - 10 in [-10, 10]^d
    c1_i = 0.1 + C (a^i - 1/N),   c2_i = C (b^i - 1/N),
    (a_j^1..a_j^N), (b_j^1..b_j^N) ~ Dir((1/N) 1_N) i.i.d. over coordinates j,

with C the heterogeneity; F = (1/N) sum_i f_i (eq. 1). At C = 0 every client
holds Base(0.1 z). Base:

* Ackley (a = 20, b = 0.2, c = pi): -a exp(-b ||u|| / sqrt(d)) - exp(mean cos(c u)) + a + e.
* Levy: w = 1 + (u - 1)/4; sin^2(pi w_1) + sum_{j=2}^{d-1} (w_j - 1)^2 (1 + 10 sin^2(pi w_j + 1))
  + (w_d - 1)^2 (1 + sin^2(2 pi w_d)).

x_0 ~ U[0,1]^d as in the code.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from fedsim.core.types import Task
from fedsim.tasks.quadratic import to_z

FUNCTIONS = ("ackley", "levy")


def ackley(u):
  """Ackley with a = 20, b = 0.2, c = pi (the authors' code); u (d,) -> scalar."""
  d = u.shape[0]
  a, b, c = 20.0, 0.2, math.pi
  safe = jnp.sum(u * u)
  norm = jnp.where(safe > 0, jnp.sqrt(jnp.where(safe > 0, safe, 1.0)), 0.0)
  return -a * jnp.exp(-b / math.sqrt(d) * norm) - jnp.exp(jnp.mean(jnp.cos(c * u))) + a + math.e


def levy(u):
  """Levy (the authors' code); u (d,) -> scalar, d >= 2."""
  w = 1.0 + (u - 1.0) / 4.0
  mid = w[1:-1]
  return (jnp.sin(jnp.pi * w[0]) ** 2
          + jnp.sum((mid - 1.0) ** 2 * (1.0 + 10.0 * jnp.sin(jnp.pi * mid + 1.0) ** 2))
          + (w[-1] - 1.0) ** 2 * (1.0 + jnp.sin(2.0 * jnp.pi * w[-1]) ** 2))


def make_synthetic_task(name: str, dim: int, num_clients: int, heterogeneity: float,
                        seed: int = 0) -> Task:
  """Builds federated ``ackley`` or ``levy``.

  Args:
    name: one of :data:`FUNCTIONS`.
    dim: d (>= 2 for levy).
    num_clients: N.
    heterogeneity: C >= 0.
    seed: seed of the Dirichlet draws.

  Returns:
    A deterministic Task; client rows hold ``c1``, ``c2`` (N, d); ``evaluate``
    gives ``objective`` = F(x) = mean_i f_i(x).

  Raises:
    ValueError: unknown name, or levy with d < 2.
  """
  if name not in FUNCTIONS:
    raise ValueError(f"unknown synthetic function {name!r}; accepted: {', '.join(FUNCTIONS)}")
  if name == "levy" and dim < 2:
    raise ValueError("levy needs dim >= 2")
  base = {"ackley": ackley, "levy": levy}[name]
  rng = np.random.default_rng(seed)
  alpha = np.full(num_clients, 1.0 / num_clients)
  a = rng.dirichlet(alpha, size=dim).T  # (N, d)
  b = rng.dirichlet(alpha, size=dim).T
  C, N, d = float(heterogeneity), num_clients, dim
  c1 = (0.1 + C * (a - 1.0 / N)).astype(np.float32)
  c2 = (C * (b - 1.0 / N)).astype(np.float32)
  data = {"clients": {"c1": jnp.asarray(c1), "c2": jnp.asarray(c2)},
          "sizes": jnp.ones((N,), jnp.int32), "eval": {}}

  def local(x, row):
    return base(row["c1"] * (to_z(x) - row["c2"]))

  def evaluate(x, data):
    return {"objective": jnp.mean(jax.vmap(lambda row: local(x, row))(data["clients"]))}

  return Task(name=name, num_clients=N, init_params=lambda key: jax.random.uniform(key, (d,)),
              data=data, loss=local, sample_batch=lambda client, key, batch_size: client,
              full_batch=lambda c: c, evaluate=evaluate, stochastic=False,
              info={"dim": d, "heterogeneity": C, "coefficient_seed": seed})
