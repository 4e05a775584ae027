"""FedZO (seed 001 Alg. 1) and AirComp-assisted FedZO (§IV, eqs. 14-17) against
plain-NumPy references (issue 15 item 1).

Tiny least-squares task (tests/algorithms/tiny_problem.py), N = 4 clients,
d = 4, H = 2 local steps, b1 = 3 samples, b2 = 2 sphere directions, 2 rounds.
The reference writes out, per local step k of client i (Alg. 1 lines 6-9):

    e = (d / (mu b2)) sum_n v_n (F(x + mu v_n; xi) - F(x; xi)),  v_n = g_n / ||g_n||,
    F(.; xi) the mean over the step's b1 samples, the same batch for x and x + mu v_n,
    x <- x - eta e,                                                      (eq. 6)

Delta_i = x_i^(H) - x; x <- x + (1/M) sum_{i in M_t} Delta_i (M_t: M of N, uniform).
AirComp: h_i ~ CN(0, channel_var), M_t = {i : |h_i| >= h_min},
y = (1/|M_t|) sum_{M_t} Delta_i + sqrt(Delta_max / (|M_t|^2 d gamma)) z,
gamma = 10^(snr_db/10) h_min^2, Delta_max = max_{M_t} ||Delta_i||^2 (eq. 17).
Ledgers: queries |M_t| H b1 (b2 + 1) (b1 -> 1 without samples), bytes d 4 each
way per participant, empty_rounds.
"""

import math

import jax
import numpy as np
import pytest

from fedsim import algorithms
from tests.algorithms import tiny_problem as tp

N, D, H, B1, B2 = 4, 4, 2, 3, 2
LR, MU = 0.05, 0.5


@pytest.fixture(scope="module")
def task():
  return tp.make_tiny_task(N, D)


def _local_delta(task, x, r, i, lr=LR, mu=MU, h=H, b1=B1, b2=B2):
  """Client i's Delta in round r: H steps of eq. 6 with the eq.-2 estimate."""
  a_all, y_all = tp.client_arrays(task, i)
  z = x.copy()
  for k in range(h):
    k_data, k_dir = tp.client_step_keys(r, i, k)
    j = tp.batch_index(task, i, k_data, b1)
    z = z - lr * tp.zo_estimate(a_all[j], y_all[j], z, k_dir, b2, mu)
  return z - x


@pytest.mark.parametrize("m", [2, 4])
def test_fedzo_two_rounds_match_algorithm_1(task, m):
  alg = algorithms.build("fedzo", task, lr=LR, smoothing=MU, batch_size=B1, fd_directions=B2,
                         local_steps=H, clients_per_round=m)
  states, stats = tp.run(alg, task, 2)
  x = tp.X0[:D].copy()
  for r in range(2):
    ids = tp.participants(task, r, m)
    x = x + sum(_local_delta(task, x, r, i) for i in ids) / m   # (1/M) sum over M_t
    np.testing.assert_allclose(np.asarray(states[r + 1].x), x, rtol=1e-5, atol=1e-6)
    assert tp.ledger(stats[r], "participants") == m
    assert tp.ledger(stats[r], "queries") == m * H * B1 * (B2 + 1)
    assert tp.ledger(stats[r], "bytes_up") == tp.ledger(stats[r], "bytes_down") == m * D * 4
    assert tp.ledger(stats[r], "empty_rounds") == 0


def test_fedzo_without_samples_counts_one_query_per_point():
  task = tp.make_tiny_task(N, D, stochastic=False)
  alg = algorithms.build("fedzo", task, lr=LR, smoothing=MU, batch_size=B1, fd_directions=B2,
                         local_steps=H, clients_per_round=3)
  states, stats = tp.run(alg, task, 1)
  ids = tp.participants(task, 0, 3)
  x = tp.X0[:D] + sum(_local_delta(task, tp.X0[:D].copy(), 0, i) for i in ids) / 3
  np.testing.assert_allclose(np.asarray(states[1].x), x, rtol=1e-5, atol=1e-6)
  assert tp.ledger(stats[0], "queries") == 3 * H * (B2 + 1)


# ------------------------------------------------------------------ AirComp


def _channels(r, channel_var):
  """h of round r as fedsim draws it: sqrt(var/2) (g_re + i g_im), g from the channel key."""
  _, _, k_server = tp.round_keys(r)
  k_chan, k_noise = jax.random.split(k_server)
  kr, ki = jax.random.split(jax.random.fold_in(k_chan, 0))
  s = math.sqrt(channel_var / 2)
  h = s * tp.raw_normals(kr, 1, N)[0] + 1j * s * tp.raw_normals(ki, 1, N)[0]
  return h, k_noise


def _aircomp_reference(task, rounds, snr_db, h_min, channel_var):
  x = tp.X0[:D].copy()
  xs, sizes = [], []
  for r in range(rounds):
    h, k_noise = _channels(r, channel_var)
    ids = [i for i in range(N) if abs(h[i]) >= h_min]            # M_t
    if ids:
      deltas = [_local_delta(task, x, r, i) for i in ids]
      mean = sum(deltas) / len(ids)
      dmax = max(float(dl @ dl) for dl in deltas)
      gamma = 10 ** (snr_db / 10) * h_min ** 2
      z = tp.raw_normals(jax.random.split(k_noise)[0], 1, D)[0]
      x = x + mean + math.sqrt(dmax / (len(ids) ** 2 * D * gamma)) * z   # eq. 17
    xs.append(x.copy())
    sizes.append(len(ids))
  return xs, sizes


@pytest.mark.parametrize("channel_var", [1.0, 0.5])
def test_aircomp_fedzo_two_rounds_match_eq_17(task, channel_var):
  # h_min between the 2nd and 3rd largest |h| of round 0: exactly 2 of 4 devices transmit.
  mags = np.sort(np.abs(_channels(0, channel_var)[0]))
  h_min = float(0.5 * (mags[1] + mags[2]))
  snr_db = -3.0
  alg = algorithms.build("fedzo", task, lr=LR, smoothing=MU, batch_size=B1, fd_directions=B2,
                         local_steps=H, aggregation="aircomp", snr_db=snr_db, h_min=h_min,
                         channel_var=channel_var, clients_per_round=1)  # ignored under aircomp
  states, stats = tp.run(alg, task, 2)
  xs, sizes = _aircomp_reference(task, 2, snr_db, h_min, channel_var)
  assert sizes[0] == 2
  for r in range(2):
    np.testing.assert_allclose(np.asarray(states[r + 1].x), xs[r], rtol=1e-5, atol=1e-6)
    assert tp.ledger(stats[r], "participants") == sizes[r]
    assert tp.ledger(stats[r], "queries") == sizes[r] * H * B1 * (B2 + 1)
    assert tp.ledger(stats[r], "bytes_up") == tp.ledger(stats[r], "bytes_down") == sizes[r] * D * 4
    assert tp.ledger(stats[r], "empty_rounds") == int(sizes[r] == 0)


def test_aircomp_noise_is_not_negligible_in_the_reference(task):
  """The noise term of the reference above moves x by far more than the tolerance,
  so a wrong constant in eq. 17 cannot pass unnoticed."""
  mags = np.sort(np.abs(_channels(0, 1.0)[0]))
  h_min = float(0.5 * (mags[1] + mags[2]))
  noisy, _ = _aircomp_reference(task, 1, -3.0, h_min, 1.0)
  free, _ = _aircomp_reference(task, 1, 300.0, h_min, 1.0)
  assert np.max(np.abs(noisy[0] - free[0])) > 1e-3


def test_aircomp_empty_round_keeps_the_model(task):
  alg = algorithms.build("fedzo", task, lr=LR, smoothing=MU, batch_size=B1, fd_directions=B2,
                         local_steps=H, aggregation="aircomp", snr_db=0.0, h_min=100.0)
  states, stats = tp.run(alg, task, 2)
  for r in range(2):
    np.testing.assert_array_equal(np.asarray(states[r + 1].x), np.asarray(states[0].x))
    assert tp.ledger(stats[r], "participants") == 0 and tp.ledger(stats[r], "queries") == 0
    assert tp.ledger(stats[r], "bytes_up") == 0 and tp.ledger(stats[r], "empty_rounds") == 1
