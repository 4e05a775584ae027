r"""FedLRGD, federated low-rank gradient descent (Jadbabaie et al. 2023, Algorithm 1; specs/fedlrgd.md §2.1).

What the code does, line by line of Algorithm 1 (Jadbabaie et al. 2023, §III-B):

* Line 1: the server draws r parameter anchors vartheta^(1..r) (``anchor_dist``:
  U[-a, a]^p, App. A's box for a = 1, or theta^(0) + a N(0, I); the paper says
  "arbitrary", a.e. distinct, footnotes 2-3). Its r samples x^(0,1..r) are the
  pivots (the server's whole dataset; r = the rank).
* Lines 2-4 (epoch 1, Type B, b_1 = r^2): per coordinate i the r x r matrix

      G^(i)[j, k] = g_i(x^(0,j); vartheta^(k)),   g_i = df/dtheta_i                  (34)

  (rows: server samples j; columns: anchors k) and its factorisation
  (``weights_solver``: ``solve`` = LU of G^T, default; ``inverse`` = the
  paper-literal (G^(i))^{-1} of line 4; ``pinv`` / ``ridge`` = deviations for a
  singular G, specs §6.3).
* Lines 5-9 (epochs 2..r+1): client c sums its gradients at every anchor,
  h^(i,c)_k = sum_j g_i(x^(c,j); vartheta^(k)) (line 6, b_2 = r s), and solves

      (v^(i,c))^T = (h^(i,c))^T (G^(i))^{-1},  i.e.  (G^(i))^T v^(i,c) = h^(i,c)    (35)

  uploading the r x p weights as r p-vectors, one per epoch (lines 8-9).
* Line 10: W[i, k] = 1 + sum_c v_k^(i,c) (the "1 +" is the server sample's own term).
* Line 11 (epoch r+2, Type B, r gradients per step): S steps of inexact GD

      grad^F_i(theta) = (1/n) sum_k g_i(x^(0,k); theta) W[i, k],   n = m s + r       (41)
      theta <- theta - (1/L1) grad^F(theta)                                           (42)

  (step ``step_size``, default 1/L1 of the task). The clients never compute
  again after line 7. ``project_box`` (default off) clips theta to [-b, b]^p
  after each step (projected inexact GD, §II-C; a deviation).

**Engine rounds.** ``--rounds`` is S: engine round t (t = 0..S-1) is GD step
t+1 of line 11. Lines 1-10 (the set-up) run once in ``init``, on the data of
the task the algorithm was built with (the engine passes that data to every
round). The first round's :class:`RoundStats` carries the set-up's traffic
(``state.charged`` marks it done): queries r^2 + sum_c r s_c (+ that round's
r), bytes_up = m r p reals (m uploads of p reals in each of the r
communication epochs), participants = m r (client-epochs), bytes_down = m (r p
+ p r^2) reals (the broadcast of the anchors and the p r x r factors of line
5: free in Definition 1, counted here). Every later round costs r queries
(line 11) and no bytes.

**Oracle-complexity ledger (Definition 1).** ``state.ledger`` counts
``compute`` = sum_t b_t (r^2 in epoch 1, r s in epoch 2 with s = the padded
samples per client, 0 in epochs 3..r+1, r per GD step in epoch r+2),
``uploads`` = sum over communication epochs of the uploading clients (tau m =
m per epoch, r epochs), ``comm_epochs`` = r and ``epochs`` = r + 2 once the GD
epoch has started, so Gamma = compute + phi uploads = r^2 + r s + r S + phi m r
(Theorem 2). The algorithm's ``metrics`` (set by :func:`attach_metrics`) put
these counts and Gamma into every engine record (Gamma in the run's float
dtype: exact below 2^24 in float32); :func:`with_ledger_metrics` +
:func:`ledger_on_eval` give Gamma as an exact host float
(``experiments.fedlrgd.suite``). FedAve and GD (``fedave.py``) share the ledger.

**Padding (sweeping r does not recompile; specs §6.2).** Everything is shaped
by the static R = the task's server pool size (``max_rank``); r is the number of
True entries of the server mask, a value in the data. Padded anchors and server
rows are masked: G_pad = [[G, 0], [0, c I]] per coordinate (c =
sigma_max(G^(i)), so cond(G_pad) = cond(G) and pinv's relative cut-off is the
unpadded one), h_pad = [h, 0] so v_pad = [v, 0], and padded server gradients
are zero in (41).

**Precision.** cond(G^(i)) grows fast with r (1e7 - 1e11 from r ~ 8-12 on
the 2-feature logistic task; specs §0 item 8, §6.3), so lines 2-10 always run
in float64: in ``init``'s compiled graph when x64 is enabled (``--x64``),
otherwise in the algorithm's host-side ``setup`` (:func:`setup_float64`), run
once by the engine after ``init`` and outside any compiled program, on the host
CPU under a scoped ``jax.enable_x64(True)`` (nothing global changes), on the
run's data and anchors upcast exactly to float64; W and the diagnostics come
back rounded to the run's float dtype. (It used to run inside ``init`` through
``jax.pure_callback``; a callback that dispatches JAX work can deadlock the CPU
runtime, jax-ml/jax#24255, and did, on an idle 2-core machine.) The set-up
runs on one device, so it also runs when the clients are sharded over devices. The GD
steps of line 11 run in the run's dtype. Measured (2 features, m = 50, s = 40,
3 seeds, 20 random theta, S = 300): with float64
weights a float32 run matches the x64 run at r <= 12 (median relative
gradient error 3.5e-4 / 2.1e-4 vs 3.5e-4 / 1.9e-4 at r = 8 / 12), while at
r = 16 / 20 the float32 evaluation of (41) (terms far larger than their sum)
limits it to 1.7e-5 / 1.0e-5 vs 1.6e-6 / 2.3e-7 with x64; the final gaps
were <= 3e-12 in both precisions from r = 16 on. A float32 solve of the same
system (the behaviour before) gives weights off by O(1) at r = 16 whose
interpolant is about as accurate (1.1e-5 / 2.4e-6): the weights are an
ill-posed function of the data, so what the float64 solve buys a float32 run
is the paper's weights (the x64 run's), not a smaller error
(experiments/flagfiles/fedlrgd_precision.cfg). Use ``--x64`` for studies of
the gradient error at large r. The random draws (theta^(0), anchors) are made
in float32 and cast, so ``--x64`` changes the arithmetic, not the experiment.
Per-coordinate cond(G^(i)) and sigma_min are kept in the state and reported
by :func:`diagnostics` against assumption (8), ||G^-1|| <= r^alpha.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from fedsim.config import hparam, validate
from fedsim.core.errors import ConfigError
from fedsim.core.reduce import pairwise_sum
from fedsim.core.types import FederatedAlgorithm, Task, make_stats

BYTES_PER_REAL = 4
WEIGHT_SOLVERS = ("solve", "inverse", "pinv", "ridge")
ANCHOR_DISTS = ("uniform", "gaussian")
_INT32_MAX = 2 ** 31 - 1


# ----------------------------------------------------------------------------------------------
# Definition 1: the federated oracle-complexity ledger (shared by fedlrgd, fedave, gd).
# ----------------------------------------------------------------------------------------------

class OracleLedger(NamedTuple):
  """Exact per-epoch counts of Definition 1 (int32 scalars, cumulative).

  Attributes:
    epochs: T, the epochs so far (Definition 1's t = 1..T).
    compute: sum_t b_t, gradients computed in epoch t by each active client
      (or by the server in a server-only epoch).
    comm_epochs: epochs in which clients communicate.
    uploads: sum over communication epochs of the active clients tau m.
  """
  epochs: jax.Array
  compute: jax.Array
  comm_epochs: jax.Array
  uploads: jax.Array


def zero_ledger() -> OracleLedger:
  z = jnp.zeros((), jnp.int32)
  return OracleLedger(z, z, z, z)


def add_epochs(ledger: OracleLedger, epochs=0, compute=0, comm_epochs=0, uploads=0) -> OracleLedger:
  """The ledger plus one or more epochs' counts (each cast to int32)."""
  def c(v):
    return jnp.asarray(v, jnp.int32)
  return OracleLedger(ledger.epochs + c(epochs), ledger.compute + c(compute),
                      ledger.comm_epochs + c(comm_epochs), ledger.uploads + c(uploads))


def oracle_complexity(ledger, phi: float) -> float:
  """Gamma = sum_t [b_t + 1{comm} phi tau m] = compute + phi * uploads (Definition 1).

  Args:
    ledger: an :class:`OracleLedger` (device or host values).
    phi: the communication-to-computation ratio phi >= 0.

  Returns:
    Gamma as a Python float (exact for integer phi below 2**53).
  """
  led = jax.device_get(ledger)
  return float(int(led.compute) + phi * int(led.uploads))


def ledger_record(ledger, phi: float) -> dict:
  """Host dict of the ledger: oracle_complexity (Gamma), compute, uploads, epochs, comm_epochs."""
  led = jax.device_get(ledger)
  return {"oracle_complexity": oracle_complexity(led, phi), "oracle_compute": int(led.compute),
          "oracle_uploads": int(led.uploads), "epochs": int(led.epochs),
          "comm_epochs": int(led.comm_epochs)}


def with_ledger_metrics(algorithm: FederatedAlgorithm, task: Task, phi: float):
  """Wraps an algorithm with a ``state.ledger`` so engine records carry Definition 1.

  ``fedsim.core.simulate`` scores ``task.evaluate(algorithm.solution(state))``;
  the wrapped solution also returns the ledger, and the wrapped task's
  evaluate adds ``oracle_compute``, ``oracle_uploads``, ``epochs``,
  ``comm_epochs`` to the task's metrics. Wrap ``on_eval`` with
  :func:`ledger_on_eval` to add ``oracle_complexity`` = Gamma (computed on the
  host, exactly).

  Returns:
    (algorithm', task') for ``simulate(algorithm', task', ...)``.
  """
  alg = algorithm._replace(solution=lambda s: (algorithm.solution(s), s.ledger))

  def evaluate(solution, data):
    params, led = solution
    out = dict(task.evaluate(params, data))
    out.update(oracle_compute=led.compute, oracle_uploads=led.uploads, epochs=led.epochs,
               comm_epochs=led.comm_epochs)
    return out

  return alg, dataclasses.replace(task, evaluate=evaluate)


def ledger_metrics(ledger: OracleLedger, phi: float) -> dict:
  """Traced scalars of the ledger for a record: the counts and Gamma = compute + phi uploads
  (Gamma in the state's float dtype: exact below 2**24 in float32, 2**53 in float64)."""
  gamma = ledger.compute + phi * ledger.uploads      # int32 + weak float -> the default float dtype
  return {"oracle_complexity": gamma, "oracle_compute": ledger.compute, "oracle_uploads": ledger.uploads,
          "epochs": ledger.epochs, "comm_epochs": ledger.comm_epochs}


def attach_metrics(algorithm: FederatedAlgorithm, phi: float) -> FederatedAlgorithm:
  """Sets ``algorithm.metrics`` so the engine merges the oracle-complexity ledger
  (Definition 1) into every evaluation record."""
  return algorithm._replace(metrics=lambda s: ledger_metrics(s.ledger, phi))


def ledger_on_eval(phi: float, on_eval: Callable[[dict], None] | None = None):
  """An ``on_eval`` that adds Gamma = oracle_compute + phi * oracle_uploads to each record."""

  def hook(rec):
    rec["oracle_complexity"] = float(int(rec["oracle_compute"]) + phi * int(rec["oracle_uploads"]))
    if on_eval is not None:
      on_eval(rec)

  return hook


# ----------------------------------------------------------------------------------------------
# Hyperparameters.
# ----------------------------------------------------------------------------------------------

@chex.dataclass(frozen=True)
class FedLRGDConfig:
  """FedLRGD hyperparameters (Algorithm 1). The rank r is the task's server
  dataset size (``--rank``; the paper's ``r = |server data|``, §III-B), and S is
  the number of engine rounds (``--rounds``).

  Attributes:
    phi: communication-to-computation ratio of Definition 1 (eq. (24); the
      paper assumes phi >> 1 and fixes no value). Accounting only.
    step_size: GD step; None = 1/L1 (Alg. 1 line 11, eq. (42)) with the task's
      ``info["L1"]``.
    weights_solver: ``solve`` | ``inverse`` | ``pinv`` | ``ridge`` (module doc).
    rcond: relative singular-value cut-off of ``pinv``.
    ridge_lambda: relative Tikhonov weight of ``ridge`` (lam = ridge_lambda * sigma_max^2).
    anchor_dist: ``uniform`` (U[-a, a]^p, App. A's parameter box for a = 1) or
      ``gaussian`` (theta^(0) + a N(0, I)); the paper: "arbitrary", a.e.
      distinct (footnotes 2-3).
    anchor_scale: a.
    project_box: None (Algorithm 1, unprojected) or b > 0: clip theta to
      [-b, b]^p after each step (projected inexact GD, §II-C; a deviation).
  """
  phi: float = hparam(100.0, help="communication-to-computation ratio phi of the oracle-complexity ledger "
                       "(accounting only)", low=0, source="Jadbabaie et al. 2023, Definition 1, eq. (24)")
  step_size: float | None = hparam(None, help="FedLRGD step (None: 1/L1 of the task)", low=0, low_open=True,
                                   finite=True, source="Jadbabaie et al. 2023, Alg. 1 line 11, eq. (42)")
  weights_solver: str = hparam("solve", help="FedLRGD weight solve: solve (LU), inverse (paper-literal), "
                               "pinv, ridge", choices=WEIGHT_SOLVERS, source="Jadbabaie et al. 2023, Alg. 1")
  rcond: float = hparam(1e-10, help="FedLRGD pinv relative singular-value cut-off", low=0, low_open=True,
                        finite=True)
  ridge_lambda: float = hparam(1e-10, help="FedLRGD ridge (Tikhonov) weight, relative to sigma_max(G)^2",
                               low=0, low_open=True, finite=True)
  anchor_dist: str = hparam("uniform", help="FedLRGD parameter anchors: uniform (U[-a,a]^p), gaussian "
                            "(theta0 + a N(0,I))", choices=ANCHOR_DISTS, source="Jadbabaie et al. 2023, footnotes 2-3")
  anchor_scale: float = hparam(1.0, help="FedLRGD anchor scale a", low=0, low_open=True, finite=True,
                               source="Jadbabaie et al. 2023, App. A")
  project_box: float | None = hparam(None, help="FedLRGD: clip theta to [-b,b]^p after each step (None: "
                                     "off, Alg. 1)", low=0, low_open=True, finite=True,
                                     source="projected inexact GD, Jadbabaie et al. 2023, §II-C (a deviation)")

  def __post_init__(self):
    validate(self)


# ----------------------------------------------------------------------------------------------
# Pure kernels (vmapped in the algorithm; loop references in the tests).
# ----------------------------------------------------------------------------------------------

def examples(tree):
  """The per-example leaves of a client/server data dict (drops ``mask``)."""
  return {k: v for k, v in tree.items() if k != "mask"}


def flat_grad_fn(task: Task):
  """(grad_f, unravel): grad_f(theta (p,), example) -> (p,), the gradient of the task's
  per-example loss in the flat parameters; unravel maps (p,) to the task's params.

  Raises:
    ValueError: the task has no ``per_example_loss``.
  """
  per_example_loss = task.per_example_loss
  if per_example_loss is None:
    raise ValueError(f"task {task.name!r} has no per_example_loss; FedLRGD needs per-sample gradients")
  params = jax.eval_shape(lambda: task.init_params(jax.random.key(0)))
  zeros = jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), params)
  _, unravel = ravel_pytree(zeros)
  def f(theta, ex):
    return per_example_loss(unravel(theta), ex)
  return jax.grad(f), unravel


def server_matrices(grad_f, server, anchors):
  """G^(i) of eq. (34) for every coordinate, zero-padded: (p, R, R), G[i, j, k] =
  g_i(x^(0,j); vartheta^(k)) for real j, k and 0 where either is padding (Alg. 1 lines 2-3).

  Args:
    grad_f: ``(theta (p,), example) -> (p,)``.
    server: ``{"x": (R, ...), "y": (R,), "mask": (R,) bool}``.
    anchors: (R, p).
  """
  ex = examples(server)
  full = jax.vmap(lambda e: jax.vmap(lambda th: grad_f(th, e))(anchors))(ex)   # (R_j, R_k, p)
  msk = server["mask"]
  valid = (msk[:, None] & msk[None, :]).astype(full.dtype)
  return jnp.moveaxis(full * valid[..., None], -1, 0)


class ServerFactors(NamedTuple):
  """What the server broadcasts after epoch 1 (Alg. 1 lines 4-5) for ``weights_solver``.

  ``lu``/``piv``: LU factors of G_pad^T (``solve``); ``op``: (p, R, R) matrix M
  with v^(i) = M_i h^(i) (``inverse``: (G^-1)^T; ``pinv``: pinv(G^T); ``ridge``:
  (G G^T + lam I)^{-1} G). Unused fields are zeros of shape (1, 1, 1).
  """
  lu: jax.Array
  piv: jax.Array
  op: jax.Array


def singular_values(G):
  """(p, R) singular values of the zero-padded G^(i), descending."""
  return jnp.linalg.svd(G, compute_uv=False)


def conditioning(G, r):
  """(sigma_max (p,), sigma_min (p,), cond (p,)) of each r x r block G^(i) (r traced int)."""
  sv = singular_values(G)
  smax = sv[:, 0]
  smin = jnp.take(sv, jnp.maximum(r - 1, 0), axis=1)
  return smax, smin, smax / smin


def server_factors(G, mask, solver: str, rcond: float = 1e-10, ridge_lambda: float = 1e-10):
  """Epoch 1 line 4: the server's factorisation of every G^(i), padded (module doc).

  Args:
    G: (p, R, R) zero-padded server matrices.
    mask: (R,) bool, the real server samples / anchors.
    solver: one of :data:`WEIGHT_SOLVERS`.

  Returns:
    (:class:`ServerFactors`, sigma_max (p,), sigma_min (p,), cond (p,)).
  """
  r = jnp.sum(mask.astype(jnp.int32))
  smax, smin, cond = conditioning(G, r)
  scale = jnp.where(smax > 0, smax, jnp.ones_like(smax))
  pad = jnp.diag((~mask).astype(G.dtype))
  Gp = G + scale[:, None, None] * pad                         # [[G, 0], [0, c I]]
  A = jnp.swapaxes(Gp, -1, -2)                                # A_i = G_pad^(i)T: A v = h
  dummy = jnp.zeros((1, 1, 1), G.dtype)
  if solver == "solve":
    lu, piv = jax.scipy.linalg.lu_factor(A)
    return ServerFactors(lu, piv, dummy), smax, smin, cond
  none = ServerFactors(dummy, jnp.zeros((1, 1), jnp.int32), dummy)
  if solver == "inverse":
    op = jnp.swapaxes(jnp.linalg.inv(Gp), -1, -2)             # v^T = h^T G^{-1}  (35)
  elif solver == "pinv":
    op = jnp.linalg.pinv(A, rtol=rcond)
  elif solver == "ridge":
    lam = ridge_lambda * scale ** 2
    eye = jnp.eye(A.shape[-1], dtype=A.dtype)
    AtA = jnp.swapaxes(A, -1, -2) @ A
    op = jnp.linalg.solve(AtA + lam[:, None, None] * eye, jnp.swapaxes(A, -1, -2))
  else:
    raise ValueError(f"unknown weights_solver {solver!r}; accepted: {', '.join(WEIGHT_SOLVERS)}")
  return none._replace(op=op), smax, smin, cond


def apply_factors(factors: ServerFactors, hT, solver: str):
  """v (p, R) from h^T (p, R): v^(i) solves G^(i)T v = h^(i) (eq. (35))."""
  if solver == "solve":
    return jax.vmap(lambda lu, piv, b: jax.scipy.linalg.lu_solve((lu, piv), b))(factors.lu, factors.piv, hT)
  return jnp.einsum("ikl,il->ik", factors.op, hT)


def client_anchor_gradients(grad_f, client, anchors, anchor_mask):
  """Alg. 1 line 6: h (R, p), h[k, i] = sum_j g_i(x^(c,j); vartheta^(k)) over the client's
  real samples (r s gradient evaluations); rows of padded anchors are 0."""
  ex = examples(client)
  cm = client["mask"]

  def at(theta):
    g = jax.vmap(lambda e: grad_f(theta, e))(ex)                # (s, p)
    return pairwise_sum(g * cm[:, None].astype(g.dtype))

  h = jax.vmap(at)(anchors)
  return h * anchor_mask[:, None].astype(h.dtype)


def client_weights(grad_f, client, anchors, anchor_mask, factors: ServerFactors, solver: str):
  """The pure per-client kernel of epoch 2 (Alg. 1 lines 6-7): v^(c) (p, R),
  v^(c)[i, k] = v_k^(i,c) with (G^(i))^T v^(i,c) = h^(i,c) (eq. (35))."""
  h = client_anchor_gradients(grad_f, client, anchors, anchor_mask)
  return apply_factors(factors, h.T, solver)


def per_sample_weights(grad_f, client, anchors, anchor_mask, factors: ServerFactors, solver: str):
  """Eq. (38) for every client sample: w (s, p, R), w[j, i, k] = w_{j,k}^(i,c); masked
  samples give 0. Their sum over j is :func:`client_weights` (eq. (39))."""
  ex = examples(client)

  def one(e, msk):
    g = jax.vmap(lambda th: grad_f(th, e))(anchors) * anchor_mask[:, None]   # (R, p)
    return apply_factors(factors, g.T, solver) * msk

  return jax.vmap(one)(ex, client["mask"].astype(anchors.dtype))


class Setup(NamedTuple):
  """Result of Algorithm 1's epochs 1..r+1.

  Attributes:
    weights: W (p, R), W[i, k] = 1 + sum_c v_k^(i,c) for real k, 0 for padding (line 10).
    sigma_max, sigma_min, cond: (p,) of each G^(i).
  """
  weights: jax.Array
  sigma_max: jax.Array
  sigma_min: jax.Array
  cond: jax.Array


def setup(grad_f, data, anchors, solver: str = "solve", rcond: float = 1e-10,
          ridge_lambda: float = 1e-10) -> Setup:
  """Algorithm 1, lines 1-10, vmapped over clients and coordinates.

  Args:
    grad_f: ``(theta (p,), example) -> (p,)``.
    data: a task's data with ``server`` (R samples, mask) and ``clients``.
    anchors: (R, p); the first r (mask) are used.
    solver, rcond, ridge_lambda: see :func:`server_factors`.

  Returns:
    :class:`Setup`.
  """
  server = data["server"]
  mask = server["mask"]
  G = server_matrices(grad_f, server, anchors)                                       # (34)
  factors, smax, smin, cond = server_factors(G, mask, solver, rcond, ridge_lambda)   # line 4
  V = jax.vmap(lambda c: client_weights(grad_f, c, anchors, mask, factors, solver))(data["clients"])
  W = (1.0 + pairwise_sum(V)) * mask[None, :].astype(V.dtype)                       # line 10
  return Setup(W, smax, smin, cond)


def _upcast64(a):
  a = np.asarray(a)
  return a.astype(np.float64) if np.issubdtype(a.dtype, np.floating) else a


def setup_float64(grad_f, data, anchors, solver: str = "solve", rcond: float = 1e-10,
                  ridge_lambda: float = 1e-10) -> Setup:
  """Algorithm 1, lines 1-10 (:func:`setup`) computed in float64 whatever the run's precision.

  With float64 anchors (x64 enabled) this is :func:`setup`, traceable (it runs
  in ``init``'s compiled graph). With float32 anchors it is a host function, not
  traceable: it compiles :func:`setup` under a scoped ``jax.enable_x64(True)``
  (nothing global changes) and runs it on the host CPU on the data and anchors
  upcast exactly to float64; the results are rounded to float32. FedLRGD calls
  it from its ``setup`` (``FederatedAlgorithm.setup``), outside any compiled
  program: JAX must not run inside a host callback (jax-ml/jax#24255).

  Args:
    grad_f: ``(theta (p,), example) -> (p,)``; must be dtype-polymorphic (it is
      traced again with float64 inputs).
    data: a task's data with ``server`` (R samples, mask) and ``clients``.
    anchors: (R, p) float32 or float64; concrete (not traced) when float32.
    solver, rcond, ridge_lambda: see :func:`server_factors`.

  Returns:
    :class:`Setup` in the anchors' dtype (W (p, R), sigma_max, sigma_min, cond (p,)).

  Raises:
    TypeError: float32 anchors given as traced values (inside ``jit``/``vmap``).
  """
  if anchors.dtype == jnp.float64:
    return setup(grad_f, data, anchors, solver, rcond, ridge_lambda)
  if isinstance(anchors, jax.core.Tracer):
    raise TypeError("setup_float64 with float32 anchors runs on the host: call it outside jit/vmap "
                    "(FedLRGD does, from FederatedAlgorithm.setup)")
  dt = anchors.dtype
  with jax.enable_x64(True), jax.default_device(jax.devices("cpu")[0]):
    d = jax.tree_util.tree_map(_upcast64, data)
    fn = jax.jit(lambda d, a: setup(grad_f, d, a, solver, rcond, ridge_lambda))
    res = jax.device_get(fn(d, _upcast64(anchors)))
  return Setup(*(jnp.asarray(np.asarray(v).astype(dt)) for v in res))


def num_samples(data):
  """n = sum of client masks + r (the 1/n of eq. (41))."""
  return (jnp.sum(data["clients"]["mask"].astype(jnp.int32)) +
          jnp.sum(data["server"]["mask"].astype(jnp.int32)))


def approx_grad(grad_f, theta, server, W, n):
  """Eq. (41): grad^F(theta) (p,) = (1/n) sum_k g(x^(0,k); theta) * W[:, k] (r server gradients)."""
  J = jax.vmap(lambda e: grad_f(theta, e))(examples(server))                     # (R, p)
  J = J * server["mask"][:, None].astype(J.dtype)
  return jnp.einsum("kp,pk->p", J, W) / n.astype(J.dtype)


def exact_grad(grad_f, theta, data):
  """grad F(theta) (p,) of eq. (3): pooled server (masked) and client samples."""
  c, s = data["clients"], data["server"]
  gc = jax.vmap(jax.vmap(lambda e: grad_f(theta, e)))(examples(c))              # (m, s, p)
  gc = gc * c["mask"][..., None].astype(gc.dtype)
  gs = jax.vmap(lambda e: grad_f(theta, e))(examples(s)) * s["mask"][:, None].astype(gc.dtype)
  total = pairwise_sum(gc.reshape(-1, gc.shape[-1])) + pairwise_sum(gs)
  return total / num_samples(data).astype(gc.dtype)


def anchor_key(init_key):
  """The key of the anchors (Alg. 1 line 1): a sub-stream of the run's init key
  (theta^(0) uses the init key itself, as every other algorithm does)."""
  return jax.random.fold_in(init_key, 0x4A4E)


def draw_anchors(key, theta0, num: int, dist: str, scale: float):
  """Alg. 1 line 1: num anchors (num, p) in theta0's dtype.

  ``uniform``: U[-scale, scale]^p; ``gaussian``: theta0 + scale N(0, I). The
  draws are made in float32 and cast, so a run with x64 enabled gets the same
  anchors (rounded once) as a float32 run with the same key.

  Raises:
    ValueError: unknown ``dist``.
  """
  p = theta0.shape[0]
  if dist == "uniform":
    u = jax.random.uniform(key, (num, p), jnp.float32, -scale, scale)
    return u.astype(theta0.dtype)
  if dist == "gaussian":
    return theta0[None] + scale * jax.random.normal(key, (num, p), jnp.float32).astype(theta0.dtype)
  raise ValueError(f"unknown anchor_dist {dist!r}; accepted: {', '.join(ANCHOR_DISTS)}")


# ----------------------------------------------------------------------------------------------
# The algorithm.
# ----------------------------------------------------------------------------------------------

class FedLRGDState(NamedTuple):
  """theta (p,); anchors (R, p); weights W (p, R) of line 10; charged (the set-up's
  epochs are in the ledgers: False until the first round); sigma_min, cond (p,) of
  each G^(i); ledger (Definition 1)."""
  theta: jax.Array
  anchors: jax.Array
  weights: jax.Array
  charged: jax.Array
  sigma_min: jax.Array
  cond: jax.Array
  ledger: OracleLedger


def check_config(cfg: FedLRGDConfig):
  """Raises ValueError naming the hyperparameter on a bad value."""
  if cfg.weights_solver not in WEIGHT_SOLVERS:
    raise ValueError(f"weights_solver: unknown {cfg.weights_solver!r}; accepted: {', '.join(WEIGHT_SOLVERS)}")
  if cfg.anchor_dist not in ANCHOR_DISTS:
    raise ValueError(f"anchor_dist: unknown {cfg.anchor_dist!r}; accepted: {', '.join(ANCHOR_DISTS)}")
  if not cfg.phi >= 0:
    raise ValueError(f"phi must be >= 0; got {cfg.phi}")
  for name in ("anchor_scale", "rcond", "ridge_lambda"):
    if not getattr(cfg, name) > 0:
      raise ValueError(f"{name} must be > 0; got {getattr(cfg, name)}")
  if cfg.step_size is not None and not cfg.step_size > 0:
    raise ValueError(f"step_size must be > 0; got {cfg.step_size}")
  if cfg.project_box is not None and not cfg.project_box > 0:
    raise ValueError(f"project_box must be > 0; got {cfg.project_box}")


def step_size_of(task: Task, cfg) -> float:
  """cfg.step_size, or 1/L1 from ``task.info["L1"]`` (Alg. 1 line 11).

  Raises:
    ValueError: no step size and the task has no L1.
  """
  if cfg.step_size is not None:
    return float(cfg.step_size)
  if "L1" not in task.info:
    raise ValueError(f"task {task.name!r} reports no L1; give step_size")
  return 1.0 / float(task.info["L1"])


def make_fedlrgd(task: Task, cfg: FedLRGDConfig, name: str = "fedlrgd") -> FederatedAlgorithm:
  """Builds FedLRGD on a task with a server dataset (``data["server"]``).

  ``init(key, shared_key)`` draws theta^(0) = the task's ``init_params(key)``
  (the same start as every other algorithm) and the anchors (line 1, from
  :func:`anchor_key`); lines 2-10 run on the task's data in float64, in ``init``
  when x64 is enabled, otherwise in ``setup`` on the host (:func:`setup_float64`;
  ``init`` alone then leaves NaN weights: use ``fedsim.core.engine.init_state``). ``round`` is
  one GD step of line 11 (eqs. (41)-(42)); the first round also charges the
  set-up's epochs to the ledgers (module doc). ``round`` must be given the data
  of the task the algorithm was built with (as ``fedsim.core.simulate`` does):
  the weights were computed from it.

  Args:
    task: a task with ``data["server"]`` and ``per_example_loss`` (logistic_soft, ridge).
    cfg: :class:`FedLRGDConfig`.
    name: the registry name.

  Returns:
    A :class:`FederatedAlgorithm` whose state is :class:`FedLRGDState`.

  Raises:
    ValueError: bad hyperparameters, a task without server data or per-example
      loss, client data not addressable from this process (the set-up reads it on
      the host), or a set-up whose per-round byte ledger would overflow int32.
  """
  check_config(cfg)
  if "server" not in task.data:
    raise ValueError(f"fedlrgd needs a task with server data (logistic_soft, ridge); {task.name!r} has none")
  r, p = task.info.get("server_samples"), task.dim
  if task.name == "ridge" and cfg.weights_solver in ("solve", "inverse") and r is not None and r > p + 1:
    # fedsim/tasks/ridge.py: g_i is affine in theta, so rank <= p + 1 and every G^(i) is exactly
    # singular for r > p + 1 (specs/fedlrgd.md §2.2): LU / inverse of G^(i) would give NaN weights.
    raise ConfigError("rank", f"must be <= p + 1 = {p + 1} on ridge with weights_solver={cfg.weights_solver} "
                      f"(every G^(i) has rank <= p + 1 and is exactly singular above it); got {r}; use "
                      f"rank <= {p + 1}, or weights_solver=pinv or ridge")
  grad_f, unravel = flat_grad_fn(task)
  step = step_size_of(task, cfg)
  R = int(task.data["server"]["mask"].shape[0])
  m = task.num_clients
  s_max = int(task.data["clients"]["mask"].shape[1])
  p = task.dim
  if m * (R * p + p * R * R) * BYTES_PER_REAL > _INT32_MAX or m * R * p * BYTES_PER_REAL > _INT32_MAX:
    raise ValueError(f"the set-up round's byte ledger (m={m}, R={R}, p={p}) exceeds int32; "
                     "use fewer clients or a smaller max_rank")
  leaves = jax.tree_util.tree_leaves({"server": task.data["server"], "clients": task.data["clients"]})
  if not all(getattr(a, "is_fully_addressable", True) for a in leaves):
    raise ValueError("fedlrgd's set-up reads every client's data on this host; its data is spread "
                     "over several processes (multi-process runs are not supported)")
  # The set-up's data, on the host (gathered once if the task is sharded).
  setup_data = jax.tree_util.tree_map(np.asarray, {"server": task.data["server"],
                                                   "clients": task.data["clients"]})

  def setup_data_as(dtype):
    """The set-up's data with float leaves in the run's dtype (then upcast exactly to float64)."""
    return jax.tree_util.tree_map(lambda a: np.asarray(a, dtype if a.dtype.kind == "f" else a.dtype), setup_data)

  def init(key, shared_key):
    del shared_key  # no draws shared by all parties (rng.init_keys)
    theta0, _ = ravel_pytree(task.init_params(key))
    anchors = draw_anchors(anchor_key(key), theta0, R, cfg.anchor_dist, cfg.anchor_scale)   # line 1
    if theta0.dtype == jnp.float64:   # x64: lines 2-10 in this compiled graph
      res = setup(grad_f, setup_data_as(np.float64), anchors, cfg.weights_solver, cfg.rcond, cfg.ridge_lambda)
      weights, sigma_min, cond = res.weights, res.sigma_min, res.cond
    else:   # float32: lines 2-10 in float64 on the host, in host_setup; NaN until then
      weights = jnp.full((p, R), jnp.nan, theta0.dtype)
      sigma_min = cond = jnp.full((p,), jnp.nan, theta0.dtype)
    return FedLRGDState(theta=theta0, anchors=anchors, weights=weights, charged=jnp.asarray(False),
                        sigma_min=sigma_min, cond=cond, ledger=zero_ledger())

  def host_setup(state: FedLRGDState) -> FedLRGDState:
    """Lines 2-10 in float64 for a float32 run (:func:`setup_float64`); x64 runs did them in init."""
    if state.anchors.dtype == jnp.float64:
      return state
    anchors = np.asarray(state.anchors)
    res = setup_float64(grad_f, setup_data_as(anchors.dtype), anchors, cfg.weights_solver, cfg.rcond,
                        cfg.ridge_lambda)
    return state._replace(weights=res.weights, sigma_min=res.sigma_min, cond=res.cond)

  def round_fn(state: FedLRGDState, key, data):
    del key  # FedLRGD is deterministic once the anchors are drawn
    r = jnp.sum(data["server"]["mask"].astype(jnp.int32))
    n = num_samples(data)
    ghat = approx_grad(grad_f, state.theta, data["server"], state.weights, n)      # (41)
    theta = state.theta - step * ghat                                              # (42)
    if cfg.project_box is not None:
      theta = jnp.clip(theta, -cfg.project_box, cfg.project_box)
    f = (~state.charged).astype(jnp.int32)   # 1 in the first round: the set-up's epochs 1..r+1
    s_counts = jnp.sum(data["clients"]["mask"].astype(jnp.int32))
    ledger = add_epochs(state.ledger, epochs=f * (r + 2),       # epochs 1..r+1, then r+2 opens
                        compute=f * (r * r + r * s_max) + r,   # b_1 = r^2, b_2 = r s; r per GD step
                        comm_epochs=f * r, uploads=f * m * r)
    stats = make_stats(queries=f * (r * r + r * s_counts) + r,
                       bytes_up=f * m * r * p * BYTES_PER_REAL,
                       bytes_down=f * m * (r * p + p * r * r) * BYTES_PER_REAL,
                       participants=f * m * r)
    return state._replace(theta=theta, ledger=ledger, charged=jnp.asarray(True)), stats

  return attach_metrics(FederatedAlgorithm(name=name, init=init, round=round_fn,
                                           solution=lambda s: unravel(s.theta), hparams=cfg,
                                           setup=host_setup), cfg.phi)


def diagnostics(state: FedLRGDState, r: int) -> dict:
  """Host dict: cond(G^(i)) (max, median), min sigma_min, and the smallest alpha with
  ||G^(i)^-1||_op = 1/sigma_min <= r^alpha for every i (assumption (8))."""
  cond = np.asarray(state.cond, np.float64)
  smin = np.asarray(state.sigma_min, np.float64)
  alpha = float(np.max(np.log(1.0 / smin)) / np.log(r)) if r > 1 and np.all(smin > 0) else float("nan")
  return {"cond_max": float(np.max(cond)), "cond_median": float(np.median(cond)),
          "sigma_min": float(np.min(smin)), "alpha_hat": alpha}


# ----------------------------------------------------------------------------------------------
# Measurement helpers (specs/fedlrgd.md §3.3 S2-S3, §7 items 1, 6, 7): pure, vmappable.
# ----------------------------------------------------------------------------------------------

def relative_errors(grad_f, data, W, thetas):
  """||grad^F(theta) - grad F(theta)|| / ||grad F(theta)|| for each row of thetas (K, p) -> (K,)."""
  n = num_samples(data)

  def one(theta):
    g = exact_grad(grad_f, theta, data)
    return jnp.linalg.norm(approx_grad(grad_f, theta, data["server"], W, n) - g) / jnp.linalg.norm(g)

  return jax.vmap(one)(thetas)


def inexact_gd(grad_f, data, W, theta0, step, num_steps: int, project_box=None):
  """S steps of eqs. (41)-(42) from theta0, logging the gradient error along the path.

  Returns:
    (thetas (S+1, p) = theta^(0..S), err_sq (S,) = ||grad^F - grad F||^2 at theta^(0..S-1)).
  """
  n = num_samples(data)

  def body(theta, _):
    ghat = approx_grad(grad_f, theta, data["server"], W, n)
    err = ghat - exact_grad(grad_f, theta, data)
    new = theta - step * ghat
    if project_box is not None:
      new = jnp.clip(new, -project_box, project_box)
    return new, (new, jnp.sum(err * err))

  _, (path, err_sq) = jax.lax.scan(body, theta0, None, length=num_steps)
  return jnp.concatenate([theta0[None], path]), err_sq
