"""Over-the-air computation (AirComp) aggregation of FedZO (Fang et al. 2022, §IV,
eqs. 14-17; specs/fedzo.md §2.3, §5, §6).

Devices transmit their model deltas as analog signals over a Rayleigh
block-fading channel h_i ~ CN(0, channel_var), i.i.d. over devices and rounds.
Only devices with |h_i| >= h_min transmit (M_t, random size). With the
transmit scalar alpha_i = (h_min / h_i) sqrt(d P / Delta_max) (eq. 15), the
received superposition s = sum_{M_t} h_i alpha_i Delta_i + n, n ~ CN(0, sigma_w^2 I)
(eqs. 14, 16), scaled by (1/|M_t|) sqrt(Delta_max / (d P h_min^2)) (eq. 17), is

    y = (1/|M_t|) sum_{M_t} Delta_i + n~,
    n~ ~ CN(0, Delta_max / (|M_t|^2 d gamma) I),  gamma = P h_min^2 / sigma_w^2.

``snr_db`` is the transmit SNR P / sigma_w^2 in dB (P = 1); ``inf`` is noise-free.

Noise models (specs/fedzo.md §6):

* ``real_full`` (default): real Gaussian noise with the full per-coordinate
  variance Delta_max / (|M_t|^2 d gamma), the variance the proof of Theorem 3
  uses (E||n~||^2 = Delta_max / (|M_t|^2 gamma)).
* ``complex_real_part``: the real part of the complex noise of eq. 17 (half the
  variance).
* ``code_compat``: the authors' code, std (1/|M_t|) sqrt(Delta_max /
  (SNR_lin min_{M_t}|h| d)), with the actual minimum |h| unsquared.

Transceivers (``transceiver``):

* ``shortcut`` (default): eq. 17 in closed form, y = mean + std z with the
  noise model's std.
* ``full``: eqs. 14-17 simulated step by step (complex alpha_i of eq. 15,
  superposition, channel noise n_t, receive scaling of eq. 17, real part).
  The channel noise follows the noise model: ``real_full`` draws a real
  n_t ~ N(0, sigma_w^2 I_d) (a real-baseband eq. 14, whose receive-scaled
  variance is the proof's), ``complex_real_part`` draws eq. 14's
  n_t ~ CN(0, sigma_w^2 I_d). Both use the same standard normal draws as the
  shortcut, so the two transceivers agree draw for draw. ``code_compat`` is a
  closed-form std of the authors' code, not a channel, and is rejected
  (ValueError) with ``full``.

The authors' code also draws h with E|h|^2 = 0.5 (``channel_var=0.5``) and
redraws the channels when no device passes the threshold
(``empty_round="resample"``); the paper gives no rule, our default
(``skip``) keeps the model and counts the round in the ``empty_rounds`` ledger.
"""

from __future__ import annotations

import math

import chex
import jax
import jax.numpy as jnp

from fedsim.core.reduce import pairwise_sum

NOISE_MODELS = ("real_full", "complex_real_part", "code_compat")
EMPTY_ROUND_RULES = ("skip", "resample")
TRANSCEIVERS = ("shortcut", "full")
FULL_NOISE_MODELS = ("real_full", "complex_real_part")  # channel-noise laws the full transceiver simulates
MAX_RESAMPLES = 64


@chex.dataclass(frozen=True)
class AirCompConfig:
  """AirComp channel settings (paper defaults, Fang et al. 2022, §V-A).

  Attributes:
    snr_db: transmit SNR P / sigma_w^2 in dB; ``inf`` = noise-free. Paper: -10, -5, 0.
    h_min: participation threshold on |h|; paper 0.8.
    channel_var: E|h|^2; 1.0 (paper CN(0,1)) or 0.5 (authors' code).
    noise_model: one of :data:`NOISE_MODELS`.
    empty_round: ``skip`` (keep the model; logged) or ``resample`` (code).
    transceiver: ``shortcut`` (eq. 17 in closed form) or ``full`` (complex
      alpha_i, superposition, channel noise of the noise model, receive
      scaling; real part). ``full`` accepts :data:`FULL_NOISE_MODELS` only.
  """
  snr_db: float = 0.0
  h_min: float = 0.8
  channel_var: float = 1.0
  noise_model: str = "real_full"
  empty_round: str = "skip"
  transceiver: str = "shortcut"


def validate(cfg: AirCompConfig):
  """Raises ValueError naming the setting and the accepted values."""
  if cfg.noise_model not in NOISE_MODELS:
    raise ValueError(f"noise_model must be one of {', '.join(NOISE_MODELS)}; got {cfg.noise_model!r}")
  if cfg.empty_round not in EMPTY_ROUND_RULES:
    raise ValueError(f"empty_round must be one of {', '.join(EMPTY_ROUND_RULES)}; got {cfg.empty_round!r}")
  if cfg.transceiver not in TRANSCEIVERS:
    raise ValueError(f"transceiver must be one of {', '.join(TRANSCEIVERS)}; got {cfg.transceiver!r}")
  if not cfg.h_min >= 0:
    raise ValueError(f"h_min must be >= 0; got {cfg.h_min}")
  if not cfg.channel_var > 0:
    raise ValueError(f"channel_var must be > 0; got {cfg.channel_var}")
  if math.isnan(cfg.snr_db) or cfg.snr_db == -math.inf:
    raise ValueError(f"snr_db must be a finite number or +inf (noise-free); got {cfg.snr_db}")
  if cfg.transceiver == "full" and cfg.noise_model not in FULL_NOISE_MODELS:
    raise ValueError(f"noise_model={cfg.noise_model!r} cannot be used with transceiver='full' (it is "
                     f"the authors' closed-form std, not a channel); accepted with full: "
                     f"{', '.join(FULL_NOISE_MODELS)}, or use transceiver='shortcut'")


def draw_channels(key, num_devices: int, channel_var: float = 1.0):
  """h ~ CN(0, channel_var), shape (num_devices,) complex64."""
  kr, ki = jax.random.split(key)
  s = jnp.sqrt(channel_var / 2.0)
  return (s * jax.random.normal(kr, (num_devices,)) + 1j * s * jax.random.normal(ki, (num_devices,))
          ).astype(jnp.complex64)


def participating_channels(key, num_devices: int, cfg: AirCompConfig):
  """Draws h and the mask |h| >= h_min, redrawing up to MAX_RESAMPLES times
  when the mask is empty and ``cfg.empty_round == "resample"``.

  Returns:
    (h (N,) complex64, mask (N,) bool).
  """
  h0 = draw_channels(jax.random.fold_in(key, 0), num_devices, cfg.channel_var)
  if cfg.empty_round != "resample":
    return h0, jnp.abs(h0) >= cfg.h_min

  def cond(c):
    i, h = c
    return (i < MAX_RESAMPLES) & ~jnp.any(jnp.abs(h) >= cfg.h_min)

  def body(c):
    i, _ = c
    return i + 1, draw_channels(jax.random.fold_in(key, i + 1), num_devices, cfg.channel_var)

  _, h = jax.lax.while_loop(cond, body, (jnp.int32(0), h0))
  return h, jnp.abs(h) >= cfg.h_min


def noise_std(delta_max, m_size, d: int, cfg: AirCompConfig, h_abs_min=None):
  """Per-coordinate std of the effective noise n~ after receive scaling (eq. 17).

  Args:
    delta_max: max_{M_t} ||Delta_i||^2.
    m_size: |M_t| (>= 1).
    d: dimension.
    h_abs_min: min_{M_t} |h_i| (``code_compat`` only).
  """
  snr = 10.0 ** (cfg.snr_db / 10.0)
  if cfg.noise_model == "code_compat":
    return jnp.sqrt(delta_max / (snr * h_abs_min * d)) / m_size
  gamma = snr * cfg.h_min ** 2
  var = delta_max / (m_size ** 2 * d * gamma)
  if cfg.noise_model == "complex_real_part":
    var = var / 2.0
  return jnp.sqrt(var)


def aggregate(deltas, h, mask, key, cfg: AirCompConfig):
  """The server's estimate y of the mean delta over M_t (eq. 17).

  Args:
    deltas: (N, d) float32, every device's delta (devices outside M_t are
      ignored).
    h: (N,) complex channels; mask: (N,) bool, M_t.
    key: noise key.
    cfg: channel settings.

  Returns:
    (y (d,) float32, |M_t| int32, Delta_max float32). y = 0 when M_t is empty.

  Raises:
    ValueError: an invalid ``cfg`` (see :func:`validate`), e.g. ``code_compat``
      noise with the full transceiver.
  """
  validate(cfg)
  n, d = deltas.shape
  m_size = jnp.sum(mask.astype(jnp.int32))
  msz = jnp.maximum(m_size, 1).astype(deltas.dtype)
  sq = jnp.sum(deltas * deltas, axis=1)
  delta_max = jnp.max(jnp.where(mask, sq, 0.0))
  w = mask.astype(deltas.dtype) / msz
  if cfg.transceiver == "full":
    return _full_transceiver(deltas, h, mask, key, cfg, msz, delta_max), m_size, delta_max
  mean = pairwise_sum(w[:, None] * deltas)
  if math.isinf(cfg.snr_db) and cfg.snr_db > 0:
    return mean, m_size, delta_max
  h_abs_min = jnp.min(jnp.where(mask, jnp.abs(h), jnp.inf))
  std = noise_std(delta_max, msz, d, cfg, h_abs_min)
  # The real-part draw of the full transceiver's complex noise, so that
  # transceiver="full" and the shortcut agree draw for draw.
  y = mean + std * jax.random.normal(jax.random.split(key)[0], (d,), deltas.dtype)
  return jnp.where(m_size > 0, y, jnp.zeros_like(y)), m_size, delta_max


def _full_transceiver(deltas, h, mask, key, cfg, msz, delta_max):
  """Simulates eqs. 14-17 literally with P = 1: complex alpha_i, the superposed
  signal plus the channel noise n_t (``real_full``: real N(0, sigma_w^2);
  ``complex_real_part``: CN(0, sigma_w^2)), receive scaling, real part."""
  n, d = deltas.shape
  p = 1.0
  safe_max = jnp.maximum(delta_max, jnp.finfo(deltas.dtype).tiny)
  alpha = (cfg.h_min / jnp.where(mask, h, 1.0)) * jnp.sqrt(d * p / safe_max)   # eq. 15
  tx = jnp.where(mask[:, None], (h * alpha)[:, None] * deltas, 0.0)             # h_i alpha_i Delta_i
  s = pairwise_sum(tx)                                                          # eq. 14 superposition
  if not (math.isinf(cfg.snr_db) and cfg.snr_db > 0):
    sigma_w = jnp.sqrt(p / 10.0 ** (cfg.snr_db / 10.0))
    kr, ki = jax.random.split(key)
    if cfg.noise_model == "real_full":     # real-baseband eq. 14: n_t ~ N(0, sigma_w^2 I_d)
      s = s + sigma_w * jax.random.normal(kr, (d,))
    else:                                  # eq. 14: n_t ~ CN(0, sigma_w^2 I_d)
      s = s + sigma_w / jnp.sqrt(2.0) * (jax.random.normal(kr, (d,)) + 1j * jax.random.normal(ki, (d,)))
  y = jnp.real(s * jnp.sqrt(safe_max / (d * p * cfg.h_min ** 2)) / msz)           # eq. 17
  return jnp.where(jnp.sum(mask) > 0, y, 0.0).astype(deltas.dtype)


def transmit_energy(deltas, h, mask, cfg: AirCompConfig):
  """||alpha_i Delta_i||^2 per device (0 outside M_t), for the power-constraint check
  ||alpha_i Delta_i||^2 <= d P (eq. 15, P = 1)."""
  n, d = deltas.shape
  sq = jnp.sum(deltas * deltas, axis=1)
  delta_max = jnp.max(jnp.where(mask, sq, 0.0))
  a2 = (cfg.h_min ** 2 / jnp.abs(jnp.where(mask, h, 1.0)) ** 2) * d / delta_max
  return jnp.where(mask, a2 * sq, 0.0)
