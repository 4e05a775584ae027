"""fedsim.core.distributed in one process: what a single-process run must never do."""

import jax
import numpy as np
import pytest

from fedsim.core import distributed


def test_one_process_does_not_start_the_distributed_runtime(monkeypatch):
  """initialize(..., num_processes=1) is a plain run: jax.distributed is not touched and the answer is
  False; P = 2 calls it with the coordinator, the count, the id and the heartbeat timeout."""
  calls = []
  monkeypatch.setattr(jax.distributed, "initialize", lambda **kw: calls.append(kw))
  monkeypatch.setattr(jax.config, "update", lambda *a: None)   # keep this process's CPU collectives
  assert distributed.initialize(None, 1, 0) is False and calls == []
  assert distributed.initialize("localhost:1", 2, 1, heartbeat_timeout_s=7) is True
  assert calls == [dict(coordinator_address="localhost:1", num_processes=2, process_id=1,
                        heartbeat_timeout_seconds=7)]


def test_fetch_in_one_process_is_device_get():
  tree = {"a": jax.numpy.arange(3.0), "b": (jax.numpy.int32(2),)}
  out = distributed.fetch(tree)
  assert isinstance(out["a"], np.ndarray) and out["b"][0] == 2
  np.testing.assert_array_equal(out["a"], [0.0, 1.0, 2.0])
  assert distributed.is_main()


@pytest.mark.parametrize("env,want", [(None, distributed.HEARTBEAT_TIMEOUT_S), ("11", 11)])
def test_the_heartbeat_timeout_comes_from_the_environment(monkeypatch, env, want):
  calls = []
  monkeypatch.setattr(jax.distributed, "initialize", lambda **kw: calls.append(kw))
  monkeypatch.setattr(jax.config, "update", lambda *a: None)
  if env is None:
    monkeypatch.delenv("FEDSIM_HEARTBEAT_TIMEOUT_S", raising=False)
  else:
    monkeypatch.setenv("FEDSIM_HEARTBEAT_TIMEOUT_S", env)
  distributed.initialize("localhost:1", 2, 0)
  assert calls[0]["heartbeat_timeout_seconds"] == want
