"""Function-space tasks for functional boosting (FFGB, seed 002; specs/ffgb.md §4.3, §6).

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

import jax
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


def make_tabular_task(x, y, mask=None, x_test=None, y_test=None, name: str = "tabular") -> Task:
  """A square-loss function-space task: client i holds (x_ij, y_ij) (specs §4.3).

  Args:
    x: (N, M, d) float points (e.g. a grid shared by all clients).
    y: (N, M, C) float targets.
    mask: (N, M) bool (default all True).
    x_test, y_test: optional (M_test, d), (M_test, C).
    name: task name.

  Returns:
    A Task (``info["loss"] = "square"``) meant for FFGB-family algorithms; its
    ``evaluate`` is :func:`cache_view`'s.
  """
  x = jnp.asarray(x, jnp.float32)
  y = jnp.asarray(y, jnp.float32)
  N, M = x.shape[:2]
  mask = jnp.ones((N, M), bool) if mask is None else jnp.asarray(mask, bool)
  ev = {} if x_test is None else {"x": jnp.asarray(x_test, jnp.float32),
                                  "y": jnp.asarray(y_test, jnp.float32)}
  data = {"clients": {"x": x, "y": y, "mask": mask},
          "sizes": jnp.sum(mask, 1).astype(jnp.int32), "eval": ev}

  def unsupported(*a):
    raise NotImplementedError("a tabular task has no parameter vector; use an FFGB algorithm")

  task = Task(name=name, num_clients=int(N), init_params=lambda k: jnp.zeros(()), data=data,
              loss=unsupported, sample_batch=unsupported, full_batch=lambda c: c,
              evaluate=lambda p, d: {}, stochastic=False,
              info={"loss": "square", "num_outputs": int(y.shape[-1]), "n_train": int(np.sum(mask))})
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
