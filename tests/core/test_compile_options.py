"""XLA CPU emitters of the engine's programs (``fedsim.core.compile_options``, issue 17).

The classic emitters are an execution setting: they must reach XLA (the compiled
program differs) and must not change a single bit of a run.
"""

import re

import jax
import numpy as np
import pytest

import fedsim
from fedsim import algorithms
from fedsim.core import compile_options, engine, rng, simulate
from fedsim.core.errors import ConfigError


@pytest.fixture
def emitters():
  """Restores the process-wide emitters after a test that changes them."""
  before = compile_options.cpu_emitters()
  yield compile_options.set_cpu_emitters
  compile_options.set_cpu_emitters(before)


def _fusions(name: str) -> int:
  compile_options.set_cpu_emitters(name)
  x = np.linspace(0.0, 1.0, 4096, dtype=np.float32)
  fn = compile_options.jit(lambda v: jax.numpy.sum(jax.numpy.tanh(v) * v) + jax.numpy.max(jax.numpy.exp(v)))
  return len(re.findall(r"\bfusion\(", fn.lower(x).compile().as_text()))


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="CPU-only options")
def test_classic_emitters_reach_xla(emitters):
  if not compile_options._accepted("classic"):
    pytest.skip("this jaxlib has no xla_cpu_use_fusion_emitters option")
  emitters("classic")
  assert compile_options.options() == {"xla_cpu_use_fusion_emitters": False}
  classic, fusion = _fusions("classic"), _fusions("fusion")
  emitters("fusion")
  assert compile_options.options() is None  # XLA's default: no options at all
  # The fusion emitters split the reductions into more fusions than the classic ones.
  assert classic != fusion


@pytest.mark.parametrize("name", ["fedavg", "fedzo"])
def test_emitters_give_the_same_bits(emitters, digits10, name):
  hp = {"clients_per_round": 4, "local_steps": 2, "lr": 0.05}
  out, programs = {}, {}
  for mode in compile_options.EMITTERS:
    emitters(mode)
    alg = algorithms.build(name, digits10, **hp)
    state, recs = simulate(alg, digits10, 3, 3, jax.random.key(0))
    out[mode] = (np.asarray(state.x), [r["objective"] for r in recs])
    key = jax.random.key(0)
    lowered = engine.make_chunk(alg).lower(alg.init(*rng.init_keys(key)), digits10.data,
                                           rng.stream(key, "rounds"), jax.numpy.int32(0), 3)
    programs[mode] = lowered.compile().as_text()
  if jax.default_backend() == "cpu" and compile_options._accepted("classic"):
    assert programs["classic"] != programs["fusion"]  # the engine's chunk does use the option
  np.testing.assert_array_equal(out["classic"][0], out["fusion"][0])
  assert out["classic"][1] == out["fusion"][1]


def test_unknown_emitters_are_refused(emitters):
  with pytest.raises(ConfigError, match="xla_cpu_emitters.*classic, fusion"):
    fedsim.ExperimentConfig(xla_cpu_emitters="llvm")
  with pytest.raises(ValueError, match="accepted: classic, fusion"):
    emitters("llvm")
  assert compile_options.cpu_emitters() in compile_options.EMITTERS
