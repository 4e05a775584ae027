"""The benchmark suites of ``python -m experiments.benchmark`` (issue 8), one module each.

* ``util``: settings, interleaved timing, memory, environment, the digits
  benchmark task, compiling and running one engine chunk.
* ``vmap``: vmapped engine vs one client at a time (fedavg, fedzo, decomfl,
  hiso, fzoos, ffgb).
* ``scaling``: FedZO seconds per round and memory in N (10^2..10^5).
* ``roofline``: achieved FLOP/s against a float32 matmul; directions per second
  against ``jax.random.normal``.
* ``compile_time``: compile time against rounds per chunk and N.
* ``fzoos_speed``: FZooS round time at the Fig. 1 settings against the authors' 33 s.
* ``ffgb_speed``: one FFGB round with the mlp oracle, vmapped vs one client at a time.
"""
