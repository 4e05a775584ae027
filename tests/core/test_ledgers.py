"""Exact round ledgers beyond 2**31 (RoundStats counts x static units; issue 15).

References are Python integers computed in the test; no value is read back from
fedsim to build the expectation.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedsim import algorithms
from fedsim.core import rng, simulate
from fedsim.core.batched import simulate_batched
from fedsim.core.types import FederatedAlgorithm, make_stats, times
from fedsim.tasks import make_task
from fedsim.tasks.functional import make_tabular_task

U_Q = 3 * 2 ** 31 + 7        # queries unit: every round's value exceeds 2**31
BIG = 5 * 2 ** 32 + 3        # a static per-round value above int32
U_D = 2 ** 61 + 1            # bytes_down unit: the total exceeds 2**63 (int64) too


def _ledger_alg(task, step=1):
  """Round t (0-based) reports queries (t+1) U_Q, bytes_up BIG, bytes_down (2t+step) U_D,
  participants 2**31 - 1 - t (an int32 count whose sum overflows int32), empty_rounds t mod 2."""

  def init(*keys):  # (init key[, shared key])
    return {"x": task.init_params(keys[0]), "t": jnp.int32(0)}

  def round_fn(state, key, data):
    t = state["t"]
    stats = make_stats(queries=times(t + 1, U_Q), bytes_up=BIG,
                       bytes_down=times(2 * t + step, U_D), participants=2 ** 31 - 1 - t,
                       empty_rounds=t % 2)
    return {"x": state["x"], "t": t + 1}, stats

  return FederatedAlgorithm(name="ledger", init=init, round=round_fn, solution=lambda s: s["x"])


def _expected(rounds, step=1):
  """Cumulative ledgers after ``rounds`` rounds, in Python ints."""
  ts = range(rounds)
  return {"queries": sum((t + 1) * U_Q for t in ts), "bytes_up": BIG * rounds,
          "bytes_down": sum((2 * t + step) * U_D for t in ts),
          "participants": sum(2 ** 31 - 1 - t for t in ts), "empty_rounds": sum(t % 2 for t in ts)}


@pytest.fixture(scope="module")
def quad():
  return make_task("quadratic", num_clients=2, dim=2, heterogeneity=1.0)


def test_make_stats_keeps_values_beyond_int32_exact():
  stats = jax.jit(lambda c: make_stats(c, BIG, times(c, U_D), 7, times(c, 0)))(jnp.int32(5))
  assert stats.exact("queries") == 5
  assert stats.exact("bytes_up") == BIG and type(stats.exact("bytes_up")) is int
  assert stats.exact("bytes_down") == 5 * U_D
  assert stats.exact("participants") == 7 and stats.exact("empty_rounds") == 0
  assert stats.totals() == {"queries": 5, "bytes_up": BIG, "bytes_down": 5 * U_D,
                            "participants": 7, "empty_rounds": 0}
  # In-range values keep the int32 field itself (unit 1), as before.
  small = make_stats(2 ** 31 - 1, 3, 4, 1)
  assert int(small.queries) == 2 ** 31 - 1 and small.units == (1, 1, 1, 1, 1)


def test_make_stats_rejects_bad_inputs():
  with pytest.raises(ValueError, match="bytes_up"):
    make_stats(0, -1, 0, 0)
  with pytest.raises(TypeError, match="static Python int"):
    times(1, 2.5)
  with pytest.raises(TypeError, match="static Python int"):
    times(1, jnp.int32(4))
  with pytest.raises(ValueError, match=">= 0"):
    times(1, -4)


def test_engine_totals_exact_beyond_int32_per_round_and_in_total(quad):
  # 5 rounds in chunks of 2, 2, 1: per-round values > 2**31, totals > 2**63.
  _, recs = simulate(_ledger_alg(quad), quad, 5, 2, jax.random.key(0))
  assert [r["round"] for r in recs] == [0, 2, 4, 5]
  for r in recs:
    want = _expected(r["round"])
    for name, value in want.items():
      assert r[name] == value and type(r[name]) is int, (r["round"], name)
  assert recs[-1]["bytes_down"] > 2 ** 63 and recs[1]["queries"] > 2 ** 32


def test_batched_totals_exact_beyond_int32(quad):
  # Two seeds x two traced values of ``step``: the members' totals differ only by step.
  recs, diverged = simulate_batched(lambda t, hp: _ledger_alg(t, hp["step"]), quad,
                                    [quad.data, quad.data], [0, 1], {},
                                    [{"step": 1}, {"step": 3}], 5, 2)
  assert not np.any(diverged)
  for k in range(2):
    for v, step in enumerate((1, 3)):
      assert [r["round"] for r in recs[k][v]] == [0, 2, 4, 5]
      for r in recs[k][v]:
        assert {n: r[n] for n in _expected(0)} == _expected(r["round"], step), (k, v, r["round"])


def _ffgb_task(n, m_points):
  """N clients, M points each, d = 1, C = 1 (the ``scaled`` oracle keeps x, v and the
  mask: M (d + C + 1) = 3 M parameters a learner)."""
  x = np.tile(np.linspace(0.0, 1.0, m_points, dtype=np.float32), (n, 1))[..., None]
  y = np.ones((n, m_points, 1), np.float32)
  return make_tabular_task(x, y)


@pytest.mark.parametrize("m", [2, 3])
def test_ffgb_bytes_per_round_exact(m):
  # specs/ffgb.md §1.4: each sampled client uploads K learners and downloads (N-1) K;
  # a learner is P = 3 M float32 parameters.
  n, m_points, k = 3, 4, 2
  task = _ffgb_task(n, m_points)
  alg = algorithms.build("ffgb", task, weak_learner="scaled", local_steps=k, clients_per_round=m)
  _, recs = simulate(alg, task, 2, 1, jax.random.key(0))
  p = 3 * m_points
  for r in recs:
    t = r["round"]
    assert r["bytes_up"] == t * m * k * p * 4
    assert r["bytes_down"] == t * (n - 1) * m * k * p * 4
    assert r["participants"] == t * m
    assert r["queries"] == t * m * m_points * k


def test_ffgb_bytes_beyond_int32_not_capped():
  # N = 3, m = 2, K = 512, M = 200,000: bytes_up 2 * 512 * 600,000 * 4 = 2,457,600,000 and
  # bytes_down twice that, both > 2**31 - 1 (previously saturated there). Shapes only.
  n, m, k, m_points = 3, 2, 512, 200_000
  task = _ffgb_task(n, m_points)
  alg = algorithms.build("ffgb", task, weak_learner="scaled", local_steps=k, clients_per_round=m)
  key = jax.random.key(0)
  state = jax.eval_shape(alg.init, *rng.init_keys(key))
  _, stats = jax.eval_shape(alg.round, state, key, task.data)
  p = 3 * m_points
  assert stats.unit("bytes_up") == m * k * p * 4 == 2_457_600_000
  assert stats.unit("bytes_down") == (n - 1) * m * k * p * 4 == 4_915_200_000
  assert stats.bytes_up.shape == stats.bytes_down.shape == ()
  assert stats.bytes_down.dtype == jnp.int32  # the count (1 when the learners are sent)


def test_round_stats_without_units_count_in_units_of_one():
  """RoundStats built directly (no make_stats) has unit 1 for every ledger: totals are the counts."""
  from fedsim.core.types import LEDGERS, RoundStats
  counts = {name: np.int32(i + 2) for i, name in enumerate(LEDGERS)}
  stats = RoundStats(**counts)
  assert stats.totals() == {name: int(c) for name, c in counts.items()}
  assert all(stats.unit(name) == 1 for name in LEDGERS)
