"""The FZooS paper's finite-difference baselines (Shu et al. 2023, App. D; specs/fzoos.md §2.2-2.3):
FedZO-FD (eq. 87), FedProx-ZO (eq. 89), SCAFFOLD-ZO Type I (eq. 91) and Type II (eq. 93).

All share FedZO's local loop (fedsim.algorithms.local.make_local_update: step k uses
``fold_in(client_key, k)`` split into a data key and a direction key, Adam reset
every round) with the estimator g = Delta^(i)(x) of eq. 3 (Q = 20 orthonormal
directions, lambda = 0.01) and add a correction (eq. 2)::

    ghat = Delta^(i)(x_{r,t-1}^(i)) + gamma * corr
    none      corr = 0                                                       (eq. 87)
    prox      corr = x_{r,t-1}^(i) - x_{r-1},               gamma = 1 [code] (eq. 89)
    scaffold1 corr = (1/N) sum_j Delta^(j)(x_{r-1}) - Delta^(i)(x_{r-1})    (eq. 91)
    scaffold2 corr = (1/(NT)) sum_j sum_tau Delta^(j)(x_{r-1,tau-1}^(j))
                     - (1/T) sum_tau Delta^(i)(x_{r-1,tau-1}^(i))           (eq. 93)

No correction in round 1 ([code]). SCAFFOLD I's control variates are FD
estimates at the new global point, made after aggregation (an extra
server<->client exchange); their Q + 1 queries per client per round are NOT in
``RoundStats.queries`` (the code omits them) but in the ``extra_queries``
metric (cumulative), and their d-real exchange is in the byte ledgers.

Queries per client per round: 1 + T (Q + 1) = 211 at T = 10, Q = 20 ([code]:
each client also evaluates y_i(x_{r-1}) at the round start; that query is
counted, as in the paper's x-axes).

``estimator``: ``fd`` (default, eq. 3) or ``true``, the authors' ``gd_opt`` oracle
(registry name ``fedavg_true_grad``): g = jax.grad f_i(x) exactly, FedAvg with
the same Adam local loop. It is outside the query model; its rounds count 0
queries. It is the reference of the spec's sanity check (specs/fzoos.md §7
check 5: at C = 0.5 it reaches F < F* + 0.01 within 10 rounds) and isolates
client drift from estimator error.

``fd_normalization``: ``code`` (default) divides the FD sum by lambda Q like the
authors' code (scale 1), ``unbiased`` uses fedsim's d/(lambda Q) scale (FedZO
eq. 2). Adam makes the two almost identical, except that the prox term's
relative weight depends on it; ``unbiased`` with ``correction=none`` is exactly
``fedzo`` with the same settings.

All N clients take part every round, so the server averages are (1/N) sum_i
(M = N; the authors' ``ws = 1/N``).

``variant``: ``paper`` (default) or ``code``, the authors' code preset: the
server keeps x_{r-1} unless the true F improves (settings.py ``FedZoo.run_server``
l. 79-80, applied to every method there), i.e. ``accept_if_improves`` = 1 where
it is left at None (fedsim.algorithms.fzoos.accept_if_improves, the one
implementation FZooS, these baselines and FedZO share). Every other default
already is the code's (Q = 20 orthonormal directions, lambda = 0.01, Adam 0.01,
prox gamma 1, ``code`` normalization).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
import optax

from fedsim.algorithms.fzoos import (
  VARIANTS,
  accept_if_improves,
  accept_if_improves_hparam,
  cosine_metrics,
  global_objective,
  preset,
  project,
  project_hparam,
  track_cosine_hparam,
)
from fedsim.algorithms.local import BYTES_PER_REAL, LOCAL_OPTIMIZERS, flat_problem, flat_solution, local_optimizer
from fedsim.config import hparam, validate
from fedsim.core import rng
from fedsim.core.reduce import pairwise_sum
from fedsim.core.sampling import sample_clients
from fedsim.core.types import FederatedAlgorithm, Task, make_stats
from fedsim.estimators import finite_difference

CORRECTIONS = ("none", "prox", "scaffold1", "scaffold2")
ESTIMATORS = ("fd", "true")
FD_NORMALIZATIONS = ("code", "unbiased")


@chex.dataclass(frozen=True)
class ZOBaselineConfig:
  """FD-baseline hyperparameters (Shu et al. 2023, App. E, specs/fzoos.md §2.3, §2.6).

  Attributes:
    lr: Adam eta = 0.01 (App. E).
    local_steps: T = 10.
    fd_directions: Q = 20 (Fig. 4 caption; [code] ``--q 20``).
    smoothing: lambda = 0.01 ([code] ``--mu``).
    direction: ``orthogonal`` ([code] Gram-Schmidt), or ``sphere`` / ``gaussian``.
    local_optimizer: ``adam`` (App. E).
    batch_size: samples per query (1: the synthetic tasks are deterministic).
    correction: none, prox, scaffold1, scaffold2 (set by the registry name).
    prox_gamma: FedProx gamma (not in the paper; [code] 1).
    fd_normalization: ``code`` or ``unbiased`` (module docstring).
    accept_if_improves: 0 or 1 ([code]: keep x_{r-1} if F does not improve;
      true global F, outside the query model, not counted); None: the
      preset's (``paper`` 0, ``code`` 1).
    track_cosine: 0 (default) or 1: record cos(ghat, grad F(x)) at every local
      step (Fig. 4; grad F by ``jax.grad`` of the true F, not counted);
      metrics as :func:`fedsim.algorithms.fzoos.cosine_metrics`.
    estimator: ``fd`` (eq. 3) or ``true`` (exact local gradients, [code]
      ``gd_opt``; 0 queries counted).
    variant: ``paper`` (default) or ``code`` (module docstring).
  """
  lr: float = hparam(0.01, help="client learning rate (eta; Adam)", low=0, low_open=True, finite=True,
                      source="Shu et al. 2023, App. E")
  local_steps: int = hparam(10, help="local steps per round (T)", low=1, source="Shu et al. 2023, App. E")
  fd_directions: int = hparam(20, help="finite-difference directions per step (b2 / Q)", low=1,
                              source="Shu et al. 2023, Fig. 4 caption; [code] --q 20")
  smoothing: float = hparam(0.01, help="finite-difference smoothing radius (lambda)", low=0, low_open=True,
                            finite=True, source="[code] --mu")
  direction: str = hparam("orthogonal", help="direction law: orthogonal ([code] Gram-Schmidt), sphere, gaussian",
                          choices=finite_difference.LAWS)
  local_optimizer: str = hparam("adam", help="client optimizer: adam (App. E), sgd", choices=LOCAL_OPTIMIZERS,
                                source="Shu et al. 2023, App. E")
  batch_size: int = hparam(1, help="samples per query (1: the synthetic tasks are deterministic)", low=1)
  correction: str = hparam("none", help="client correction: none, prox, scaffold1, scaffold2 (set by the "
                           "registry name)", choices=CORRECTIONS, cli=False)
  prox_gamma: float = hparam(1.0, help="FedProx-ZO correction weight gamma (not in the paper)", low=0,
                             finite=True, source="[code] 1")
  fd_normalization: str = hparam("code", help="FD baselines: code (divide by lambda Q), unbiased (d/(lambda Q))",
                                 choices=FD_NORMALIZATIONS)
  accept_if_improves: int | None = accept_if_improves_hparam()
  track_cosine: int = track_cosine_hparam()
  project: int = project_hparam()
  estimator: str = hparam("fd", help="fd (eq. 3) or true (exact local gradients, [code] gd_opt; set by the "
                          "registry name)", choices=ESTIMATORS, cli=False)
  variant: str = hparam("paper", help="paper, code (the authors' code preset of accept_if_improves)",
                        choices=VARIANTS)

  def __post_init__(self):
    validate(self)


def queries_per_client_round(cfg: ZOBaselineConfig, stochastic: bool = False) -> int:
  """1 + T (Q + 1) ([code]); 211 at T = 10, Q = 20 (times b1 for stochastic tasks);
  0 for the ``true``-gradient oracle."""
  if cfg.estimator == "true":
    return 0
  b = cfg.batch_size if stochastic else 1
  return b * (1 + cfg.local_steps * (cfg.fd_directions + 1))


class ZOBaselineState(NamedTuple):
  """x (d,); round () int32; c_local (N, d), c_global (d,) control variates;
  extra_queries () int32 cumulative uncounted SCAFFOLD I queries; cosine (T,)."""
  x: jax.Array
  round: jax.Array
  c_local: jax.Array
  c_global: jax.Array
  extra_queries: jax.Array
  cosine: jax.Array


def make_zo_baseline(task: Task, cfg: ZOBaselineConfig, name: str = "fedzo_fd") -> FederatedAlgorithm:
  """Builds one of the four FD baselines (``cfg.correction``); ``hparams`` has the
  preset's ``accept_if_improves`` filled in.

  Raises:
    ValueError: unknown correction, direction, normalization, optimizer or variant.
  """
  cfg = dataclasses.replace(cfg, accept_if_improves=preset(cfg.accept_if_improves, "accept_if_improves",
                                                           cfg.variant))
  if cfg.correction not in CORRECTIONS:
    raise ValueError(f"unknown correction {cfg.correction!r}; accepted: {', '.join(CORRECTIONS)}")
  if cfg.estimator not in ESTIMATORS:
    raise ValueError(f"unknown estimator {cfg.estimator!r}; accepted: {', '.join(ESTIMATORS)}")
  if cfg.fd_normalization not in FD_NORMALIZATIONS:
    raise ValueError(f"unknown fd_normalization {cfg.fd_normalization!r}; "
                     f"accepted: {', '.join(FD_NORMALIZATIONS)}")
  if cfg.direction not in finite_difference.LAWS:
    raise ValueError(f"unknown direction {cfg.direction!r}; accepted: {', '.join(finite_difference.LAWS)}")
  for field in ("accept_if_improves", "track_cosine", "project"):
    if getattr(cfg, field) not in (0, 1):
      raise ValueError(f"{field} must be 0 or 1; got {getattr(cfg, field)!r}")
  if cfg.estimator != "true":
    finite_difference.check_directions(cfg.direction, cfg.fd_directions, task.dim, task.name)
  N, T, Q = task.num_clients, cfg.local_steps, cfg.fd_directions
  d = task.dim
  unravel = flat_solution(task)
  opt = local_optimizer(cfg.local_optimizer, cfg.lr)
  # code normalization: (1/(lambda Q)) sum (.) u  = fedsim's estimate / direction_scale.
  norm = (1.0 / finite_difference.direction_scale(cfg.direction, d)
          if cfg.fd_normalization == "code" else 1.0)

  def loss_flat(x, batch):
    return task.loss(unravel(x), batch)

  def fd(f, x, key):
    if cfg.estimator == "true":
      return jax.grad(f)(x)                                             # [code] gd_opt oracle
    return norm * finite_difference.fd_gradient(f, x, key, Q, cfg.smoothing, cfg.direction)

  F_true = global_objective(task)

  def init(key, shared_key):
    del shared_key  # no draws shared by all parties (rng.init_keys)
    x0, _ = flat_problem(task, key)
    return ZOBaselineState(x=x0, round=jnp.int32(0), c_local=jnp.zeros((N, d), x0.dtype),
                           c_global=jnp.zeros((d,), x0.dtype), extra_queries=jnp.int32(0),
                           cosine=jnp.zeros((T,), x0.dtype))

  def local_update(x_start, client, key, c_i, c, has_corr, clients):
    """Same key schedule as fedsim.algorithms.local.make_local_update."""

    def step(carry, k):
      x, opt_state, gsum = carry
      k_data, k_oracle = jax.random.split(jax.random.fold_in(key, k))
      batch = task.sample_batch(client, k_data, cfg.batch_size)
      g = fd(lambda z: loss_flat(z, batch), x, k_oracle)               # eq. (3)
      if cfg.correction == "prox":
        corr = cfg.prox_gamma * (x - x_start)                          # eq. (89)
      elif cfg.correction in ("scaffold1", "scaffold2"):
        corr = c - c_i                                                  # eq. (91) / (93)
      else:
        corr = jnp.zeros_like(x)                                        # eq. (87)
      ghat = g + has_corr * corr
      if cfg.track_cosine:
        gF = jax.grad(F_true)(x, clients)
        cos = ghat @ gF / (jnp.linalg.norm(ghat) * jnp.linalg.norm(gF) + 1e-30)
      else:
        cos = jnp.zeros((), x.dtype)
      updates, opt_state = opt.update(ghat, opt_state, x)
      return (project(optax.apply_updates(x, updates), cfg.project), opt_state, gsum + g), cos  # X = [0, 1]^d

    (x, _, gsum), cos = jax.lax.scan(step, (x_start, opt.init(x_start), jnp.zeros_like(x_start)),
                                     jnp.arange(T))
    return x, gsum / T, cos

  def round_fn(state: ZOBaselineState, key, data):
    k_sample, k_clients, k_server = rng.round_subkeys(key)
    idx = sample_clients(k_sample, N, N)  # full participation (arange(N))
    clients = data["clients"]
    keys = rng.client_keys(k_clients, idx)
    has_corr = (state.round > 0).astype(state.x.dtype)                # [code] none in round 1
    x_T, g_avg, cos = jax.vmap(local_update, in_axes=(None, 0, 0, 0, None, None, None))(
        state.x, clients, keys, state.c_local, state.c_global, has_corr, clients)
    x_new = pairwise_sum(x_T) / N                                      # Alg. 1: (1/N) sum_i
    if cfg.accept_if_improves:                                          # [code] settings.py l. 79-80
      x_new = accept_if_improves(lambda z: F_true(z, clients), state.x, x_new)
    c_local, c_global, extra = state.c_local, state.c_global, jnp.int32(0)
    extra_bytes = 0
    if cfg.correction == "scaffold1":
      # Extra exchange: every client estimates Delta^(i)(x_r) (Q + 1 uncounted queries).
      skeys = rng.client_keys(k_server, idx)
      c_local = jax.vmap(lambda cl, k: fd(lambda z: loss_flat(z, task.full_batch(cl)), x_new, k))(
          clients, skeys)
      c_global = pairwise_sum(c_local) / N
      extra = jnp.int32(N * (Q + 1))
      extra_bytes = N * d * BYTES_PER_REAL
    elif cfg.correction == "scaffold2":
      c_local = g_avg                                                   # mean raw FD of the round
      c_global = pairwise_sum(c_local) / N
      extra_bytes = N * d * BYTES_PER_REAL                              # c_i up, c down
    stats = make_stats(queries=N * queries_per_client_round(cfg, task.stochastic),
                       bytes_up=N * d * BYTES_PER_REAL + extra_bytes,
                       bytes_down=N * d * BYTES_PER_REAL + extra_bytes, participants=N)
    new = ZOBaselineState(x=x_new, round=state.round + 1, c_local=c_local, c_global=c_global,
                          extra_queries=state.extra_queries + extra, cosine=jnp.mean(cos, axis=0))
    return new, stats

  def metrics(state: ZOBaselineState):
    out = {}
    if cfg.correction == "scaffold1":
      out["extra_queries"] = state.extra_queries
    if cfg.track_cosine:
      out.update(cosine_metrics(state.cosine))
    return out

  has_metrics = cfg.correction == "scaffold1" or cfg.track_cosine
  return FederatedAlgorithm(name=name, init=init, round=round_fn, solution=lambda s: unravel(s.x),
                            hparams=cfg, metrics=metrics if has_metrics else None)
