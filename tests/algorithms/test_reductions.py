"""Exact reductions (issue 2; specs/fedzo.md §7.2).

* FedZO with one client, H = 1, full participation is one step of sphere ZO-SGD
  (seed 001 eq. 2, 6) on that client's loss.
* FedAvg with one client is H steps of mini-batch SGD.
* The FedOpt server steps are Reddi et al. 2021 Alg. 2 (first step).
* The vmapped round equals a Python loop over the sampled clients.
"""

import jax
import numpy as np
from jax.flatten_util import ravel_pytree

from fedsim import algorithms
from fedsim.core import rng
from fedsim.core.sampling import sample_clients
from fedsim.estimators import fd_gradient
from tests.conftest import assert_close, digits_task

ROOT = jax.random.key(7)


def _round_keys(r=0):
  k_round = rng.round_key(rng.stream(ROOT, "rounds"), r)
  return rng.round_subkeys(k_round)


def _flat(task, key):
  x0, unravel = ravel_pytree(task.init_params(key))
  return x0, (lambda x, b: task.loss(unravel(x), b))


def _one_round(alg, task, x_state=None):
  state = alg.init(*rng.init_keys(ROOT))
  if x_state is not None:
    state = state._replace(x=x_state)
  k_round = rng.round_key(rng.stream(ROOT, "rounds"), 0)
  new_state, stats = jax.jit(alg.round)(state, k_round, task.data)
  return state, new_state, stats


def test_fedzo_one_client_is_zo_sgd():
  task = digits_task(1)
  hp = dict(lr=0.05, smoothing=1.0, batch_size=7, fd_directions=4, local_steps=1)
  alg = algorithms.build("fedzo", task, **hp)
  # A non-zero starting point, so the softmax is not at its symmetric start.
  # mu = 1 keeps float32 cancellation in F(x + mu v) - F(x) far below the tolerance.
  x_start = 0.1 * jax.random.normal(jax.random.key(3), (task.dim,))
  state, new_state, stats = _one_round(alg, task, x_start)
  _, k_clients, _ = _round_keys()
  k_data, k_dir = jax.random.split(jax.random.fold_in(rng.client_key(k_clients, 0), 0))
  batch = task.sample_batch(jax.tree_util.tree_map(lambda a: a[0], task.client_data), k_data, 7)
  _, loss = _flat(task, jax.random.key(0))
  expected = x_start - 0.05 * fd_gradient(lambda z: loss(z, batch), x_start, k_dir, 4, 1.0, "sphere")
  assert_close(new_state.x, expected, rtol=1e-5, atol=1e-6)
  assert int(stats.queries) == 7 * (4 + 1)
  assert int(stats.bytes_up) == task.dim * 4


def test_fedavg_one_client_is_minibatch_sgd():
  task = digits_task(1)
  alg = algorithms.build("fedavg", task, lr=0.3, local_steps=4, batch_size=9)
  state, new_state, stats = _one_round(alg, task)
  _, k_clients, _ = _round_keys()
  ck = rng.client_key(k_clients, 0)
  client = jax.tree_util.tree_map(lambda a: a[0], task.client_data)
  x, loss = _flat(task, rng.stream(ROOT, "init"))
  for k in range(4):
    k_data, _ = jax.random.split(jax.random.fold_in(ck, k))
    batch = task.sample_batch(client, k_data, 9)
    x = x - 0.3 * jax.grad(loss)(x, batch)
  assert_close(new_state.x, x, rtol=1e-5, atol=1e-6)
  assert int(stats.queries) == 4 * 9


def test_vmapped_round_equals_python_loop_over_clients(digits10):
  task = digits10
  hp = dict(lr=0.01, smoothing=1.0, batch_size=6, fd_directions=3, local_steps=2, clients_per_round=4,
            weighting="size")
  alg = algorithms.build("fedzo", task, **hp)
  state, new_state, stats = _one_round(alg, task)
  k_sample, k_clients, _ = _round_keys()
  idx = np.asarray(sample_clients(k_sample, 10, 4))
  x0, loss = _flat(task, rng.stream(ROOT, "init"))
  deltas, sizes = [], []
  for i in idx:  # a client's keys depend only on its global id
    client = jax.tree_util.tree_map(lambda a, i=i: a[i], task.client_data)
    x, ck = x0, rng.client_key(k_clients, int(i))
    for k in range(2):
      k_data, k_dir = jax.random.split(jax.random.fold_in(ck, k))
      batch = task.sample_batch(client, k_data, 6)
      x = x - 0.01 * fd_gradient(lambda z, batch=batch: loss(z, batch), x, k_dir, 3, 1.0, "sphere")
    deltas.append(x - x0)
    sizes.append(int(task.client_sizes[i]))
  w = np.asarray(sizes, np.float32) / sum(sizes)
  expected = x0 + sum(wi * di for wi, di in zip(w, deltas))
  assert_close(new_state.x, expected, rtol=1e-5, atol=1e-6)
  assert int(stats.participants) == 4
  assert int(stats.queries) == 4 * 2 * 6 * 4


def test_sampling_is_uniform_without_replacement():
  keys = jax.random.split(jax.random.key(0), 10000)
  idx = np.asarray(jax.vmap(lambda k: sample_clients(k, 20, 5))(keys))
  assert all(len(set(row)) == 5 for row in idx[:500])
  freq = np.bincount(idx.ravel(), minlength=20) / 10000
  # Each client is selected with probability M/N = 0.25; binomial sd = 0.0043.
  np.testing.assert_allclose(freq, 0.25, atol=0.02)
  assert np.array_equal(np.asarray(sample_clients(keys[0], 7, 7)), np.arange(7))


def test_fedopt_first_server_step_matches_reddi_alg2(digits10):
  """Reddi et al. 2021 Alg. 2, first step from m_{-1} = 0, v_{-1} = tau^2 (line 1), no bias
  correction: m = (1 - b1) Delta; Adagrad v = tau^2 + Delta^2; Yogi v = tau^2 - (1 - b2)
  Delta^2 sign(tau^2 - Delta^2); Adam v = b2 tau^2 + (1 - b2) Delta^2;
  x <- x + eta m / (sqrt(v) + tau). (3-round checks: tests/algorithms/test_fedavg_rules.py.)"""
  task = digits10
  common = dict(lr=0.1, local_steps=3, batch_size=5, clients_per_round=4)
  state, avg_state, _ = _one_round(algorithms.build("fedavg", task, **common), task)
  delta = np.asarray(avg_state.x - state.x, np.float64)
  b1, b2, tau, eta = 0.9, 0.99, 1e-3, 0.05
  m = (1 - b1) * delta
  v_yogi = tau ** 2 - (1 - b2) * delta ** 2 * np.sign(tau ** 2 - delta ** 2)
  v_adam = b2 * tau ** 2 + (1 - b2) * delta ** 2
  for name, v in (("fedyogi", v_yogi), ("fedadagrad", tau ** 2 + delta ** 2), ("fedadam", v_adam)):
    _, new_state, _ = _one_round(algorithms.build(name, task, server_lr=eta, **common), task)
    expected = np.asarray(state.x, np.float64) + eta * m / (np.sqrt(v) + tau)
    assert_close(new_state.x, expected, rtol=2e-5, atol=1e-7)
