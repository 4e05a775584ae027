"""Runs one FZooS run a round at a time on request, for whole-run timings of two checkouts side by side.

    python experiments/bench/fzoos_round_server.py TREE N M DIM T ROUNDS SEED

One process: imports fedsim (and ``experiments.bench``) from the checkout TREE, builds FZooS on
the ``fzoos`` suite's task (Fig. 1's quadratic, float64, all N clients, T local steps, M random
features, the history sized for ROUNDS rounds; the BLAS libraries at one thread as the suite's
``--blas_threads=1``), compiles a one-round chunk and prints ``ready COMPILE_S``. Then each line
``round`` on stdin runs the next round and prints ``SECONDS CHECKSUM``: the round's wall seconds
(the call until the state is ready) and sum(x_r) (to tell whether two checkouts compute the same
run); ``quit`` or the end of stdin ends it. ``experiments.bench.fzoos_speed.whole_runs`` drives
two of these in alternation, so both runs see the same load.

Only names that the checkouts being compared share are used (``compile_chunk``, ``fzoos_task``,
``set_blas_threads``, ``algorithms.build``), so a revision older than this file can be timed.
"""

import sys
import time


def main(argv):
  tree, n, m, dim, steps, rounds, seed = argv[1], *map(int, argv[2:8])
  sys.path.insert(0, tree)
  import jax

  import fedsim
  from experiments.bench.util import compile_chunk
  from experiments.bench.vmap import fzoos_task
  from fedsim import algorithms
  from fedsim.runner import set_blas_threads

  if not fedsim.__file__.startswith(tree):
    raise SystemExit(f"fedsim imported from {fedsim.__file__}, not from {tree}")
  set_blas_threads(1)
  with jax.enable_x64(True):
    task = fzoos_task(n, dim, seed)
    alg = algorithms.build("fzoos", task, local_steps=steps, num_rff=m, rounds=rounds)
    run, info = compile_chunk(alg, task, 1, seed)
    print(f"ready {info['compile_s']:.3f}", flush=True)
    for line in sys.stdin:
      if line.strip() != "round":
        break
      t = time.perf_counter()
      run()
      dt = time.perf_counter() - t
      print(f"{dt!r} {float(run.state().x.sum())!r}", flush=True)


if __name__ == "__main__":
  main(sys.argv)
