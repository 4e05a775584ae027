"""FZooS (Shu et al., "Federated Zeroth-Order Optimization using Trajectory-Informed
Surrogate Gradients", Shu et al. 2023, Algorithm 2; specs/fzoos.md §2.4.5 and §2.6).

Per round r, every client i (all N take part, as in the paper):

1. starts at x_{r-1} with a fresh Adam state (App. E, lr 0.01; [code] reset
   every round) and queries y_i(x_{r-1}) ([code]);
2. for t = 1..T: fits a GP on the ``gp_window`` history points nearest to x
   (y min-max normalised, [code]) and steps along (eq. 8)

       ghat = grad mu_i(x) + gamma_t grad phi(x)^T (w_{r-1} - w_{r-1,T}^(i)),   gamma_t = 1/t,

   (eq. 5 for grad mu, eq. 7 for the RFF gradients; no correction in round 1,
   [code]); queries y_i at the new iterate; for t < T queries the 5 of 100
   candidates x + U[-0.01, 0.01]^d with the largest trace of the gradient
   posterior covariance (App. E; the trace, not the spectral norm, which is
   constant at kappa when n < d, specs §2.4.1);
3. the server averages x_r = (1/N) sum_i x_{r,T}^(i) (Alg. 1) and, behind
   ``accept_if_improves`` (off in the paper preset, [code]: uses the true F
   outside the query model), keeps x_{r-1} when F does not improve;
4. each client queries y_i(x_r) and the 50 most uncertain of 200 candidates
   x_r + rad_i U[-1,1]^d, rad_i = mean|x_r - x_{r,T}^(i)|/2 ([code] ``get_rff``),
   then fits its RFF weights on the ``rff_window`` points nearest to x_r
   (eq. 6; [code] y min-max normalised, weights scaled back by ymax - ymin);
   the server averages them, w_r = (1/N) sum_i w_{r,T}^(i) (eq. 7).

Speed (mathematically the same rules): ``rff_cache = 1`` (the default) keeps, per client, the
features phi(x) and Gram entries of the points of its recent RFF windows in fixed slots, keyed by
the queries' write stamps (History.stamp), so a fit computes them only for the ~107 rows new to its
window, written into free slots in place, and solves eq. 6 in slot order (rffm.fit_weights_cached; w
agrees with rffm.fit_weights to round-off: ~1e-11 relative at the Fig. 1 setting, within the plain
fit's own difference between row orders in the tests); ``rff_cache = 0`` is the earlier versions'
fit (FZooSConfig.rff_cache says how the two curves compare); its new rows' cosines are
rffm.fast_cos's (vectorised; XLA's float64 cosine is a scalar call per element). The nearest-point
windows scan only the history slots written so far (:func:`_distances`, in blocks), in float32 from a
float32 copy of a float64 history (History.X32: half the bytes, twice the SIMD width), take its 2n
nearest as candidates and an exact float64 top_k on their exact distances, certified by a bound on
float32's rounding or redone in full (:func:`_nearest_from_approx`: the same slots as ``lax.top_k``
on the exact distances), and reuse the distances to a centre across the writes that follow it
(:func:`_write_tracked`: one pass over the history per local step, not two); the last local step (t
= T, which makes no active queries) computes none. A Cholesky factor is retried only where it is not
finite (fedsim.estimators.cholesky), and the active queries' uncertainty reuses the GP fit's X X^T.
The engine donates the state to each chunk, so the caches and histories are updated in place, not
copied.

gamma_t: the paper's 1/t runs over t = 1..T (first local step gamma = 1). The
authors' code writes ``gamma_t = gamma / (t+1)`` (optimizers.py ``fzoos_opt.update``,
l. 519-520) inside ``for t in range(iters)``, a zero-based t = 0..T-1: the same
sequence 1, 1/2, ..., 1/T, i.e. the paper's 1/t.

Before round 1 each client queries 10 points x_0 + 0.01 U[-1,1]^d ([code]);
they are made (and counted) inside the first round because ``init`` has no
access to the task data.

Queries per client per round: 1 + T + 5 (T - 1) + 1 + 50 = 6 T + 47 (107 at
T = 10), plus 10 in round 1 (specs §2.4.5). Bytes: up x_{r,T}^(i) and
w_{r,T}^(i), down x_r and w_r, (d + M) reals each way per client.

History: Algorithm 2 conditions on the whole trajectory D^(i) (and so do the
authors' code's Python lists). Shapes must be static, so each client's history
is a buffer of ``history_size`` slots (masks for empty slots; windows chosen
with ``lax.top_k``). ``history_size = 0`` (default) sizes it from the run:
init_queries + rounds x queries_per_client_round (``rounds`` is filled from
``--rounds`` by experiments/common.py), so no query is ever dropped over the run
(T = 10, R = 50: 10 + 50 x 107 = 5,360 slots of d reals per client). A
positive ``history_size`` H is a ring of H slots: once full, every new query
overwrites the oldest one, so the windows see only the last H queries (the
old default, 1,024, filled up during round 10 at T = 10: 10 + 10 x 107 > 1,024). The metric
``history_overwritten`` counts the queries dropped so far (0 unless the run is
longer than ``rounds`` or H is set smaller than the run).

Presets (``variant``): ``paper`` (default) is Algorithm 2 with App. B/E's SE
kernel, l = 1; ``code`` is the authors' code: local GP with a Matern-5/2
kernel and a marginal-likelihood lengthscale (optimizers.py l. 426-432:
sklearn ``GaussianProcessRegressor(kernel=Matern(nu=2.5), alpha=1e-6,
n_restarts_optimizer=20)``; here ``gp_lengthscale=auto``, ML-II over the log-grid
``AUTO_GRID`` 0.1-10 instead of L-BFGS-B in sklearn's [1e-5, 1e5]) and the
server rule that keeps x_{r-1} unless F improves (settings.py l. 79-80,
``accept_if_improves=1``). ``kernel``, ``gp_lengthscale`` and
``accept_if_improves`` left at None take the preset's value; a value given
explicitly wins. Every other default already is the code's value (windows
150 / 500, candidates, radii, M, Adam 0.01, ...). The FD baselines
(fedsim.algorithms.zo_baselines) have the same ``variant``.

The shared RFF draw comes from the run's shared key stream and is stored once
in the state (not per client).

Domain: the paper optimises over X = [0, 1]^d (§2); neither Algorithm 2 nor the authors' code projects
the iterates, and the tasks clip x inside the objective (fedsim.tasks.quadratic.to_z), so a coordinate
that an Adam step carries outside [0, 1] sees a zero estimated gradient there and may stay out (the
code-preset C = 0.5 runs of Fig. 1: one coordinate at z = -10 on 3 of 5 seeds, F(x_R) 0.0302 above the
other two). ``project = 1`` clips every local iterate onto [0, 1]^d (FZooS and the FD baselines alike);
the default 0 is the code's behaviour, which every stored claim used.

Ablations (Fig. 6): ``gamma_schedule`` (``inv_t`` paper, ``one`` fixed length,
``zero`` no correction), ``correction_point`` (``current`` iterate, eq. 8, or
``round_start`` = x_{r-1} as in SCAFFOLD), ``num_rff`` (M).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
import optax

from fedsim.algorithms.local import BYTES_PER_REAL, LOCAL_OPTIMIZERS, flat_problem, flat_solution, local_optimizer
from fedsim.config import hparam, validate
from fedsim.core import rng
from fedsim.core.reduce import pairwise_sum
from fedsim.core.sharding import replicated_on
from fedsim.core.types import FederatedAlgorithm, Task, make_stats
from fedsim.estimators import gp as gpm
from fedsim.estimators import rff as rffm

GAMMA_SCHEDULES = ("inv_t", "one", "zero")
CORRECTION_POINTS = ("current", "round_start")
GP_LENGTHSCALES = ("fixed", "auto")
AUTO_GRID = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)
VARIANTS = ("paper", "code")
# The settings a preset fills where the config leaves them at None (module docstring, "Presets").
PRESETS = {
    "paper": {"kernel": "se", "gp_lengthscale": "fixed", "accept_if_improves": 0},
    # [code] optimizers.py l. 426-432 (Matern(nu=2.5), fitted lengthscale), settings.py l. 79-80.
    "code": {"kernel": "matern52", "gp_lengthscale": "auto", "accept_if_improves": 1},
}


def accept_if_improves_hparam():
  """The ``accept_if_improves`` setting, declared once for FZooS and the ZO baselines (the
  authors' code applies its server rule to every algorithm)."""
  return hparam(None, help="1 keeps x_{r-1} unless the true F improves (authors' code; outside the "
                "query model); None: the variant's", choices=(0, 1),
                source="[code] run_server, settings.py l. 79-80")


def project_hparam():
  """The ``project`` setting, declared once for FZooS and the ZO baselines."""
  return hparam(0, help="1 projects every local iterate onto the paper's domain X = [0, 1]^d (clip after each "
                "step); 0 (the authors' code): no projection, the tasks clip inside the objective, so a coordinate "
                "that leaves [0, 1] sees a zero gradient there", choices=(0, 1),
                source="Shu et al. 2023, §2 (X = [0, 1]^d); [code] no projection")


def project(x, on):
  """x clipped to [0, 1]^d when ``on`` (static) (the ``project`` setting), else x unchanged."""
  return jnp.clip(x, 0.0, 1.0) if on else x


def track_cosine_hparam():
  """The ``track_cosine`` setting (Fig. 4's diagnostic), declared once for FZooS and the ZO baselines."""
  return hparam(0, help="1 logs grad_cosine, cos(local direction, true grad F) (true F outside the "
                "query model)", choices=(0, 1), source="Shu et al. 2023, Fig. 4, App. F.1")


@chex.dataclass(frozen=True)
class FZooSConfig:
  """FZooS hyperparameters (Shu et al. 2023, App. E and the authors' code, specs/fzoos.md §2.6).

  Attributes:
    lr: Adam learning rate eta = 0.01 (App. E).
    local_steps: T = 10 (§6.1).
    local_optimizer: ``adam`` (App. E) or ``sgd`` (Algorithm 1's plain step).
    num_rff: M = 10,000 random features (App. E).
    lengthscale: l = 1 of the SE kernel, for the RFF (App. B) and the fixed GP.
    kernel: local GP kernel, ``se`` (paper, App. B) or ``matern52`` ([code]);
      None: the preset's (``variant``).
    gp_lengthscale: ``fixed`` (l, paper) or ``auto`` (ML-II on a log-grid per
      fit, the stand-in of the code's learned lengthscale); None: the preset's.
    gp_noise: sigma^2 of the GP = 1e-6 ([code] ``alpha``).
    gp_window: history points nearest to x in the local GP = 150 ([code]).
    rff_window: points nearest to x_r in the RFF fit = 500 ([code]).
    rff_ridge: sigma^2 of the RFF fit (code: 0, min-norm; 1e-8 numerically); float32 fits
      add u tr(Phi Phi^T) (rffm.float32_jitter: the windows are near-singular), float64 none.
    rff_cache: 1 (the default): each client keeps the features and Gram
      entries of its recent RFF windows' points in rff_window fixed slots (state: N x
      rff_window x (num_rff + rff_window) reals, 42 MB per client at the defaults) and
      the fit computes them only for the rows that are new to the window (about the 107
      queries of a round at T = 10), written into free slots in place
      (rffm.fit_weights_cached): the same weights up to round-off (~1e-11 relative at the
      Fig. 1 setting), 2.2x faster per round there (BUILD.md). 0: every eq. 6 fit computes
      its window's features and Gram afresh (rffm.fit_weights, all clients vmapped; no
      cache in the state, for large N): the
      curves of earlier fedsim versions and of every stored FZooS claim but Fig. 1's (both
      presets). FZooS amplifies round-off about 3x per round (its active queries are discrete
      choices), so the two curves agree to ~1e-10 for 5 rounds and then part like two
      seeds' (docs/reproduction/HISTORY.md, 2026-11-29: Fig. 1's verdicts on both).
    rff_float32: 0 (the default): the RFF fit (eq. 6) in the run's dtype. 1 (opt-in, reduced
      precision): a float64 run fits in float32 (features, Gram and their cache, the Cholesky
      solve with rffm.float32_jitter's floor u tr(Phi Phi^T) on sigma^2), w cast back: the
      Gram products at twice the rate and the cache at half the memory; w is not the float64
      fit's to round-off (the jitter regularises the directions float32 cannot resolve; eq. 7's
      gradient within a few % of float64's, tests/algorithms/test_fzoos.py). Judged against
      float64 on Fig. 1 (10 seeds per C, TOST with margins declared before the runs,
      docs/benchmarks/fzoos_float32/): not shown equivalent (7 of 12 comparisons; undecided at
      C = 50 and at C = 5's round 10), so it stays opt-in; 0.79-0.83x float64's seconds a round
      side by side in those runs.
    history_size: per-client history slots; 0 (default): the whole run,
      init_queries + rounds x queries_per_client_round (at least the windows);
      H > 0: a ring of the last H queries (module docstring, "History").
    rounds: the rounds of the run (experiments/common.py fills it from
      ``--rounds`` / ``--comm_budget``); sizes the history when history_size = 0.
    local_candidates, local_active, local_radius: 100 / 5 / 0.01 (App. E).
    server_candidates, server_active: 200 / 50 ([code] ``get_rff``).
    init_queries, init_radius: 10 / 0.01 ([code]).
    gamma_schedule: ``inv_t`` (gamma_t = 1/t, §6), ``one``, ``zero`` (Fig. 6b ablations).
    correction_point: ``current`` (eq. 8) or ``round_start`` (Fig. 6b ablation).
    accept_if_improves: 0 (Algorithm 2) or 1 ([code] ``run_server``:
      keep x_{r-1} if F(x_r) >= F(x_{r-1})); None: the preset's (paper 0,
      code 1). Evaluates the true global F, outside the federated query
      model; those evaluations are not counted as queries (specs/fzoos.md
      §2.1; :func:`accept_if_improves`).
    variant: ``paper`` (default) or ``code``, the preset of ``kernel``,
      ``gp_lengthscale`` and ``accept_if_improves`` (module docstring).
    track_cosine: 0 (default) or 1: record cos(ghat_{r,t-1}^(i), grad F(x_{r,t-1}^(i)))
      at every local step (Fig. 4, App. F.1). grad F is ``jax.grad`` of the
      task's true global objective, outside the query model and not counted;
      measurement only (the iterates are unchanged). Reported as metrics
      ``grad_cosine`` (mean over clients and the T steps of the last round),
      ``grad_cosine_early`` / ``grad_cosine_late`` (steps t <= T/2 / t > T/2).
  """
  lr: float = hparam(0.01, help="client learning rate (eta; Adam)", low=0, low_open=True, finite=True,
                      source="Shu et al. 2023, App. E")
  local_steps: int = hparam(10, help="local steps per round (T)", low=1, source="Shu et al. 2023, §6.1")
  local_optimizer: str = hparam("adam", help="client optimizer: adam (App. E), sgd (Algorithm 1's plain step)",
                                choices=LOCAL_OPTIMIZERS, source="Shu et al. 2023, App. E")
  num_rff: int = hparam(10000, help="FZooS random Fourier features M", low=1, source="Shu et al. 2023, App. E")
  lengthscale: float = hparam(1.0, help="FZooS SE lengthscale l of the RFF and the fixed GP", low=0,
                              low_open=True, finite=True, source="Shu et al. 2023, App. B")
  kernel: str | None = hparam(None, help="FZooS local GP kernel: se (paper), matern52 (authors' code); "
                              "None: the variant's", choices=gpm.KERNELS, source="Shu et al. 2023, App. B; [code] "
                              "optimizers.py l. 426-432")
  gp_lengthscale: str | None = hparam(None, help="FZooS GP lengthscale: fixed (lengthscale, paper), auto "
                                      "(ML-II grid); None: the variant's", choices=GP_LENGTHSCALES)
  gp_noise: float = hparam(1e-6, help="FZooS GP noise sigma^2", low=0, finite=True, source="[code] alpha")
  gp_window: int = hparam(150, help="FZooS local GP window (nearest history points)", low=1, source="[code]")
  rff_window: int = hparam(500, help="FZooS RFF fit window (points nearest x_r)", low=1, source="[code]")
  rff_ridge: float = hparam(1e-8, help="FZooS RFF fit ridge sigma^2 (code: 0, min-norm)", low=0, finite=True)
  rff_cache: int = hparam(1, help="1 keeps the features and Gram of each client's recent RFF window points (state N x "
                          "rff_window x (num_rff + rff_window) reals) so eq. 6 computes them only for new rows "
                          "(2.2x faster; same weights up to round-off, which FZooS amplifies after ~5 rounds); "
                          "0 recomputes them every round (no state; the curves of earlier fedsim versions)",
                          choices=(0, 1), source="implementation")
  rff_float32: int = hparam(0, help="1 fits the RFF weights (eq. 6: features, Gram, their cache, the solve) in "
                            "float32 in a float64 run, with the float32 jitter u tr(Phi Phi^T) (reduced precision, "
                            "opt-in: not the float64 fit to round-off; not shown equivalent on Fig. 1, "
                            "docs/benchmarks/fzoos_float32); 0 (default): the run's dtype",
                            choices=(0, 1), source="implementation; fedsim.estimators.rff.float32_jitter")
  history_size: int = hparam(0, help="FZooS per-client history slots: 0 = the whole run (from rounds), "
                             "H > 0 = ring of the last H queries", low=0, source="Shu et al. 2023, Alg. 2")
  rounds: int = hparam(0, help="rounds of the run (set by the run; sizes the history when history_size = 0)",
                       low=0, cli=False)
  local_candidates: int = hparam(100, help="FZooS local active-query candidates", low=1,
                                 source="Shu et al. 2023, App. E")
  local_active: int = hparam(5, help="FZooS local active queries per step", low=0, source="Shu et al. 2023, App. E")
  local_radius: float = hparam(0.01, help="FZooS local candidate radius", low=0, finite=True,
                               source="Shu et al. 2023, App. E")
  server_candidates: int = hparam(200, help="FZooS server RFF-fit candidates", low=1, source="[code] get_rff")
  server_active: int = hparam(50, help="FZooS server active queries", low=0, source="[code] get_rff")
  init_queries: int = hparam(10, help="FZooS initial queries per client", low=0, source="[code]")
  init_radius: float = hparam(0.01, help="FZooS initial query radius", low=0, finite=True, source="[code]")
  gamma_schedule: str = hparam("inv_t", help="FZooS correction length: inv_t (paper), one, zero (Fig. 6b "
                               "ablations)", choices=GAMMA_SCHEDULES, source="Shu et al. 2023, §6, Fig. 6b")
  correction_point: str = hparam("current", help="FZooS correction at: current iterate (eq. 8), round_start "
                                 "(Fig. 6b)", choices=CORRECTION_POINTS, source="Shu et al. 2023, eq. 8, Fig. 6b")
  accept_if_improves: int | None = accept_if_improves_hparam()
  track_cosine: int = track_cosine_hparam()
  project: int = project_hparam()
  variant: str = hparam("paper", help="paper, code (the authors' code preset of kernel, gp_lengthscale and "
                        "accept_if_improves)", choices=VARIANTS)

  def __post_init__(self):
    validate(self)


def queries_per_client_round(cfg: FZooSConfig) -> int:
  """1 + T + k_loc (T - 1) + 1 + k_srv: 107 at T = 10 (specs §2.4.5)."""
  T = cfg.local_steps
  return 1 + T + cfg.local_active * (T - 1) + 1 + cfg.server_active


def history_slots(cfg: FZooSConfig) -> int:
  """Slots of one client's history: ``history_size`` if > 0, else the whole run,
  init_queries + rounds x queries_per_client_round, at least max(gp_window, rff_window).

  Raises:
    ValueError: history_size < 0, or history_size = 0 with rounds < 1.
  """
  if cfg.history_size < 0:
    raise ValueError(f"history_size must be >= 0 (0 = the whole run); got {cfg.history_size}")
  if cfg.history_size > 0:
    return cfg.history_size
  if cfg.rounds < 1:
    raise ValueError("history_size=0 keeps the whole trajectory (Algorithm 2) and needs the run's "
                     f"rounds >= 1 (experiments fill it from --rounds); got rounds={cfg.rounds}. "
                     "Pass rounds=R, or history_size=H > 0 for a ring of the last H queries")
  run = cfg.init_queries + cfg.rounds * queries_per_client_round(cfg)
  return max(run, cfg.gp_window, cfg.rff_window)


def preset(value, field: str, variant: str):
  """``value`` if given, else preset ``variant``'s value of ``field`` (:data:`PRESETS`).

  Raises:
    ValueError: unknown variant.
  """
  if variant not in VARIANTS:
    raise ValueError(f"unknown variant {variant!r}; accepted: {', '.join(VARIANTS)}")
  return PRESETS[variant][field] if value is None else value


def resolve_config(cfg: FZooSConfig) -> FZooSConfig:
  """The settings a run uses: the preset's values filled in and history_size
  resolved (:func:`history_slots`); this is the algorithm's ``hparams``."""
  filled = {f: preset(getattr(cfg, f), f, cfg.variant) for f in PRESETS[VARIANTS[0]]}
  return dataclasses.replace(cfg, **filled, history_size=history_slots(cfg))


def global_objective(task: Task):
  """F(x, clients) = (1/N) sum_i f_i(x) on every client's full data (Shu et al. 2023, eq. 1
  with the code's weights w_i = 1/N; Fang et al. 2022, eq. 1); x flat (d,), ``clients`` is
  ``data["clients"]`` (leading axis N). Outside the query model (not counted)."""
  unravel = flat_solution(task)

  def F(x, clients):
    with jax.default_matmul_precision("highest"):
      return jnp.mean(jax.vmap(lambda c: task.loss(unravel(x), task.full_batch(c)))(clients))

  return F


def accept_if_improves(F, x_prev, x_new):
  """The authors' server rule, shared by FZooS, its FD baselines and FedZO:
  x_r = x_{r-1} if F(x_{r-1}) <= F(x_r) else x_r ([code] settings.py
  ``FedZoo.run_server`` l. 79-80: ``if self.F(prev_x) <= self.F(x): x = prev_x``;
  ties keep x_{r-1}).

  Args:
    F: x (d,) -> scalar, the true global objective.
    x_prev, x_new: (d,) the previous and the aggregated point.

  Returns:
    (d,) the accepted point.
  """
  return jnp.where(F(x_prev) <= F(x_new), x_prev, x_new)


def with_accept_if_improves(alg: FederatedAlgorithm, task: Task) -> FederatedAlgorithm:
  """``alg`` with :func:`accept_if_improves` applied to its state's flat ``x`` (d,)
  after every round (e.g. FedZO's fedsim.algorithms.local.ServerState); the rest
  of the state and the round's stats are the round's own."""
  F = global_objective(task)

  def round_fn(state, key, data):
    new, stats = alg.round(state, key, data)
    x = accept_if_improves(lambda z: F(z, data["clients"]), state.x, new.x)
    return new._replace(x=x), stats

  return alg._replace(round=round_fn)


class History(NamedTuple):
  """One client's ring buffer: X (H, d), y (H,), valid (H,) bool, ptr () int32; stamp (H,)
  int32 the write index of each slot's query (0, 1, ... over the run; -1 empty), written ()
  int32 the queries written so far (the RFF fit cache's row ids, rffm.fit_weights_cached);
  X32 (H, d) float32 fl32(X) (None: X is float32, or no copy), from which the windows' distance
  scans read (:func:`_approx_distances`)."""
  X: jax.Array
  y: jax.Array
  valid: jax.Array
  ptr: jax.Array
  stamp: jax.Array
  written: jax.Array
  X32: jax.Array | None = None


class FZooSState(NamedTuple):
  """x (d,); round () int32; hist (History with leading N); w_local (N, M);
  w_global (M,); rff (shared draw); cosine (T,) last round's mean cos(ghat, grad F);
  fit_cache (rffm.FitCache with leading N: each client's last RFF window, rff_window
  rows, or 0 rows with ``rff_cache = 0``)."""
  x: jax.Array
  round: jax.Array
  hist: History
  w_local: jax.Array
  w_global: jax.Array
  rff: rffm.RFF
  cosine: jax.Array
  fit_cache: rffm.FitCache


def _ring_rows(h: History, k: int):
  """(first, idx): of k rows appended at the ring pointer, the rows that survive the write are
  rows first..k-1 (first = max(k - H, 0): a write longer than the ring keeps its last H rows,
  as k appends one by one would) and they land in the distinct slots ``idx``. Distinct slots
  make the scatter well defined: XLA leaves the winner among duplicate scatter indices
  unspecified (a 50-row server write into a ring of 16 slots has them)."""
  H = h.X.shape[0]
  first = max(k - H, 0)
  return first, (h.ptr + first + jnp.arange(k - first)) % H


def _write(h: History, X, y, do=True) -> History:
  """Appends k rows at the ring pointer (masked off when ``do`` is False); when k > H only the
  last H rows remain (:func:`_ring_rows`), with their own write stamps."""
  H = h.X.shape[0]
  k = X.shape[0]
  first, idx = _ring_rows(h, k)
  X, y = X[first:], y[first:]
  do = jnp.asarray(do)
  stamps = h.written + first + jnp.arange(k - first, dtype=jnp.int32)
  return History(X=h.X.at[idx].set(jnp.where(do, X, h.X[idx]), unique_indices=True),
                 y=h.y.at[idx].set(jnp.where(do, y, h.y[idx]), unique_indices=True),
                 valid=h.valid.at[idx].set(jnp.where(do, True, h.valid[idx]), unique_indices=True),
                 ptr=(h.ptr + k * do.astype(jnp.int32)) % H,
                 stamp=h.stamp.at[idx].set(jnp.where(do, stamps, h.stamp[idx]), unique_indices=True),
                 written=h.written + k * do.astype(jnp.int32),
                 X32=None if h.X32 is None else h.X32.at[idx].set(
                     jnp.where(do, X.astype(jnp.float32), h.X32[idx]), unique_indices=True))


@jax.named_scope("nearest")
def _nearest(dist, n):
  """``lax.top_k(-dist, n)`` (the same slots in the same order, ties to the lower index)
  for float64 ``dist`` (H,), faster on CPU: XLA has a fast top-k for float32 only.

  The K = min(H, 2n) smallest of fl32(dist) are the candidates; the exact top_k runs
  on their float64 distances. Exact when every other slot is farther than the n-th
  chosen distance d_n: the others have fl32(dist) >= v = fl32(the candidates' largest
  dist), so dist >= v (1 - 2^-24) (round to nearest, v normal), and v (1 - 2^-22) > d_n
  (or v = inf: the rest are empty slots) certifies it. Otherwise (near-ties at the
  boundary) the full float64 top_k runs (a loop of 0 or 1 steps, so a ``vmap`` pays
  it only when some client needs it). tests/algorithms/test_fzoos_rules.py pins both paths.
  """
  H = dist.shape[0]
  K = min(H, 2 * n)
  if K == H:
    return jax.lax.top_k(-dist, n)
  # Only the index output of this top_k is used (so XLA's float32 top-k applies).
  _, cand = jax.lax.top_k(-dist.astype(jnp.float32), K)
  dc = dist[cand]
  neg, sub = jax.lax.top_k(-dc, n)
  v = jnp.max(dc).astype(jnp.float32)
  ok = jnp.isposinf(v) | ((v >= jnp.finfo(jnp.float32).tiny)
                          & (v.astype(dist.dtype) * (1.0 - 2.0 ** -22) > -neg[n - 1]))

  def full(carry):
    d, _ = jax.lax.optimization_barrier((dist, carry))   # not hoisted out of the loop
    return (*jax.lax.top_k(-d, n), jnp.bool_(True))

  neg, idx, _ = jax.lax.while_loop(lambda c: ~c[2], full, (neg, cand[sub], ok))
  return neg, idx


def _row_distances(X, valid, p):
  """(k,) squared distances ||X_j - p||^2 of the rows X (k, d); inf where not ``valid``."""
  return jnp.where(valid, jnp.sum((X - p) ** 2, axis=1), jnp.inf)


# Rows per block of :func:`_distances`'s loop over the written slots.
DISTANCE_BLOCK = 512


def _source(h: History, dtype):
  """The history's rows in ``dtype``: X, or its float32 copy X32 (X cast where there is none)."""
  if dtype == h.X.dtype:
    return h.X
  return h.X32 if h.X32 is not None and dtype == jnp.float32 else h.X.astype(dtype)


@jax.named_scope("distances")
def _distances(h: History, p, dtype=None):
  """(H,) squared distances ||X_j - p||^2 from p to every slot; inf at empty slots. ``dtype``
  float32 (of a float64 history): computed from fl32(X) and fl32(p) in float32
  (:func:`_approx_distances`); None: X's dtype, exact.

  The written slots are the first min(written, H) (a ring fills from slot 0), so only those
  are read, DISTANCE_BLOCK rows at a time: a round early in a run reads a few hundred of the
  H slots instead of all. Each row by :func:`_row_distances`, so the values are the
  whole-history pass's (tests/algorithms/test_fzoos.py)."""
  dtype = h.X.dtype if dtype is None else dtype
  X, p = _source(h, dtype), p.astype(dtype)
  H = X.shape[0]
  if H <= DISTANCE_BLOCK:
    return _row_distances(X, h.valid, p)
  B = DISTANCE_BLOCK
  blocks = (jnp.minimum(h.written, H) + B - 1) // B

  def block(b, dist):
    start = jnp.minimum(b * B, H - B)        # the last block may overlap the previous one
    rows = _row_distances(jax.lax.dynamic_slice_in_dim(X, start, B),
                          jax.lax.dynamic_slice_in_dim(h.valid, start, B), p)
    return jax.lax.dynamic_update_slice_in_dim(dist, rows, start, 0)

  return jax.lax.fori_loop(0, blocks, block, jnp.full((H,), jnp.inf, dtype))


def _approx_distances(h: History, p):
  """:func:`_distances` for choosing windows: in float32 from the float32 copy of a float64 history
  (half the bytes of a scan, twice the SIMD width), which :func:`_window_slots` certifies or redoes;
  a float32 history's exact distances."""
  return _distances(h, p, jnp.float32)


def _write_tracked(h: History, dist, p, X, y, do=True):
  """:func:`_write` of the k rows X that also keeps ``dist`` = :func:`_distances` (h, p, dist.dtype)
  current: only the written slots' distances are computed (k d work instead of H d), each by the same
  row formula: a full recomputation's to a few ulps (XLA may order a row's sum differently for
  another batch shape) and the same windows (tests/algorithms/test_fzoos.py); the Fig. 1 round's
  curve is bit for bit the one of a full recomputation each step."""
  _, idx = _ring_rows(h, X.shape[0])
  h = _write(h, X, y, do)
  rows = _row_distances(_source(h, dist.dtype)[idx], h.valid[idx], p.astype(dist.dtype))
  return h, dist.at[idx].set(rows, unique_indices=True)


@jax.named_scope("nearest")
def _nearest_from_approx(h: History, p, approx, n):
  """``_nearest(_distances(h, p), n)`` (the exact float64 top_k: the same slots in the same order)
  from approx = :func:`_approx_distances` (h, p), float32 distances of a float64 history.

  The K = min(H, 2n) smallest of approx are the candidates; their exact distances (by
  :func:`_row_distances`, in slot order, so exact ties go to the lower slot as in ``lax.top_k``)
  give the n nearest among them. Exact when every other slot is farther than the n-th chosen
  distance d_n. With u = 2^-24, the float32 rounding of X, of p and of each difference moves
  ||X_j - p|| by at most u ||t~|| + u (1 + u)(||X_j|| + ||p||), ||X_j|| <= ||p|| + ||X_j - p||, and
  a float32 sum of d squares is within gamma = (d + 2) u / (1 - (d + 2) u) of its value (Higham,
  Accuracy and Stability of Numerical Algorithms, §3.1), so a slot with approx >= v (the K-th
  candidate's) is at least r = (sqrt(v / (1 + gamma)) - 2 u (1 + u) ||p||) / (1 + u)^2 from p;
  r^2 (1 - 4 (d + 2) eps64) > d_n certifies (as do v = inf: the others are empty). Otherwise
  (near-ties at the boundary) the exact distances of every slot and :func:`_nearest` run (a loop of
  0 or 1 steps, so a ``vmap`` pays it only when some client needs it).
  """
  H, d = h.X.shape
  K = min(H, 2 * n)
  # Only the index output of this top_k is used (so XLA's float32 top-k applies, not a sort).
  _, cand = jax.lax.top_k(-approx, K)
  cand = jnp.sort(cand)
  neg, sub = jax.lax.top_k(-_row_distances(h.X[cand], h.valid[cand], p), n)
  idx = cand[sub]
  if K == H:
    return neg, idx
  u = 2.0 ** -24
  gamma = (d + 2) * u / (1.0 - (d + 2) * u)
  v = jnp.max(approx[cand]).astype(h.X.dtype)
  pn = jnp.sqrt(jnp.sum(p * p)) * (1.0 + 1e-12)
  r = (jnp.sqrt(v / (1.0 + gamma)) - 2.0 * u * (1.0 + u) * pn) / (1.0 + u) ** 2
  lower = jnp.where(r > 0, r * r, 0.0) * (1.0 - 4.0 * (d + 2) * float(jnp.finfo(h.X.dtype).eps))
  ok = jnp.isposinf(v) | (lower > -neg[n - 1])

  def full(carry):
    hb, pb, _ = jax.lax.optimization_barrier((h, p, carry))   # not hoisted out of the loop
    return (*_nearest(_distances(hb, pb), n), jnp.bool_(True))

  neg, idx, _ = jax.lax.while_loop(lambda c: ~c[2], full, (neg, idx, ok))
  return neg, idx


def _window_slots(h: History, p, n, dist=None):
  """The slots of the n valid points nearest to p, nearest first: (idx (n,), mask (n,));
  ``dist``: :func:`_distances` (h, p) or :func:`_approx_distances` (h, p) when the caller keeps it
  (else the exact ones are computed here); the same windows either way."""
  dist = _distances(h, p) if dist is None else dist
  if dist.dtype == h.X.dtype:
    neg, idx = _nearest(dist, n)
  else:
    neg, idx = _nearest_from_approx(h, p, dist, n)
  return idx, jnp.isfinite(neg) & h.valid[idx]


def _window(h: History, p, n, dist=None):
  """The n valid points nearest to p: (X (n, d), y (n,), mask (n,))."""
  idx, mask = _window_slots(h, p, n, dist)
  return h.X[idx], h.y[idx], mask


def _minmax_normalise(y, mask):
  """([code] min-max normalised y, span) over the masked window; span = 1 (and ymin = 0) where degenerate.

  The division is written as a product with the reciprocal of the span: XLA rewrites ``a / b`` with a
  broadcast ``b`` into that product in some programs and not in others (measured on an AVX2 EPYC: the
  one-device chunk had the product, the two-device replicated chunk the division), and the last-bit
  difference was amplified by the top-k choices to 1e-2 (the run then depended on the device count).
  """
  lo = jnp.min(jnp.where(mask, y, jnp.inf))
  hi = jnp.max(jnp.where(mask, y, -jnp.inf))
  span = hi - lo
  ok = jnp.isfinite(span) & (span > 0)
  lo, span = jnp.where(ok, lo, 0.0), jnp.where(ok, span, 1.0)
  return (y - lo) * (1.0 / span), span


def cosine_metrics(cosine) -> dict:
  """Fig. 4 metrics from the last round's per-step mean cosines ``cosine`` (T,):
  ``grad_cosine`` (mean over t = 1..T), ``grad_cosine_early`` (t <= ceil(T/2)),
  ``grad_cosine_late`` (the rest; equal to early when T = 1)."""
  T = cosine.shape[0]
  h = (T + 1) // 2
  late = cosine[h:] if T > h else cosine[:h]
  return {"grad_cosine": jnp.mean(cosine), "grad_cosine_early": jnp.mean(cosine[:h]),
          "grad_cosine_late": jnp.mean(late)}


def make_fzoos(task: Task, cfg: FZooSConfig, name: str = "fzoos") -> FederatedAlgorithm:
  """Builds FZooS (Shu et al. 2023, Algorithm 2); ``hparams`` is :func:`resolve_config` (cfg).

  Raises:
    ValueError: an unknown choice (variant, kernel, ...), a window larger than
      the history, or history_size = 0 without the run's rounds.
  """
  cfg = resolve_config(cfg)
  for field, value, accepted in (("gamma_schedule", cfg.gamma_schedule, GAMMA_SCHEDULES),
                                 ("correction_point", cfg.correction_point, CORRECTION_POINTS),
                                 ("gp_lengthscale", cfg.gp_lengthscale, GP_LENGTHSCALES),
                                 ("kernel", cfg.kernel, gpm.KERNELS)):
    if value not in accepted:
      raise ValueError(f"unknown {field} {value!r}; accepted: {', '.join(accepted)}")
  if max(cfg.gp_window, cfg.rff_window) > cfg.history_size:
    raise ValueError(f"history_size={cfg.history_size} must be >= gp_window and rff_window")
  for field in ("accept_if_improves", "track_cosine", "rff_cache", "rff_float32", "project"):
    if getattr(cfg, field) not in (0, 1):
      raise ValueError(f"{field} must be 0 or 1; got {getattr(cfg, field)!r}")
  if cfg.local_steps < 1 or cfg.num_rff < 1:
    raise ValueError("local_steps and num_rff must be >= 1")
  N, T, M, kind = task.num_clients, cfg.local_steps, cfg.num_rff, cfg.kernel
  assert kind is not None  # filled by resolve_config and checked against gpm.KERNELS above
  d = task.dim
  unravel = flat_solution(task)
  opt = local_optimizer(cfg.local_optimizer, cfg.lr)
  H = cfg.history_size
  q_round = queries_per_client_round(cfg)

  def f_client(x, client):
    with jax.default_matmul_precision("highest"):
      return task.loss(unravel(x), task.full_batch(client))

  F_true = global_objective(task)

  def init(key, shared_key):
    x0, _ = flat_problem(task, key)
    dt = x0.dtype
    shared = rffm.draw(shared_key, M, d, cfg.lengthscale, dt)   # the run's shared stream
    hist = History(X=jnp.zeros((N, H, d), dt), y=jnp.zeros((N, H), dt),
                   valid=jnp.zeros((N, H), bool), ptr=jnp.zeros((N,), jnp.int32),
                   stamp=jnp.full((N, H), -1, jnp.int32), written=jnp.zeros((N,), jnp.int32),
                   X32=None if dt == jnp.float32 else jnp.zeros((N, H, d), jnp.float32))
    cache = rffm.empty_cache(cfg.rff_window if cfg.rff_cache else 0, M, jnp.float32 if cfg.rff_float32 else dt)
    cache = jax.tree_util.tree_map(lambda a: jnp.broadcast_to(a, (N,) + a.shape), cache)
    return FZooSState(x=x0, round=jnp.int32(0), hist=hist, w_local=jnp.zeros((N, M), dt),
                      w_global=jnp.zeros((M,), dt), rff=shared, cosine=jnp.zeros((T,), dt),
                      fit_cache=cache)

  @jax.named_scope("local_gp")
  def local_gp(h: History, x, dist):
    """The normalised GP on the gp_window points nearest to x (``dist``: _approx_distances(h, x)); (post, span)."""
    Xw, yw, mw = _window(h, x, cfg.gp_window, dist)
    yt, span = _minmax_normalise(yw, mw)
    if cfg.gp_lengthscale == "auto":
      ls = gpm.select_lengthscale(kind, Xw, yt, mw, AUTO_GRID, noise=cfg.gp_noise)
    else:
      ls = cfg.lengthscale
    return gpm.fit(kind, Xw, yt, mw, x, ls, 1.0, cfg.gp_noise), span

  @jax.named_scope("active_queries")
  def active(h: History, client, center, radius, num_cand, num_keep, key):
    """Queries the num_keep most uncertain of num_cand candidates center + radius U[-1,1]^d
    (uncertainty = tr dsigma^2 of the GP around center, eq. 5). Returns (h, _approx_distances(h, center))
    after the writes, which the caller's next window around ``center`` reuses."""
    cand = center + radius * jax.random.uniform(key, (num_cand, d), center.dtype, -1.0, 1.0)
    dist = _approx_distances(h, center)
    post, _ = local_gp(h, center, dist)
    score = gpm.posterior_grad_cov_trace(kind, post, cand)
    _, top = jax.lax.top_k(score, num_keep)                          # the MOST uncertain (largest trace)
    pts = cand[top]
    ys = jax.vmap(f_client, in_axes=(0, None))(pts, client)
    return _write_tracked(h, dist, center, pts, ys)

  def client_round(x_start, h: History, w_loc, w_glob, rff, client, key, first, has_corr, clients):
    k_init, k_loc = jax.random.split(key)
    # [code] 10 initial queries around x_0 before round 1 (made here: init has no data).
    pts0 = x_start + cfg.init_radius * jax.random.uniform(
        k_init, (cfg.init_queries, d), x_start.dtype, -1.0, 1.0)
    h = _write(h, pts0, jax.vmap(f_client, in_axes=(0, None))(pts0, client), first)
    h = _write(h, x_start[None], f_client(x_start, client)[None])      # [code] y_i(x_{r-1})
    dw = w_glob - w_loc

    def descend(x, opt_state, h, dist, t):
      """Local step t (dist = _approx_distances(h, x)): eq. 8's step from x, then y_i at the new iterate."""
      post, span = local_gp(h, x, dist)
      g = span * gpm.posterior_mean_grad(kind, post, x)                 # eq. (5)
      p = x if cfg.correction_point == "current" else x_start
      with jax.named_scope("rff_gradient"):
        corr = rffm.gradient(rff, dw, p)                                 # eq. (7)-(8)
      tf = t.astype(x.dtype)  # t = 1..T: gamma_t = 1/t (= the code's 1/(t+1) over t = 0..T-1)
      gamma = {"inv_t": 1.0 / tf, "one": jnp.ones_like(tf), "zero": jnp.zeros_like(tf)}[cfg.gamma_schedule]
      ghat = g + (gamma * has_corr) * corr                               # eq. (8)
      if cfg.track_cosine:
        gF = jax.grad(F_true)(x, clients)
        cos = ghat @ gF / (jnp.linalg.norm(ghat) * jnp.linalg.norm(gF) + 1e-30)
      else:
        cos = jnp.zeros((), x.dtype)
      updates, opt_state = opt.update(ghat, opt_state, x)
      x = project(optax.apply_updates(x, updates), cfg.project)           # X = [0, 1]^d when project = 1
      h = _write(h, x[None], f_client(x, client)[None])
      return x, opt_state, h, cos

    def step(carry, t):
      """Local step t < T: the step, then the active queries around the new iterate (App. E, t < T only)."""
      x, opt_state, h, dist = carry
      x, opt_state, h, cos = descend(x, opt_state, h, dist, t)
      h, dist = active(h, client, x, cfg.local_radius, cfg.local_candidates, cfg.local_active,
                       jax.random.fold_in(k_loc, t))
      return (x, opt_state, h, dist), cos

    carry, cos = jax.lax.scan(step, (x_start, opt.init(x_start), h, _approx_distances(h, x_start)),
                              jnp.arange(1, T, dtype=jnp.int32))        # t = 1..T-1
    x, opt_state, h, dist = carry
    x, _, h, cos_last = descend(x, opt_state, h, dist, jnp.int32(T))        # t = T: no active queries
    return x, h, jnp.concatenate([cos, cos_last[None]])

  def server_side(x_r, x_T, h: History, client, key):
    """Active queries around x_r and the window of the RFF fit (specs §2.4.5, client side
    after aggregation): (h, (X, y min-max normalised [code], mask, ids, span))."""
    h = _write(h, x_r[None], f_client(x_r, client)[None])
    rad = jnp.mean(jnp.abs(x_r - x_T)) / 2.0
    h, dist = active(h, client, x_r, rad, cfg.server_candidates, cfg.server_active, key)
    idx, mw = _window_slots(h, x_r, cfg.rff_window, dist)
    yw = h.y[idx]
    yt, span = _minmax_normalise(yw, mw)
    return h, (h.X[idx], yt, mw, h.stamp[idx], span)

  # New rows per fit: about one round's queries (module docstring, "rff_cache" in FZooSConfig).
  fit_chunk = min(cfg.rff_window, -(-q_round // 8) * 8)

  @jax.named_scope("rff_fit")
  def rff_fit(rff, window, cache):
    """Every client's RFF weights on its window (eq. 6; [code] weights scaled back by ymax - ymin);
    window: (X, y, mask, ids, span) with a leading client axis. Returns ((N, M) w, caches)."""
    Xw, yt, mw, ids, span = window
    dt = Xw.dtype
    if cfg.rff_float32:                  # reduced precision, opt-in (FZooSConfig.rff_float32)
      rff, Xw, yt = jax.tree_util.tree_map(lambda a: a.astype(jnp.float32), (rff, Xw, yt))
    if cfg.rff_cache:
      # The clients one after another (the cached fit's loop runs to each client's own new rows), each
      # client's cache updated in place in the state's (N, ...) arrays: no copy of a feature block.
      w, cache = rffm.fit_weights_cached(rff, Xw, yt, mw, ids, cache, cfg.rff_ridge, fit_chunk)  # eq. (6)
    else:
      w = jax.vmap(rffm.fit_weights, in_axes=(None, 0, 0, 0, None))(rff, Xw, yt, mw, cfg.rff_ridge)  # eq. (6)
    return span[:, None] * w.astype(dt), cache

  # Placement (issue 46): on a mesh of several devices every device computes every client, as one
  # device does. Splitting the client vmap over devices changes each device's batch and with it the
  # last bit of XLA's GEMM / reduction results (measured: rad and the candidate scores of the server's
  # active queries, round 1), which the discrete top-k choices and the near-singular fits amplify to
  # 1e-2 after one round. A per-client loop that keeps the clients split is invariant too, but 2.1x
  # slower a round at Fig. 1's size (the (M, d) features are read once per client per step instead of once per step).
  replicate = replicated_on(task.data)

  def round_fn(state: FZooSState, key, data):
    _, k_clients, k_server = rng.round_subkeys(key)
    ids = jnp.arange(N, dtype=jnp.int32)
    keys = rng.client_keys(k_clients, ids)
    state, clients = replicate((state, data["clients"]))
    first = state.round == 0
    has_corr = (state.round > 0).astype(state.x.dtype)                   # [code] none in round 1
    x_T, hist, cos = jax.vmap(client_round, in_axes=(None, 0, 0, None, None, 0, 0, None, None, None))(
        state.x, state.hist, state.w_local, state.w_global, state.rff, clients, keys, first,
        has_corr, clients)
    x_new = pairwise_sum(x_T) / N                                         # Alg. 1 server step
    if cfg.accept_if_improves:                                            # [code] settings.py l. 79-80
      x_new = accept_if_improves(lambda z: F_true(z, clients), state.x, x_new)
    skeys = rng.client_keys(k_server, ids)
    hist, window = jax.vmap(server_side, in_axes=(None, 0, 0, 0, 0))(x_new, x_T, hist, clients, skeys)
    w_loc, fit_cache = rff_fit(state.rff, window, state.fit_cache)
    w_glob = pairwise_sum(w_loc) / N                                      # eq. (7)
    q = N * queries_per_client_round(cfg) + N * cfg.init_queries * first.astype(jnp.int32)
    stats = make_stats(queries=q, bytes_up=N * (d + M) * BYTES_PER_REAL,
                       bytes_down=N * (d + M) * BYTES_PER_REAL, participants=N)
    new = FZooSState(x=x_new, round=state.round + 1, hist=hist, w_local=w_loc, w_global=w_glob,
                     rff=state.rff, cosine=jnp.mean(cos, axis=0), fit_cache=fit_cache)
    return replicate(new), stats

  def metrics(state: FZooSState):
    # Queries written so far minus the slots: > 0 only once the ring wrapped (module docstring).
    written = cfg.init_queries * (state.round > 0) + q_round * state.round
    out = {"history_overwritten": jnp.maximum(written - H, 0).astype(jnp.int32)}
    if cfg.track_cosine:
      out.update(cosine_metrics(state.cosine))
    return out

  return FederatedAlgorithm(name=name, init=init, round=round_fn, solution=lambda s: unravel(s.x),
                            hparams=cfg, metrics=metrics)
