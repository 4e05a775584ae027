"""FedAvg and FedOpt update rules against plain-NumPy references (issue 15 item 1).

Tiny least-squares task (tests/algorithms/tiny_problem.py): N = 4 clients of
sizes 3, 5, 2, 6, M = 2 sampled per round, d = 4, H = 2 local SGD steps of
batch B = 3, 2-3 rounds. The reference writes the rules out:

* local step (McMahan et al. 2017 Alg. 1): x <- x - eta (1/B) sum_j a_j (a_j^T x - y_j)
  on the step's batch; Delta_i = x_i^(H) - x.
* aggregation over the M participants S_t: uniform w_i = 1/M (FedZO eq. 1 /
  Reddi et al. Alg. 2 line 10), size w_i = n_i / sum_{j in S_t} n_j.
* FedAvg server: x <- x + eta_s sum_i w_i Delta_i.
* FedOpt server (Reddi et al. 2021 Alg. 2): m_t = b1 m + (1 - b1) Delta_t;
  Adagrad v_t = v + Delta_t^2; Yogi v_t = v - (1 - b2) Delta_t^2 sign(v - Delta_t^2);
  Adam v_t = b2 v + (1 - b2) Delta_t^2; x <- x + eta m_t / (sqrt(v_t) + tau),
  from m_{-1} = 0, v_{-1} = tau^2, no bias correction.
* ledgers per round: queries M H B, bytes d 4 each way per participant.
"""

import numpy as np
import pytest

from fedsim import algorithms
from tests.algorithms import tiny_problem as tp

N, M, D, H, B = 4, 2, 4, 2, 3


@pytest.fixture(scope="module")
def task():
  return tp.make_tiny_task(N, D)


def _fedavg_deltas(task, x, r, lr, m=M, h=H, b=B):
  """{i: Delta_i} for the participants of round r, local SGD written out."""
  out = {}
  for i in tp.participants(task, r, m):
    a_all, y_all = tp.client_arrays(task, i)
    z = x.copy()
    for k in range(h):
      k_data, _ = tp.client_step_keys(r, i, k)
      j = tp.batch_index(task, i, k_data, b)
      z = z - lr * tp.batch_grad(a_all[j], y_all[j], z)
    out[i] = z - x
  return out


def _weights(task, ids, weighting):
  if weighting == "uniform":
    return {i: 1.0 / len(ids) for i in ids}
  n = {i: int(task.client_sizes[i]) for i in ids}
  return {i: n[i] / sum(n.values()) for i in ids}


@pytest.mark.parametrize("weighting", ["uniform", "size"])
def test_fedavg_two_rounds_partial_participation(task, weighting):
  lr, server_lr = 0.2, 0.8
  alg = algorithms.build("fedavg", task, lr=lr, local_steps=H, batch_size=B, clients_per_round=M,
                         weighting=weighting, server_lr=server_lr)
  states, stats = tp.run(alg, task, 2)
  x = tp.X0[:D].copy()
  for r in range(2):
    deltas = _fedavg_deltas(task, x, r, lr)
    w = _weights(task, list(deltas), weighting)
    x = x + server_lr * sum(w[i] * deltas[i] for i in deltas)
    np.testing.assert_allclose(np.asarray(states[r + 1].x), x, rtol=1e-5, atol=1e-6)
    assert tp.ledger(stats[r], "participants") == M
    assert tp.ledger(stats[r], "queries") == M * H * B
    assert tp.ledger(stats[r], "bytes_up") == tp.ledger(stats[r], "bytes_down") == M * D * 4
    assert tp.ledger(stats[r], "empty_rounds") == 0


def test_fedavg_weights_are_over_participants_not_all_clients(task):
  """1/M (not 1/N) and n_i / sum over the sampled clients (not over all N)."""
  lr = 0.2
  x = tp.X0[:D].copy()
  deltas = _fedavg_deltas(task, x, 0, lr)
  ids = list(deltas)
  sizes = np.asarray(task.client_sizes, np.float64)
  for weighting, wrong in (("uniform", {i: 1.0 / N for i in ids}),
                           ("size", {i: sizes[i] / sizes.sum() for i in ids})):
    alg = algorithms.build("fedavg", task, lr=lr, local_steps=H, batch_size=B, clients_per_round=M,
                           weighting=weighting)
    got = np.asarray(tp.run(alg, task, 1)[0][1].x)
    w = _weights(task, ids, weighting)
    right = x + sum(w[i] * deltas[i] for i in ids)
    bad = x + sum(wrong[i] * deltas[i] for i in ids)
    np.testing.assert_allclose(got, right, rtol=1e-5, atol=1e-6)
    assert np.max(np.abs(right - bad)) > 100 * 1e-6  # the test can tell the two apart


def _fedopt_reference(task, kind, rounds, lr, eta, b1, b2, tau):
  x = tp.X0[:D].copy()
  m = np.zeros(D)
  v = np.full(D, tau ** 2)                       # v_{-1} = tau^2 (Alg. 2 line 1)
  xs, signs = [], set()
  for r in range(rounds):
    deltas = _fedavg_deltas(task, x, r, lr)
    delta = sum(deltas.values()) / M             # line 10: (1/|S|) sum Delta_i
    m = b1 * m + (1 - b1) * delta                # line 11
    if kind == "adagrad":
      v = v + delta ** 2                         # line 12
    elif kind == "yogi":
      signs |= set(np.sign(v - delta ** 2).tolist())
      v = v - (1 - b2) * delta ** 2 * np.sign(v - delta ** 2)   # line 13
    else:
      v = b2 * v + (1 - b2) * delta ** 2         # line 14
    x = x + eta * m / (np.sqrt(v) + tau)         # line 15
    xs.append(x.copy())
  return xs, signs


@pytest.mark.parametrize("name, kind", [("fedadam", "adam"), ("fedyogi", "yogi"),
                                        ("fedadagrad", "adagrad")])
def test_fedopt_three_server_steps_match_reddi_alg2(task, name, kind):
  lr, eta, b1, b2 = 0.1, 0.05, 0.8, 0.9
  # tau comparable to |Delta| (0.05-0.4): the v_{-1} = tau^2 start matters, and
  # Yogi's sign takes both values over the three rounds (checked below).
  tau = 0.08
  alg = algorithms.build(name, task, lr=lr, local_steps=H, batch_size=B, clients_per_round=M,
                         server_lr=eta, beta1=b1, beta2=b2, tau=tau)
  states, stats = tp.run(alg, task, 3)
  xs, signs = _fedopt_reference(task, kind, 3, lr, eta, b1, b2, tau)
  for r in range(3):
    np.testing.assert_allclose(np.asarray(states[r + 1].x), xs[r], rtol=2e-5, atol=2e-6)
    assert tp.ledger(stats[r], "queries") == M * H * B
  if kind == "yogi":
    assert signs == {-1.0, 1.0}, signs
  # The server moved by more than the tolerance (the step is not trivially small).
  assert np.max(np.abs(xs[0] - tp.X0[:D])) > 1e-3


def test_fedopt_server_state_starts_at_tau_squared(task):
  for name in ("fedadam", "fedyogi", "fedadagrad"):
    alg = algorithms.build(name, task, clients_per_round=M, tau=0.03)
    m, v = tp.run(alg, task, 0)[0][0].opt_state[0]
    np.testing.assert_array_equal(np.asarray(m), np.zeros(D))
    np.testing.assert_allclose(np.asarray(v), np.full(D, 0.03 ** 2), rtol=1e-6)
