"""Function-space tasks for functional boosting (FFGB, Shen et al. 2022; specs/ffgb.md §4.3, §6).

FFGB's model is an ensemble of weak learners held as value caches (f on every
client's points and on the test points), not a parameter vector, so a
classification task's ``evaluate(params, data)`` cannot score it. Two pieces:

* :func:`cache_view` turns any task with ``data["clients"]`` = {x, y, mask}
  (and optionally ``data["eval"]`` = {x, y}) into one whose ``evaluate`` scores
  the caches ``{"train": (N, M, C), "test": (M_test, C)}`` that FFGB's
  ``solution(state)`` returns: ``objective`` = pooled training loss (CE or
  0.5 * squared error, the risk R[f] of eq. 3 without the Tikhonov term),
  ``train_accuracy`` / ``test_accuracy`` / ``test_loss`` for classification,
  ``test_mse`` for regression. The experiment binary scores the FFGB family
  with this view of the ``--task``, and every other algorithm with the task.
* :func:`make_tabular_task`: a synthetic function-space task (values on given
  points, square loss) for the closed-form checks of specs §4.3, and the
  McShane extension of eq. (17) used by FFGB.L.
"""

from __future__ import annotations

import dataclasses
import math

import jax.numpy as jnp
import numpy as np
import optax

from fedsim.core.reduce import pairwise_sum
from fedsim.core.types import Task


def cache_view(task: Task) -> Task:
  """The task scored on value caches (see module docstring).

  Args:
    task: ``task.info["loss"]`` is ``ce`` (default; y (N, M) int) or ``square``
      (y (N, M, C) float).

  Returns:
    A copy of ``task`` whose ``evaluate(caches, data)`` reads
    ``caches["train"]`` (N, M, C) and ``caches["test"]`` (M_test, C).
  """
  loss = task.info.get("loss", "ce")

  def evaluate(caches, data):
    c = data["clients"]
    f = caches["train"]
    mask = c["mask"]
    n_tot = pairwise_sum(data["sizes"].astype(jnp.float32))
    out = {}
    if loss == "ce":
      per = optax.softmax_cross_entropy_with_integer_labels(f, c["y"])
      out["objective"] = pairwise_sum(jnp.where(mask, per, 0.0).reshape(-1)) / n_tot
      hit = (jnp.argmax(f, -1) == c["y"]) & mask
      out["train_accuracy"] = pairwise_sum(hit.astype(jnp.float32).reshape(-1)) / n_tot
      if "y" in data["eval"]:
        y, ft = data["eval"]["y"], caches["test"]
        out["test_loss"] = jnp.mean(optax.softmax_cross_entropy_with_integer_labels(ft, y))
        out["test_accuracy"] = jnp.mean((jnp.argmax(ft, -1) == y).astype(jnp.float32))
    else:
      per = 0.5 * jnp.sum((f - c["y"]) ** 2, -1)
      out["objective"] = pairwise_sum(jnp.where(mask, per, 0.0).reshape(-1)) / n_tot
      if "y" in data["eval"]:
        out["test_mse"] = jnp.mean(jnp.sum((caches["test"] - data["eval"]["y"]) ** 2, -1))
    return out

  return dataclasses.replace(task, evaluate=evaluate, has_accuracy=(loss == "ce"))


def make_tabular_task(x, y, mask=None, x_test=None, y_test=None, name: str = "tabular",
                      loss: str = "square", num_outputs: int | None = None, info: dict | None = None) -> Task:
  """A square-loss function-space task: client i holds (x_ij, y_ij) (specs §4.3).

  Args:
    x: (N, M, d) float points (e.g. a grid shared by all clients).
    y: (N, M, C) float targets.
    mask: (N, M) bool (default all True).
    x_test, y_test: optional (M_test, d), (M_test, C).
    name: task name.
    loss: ``square`` (y float (N, M, C)) or ``ce`` (y int (N, M) class labels,
      ``num_outputs`` classes).
    num_outputs: C for ``ce``.
    info: extra task description.

  Returns:
    A Task (``info["loss"] = loss``, ``info["function_space"] = True``: no parameter
    vector, so ``fedsim.algorithms.build`` refuses every algorithm but the FFGB family)
    meant for FFGB-family algorithms; its ``evaluate`` is :func:`cache_view`'s.
  """
  x = jnp.asarray(x, jnp.float32)
  ydt = jnp.float32 if loss == "square" else jnp.int32
  y = jnp.asarray(y, ydt)
  N, M = x.shape[:2]
  mask = jnp.ones((N, M), bool) if mask is None else jnp.asarray(mask, bool)
  ev = {} if x_test is None else {"x": jnp.asarray(x_test, jnp.float32),
                                  "y": jnp.asarray(y_test, ydt)}
  data = {"clients": {"x": x, "y": y, "mask": mask},
          "sizes": jnp.sum(mask, 1).astype(jnp.int32), "eval": ev}

  def unsupported(*a):
    raise NotImplementedError("a tabular task has no parameter vector; use an FFGB algorithm")

  if loss == "square":
    num_out = int(y.shape[-1])
  elif num_outputs is None:
    raise ValueError(f"num_outputs (C) is required with loss={loss!r}")
  else:
    num_out = int(num_outputs)
  task = Task(name=name, num_clients=int(N), init_params=lambda k: jnp.zeros(()), data=data,
              loss=unsupported, sample_batch=unsupported, full_batch=lambda c: c,
              evaluate=lambda p, d: {}, stochastic=False,
              info={"loss": loss, "num_outputs": num_out, "function_space": True,
                    "n_train": int(np.sum(mask)), **(info or {})})
  return cache_view(task)


def mcshane(x_i, y_i, lip, xq, mask=None):
  """McShane extension u_i(x) = min_j (y_ij + L ||x - x_ij||) (eq. 17), per output.

  Args:
    x_i: (M, d) client points; y_i: (M, C) values; lip: L; xq: (B, d).
    mask: (M,) bool real rows.

  Returns:
    (B, C): L-Lipschitz per coordinate, equal to y_i on x_i when the data are
    L-Lipschitz (eq. 16).
  """
  d = jnp.sqrt(jnp.maximum(jnp.sum((xq[:, None, :] - x_i[None, :, :]) ** 2, -1), 0.0))  # (B, M)
  vals = y_i[None, :, :] + lip * d[:, :, None]
  if mask is not None:
    vals = jnp.where(mask[None, :, None], vals, jnp.inf)
  return jnp.min(vals, axis=1)


def mcshane_grad(x_i, y_i, lip, xq, mask=None):
  """Input-gradient of eq. (17)'s u_i, per output (specs/ffgb.md §2.5):
  grad u_i^c(x) = L (x - x_{j*}) / ||x - x_{j*}||, j* = argmin_j (y_jc + L ||x - x_j||).

  Defined wherever the argmin is unique and x is not a data point (almost every
  x); 0 at x = x_{j*}.

  Args:
    x_i: (M, d); y_i: (M, C); lip: L; xq: (B, d); mask: (M,) bool real rows.

  Returns:
    (B, C, d) float32.
  """
  diff = xq[:, None, :] - x_i[None, :, :]  # (B, M, d)
  d = jnp.sqrt(jnp.maximum(jnp.sum(diff ** 2, -1), 0.0))  # (B, M)
  vals = y_i[None, :, :] + lip * d[:, :, None]  # (B, M, C)
  if mask is not None:
    vals = jnp.where(mask[None, :, None], vals, jnp.inf)
  j = jnp.argmin(vals, axis=1)  # (B, C)
  unit = diff / jnp.where(d > 0, d, 1.0)[..., None]  # (B, M, d), 0 where x = x_j
  return lip * jnp.take_along_axis(unit, j[:, :, None], axis=1)  # (B, C, d)


# ------------------------------------------------------------------ shifted tabular problems
SHIFT_KINDS = ("tv", "w1")
TABULAR_LOSSES = ("square", "ce")
TABULAR_CLASSES = 3
TABULAR_LIP = 3.0  # square-loss labels y = sin(3 <w, x>), ||w|| = 1: L = 3 (eq. 16)


def tv_distance(p, q):
  """TV(p, q) = (1/2) ``sum |p - q|`` for two probability vectors on one support (§1.1)."""
  return 0.5 * float(np.sum(np.abs(np.asarray(p, np.float64) - np.asarray(q, np.float64))))


def w1_distance(xa, xb):
  """Exact W1 between uniform empirical measures on xa (n, d) and xb (m, d) (§1.1).

  Both clouds are replicated to lcm(n, m) atoms of equal mass, and the optimal
  coupling is then a permutation (Birkhoff), found by
  ``scipy.optimize.linear_sum_assignment`` on Euclidean costs. O(lcm^3): keep
  lcm(n, m) <= a few thousand.
  """
  from scipy.optimize import linear_sum_assignment
  xa, xb = np.asarray(xa, np.float64), np.asarray(xb, np.float64)
  L = math.lcm(len(xa), len(xb))
  a, b = np.repeat(xa, L // len(xa), 0), np.repeat(xb, L // len(xb), 0)
  cost = np.sqrt(np.maximum(((a[:, None, :] - b[None, :, :]) ** 2).sum(-1), 0.0))
  r, c = linear_sum_assignment(cost)
  return float(cost[r, c].mean())


def make_shift_task(num_clients: int, samples_per_client: int = 40, num_features: int = 2, *,
                    kind: str = "w1", shift: float = 0.0, loss: str = "square", seed: int = 0,
                    num_test: int = 500, measure: bool = True) -> Task:
  """Synthetic tabular problem with a feature-shift knob (Shen et al. 2022, §3.2, Thms 3.2/3.3).

  The label map is shared by all clients (only alpha_i differs, §1.3 "fully
  heterogeneous"): square loss y = sin(3 <w, x>) (||w|| = 1, so labels are
  L = 3 Lipschitz, eq. 16, for FFGB.L) or cross-entropy with
  ``TABULAR_CLASSES`` classes y = argmax(x V + c) (for FFGB.C).

  * ``kind="tv"`` (FFGB.C, omega = mean_i TV(alpha, alpha_i)): a pool of
    M = ``samples_per_client`` points x_p ~ U[0, 1]^d is shared by every client
    (TV only means something on a shared support, specs §1.3 caution). Client
    i's density is alpha_i = (1 - shift) U(pool) + shift U(block_i), block_i the
    i-th of N blocks of the pool sorted by x_1; client i holds M points with
    multiplicities M alpha_i (largest-remainder rounding). shift in [0, 1];
    shift = 0 gives identical clients.
  * ``kind="w1"`` (FFGB.L, omega = mean_i W1(alpha, alpha_i)): a base cloud
    b_j ~ U[0, 1]^d (j <= M) is translated by shift * (i/(N-1) - 1/2) along
    x_1 for client i; shift >= 0, 0 gives identical clients.

  The test points are drawn from alpha = (1/N) sum_i alpha_i.

  Args:
    num_clients: N >= 1; samples_per_client: M >= 1; num_features: d >= 1.
    kind: ``tv`` or ``w1``; shift: the knob above.
    loss: ``square`` or ``ce``.
    seed: data seed.
    num_test: test points.
    measure: record the measured omega in ``info["shift_tv"]`` /
      ``info["shift_w1"]`` (W1 by exact assignment: O((N M)^3), only for N M <= 2000).

  Returns:
    A function-space task (see :func:`make_tabular_task`); ``info`` has
    ``shift_kind``, ``feature_shift``, ``lip_L`` and the measured omega.

  Raises:
    ValueError: bad kind / loss / shift / sizes (message starts with the flag name).
  """
  if kind not in SHIFT_KINDS:
    raise ValueError(f"shift_kind unknown {kind!r}; accepted: {', '.join(SHIFT_KINDS)}")
  if loss not in TABULAR_LOSSES:
    raise ValueError(f"tabular_loss unknown {loss!r}; accepted: {', '.join(TABULAR_LOSSES)}")
  if kind == "tv" and not 0 <= shift <= 1:
    raise ValueError(f"feature_shift must be in [0, 1] for shift_kind=tv; got {shift}")
  if kind == "w1" and not (shift >= 0 and math.isfinite(shift)):
    raise ValueError(f"feature_shift must be >= 0 and finite for shift_kind=w1; got {shift}")
  if samples_per_client < num_clients and kind == "tv":
    raise ValueError(f"samples_per_client must be >= num_clients={num_clients} for shift_kind=tv; "
                     f"got {samples_per_client}")
  N, M, d = int(num_clients), int(samples_per_client), int(num_features)
  rs = np.random.default_rng(seed)
  w = rs.normal(size=d)
  w /= np.linalg.norm(w)
  V, c = rs.normal(size=(d, TABULAR_CLASSES)), rs.normal(size=TABULAR_CLASSES) * 0.3
  info = {"shift_kind": kind, "feature_shift": float(shift), "lip_L": TABULAR_LIP}
  if kind == "tv":
    pool = rs.uniform(size=(M, d))
    pool = pool[np.argsort(pool[:, 0])]
    blocks = np.array_split(np.arange(M), N)
    dens = np.full((N, M), (1.0 - shift) / M)
    for i, b in enumerate(blocks):
      dens[i, b] += shift / len(b)
    counts = np.floor(dens * M).astype(int)
    for i in range(N):  # largest remainder: M points per client
      rest = M - counts[i].sum()
      counts[i, np.argsort(-(dens[i] * M - counts[i]), kind="stable")[:rest]] += 1
    x = np.stack([np.repeat(pool, counts[i], 0) for i in range(N)])
    emp = counts / M
    if measure:
      info["shift_tv"] = float(np.mean([tv_distance(emp.mean(0), emp[i]) for i in range(N)]))
    x_test = pool[rs.choice(M, num_test, p=emp.mean(0))]
  else:
    base = rs.uniform(size=(M, d))
    off = shift * (np.arange(N) / max(N - 1, 1) - 0.5)
    x = np.repeat(base[None], N, 0)
    x[..., 0] += off[:, None]
    if measure and N * M <= 2000:
      allx = x.reshape(N * M, d)
      info["shift_w1"] = float(np.mean([w1_distance(allx, x[i]) for i in range(N)]))
    tb = rs.uniform(size=(num_test, d))
    tb[:, 0] += off[rs.integers(0, N, num_test)]
    x_test = tb

  def label(z):
    if loss == "square":
      return np.sin(TABULAR_LIP * z @ w)[..., None]
    return np.argmax(z @ V + c, -1)

  return make_tabular_task(x, label(x), x_test=x_test, y_test=label(x_test), name="shift_tabular",
                           loss=loss, num_outputs=TABULAR_CLASSES, info=info)
