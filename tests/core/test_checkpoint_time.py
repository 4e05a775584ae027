"""Checkpoints by time (issue 48 item 7): ``checkpoint_every = -1`` saves every ``checkpoint_interval_s``
seconds at chunk ends, by orbax's ContinuousCheckpointingPolicy counted from the run's start."""

import datetime

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

import fedsim
from fedsim import algorithms, run_folder  # noqa: F401 (fedsim.run_folder below)
from fedsim.config import FieldError
from fedsim.core import checkpoint, simulate

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)


def _at(seconds: float, step: int = 0):
  return checkpoint._Anchor(step, T0 + datetime.timedelta(seconds=seconds))


def _decide(policy, now_s: float, previous=(), saving: bool = False) -> bool:
  ctx = ocp.checkpoint_managers.DecisionContext(
      is_saving_in_progress=saving, reached_preemption=False,
      multiprocessing_options=ocp.options.MultiprocessingOptions())
  return policy.should_save(_at(now_s, 99), list(previous), context=ctx)


def test_the_interval_counts_from_the_start_and_from_the_newest_save():
  p = checkpoint.SinceStartPolicy(minimum_interval_secs=10.0, start=T0)
  assert not _decide(p, 9.9)              # orbax's own policy saves here: no checkpoint yet
  assert _decide(p, 10.0)
  assert not _decide(p, 21.9, [_at(12, 4)]) and _decide(p, 22.0, [_at(12, 4)])
  assert not _decide(p, 30.0, [_at(12, 4)], saving=True)   # none while a save is being written
  # A resumed run: the newest checkpoint is older than this run's start (and orbax may list
  # datetime.min, naive): the interval counts from the start.
  assert not _decide(p, 5.0, [_at(-100, 4)]) and _decide(p, 10.0, [_at(-100, 4)])
  assert not _decide(p, 5.0, [checkpoint._Anchor(4, datetime.datetime.min)])


def _strip(recs):
  return [{k: v for k, v in r.items() if k != "wall_time_s"} for r in recs]


def _leaves(state):
  return [np.asarray(jax.random.key_data(x) if checkpoint._is_key(x) else x)
          for x in jax.tree_util.tree_leaves(state)]


class _Stop(Exception):
  pass


def test_a_run_stopped_after_a_time_cadence_save_resumes_bitwise(digits10, tmp_path, monkeypatch):
  alg = algorithms.build("fedavg", digits10, clients_per_round=3, lr=0.05)
  key = jax.random.key(5)
  full_state, full = simulate(alg, digits10, 8, 2, key)
  due = checkpoint.due

  def due_after_the_last_write(mngr, r):   # no save in flight at the decision: every chunk end is due
    mngr.wait_until_finished()
    return due(mngr, r)
  monkeypatch.setattr(checkpoint, "due", due_after_the_last_write)
  ckpt = str(tmp_path / "ckpt")
  first = []

  def stop_at_6(rec):   # a kill after round 6's chunk, before its save
    if rec["round"] == 6:
      raise _Stop
    first.append(rec)
  with pytest.raises(_Stop):
    simulate(alg, digits10, 8, 2, key, on_eval=stop_at_6, checkpoint_dir=ckpt, checkpoint_every=-1,
             checkpoint_interval_s=1e-6)
  assert sorted(int(p.name) for p in (tmp_path / "ckpt").iterdir()) == [2, 4]   # every chunk end, last 2 kept
  state, rest = simulate(alg, digits10, 8, 2, key, checkpoint_dir=ckpt, resume=True)
  assert [r["round"] for r in rest] == [6, 8]
  assert _strip(first + rest) == _strip(full)
  for a, b in zip(_leaves(state), _leaves(full_state)):
    np.testing.assert_array_equal(a, b)


def test_a_run_shorter_than_the_interval_saves_nothing(digits10, tmp_path):
  alg = algorithms.build("fedavg", digits10, clients_per_round=2)
  ckpt = tmp_path / "c"
  simulate(alg, digits10, 6, 2, jax.random.key(0), checkpoint_dir=str(ckpt), checkpoint_every=-1,
           checkpoint_interval_s=3600.0)
  assert checkpoint.latest_round(str(ckpt)) is None


def test_simulate_refuses_bad_time_cadence_settings(digits10, tmp_path):
  alg = algorithms.build("fedavg", digits10, clients_per_round=2)
  with pytest.raises(ValueError, match="checkpoint_dir"):
    simulate(alg, digits10, 2, 2, jax.random.key(0), checkpoint_every=-1)
  with pytest.raises(ValueError, match="checkpoint_every must be >= -1"):
    simulate(alg, digits10, 2, 2, jax.random.key(0), checkpoint_dir=str(tmp_path), checkpoint_every=-2)
  for bad in (0.0, -1.0, float("inf")):
    with pytest.raises(ValueError, match="checkpoint_interval_s"):
      simulate(alg, digits10, 2, 2, jax.random.key(0), checkpoint_dir=str(tmp_path), checkpoint_every=-1,
               checkpoint_interval_s=bad)


def test_the_config_field_and_its_default():
  assert fedsim.ExperimentConfig().checkpoint_interval_s == checkpoint.DEFAULT_INTERVAL_S
  assert "checkpoint_interval_s" in fedsim.run_folder.RECORD_EXEMPT   # a resume may change it
  for name, bad in (("checkpoint_interval_s", 0.0), ("checkpoint_interval_s", float("inf")),
                    ("checkpoint_every", -2)):
    with pytest.raises(FieldError, match=name):
      fedsim.ExperimentConfig(**{name: bad})


def test_run_saves_by_time_and_needs_an_output_directory(tmp_path):
  cfg = dict(algorithms=("fedavg",), rounds=4, eval_every=2, num_clients=10, clients_per_round=2, progress=False,
             checkpoint_every=-1, checkpoint_interval_s=1e-6)
  with pytest.raises(FieldError, match="output_dir"):
    fedsim.run(fedsim.ExperimentConfig(**cfg))
  fedsim.run(fedsim.ExperimentConfig(**cfg), output_dir=str(tmp_path))
  # Round 2's save is due (nothing in flight at the first chunk end); round 4's if round 2's was written.
  assert checkpoint.latest_round(str(tmp_path / "fedavg" / "checkpoints")) in (2, 4)
