"""AirComp (seed 001 §IV; specs/fedzo.md §7.4): participation, effective noise,
the full transceiver, and the noise-free reduction to FedZO."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedsim import algorithms
from fedsim.channels import aircomp
from fedsim.core import simulate
from fedsim.tasks import make_task


def test_participation_probability_is_exp_minus_h_min_squared():
  cfg = aircomp.AirCompConfig(h_min=0.8)
  keys = jax.random.split(jax.random.key(0), 10000)
  masks = np.asarray(jax.vmap(lambda k: aircomp.participating_channels(k, 50, cfg)[1])(keys))
  p, n = masks.mean(), masks.size
  se = math.sqrt(p * (1 - p) / n)
  assert abs(p - math.exp(-0.64)) < 3 * se, (p, math.exp(-0.64), se)
  # The authors' code: E|h|^2 = 0.5, so P(|h| >= 0.8) = exp(-1.28).
  code = aircomp.AirCompConfig(h_min=0.8, channel_var=0.5)
  pc = np.asarray(jax.vmap(lambda k: aircomp.participating_channels(k, 50, code)[1])(keys)).mean()
  assert abs(pc - math.exp(-1.28)) < 3 * math.sqrt(pc * (1 - pc) / n)


def _fixed_round(n=12, d=400, seed=0):
  rng = np.random.default_rng(seed)
  deltas = jnp.asarray(rng.normal(size=(n, d)) * rng.uniform(0.5, 2, size=(n, 1)), jnp.float32)
  h = aircomp.draw_channels(jax.random.key(seed), n)
  mask = jnp.abs(h) >= 0.8        # M_t of the paper's threshold rule
  assert int(mask.sum()) >= 2
  return deltas, h, mask


@pytest.mark.parametrize("snr_db", [-10.0, 0.0, 5.0])
@pytest.mark.parametrize("model, factor", [("real_full", 1.0), ("complex_real_part", 0.5)])
def test_effective_noise_variance_matches_closed_form(snr_db, model, factor):
  deltas, h, mask = _fixed_round()
  cfg = aircomp.AirCompConfig(snr_db=snr_db, h_min=0.8, noise_model=model)
  keys = jax.random.split(jax.random.key(1), 3000)
  ys = jax.vmap(lambda k: aircomp.aggregate(deltas, h, mask, k, cfg)[0])(keys)
  m = int(mask.sum())
  mean = np.asarray(deltas)[np.asarray(mask)].mean(0)
  noise = np.asarray(ys, np.float64) - mean
  dmax = float(np.max(np.sum(np.asarray(deltas, np.float64)[np.asarray(mask)] ** 2, 1)))
  gamma = 10 ** (snr_db / 10) * 0.64
  expected = factor * dmax / (m ** 2 * deltas.shape[1] * gamma)   # eq. 17, per coordinate
  assert abs(noise.var() / expected - 1) < 0.02, (noise.var(), expected)
  assert abs(noise.mean()) < 5 * math.sqrt(expected / noise.size)


def test_full_transceiver_matches_shortcut_and_power_constraint():
  deltas, h, mask = _fixed_round(d=300)
  for snr_db in (-5.0, math.inf):
    short = aircomp.AirCompConfig(snr_db=snr_db, noise_model="complex_real_part")
    full = aircomp.AirCompConfig(snr_db=snr_db, noise_model="complex_real_part", transceiver="full")
    key = jax.random.key(5)
    ys = aircomp.aggregate(deltas, h, mask, key, short)[0]
    yf = aircomp.aggregate(deltas, h, mask, key, full)[0]
    np.testing.assert_allclose(yf, ys, rtol=1e-5, atol=1e-6 * float(jnp.max(jnp.abs(ys))))
  energy = np.asarray(aircomp.transmit_energy(deltas, h, mask, short))
  assert np.all(energy <= deltas.shape[1] * (1 + 1e-5))  # ||alpha_i Delta_i||^2 <= d P
  assert np.all(energy[~np.asarray(mask)] == 0)


def test_code_compat_noise_std():
  deltas, h, mask = _fixed_round()
  cfg = aircomp.AirCompConfig(snr_db=0.0, noise_model="code_compat")
  m = int(mask.sum())
  dmax = float(np.max(np.sum(np.asarray(deltas)[np.asarray(mask)] ** 2, 1)))
  hmin = float(np.min(np.abs(np.asarray(h))[np.asarray(mask)]))
  got = float(aircomp.noise_std(dmax, m, deltas.shape[1], cfg, hmin))
  np.testing.assert_allclose(got, math.sqrt(dmax / (hmin * deltas.shape[1])) / m, rtol=1e-6)


def _run(task, rounds=4, **hp):
  alg = algorithms.build("fedzo", task, lr=0.01, local_steps=2, fd_directions=5, batch_size=5, **hp)
  state, recs = simulate(alg, task, rounds, 2, jax.random.key(3))
  return state, recs


def test_noise_free_aircomp_with_zero_threshold_is_plain_fedzo(digits10):
  s_plain, r_plain = _run(digits10, clients_per_round=10)
  s_air, r_air = _run(digits10, aggregation="aircomp", snr_db=math.inf, h_min=0.0)
  np.testing.assert_array_equal(np.asarray(s_air.x), np.asarray(s_plain.x))
  strip = lambda rs: [{k: v for k, v in r.items() if k != "wall_time_s"} for r in rs]
  assert strip(r_air) == strip(r_plain)


def test_noisy_and_noise_free_runs_share_participants(digits10):
  _, free = _run(digits10, aggregation="aircomp", snr_db=math.inf)
  _, noisy = _run(digits10, aggregation="aircomp", snr_db=-5.0)
  assert [r["participants"] for r in free] == [r["participants"] for r in noisy]
  assert 0 < free[-1]["participants"] < 10 * 4
  assert free[-1]["objective"] != noisy[-1]["objective"]


def test_empty_rounds_keep_the_model_or_resample():
  task = make_task("quadratic", num_clients=3, dim=10)
  state0, recs = _run(task, aggregation="aircomp", h_min=100.0, rounds=3)
  assert recs[-1]["empty_rounds"] == 3 and recs[-1]["participants"] == 0
  assert recs[-1]["queries"] == 0 and recs[-1]["objective"] == recs[0]["objective"]
  # P(|h| >= 2) = exp(-4) = 0.018 per device; resampling finds a device almost always.
  _, recs = _run(task, aggregation="aircomp", h_min=2.0, empty_round="resample", rounds=6)
  assert recs[-1]["empty_rounds"] == 0 and recs[-1]["participants"] >= 6
