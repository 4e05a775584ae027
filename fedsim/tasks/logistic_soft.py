r"""Smooth strongly convex ERM with a server dataset: soft-label logistic regression.

The worked example of the FedLRGD paper (Jadbabaie et al. 2023, App. A, eq. (66)-(67);
specs/fedlrgd.md §3.2):

    f(x, y; theta) = y log(1 + e^{-theta^T x}) + (1 - y) log(1 + e^{theta^T x}) + (mu/2) ||theta||^2
                   = softplus(theta^T x) - y theta^T x + (mu/2) ||theta||^2,

features x in [0,1]^p, soft labels y in [0,1], no bias, p = d - 1. The
gradient is (sigma(theta^T x) - y) x + mu theta; the paper's constants are
L1 = p/2 + mu (eq. (68)) and mu-strong convexity; (eta, L2) = (2, 1) in the data.

The federated split is the paper's eq. (3): m clients with s samples each and a
**server with r samples** (FedLRGD's pivots, Alg. 1), n = m s + r, and

    F(theta) = (1/n) [ sum_{j<=r} f(x^(0,j); theta) + sum_c sum_{j<=s} f(x^(c,j); theta) ].   (3)

Precision: every random draw is the same with or without x64 (the data are
drawn in float64 NumPy and cast; theta^(0) and the batch indices come from
float32 JAX uniforms), so ``--x64`` changes the arithmetic, not the experiment.

Data layout (``Task.data``; float64 when x64 is enabled, else float32):
  * ``clients``: ``x`` (m, s, p), ``y`` (m, s), ``mask`` (m, s) bool.
  * ``sizes``: (m,) int32, all s.
  * ``server``: ``x`` (R, p), ``y`` (R,), ``mask`` (R,) bool with the first r
    entries True. R = ``max_rank`` is a static padding size: tasks with
    different r but the same R have identical shapes, so sweeping r never
    recompiles (specs/fedlrgd.md §6.2). The r server samples are the first r
    of a fixed pool of R draws, so server sets are nested across r.
  * ``eval``: ``f_star`` () and ``theta_star`` (p,), F_* from a float64
    Newton solve on the host (the spec's "long float64 solve", §3.3 S3).

Data generation (specs/fedlrgd.md §3.3 S2/S4): the raw points are uniform on
boxes in [0,1]^D. Clients: ``heterogeneity`` h in [0,1) draws client c's box
[a_c, a_c + 1 - h]^D with a_c ~ U[0,h]^D (h = 0: i.i.d. U[0,1]^D). Server vs
clients: ``server_shift`` delta in [0,1) maps the server's points to
(1 - delta) U[0,1]^D and the clients' to delta + (1 - delta) z (a covariate
shift; delta = 0: same distribution). Features: ``identity`` (x = raw point,
D = p) or ``holder`` (§3.3 S4): x_j = ||u - c_j||_2^eta / D^{eta/2} in [0,1]
with p centres c_j ~ U[0,1]^D, so the data dependence has Hölder order eta.
Labels: y = sigmoid(theta_gt^T x + label_noise * N(0,1)), theta_gt ~ U[-1,1]^p.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from fedsim.core.reduce import pairwise_sum
from fedsim.core.types import Task

FEATURE_MAPS = ("identity", "holder")


def float_dtype():
  """The float dtype new task arrays get: float64 if x64 is enabled, else float32."""
  return jnp.float64 if jax.config.jax_enable_x64 else jnp.float32  # type: ignore[attr-defined]  # jax.config flags are dynamic attributes


# ----------------------------------------------------------------------------------------------
# Losses (per example). ``example`` = {"x": (p,), "y": ()}.
# ----------------------------------------------------------------------------------------------

def logistic_soft_loss(theta, example, mu):
  """Eq. (66): softplus(theta^T x) - y theta^T x + (mu/2)||theta||^2 (scalar)."""
  z = jnp.dot(example["x"], theta)
  return jax.nn.softplus(z) - example["y"] * z + 0.5 * mu * jnp.dot(theta, theta)


def ridge_loss(theta, example, mu):
  """Ridge: (1/2)(x^T theta - y)^2 + (mu/2)||theta||^2 (scalar); affine gradient in theta."""
  res = jnp.dot(example["x"], theta) - example["y"]
  return 0.5 * res * res + 0.5 * mu * jnp.dot(theta, theta)


LOSSES = {"logistic_soft": logistic_soft_loss, "ridge": ridge_loss}


# ----------------------------------------------------------------------------------------------
# Host-side float64 reference solves (F_*).
# ----------------------------------------------------------------------------------------------

def _pooled(x_server, y_server, m_server, x_clients, y_clients, m_clients):
  xs = np.asarray(x_server, np.float64)[np.asarray(m_server, bool)]
  ys = np.asarray(y_server, np.float64)[np.asarray(m_server, bool)]
  mc = np.asarray(m_clients, bool)
  xc = np.asarray(x_clients, np.float64)[mc]
  yc = np.asarray(y_clients, np.float64)[mc]
  return np.concatenate([xs, xc]), np.concatenate([ys, yc])


def logistic_objective_np(theta, x, y, mu):
  """F(theta) of eq. (67) in float64 numpy (x (n, p), y (n,))."""
  z = x @ theta
  return float(np.mean(np.logaddexp(0.0, z) - y * z) + 0.5 * mu * theta @ theta)


def solve_logistic(x, y, mu, tol=1e-15, max_iter=100):
  """argmin F of eq. (67) by damped Newton in float64.

  Args:
    x: (n, p) features; y: (n,) soft labels; mu > 0.
    tol: stop when ||grad F|| <= tol (F - F_* <= ||grad||^2 / (2 mu)).

  Returns:
    (theta_star (p,), F_star) float64.
  """
  n, p = x.shape
  theta = np.zeros(p)
  f = logistic_objective_np(theta, x, y, mu)
  for _ in range(max_iter):
    z = x @ theta
    sig = 0.5 * (1.0 + np.tanh(0.5 * z))
    g = x.T @ (sig - y) / n + mu * theta
    if np.linalg.norm(g) <= tol:
      break
    h = (x.T * (sig * (1.0 - sig))) @ x / n + mu * np.eye(p)
    step = np.linalg.solve(h, g)
    t = 1.0
    while t > 1e-10:  # backtracking (Armijo) keeps Newton monotone far from theta_star
      cand = theta - t * step
      fc = logistic_objective_np(cand, x, y, mu)
      if fc <= f - 0.25 * t * g @ step:
        break
      t *= 0.5
    if fc >= f and t <= 1e-10:
      break
    theta, f = cand, fc
  return theta, logistic_objective_np(theta, x, y, mu)


def solve_ridge(x, y, mu):
  """Closed form of min (1/(2n))||X theta - y||^2 + (mu/2)||theta||^2 in float64."""
  n, p = x.shape
  theta = np.linalg.solve(x.T @ x / n + mu * np.eye(p), x.T @ y / n)
  res = x @ theta - y
  return theta, float(0.5 * np.mean(res * res) + 0.5 * mu * theta @ theta)


def reference_optimum(name, data, mu):
  """(theta_star, F_star) of task ``name`` on ``data`` (server mask included), float64."""
  x, y = _pooled(data["server"]["x"], data["server"]["y"], data["server"]["mask"],
                 data["clients"]["x"], data["clients"]["y"], data["clients"]["mask"])
  if name == "ridge":
    return solve_ridge(x, y, mu)
  return solve_logistic(x, y, mu)


# ----------------------------------------------------------------------------------------------
# Data generation.
# ----------------------------------------------------------------------------------------------

def _raw_points(rng, num_clients, samples_per_client, pool, dim, heterogeneity, shift):
  """Raw points: clients (m, s, D) on their boxes, server pool (R, D); see module doc."""
  a = rng.uniform(0.0, heterogeneity, size=(num_clients, 1, dim))
  z = a + (1.0 - heterogeneity) * rng.uniform(size=(num_clients, samples_per_client, dim))
  clients = shift + (1.0 - shift) * z
  server = (1.0 - shift) * rng.uniform(size=(pool, dim))
  return clients, server


def holder_features(u, centres, eta):
  """psi_eta(u)_j = ||u - c_j||_2^eta / D^{eta/2} in [0,1] (specs/fedlrgd.md §3.3 S4).

  Args:
    u: (..., D) points in [0,1]^D; centres: (p, D); eta > 0 the Hölder order.

  Returns:
    (..., p) float64.
  """
  dim = u.shape[-1]
  dist = np.sqrt(np.sum((u[..., None, :] - centres) ** 2, axis=-1))
  return dist ** eta / dim ** (eta / 2.0)


def make_smooth_erm_task(name: str, *, num_clients: int, samples_per_client: int, num_features: int,
                         server_samples: int, max_rank: int, mu: float = 0.1,
                         heterogeneity: float = 0.0, server_shift: float = 0.0,
                         feature_map: str = "identity", holder_eta: float = 2.5, raw_dim: int = 1,
                         label_noise: float = 0.5, seed: int = 0) -> Task:
  """Builds ``logistic_soft`` or ``ridge`` with a server dataset (module docstring).

  Args:
    name: ``logistic_soft`` (App. A, eq. (66)) or ``ridge`` (exact-rank case,
      specs/fedlrgd.md §2.2: g_i is affine in theta, rank <= p + 1).
    num_clients: m >= 1.
    samples_per_client: s >= 1.
    num_features: p >= 1.
    server_samples: r, 1 <= r <= max_rank (the server's dataset size = rank).
    max_rank: R, static padding of the server arrays.
    mu: the L2 weight mu > 0 (strong convexity).
    heterogeneity: h in [0, 1), client sub-box law.
    server_shift: delta in [0, 1), server/client covariate shift.
    feature_map: ``identity`` or ``holder``.
    holder_eta: Hölder order of the ``holder`` features.
    raw_dim: D of the raw points for ``holder`` features (ignored for identity).
    label_noise: std of the logit noise (logistic) or of the response noise (ridge).
    seed: seed of everything drawn.

  Returns:
    A :class:`Task`; ``info`` holds m, s, p, r, R, n, mu, L1, kappa, F_star.

  Raises:
    ValueError: a value out of range (message names the argument).
  """
  if name not in LOSSES:
    raise ValueError(f"unknown smooth ERM task {name!r}; accepted: {', '.join(LOSSES)}")
  checks = [(num_clients >= 1, "num_clients", ">= 1", num_clients),
            (samples_per_client >= 1, "samples_per_client", ">= 1", samples_per_client),
            (num_features >= 1, "num_features", ">= 1", num_features),
            (max_rank >= 1, "max_rank", ">= 1", max_rank),
            (1 <= server_samples <= max_rank, "rank", f"in [1, max_rank={max_rank}]", server_samples),
            (mu > 0, "l2_penalty", "> 0", mu),
            (0 <= heterogeneity < 1, "data_heterogeneity", "in [0, 1)", heterogeneity),
            (0 <= server_shift < 1, "server_shift", "in [0, 1)", server_shift),
            (feature_map in FEATURE_MAPS, "feature_map", f"one of {', '.join(FEATURE_MAPS)}", feature_map),
            (holder_eta > 0, "holder_eta", "> 0", holder_eta),
            (raw_dim >= 1, "raw_dim", ">= 1", raw_dim),
            (label_noise >= 0, "label_noise", ">= 0", label_noise)]
  for ok, arg, accepted, value in checks:
    if not ok:
      raise ValueError(f"{arg} must be {accepted}; got {value!r}")
  m, s, p, R = num_clients, samples_per_client, num_features, max_rank
  rng = np.random.default_rng(seed)
  dim = p if feature_map == "identity" else raw_dim
  raw_c, raw_s = _raw_points(rng, m, s, R, dim, heterogeneity, server_shift)
  if feature_map == "holder":
    centres = rng.uniform(size=(p, dim))
    xc, xs = holder_features(raw_c, centres, holder_eta), holder_features(raw_s, centres, holder_eta)
  else:
    xc, xs = raw_c, raw_s
  theta_gt = rng.uniform(-1.0, 1.0, size=p)
  if name == "logistic_soft":
    def label(x):
      return 1.0 / (1.0 + np.exp(-(x @ theta_gt + label_noise * rng.standard_normal(x.shape[:-1]))))
  else:
    def label(x):
      return x @ theta_gt + label_noise * rng.standard_normal(x.shape[:-1])
  yc, ys = label(xc), label(xs)

  dt = float_dtype()
  mask_s = np.arange(R) < server_samples
  data = {
      "clients": {"x": jnp.asarray(xc, dt), "y": jnp.asarray(yc, dt), "mask": jnp.ones((m, s), bool)},
      "sizes": jnp.full((m,), s, jnp.int32),
      "server": {"x": jnp.asarray(xs, dt), "y": jnp.asarray(ys, dt), "mask": jnp.asarray(mask_s)},
  }
  theta_star, f_star = reference_optimum(name, data, mu)
  data["eval"] = {"f_star": jnp.asarray(f_star, dt), "theta_star": jnp.asarray(theta_star, dt)}
  # L1: App. A eq. (68) for the logistic loss (||x||^2 <= p, sigmoid' <= 1/4, taken
  # twice); ridge: ||x||^2 + mu <= p + mu.
  l1 = p / 2.0 + mu if name == "logistic_soft" else p + mu
  info = {"num_clients": m, "samples_per_client": s, "num_features": p, "server_samples": server_samples,
          "max_rank": R, "n": m * s + server_samples, "mu": mu, "L1": l1, "kappa": l1 / mu,
          "F_star": f_star, "heterogeneity": heterogeneity, "server_shift": server_shift,
          "feature_map": feature_map, "holder_eta": holder_eta if feature_map == "holder" else None,
          "raw_dim": dim, "data_dim": dim + 1, "label_noise": label_noise, "seed": seed,
          "dtype": jnp.dtype(dt).name}
  return _build(name, data, p, mu, info)


def _build(name, data, p, mu, info) -> Task:
  loss_fn = LOSSES[name]

  def per_example_loss(theta, example):
    return loss_fn(theta, example, mu)

  def loss(theta, batch):
    f = jax.vmap(lambda x, y: per_example_loss(theta, {"x": x, "y": y}))(batch["x"], batch["y"])
    msk = batch["mask"].astype(f.dtype)
    return jnp.sum(f * msk) / jnp.maximum(jnp.sum(msk), 1.0)

  def sample_batch(client, key, batch_size):
    # i.i.d. uniform over the client's real samples (with replacement); the
    # uniforms are float32 in both precisions, so x64 picks the same samples.
    n = jnp.maximum(jnp.sum(client["mask"].astype(jnp.int32)), 1)
    idx = jnp.minimum((jax.random.uniform(key, (batch_size,), jnp.float32) * n).astype(jnp.int32), n - 1)
    return {"x": client["x"][idx], "y": client["y"][idx], "mask": jnp.ones((batch_size,), bool)}

  def evaluate(theta, data):
    f, g, n = pooled_objective_and_grad(per_example_loss, theta, data)
    ev = data["eval"]
    return {"objective": f, "optimality_gap": f - ev["f_star"], "grad_norm": jnp.linalg.norm(g),
            "dist_to_opt": jnp.linalg.norm(theta - ev["theta_star"])}

  def init_params(key):
    # theta^(0) ~ U[-1,1]^p, the parameter box of App. A; drawn in float32 and
    # cast, so a run with x64 enabled starts from the same point (rounded once).
    return jax.random.uniform(key, (p,), jnp.float32, -1.0, 1.0).astype(float_dtype())

  return Task(name=name, num_clients=int(data["sizes"].shape[0]), init_params=init_params, data=data,
              loss=loss, sample_batch=sample_batch, full_batch=lambda c: c, evaluate=evaluate,
              per_example_loss=per_example_loss, has_accuracy=False, info=info)


def pooled_objective_and_grad(per_example_loss, theta, data):
  """F(theta), grad F(theta) of eq. (3) over server (masked) and client samples, and n.

  Args:
    per_example_loss: ``(theta, {"x", "y"}) -> scalar``.
    theta: (p,).
    data: a task's data with ``server`` and ``clients``.

  Returns:
    (F () , grad (p,), n ()) in theta's dtype; sums in a fixed pairwise order.
  """
  vg = jax.vmap(jax.value_and_grad(lambda th, x, y: per_example_loss(th, {"x": x, "y": y})),
                in_axes=(None, 0, 0))
  c, s = data["clients"], data["server"]
  p = theta.shape[0]
  fc, gc = vg(theta, c["x"].reshape(-1, c["x"].shape[-1]), c["y"].reshape(-1))
  fs, gs = vg(theta, s["x"], s["y"])
  mc = c["mask"].reshape(-1).astype(theta.dtype)
  ms = s["mask"].astype(theta.dtype)
  n = pairwise_sum(mc) + pairwise_sum(ms)
  f = (pairwise_sum(fc * mc) + pairwise_sum(fs * ms)) / n
  g = (pairwise_sum(gc * mc[:, None]) + pairwise_sum(gs * ms[:, None])) / n
  return f, g.reshape(p), n


def with_server_size(task: Task, r: int) -> Task:
  """The same task with r server samples (the first r of the pool) and its F_*.

  Only array values change (the server mask and ``eval``), so every compiled
  function of the task is reused: sweeping r does not recompile.

  Raises:
    ValueError: r outside [1, R].
  """
  R = int(task.data["server"]["mask"].shape[0])
  if not 1 <= r <= R:
    raise ValueError(f"rank must be in [1, max_rank={R}]; got {r}")
  data = dict(task.data)
  data["server"] = dict(data["server"], mask=jnp.asarray(np.arange(R) < r))
  theta_star, f_star = reference_optimum(task.name, data, task.info["mu"])
  dt = data["server"]["x"].dtype
  data["eval"] = {"f_star": jnp.asarray(f_star, dt), "theta_star": jnp.asarray(theta_star, dt)}
  info = dict(task.info, server_samples=r, n=task.info["num_clients"] * task.info["samples_per_client"] + r,
              F_star=f_star)
  return dataclasses.replace(task, data=data, info=info)


def make_logistic_soft_task(**kwargs) -> Task:
  """``make_smooth_erm_task("logistic_soft", ...)`` (App. A)."""
  return make_smooth_erm_task("logistic_soft", **kwargs)
