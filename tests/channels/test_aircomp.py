"""AirComp (seed 001 §IV; specs/fedzo.md §7.4): participation, effective noise,
the full transceiver, and the noise-free reduction to FedZO."""

import dataclasses
import math
import os
import subprocess
import sys

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


@pytest.mark.parametrize("var, rule", [(1.0, "skip"), (0.5, "resample")])
def test_channels_are_cn_0_var_and_the_threshold_rule(var, rule):
  """h = sqrt(var/2) (g_re + i g_im) from the channel key (E|h|^2 = var), M_t = {|h| >= h_min}."""
  key = jax.random.key(9)
  kr, ki = jax.random.split(jax.random.fold_in(key, 0))
  g_re = np.asarray(jax.random.normal(kr, (6,)), np.float64)
  g_im = np.asarray(jax.random.normal(ki, (6,)), np.float64)
  h_ref = math.sqrt(var / 2) * (g_re + 1j * g_im)
  cfg = aircomp.AirCompConfig(h_min=float(np.median(np.abs(h_ref))), channel_var=var, empty_round=rule)
  h, mask = aircomp.participating_channels(key, 6, cfg)
  np.testing.assert_allclose(np.asarray(h), h_ref, rtol=1e-6, atol=1e-7)
  np.testing.assert_array_equal(np.asarray(mask), np.abs(h_ref) >= cfg.h_min)
  assert 0 < int(np.sum(np.asarray(mask))) < 6


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


@pytest.mark.parametrize("model", ["real_full", "complex_real_part"])
def test_full_transceiver_matches_shortcut_and_power_constraint(model):
  deltas, h, mask = _fixed_round(d=300)
  for snr_db in (-5.0, math.inf):
    short = aircomp.AirCompConfig(snr_db=snr_db, noise_model=model)
    full = aircomp.AirCompConfig(snr_db=snr_db, noise_model=model, transceiver="full")
    key = jax.random.key(5)
    ys = aircomp.aggregate(deltas, h, mask, key, short)[0]
    yf = aircomp.aggregate(deltas, h, mask, key, full)[0]
    np.testing.assert_allclose(yf, ys, rtol=1e-5, atol=1e-6 * float(jnp.max(jnp.abs(ys))))
  energy = np.asarray(aircomp.transmit_energy(deltas, h, mask, short))
  assert np.all(energy <= deltas.shape[1] * (1 + 1e-5))  # ||alpha_i Delta_i||^2 <= d P
  assert np.all(energy[~np.asarray(mask)] == 0)


# Tiny exact cases: N = 4 devices, d = 3, channels chosen by hand; the noise draw z is
# reproduced from the key, everything else is written out in NumPy (float64).
H4 = np.array([0.9 + 0.1j, 0.3 - 0.2j, -1.2 + 0.5j, 0.1 + 0.85j])   # |h| = .906, .361, 1.3, .856
D4 = np.array([[0.3, -0.1, 0.2], [5.0, 5.0, 5.0], [-0.4, 0.6, 0.1], [0.2, 0.2, -0.5]])


def _tiny(h_min=0.8):
  h = jnp.asarray(H4, jnp.complex64)
  return jnp.asarray(D4, jnp.float32), h, jnp.abs(h) >= h_min


def _draws(key, d=3):
  kr, ki = jax.random.split(key)
  return np.asarray(jax.random.normal(kr, (d,)), np.float64), np.asarray(jax.random.normal(ki, (d,)), np.float64)


@pytest.mark.parametrize("snr_db", [-10.0, 0.0, 7.0])
def test_shortcut_is_eq_17_exactly(snr_db):
  deltas, h, mask = _tiny()
  key = jax.random.key(3)
  sel = [0, 2, 3]                                    # |h_i| >= 0.8; device 1 (huge delta) is out
  mean = D4[sel].mean(0)
  dmax = max(float(D4[i] @ D4[i]) for i in sel)      # Delta_max over M_t only
  gamma = 10 ** (snr_db / 10) * 0.8 ** 2             # gamma = P h_min^2 / sigma_w^2, P = 1
  zr, _ = _draws(key)
  for model, var_factor in (("real_full", 1.0), ("complex_real_part", 0.5)):
    cfg = aircomp.AirCompConfig(snr_db=snr_db, h_min=0.8, noise_model=model)
    y, m, dm = aircomp.aggregate(deltas, h, mask, key, cfg)
    expected = mean + math.sqrt(var_factor * dmax / (len(sel) ** 2 * 3 * gamma)) * zr
    np.testing.assert_allclose(np.asarray(y), expected, rtol=1e-5, atol=1e-6)
    assert int(m) == 3
    np.testing.assert_allclose(float(dm), dmax, rtol=1e-6)
  # code_compat: std (1/|M_t|) sqrt(Delta_max / (SNR_lin min_{M_t}|h| d)), |h| unsquared.
  cfg = aircomp.AirCompConfig(snr_db=snr_db, h_min=0.8, noise_model="code_compat")
  hmin = min(abs(H4[i]) for i in sel)
  expected = mean + math.sqrt(dmax / (10 ** (snr_db / 10) * hmin * 3)) / 3 * zr
  np.testing.assert_allclose(np.asarray(aircomp.aggregate(deltas, h, mask, key, cfg)[0]), expected,
                             rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("model", ["real_full", "complex_real_part"])
def test_full_transceiver_is_eqs_14_to_17_written_out(model):
  deltas, h, mask = _tiny()
  key = jax.random.key(4)
  snr_db, h_min, d, p = -2.0, 0.8, 3, 1.0
  sel = [0, 2, 3]
  dmax = max(float(D4[i] @ D4[i]) for i in sel)
  alpha = {i: (h_min / H4[i]) * math.sqrt(d * p / dmax) for i in sel}          # eq. 15
  for i in sel:                                                                 # ||alpha Delta||^2 <= d P
    assert abs(alpha[i]) ** 2 * float(D4[i] @ D4[i]) <= d * p * (1 + 1e-12)
  sigma_w = math.sqrt(p / 10 ** (snr_db / 10))
  zr, zi = _draws(key)
  n = sigma_w * zr if model == "real_full" else sigma_w / math.sqrt(2) * (zr + 1j * zi)
  s = sum(H4[i] * alpha[i] * D4[i] for i in sel) + n                           # eqs. 14, 16
  y = np.real(s * math.sqrt(dmax / (d * p * h_min ** 2)) / len(sel))            # eq. 17
  cfg = aircomp.AirCompConfig(snr_db=snr_db, h_min=h_min, noise_model=model, transceiver="full")
  got, m, _ = aircomp.aggregate(deltas, h, mask, key, cfg)
  np.testing.assert_allclose(np.asarray(got), y, rtol=1e-5, atol=1e-6)
  assert int(m) == 3
  # The noise is there (the two models differ, and neither is the plain mean).
  assert np.max(np.abs(y - D4[sel].mean(0))) > 1e-2


def test_empty_mask_gives_zero_and_no_participants():
  deltas, h, _ = _tiny()
  mask = jnp.zeros((4,), bool)
  for tr, model in (("shortcut", "real_full"), ("shortcut", "code_compat"), ("full", "real_full"),
                    ("full", "complex_real_part")):
    cfg = aircomp.AirCompConfig(snr_db=-5.0, noise_model=model, transceiver=tr)
    y, m, _ = aircomp.aggregate(deltas, h, mask, jax.random.key(0), cfg)
    assert int(m) == 0 and np.array_equal(np.asarray(y), np.zeros(3)), (tr, model)


def test_full_transceiver_rejects_code_compat():
  deltas, h, mask = _tiny()
  cfg = aircomp.AirCompConfig(noise_model="code_compat", transceiver="full")
  with pytest.raises(ValueError, match="code_compat.*transceiver='full'.*real_full, complex_real_part"):
    aircomp.validate(cfg)
  with pytest.raises(ValueError, match="code_compat"):
    aircomp.aggregate(deltas, h, mask, jax.random.key(0), cfg)
  task = make_task("quadratic", num_clients=3, dim=4)
  with pytest.raises(ValueError, match="code_compat"):
    algorithms.build("fedzo", task, aggregation="aircomp", transceiver="full", noise_model="code_compat")


def test_cli_rejects_full_transceiver_with_code_compat(tmp_path):
  repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  proc = subprocess.run([sys.executable, "-m", "experiments.run", "--algorithm=fedzo,fedavg",
                         "--fedzo_aggregation=aircomp", "--transceiver=full", "--noise_model=code_compat",
                         f"--output_dir={tmp_path}"], cwd=repo, capture_output=True, text=True,
                        timeout=300, env=dict(os.environ, JAX_PLATFORMS="cpu"))
  assert proc.returncode == 2, proc.stderr[-2000:]
  lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
  assert len(lines) == 1 and "--noise_model" in lines[0] and "transceiver=full" in lines[0], proc.stderr
  assert not os.path.exists(tmp_path / "config.json")


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
  def strip(rs):
    return [{k: v for k, v in r.items() if k != "wall_time_s"} for r in rs]
  assert strip(r_air) == strip(r_plain)


def test_noisy_and_noise_free_runs_share_participants(digits10):
  _, free = _run(digits10, aggregation="aircomp", snr_db=math.inf)
  _, noisy = _run(digits10, aggregation="aircomp", snr_db=-5.0)
  assert [r["participants"] for r in free] == [r["participants"] for r in noisy]
  assert 0 < free[-1]["participants"] < 10 * 4
  assert free[-1]["objective"] != noisy[-1]["objective"]


@pytest.mark.slow  # long; .ci/run runs it (pytest -m slow)
def test_empty_rounds_keep_the_model_or_resample():
  task = make_task("quadratic", num_clients=3, dim=10)
  state0, recs = _run(task, aggregation="aircomp", h_min=100.0, rounds=3)
  assert recs[-1]["empty_rounds"] == 3 and recs[-1]["participants"] == 0
  assert recs[-1]["queries"] == 0 and recs[-1]["objective"] == recs[0]["objective"]
  # P(|h| >= 2) = exp(-4) = 0.018 per device; resampling finds a device almost always.
  _, recs = _run(task, aggregation="aircomp", h_min=2.0, empty_round="resample", rounds=6)
  assert recs[-1]["empty_rounds"] == 0 and recs[-1]["participants"] >= 6


def test_resample_redraws_with_fold_in_1_2_3_until_a_device_passes():
  # empty_round=resample ([code]): redraw i = 1, 2, ... uses fold_in(key, i); the first
  # draw (i = 0) is fold_in(key, 0). Reference loop written out in NumPy.
  key = jax.random.key(3)
  draws = [np.abs(np.asarray(aircomp.draw_channels(jax.random.fold_in(key, i), 2))) for i in range(4)]
  h_min = float(draws[0].max()) + 1e-3                # the first draw has no device
  assert draws[1].max() >= h_min > draws[2].max()  # redraw 1 passes, redraw 2 would not
  want = 1
  cfg = aircomp.AirCompConfig(h_min=h_min, empty_round="resample")
  h, mask = aircomp.participating_channels(key, 2, cfg)
  np.testing.assert_allclose(np.abs(np.asarray(h)), draws[want], rtol=1e-6)  # jit vs eager abs
  np.testing.assert_array_equal(np.asarray(mask), draws[want] >= h_min)


def test_one_device_noise_free_aggregate_is_its_own_update():
  # eq. 17 with |M_t| = 1 and no noise: y = Delta_i exactly (mean over the ONE device).
  deltas = jnp.array([[1.0, -2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, -9.0]], jnp.float32)
  mask = jnp.array([False, True, False])
  h = jnp.ones(3, jnp.complex64)
  cfg = aircomp.AirCompConfig(snr_db=float("inf"))
  y, m_size, _ = aircomp.aggregate(deltas, h, mask, jax.random.key(0), cfg)
  assert int(m_size) == 1
  np.testing.assert_array_equal(np.asarray(y), [4.0, 5.0, 6.0])


@pytest.mark.parametrize("transceiver", ["shortcut", "full"])
def test_one_device_noisy_round_is_sent_and_an_empty_round_is_zero(transceiver):
  # |M_t| = 1 is a real round (eq. 17 with noise: y != 0, around Delta_i); |M_t| = 0 gives
  # y = 0 exactly even though the channel adds noise (nothing was transmitted).
  deltas = jnp.array([[1.0, -2.0, 3.0], [4.0, 5.0, 6.0]], jnp.float32)
  h = jnp.array([1.0 + 0.5j, 0.3 - 1.0j], jnp.complex64)
  cfg = aircomp.AirCompConfig(snr_db=10.0, transceiver=transceiver)
  y, m_size, _ = aircomp.aggregate(deltas, h, jnp.array([False, True]), jax.random.key(1), cfg)
  assert int(m_size) == 1 and np.any(np.asarray(y) != 0.0)
  y0, m0, _ = aircomp.aggregate(deltas, h, jnp.array([False, False]), jax.random.key(1), cfg)
  assert int(m0) == 0
  np.testing.assert_array_equal(np.asarray(y0), np.zeros(3, np.float32))


def test_transmit_energy_by_hand():
  # ||alpha_i Delta_i||^2 = h_min^2 / |h_i|^2 * d / Delta_max * ||Delta_i||^2 (eq. 15, P = 1):
  # Delta = (3, 4) and (1, 0): ||.||^2 = 25, 1, Delta_max = 25; h_min = 0.8, |h| = 2, 0.5, d = 2.
  deltas = jnp.array([[3.0, 4.0], [1.0, 0.0]], jnp.float32)
  h = jnp.array([2.0 + 0.0j, 0.0 + 0.5j], jnp.complex64)
  cfg = aircomp.AirCompConfig(h_min=0.8)
  e = aircomp.transmit_energy(deltas, h, jnp.array([True, True]), cfg)
  np.testing.assert_allclose(np.asarray(e), [0.64 / 4 * 2 / 25 * 25, 0.64 / 0.25 * 2 / 25 * 1], rtol=1e-6)
  # the device with the largest update meets the power budget d P = 2 only at |h| = h_min
  assert float(aircomp.transmit_energy(deltas, jnp.array([0.8 + 0j, 1j]), jnp.array([True, True]), cfg)[0]) == \
      pytest.approx(2.0, rel=1e-6)


def test_resample_gives_up_after_exactly_max_resamples_redraws():
  # No device can pass (h_min far above any |h|): the loop stops after MAX_RESAMPLES redraws and
  # keeps the last one, fold_in(key, MAX_RESAMPLES); nobody participates.
  key = jax.random.key(5)
  cfg = aircomp.AirCompConfig(h_min=1e6, empty_round="resample")
  h, mask = aircomp.participating_channels(key, 3, cfg)
  last = aircomp.draw_channels(jax.random.fold_in(key, aircomp.MAX_RESAMPLES), 3)
  before = aircomp.draw_channels(jax.random.fold_in(key, aircomp.MAX_RESAMPLES - 1), 3)
  np.testing.assert_allclose(np.asarray(h), np.asarray(last), rtol=1e-6)  # jit vs eager rounding
  assert not np.allclose(np.asarray(h), np.asarray(before))
  assert not np.asarray(mask).any()


@pytest.mark.parametrize("field,value", [("channel_var", 0.0), ("channel_var", -1.0), ("h_min", -0.1),
                                         ("snr_db", -math.inf), ("snr_db", math.nan)])
def test_invalid_channel_settings_raise(field, value):
  with pytest.raises(ValueError, match=field):
    aircomp.validate(aircomp.AirCompConfig(**{field: value}))
  aircomp.validate(aircomp.AirCompConfig(snr_db=math.inf))  # noise-free is valid


def test_channel_config_is_immutable():
  cfg = aircomp.AirCompConfig()
  with pytest.raises(dataclasses.FrozenInstanceError):
    cfg.snr_db = 3.0
