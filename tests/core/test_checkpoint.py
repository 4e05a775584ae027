"""Checkpoint/resume (issue 8): an interrupted and resumed run equals an uninterrupted one bitwise."""

import jax
import numpy as np
import pytest

from fedsim import algorithms
from fedsim.core import checkpoint, simulate


def _strip(recs):
  return [{k: v for k, v in r.items() if k != "wall_time_s"} for r in recs]


def _leaves(state):
  return [np.asarray(jax.random.key_data(x) if checkpoint._is_key(x) else x)
          for x in jax.tree_util.tree_leaves(state)]


@pytest.mark.parametrize("name, hp", [
    ("fedavg", dict(clients_per_round=3, lr=0.05)),
    ("fedzo", dict(clients_per_round=3, lr=0.01, local_steps=2)),
])
def test_interrupt_and_resume_is_bitwise_identical(digits10, tmp_path, name, hp):
  alg = algorithms.build(name, digits10, **hp)
  key = jax.random.key(3)
  full_state, full = simulate(alg, digits10, 8, 2, key)
  # "Interrupted" after round 4: checkpoints every 3 rounds land at chunk ends 4 (>= 3) only.
  ckpt = str(tmp_path / "ckpt")
  _, first = simulate(alg, digits10, 5, 2, key, checkpoint_dir=ckpt, checkpoint_every=3)
  assert checkpoint.latest_round(ckpt) == 4 and [r["round"] for r in first] == [0, 2, 4, 5]
  state, rest = simulate(alg, digits10, 8, 2, key, checkpoint_dir=ckpt, resume=True)
  assert [r["round"] for r in rest] == [6, 8]
  assert _strip(first[:3] + rest) == _strip(full)  # metrics and exact ledgers, bitwise
  for a, b in zip(_leaves(state), _leaves(full_state)):
    np.testing.assert_array_equal(a, b)
  assert jax.tree_util.tree_structure(state) == jax.tree_util.tree_structure(full_state)


def test_saves_at_first_chunk_end_after_each_multiple_and_keeps_two(digits10, tmp_path):
  alg = algorithms.build("fedavg", digits10, clients_per_round=2)
  ckpt = tmp_path / "c"
  # eval_every 3: chunk ends 3, 6, 9, 12, 13; K = 4 -> saves at 6 (>= 4), 9 (>= 8), 12 (>= 12).
  simulate(alg, digits10, 13, 3, jax.random.key(0), checkpoint_dir=str(ckpt), checkpoint_every=4)
  with checkpoint.manager(str(ckpt)) as m:
    assert sorted(m.all_steps()) == [9, 12]
    meta = m.restore(12, args=checkpoint.ocp.args.Composite(
        meta=checkpoint.ocp.args.JsonRestore()))["meta"]
  assert meta["round"] == 12 and meta["totals"]["participants"] == 24
  assert meta["algorithm"] == "fedavg"


def test_typed_keys_and_big_ledgers_round_trip(tmp_path):
  key = jax.random.key(7)
  state = {"keys": jax.random.split(key, 3), "x": jax.numpy.arange(5.0), "n": jax.numpy.int32(4)}
  totals = {"queries": 3 * 2 ** 33 + 1}  # beyond int32 and float64-exact range edge
  with checkpoint.manager(str(tmp_path)) as m:
    checkpoint.save(m, state, 7, totals, 1.5, "x")
  with checkpoint.manager(str(tmp_path)) as m:
    back, meta = checkpoint.restore(m, jax.eval_shape(lambda: state), algorithm="x")
  assert meta == {"round": 7, "totals": totals, "wall_time_s": 1.5, "algorithm": "x",
                  "key_impls": {"0": "threefry2x32"}, "empty": []}
  assert jax.dtypes.issubdtype(back["keys"].dtype, jax.dtypes.prng_key)
  np.testing.assert_array_equal(jax.random.key_data(back["keys"]), jax.random.key_data(state["keys"]))
  # The restored keys draw the same numbers.
  np.testing.assert_array_equal(jax.random.normal(back["keys"][1], (4,)),
                                jax.random.normal(state["keys"][1], (4,)))
  np.testing.assert_array_equal(back["x"], state["x"])
  assert back["n"].dtype == np.int32 and int(back["n"]) == 4


def test_resume_without_checkpoint_starts_from_zero_and_mismatch_is_refused(digits10, tmp_path):
  alg = algorithms.build("fedavg", digits10, clients_per_round=2)
  ckpt = str(tmp_path / "none")
  _, recs = simulate(alg, digits10, 2, 2, jax.random.key(0), checkpoint_dir=ckpt, resume=True)
  assert [r["round"] for r in recs] == [0, 2]
  simulate(alg, digits10, 2, 2, jax.random.key(0), checkpoint_dir=ckpt, checkpoint_every=2)
  other = algorithms.build("fedzo", digits10, clients_per_round=2)
  with pytest.raises(ValueError, match="fedavg"):
    simulate(other, digits10, 4, 2, jax.random.key(0), checkpoint_dir=ckpt, resume=True)
  with pytest.raises(ValueError, match="checkpoint_dir"):
    simulate(alg, digits10, 2, 2, jax.random.key(0), checkpoint_every=2)


def test_zero_size_leaves_round_trip(tmp_path):
  """Orbax refuses zero-size arrays; they are left out and rebuilt (FZooS's default (N, 0) fit cache)."""
  key = jax.random.key(7)
  state = {"a": jax.numpy.zeros((3, 0), jax.numpy.int32), "x": jax.numpy.arange(5.0),
           "k": jax.random.split(key, 0), "b": jax.numpy.ones((2, 0, 4))}
  with checkpoint.manager(str(tmp_path / "s")) as m:
    checkpoint.save(m, state, 3, {}, 0.0, "x")
  with checkpoint.manager(str(tmp_path / "s")) as m:
    back, meta = checkpoint.restore(m, jax.eval_shape(lambda: state), algorithm="x")
  assert meta["empty"] == [0, 1, 2]     # leaves in key order: a, b, k (x is stored)
  assert jax.tree_util.tree_structure(back) == jax.tree_util.tree_structure(state)
  for a, b in zip(_leaves(back), _leaves(state)):
    assert a.shape == b.shape and a.dtype == b.dtype
    np.testing.assert_array_equal(a, b)
  assert jax.dtypes.issubdtype(back["k"].dtype, jax.dtypes.prng_key)
  # FZooS's default (N, 0) fit cache through simulate: tests/core/test_cut_invariance.py.
