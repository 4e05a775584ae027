"""No JAX inside host callbacks (issue 35): the FedLRGD float32 deadlock and a static check.

A host callback of a compiled program (``jax.pure_callback``, ``io_callback``,
``jax.debug.callback``) that dispatches JAX work can deadlock the CPU runtime
(jax-ml/jax#24255). FedLRGD's float32 set-up did exactly that and hung on an idle
2-core machine; it now runs in ``FederatedAlgorithm.setup``, outside any
compiled program. Two guards: a static check that no callback body in
``fedsim/`` reaches ``jax``/``jnp``/``lax`` (pytree flattening, pure Python,
excepted), and the float32 path run many times in a fresh subprocess, alone, under
a time limit.
"""

from __future__ import annotations

import ast
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CALLBACKS = {"pure_callback", "io_callback", "callback"}   # jax.pure_callback, io_callback, jax.debug.callback
JAX_NAMES = {"jax", "jnp", "lax"}
ALLOWED = ("jax.tree_util",)   # pure-Python pytree utilities: no dispatch


def _dotted(node) -> str:
  parts = []
  while isinstance(node, ast.Attribute):
    parts.append(node.attr)
    node = node.value
  if isinstance(node, ast.Name):
    parts.append(node.id)
    return ".".join(reversed(parts))
  return ""


def _is_callback_call(call: ast.Call) -> bool:
  name = _dotted(call.func)
  last = name.rsplit(".", 1)[-1]
  if last not in CALLBACKS:
    return False
  return last != "callback" or name.endswith("debug.callback")


def jax_in_callbacks(source: str, filename: str = "<src>") -> list[str]:
  """``file:line: name`` for each JAX use reachable from a host-callback body in ``source``.

  Follows the callback (a lambda, or a function defined in the module by name)
  and, one call deep at a time, the module's own functions it calls.
  """
  tree = ast.parse(source)
  defs: dict[str, list[ast.AST]] = {}
  for node in ast.walk(tree):
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
      defs.setdefault(node.name, []).append(node)
  found, seen = [], set()

  def visit(body_nodes):
    stack = list(body_nodes)
    while stack:
      fn = stack.pop()
      if id(fn) in seen:
        continue
      seen.add(id(fn))
      for node in ast.walk(fn):
        if isinstance(node, ast.Attribute | ast.Name):
          name = _dotted(node)
          root = name.split(".", 1)[0]
          allowed = any(name == a or name.startswith(a + ".") for a in ALLOWED)
          if root in JAX_NAMES and "." in name and not allowed:
            found.append(f"{filename}:{node.lineno}: {name}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
          stack.extend(defs.get(node.func.id, []))

  for node in ast.walk(tree):
    if isinstance(node, ast.Call) and _is_callback_call(node) and node.args:
      target = node.args[0]
      if isinstance(target, ast.Lambda):
        visit([target.body])
      elif isinstance(target, ast.Name):
        visit(defs.get(target.id, []))
  return list(dict.fromkeys(found))


def test_the_check_finds_jax_in_a_callback():
  """The old FedLRGD pattern (a jitted JAX call in a pure_callback's host function) is found."""
  src = textwrap.dedent("""
      import jax
      def outer(x):
        fn = jax.jit(lambda a: a + 1)
        def host(a):
          with jax.enable_x64(True):
            return helper(a)
        def helper(a):
          return jax.device_get(fn(a))
        return jax.pure_callback(host, x, x)
      def ok(s):
        jax.debug.callback(lambda t: print(jax.tree_util.tree_leaves(t)), s)
      """)
  hits = jax_in_callbacks(src)
  assert [h.split(": ")[1] for h in hits] == ["jax.enable_x64", "jax.device_get"]   # the pure_callback only


def test_no_callback_body_in_fedsim_calls_jax():
  hits = []
  for path in sorted((ROOT / "fedsim").rglob("*.py")):
    hits += jax_in_callbacks(path.read_text(), str(path.relative_to(ROOT)))
  assert hits == [], "JAX inside a host callback can deadlock the CPU runtime (jax-ml/jax#24255):\n" + "\n".join(hits)


# The command (FedLRGD alone hangs more often than beside gd: 4 of 6 runs at 20 s on the
# old code with a lightly loaded 2-core machine, 10 of 10 with an idle one). Rounds do not matter:
# the set-up runs before the first round.
COMMAND = [sys.executable, "-m", "experiments.run", "--algorithm=fedlrgd", "--task=logistic_soft",
           "--num_features=2", "--num_clients=50", "--samples_per_client=40", "--rank=16", "--rounds=10"]
RUNS, LIMIT_S = 5, 60


@pytest.mark.timeout(RUNS * LIMIT_S + 30)
def test_fedlrgd_float32_command_never_hangs(tmp_path):
  """The float32 set-up, the issue's command RUNS times, each alone in a fresh process (the
  idle-machine condition: nothing else runs in it) under a time limit; a hang is a failure
  naming the seed, not a stuck suite."""
  env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_ENABLE_X64")}
  for seed in range(1, RUNS + 1):
    cmd = COMMAND + [f"--seed={seed}", f"--output_dir={tmp_path / str(seed)}"]
    try:
      out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=LIMIT_S)
    except subprocess.TimeoutExpired:
      pytest.fail(f"FedLRGD's float32 set-up hung: no exit in {LIMIT_S} s at --seed={seed}")
    assert out.returncode == 0, out.stderr[-2000:]
