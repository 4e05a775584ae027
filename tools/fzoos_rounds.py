"""Times FZooS rounds of one checkout, for side-by-side comparisons of two checkouts (BUILD.md, fzoos).

    python tools/fzoos_rounds.py TREE [ROUNDS]

One process: imports fedsim from the checkout TREE, compiles FZooS at the ``fzoos`` benchmark suite's first
setting (Fig. 1's quadratic, N = 5, M = 10,000, d = 300, T = 10, the history sized for R = 50 rounds,
float64, BLAS at one thread as ``--blas_threads=1``), runs round 0 and then ROUNDS (default 5) timed rounds
with that checkout's defaults, and prints their min and median seconds. Pair two checkouts with
``farm-bench --vs`` (whole processes, alternately).
"""
import sys
import time

tree = sys.argv[1]
sys.path.insert(0, tree)
import jax  # noqa: E402

import fedsim  # noqa: E402

assert fedsim.__file__.startswith(tree), fedsim.__file__
from experiments.bench.util import compile_chunk  # noqa: E402
from experiments.bench.vmap import fzoos_task  # noqa: E402
from fedsim import algorithms  # noqa: E402
from fedsim.runner import set_blas_threads  # noqa: E402

set_blas_threads(1)
with jax.enable_x64(True):
  task = fzoos_task(5, 300, 0)
  alg = algorithms.build("fzoos", task, local_steps=10, num_rff=10000, rounds=50)
  run, info = compile_chunk(alg, task, 1, 0)
  run()
  ts = []
  for _ in range(int(sys.argv[2]) if len(sys.argv) > 2 else 5):
    t = time.perf_counter()
    run()
    ts.append(time.perf_counter() - t)
print(f"s/round min {min(ts):.3f} median {sorted(ts)[len(ts) // 2]:.3f} ({len(ts)} rounds after round 0)")
