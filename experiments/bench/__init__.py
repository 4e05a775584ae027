"""The benchmark suites of ``python -m experiments.benchmark`` (issue 8), one module each.

``util`` holds what they share (settings, interleaved timing, memory, environment, the
digits benchmark task, compiled engine chunks); ``vmap``, ``scaling``, ``roofline``,
``compile_time``, ``fzoos_speed`` and ``ffgb_speed`` are the suites (``experiments/benchmark.py``
says what each measures; each module's docstring says exactly what it times).
"""
