"""``profile_dir`` (issue 37 item 4): a JAX profiler trace of the rounds after the first chunk."""

from __future__ import annotations

import jax
import numpy as np

from fedsim import algorithms
from fedsim.core import simulate


def _traces(path):
  return sorted(p.name for p in path.rglob("*") if p.is_file() and (".xplane.pb" in p.name or ".trace" in p.name))


def test_a_trace_of_rounds_2_3_is_written_and_the_records_are_unchanged(tmp_path, digits10):
  alg = algorithms.build("fedavg", digits10)
  _, plain = simulate(alg, digits10, 4, 1, jax.random.key(0))
  _, profiled = simulate(alg, digits10, 4, 1, jax.random.key(0), profile_dir=str(tmp_path / "p"))
  assert any(n.endswith(".xplane.pb") for n in _traces(tmp_path / "p"))
  for a, b in zip(plain, profiled, strict=True):
    assert {k: v for k, v in a.items() if k != "wall_time_s"} == {k: v for k, v in b.items() if k != "wall_time_s"}
  # One chunk: nothing compiled before it, nothing traced (and no trace left running).
  simulate(alg, digits10, 3, 5, jax.random.key(0), profile_dir=str(tmp_path / "one"))
  assert not (tmp_path / "one").exists()
  jax.profiler.start_trace(str(tmp_path / "again"))   # raises if a trace were still active
  jax.profiler.stop_trace()
  assert np.isfinite(profiled[-1]["objective"])
