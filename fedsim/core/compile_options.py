"""XLA compiler options of the engine's programs (BUILD.md, "Compile time").

On CPU, jaxlib's MLIR "fusion emitters" (XLA's default) spend 1.4x-2x the
compile time of XLA's classic LLVM IR emitters on fedsim's round chunks, and
the programs they give run within about 13% of each other with bit-identical
results (BUILD.md, "Benchmark", compile; ``tests/core/test_compile_options.py``
checks the bits on FedAvg and FedZO chunks). The engine therefore compiles
with the classic emitters on CPU by default (``"classic"``); ``"fusion"`` is
XLA's default, faster at run time for FedAvg on the MLP (9-13% at N = 1000)
and slower for DeComFL / HiSo (3-10%), so long MLP runs may prefer it. The choice is
``ExperimentConfig.xla_cpu_emitters`` (``--xla_cpu_emitters``), applied
process-wide by :func:`set_cpu_emitters` before the engine builds its
programs. Other backends get no options.

:func:`jit` is ``jax.jit`` with these options: the engine's round chunks,
evaluations, init and batched sweep programs use it. A jaxlib that does not
know the option (older than the fusion emitters) gets none: :func:`options`
probes it once with a one-line program.

Example::

  from fedsim.core import compile_options
  compile_options.set_cpu_emitters("fusion")    # XLA's default emitters
  step = compile_options.jit(lambda x: 2 * x)   # jax.jit plus the CPU options
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax

# name -> XLA debug options of CPU compilations (module docstring).
EMITTERS: dict[str, dict[str, Any]] = {
    "classic": {"xla_cpu_use_fusion_emitters": False},
    "fusion": {},
}
_current = ["classic"]


def set_cpu_emitters(name: str) -> None:
  """Makes programs built from now on by :func:`jit` use the ``name`` emitters on CPU (process-wide).

  Raises:
    ValueError: ``name`` not in :data:`EMITTERS`.
  """
  if name not in EMITTERS:
    raise ValueError(f"unknown XLA CPU emitters {name!r}; accepted: {', '.join(EMITTERS)}")
  _current[0] = name


def cpu_emitters() -> str:
  """The name set by :func:`set_cpu_emitters` (``"classic"`` until then)."""
  return _current[0]


@functools.cache
def _accepted(name: str) -> bool:
  """Whether this jaxlib's CPU compiler accepts the options of ``name`` (one tiny compile)."""
  try:
    jax.jit(lambda x: x + 1, compiler_options=EMITTERS[name]).lower(1.0).compile()
  except Exception:  # pylint: disable=broad-except  # jaxlib: "No such compile option"
    return False
  return True


def options() -> dict[str, Any] | None:
  """The compiler options of programs built now: the current emitters' on CPU, else None.

  None too when they are empty or this jaxlib does not accept them.
  """
  opts = EMITTERS[_current[0]]
  if not opts or jax.default_backend() != "cpu" or not _accepted(_current[0]):
    return None
  return dict(opts)


def jit(fn: Callable, **kwargs) -> jax.stages.Wrapped:
  """``jax.jit(fn, **kwargs)`` compiled with :func:`options` (read now, when the program is built)."""
  return jax.jit(fn, compiler_options=options(), **kwargs)
