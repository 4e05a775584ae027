"""Does HiSo's learned H track the curvature? (Li et al. 2025, §4.2, §5.1).

Runs HiSo on the ill-conditioned quadratic (f_i = (1/2)(x - b_i)^T A (x - b_i),
A = Diag(lambda), log lambda ~ N(0, sigma^2)) and prints, every `every` rounds:
the optimality gap F(x) - F*, corr(log H, log lambda) over all coordinates and
over the 50 largest lambda, the median of H, q99.9(H) / median(H), and the
whitening ratio Tr(A H^{-1}) / (Tr(A) mean(H^{-1})) (1 = no gain over a scalar
H, smaller is better; the oracle H = lambda gives d / (Tr(A) mean(1/lambda))).

``--oracle`` replaces the learned H by the true diagonal Hessian lambda (nu = 0)
for comparison. Usage (defaults: d = 1000, M = 64, m = 8, P = 5, tau = 1,
heterogeneity 0.01, as experiments/flagfiles/hiso_toy_illcond.cfg):

  python -m experiments.hiso.h_diagnostic [--lr=0.004] [--dim=1000] [--rounds=3000]
      [--every=500] [--nu=0.05] [--eps=1e-8] [--step_norm=none|trace] [--oracle]
"""

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags

FLAGS = flags.FLAGS


def define_flags():
  flags.DEFINE_float("lr", 0.004, "HiSo's step size.")
  flags.DEFINE_integer("dim", 1000, "d.")
  flags.DEFINE_integer("rounds", 3000, "Rounds to run.")
  flags.DEFINE_integer("every", 500, "Rounds between printed lines.")
  flags.DEFINE_float("nu", 0.05, "EMA weight of HiSo's H update (eq. 12; the oracle uses 0).")
  flags.DEFINE_float("eps", 1e-8, "HiSo's epsilon in the H update (eq. 12).")
  flags.DEFINE_string("step_norm", "none", "HiSo's step normalisation: none, trace.")
  flags.DEFINE_float("sigma", 3 ** 0.5, "Std of log lambda.")
  flags.DEFINE_float("heterogeneity", 0.01, "Spread of the client optima b_i.")
  flags.DEFINE_integer("seed", 0, "Seed of the task and of the run.")
  flags.DEFINE_bool("oracle", False, "Replace the learned H by the true diagonal Hessian lambda (nu = 0).")


def main(argv):
  del argv
  from fedsim import algorithms
  from fedsim.core import rng
  from fedsim.tasks.illcond_quadratic import make_illcond_quadratic_task

  a = FLAGS
  task = make_illcond_quadratic_task(a.dim, 64, a.heterogeneity, sigma=a.sigma, seed=a.seed)
  alg = algorithms.build("hiso", task, lr=a.lr, nu=0.0 if a.oracle else a.nu, eps=a.eps,
                         step_norm=a.step_norm, num_perturbations=5, local_steps=1,
                         clients_per_round=8)
  root = jax.random.key(a.seed)
  lam = np.asarray(task.data["eval"]["lam"], np.float64)
  state = jax.jit(alg.init)(*rng.init_keys(root))
  if a.oracle:
    state = state._replace(h=jnp.asarray(lam, state.h.dtype))
  rounds_key = rng.stream(root, "rounds")
  top = np.argsort(-lam)[:50]

  @jax.jit
  def chunk(s, start):
    def body(s, r):
      return (alg.round(s, rng.round_key(rounds_key, r), task.data)[0], None)
    s, _ = jax.lax.scan(body, s, start + jnp.arange(a.every, dtype=jnp.int32))
    return s, task.evaluate(s.x, task.data)["optimality_gap"]

  print("round gap corr_all corr_top50 median_H q999/median whitening_ratio")
  for c in range(a.rounds // a.every):
    state, gap = chunk(state, c * a.every)
    h = np.asarray(state.h, np.float64)
    def corr(i, h=h):
      return np.corrcoef(np.log(h[i]), np.log(lam[i]))[0, 1] if np.ptp(h[i]) > 0 else float("nan")
    gain = np.sum(lam / h) / (lam.sum() * np.mean(1 / h))
    print(f"{(c + 1) * a.every} {float(gap):.4g} {corr(slice(None)):.3f} {corr(top):.3f} "
          f"{np.median(h):.4g} {np.quantile(h, 0.999) / np.median(h):.3g} {gain:.3f}")


if __name__ == "__main__":
  define_flags()
  app.run(main)
