"""The engine's memory check (issue 48 item 5): the compiled round chunk's measured size against the memory
available, refused with the settings that shrink it (fedsim.core.memory)."""

import dataclasses

import jax
import numpy as np
import pytest

from fedsim import algorithms
from fedsim.core import engine, memory, rng
from fedsim.core.engine import simulate
from fedsim.core.errors import ConfigError


def _tiny(monkeypatch, free):
  monkeypatch.setattr(memory, "available_bytes", lambda device=None: (free, "test memory"))


def test_a_chunk_larger_than_the_memory_available_is_refused_before_round_0_naming_its_settings(
    digits10, monkeypatch):
  """FedAvg with 10 bytes "available": simulate raises a ConfigError under ``fedavg_client_block``, the
  setting that shrinks it, before its state is allocated (init traced by jax.eval_shape, never run) or
  round 0 evaluated (no record)."""
  _tiny(monkeypatch, 10)
  alg = algorithms.build("fedavg", digits10, lr=0.1, clients_per_round=3, local_steps=1)
  runs = []

  def init(*keys):
    runs.append(isinstance(keys[0], jax.core.Tracer))
    return alg.init(*keys)
  recs = []
  with pytest.raises(ConfigError, match="client_block=B runs the sampled clients") as e:
    simulate(alg._replace(init=init), digits10, 1, 1, jax.random.key(0), on_eval=recs.append)
  assert e.value.flag == "fedavg_client_block"
  assert "more memory than the 10 B available (test memory" in str(e.value), str(e.value)
  assert recs == [] and runs == [True]   # refused before round 0, init only traced


def test_fzoos_is_refused_naming_rff_cache_and_history_size_and_one_without_settings_names_num_clients(
    digits10, monkeypatch):
  """The refusal names every memory setting the algorithm has, with its value (FZooS: rff_cache and
  history_size; the check alone: FZooS compiles for tens of seconds); an algorithm with none
  (DeComFL) is refused under num_clients, through the engine."""
  fz = algorithms.build("fzoos", digits10, num_rff=16, local_steps=1, rounds=2)
  est = memory.MemoryEstimate(argument=10**9, output=0, alias=0, temp=5 * 10**8, code=0, resident=0, devices=1,
                              available=10**9, source="test memory")
  with pytest.raises(ConfigError) as e:
    est.check(fz)
  assert e.value.flag == "fzoos_rff_cache"
  msg = str(e.value)
  assert msg.startswith("--fzoos_rff_cache: fzoos's round chunk needs 1.5 GB more memory than the 1 GB "
                        "available"), msg
  assert "rff_cache=0 drops" in msg and "(now 1)" in msg, msg
  assert ("history_size=H > 0 keeps each client's last H queries instead of the whole run's "
          f"(now {fz.hparams.history_size})") in msg
  _tiny(monkeypatch, 10)
  dc = algorithms.build("decomfl", digits10, clients_per_round=2, local_steps=1)
  assert not {"client_block", "rff_cache", "history_size"} & {f.name for f in dataclasses.fields(dc.hparams)}
  with pytest.raises(ConfigError, match="decomfl has no memory setting") as e:
    simulate(dc, digits10, 1, 1, jax.random.key(0))
  assert e.value.flag == "num_clients"


def test_the_estimate_is_xlas_measured_sizes_and_a_run_that_fits_reports_them_once(digits10):
  """The report handed to ``on_compile`` carries memory_analysis()'s numbers for the chunk the run
  compiled (compiled again here the same way to compare), the data counted as already in memory, and
  the host's MemAvailable; it is reported once, before the first chunk runs."""
  alg = algorithms.build("fedavg", digits10, lr=0.1, clients_per_round=3, local_steps=1)
  reports, recs = [], []
  simulate(alg, digits10, 4, 2, jax.random.key(0), on_eval=recs.append,
           on_compile=lambda rep: reports.append((rep, len(recs))))
  assert len(reports) == 1
  rep, seen = reports[0]
  assert seen == 1 and rep["round"] == 0 and rep["compile_s"] > 0 and rep["wall_time_s"] > 0
  state = engine.init_state(alg, jax.random.key(0))
  ma = engine.make_chunk(alg).lower(state, digits10.data, rng.stream(jax.random.key(0), "rounds"),
                                    np.int32(0), 2, np.int32(2)).compile().memory_analysis()
  est = rep["memory"]
  assert (est.argument, est.output, est.alias, est.temp) == (
      ma.argument_size_in_bytes, ma.output_size_in_bytes, ma.alias_size_in_bytes, ma.temp_size_in_bytes)
  state_bytes = sum(x.nbytes for x in jax.tree_util.tree_leaves(state))
  assert est.alias >= state_bytes > 0                      # the donated state is written in place
  key_bytes = jax.random.key_data(rng.stream(jax.random.key(0), "rounds")).nbytes
  # the data was in memory; the state and the rounds key not yet (the key is made beside the compilation)
  assert est.resident == est.argument - state_bytes - key_bytes
  assert est.needed == est.total - est.resident and est.source == "host MemAvailable"


def test_check_refuses_exactly_when_the_need_exceeds_what_is_available():
  alg = algorithms.build("fedzo", _task())
  est = memory.MemoryEstimate(argument=100, output=50, alias=40, temp=30, code=10, resident=60, devices=2,
                              available=180, source="s")
  assert est.total == 150 and est.needed == 180
  est.check(alg)                                           # 180 <= 180: runs
  with pytest.raises(ConfigError, match=r"needs 180 B more memory than the 179 B available \(s; compiled program: "
                     "150 B per device"):
    dataclasses.replace(est, available=179).check(alg)


def test_available_memory_on_the_cpu_is_the_hosts_memavailable():
  free, source = memory.available_bytes(jax.devices("cpu")[0])
  with open("/proc/meminfo") as f:
    kb = next(int(line.split()[1]) for line in f if line.startswith("MemAvailable:"))
  assert source == "host MemAvailable" and abs(free - kb * 1024) < 2**30


def _task():
  from tests.conftest import digits_task
  return digits_task(4)
