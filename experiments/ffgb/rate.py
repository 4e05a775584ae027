"""FFGB's rate on the exact semi-heterogeneous task (Shen et al. 2022, Thm 3.1, Cor. 3.1; specs §4.1, §4.3, §7.1-7.2).

The task is the tabular square-loss task of ``tests/algorithms/test_ffgb.py`` (``_grid_task``): N
clients share one grid of M points in [0, 1]; client i holds targets ybar_i drawn N(0, 1) per seed
(``numpy.random.default_rng(seed)``), so f* = mean_i ybar_i / (1 + mu) (specs §4.3). FFGB (Alg. 2,
``fedsim.algorithms.build("ffgb", ...)``) runs with the synthetic oracle ``weak_learner=scaled``
(h = gamma phi, which meets the oracle assumption eq. (9) with equality, specs §4.2),
``eta_schedule=theory`` (eta^{k,t} = 2/(mu (tK + k + 1)), Thm 3.1) and f^0 = 0, all rounds of all
seeds in one jitted ``lax.scan`` (vmapped over the seeds). It records the relative error
||f^t - f*||^2 / ||f*||^2 (1 at t = 0) for:

(a) gamma = 1 (exact oracle), K = 1, at T in ``--a_rounds``, with eta capped at ``--a_eta_cap``
    (0.01). Thm 3.1 with gamma = 1: O(||f^0 - f*||^2 / (KT) + K G^2 log(KT) / (T mu^2)).
    Why not the cap 1/(1 + mu) of (b), (c): on this task one exact-oracle step is
    f <- (1 - eta (1 + mu)) f + eta mean_i ybar_i (the local map is affine in ybar_i with
    client-independent coefficients, so there is no client drift), and the first step's
    eta = min(2/(2 mu), 1/(1 + mu)) = 1/(1 + mu) lands on f* exactly: the error is 0 (rounding) from
    round 1 on and has no slope. With the cap 0.01 (as the test
    ``test_semi_heterogeneous_square_loss_converges_to_mean_over_one_plus_mu`` does) eta = 0.01 for
    every t < 2 / (0.01 mu) - 2 = 1998, so the error is exactly (1 - 0.01 (1 + mu))^(2T): geometric,
    which is faster than any power of 1/T, and the fitted log-log slope says how much faster over the
    grid of T.
(b) gamma = ``--b_gamma`` (0.5), T = ``--b_rounds`` (300), K in ``--b_local_steps``, eta capped at
    1/(1 + mu) (specs §7.1: square loss is not G-bounded; the uncapped 2/mu overshoots). Thm 3.1's
    bias term (1 - gamma) G^2 / (K mu^2 gamma^2): the error at a fixed large T falls like 1/K.
(c) gamma = ``--c_gamma`` (0.5), K = ceil(sqrt(T)), T in ``--c_rounds``, the same cap. Cor. 3.1:
    O(1/sqrt(T)) up to logs.

Because f^0 = 0 and every client's map is affine with the same coefficients, f^t = a_t mean_i ybar_i
for a scalar a_t that depends on (gamma, K, eta) only: the relative error is the same on every seed
up to float32 rounding. The seeds are kept so that this is seen, not assumed.

Writes ``OUTPUT_DIR/result.json``: ``{"settings": {...}, "a": {"rounds", "errors"}, "b":
{"local_steps", "errors"}, "c": {"rounds", "local_steps", "errors"}, "seconds"}`` with ``errors``
one list per seed (seed order ``settings["seeds"]``), one error per point of the grid.

Usage:

  python -m experiments.ffgb.rate --output_dir=runs/ffgb_rate --seeds=5
"""

from __future__ import annotations

import json
import math
import os
import time

import numpy as np
from absl import app, flags

FLAGS = flags.FLAGS


def define_flags(flag_values: flags.FlagValues = FLAGS):
  """Defines the binary's flags in ``flag_values`` (absl's global FLAGS by default)."""
  fv = dict(flag_values=flag_values)
  flags.DEFINE_integer("seeds", 5, "Seeds 0..seeds-1: each draws the clients' targets ybar_i ~ N(0, 1).", **fv)
  flags.DEFINE_integer("clients", 8, "N, the clients sharing the grid (tests/algorithms/test_ffgb.py).", **fv)
  flags.DEFINE_integer("grid_points", 12, "M, the points of the shared grid on [0, 1].", **fv)
  flags.DEFINE_float("mu", 0.1, "The Tikhonov weight mu (f* = mean_i ybar_i / (1 + mu)).", **fv)
  flags.DEFINE_list("a_rounds", ["50", "100", "200", "400"], "(a) gamma = 1, K = 1: the rounds T measured.", **fv)
  flags.DEFINE_float("a_eta_cap", 0.01, "(a) eta cap (the cap 1/(1 + mu) reaches f* in one round here).", **fv)
  flags.DEFINE_float("b_gamma", 0.5, "(b) the scaled oracle's gamma (h = gamma phi).", **fv)
  flags.DEFINE_integer("b_rounds", 300, "(b) the rounds T at which the error is read.", **fv)
  flags.DEFINE_list("b_local_steps", ["1", "2", "5", "10", "20"], "(b) the local steps K swept.", **fv)
  flags.DEFINE_float("c_gamma", 0.5, "(c) the scaled oracle's gamma.", **fv)
  flags.DEFINE_list("c_rounds", ["16", "64", "256", "1024"], "(c) the rounds T, each with K = ceil(sqrt(T)).", **fv)
  flags.DEFINE_string("output_dir", "runs/ffgb_rate", "Where result.json goes.", **fv)


def grid_targets(seed: int, clients: int, grid_points: int):
  """(x, y): the shared grid (N, M, 1) and seed ``seed``'s targets ybar_i (N, M, 1), as ``_grid_task``."""
  base = np.linspace(0.0, 1.0, grid_points)
  x = np.stack([base] * clients)[..., None]
  return x, np.random.default_rng(seed).normal(size=(clients, grid_points, 1))


def relative_errors(seeds, rounds: int, gamma: float, local_steps: int, eta_cap: float, mu: float = 0.1,
                    clients: int = 8, grid_points: int = 12):
  """||f^t - f*||^2 / ||f*||^2 for t = 0..rounds on each seed's task (module docstring).

  Args:
    seeds: the seeds (each its own ybar_i; root key ``jax.random.key(seed)``).
    rounds: T.
    gamma: the scaled oracle's gamma.
    local_steps: K.
    eta_cap: eta <= eta_cap.
    mu: the Tikhonov weight.
    clients, grid_points: N, M.

  Returns:
    (len(seeds), rounds + 1) float64 array; column 0 is f^0 = 0's error, 1.
  """
  import jax
  import jax.numpy as jnp

  from fedsim import algorithms
  from fedsim.core import rng
  from fedsim.tasks.functional import make_tabular_task

  tasks = [make_tabular_task(*grid_targets(s, clients, grid_points)) for s in seeds]
  alg = algorithms.build("ffgb", tasks[0], weak_learner="scaled", gamma=gamma, mu=mu, local_steps=local_steps,
                         eta_schedule="theory", eta_cap=eta_cap)
  data = jax.tree_util.tree_map(lambda *a: jnp.stack(a), *[t.data for t in tasks])
  roots = jnp.stack([jax.random.key_data(jax.random.key(int(s))) for s in seeds])

  @jax.jit
  def run(data, root_data):
    root = jax.random.wrap_key_data(root_data)
    y = data["clients"]["y"]
    fstar = jnp.broadcast_to(jnp.mean(y, 0) / (1.0 + mu), y.shape)
    k_rounds = rng.stream(root, "rounds")

    def body(s, r):
      s, _ = alg.round(s, rng.round_key(k_rounds, r), data)
      return s, jnp.sum((s.f_train - fstar) ** 2)
    state = alg.init(*rng.init_keys(root))
    _, errs = jax.lax.scan(body, state, jnp.arange(rounds))
    return jnp.concatenate([jnp.sum((state.f_train - fstar) ** 2)[None], errs]) / jnp.sum(fstar ** 2)

  return np.asarray(jax.vmap(run)(data, roots), np.float64)


def measure(seeds, clients: int = 8, grid_points: int = 12, mu: float = 0.1, a_rounds=(50, 100, 200, 400),
            a_eta_cap: float = 0.01, b_gamma: float = 0.5, b_rounds: int = 300, b_local_steps=(1, 2, 5, 10, 20),
            c_gamma: float = 0.5, c_rounds=(16, 64, 256, 1024)) -> dict:
  """The result.json record of the module docstring (without ``seconds``)."""
  cap = 1.0 / (1.0 + mu)
  kw = dict(mu=mu, clients=clients, grid_points=grid_points)
  a_rounds, b_local_steps, c_rounds = sorted(a_rounds), sorted(b_local_steps), sorted(c_rounds)
  a = relative_errors(seeds, max(a_rounds), 1.0, 1, a_eta_cap, **kw)[:, a_rounds]
  b = np.stack([relative_errors(seeds, b_rounds, b_gamma, k, cap, **kw)[:, b_rounds] for k in b_local_steps], 1)
  c_ks = [math.ceil(math.sqrt(t)) for t in c_rounds]
  c = np.stack([relative_errors(seeds, t, c_gamma, k, cap, **kw)[:, t] for t, k in zip(c_rounds, c_ks)], 1)
  settings = {"seeds": list(seeds), "clients": clients, "grid_points": grid_points, "mu": mu,
              "algorithm": "ffgb", "weak_learner": "scaled", "eta_schedule": "theory", "f0": 0.0,
              "fstar": "mean_i ybar_i / (1 + mu)", "targets": "ybar_i ~ N(0, 1) iid per seed (numpy default_rng)",
              "error": "||f^T - f*||^2 / ||f*||^2 on every client's grid points",
              "a": {"gamma": 1.0, "local_steps": 1, "eta_cap": a_eta_cap, "rounds": a_rounds},
              "b": {"gamma": b_gamma, "rounds": b_rounds, "eta_cap": cap, "local_steps": b_local_steps},
              "c": {"gamma": c_gamma, "eta_cap": cap, "rounds": c_rounds, "local_steps": c_ks}}
  return {"settings": settings,
          "a": {"rounds": a_rounds, "errors": a.tolist()},
          "b": {"local_steps": b_local_steps, "errors": b.tolist()},
          "c": {"rounds": c_rounds, "local_steps": c_ks, "errors": c.tolist()}}


def main(argv):
  del argv
  start = time.time()
  out = measure(list(range(FLAGS.seeds)), FLAGS.clients, FLAGS.grid_points, FLAGS.mu,
                [int(t) for t in FLAGS.a_rounds], FLAGS.a_eta_cap, FLAGS.b_gamma, FLAGS.b_rounds,
                [int(k) for k in FLAGS.b_local_steps], FLAGS.c_gamma, [int(t) for t in FLAGS.c_rounds])
  out["seconds"] = time.time() - start
  for part, grid in (("a", "rounds"), ("b", "local_steps"), ("c", "rounds")):
    print(f"({part}) {grid} {out[part][grid]}: seed 0 errors "
          + ", ".join(f"{e:.4g}" for e in out[part]["errors"][0]), flush=True)
  os.makedirs(FLAGS.output_dir, exist_ok=True)
  with open(os.path.join(FLAGS.output_dir, "result.json"), "w") as f:
    json.dump(out, f, indent=1)


if __name__ == "__main__":
  define_flags()
  app.run(main)
