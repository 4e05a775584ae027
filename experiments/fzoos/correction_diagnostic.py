"""How good are FZooS's transferable surrogates? (Shu et al. 2023, §4.2, eq. 7-8; Thm. 1.)

Runs FZooS on the federated quadratic and, after every round r, compares at the
new global point x_r the RFF surrogate gradients with the true ones (``jax.grad``
of the task, outside the query model):

* ``local``  cos(grad phi(x_r)^T w_r^(i), grad f_i(x_r)) and the norm ratio, per client;
* ``global`` cos(grad phi(x_r)^T w_r, grad F(x_r)) and the norm ratio;
* ``corr``   cos(grad phi(x_r)^T (w_r - w_r^(i)), grad F(x_r) - grad f_i(x_r)), the
  correction vector of eq. 8 at gamma = 1 against its target, and the norm ratio.

It prints means over clients. At large heterogeneity C the client gradients are
large and nearly cancel in grad F, so a correction with a good cosine to
grad F - grad f_i can still leave ghat far from grad F: compare ``|gF|/|gi|``.

Usage: python -m experiments.fzoos.correction_diagnostic --heterogeneity=50 [--num_rff=10000]
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from absl import app, flags

FLAGS = flags.FLAGS


def define_flags():
  flags.DEFINE_float("heterogeneity", 50.0, "Quadratic heterogeneity C (paper: 0.5, 5, 50).")
  flags.DEFINE_integer("dim", 300, "d.")
  flags.DEFINE_integer("num_clients", 5, "N.")
  flags.DEFINE_integer("num_rff", 10000, "M random features.")
  flags.DEFINE_integer("rounds", 5, "Rounds to run.")
  flags.DEFINE_integer("seed", 0, "Seed of the coefficients and of the run.")


def _cos(a, b):
  return a @ b / (jnp.linalg.norm(a) * jnp.linalg.norm(b) + 1e-300)


def main(argv):
  del argv
  jax.config.update("jax_enable_x64", True)
  from fedsim.algorithms import build
  from fedsim.core import rng
  from fedsim.estimators import rff as rffm
  from fedsim.tasks import make_task

  task = make_task("quadratic", num_clients=FLAGS.num_clients, dim=FLAGS.dim, heterogeneity=FLAGS.heterogeneity,
                   seed=FLAGS.seed)
  alg = build("fzoos", task, num_rff=FLAGS.num_rff, rounds=FLAGS.rounds)  # history: the whole run
  root = jax.random.key(FLAGS.seed)
  state = jax.jit(alg.init)(*rng.init_keys(root))
  step = jax.jit(alg.round)
  clients = task.data["clients"]
  grads = jax.jit(jax.vmap(jax.grad(task.loss), in_axes=(None, 0)))

  @jax.jit
  def quality(state):
    x = state.x
    gi = grads(x, clients)                                               # (N, d)
    gF = jnp.mean(gi, axis=0)
    loc = jax.vmap(lambda w: rffm.gradient(state.rff, w, x))(state.w_local)
    glob = rffm.gradient(state.rff, state.w_global, x)
    corr, target = glob[None] - loc, gF[None] - gi
    def ratio(a, b):
      return jnp.linalg.norm(a, axis=-1) / jnp.linalg.norm(b, axis=-1)
    return {"F": task.evaluate(x, task.data)["objective"],
            "local_cos": jnp.mean(jax.vmap(_cos)(loc, gi)), "local_ratio": jnp.mean(ratio(loc, gi)),
            "global_cos": _cos(glob, gF), "global_ratio": ratio(glob, gF),
            "corr_cos": jnp.mean(jax.vmap(_cos)(corr, target)),
            "corr_ratio": jnp.mean(ratio(corr, target)),
            "gF_over_gi": jnp.linalg.norm(gF) / jnp.mean(jnp.linalg.norm(gi, axis=-1))}

  print(f"C={FLAGS.heterogeneity:g} d={FLAGS.dim} N={FLAGS.num_clients} M={FLAGS.num_rff}")
  for r in range(FLAGS.rounds):
    state, _ = step(state, rng.round_key(rng.stream(root, "rounds"), r), task.data)
    q = {k: float(v) for k, v in quality(state).items()}
    print(f"round {r + 1:3d} F {q['F']:.4f} | local cos {q['local_cos']:.3f} ratio {q['local_ratio']:.2f}"
          f" | global cos {q['global_cos']:.3f} ratio {q['global_ratio']:.2f}"
          f" | corr cos {q['corr_cos']:.3f} ratio {q['corr_ratio']:.2f} | |gF|/|gi| {q['gF_over_gi']:.3f}",
          flush=True)


if __name__ == "__main__":
  define_flags()
  app.run(main)
