"""A tiny federated least-squares task and plain-NumPy references of its pieces,
for the update-rule tests (issue 15: independent references on 3-4 clients, d <= 5).

Client i holds n_i samples (a_ij, y_ij), a_ij in R^d; one sample's loss is
F(x; a, y) = 1/2 (a^T x - y)^2, gradient a (a^T x - y). A batch carries weights
w summing to 1 (1/b for a sampled batch, mask/n_i for the whole local set), so
loss(x, batch) = sum_j w_j F(x; a_j, y_j).

The NumPy side only reproduces the random draws (key plumbing of
fedsim/core/rng.py and the task's own sampler); every formula is written out
here in float64, never taken from fedsim.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from fedsim.core import rng
from fedsim.core.sampling import sample_clients
from fedsim.core.types import Task

ROOT = jax.random.key(2024)
X0 = np.array([0.4, -0.3, 0.2, 0.1, -0.5])


def make_tiny_task(num_clients=4, dim=4, sizes=(3, 5, 2, 6), seed=0, stochastic=True) -> Task:
  """N clients with ``sizes`` samples each (padded to max), x0 = X0[:dim] whatever the key."""
  r = np.random.default_rng(seed)
  n_max = max(sizes)
  a = r.normal(size=(num_clients, n_max, dim)).astype(np.float32)
  y = r.normal(size=(num_clients, n_max)).astype(np.float32) + np.arange(num_clients)[:, None]
  mask = np.arange(n_max)[None, :] < np.asarray(sizes)[:, None]
  a, y = a * mask[..., None], y * mask
  data = {"clients": {"a": jnp.asarray(a), "y": jnp.asarray(y), "mask": jnp.asarray(mask),
                      "n": jnp.asarray(sizes, jnp.int32)},
          "sizes": jnp.asarray(sizes, jnp.int32), "eval": {}}

  def loss(x, batch):
    return jnp.sum(batch["w"] * 0.5 * (batch["a"] @ x - batch["y"]) ** 2)

  def full_batch(c):
    return {"a": c["a"], "y": c["y"], "w": c["mask"] / c["n"]}

  def sample_batch(c, key, b):
    if not stochastic:
      return full_batch(c)
    idx = jnp.minimum((jax.random.uniform(key, (b,)) * c["n"]).astype(jnp.int32), c["n"] - 1)
    return {"a": c["a"][idx], "y": c["y"][idx], "w": jnp.full((b,), 1.0 / b)}

  def evaluate(x, d):
    return {"objective": jnp.mean(jax.vmap(lambda c: loss(x, full_batch(c)))(d["clients"]))}

  x0 = jnp.asarray(X0[:dim], jnp.float32)
  return Task(name="tiny_lsq", num_clients=num_clients, init_params=lambda key: x0, data=data,
              loss=loss, sample_batch=sample_batch, full_batch=full_batch, evaluate=evaluate,
              stochastic=stochastic)


# ------------------------------------------------------------------ NumPy side


def client_arrays(task, i):
  c = task.client_data
  n = int(c["n"][i])
  return np.asarray(c["a"][i, :n], np.float64), np.asarray(c["y"][i, :n], np.float64)


def batch_index(task, i, k_data, b):
  """The task's own sampler: floor(u n_i), u ~ U[0,1)^b from k_data."""
  n = int(task.client_data["n"][i])
  if not task.stochastic:
    return np.arange(n)
  u = np.asarray(jax.random.uniform(k_data, (b,)), np.float64)
  return np.minimum(np.floor(u * n).astype(int), n - 1)


def batch_loss(a, y, x):
  """(1/b) sum_j 1/2 (a_j^T x - y_j)^2 over the rows given."""
  return float(np.mean(0.5 * (a @ x - y) ** 2))


def batch_grad(a, y, x):
  """(1/b) sum_j a_j (a_j^T x - y_j)."""
  return a.T @ (a @ x - y) / len(y)


def raw_normals(key, num, dim):
  return np.asarray(jax.random.normal(key, (num, dim)), np.float64)


def zo_estimate(a, y, x, k_dir, b2, mu, law="sphere", scale=None):
  """Seed 001 eq. 2 on one batch: (s / (mu b2)) sum_n v_n (F(x + mu v_n) - F(x)),
  F the batch mean (the same batch for x and every x + mu v_n); s = d on the
  sphere (v = g/||g||), 1 for Gaussians (v = g), unless ``scale`` is given."""
  d = x.shape[0]
  g = raw_normals(k_dir, b2, d)
  v = g / np.linalg.norm(g, axis=1, keepdims=True) if law == "sphere" else g
  s = (d if law == "sphere" else 1.0) if scale is None else scale
  f0 = batch_loss(a, y, x)
  diffs = np.array([batch_loss(a, y, x + mu * vn) - f0 for vn in v])
  return s / (mu * b2) * (v.T @ diffs)


@functools.cache
def round_keys(r):
  """(k_sample, k_clients, k_server) of round r from ROOT (fedsim/core/rng.py)."""
  return rng.round_subkeys(rng.round_key(rng.stream(ROOT, "rounds"), r))


def participants(task, r, m):
  k_sample, _, _ = round_keys(r)
  idx = [int(i) for i in np.asarray(sample_clients(k_sample, task.num_clients, m))]
  assert len(set(idx)) == m and all(0 <= i < task.num_clients for i in idx)
  return idx


@functools.cache
def client_step_keys(r, i, k):
  """(k_data, k_oracle) of client i's local step k in round r."""
  _, k_clients, _ = round_keys(r)
  return jax.random.split(jax.random.fold_in(rng.client_key(k_clients, i), k))


def run(alg, task, rounds):
  """Runs ``rounds`` rounds of ``alg`` on ``task`` from its init; returns (states, stats)."""
  state = alg.init(*rng.init_keys(ROOT))
  states, stats = [state], []
  step = jax.jit(alg.round)
  for r in range(rounds):
    state, st = step(state, rng.round_key(rng.stream(ROOT, "rounds"), r), task.data)
    states.append(state)
    stats.append(st)
  return states, stats


def ledger(stats, name):
  """The exact per-round value of ledger ``name`` (host int)."""
  if hasattr(stats, "exact"):
    return int(stats.exact(name))
  return int(getattr(stats, name))
