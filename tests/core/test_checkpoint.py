"""Checkpoint/resume (issue 8): an interrupted and resumed run equals an uninterrupted one bitwise."""

import jax
import numpy as np
import pytest

from fedsim import algorithms
from fedsim.core import checkpoint, rng, simulate


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
  assert sorted(int(p.name) for p in ckpt.iterdir()) == [9, 12]
  m = checkpoint.manager(str(ckpt))
  _, meta = checkpoint.restore(m, jax.eval_shape(alg.init, *rng.init_keys(jax.random.key(0))))
  checkpoint.close(m)
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


def _stall_finalize(monkeypatch, round_, started, release):
  """Holds orbax's rename of round ``round_``'s temporary folder (the end of a save, in orbax's
  background thread) until ``release`` is set; sets ``started`` when it is reached."""
  from orbax.checkpoint._src.path import atomicity
  real = atomicity.AtomicRenameTemporaryPath.finalize

  async def finalize(self, *args, **kwargs):
    if self.get().name.startswith(f"{round_}."):
      started.set()
      release.wait(30)
    return await real(self, *args, **kwargs)
  monkeypatch.setattr(atomicity.AtomicRenameTemporaryPath, "finalize", finalize)


def test_a_save_returns_while_orbax_writes_it_and_close_waits(tmp_path, monkeypatch):
  """Off the critical path (issue 36): save copies the state and returns; orbax writes it in the background."""
  import threading
  started, release = threading.Event(), threading.Event()
  _stall_finalize(monkeypatch, 2, started, release)
  state = {"x": jax.numpy.arange(3.0)}
  m = checkpoint.manager(str(tmp_path))
  checkpoint.save(m, state, 2, {"queries": 1}, 0.5)
  assert started.wait(30) and checkpoint.latest_round(str(tmp_path)) is None  # returned, save in flight
  assert [p.name.split(".")[1] for p in tmp_path.iterdir()] == ["orbax-checkpoint-tmp"]
  release.set()
  checkpoint.close(m)                                  # waits for it
  assert checkpoint.latest_round(str(tmp_path)) == 2 and [p.name for p in tmp_path.iterdir()] == ["2"]
  m = checkpoint.manager(str(tmp_path))
  back, meta = checkpoint.restore(m, jax.eval_shape(lambda: state))
  checkpoint.close(m)
  np.testing.assert_array_equal(back["x"], state["x"])
  assert meta["round"] == 2


def test_a_write_error_is_raised_by_close(tmp_path, monkeypatch):
  from orbax.checkpoint._src.path import atomicity

  async def full(self, *args, **kwargs):
    raise OSError(28, "No space left on device")
  monkeypatch.setattr(atomicity.AtomicRenameTemporaryPath, "finalize", full)
  m = checkpoint.manager(str(tmp_path))
  checkpoint.save(m, {"x": jax.numpy.zeros(2)}, 1, {}, 0.0)
  with pytest.raises(Exception, match="No space"):
    checkpoint.close(m)
  assert checkpoint.latest_round(str(tmp_path)) is None


# Runs experiments.run with orbax's rename of round STALL's temporary folder held forever (a save in flight).
_STALLED_RUN = """
import runpy, sys, threading
from orbax.checkpoint._src.path import atomicity
real, stall = atomicity.AtomicRenameTemporaryPath.finalize, sys.argv[1] + "."
async def finalize(self, *args, **kwargs):
  if self.get().name.startswith(stall):
    threading.Event().wait()
  return await real(self, *args, **kwargs)
atomicity.AtomicRenameTemporaryPath.finalize = finalize
sys.argv = ["experiments.run", *sys.argv[2:]]
runpy.run_module("experiments.run", run_name="__main__", alter_sys=True)
"""


@pytest.mark.slow
def test_a_kill_while_a_save_is_in_flight_resumes_bitwise_without_warnings(tmp_path):
  """SIGKILL the run while round 4's checkpoint is being written (orbax's final rename held open; the
  run goes on to round 6 meanwhile): the folder keeps round 2's checkpoint and orbax's temporary
  folder; --resume continues from round 2, removes it, prints no warning, and its metrics equal an
  uninterrupted run's."""
  import json
  import os
  import subprocess
  import sys
  import time
  repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  flags = ["--task=ridge", "--num_clients=3", "--clients_per_round=3", "--algorithm=gd", "--eval_every=2",
           "--rounds=8", "--checkpoint_every=2"]
  args = [sys.executable, "-m", "experiments.run", *flags]
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  ref = subprocess.run([*args, f"--output_dir={tmp_path / 'ref'}"], cwd=repo, env=env, capture_output=True,
                       text=True, timeout=300)
  assert ref.returncode == 0, ref.stderr[-2000:]
  out = tmp_path / "cut"
  proc = subprocess.Popen([sys.executable, "-c", _STALLED_RUN, "4", *flags, f"--output_dir={out}"], cwd=repo, env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  metrics, ckpts = out / "gd" / "metrics.jsonl", out / "gd" / "checkpoints"
  deadline = time.time() + 300

  def in_flight():   # round 6 measured and round 4's temporary folder written (orbax makes it in a thread)
    return (metrics.exists() and '"round": 6' in metrics.read_text() and ckpts.exists()
            and any(p.name.startswith("4.") for p in ckpts.iterdir()))
  while time.time() < deadline and not in_flight():
    time.sleep(0.05)
  proc.kill()
  proc.wait()
  assert '"round": 6' in metrics.read_text()                     # the run went on during the save
  assert checkpoint.latest_round(str(ckpts)) == 2
  assert sorted(p.name.split(".")[0] for p in ckpts.iterdir()) == ["2", "4"]
  assert len(list(ckpts.glob("4.orbax-checkpoint-tmp*"))) == 1    # the save in flight
  again = subprocess.run([*args, f"--output_dir={out}", "--resume"], cwd=repo, env=env, capture_output=True,
                         text=True, timeout=300)
  assert again.returncode == 0, again.stderr[-2000:]
  assert "resuming from round 2" in again.stdout and not again.stderr.strip(), again.stderr
  assert not list(ckpts.glob("*tmp*")) and checkpoint.latest_round(str(ckpts)) == 8
  def strip(path):
    return [{k: v for k, v in json.loads(line).items() if k != "wall_time_s"} for line in path.read_text().splitlines()]
  assert strip(metrics) == strip(tmp_path / "ref" / "gd" / "metrics.jsonl")


def test_checkpoints_written_by_orbax_before_issue_36_still_restore(digits10, tmp_path):
  import orbax.checkpoint as ocp
  alg = algorithms.build("fedavg", digits10, clients_per_round=2)
  key = jax.random.key(1)
  state, _ = simulate(alg, digits10, 4, 2, key)
  leaves = jax.tree_util.tree_leaves(state)
  raw = [jax.random.key_data(x) if checkpoint._is_key(x) else x for x in leaves]
  meta = {"round": 4, "totals": {"queries": 0, "bytes_up": 0, "bytes_down": 0, "participants": 8,
                                 "empty_rounds": 0}, "wall_time_s": 1.0, "algorithm": "fedavg",
          "key_impls": {str(i): str(jax.random.key_impl(x)) for i, x in enumerate(leaves) if checkpoint._is_key(x)}}
  opts = ocp.CheckpointManagerOptions(max_to_keep=2, create=True, enable_async_checkpointing=False)
  with ocp.CheckpointManager(str(tmp_path), options=opts, item_names=("state", "meta")) as m:  # the old writer
    m.save(4, args=ocp.args.Composite(state=ocp.args.StandardSave(raw), meta=ocp.args.JsonSave(meta)))
  assert checkpoint.latest_round(str(tmp_path)) == 4
  with checkpoint.manager(str(tmp_path)) as m:
    back, got = checkpoint.restore(m, jax.eval_shape(alg.init, *rng.init_keys(key)), algorithm="fedavg")
  assert got == meta
  for a, b in zip(_leaves(back), _leaves(state)):
    np.testing.assert_array_equal(a, b)


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


def test_a_checkpoint_of_another_shape_or_dtype_is_refused_each_alone(tmp_path):
  """restore refuses a stored leaf whose shape differs (same dtype) and one whose dtype differs (same
  shape): either mismatch alone is enough (issue 46 mutation sample: 'or' -> 'and' survived)."""
  state = {"x": jax.numpy.arange(5.0), "n": jax.numpy.int32(4)}
  with checkpoint.manager(str(tmp_path)) as m:
    checkpoint.save(m, state, 2, {}, 0.0, "x")
  for other in ({"x": jax.numpy.arange(6.0), "n": jax.numpy.int32(4)},            # shape only
                {"x": jax.numpy.arange(5, dtype=jax.numpy.int32), "n": jax.numpy.int32(4)}):  # dtype only
    with checkpoint.manager(str(tmp_path)) as m, pytest.raises(ValueError, match="does not match"):
      checkpoint.restore(m, jax.eval_shape(lambda o=other: o), algorithm="x")


def test_latest_round_of_no_folder_is_none(tmp_path):
  """latest_round: None for no directory (None or ''), for a path that does not exist and for an empty
  folder; the round for a folder with a checkpoint."""
  assert checkpoint.latest_round(None) is None and checkpoint.latest_round("") is None
  assert checkpoint.latest_round(str(tmp_path / "missing")) is None
  assert checkpoint.latest_round(str(tmp_path)) is None
  with checkpoint.manager(str(tmp_path / "c")) as m:
    checkpoint.save(m, {"x": jax.numpy.ones(2)}, 6, {}, 0.0, "x")
  assert checkpoint.latest_round(str(tmp_path / "c")) == 6
