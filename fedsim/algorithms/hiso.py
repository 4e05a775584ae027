"""HiSo and DeComFL: scalar-only federated zeroth-order optimization from shared
seeds (Li et al. 2025, "Reconciling Hessian-Informed Acceleration and Scalar-Only
Communication for Efficient Federated Zeroth-Order Fine-Tuning"; specs/hiso.md).

DeComFL (Li et al. 2024b) is HiSo with H fixed at the identity (Corollary 2;
spec §2.7): both are built here by :func:`make_hiso` from the same parts, and
``make_decomfl`` only switches the H update off (H stays 1). DeComFL keeps the
constant H = 1 in its state and multiplies by H^{-1/2} = 1 like HiSo does: XLA
contracts multiply-adds into FMAs differently in different programs, so a
separate z = u code path would agree with HiSo(nu = 0) only to rounding, which
finite differences amplify by 1/mu; sharing the arithmetic makes HiSo with
nu = 0, H_0 = 1 bitwise DeComFL (spec §7 item 3) at the cost of d reals.

One round r (Alg. 2, Alg. 2b, App. E; spec §2.4-§2.5):

* the server samples C_r, ``|C_r| = m``, uniformly without replacement (Alg. 2
  line 5); the seeds of the round are the indices (r, k, p) under the run's
  shared stream ``rng.stream(root, "shared")``, which ``init`` receives as
  ``shared_key`` (fedsim.estimators.shared_seed), identical for every client
  and independent of the init stream;
* each sampled client runs tau local steps from the global model x_r; step k
  draws one mini-batch, evaluates the P scalars
  g^{(i)}_{r,k,p} = (f_i(x^{(i)}_{r,k} + mu z_{r,k,p}) - f_i(x^{(i)}_{r,k})) / mu
  with z = H_r^{-1/2} u (Alg. 2b line 4, eq. 8, eq. 112) and moves
  x^{(i)}_{r,k+1} = x^{(i)}_{r,k} - eta (1/P) sum_p g^{(i)}_{r,k,p} z_{r,k,p}
  (Alg. 2b lines 5-6, eq. 113); then it resets to x_r (Alg. 2b line 8) and
  uploads its tau*P scalars (Alg. 2 line 11);
* the server averages them uniformly, g_{r,k,p} = (1/m) sum_i g^{(i)}_{r,k,p}
  (Alg. 2 line 13; uniform in paper and code), and every party applies the
  round with :func:`apply_round`: x_{r+1} = x_r - eta sum_k Delta x_{r,k},
  Delta x_{r,k} = (1/P) sum_p g_{r,k,p} H_r^{-1/2} u_{r,k,p} (Alg. 2 lines 14,
  16; Alg. 2a line 5), then H_r -> H_{r+1} (after the tau model updates; [code]
  and §4.3 order).

H update variants (spec §2.3; flags ``k_update``, ``h_signal``, ``eps``,
``clip_lo``/``clip_hi``):

* ``h_signal=delta_x`` (§4.3 display, eq. 12, [code]): the signal is
  Delta x_{r,k} (without eta); ``round_displacement`` (App. C):
  (x_{r+1} - x_r)^2, which includes eta^2 and sums the tau steps;
* ``k_update=last`` ([code] LAST_LOCAL_UPDATE, default): one EMA per round with
  Delta x_{r,tau-1}; ``all`` (eq. 12): tau chained EMAs, each Delta x_{r,k}
  built with H_r; ``all_code`` ([code] ALL_LOCAL_UPDATES): the model steps use
  H_r as in ``all``, then tau chained EMAs whose signal for step k is rebuilt
  with the already-updated H (server.py l. 190-198, adam_forward.py l. 121-125);
* H <- (1 - nu) H + nu (signal + eps) (eq. 12 / §4.3 with the paper's epsilon;
  [code] has no epsilon: ``eps=0``), then H <- clip(H, clip_lo, clip_hi) when
  set (Assumption 4; "clipping step", Liu et al. 2023; off by default);
* ``preconditioner=scalar`` is an ablation (spec §4, last bullet): the
  directions use mean(H) 1 instead of the diagonal H.
* ``step_norm=trace`` keeps eq. 7's least-squares factor (u^T H^{-1} u)^{-1}
  (in expectation, Tr(H^{-1})^{-1}, times d so that H = 1 is DeComFL) instead
  of absorbing it into eta (eq. 8, [code]: ``none``). The directions then use
  H / hbar, hbar = d / Tr(H^{-1}): z = (H/hbar)^{-1/2} u, ``E||z||^2 = d``, and the
  overall scale of H no longer changes the step (only its shape does).

What the H update learns (tests/algorithms/test_hiso.py
``test_estimator_mean_and_second_moment`` and
``test_h_signal_moment_fixes_h_near_a_multiple_of_one``). For z = H^{-1/2} u and a quadratic (exact up to mu),
the EMA signal has mean (diagonal of eq. 120's covariance)

    E[Delta x_j^2] = H_j^{-1} [ S/P + (1 + 1/P) (grad_j)^2 / H_j ],
    S = grad^T H^{-1} grad,

so the fixed point of H <- (1 - nu) H + nu Delta x^2 is
H_j^3 = (S/P) H_j + (1 + 1/P) grad_j^2: the first, coordinate-free term comes
from the preconditioner's own footprint H^{-1} on the direction and dominates
unless grad_j^2 / H_j carries about 1/P of S, so H stays close to a multiple of
1 for d >> P whatever the curvature (spec §4 last bullet). The scale of that
multiple follows sqrt(S/P) ~ ``|grad|^{2/3}``, so with ``step_norm=none`` the
expected step H^{-1} grad grows as the gradient shrinks and the run settles at
a floor that grows with eta (edge of stability) instead of converging.
On the d = 1000 toy (hiso_toy_illcond.cfg) corr(log H, log lambda) stays below
0.1 and Tr(A H^{-1}) / (Tr(A) mean(H^{-1})) >= 0.97 (experiments/hiso/h_diagnostic.py),
while the oracle H = lambda would give 0.05.

The authors' code as presets (registry names ``hiso_code`` and ``decomfl_code``,
fedsim/algorithms/__init__.py; ZidongLiu/DeComFL 0c426e6, ``decomfl_main.py
--estimator-type=adam_forward`` on MNIST): eps = 0 (no epsilon in
``update_K_vec``, adam_forward.py l. 54-56), P = 1 (``num_pert``,
experiment_helper/cli_parser.py l. 113-117), b = 8 (``train_batch_size``,
experiment_helper/data.py l. 41, the clients' DataLoader l. 199-202), SGD
weight decay 1e-5 (``weight_decay``; prepare_settings.py l. 87-93, MNIST);
everything else already equals the code: lr 1e-4 (cli_parser.py l. 90), mu 1e-3
(l. 112), nu = 1 - 0.95 (l. 137-141), H_0 = 1 (adam_forward.py l. 39), k_update
``last`` (cli_parser.py l. 132-136), forward differences sharing f(x) over the P
perturbations (adam_forward.py l. 81-93), momentum 0 (cli_parser.py l. 91),
tau = 1 (l. 164). ``decomfl_code`` is the vanilla estimator with the same
settings and its default central differences (cli_parser.py l. 123-127). Not
reproduced: the code draws mini-batches by epoch-shuffled DataLoader (fedsim:
i.i.d. with replacement) and splits image data IID (a task setting here); its
``--no-optim`` (Paramwise) path applies the EMA once per perturbation (l.
255-270), which equals the Batch rule above only for P = 1.

Two modes (``client_state``):

* ``none`` (fast): the state is (x, H) and the round counter; per-round bytes
  follow the paper's tables: tau*P*4 up and tau*P*4 down per participating client
  (2*tau*P*4 = 40 B at P = 5, tau = 1; Table 2 / Table 5 arithmetic, spec §3.3).
* ``replay`` (protocol): every client keeps its own (x, H) from the start of its
  last participated round r'_i and, when sampled at round r, replays rounds
  r'_i..r-1 from the history of averaged scalars alone with the same
  :func:`apply_round` the server uses (Alg. 2 lines 8-9, Alg. 2a), then runs its
  local steps from its *own* replayed model. The history is a ring buffer of
  ``replay_history`` rounds of (tau, P) scalars; a client absent longer than that
  pulls the full model (and H) instead (d (or 2d) reals, counted, see
  ``full_pulls``). Bytes down are the scalars a client actually needs:
  (r - r'_i) tau P 4 (seeds are the round indices, not counted, as in the
  paper's tables). ``ReplayState.mismatch`` records the largest difference
  between a replayed client state and the server's over the run (0.0 = bitwise).
  Client state is (N, d) twice: O(N d) memory, for tests and download
  measurements; the fast mode's state is O(d).

Memory: directions are regenerated from their keys inside loops over p
(fedsim.estimators.shared_seed), so no (P, d) or (tau, d) matrix is ever held;
the vmapped round holds O(m d) temporaries.

Queries per participating client per round: tau * (P + 1) evaluations of f_i
on a b-sample mini-batch (forward) or tau * 2P (central), times b when the task
is stochastic.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple, cast

import chex
import jax
import jax.numpy as jnp

from fedsim.algorithms.local import BYTES_PER_REAL, flat_problem, flat_solution
from fedsim.config import FieldError, hparam, validate
from fedsim.core import rng
from fedsim.core.reduce import pairwise_sum
from fedsim.core.sampling import sample_clients
from fedsim.core.types import FederatedAlgorithm, Task, make_stats
from fedsim.estimators import shared_seed

K_UPDATES = ("last", "all", "all_code")
H_SIGNALS = ("delta_x", "round_displacement")
PRECONDITIONERS = ("diagonal", "scalar")
STEP_NORMS = ("none", "trace")
CLIENT_STATES = ("none", "replay")


# The authors' code (ZidongLiu/DeComFL 0c426e6) as presets: the registry defaults of
# ``hiso_code`` and ``decomfl_code`` (sources, file and line, in the module docstring).
_CODE_COMMON = {"num_perturbations": 1, "batch_size": 8, "weight_decay": 1e-5}
HISO_CODE = {**_CODE_COMMON, "eps": 0.0}                 # adam_forward.py: forward FD, no epsilon
DECOMFL_CODE = {**_CODE_COMMON, "fd_scheme": "central"}  # vanilla estimator's default FD


@chex.dataclass(frozen=True)
class DeComFLConfig:
  """DeComFL hyperparameters (Li et al. 2025, §6 / App. F; spec §2.8). The paper prints
  no table: defaults are the authors' code's ([code], ZidongLiu/DeComFL 0c426e6)
  unless the paper states a value.

  Attributes:
    lr: eta; [code] ``lr=1e-4`` (tuned per task in the paper; set it per task).
    smoothing: mu; [code] ``mu=1e-3``.
    num_perturbations: P; paper §6 "five perturbations for all ZO methods"
      ([code] ``num_pert=1``).
    local_steps: tau; [code] ``local_update_steps=1``.
    batch_size: b, samples per local step shared by all its evaluations;
      [code] README example 32 ([code] default 8).
    clients_per_round: m (None = all N); paper: 8 of 64 (MNIST), 2 of 6 (LLM).
    fd_scheme: ``forward`` (paper eq. 1, eq. 4) or ``central`` ([code] default
      of the vanilla DeComFL estimator).
    client_state: ``none`` (fast mode: server (x, H) only) or ``replay``
      (protocol mode: per-client last-seen state, replay from scalars).
    replay_history: rounds of averaged scalars kept for replay (ring buffer;
      ``replay`` mode only).
    weight_decay: lambda >= 0 of the authors' torch.optim.SGD (coupled L2, momentum
      0): every model step is x <- x - eta (Delta x + lambda x), on the clients'
      local steps and in every party's round update alike ([code]
      experiment_helper/prepare_settings.py ``get_optimizer`` l. 87-121: 1e-5 for
      MNIST and Fashion-MNIST, 5e-4 for CIFAR-10 and LLM classification, 0 for LLM
      generation; the server and every client use it, decomfl_main.py l. 67-69,
      101-103). The paper's step is plain x - eta Delta x: 0. Delta x (the H signal)
      never includes it (adam_forward.py ``update_K_vec`` l. 54-56).
  """
  lr: float = hparam(1e-4, help="client learning rate (eta; 0 freezes x, for H-update diagnostics)", low=0,
                     finite=True, source="[code] lr=1e-4 (tuned per task in Li et al. 2025)")
  smoothing: float = hparam(1e-3, help="finite-difference smoothing radius (mu)", low=0, low_open=True,
                            finite=True, source="[code] mu=1e-3")
  num_perturbations: int = hparam(5, help="DeComFL/HiSo shared perturbations per local step (P)", low=1,
                                  source="Li et al. 2025, §6 ([code] num_pert=1)")
  local_steps: int = hparam(1, help="local steps per round (tau)", low=1, source="[code] local_update_steps=1")
  batch_size: int = hparam(32, help="samples per local step, shared by all its evaluations (b)", low=1,
                           source="[code] README example 32 (default 8)")
  clients_per_round: int | None = hparam(None, help="clients sampled per round (m; None = all N)", low=1,
                                         source="Li et al. 2025, §6: 8 of 64 (MNIST)")
  fd_scheme: str = hparam("forward", help="DeComFL/HiSo finite difference: forward (paper), central "
                          "(code's DeComFL)", choices=shared_seed.FD_SCHEMES, source="Li et al. 2025, eqs. 1, 4")
  client_state: str = hparam("none", help="DeComFL/HiSo client state: none (fast), replay (protocol: "
                             "replay from scalars)", choices=CLIENT_STATES)
  replay_history: int = hparam(256, help="DeComFL/HiSo rounds of scalars kept for replay (client_state=replay)",
                               low=1)
  weight_decay: float = hparam(0.0, help="DeComFL/HiSo SGD weight decay lambda: eta (Delta x + lambda x) "
                               "(paper 0; code 1e-5 on MNIST, presets hiso_code / decomfl_code)", low=0,
                               source="[code] prepare_settings.py get_optimizer l. 87-121")

  def __post_init__(self):
    validate(self)


@chex.dataclass(frozen=True)
class HiSoConfig(DeComFLConfig):
  """HiSo hyperparameters: DeComFL's plus the learned diagonal H (spec §2.3, §2.8).

  Attributes:
    nu: EMA weight; [code] ``hessian_smooth=0.95`` so nu = 0.05.
    eps: epsilon floor inside the EMA (eq. 12, §4.3; value not given in the
      paper, 1e-8 per spec §2.3; [code] has none: 0).
    h0: H_0 = h0 * 1; [code] ``ones(d)``.
    k_update: ``last`` ([code] LAST_LOCAL_UPDATE), ``all`` (eq. 12), ``all_code``
      ([code] ALL_LOCAL_UPDATES: model steps with H_r, the H signal of later steps
      rebuilt with the updated H).
    h_signal: ``delta_x`` (§4.3, eq. 12, [code]) or ``round_displacement``
      (App. C, (x_{r+1} - x_r)^2).
    clip_lo, clip_hi: clip H to [clip_lo, clip_hi] after each update (Assumption
      4; none given in the paper or code: None = off).
    preconditioner: ``diagonal`` (paper) or ``scalar`` (ablation: mean(H) 1).
    step_norm: ``none`` (eq. 8 as boxed: the least-squares factor
      (u^T H^{-1} u)^{-1} of eq. 7 "absorbed into eta"; [code]) or ``trace``
      (eq. 7's factor kept in expectation, E u^T H^{-1} u = Tr H^{-1}: the
      directions use H / hbar with hbar = d / Tr(H^{-1}), so z = (H/hbar)^{-1/2} u,
      E||z||^2 = d as in DeComFL, and a uniform H = c 1 gives DeComFL's step for
      every c; only the shape of H matters, not its scale).
  """
  nu: float = hparam(0.05, help="HiSo EMA weight nu of H", low=0, high=1,
                      source="[code] hessian_smooth=0.95")
  eps: float = hparam(1e-8, help="HiSo epsilon floor in the H update (code 0)", low=0,
                      source="Li et al. 2025, eq. 12, §4.3; spec §2.3")
  h0: float = hparam(1.0, help="HiSo initial H_0 = h0 * 1", low=0, low_open=True, finite=True,
                     source="[code] ones(d)")
  k_update: str = hparam("last", help="HiSo H update per round: last (code), all (eq. 12), all_code",
                         choices=K_UPDATES, source="Li et al. 2025, eq. 12; [code] LAST_LOCAL_UPDATE")
  h_signal: str = hparam("delta_x", help="HiSo H signal: delta_x (code, eq. 12), round_displacement (App. C)",
                         choices=H_SIGNALS, source="Li et al. 2025, §4.3, App. C")
  clip_lo: float | None = hparam(None, help="HiSo lower clip of H (None: off)", low=0, low_open=True,
                                 finite=True, source="Li et al. 2025, Assumption 4")
  clip_hi: float | None = hparam(None, help="HiSo upper clip of H (None: off; >= clip_lo)", low=0,
                                 low_open=True, finite=True, source="Li et al. 2025, Assumption 4")
  preconditioner: str = hparam("diagonal", help="HiSo directions: diagonal (paper), scalar (ablation: "
                               "mean(H) 1)", choices=PRECONDITIONERS)
  step_norm: str = hparam("none", help="HiSo step scale: none (eq. 8, factor absorbed in eta; code), trace "
                          "(eq. 7: H / harmonic mean)", choices=STEP_NORMS, source="Li et al. 2025, eqs. 7-8")

  def __post_init__(self):
    validate(self)
    lo, hi = self.clip_lo, self.clip_hi
    if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) and not hi >= lo:
      raise FieldError("clip_hi", f"must be >= clip_lo={lo}; got {hi}")


class ReplayState(NamedTuple):
  """Protocol-mode state (``client_state=replay``).

  Attributes:
    x: (N, d) each client's model at the start of its last participated round.
    h: (N, d) each client's H from that round (DeComFL: 1).
    last: (N,) int32 r'_i, the round whose start (x, H) the client holds (0 =
      never sampled: x_0, H_0).
    hist_g: (B, tau, P) averaged scalars g_{t,k,p} of round t at slot t % B.
    hist_round: (B,) int32 the round stored in each slot (-1 = empty).
    mismatch: float scalar, max over the run of ``|x_i - x_r|`` and ``|H_i - H_r|`` for
      the replayed sampled clients (0.0 = bitwise identical).
    full_pulls: int32 clients that were absent longer than B rounds and pulled
      the full state instead of replaying.
  """
  x: jax.Array
  h: jax.Array
  last: jax.Array
  hist_g: jax.Array
  hist_round: jax.Array
  mismatch: jax.Array
  full_pulls: jax.Array


class HiSoState(NamedTuple):
  """Server state: x (d,), H (d,) (DeComFL: 1, never updated), the round counter r
  (int32), the shared perturbation key, and the protocol state (or None)."""
  x: jax.Array
  h: jax.Array
  round: jax.Array
  shared_key: jax.Array
  clients: ReplayState | None


class HiSoParts(NamedTuple):
  """The pure functions HiSo is made of (also used by the tests).

  Attributes:
    dim: d.
    scale: ``h -> (d,) H^{-1/2}`` as used by the directions.
    client_scalars: ``(x, h, r, shared_key, client, key, shared_start=False) -> (G (tau, P),
      x_tau (d,))`` (``shared_start``: x is the same for every client of a vmap, so step 0 runs
      outside the step scan as one GEMM over the clients; same results):
      one client's local steps from x (Alg. 2b); G is its uplink payload, x_tau
      its local model before the reset.
    apply_round: ``(x, h, r, shared_key, gbar (tau, P)) -> (x, h)``: the round
      update every party applies (Alg. 2 lines 14-16 / Alg. 2a + H update).
    replay: ``(xs (n, d), hs, last (n,), stop, shared_key, hist_g, hist_round)
      -> (xs, hs, ok (n,))``: brings n clients from their rounds ``last`` to
      ``stop`` with :func:`apply_round` (ok False where history was missing).
    sync: ``state -> (x (N, d), h)``: every client of a replay-mode state
      replayed to the current round (for tests and download measurements).
  """
  dim: int
  scale: Callable
  client_scalars: Callable
  apply_round: Callable
  replay: Callable
  sync: Callable


def _hiso_view(cfg: DeComFLConfig) -> HiSoConfig:
  """``cfg`` typed as the :class:`HiSoConfig` that ``preconditioned=True`` requires (a static cast, no
  runtime check: HiSo's fields are only read on preconditioned paths)."""
  return cast(HiSoConfig, cfg)


def _check(cfg: DeComFLConfig, preconditioned: bool):
  if cfg.fd_scheme not in shared_seed.FD_SCHEMES:
    raise ValueError(f"unknown fd_scheme {cfg.fd_scheme!r}; accepted: {', '.join(shared_seed.FD_SCHEMES)}")
  if cfg.client_state not in CLIENT_STATES:
    raise ValueError(f"unknown client_state {cfg.client_state!r}; accepted: {', '.join(CLIENT_STATES)}")
  for name in ("num_perturbations", "local_steps", "batch_size", "replay_history"):
    if getattr(cfg, name) < 1:
      raise ValueError(f"{name} must be >= 1; got {getattr(cfg, name)}")
  if not cfg.smoothing > 0:
    raise ValueError(f"smoothing must be > 0; got {cfg.smoothing}")
  if not cfg.weight_decay >= 0:
    raise ValueError(f"weight_decay must be >= 0; got {cfg.weight_decay}")
  if preconditioned:
    cfg = _hiso_view(cfg)
    if cfg.k_update not in K_UPDATES:
      raise ValueError(f"unknown k_update {cfg.k_update!r}; accepted: {', '.join(K_UPDATES)}")
    if cfg.h_signal not in H_SIGNALS:
      raise ValueError(f"unknown h_signal {cfg.h_signal!r}; accepted: {', '.join(H_SIGNALS)}")
    if cfg.preconditioner not in PRECONDITIONERS:
      raise ValueError(f"unknown preconditioner {cfg.preconditioner!r}; "
                       f"accepted: {', '.join(PRECONDITIONERS)}")
    if cfg.step_norm not in STEP_NORMS:
      raise ValueError(f"unknown step_norm {cfg.step_norm!r}; accepted: {', '.join(STEP_NORMS)}")
    if not 0 <= cfg.nu <= 1:
      raise ValueError(f"nu must be in [0, 1]; got {cfg.nu}")
    if not cfg.eps >= 0:
      raise ValueError(f"eps must be >= 0; got {cfg.eps}")
    if not cfg.h0 > 0:
      raise ValueError(f"h0 must be > 0; got {cfg.h0}")
    lo, hi = cfg.clip_lo, cfg.clip_hi
    if lo is not None and not lo > 0:
      raise ValueError(f"clip_lo must be > 0; got {lo}")
    if lo is not None and hi is not None and not hi >= lo:
      raise ValueError(f"clip_hi must be >= clip_lo; got {hi} < {lo}")


def hiso_parts(task: Task, cfg: DeComFLConfig, preconditioned: bool = True) -> HiSoParts:
  """Builds the pure functions of HiSo (``preconditioned``) or DeComFL (H = I).

  Raises:
    ValueError: a hyperparameter out of range or an unknown variant name.
  """
  _check(cfg, preconditioned)
  hcfg = _hiso_view(cfg)  # HiSo's fields, read only where `preconditioned`
  d = task.dim
  unravel = flat_solution(task)
  def loss(x, batch):
    return task.loss(unravel(x), batch)
  tau, P, eta, mu = cfg.local_steps, cfg.num_perturbations, cfg.lr, cfg.smoothing
  wd = cfg.weight_decay

  def model_step(xk, dx):
    if wd:                                          # [code] SGD weight decay: eta (dx + wd x)
      return xk - eta * (dx + wd * xk)
    return xk - eta * dx                            # Alg. 2b line 6 / Alg. 2 line 16

  def scale(h):
    if preconditioned and hcfg.preconditioner == "scalar":  # ablation: H replaced by mean(H) 1 (spec §4)
      h = jnp.full_like(h, 1.0) * (pairwise_sum(h) / h.shape[0])
    if preconditioned and hcfg.step_norm == "trace":  # eq. 7 factor in expectation: H / hbar,
      h = h * (pairwise_sum(1.0 / h) / h.shape[0])    # hbar = d / Tr(H^{-1}) (harmonic mean)
    return shared_seed.inverse_sqrt(h)                                     # z = H^{-1/2} u, eq. 8

  def ema(h, signal):
    h = (1.0 - hcfg.nu) * h + hcfg.nu * (signal + hcfg.eps)               # eq. 12 / §4.3
    if hcfg.clip_lo is not None or hcfg.clip_hi is not None:              # Assumption 4 clipping
      h = jnp.clip(h, hcfg.clip_lo, hcfg.clip_hi)
    return h

  def client_scalars(x, h, r, shared_key, client, key, shared_start=False):
    s = scale(h)

    def step(xk, k):
      batch = task.sample_batch(client, jax.random.fold_in(key, k), cfg.batch_size)
      with jax.default_matmul_precision("highest"):
        g, dx = shared_seed.scalars_and_step(lambda v: loss(v, batch), xk, shared_key, r, k, P, mu,
                                             s, cfg.fd_scheme)                 # Alg. 2b line 4
      return model_step(xk, dx), g                                            # Alg. 2b lines 5-6

    if not shared_start:
      x_tau, G = jax.lax.scan(step, x, jnp.arange(tau, dtype=jnp.int32))
      return G, x_tau                                   # reset (Alg. 2b line 8): x_tau is discarded
    # Every client starts from the same x (the round's vmap leaves x unbatched): step 0 runs
    # outside the scan, so its P + 1 evaluations see one model and XLA runs them as one GEMM
    # over all clients' batches (a scan carry would hold a copy of x per client). Same bits.
    x1, g0 = step(x, jnp.int32(0))
    if tau == 1:
      return g0[None], x1
    x_tau, G = jax.lax.scan(step, x1, jnp.arange(1, tau, dtype=jnp.int32))
    return jnp.concatenate([g0[None], G]), x_tau

  def apply_round(x, h, r, shared_key, gbar):
    s = scale(h)

    def step(carry, k):
      xk, hk, _ = carry
      dx = shared_seed.step_from_scalars(gbar[k], shared_key, r, k, s, d, x.dtype)   # Alg. 2 l. 14
      xk = model_step(xk, dx)                                                      # Alg. 2 l. 16
      if preconditioned and hcfg.h_signal == "delta_x" and hcfg.k_update == "all":
        hk = ema(hk, dx * dx)                                                      # eq. 12, per k
      elif preconditioned and hcfg.h_signal == "delta_x" and hcfg.k_update == "all_code":
        # [code] ALL_LOCAL_UPDATES: the model steps above all use K_r (server.py l. 190-194);
        # the K chain that follows rebuilds step k's signal with the already-updated K
        # (adam_forward.py l. 121-125 -> update_K_vec l. 54-56 -> l. 58-61).
        dx_code = shared_seed.step_from_scalars(gbar[k], shared_key, r, k, scale(hk), d, x.dtype)
        hk = ema(hk, dx_code * dx_code)
      return (xk, hk, dx), None

    (x_new, h_k, dx_last), _ = jax.lax.scan(step, (x, h, jnp.zeros_like(x)),
                                            jnp.arange(tau, dtype=jnp.int32))
    if not preconditioned:
      return x_new, h                                                               # H = I fixed
    if hcfg.h_signal == "round_displacement":
      return x_new, ema(h, (x_new - x) * (x_new - x))                              # App. C
    if hcfg.k_update == "last":
      return x_new, ema(h, dx_last * dx_last)                                      # [code] last step
    return x_new, h_k

  def replay(xs, hs, last, stop, shared_key, hist_g, hist_round):
    B = hist_round.shape[0]
    ok = (stop - last <= B) & (last <= stop)
    start = jnp.min(jnp.where(ok, last, stop))
    vapply = jax.vmap(apply_round, in_axes=(0, 0, None, None, None))

    def body(t, carry):
      xs, hs, ok = carry
      slot = t % B
      present = hist_round[slot] == t
      active = (t >= last) & ok
      ok = ok & (present | ~active)
      x_new, h_new = vapply(xs, hs, t, shared_key, hist_g[slot])            # Alg. 2a, Alg. 2 l. 9
      xs = jnp.where(active[:, None], x_new, xs)
      hs = jnp.where(active[:, None], h_new, hs)
      return xs, hs, ok

    return jax.lax.fori_loop(start, stop, body, (xs, hs, ok))

  def sync(state: HiSoState):
    c = state.clients
    if c is None:
      raise ValueError("sync needs a replay-mode state (client_state='replay')")
    xs, hs, ok = replay(c.x, c.h, c.last, state.round, state.shared_key, c.hist_g, c.hist_round)
    return jnp.where(ok[:, None], xs, state.x[None]), jnp.where(ok[:, None], hs, state.h[None])

  return HiSoParts(dim=d, scale=scale, client_scalars=client_scalars, apply_round=apply_round,
                   replay=replay, sync=sync)


def make_hiso(task: Task, cfg: DeComFLConfig, name: str = "hiso",
              preconditioned: bool = True) -> FederatedAlgorithm:
  """Builds HiSo (Li et al. 2025, Alg. 2) or, with ``preconditioned=False``, DeComFL.

  Raises:
    ValueError: a hyperparameter out of range or an unknown variant name.
  """
  parts = hiso_parts(task, cfg, preconditioned)
  d, N = parts.dim, task.num_clients
  m = cfg.clients_per_round or N
  if not 1 <= m <= N:
    raise ValueError(f"clients_per_round must be in [1, {N}]; got {m}")
  tau, P = cfg.local_steps, cfg.num_perturbations
  evals_per_step = (P + 1) if cfg.fd_scheme == "forward" else 2 * P
  queries = m * tau * evals_per_step * (cfg.batch_size if task.stochastic else 1)
  scalar_bytes = tau * P * BYTES_PER_REAL          # one round of a client's (or the mean) scalars
  full_state_bytes = (2 if preconditioned else 1) * d * BYTES_PER_REAL
  replay_mode = cfg.client_state == "replay"
  B = cfg.replay_history
  unravel = flat_solution(task)

  def init(key, shared_key):
    x0, _ = flat_problem(task, key)
    h0 = jnp.full_like(x0, _hiso_view(cfg).h0 if preconditioned else 1.0)  # H_0 = 1 [code]
    # shared_key is the run's shared stream rng.stream(root, "shared") (rng.init_keys):
    # identical for every party and independent of the init stream (spec §6).
    clients = None
    if replay_mode:
      clients = ReplayState(
          x=jnp.broadcast_to(x0, (N, d)), h=jnp.broadcast_to(h0, (N, d)),
          last=jnp.zeros((N,), jnp.int32), hist_g=jnp.zeros((B, tau, P), x0.dtype),
          hist_round=jnp.full((B,), -1, jnp.int32), mismatch=jnp.zeros((), x0.dtype),
          full_pulls=jnp.zeros((), jnp.int32))
    return HiSoState(x=x0, h=h0, round=jnp.zeros((), jnp.int32), shared_key=shared_key,
                     clients=clients)

  def round_fn(state: HiSoState, key, data):
    r = state.round
    k_sample, k_clients, _ = rng.round_subkeys(key)
    idx = sample_clients(k_sample, N, m)                                     # Alg. 2 line 5
    clients = jax.tree_util.tree_map(lambda a: jnp.take(a, idx, axis=0), data["clients"])
    keys = rng.client_keys(k_clients, idx)
    c = state.clients
    if replay_mode:
      assert c is not None  # replay mode always carries the protocol state (init)
      last = c.last[idx]
      xs, hs, ok = parts.replay(c.x[idx], c.h[idx], last, r,
                                state.shared_key, c.hist_g, c.hist_round)    # Alg. 2 lines 8-9
      xs = jnp.where(ok[:, None], xs, state.x[None])        # absent > B rounds: full pull
      hs = jnp.where(ok[:, None], hs, state.h[None])
      mismatch = jnp.maximum(jnp.max(jnp.abs(xs - state.x[None])), jnp.max(jnp.abs(hs - state.h[None])))
      G, _ = jax.vmap(parts.client_scalars, in_axes=(0, 0, None, None, 0, 0))(
          xs, hs, r, state.shared_key, clients, keys)                        # Alg. 2 line 10
      gaps = jnp.where(ok, r - last, 0)
      bytes_down = pairwise_sum(gaps) * scalar_bytes + jnp.sum(~ok) * full_state_bytes
    else:
      G, _ = jax.vmap(functools.partial(parts.client_scalars, shared_start=True),
                      in_axes=(None, None, None, None, 0, 0))(
          state.x, state.h, r, state.shared_key, clients, keys)
      bytes_down = m * scalar_bytes
    gbar = pairwise_sum(G) / m                                               # Alg. 2 line 13
    x, h = parts.apply_round(state.x, state.h, r, state.shared_key, gbar)   # Alg. 2 lines 14-16
    new_clients = None
    if replay_mode:
      assert c is not None
      slot = r % B
      new_clients = ReplayState(                                             # Alg. 2 line 15
          x=c.x.at[idx].set(xs), h=c.h.at[idx].set(hs),
          last=c.last.at[idx].set(r), hist_g=c.hist_g.at[slot].set(gbar),
          hist_round=c.hist_round.at[slot].set(r), mismatch=jnp.maximum(c.mismatch, mismatch),
          full_pulls=c.full_pulls + jnp.sum(~ok).astype(jnp.int32))
    stats = make_stats(queries=queries, bytes_up=m * scalar_bytes, bytes_down=bytes_down,
                       participants=m)
    return HiSoState(x=x, h=h, round=r + 1, shared_key=state.shared_key,
                     clients=new_clients), stats

  def metrics(state: HiSoState):
    # Fig. 5 (right): the learned H; its median and 99.9th-percentile / median
    # ratio (long tail, spec §7 item 9). HiSo only (DeComFL's H is 1).
    med = jnp.median(state.h)
    return {"h_median": med, "h_tail_ratio": jnp.quantile(state.h, 0.999) / med}

  return FederatedAlgorithm(name=name, init=init, round=round_fn,
                            solution=lambda s: unravel(s.x), hparams=cfg,
                            metrics=metrics if preconditioned else None)


def make_decomfl(task: Task, cfg: DeComFLConfig, name: str = "decomfl") -> FederatedAlgorithm:
  """Builds DeComFL (Li et al. 2024b; Li et al. 2025, eq. 4, Corollary 2): HiSo with H = I."""
  return make_hiso(task, cfg, name=name, preconditioned=False)
