"""Do the FD baselines' finite differences see the metric task at all? (Shu et al. 2023, §6.3)

The metric objective f_i(x) = 1 - macro precision (fedsim.tasks.metric_opt) is piecewise
constant in x: it changes only when a prediction of client i flips. The FD baselines
(fedsim.algorithms.zo_baselines) estimate grad f_i from the differences

  delta_q = f_i(x + lambda u_q) - f_i(x),   q = 1..Q   (Shu et al. 2023, eq. 3; Q = 20 orthonormal u_q)

If every delta_q is exactly 0, the estimate is the zero vector, Adam takes no step and the
method stays at F(x_0). For each finished run given (``experiments.run`` output folders), this
rebuilds the run's task from its ``config.json`` (same data, MLP cache, shards and x_0) and, with
the baseline's own Q and direction law, measures at x_0 the share of the N Q differences that
are exactly 0 and the mean |delta_q|, at the baseline's lambda times each of ``--scales``.

Writes ``OUTPUT_DIR/fd_resolution.json``: ``{"label", "rows": [{"run", "seed", "smoothing",
"zero_fraction", "mean_abs_difference", "differences"}]}`` and prints one line per row.

Usage: python -m experiments.fzoos.fd_resolution --runs=runs/m/metric_s0,runs/m/metric_s1 \\
  --label=fedzo_fd --scales=1,10,100 --output_dir=runs/fd_resolution
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

from absl import app, flags

FLAGS = flags.FLAGS


def define_flags():
  flags.DEFINE_list("runs", [], "Finished experiments.run folders of the metric task (their config.json).")
  flags.DEFINE_string("label", "fedzo_fd", "The FD baseline whose lambda, Q and direction law are used.")
  flags.DEFINE_list("scales", ["1", "10", "100"], "Multiples of the baseline's lambda to try.")
  flags.DEFINE_string("output_dir", "runs/fd_resolution", "Where fd_resolution.json goes.")


def differences_at_start(task, seed: int, smoothing: Sequence[float], *, fd_directions: int = 20,
                         direction: str = "orthogonal") -> list[dict]:
  """The Q differences of every client of ``task`` at x_0, for each lambda (module docstring).

  Args:
    task: the metric task (``fedsim.tasks.make_task("metric_opt", ...)``).
    seed: keys x_0 and the directions (the same for every lambda).
    smoothing: the radii lambda > 0.
    fd_directions: Q.
    direction: the direction law (fedsim.estimators.finite_difference.LAWS).

  Returns:
    Per lambda, ``{"zero_fraction": share of the N Q differences exactly 0, "mean_abs_difference":
    mean |delta|, "differences": N Q}``.
  """
  import jax
  import jax.numpy as jnp

  from fedsim.estimators import finite_difference

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


def run_differences(run_dir: str, label: str, scales: Sequence[float]) -> list[dict]:
  """:func:`differences_at_start` on the task of the finished run ``run_dir``, with its ``label``
  algorithm's lambda (x ``scales``), Q and direction law; one row per lambda.

  Raises:
    FileNotFoundError: no ``config.json`` there; KeyError: no ``label`` in the run.
  """
  import jax

  import fedsim
  from fedsim.api import build_task

  with open(os.path.join(run_dir, "config.json")) as f:
    stored = json.load(f)
  config = fedsim.ExperimentConfig(**stored["experiment"])
  alg = stored["algorithms"][label]
  with jax.enable_x64(bool(stored["flags"].get("x64"))):  # the run's precision
    task = build_task(config)
    lams = [alg["smoothing"] * float(k) for k in scales]
    found = differences_at_start(task, config.seed, lams, fd_directions=alg["fd_directions"],
                                 direction=alg["direction"])
  return [{"run": os.path.basename(os.path.normpath(run_dir)), "seed": config.seed, "smoothing": lam, **res}
          for lam, res in zip(lams, found, strict=True)]


def main(argv):
  del argv
  rows = []
  for run in FLAGS.runs:
    for row in run_differences(run, FLAGS.label, [float(k) for k in FLAGS.scales]):
      rows.append(row)
      print(f"{row['run']} lambda={row['smoothing']:g}: {row['zero_fraction']:.1%} of {row['differences']} "
            f"differences exactly 0, mean |delta| {row['mean_abs_difference']:.3g}", flush=True)
  os.makedirs(FLAGS.output_dir, exist_ok=True)
  with open(os.path.join(FLAGS.output_dir, "fd_resolution.json"), "w") as f:
    json.dump({"label": FLAGS.label, "rows": rows}, f, indent=1)


if __name__ == "__main__":
  define_flags()
  app.run(main)
