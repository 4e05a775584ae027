"""The client-drift statistic of the federated quadratic at a run's starting point (Shu et al. 2023
§5.1's heterogeneity G; the evidence of the known behaviour at C = 50).

For each heterogeneity C and seed, at the x_0 that ``experiments.run --task=quadratic
--seed=S`` starts from (same coefficients, same init key), it computes with exact
gradients (``jax.grad`` of the task, outside the query model)

  drift(x_0) = mean_i ||grad f_i(x_0) - grad F(x_0)||^2 / ||grad F(x_0)||^2

i.e. G at x_0 relative to the signal the clients should follow. When it is large, an
Adam step (per-coordinate sign-like) on one client's direction follows grad f_i, not
grad F, unless the correction removes nearly all of grad f_i - grad F.

Writes ``OUTPUT_DIR/drift.json``: ``{"rows": [{"heterogeneity", "seed", "drift",
"grad_F_norm", "grad_fi_norm"}]}`` and prints one line per row.

Usage: python -m experiments.fzoos.drift_statistic --heterogeneity=0.5,5,50 --seeds=0,1 \\
  --output_dir=runs/drift
"""

from __future__ import annotations

import json
import os

from absl import app, flags

FLAGS = flags.FLAGS


def define_flags():
  flags.DEFINE_list("heterogeneity", ["0.5", "5", "50"], "Quadratic heterogeneities C.")
  flags.DEFINE_list("seeds", ["0"], "Run seeds (coefficients and x_0, as experiments.run --seed).")
  flags.DEFINE_integer("dim", 300, "d.")
  flags.DEFINE_integer("num_clients", 5, "N.")
  flags.DEFINE_string("output_dir", "runs/drift", "Where drift.json goes.")


def drift_at_start(heterogeneity: float, seed: int, dim: int, num_clients: int) -> dict:
  """The drift statistic at the run's x_0 (module docstring).

  Args:
    heterogeneity: C.
    seed: the run's ``--seed`` (task coefficients and the init key ``rng.init_keys``).
    dim, num_clients: d, N.

  Returns:
    ``{"drift": mean_i ||g_i - g||^2 / ||g||^2, "grad_F_norm": ||g||,
    "grad_fi_norm": mean_i ||g_i||}`` with g_i = grad f_i(x_0) (d,), g = mean_i g_i = grad F(x_0).
  """
  import jax
  import jax.numpy as jnp

  from fedsim.algorithms import build
  from fedsim.core import rng
  from fedsim.tasks import make_task

  task = make_task("quadratic", num_clients=num_clients, dim=dim, heterogeneity=heterogeneity, seed=seed)
  x0 = build("fedzo_fd", task).init(*rng.init_keys(jax.random.key(seed))).x       # the runs' x_0
  gi = jax.vmap(jax.grad(task.loss), in_axes=(None, 0))(x0, task.data["clients"])  # (N, d)
  g = jnp.mean(gi, axis=0)
  drift = jnp.mean(jnp.sum((gi - g) ** 2, axis=-1)) / jnp.sum(g ** 2)
  return {"drift": float(drift), "grad_F_norm": float(jnp.linalg.norm(g)),
          "grad_fi_norm": float(jnp.mean(jnp.linalg.norm(gi, axis=-1)))}


def main(argv):
  del argv
  import jax
  jax.config.update("jax_enable_x64", True)
  rows = []
  for c in FLAGS.heterogeneity:
    for s in FLAGS.seeds:
      row = {"heterogeneity": float(c), "seed": int(s),
             **drift_at_start(float(c), int(s), FLAGS.dim, FLAGS.num_clients)}
      rows.append(row)
      print(f"C={row['heterogeneity']:g} seed={s}: drift {row['drift']:.4g} |grad F| {row['grad_F_norm']:.4g} "
            f"mean |grad f_i| {row['grad_fi_norm']:.4g}", flush=True)
  os.makedirs(FLAGS.output_dir, exist_ok=True)
  with open(os.path.join(FLAGS.output_dir, "drift.json"), "w") as f:
    json.dump({"dim": FLAGS.dim, "num_clients": FLAGS.num_clients, "rows": rows}, f, indent=1)


if __name__ == "__main__":
  define_flags()
  app.run(main)
