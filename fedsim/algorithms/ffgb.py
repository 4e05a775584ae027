"""FFGB, FFGB.C, FFGB.L and the no-residual ablation (Shen et al. 2022; specs/ffgb.md §2, §6).

Function representation: the value-cache design of specs/ffgb.md §6.2. The
global function f^t is an ensemble of weak learners, but the state never holds
the ensemble; it holds f^t's values on every client's points
``f_train`` (N, M_max, C) and on the test points ``f_test`` (M_test, C). Each
round the new learners are evaluated once on those points and folded in:

  F <- rho_t F + sum_k w_k hbar_k,   hbar_k = (1/m) sum_{i in S^t} h_{i,k}(X)

with, for FFGB / FFGB.C (Alg. 2 line 5 / Alg. 5 line 5 unrolled, §2.8)
rho_t = prod_k (1 - eta_k mu) and w_k = -eta_k prod_{kappa>k} (1 - eta_kappa mu),
and for FFGB.L (Alg. 4 line 5) rho_t = prod_k (1 - eta_k), w_k = eta_k
prod_{kappa>k} (1 - eta_kappa). The 1/m average over m clients sampled without
replacement is Alg. 1 line 4 / App. F.

Learners leave the device only if ``store_learners = R > 0``: the state then
keeps the parameters of the last R rounds (fixed shape, a ring buffer) and
:func:`attach_learner_writer` writes them to disk from the evaluation (never
inside a compiled chunk); :func:`load_ensemble` / :func:`predict_saved` rebuild
f^T on new inputs.
"""

from __future__ import annotations

import glob
import math
import os
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np

from fedsim import models as fedsim_models
from fedsim.config import hparam, validate
from fedsim.core import rng
from fedsim.core.sampling import sample_clients
from fedsim.core.types import FederatedAlgorithm, Task, make_stats, times

VARIANTS = ("ffgb", "ffgb_nores", "ffgb_c", "ffgb_l")
SCHEDULES = ("paper", "code", "theory")
WEAK_LEARNERS = fedsim_models.WEAK_ORACLES  # fedsim.models.weak_learners.ORACLES
WO_FAMILIES = fedsim_models.WEAK_FAMILIES
MLP_INITS = ("default", "faithful")
FFGB_L_QUERIES = ("fixed", "printed")

# The authors' code as a preset (issue 15): shenzebang/fed_functional_gradient at
# its paper-era commit f555c72 (2021-03-26), script/mnist_batch_ffgd.sh (the MNIST
# runs, Figs. 3-4) -> run_ffgd.py --backend joblib -> core/ffgd_joblib.py, utils.py.
# Registry names ``ffgb_code`` / ``ffgb_nores_code`` (run_ffgd_no_res.py: the same
# with use_residual=False) take these as defaults; explicit flags still override.
FFGB_CODE = {
    "eta_schedule": "code",   # utils.py l. 236-239: eta0 / ((n_round + 1) K + k + 1)^p, k = 0..K-1
    "eta0": 20.0,             # script l. 42: --step_size_0 20
    "eta_decay_p": 1.0,       # script l. 43: --p 1
    "local_steps": 2,         # script l. 43: --worker_local_steps 2
    "mu": 0.0,                # core/ffgd_joblib.py l. 39-48: no Tikhonov term
    "weak_learner": "mlp",    # utils.py l. 344-345: type="MLP" on mnist (32-32, script l. 44)
    "mlp_init": "faithful",   # utils.py l. 151, 154, 157: weight ~ N(0, (1/fan_in)^2)
    "mlp_output_act": True,   # utils.py l. 173: leaky ReLU after fc3 too
    "oracle_dedup": True,     # utils.py l. 191: torch.unique(torch.randint(0, n, (mb_size,)))
    "oracle_batch": 128,      # script l. 43: --oracle_mb_size 128
    "oracle_lr": 5e-3,        # script l. 44: --oracle_step_size 5e-3
    "oracle_steps": 2000,     # script l. 44: --oracle_local_steps 2000 (paper App. B.3: 1000)
}
CODE_PRESETS = {"ffgb_code": "ffgb", "ffgb_nores_code": "ffgb_nores"}  # registry name -> variant
G_CE = math.sqrt(2.0)  # ||softmax - e_y||_2 <= sqrt(2) (specs §2.3)


@chex.dataclass(frozen=True)
class FFGBConfig:
  """FFGB-family hyperparameters (Shen et al. 2022; specs/ffgb.md §2, §3, §6.5).

  Attributes:
    local_steps: K (paper MNIST K = 2, §3.3 / Fig. 4).
    eta0: eta_0 of the experiments' step eta_0/(Kt+k+1) ([code] MNIST script 20).
    eta_schedule: ``paper`` eta0/(tK+k+1)^p (§4 "same step size setting");
      ``code`` eta0/((t+1)K+k0+1)^p, k0 = k-1 ([code] get_step_size_scheme);
      ``theory`` c/(mu(tK+k+1)) with c = 2 (Thm 3.1) or 4 (Thm D.1/3.3;
      FFGB.L uses mu = 1).
    eta_decay_p: exponent p (1 in the paper).
    eta_cap: eta <= eta_cap (specs §6.4 --eta_cap; inf = off).
    mu_eta_cap: clamp mu*eta <= this (Lemma D.2 needs mu*eta <= 1; specs §2.3).
    mu: Tikhonov weight (eq. 3). The experiments/[code] use 0.
    clients_per_round: m (None = N), drawn without replacement (App. F).
    weak_learner: ``mlp`` / ``cnn`` (App. B.1), ``rf_ridge`` or ``scaled`` (§4.2)
      fit the query in L2 (WO^2, eq. 23); ``wo_inf`` (eq. 24, the oracle (13) of
      FFGB.C's Thm 3.2) and ``wo_lip`` (Sobolev, eq. 25, the oracle (19)-(20)
      of FFGB.L's Thm 3.3) train a ``wo_family`` learner
      (fedsim.models.weak_learners). The registry's defaults are ``mlp`` for
      ``ffgb`` / ``ffgb_nores``, ``wo_inf`` for ``ffgb_c``, ``wo_lip`` for ``ffgb_l``.
    wo_family: learner class of wo_inf / wo_lip: ``mlp`` (App. B.1), ``cnn``,
      ``rf`` (random Fourier features), ``linear``.
    wo_p: power p of wo_inf's smooth max ((1/n) sum_j r_j^p)^{1/p} of the squared
      residuals (p = 1: eq. 23's mean; p -> inf: eq. 24's max).
    sobolev_weight: weight of eq. 25's gradient term (paper 1).
    sobolev_samples: Monte-Carlo points per client round for eq. 25's integral
      (uniform in the client's bounding box).
    gamma: the scaled oracle's gamma, and the assumed gamma of FFGB.C's
      clipping constants G1 = (1-gamma)G/gamma, G2 = (2-gamma)G/gamma (Alg. 5)
      and B = 2G/(mu gamma). Thm 3.2 / D.1 assume the oracle meets (13) with
      this gamma; gamma = 1 claims an EXACT oracle, and then G1 = 0 clips the
      residual Delta to 0 (no error feedback), which is only right if h = phi
      on the support. The registry's ``ffgb_c`` default is therefore 0.5 (a
      learned oracle is not exact; the paper gives no value: G1 = G, G2 = 3G);
      the metrics ``gamma_hat_inf_min``, ``clip_fraction_G1`` /
      ``clip_fraction_G2`` show whether (13) held with it (Lemma D.1: then both
      clips are no-ops on the supports).
    oracle_steps, oracle_lr, oracle_batch: Adam WO^2 (App. B.3: 1000, 0.005; [code] 128).
    mlp_init: ``default`` or ``faithful`` ([code] weights N(0, 1/fan_in^2),
      biases PyTorch's U(+-1/sqrt(fan_in))).
    mlp_output_act: leaky ReLU on the output ([code] quirk; paper False).
    oracle_dedup: mlp / cnn oracle minibatches drop repeated indices ([code]
      ``torch.unique(torch.randint(0, n, (128,)))``: at most oracle_batch rows).
    rf_features, rf_bandwidth, ridge: the rf_ridge oracle.
    clip_G: G of Assumption 3.2 (CE: sqrt 2).
    clip_B: the projection radius B of Alg. 1/5 (None: 2G/(mu gamma), Thm D.1).
    lip_L: FFGB.L's L of (16)-(17). On the support the McShane extension
      u_i interpolates the labels under (16), so the query uses u_i(x_ij) =
      y_ij and L does not enter Alg. 4 there (nor the step of Thm 3.3, which
      is 4/(mu(tK+k+1)) with mu = 1); L shapes u_i OFF the support, whose
      input-gradient grad u_i(x) = L (x - x_j*)/||x - x_j*|| (j* the argmin of
      eq. 17) is in the Sobolev target of ``wo_lip`` (eq. 25). None: the
      task's ``info["lip_L"]`` (shift_tabular: 3); ``wo_lip`` without either
      raises.
    one_shot: FFGB.L Remark 3.1: learners computed in round 0 only.
    ffgb_l_query: ``fixed`` u_i - Delta (specs §2.4 sign fix) or ``printed``
      Delta - u_i (Alg. 4 as printed; for the sign test only).
    store_learners: R > 0 keeps the last R rounds' learners in the state.
  """
  local_steps: int = hparam(2, help="local steps per round (K)", low=1, source="Shen et al. 2022, §3.3 / Fig. 4")
  eta0: float = hparam(20.0, help="FFGB eta_0 of eta0/(tK+k+1)^p", low=0, low_open=True, finite=True,
                       source="[code] MNIST script --step_size_0 20")
  eta_schedule: str = hparam("paper", help="FFGB step: paper, code ((t+1)K+k0+1), theory (c/(mu(tK+k+1)))",
                             choices=SCHEDULES, source="Shen et al. 2022, §4, Thm 3.1; [code] get_step_size_scheme")
  eta_decay_p: float = hparam(1.0, help="FFGB step exponent p", low=0, finite=True, source="Shen et al. 2022, §4")
  eta_cap: float = hparam(float("inf"), help="FFGB cap on eta (inf = off)", low=0, low_open=True,
                          source="specs/ffgb.md §6.4")
  mu_eta_cap: float = hparam(1.0, help="FFGB cap on mu*eta (Lemma D.2 needs <= 1)", low=0, low_open=True,
                             source="Shen et al. 2022, Lemma D.2")
  mu: float = hparam(0.0, help="FFGB Tikhonov mu (experiments 0)", low=0, finite=True, source="Shen et al. 2022, eq. 3")
  clients_per_round: int | None = hparam(None, help="clients sampled per round (m; None = all N)", low=1,
                                         source="Shen et al. 2022, App. F")
  weak_learner: str = hparam("mlp", help="FFGB oracle: mlp, cnn (image data), rf_ridge, scaled (WO^2, eq. 23), "
                             "wo_inf (eq. 24; ffgb_c default), wo_lip (Sobolev eq. 25; ffgb_l default)",
                             choices=WEAK_LEARNERS, source="Shen et al. 2022, App. B.1, §4.2, eqs. 23-25")
  wo_family: str = hparam("mlp", help="FFGB wo_inf / wo_lip learner class: mlp, cnn, rf, linear",
                          choices=WO_FAMILIES)
  wo_p: float = hparam(8.0, help="FFGB wo_inf smooth max: power mean ((1/n) sum r_j^p)^(1/p) of squared "
                       "residuals", low=1, finite=True, source="p = 1: eq. 23; p -> inf: eq. 24")
  sobolev_weight: float = hparam(1.0, help="FFGB wo_lip weight of eq. 25's gradient term", low=0, finite=True,
                                 source="Shen et al. 2022, eq. 25")
  sobolev_samples: int = hparam(64, help="FFGB wo_lip Monte-Carlo points per client round (eq. 25's integral)",
                                low=1)
  gamma: float = hparam(1.0, help="FFGB scaled-oracle gamma / FFGB.C's gamma of (13) (ffgb_c default 0.5)",
                        low=0, high=1, low_open=True, source="Shen et al. 2022, eq. 13, Alg. 5, Thm 3.2 / D.1")
  oracle_steps: int = hparam(1000, help="FFGB mlp oracle Adam steps", low=1, source="Shen et al. 2022, App. B.3")
  oracle_lr: float = hparam(0.005, help="FFGB mlp oracle Adam lr", low=0, low_open=True, finite=True,
                            source="Shen et al. 2022, App. B.3")
  oracle_batch: int = hparam(128, help="FFGB mlp oracle batch", low=1, source="[code] --oracle_mb_size 128")
  mlp_init: str = hparam("default", help="FFGB mlp oracle init: default (lecun), faithful ([code] N(0, "
                         "1/fan_in^2))", choices=MLP_INITS, source="[code] utils.py l. 151-157")
  mlp_output_act: bool = hparam(False, help="FFGB mlp oracle: leaky ReLU after the output layer too ([code]; "
                                "paper false)", source="[code] utils.py l. 173")
  oracle_dedup: bool = hparam(False, help="FFGB mlp/cnn oracle: drop repeated minibatch indices ([code] "
                              "torch.unique)", source="[code] utils.py l. 191")
  rf_features: int = hparam(256, help="FFGB rf_ridge oracle: random Fourier features D", low=1)
  rf_bandwidth: float = hparam(1.0, help="FFGB rf_ridge oracle: bandwidth relative to sqrt(d)", low=0,
                               low_open=True, finite=True)
  ridge: float = hparam(1e-3, help="FFGB rf_ridge oracle: ridge lambda per sample", low=0, low_open=True,
                        finite=True)
  clip_G: float = hparam(G_CE, help="FFGB.C gradient bound G of Assumption 3.2 (CE: sqrt 2)", low=0,
                         low_open=True, finite=True, source="Shen et al. 2022, Assumption 3.2")
  clip_B: float | None = hparam(None, help="FFGB.C projection radius B (None: 2G/(mu gamma))", low=0,
                                low_open=True, finite=True, source="Shen et al. 2022, Thm D.1")
  lip_L: float | None = hparam(None, help="FFGB.L Lipschitz constant L of (16)-(17): wo_lip's query gradient "
                               "(None: the task's, shift_tabular 3)", low=0, low_open=True, finite=True,
                               source="Shen et al. 2022, eqs. 16-17")
  one_shot: bool = hparam(False, help="FFGB.L: learners computed in round 0 only",
                          source="Shen et al. 2022, Remark 3.1")
  ffgb_l_query: str = hparam("fixed", help="FFGB.L query: fixed (u - Delta, specs §2.4), printed (Alg. 4 as "
                             "printed)", choices=FFGB_L_QUERIES, source="Shen et al. 2022, Alg. 4; specs/ffgb.md §2.4")
  store_learners: int = hparam(0, help="FFGB: rounds of learners kept in the state (>= eval_every to write all)",
                               low=0)

  def __post_init__(self):
    validate(self)


class FFGBState(NamedTuple):
  """f^t as value caches plus logs.

  Attributes:
    f_train: (N, M_max, C) f^t on every client's points (0 on padding).
    f_test: (M_test, C) f^t on the test points.
    t: int32 rounds done.
    comm: float32 communication cost in models per client (starts at 2, [code]).
    gamma_hat: (m, K) empirical oracle quality of the last round's calls.
    gamma_hat_min_all: running min over all calls.
    clip_change: FFGB.C: ``max |clip(v) - v|`` on the clients' supports, last round.
    hbar: FFGB.L one-shot: (hbar_train (K, N, M, C), hbar_test (K, M_test, C), thetas).
    store: ring buffer of learners (see :func:`attach_learner_writer`) or None.
    diag: dict of float32 scalars, the last round's diagnostics (ffgb_c and
      ffgb_l only; {} otherwise), see :func:`make_ffgb`'s ``metrics``.
  """
  f_train: jax.Array
  f_test: jax.Array
  t: jax.Array
  comm: jax.Array
  gamma_hat: jax.Array
  gamma_hat_min_all: jax.Array
  clip_change: jax.Array
  hbar: Any
  store: Any
  diag: Any


def step_sizes(cfg: FFGBConfig, variant: str, t):
  """eta^{k,t} for k = 1..K, (K,) float32 (specs §2.2, §6.4).

  Args:
    cfg: the config.
    variant: one of :data:`VARIANTS`.
    t: round index (traced int32).
  """
  K = cfg.local_steps
  k = jnp.arange(1, K + 1, dtype=jnp.float32)
  tk = jnp.asarray(t, jnp.float32) * K
  mu_eff = 1.0 if variant == "ffgb_l" else cfg.mu
  if cfg.eta_schedule == "paper":
    eta = cfg.eta0 / (tk + k + 1.0) ** cfg.eta_decay_p
  elif cfg.eta_schedule == "code":
    eta = cfg.eta0 / (tk + K + (k - 1.0) + 1.0) ** cfg.eta_decay_p
  else:
    c = 2.0 if variant in ("ffgb", "ffgb_nores") else 4.0
    eta = c / (mu_eff * (tk + k + 1.0))
  eta = jnp.minimum(eta, cfg.eta_cap)
  if mu_eff > 0:
    eta = jnp.minimum(eta, cfg.mu_eta_cap / mu_eff)
  return eta


def combine_weights(etas, mu):
  """(rho, w): g^{K+1} = rho g^1 + sum_k w_k h_k for g <- (1 - eta mu) g - eta h.

  Alg. 2 line 5 unrolled over k (specs §2.8): rho = prod (1 - eta_k mu),
  w_k = -eta_k prod_{kappa > k} (1 - eta_kappa mu).
  """
  a = 1.0 - etas * mu
  suffix = jnp.cumprod(a[::-1])[::-1]  # prod_{kappa >= k}
  after = jnp.concatenate([suffix[1:], jnp.ones((1,), a.dtype)])
  return suffix[0], -etas * after


def clip(v, r):
  """Pi_R: per-coordinate projection onto [-r, r] (specs §1.1)."""
  return jnp.clip(v, -r, r)


def _loss_grad(loss, g, y, num_outputs):
  """grad_1 l(g(x_j), y_j) per sample (eq. 6): CE softmax(g) - e_y; square g - y."""
  if loss == "ce":
    return jax.nn.softmax(g, -1) - jax.nn.one_hot(y, num_outputs, dtype=g.dtype)
  return g - y


def make_client_round(task: Task, cfg: FFGBConfig, variant: str, oracle):
  """One client's K local steps (Alg. 2 / 5 / 4), returning learners and traces.

  Returns ``client(key, x, y, mask, n, f_i, etas) -> (thetas, aux)`` with
  thetas stacked over k (leading axis K) and aux = dict(g, delta, h, phi (K, M, C)
  per step (g is g^{k+1}), gamma_hat (K,), clip_change (K,)); for ffgb_c and
  ffgb_l also gamma_hat_inf, learner_lip, query_lip (K,) (empirical oracle
  quality of (13) and Lipschitz constants on the support,
  fedsim.models.weak_learners), entries (K,) = n C, and for ffgb_c
  n_clip_G1 / n_clip_G2 (K,): on-support entries the Alg. 5 line 6 / line 5
  clip changes.

  With a Sobolev oracle (``wo_lip``, FFGB.L only) the client draws
  ``sobolev_samples`` points z in its bounding box once per round and carries
  the residual's input-Jacobian there, so the query's Jacobian is closed form
  (specs §2.4-2.5): grad phi_k = grad u_i - grad Delta^{k-1} with
  grad Delta^k = grad Delta^{k-1} - grad u_i + grad h^k (Alg. 4 line 6
  differentiated), i.e. grad phi_k = k grad u_i - sum_{kappa<k} grad h^kappa,
  and grad u_i from eq. 17 (fedsim.tasks.functional.mcshane_grad, L = lip_L).
  """
  loss = task.info.get("loss", "ce")
  C = _num_outputs(task)
  wl = fedsim_models.weak_learners  # imported here, not with this module: it imports flax
  residual = variant != "ffgb_nores"
  G = cfg.clip_G
  G1 = (1.0 - cfg.gamma) * G / cfg.gamma
  G2 = (2.0 - cfg.gamma) * G / cfg.gamma
  mu = cfg.mu
  diag = variant in ("ffgb_c", "ffgb_l")
  sob = variant == "ffgb_l" and getattr(oracle, "sobolev", False)
  if getattr(oracle, "sobolev", False) and variant != "ffgb_l":
    raise ValueError(f"weak_learner={oracle.name} (Sobolev, eq. 25) needs the closed-form query "
                     f"gradient of FFGB.L; accepted for {variant}: scaled, rf_ridge, mlp, cnn, wo_inf")
  L = lip_constant(task, cfg)
  if sob and L is None:
    raise ValueError("weak_learner=wo_lip needs lip_L (L of eq. 16-17): set it or use a task "
                     "with info['lip_L']")

  def client(key, x, y, mask, n, f_i, etas):
    m = mask[:, None]
    keys = jax.random.split(key, cfg.local_steps)
    if sob:  # eq. 25's Monte-Carlo points and grad u_i there (eq. 17), once per round
      from fedsim.tasks.functional import mcshane_grad
      xf = x.reshape(x.shape[0], -1)
      z = wl.sobolev_points(jax.random.fold_in(key, 1 << 20), xf, mask, cfg.sobolev_samples)
      du = mcshane_grad(xf, y, L, z, mask)  # (S, C, d)
      d_grad0 = jnp.zeros_like(du)
    else:
      d_grad0 = jnp.zeros(())

    def kstep(carry, inp):
      g, delta, d_grad = carry
      kk, eta = inp
      extra = {}
      if variant == "ffgb_l":
        u = y  # McShane u_i interpolates the data (eq. 17): u_i(x_ij) = y_ij
        phi = (u - delta) if cfg.ffgb_l_query == "fixed" else (delta - u)  # Alg. 4 line 4 (sign fix)
        phi = jnp.where(m, phi, 0.0)
        if sob:
          dphi = (du - d_grad) if cfg.ffgb_l_query == "fixed" else (d_grad - du)  # grad of line 4
          theta = oracle.fit(kk, x, phi, mask, n, z, dphi)  # WO^lip, eq. 25
          d_grad = d_grad - du + wl.input_jacobian(oracle.apply, theta, z)  # grad of line 6
        else:
          theta = oracle.fit(kk, x, phi, mask, n)
        h = jnp.where(m, oracle.apply(theta, x), 0.0)
        g_new = (1.0 - eta) * g + eta * h  # Alg. 4 line 5
        d_new = delta - u + h  # Alg. 4 line 6
        change = jnp.zeros(())
      else:
        grad = jnp.where(m, _loss_grad(loss, g, y, C), 0.0)
        phi = delta + grad if residual else grad  # Alg. 2 line 3 (Delta = 0: ablation)
        theta = oracle.fit(kk, x, phi, mask, n)  # Alg. 2 line 4
        h = jnp.where(m, oracle.apply(theta, x), 0.0)
        d_new = phi - h  # Alg. 2 line 6: Delta + gradR - h
        if variant == "ffgb_c":
          h_use, d_clip = clip(h, G2), clip(d_new, G1)  # Alg. 5 lines 5-6
          change = jnp.maximum(jnp.max(jnp.abs(h_use - h) * m), jnp.max(jnp.abs(d_clip - d_new) * m))
          extra = dict(n_clip_G1=jnp.sum(m & (jnp.abs(d_new) > G1)).astype(jnp.float32),
                       n_clip_G2=jnp.sum(m & (jnp.abs(h) > G2)).astype(jnp.float32))
          d_new = d_clip
        else:
          h_use, change = h, jnp.zeros(())
        g_new = g - eta * (h_use + mu * g)  # Alg. 2 / 5 line 5
        if not residual:
          d_new = jnp.zeros_like(d_new)
      g_new = jnp.where(m, g_new, 0.0)
      aux = dict(g=g_new, delta=d_new, h=h, phi=phi, gamma_hat=wl.gamma_hat(h, phi, mask),
                 clip_change=change, **extra)
      if diag:
        aux.update(gamma_hat_inf=wl.gamma_hat_inf(h, phi, mask),
                   learner_lip=wl.empirical_lip(h, x, mask),
                   query_lip=wl.empirical_lip(phi, x, mask),
                   entries=jnp.sum(mask).astype(jnp.float32) * C)
      return (g_new, d_new, d_grad), (theta, aux)

    (_, _, _), (thetas, aux) = jax.lax.scan(kstep, (f_i, jnp.zeros_like(f_i), d_grad0), (keys, etas))
    return thetas, aux

  return client


def _num_outputs(task: Task) -> int:
  return int(task.info.get("num_outputs", task.info.get("num_classes", 1)))


def lip_constant(task: Task, cfg: FFGBConfig) -> float | None:
  """FFGB.L's L (eqs. 16-17): ``cfg.lip_L``, else ``task.info["lip_L"]``, else None."""
  if cfg.lip_L is not None:
    return float(cfg.lip_L)
  v = task.info.get("lip_L")
  return None if v is None else float(v)


def diag_keys(variant: str) -> tuple:
  """Names of the per-round diagnostics in ``FFGBState.diag`` (and the metrics)."""
  if variant == "ffgb_c":
    return ("clip_fraction_G1", "clip_fraction_G2", "clip_fraction_G2_all", "learner_lip",
            "query_lip", "gamma_hat_inf_min", "gamma_hat_inf_mean", "clip_fraction_B")
  if variant == "ffgb_l":
    return ("learner_lip", "query_lip", "gamma_hat_inf_min", "gamma_hat_inf_mean", "f_lip")
  return ()


def _apply_clip(variant, cfg):
  if variant == "ffgb_c":
    g2 = (2.0 - cfg.gamma) * cfg.clip_G / cfg.gamma
    return lambda v: clip(v, g2)
  return lambda v: v


def clip_radius_B(cfg: FFGBConfig) -> float:
  """B of Alg. 5 / Thm D.1: clip_B, else 2G/(mu gamma) (inf when mu = 0)."""
  if cfg.clip_B is not None:
    return float(cfg.clip_B)
  return 2 * cfg.clip_G / (cfg.mu * cfg.gamma) if cfg.mu > 0 else float("inf")


def build_oracle(task: Task, cfg: FFGBConfig):
  """The weak-learning oracle of ``cfg`` for ``task``'s inputs and outputs."""
  fs = tuple(task.client_data["x"].shape[2:])
  return fedsim_models.weak_learners.make_oracle(
      cfg.weak_learner, num_outputs=_num_outputs(task), feature_shape=fs,
      gamma=cfg.gamma, steps=cfg.oracle_steps, lr=cfg.oracle_lr,
      batch=cfg.oracle_batch, output_act=cfg.mlp_output_act, init=cfg.mlp_init,
      rf_features=cfg.rf_features, rf_bandwidth=cfg.rf_bandwidth, ridge=cfg.ridge,
      family=cfg.wo_family, wo_p=cfg.wo_p, sobolev_weight=cfg.sobolev_weight,
      dedup=cfg.oracle_dedup)


def comm_per_round(cfg: FFGBConfig, num_clients: int) -> int:
  """Models communicated per client per round: m K (N K at full participation,
  specs §1.4: upload K, download (N - 1) K)."""
  return (cfg.clients_per_round or num_clients) * cfg.local_steps


def make_ffgb(task: Task, cfg: FFGBConfig, name: str = "ffgb") -> FederatedAlgorithm:
  """Builds ``ffgb``, ``ffgb_nores``, ``ffgb_c`` or ``ffgb_l`` on ``task``
  (``ffgb_code`` / ``ffgb_nores_code``: the first two under the registry
  defaults :data:`FFGB_CODE`, see :data:`CODE_PRESETS`).

  ``task.data["clients"]`` needs ``x`` (N, M, ...), ``y`` ((N, M) int labels
  for CE, (N, M, C) float targets for square loss), ``mask``; ``task.info``
  gives ``loss`` (``ce`` default, ``square``) and ``num_outputs`` /
  ``num_classes``. Score it with ``fedsim.tasks.functional.cache_view(task)``.

  Raises:
    ValueError: unknown variant / schedule / oracle, bad settings, or a task without labelled
      client samples, class labels (ce) or square loss (ffgb_l: without square loss), before
      anything compiles.
  """
  variant = CODE_PRESETS.get(name, name)
  if variant not in VARIANTS:
    raise ValueError(f"unknown FFGB variant {name!r}; accepted: {', '.join(VARIANTS + tuple(CODE_PRESETS))}")
  if cfg.eta_schedule not in SCHEDULES:
    raise ValueError(f"eta_schedule must be one of {', '.join(SCHEDULES)}; got {cfg.eta_schedule!r}")
  if cfg.eta_schedule == "theory" and variant != "ffgb_l" and cfg.mu <= 0:
    raise ValueError("eta_schedule=theory needs mu > 0")
  if cfg.local_steps < 1:
    raise ValueError(f"local_steps must be >= 1; got {cfg.local_steps}")
  if not 0 < cfg.gamma <= 1:
    raise ValueError(f"gamma must be in (0, 1]; got {cfg.gamma}")
  if not {"x", "y", "mask"} <= set(getattr(task, "client_data", None) or {}):
    raise ValueError(f"{name} needs a task whose clients hold labelled samples (x, y), e.g. softmax, mlp, cnn "
                     f"or shift_tabular; {task.name!r} has none")
  if task.info.get("loss", "ce") == "ce" and not (jnp.issubdtype(task.client_data["y"].dtype, jnp.integer)
                                                  and ("num_classes" in task.info or "num_outputs" in task.info)):
    raise ValueError(f"{name} needs class labels (integer y and the task's num_classes: softmax, mlp, cnn, ...) "
                     f"or a square-loss task (shift_tabular); {task.name!r} has neither")
  if variant == "ffgb_l" and task.info.get("loss", "ce") != "square":
    raise ValueError(f"ffgb_l needs a square-loss task (problem (14)): task=shift_tabular with tabular_loss=square; "
                     f"{task.name!r} has loss {task.info.get('loss', 'ce')}")
  if cfg.ffgb_l_query not in ("fixed", "printed"):
    raise ValueError(f"ffgb_l_query must be fixed or printed; got {cfg.ffgb_l_query!r}")
  N = task.num_clients
  m = cfg.clients_per_round or N
  if not 1 <= m <= N:
    raise ValueError(f"clients_per_round must be in [1, {N}]; got {m}")
  K = cfg.local_steps
  oracle = build_oracle(task, cfg)
  client = make_client_round(task, cfg, variant, oracle)
  out_clip = _apply_clip(variant, cfg)
  C = _num_outputs(task)
  cd = task.client_data
  M = cd["x"].shape[1]
  feat = cd["x"].shape[2:]
  has_test = "x" in task.data["eval"]
  M_test = task.data["eval"]["x"].shape[0] if has_test else 0
  mu_round = 1.0 if variant == "ffgb_l" else cfg.mu
  sign = 1.0 if variant == "ffgb_l" else None
  theta_shape = jax.eval_shape(oracle.fit, jax.random.key(0), cd["x"][0], jnp.zeros((M, C)),
                               cd["mask"][0], jnp.int32(1))
  num_params = sum(int(np.prod(leaf.shape)) for leaf in jax.tree_util.tree_leaves(theta_shape))
  # Exact ledgers (specs §1.4: upload K, download (N - 1) K learners per sampled
  # client): static Python ints of any size, kept exact as RoundStats units.
  bytes_up = m * K * num_params * 4
  bytes_down = (N - 1) * m * K * num_params * 4
  models = comm_per_round(cfg, N)
  R = int(cfg.store_learners)
  B = clip_radius_B(cfg) if variant == "ffgb_c" else float("inf")

  def weights(etas):
    rho, w = combine_weights(etas, mu_round)
    return (rho, -w) if sign is not None else (rho, w)  # FFGB.L: g <- (1-eta) g + eta h

  def learners_round(key, data, f_train):
    """Sampled clients' K steps, and hbar_k on all points (Alg. 1 line 4)."""
    k_sample, k_clients, _ = rng.round_subkeys(key)
    ids = sample_clients(k_sample, N, m)
    c = data["clients"]
    def take(a):
      return a[ids]
    keys = rng.client_keys(k_clients, ids)
    return ids, keys, (take(c["x"]), take(c["y"]), take(c["mask"]), take(data["sizes"]),
                       take(f_train))

  def hbar_of(thetas, data):
    """(1/m) sum_i out_clip(h_{i,k}) on all clients' and test points, per k;
    and (FFGB.C) the number of real-train-point entries the G2 clip changes."""
    x_all = data["clients"]["x"].reshape((N * M,) + feat)
    m_all = data["clients"]["mask"].reshape(N * M, 1)
    x_test = data["eval"]["x"] if has_test else jnp.zeros((0,) + feat, jnp.float32)
    flat = jax.tree_util.tree_map(lambda a: a.reshape((m * K,) + a.shape[2:]), thetas)
    ks = jnp.tile(jnp.arange(K), m)

    def acc(carry, inp):
      tr, te, cnt = carry
      th, k = inp
      h_all = oracle.apply(th, x_all)
      h_use = out_clip(h_all)
      tr = tr.at[k].add(h_use / m)
      te = te.at[k].add(out_clip(oracle.apply(th, x_test)) / m) if has_test else te
      cnt = cnt + jnp.sum(m_all & (h_use != h_all)).astype(jnp.float32)
      return (tr, te, cnt), None

    init = (jnp.zeros((K, N * M, C)), jnp.zeros((K, M_test, C)), jnp.zeros(()))
    (tr, te, cnt), _ = jax.lax.scan(acc, init, (flat, ks))
    tr = tr.reshape(K, N, M, C) * data["clients"]["mask"][None, :, :, None]
    return tr, te, cnt

  def learner_diag(aux, cnt, data):
    """The round's learner diagnostics (see ``metrics``)."""
    if variant not in ("ffgb_c", "ffgb_l"):
      return {}
    out = dict(learner_lip=jnp.max(aux["learner_lip"]), query_lip=jnp.max(aux["query_lip"]),
               gamma_hat_inf_min=jnp.min(aux["gamma_hat_inf"]),
               gamma_hat_inf_mean=jnp.mean(aux["gamma_hat_inf"]))
    if variant == "ffgb_c":
      ent = jnp.maximum(jnp.sum(aux["entries"]), 1.0)
      n_all = jnp.sum(data["clients"]["mask"]).astype(jnp.float32) * C * m * K
      out.update(clip_fraction_G1=jnp.sum(aux["n_clip_G1"]) / ent,
                 clip_fraction_G2=jnp.sum(aux["n_clip_G2"]) / ent,
                 clip_fraction_G2_all=cnt / jnp.maximum(n_all, 1.0))
    return out

  def compute(key, data, state, etas):
    ids, keys, args = learners_round(key, data, state.f_train)
    thetas, aux = jax.vmap(client, in_axes=(0, 0, 0, 0, 0, 0, None))(keys, *args, etas)
    tr, te, cnt = hbar_of(thetas, data)
    return (ids, thetas, aux["gamma_hat"], jnp.max(aux["clip_change"]), tr, te,
            learner_diag(aux, cnt, data))

  def init(key, shared_key):
    del shared_key  # no draws shared by all parties (rng.init_keys)
    del key
    gh = jnp.ones((m, K))
    store = None
    if R > 0:
      store = {"params": jax.tree_util.tree_map(lambda s: jnp.zeros((R, m, K) + s.shape, s.dtype),
                                                theta_shape),
               "w": jnp.zeros((R, K)), "rho": jnp.ones((R,)), "ids": jnp.zeros((R, m), jnp.int32),
               "t": jnp.full((R,), -1, jnp.int32)}
    hbar = None
    if variant == "ffgb_l" and cfg.one_shot:
      hbar = (jnp.zeros((K, N, M, C)), jnp.zeros((K, M_test, C)),
              jax.tree_util.tree_map(lambda s: jnp.zeros((m, K) + s.shape, s.dtype), theta_shape),
              jnp.zeros((m,), jnp.int32), gh)
    return FFGBState(f_train=jnp.zeros((N, M, C)), f_test=jnp.zeros((M_test, C)),
                     t=jnp.zeros((), jnp.int32), comm=jnp.float32(2.0), gamma_hat=gh,
                     gamma_hat_min_all=jnp.full((), jnp.inf, gh.dtype), clip_change=jnp.zeros(()),
                     hbar=hbar, store=store,
                     diag={k: jnp.float32(jnp.nan) for k in diag_keys(variant)})

  def as_f32(d):
    return {k: jnp.asarray(v).astype(jnp.float32) for k, v in d.items()}

  def round_fn(state: FFGBState, key, data):
    t = state.t
    etas = step_sizes(cfg, variant, t)
    if state.hbar is not None:  # Remark 3.1: learners from round 0 only
      lkeys = [k for k in diag_keys(variant) if k != "f_lip"]

      def fresh(_):
        ids, th, gh, _, tr, te, dl = compute(key, data, state, etas)
        return (tr, te, th, ids, gh), as_f32(dl)
      hbar, dl = jax.lax.cond(t == 0, fresh,
                              lambda _: (state.hbar, {k: state.diag[k] for k in lkeys}), None)
      tr, te, thetas, ids, gh = hbar
      change = jnp.zeros(())
      sent = (t == 0).astype(jnp.int32)
    else:
      ids, thetas, gh, change, tr, te, dl = compute(key, data, state, etas)
      hbar, sent = None, jnp.int32(1)
    rho, w = weights(etas)
    f_train = rho * state.f_train + jnp.einsum("k,knmc->nmc", w, tr)
    f_test = rho * state.f_test + jnp.einsum("k,kmc->mc", w, te)
    diag = as_f32(dl)  # float32 logs (FFGBState.diag), with --x64 too
    mask = data["clients"]["mask"]
    if variant == "ffgb_c":  # entries of f^{t+1} that the output projection Pi_B changes
      n_b = jnp.sum(mask[..., None] & (jnp.abs(f_train) > B)) + jnp.sum(jnp.abs(f_test) > B)
      den = (jnp.sum(mask) + M_test) * C
      diag["clip_fraction_B"] = n_b.astype(jnp.float32) / jnp.maximum(den, 1).astype(jnp.float32)
    if variant == "ffgb_l":  # ||f^{t+1}||_lip on each client's points (C = {||f||_lip <= L/gamma})
      lip = jax.vmap(fedsim_models.weak_learners.empirical_lip)(f_train, data["clients"]["x"], mask)
      diag["f_lip"] = jnp.max(lip).astype(jnp.float32)
    store = state.store
    if store is not None:
      slot = t % R
      def put(buf, v):
        return buf.at[slot].set(v)
      store = {"params": jax.tree_util.tree_map(put, store["params"], thetas),
               "w": put(store["w"], w / m), "rho": put(store["rho"], rho),
               "ids": put(store["ids"], ids), "t": put(store["t"], t)}
    new = FFGBState(f_train=f_train, f_test=f_test, t=t + 1,
                    comm=state.comm + models * sent.astype(jnp.float32), gamma_hat=gh,
                    gamma_hat_min_all=jnp.minimum(state.gamma_hat_min_all, jnp.min(gh)),
                    clip_change=change, hbar=hbar, store=store, diag=diag)
    queries = jnp.sum(data["sizes"][ids]) * K * sent
    return new, make_stats(queries, times(sent, bytes_up), times(sent, bytes_down), m * sent)

  def solution(state):
    # Alg. 1 line 5: FFGB.C returns Pi_B(f^T).
    return {"train": clip(state.f_train, B), "test": clip(state.f_test, B)}

  def metrics(state):
    """Logged at every evaluation. Besides comm and the oracle's L2 quality
    gamma_hat, FFGB.C / FFGB.L log the last round's diagnostics ``state.diag``:

    * ``clip_fraction_G1`` / ``clip_fraction_G2``: fraction of the sampled
      clients' on-support entries (points x outputs, over the K steps) that
      Alg. 5 line 6's Pi_{G1} (residual) / line 5's Pi_{G2} (learner) changes;
      0 whenever the oracle meets (13) with ``gamma`` (Lemma D.1).
    * ``clip_fraction_G2_all``: the same for Pi_{G2} on every client's points
      (where the server evaluates the learners: mostly off their supports).
    * ``clip_fraction_B``: fraction of f^{t+1}'s entries on the real training
      and test points that the output projection Pi_B (Alg. 1 / Thm D.1) changes.
    * ``learner_lip`` / ``query_lip``: max over the round's learners h / queries
      phi of the empirical Lipschitz constant on the client's support (max
      difference quotient over pairs of distinct points, a lower bound of
      ||.||_lip; weak_learners.empirical_lip). ``f_lip`` (FFGB.L): the same for
      f^{t+1} on each client's points.
    * ``gamma_hat_inf_min`` / ``_mean``: empirical quality of (13),
      1 - ||h - phi||_{alpha_i,inf} / ||phi||_{alpha_i,inf}, over the round's calls.
    """
    return {"comm": state.comm, "gamma_hat_mean": jnp.mean(state.gamma_hat),
            "gamma_hat_min": jnp.min(state.gamma_hat),
            "gamma_hat_min_all": state.gamma_hat_min_all, "clip_change": state.clip_change,
            **state.diag}

  return FederatedAlgorithm(name=name, init=init, round=round_fn, solution=solution, hparams=cfg,
                            metrics=metrics)


# ----------------------------------------------------------------------- learners on disk
def attach_learner_writer(alg: FederatedAlgorithm, out_dir: str, cfg: FFGBConfig, variant: str):
  """Writes each round's learners to ``out_dir/round_XXXXX.npz`` at evaluations.

  The state's ring buffer (``store_learners = R``, set R >= eval_every so no
  round is lost) reaches the host through ``jax.debug.callback`` inside the
  (jitted, once per evaluation) metrics function, never inside a round chunk.
  Each file holds ``leaf_<j>`` (m, K, ...) parameter leaves, ``w`` (K,) (already
  divided by m), ``rho``, ``ids``, ``t``, ``clip_h`` (G2 for FFGB.C, else inf)
  and ``clip_B``; f^T(x) = Pi_B(sum_t prod_{t' > t} rho_t' sum_{i,k} w_k clip_h(h_{t,i,k}(x))).

  In a multi-host run only process 0 (``jax.process_index() == 0``) creates
  ``out_dir`` and writes: every process runs the same program (the callback is
  attached everywhere) and the others return from it without touching disk.

  Raises:
    ValueError: the algorithm keeps no learners (store_learners = 0).
  """
  if cfg.store_learners <= 0:
    raise ValueError("store_learners must be > 0 to write learners")
  writer = jax.process_index() == 0   # read here: the callback body makes no JAX call
  if writer:
    os.makedirs(out_dir, exist_ok=True)
  clip_h = (2.0 - cfg.gamma) * cfg.clip_G / cfg.gamma if variant == "ffgb_c" else np.inf
  clip_B = clip_radius_B(cfg) if variant == "ffgb_c" else np.inf

  def write(store):
    if not writer:  # multi-host: one writer
      return
    leaves = jax.tree_util.tree_leaves(store["params"])   # pytree flattening: pure Python
    for s, t in enumerate(np.asarray(store["t"])):
      path = os.path.join(out_dir, f"round_{int(t):05d}.npz")
      if t < 0 or os.path.exists(path):
        continue
      arrays: dict[str, Any] = {f"leaf_{j}": np.asarray(leaf[s]) for j, leaf in enumerate(leaves)}
      tmp = path + ".tmp.npz"
      np.savez(tmp, w=np.asarray(store["w"][s]), rho=np.asarray(store["rho"][s]),
               ids=np.asarray(store["ids"][s]), t=int(t), clip_h=clip_h, clip_B=clip_B, **arrays)
      os.replace(tmp, path)

  base = alg.metrics

  def metrics(state):
    jax.debug.callback(write, state.store)
    return {} if base is None else base(state)

  return alg._replace(metrics=metrics)


def load_ensemble(out_dir: str):
  """Reads the round files written by :func:`attach_learner_writer`, in round order.

  Returns:
    list of dicts (``leaves``, ``w``, ``rho``, ``t``, ``clip_h``, ``clip_B``).

  Raises:
    FileNotFoundError: no files, or a round is missing (rounds must be 0..T-1).
  """
  files = sorted(glob.glob(os.path.join(out_dir, "round_*.npz")))
  if not files:
    raise FileNotFoundError(f"{out_dir}: no round_*.npz learner files")
  out = []
  for f in files:
    z = np.load(f)
    leaves = [z[f"leaf_{j}"] for j in range(sum(k.startswith("leaf_") for k in z.files))]
    out.append({"leaves": leaves, "w": z["w"], "rho": float(z["rho"]), "t": int(z["t"]),
                "clip_h": float(z["clip_h"]), "clip_B": float(z["clip_B"])})
  ts = [r["t"] for r in out]
  if ts != list(range(len(ts))):
    raise FileNotFoundError(f"{out_dir}: rounds {ts} are not 0..{len(ts) - 1}")
  return out


def predict_saved(out_dir: str, task: Task, cfg: FFGBConfig, xq) -> jax.Array:
  """f^T on new inputs ``xq`` ``(B, *feature_shape)`` from the learner files; (B, C)."""
  oracle = build_oracle(task, cfg)
  M, C = task.client_data["x"].shape[1], _num_outputs(task)
  tmpl = jax.eval_shape(oracle.fit, jax.random.key(0), task.client_data["x"][0],
                        jnp.zeros((M, C)), task.client_data["mask"][0], jnp.int32(1))
  treedef = jax.tree_util.tree_structure(tmpl)
  apply = jax.jit(jax.vmap(jax.vmap(oracle.apply, (0, None)), (0, None)))
  f = jnp.zeros((xq.shape[0], C))
  rounds = load_ensemble(out_dir)
  for r in rounds:  # host-side export path, not a training loop
    params = jax.tree_util.tree_unflatten(treedef, [jnp.asarray(leaf) for leaf in r["leaves"]])
    h = clip(apply(params, xq), r["clip_h"])  # (m, K, B, C)
    f = r["rho"] * f + jnp.einsum("k,mkbc->bc", jnp.asarray(r["w"]), h)
  return clip(f, rounds[-1]["clip_B"])
