"""The benchmark suites of ``python -m experiments.benchmark``, one module each.

``util`` holds what they share (settings, interleaved timing, memory, environment, the
digits benchmark task, compiled engine chunks); ``vmap``, ``scaling``, ``roofline``,
``compile_time``, ``fzoos_speed``, ``ffgb_speed`` and, only when named, ``gpu_table`` and
``sweep_table`` are the suites (``experiments/benchmark.py``
says what each measures; each module's docstring says exactly what it times).
"""
