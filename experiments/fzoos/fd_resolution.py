"""Do the FD baselines' finite differences see the metric task at all? (seed 000 §6.3; issue 14)

The metric objective f_i(x) = 1 - macro precision (fedsim.tasks.metric_opt) is piecewise
constant in x: it changes only when a prediction of client i flips. The FD baselines
(fedsim.algorithms.zo_baselines) estimate grad f_i from the differences

  delta_q = f_i(x + lambda u_q) - f_i(x),   q = 1..Q   (seed 000 eq. 3; Q = 20 orthonormal u_q)

If every delta_q is exactly 0, the estimate is the zero vector, Adam takes no step and the
method stays at F(x_0). For each seed (the run's task: same MLP cache, shards and x_0 = 0.5)
and each smoothing radius lambda, this measures at x_0 the share of the N Q differences that
are exactly 0 and the mean |delta_q|, with the baselines' own direction law.

Writes ``OUTPUT_DIR/fd_resolution.json``: ``{"rows": [{"seed", "smoothing", "zero_fraction",
"mean_abs_difference", "differences"}], ...}`` and prints one line per row.

Usage: python -m experiments.fzoos.fd_resolution --seeds=0,1 --smoothing=0.01,0.1,1 \\
  --cache_dir=runs/reproduce/fzoos/classifiers --output_dir=runs/fd_resolution
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

from absl import app, flags

FLAGS = flags.FLAGS


def define_flags():
  flags.DEFINE_list("seeds", ["0"], "Run seeds (the task's MLP training and shard split, as experiments.run --seed).")
  flags.DEFINE_list("smoothing", ["0.01", "0.1", "1"], "Smoothing radii lambda (the runs' is 0.01).")
  flags.DEFINE_integer("fd_directions", 20, "Q, directions per client.")
  flags.DEFINE_string("direction", "orthogonal", "Direction law (fedsim.estimators.finite_difference.LAWS).")
  flags.DEFINE_integer("num_clients", 7, "N.")
  flags.DEFINE_float("portion", 0.3, "P, the class-shard portion.")
  flags.DEFINE_string("dataset", "digits", "Dataset of the metric task.")
  flags.DEFINE_string("data_dir", None, "Its folder (None: the loader's default).")
  flags.DEFINE_string("opt_metric", "precision", "The metric (1 - metric is the objective).")
  flags.DEFINE_string("cache_dir", None, "The MLP cache the runs used.")
  flags.DEFINE_integer("model_train_steps", 0, "The MLP's Adam steps (0: the task's default), as the runs'.")
  flags.DEFINE_float("perturbation_box", 0.0, "eps (0: the task's default), as the runs'.")
  flags.DEFINE_string("output_dir", "runs/fd_resolution", "Where fd_resolution.json goes.")


def differences_at_start(seed: int, smoothing: Sequence[float], *, fd_directions: int = 20,
                         direction: str = "orthogonal", **task_options) -> list[dict]:
  """The Q differences of every client at x_0, for each lambda (module docstring).

  Args:
    seed: the run's ``--seed``; also keys the directions (the same for every lambda).
    smoothing: the radii lambda > 0.
    fd_directions: Q.
    direction: the direction law.
    **task_options: ``fedsim.tasks.make_task`` keywords of the metric task (num_clients,
      dataset, portion, opt_metric, cache_dir, ...).

  Returns:
    Per lambda, ``{"zero_fraction": share of the N Q differences exactly 0, "mean_abs_difference":
    mean |delta|, "differences": N Q}``.
  """
  import jax
  import jax.numpy as jnp

  from fedsim.estimators import finite_difference
  from fedsim.tasks import make_task

  task = make_task("metric_opt", seed=seed, **task_options)
  x0 = task.init_params(jax.random.key(seed))
  u = jax.vmap(lambda k: finite_difference.directions(k, fd_directions, x0.shape[0], direction, x0.dtype))(
      jax.random.split(jax.random.key(seed), task.num_clients))                    # (N, Q, d)

  @jax.jit  # lambda is traced: one compilation for every radius
  def deltas(lam):
    def one(ui, row):
      base = task.loss(x0, row)
      return jax.vmap(lambda v: task.loss(x0 + lam * v, row) - base)(ui)            # (Q,)
    return jax.vmap(one)(u, task.data["clients"])                                   # (N, Q)

  out = []
  for lam in smoothing:
    d = deltas(jnp.asarray(lam, x0.dtype))
    out.append({"zero_fraction": float(jnp.mean(d == 0)), "mean_abs_difference": float(jnp.mean(jnp.abs(d))),
                "differences": int(d.size)})
  return out


def main(argv):
  del argv
  import jax
  jax.config.update("jax_enable_x64", True)  # the runs' --x64
  opts = dict(num_clients=FLAGS.num_clients, portion=FLAGS.portion, dataset=FLAGS.dataset,
              data_dir=FLAGS.data_dir, opt_metric=FLAGS.opt_metric, cache_dir=FLAGS.cache_dir,
              model_train_steps=FLAGS.model_train_steps, perturbation_box=FLAGS.perturbation_box)
  rows = []
  lams = [float(lam) for lam in FLAGS.smoothing]
  for s in FLAGS.seeds:
    found = differences_at_start(int(s), lams, fd_directions=FLAGS.fd_directions, direction=FLAGS.direction,
                                 **opts)
    for lam, res in zip(lams, found, strict=True):
      row = {"seed": int(s), "smoothing": lam, **res}
      rows.append(row)
      print(f"seed={s} lambda={lam}: {row['zero_fraction']:.1%} of {row['differences']} differences exactly 0, "
            f"mean |delta| {row['mean_abs_difference']:.3g}", flush=True)
  os.makedirs(FLAGS.output_dir, exist_ok=True)
  with open(os.path.join(FLAGS.output_dir, "fd_resolution.json"), "w") as f:
    json.dump({"fd_directions": FLAGS.fd_directions, "direction": FLAGS.direction, "rows": rows}, f, indent=1)


if __name__ == "__main__":
  define_flags()
  app.run(main)
