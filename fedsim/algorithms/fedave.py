r"""FedAve (the FedLRGD paper's baseline) and exact GD on the pooled data (the reference).

**FedAve** is FedPAQ (Reisizadeh et al., AISTATS 2020, [30] Alg. 1) without
quantization, as Jadbabaie et al. 2023 formulates it (§III-D, App. D; specs/fedlrgd.md §2.4)::

    for t = 0 .. T-1:
      S_t ⊂ [m], |S_t| = tau m, uniformly without replacement
      each c in S_t: theta^c_{t,0} = theta_t; b local SGD steps
          theta^c_{t,l+1} = theta^c_{t,l} - eta_t grad~f_c(theta^c_{t,l})
        (grad~ on ``batch_size`` samples drawn with replacement; 1 = the single
        random sample of [30])
      upload Delta^c_t = Q(theta^c_{t,b} - theta_t)         (Q = identity in Jadbabaie et al. 2023)
      theta_{t+1} = theta_t + (1/(tau m)) sum_{c in S_t} Delta^c_t

Step sizes (``lr_schedule``): ``fedpaq`` eta_t = 4 / (mu ((t + T0) b + 1)), constant
within an epoch ([30] Thm. 1, recalled in specs/fedlrgd.md §2.4 as (R)). [30]'s
bound holds from epoch T0 on (Lemma 3: T0 = 4 max{kappa, ...}); the schedule is
indexed from T0 (``schedule_offset``; default ceil(4 kappa), Lemma 3's first
term, which makes eta_0 ~ 1/(L1 b)) so that the first epochs are not taken with
the 4/mu step that the bound never uses. ``constant``: eta_t = ``lr``.
Optional quantizer (``quantizer=qsgd``): [30]'s low-precision quantizer
Q_s(x)_i = ||x||_2 sign(x_i) xi_i(x, s) (QSGD, Alistarh et al. 2017), unbiased.
S_t and QSGD's uniforms are drawn in float32, as are the minibatches of the
logistic_soft / ridge tasks (their ``sample_batch``), so there a run with x64
enabled is the same experiment as a float32 run.

FedAve trains on the clients' data only: the server's r samples (which exist
for FedLRGD) are not used, while the reported objective is the paper's F of
eq. (3) over all n = m s + r samples (an O(r/n) difference; §2.4 "modelling gaps").

Ledger (Definition 1): every epoch is Type A, b_t = b * batch_size gradients
per active client and tau m uploads, so Gamma = T (b + phi tau m) for
batch_size = 1 (App. D).

**GD** (``--algorithm=gd``) is exact gradient descent on the pooled data of
eq. (3) (server samples included), step 1/L1: the reference FedLRGD's inexact
GD approximates (Lemma 2). Federated reading of its ledger: each epoch every
client computes its s gradients and uploads one p-vector (Type A), so
Gamma = T (s + phi m). :func:`long_gd` runs it for a reference F_*.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from fedsim.algorithms.fedlrgd import (
  BYTES_PER_REAL,
  OracleLedger,
  add_epochs,
  attach_metrics,
  examples,
  step_size_of,
  zero_ledger,
)
from fedsim.algorithms.local import flat_problem, flat_solution
from fedsim.config import hparam, validate
from fedsim.core import rng
from fedsim.core.reduce import pairwise_sum
from fedsim.core.sampling import sample_clients
from fedsim.core.types import FederatedAlgorithm, Task, make_stats

LR_SCHEDULES = ("fedpaq", "constant")
QUANTIZERS = ("none", "qsgd")


@chex.dataclass(frozen=True)
class FedAveConfig:
  """FedAve hyperparameters (Jadbabaie et al. 2023, App. D; FedPAQ [30] Alg. 1 / Thm. 1).

  Attributes:
    phi: communication-to-computation ratio of Definition 1 (accounting only).
    local_steps: b, local SGD steps per epoch ([30]'s tau). Jadbabaie et al. 2023 tunes b*
      = Theta(m (eps/p)^{1/4}) (eq. (89)); 10 is a working default.
    batch_size: samples per stochastic gradient (1 = [30]'s single sample).
    clients_per_round: tau m (None = all m, tau = 1).
    lr_schedule: ``fedpaq`` (eta_t = 4/(mu((t+T0) b + 1))) or ``constant`` (``lr``).
    lr: the constant step.
    schedule_offset: T0 of the ``fedpaq`` schedule; None = ceil(4 kappa).
    quantizer: ``none`` (Jadbabaie et al. 2023) or ``qsgd`` ([30]).
    qsgd_levels: s of QSGD (levels per sign).
  """
  phi: float = hparam(100.0, help="communication-to-computation ratio phi of the oracle-complexity ledger "
                     "(accounting only)", low=0, source="Jadbabaie et al. 2023, Definition 1")
  local_steps: int = hparam(10, help="local SGD steps per epoch (b; [30]'s tau)", low=1,
                            source="Jadbabaie et al. 2023, eq. (89) tunes b*; 10 is a working default")
  batch_size: int = hparam(1, help="samples per stochastic gradient (1 = [30]'s single sample)", low=1)
  clients_per_round: int | None = hparam(None, help="clients sampled per round (tau m; None = all m)", low=1)
  lr_schedule: str = hparam("fedpaq", help="FedAve step: fedpaq (4/(mu((t+T0)b+1))), constant (lr)",
                            choices=LR_SCHEDULES, source="FedPAQ [30] Thm. 1")
  lr: float = hparam(0.1, help="FedAve constant step (lr_schedule=constant)", low=0, low_open=True,
                     finite=True)
  schedule_offset: int | None = hparam(None, help="FedAve fedpaq schedule offset T0 (None: ceil(4 kappa))",
                                       low=0, source="FedPAQ [30] Thm. 1")
  quantizer: str = hparam("none", help="FedAve upload quantizer: none (Jadbabaie et al. 2023), qsgd (FedPAQ)",
                          choices=QUANTIZERS, source="Jadbabaie et al. 2023, App. D; FedPAQ [30] §2")
  qsgd_levels: int = hparam(1, help="FedAve QSGD levels s (per sign)", low=1, source="Alistarh et al. 2017")

  def __post_init__(self):
    validate(self)


class FedAveState(NamedTuple):
  """theta (p,), epoch t (int32), ledger (Definition 1)."""
  theta: jax.Array
  epoch: jax.Array
  ledger: OracleLedger


def qsgd(x, key, levels: int):
  """QSGD's unbiased stochastic quantizer Q_s(x) (Alistarh et al. 2017; FedPAQ [30] §2).

  Q_s(x)_i = ||x||_2 sign(x_i) xi_i, xi_i = (l + 1{u_i < a_i - l}) / s with
  ``a_i = s |x_i| / ||x||_2``, l = floor(a_i), u_i ~ U[0,1]; E Q_s(x) = x.

  Args:
    x: (p,) float; key: PRNG key; levels: s >= 1.

  Returns:
    (p,) same dtype; 0 where ||x|| = 0.
  """
  norm = jnp.linalg.norm(x)
  safe = jnp.where(norm > 0, norm, 1.0)
  a = levels * jnp.abs(x) / safe
  low = jnp.floor(a)
  u = jax.random.uniform(key, x.shape, jnp.float32).astype(x.dtype)   # float32 draws: same under x64
  xi = (low + (u < a - low).astype(x.dtype)) / levels
  return jnp.where(norm > 0, norm * jnp.sign(x) * xi, jnp.zeros_like(x))


def qsgd_bytes(p: int, levels: int) -> int:
  """Bytes of one QSGD message: a 32-bit norm, and per coordinate a sign and a level."""
  return math.ceil((32 + p * (1 + math.ceil(math.log2(levels + 1)))) / 8)


def make_fedave(task: Task, cfg: FedAveConfig, name: str = "fedave") -> FederatedAlgorithm:
  """Builds FedAve.

  Raises:
    ValueError: a bad hyperparameter (named), or the ``fedpaq`` schedule on a
      task that reports no ``mu``/``kappa``.
  """
  if cfg.lr_schedule not in LR_SCHEDULES:
    raise ValueError(f"lr_schedule: unknown {cfg.lr_schedule!r}; accepted: {', '.join(LR_SCHEDULES)}")
  if cfg.quantizer not in QUANTIZERS:
    raise ValueError(f"quantizer: unknown {cfg.quantizer!r}; accepted: {', '.join(QUANTIZERS)}")
  for n in ("local_steps", "batch_size", "qsgd_levels"):
    if getattr(cfg, n) < 1:
      raise ValueError(f"{n} must be >= 1; got {getattr(cfg, n)}")
  if not cfg.phi >= 0:
    raise ValueError(f"phi must be >= 0; got {cfg.phi}")
  m = task.num_clients
  M = cfg.clients_per_round or m
  if not 1 <= M <= m:
    raise ValueError(f"clients_per_round must be in [1, {m}]; got {M}")
  b = cfg.local_steps
  if cfg.lr_schedule == "fedpaq":
    if "mu" not in task.info or "kappa" not in task.info:
      raise ValueError(f"lr_schedule=fedpaq needs the task's mu and kappa; {task.name!r} has none "
                       "(use lr_schedule=constant)")
    mu = float(task.info["mu"])
    t0 = cfg.schedule_offset if cfg.schedule_offset is not None else math.ceil(4 * task.info["kappa"])
    if t0 < 0:
      raise ValueError(f"schedule_offset must be >= 0; got {t0}")
    def lr_of(t):
      return 4.0 / (mu * ((t + t0) * b + 1.0))
  else:
    if not cfg.lr > 0:
      raise ValueError(f"lr must be > 0; got {cfg.lr}")
    def lr_of(t):
      return cfg.lr + 0.0 * t

  unravel = flat_solution(task)
  p = task.dim
  def loss(x, batch):
    return task.loss(unravel(x), batch)
  up_bytes = qsgd_bytes(p, cfg.qsgd_levels) if cfg.quantizer == "qsgd" else p * BYTES_PER_REAL

  def init(key, shared_key):
    del shared_key  # no draws shared by all parties (rng.init_keys)
    x0, _ = flat_problem(task, key)
    return FedAveState(theta=x0, epoch=jnp.zeros((), jnp.int32), ledger=zero_ledger())

  def local_update(theta, client, key, eta):
    def step(x, l):
      batch = task.sample_batch(client, jax.random.fold_in(key, l), cfg.batch_size)
      return x - eta * jax.grad(loss)(x, batch), None   # theta^c_{t,l+1} = theta^c_{t,l} - eta_t grad~f_c
    x, _ = jax.lax.scan(step, theta, jnp.arange(b))
    return x - theta

  def round_fn(state: FedAveState, key, data):
    k_sample, k_clients, k_quant = rng.round_subkeys(key)
    idx = sample_clients(k_sample, m, M)                                # S_t
    clients = jax.tree_util.tree_map(lambda a: jnp.take(a, idx, axis=0), data["clients"])
    eta = lr_of(state.epoch.astype(state.theta.dtype))               # constant within the epoch
    deltas = jax.vmap(local_update, in_axes=(None, 0, 0, None))(
        state.theta, clients, rng.client_keys(k_clients, idx), eta)    # (M, p)
    if cfg.quantizer == "qsgd":
      deltas = jax.vmap(lambda d, k: qsgd(d, k, cfg.qsgd_levels))(deltas, rng.client_keys(k_quant, idx))
    theta = state.theta + pairwise_sum(deltas) / M   # theta_{t+1} = theta_t + (1/(tau m)) sum_{S_t} Delta^c_t
    ledger = add_epochs(state.ledger, epochs=1, compute=b * cfg.batch_size, comm_epochs=1, uploads=M)
    stats = make_stats(queries=M * b * cfg.batch_size, bytes_up=M * up_bytes,
                       bytes_down=M * p * BYTES_PER_REAL, participants=M)
    return FedAveState(theta=theta, epoch=state.epoch + 1, ledger=ledger), stats

  return attach_metrics(FederatedAlgorithm(name=name, init=init, round=round_fn,
                                           solution=lambda s: unravel(s.theta), hparams=cfg), cfg.phi)


# ----------------------------------------------------------------------------------------------
# Exact GD on the pooled data (the reference).
# ----------------------------------------------------------------------------------------------

@chex.dataclass(frozen=True)
class GDConfig:
  """Exact GD hyperparameters.

  Attributes:
    phi: communication-to-computation ratio of Definition 1 (accounting only).
    step_size: None = 1/L1 (the step of Lemma 2 / Alg. 1 line 11).
  """
  phi: float = hparam(100.0, help="communication-to-computation ratio phi of the oracle-complexity ledger "
                     "(accounting only)", low=0, source="Jadbabaie et al. 2023, Definition 1")
  step_size: float | None = hparam(None, help="GD step (None: 1/L1 of the task)", low=0, low_open=True,
                                   finite=True, source="Jadbabaie et al. 2023, Lemma 2 / Alg. 1 line 11")

  def __post_init__(self):
    validate(self)


class GDState(NamedTuple):
  theta: jax.Array
  ledger: OracleLedger


def pooled_grad_fn(task: Task):
  """``(theta (p,), data) -> (grad F (p,), n)`` of eq. (3): clients (task.loss on their full
  batch, weighted by n_c) plus the server's masked samples if the data has them."""
  unravel = flat_solution(task)
  def loss(x, batch):
    return task.loss(unravel(x), batch)

  def grad(theta, data):
    sizes = data["sizes"].astype(theta.dtype)
    gc = jax.vmap(lambda c: jax.grad(loss)(theta, task.full_batch(c)))(data["clients"])   # (m, p)
    total, n = pairwise_sum(gc * sizes[:, None]), pairwise_sum(sizes)
    if "server" in data:
      per_example_loss = task.per_example_loss
      if per_example_loss is None:
        raise ValueError(f"task {task.name!r} has server samples but no per_example_loss")
      def f(x, e):
        return per_example_loss(unravel(x), e)
      gs = jax.vmap(lambda e: jax.grad(f)(theta, e))(examples(data["server"]))
      ms = data["server"]["mask"].astype(theta.dtype)
      total, n = total + pairwise_sum(gs * ms[:, None]), n + pairwise_sum(ms)
    return total / n, n

  return grad


def make_gd(task: Task, cfg: GDConfig, name: str = "gd") -> FederatedAlgorithm:
  """Builds exact GD (one step per round) with step 1/L1.

  Raises:
    ValueError: no step size and no L1 in the task; a bad phi.
  """
  if not cfg.phi >= 0:
    raise ValueError(f"phi must be >= 0; got {cfg.phi}")
  step = step_size_of(task, cfg)
  unravel = flat_solution(task)
  grad = pooled_grad_fn(task)
  m = task.num_clients
  clients = task.data["clients"]
  s_max = int(clients["mask"].shape[1]) if isinstance(clients, dict) and "mask" in clients else 1
  p = task.dim

  def init(key, shared_key):
    del shared_key  # no draws shared by all parties (rng.init_keys)
    x0, _ = flat_problem(task, key)
    return GDState(theta=x0, ledger=zero_ledger())

  def round_fn(state: GDState, key, data):
    del key
    g, n = grad(state.theta, data)
    ledger = add_epochs(state.ledger, epochs=1, compute=s_max, comm_epochs=1, uploads=m)
    stats = make_stats(queries=n.astype(jnp.int32), bytes_up=m * p * BYTES_PER_REAL,
                       bytes_down=m * p * BYTES_PER_REAL, participants=m)
    return GDState(theta=state.theta - step * g, ledger=ledger), stats   # theta - (1/L1) grad F, eq. (3)

  return attach_metrics(FederatedAlgorithm(name=name, init=init, round=round_fn,
                                           solution=lambda s: unravel(s.theta), hparams=cfg), cfg.phi)


def long_gd(task: Task, theta0, num_steps: int, step_size: float | None = None):
  """Exact GD for ``num_steps`` steps (one jitted ``lax.scan``): a reference optimum
  (run under x64 for a float64 F_*). Returns theta (p,)."""
  step = step_size if step_size is not None else step_size_of(task, GDConfig())
  grad = pooled_grad_fn(task)

  @jax.jit
  def run(theta, data):
    return jax.lax.scan(lambda th, _: (th - step * grad(th, data)[0], None), theta, None,
                        length=num_steps)[0]

  return run(ravel_pytree(theta0)[0], task.data)
