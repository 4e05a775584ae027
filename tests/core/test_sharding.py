"""Sharding with padding (issue 8): N = 10 clients on 1 device and on 8 fake devices agree."""

import json
import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

from fedsim.core import sharding
from fedsim.core.sharding import client_mesh, shard_task, unpad

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_padded_count():
  assert [sharding.padded_count(n, 8) for n in (1, 8, 9, 10, 16, 17)] == [8, 8, 16, 16, 16, 24]
  assert sharding.padded_count(10, 1) == 10


def test_pad_and_unpad_round_trip(digits10):
  data = sharding.pad_clients(digits10.client_data, 16)
  assert data["x"].shape[0] == 16 and not data["mask"][10:].any() and not data["x"][10:].any()
  full = dict(digits10.data, clients=data)
  back = jax.jit(unpad)(full)
  for a, b in zip(jax.tree_util.tree_leaves(back), jax.tree_util.tree_leaves(digits10.data)):
    np.testing.assert_array_equal(a, b)
  assert unpad(digits10.data) is digits10.data  # nothing to cut: same object
  one = shard_task(digits10, client_mesh(1))  # one device: no padding
  assert one.client_data["x"].shape[0] == 10 and "padded_clients" not in one.info


SCRIPT = textwrap.dedent("""
    import json, jax
    from fedsim import algorithms
    from fedsim.core import simulate
    from fedsim.core.sharding import client_mesh, shard_task
    from fedsim.tasks.functional import cache_view
    from tests.conftest import digits_task
    assert jax.device_count() == 8, jax.devices()
    base = digits_task(10)
    runs = (("fedavg", dict(clients_per_round=4, lr=0.05)),
            ("fedavg_full", dict(clients_per_round=10, weighting="size")),
            ("fedzo", dict(clients_per_round=4, lr=0.01, local_steps=2)),
            ("hiso", dict(clients_per_round=4, local_steps=2)),
            ("ffgb", dict(clients_per_round=3, local_steps=2, weak_learner="scaled")))
    out = {}
    for ndev in (1, 8):
      task = shard_task(base, client_mesh(ndev))
      x = task.client_data["x"]
      out[f"shape{ndev}"] = [x.shape[0], len(x.sharding.device_set), task.num_clients,
                             int(task.client_data["mask"][10:].sum())]
      res = {}
      for label, hp in runs:
        name = label.split("_")[0]
        t = cache_view(task) if name == "ffgb" else task
        alg = algorithms.build(name, t, **hp)
        _, recs = simulate(alg, t, 4, 2, jax.random.key(0))
        res[label] = [{k: v for k, v in r.items() if k != "wall_time_s"} for r in recs]
      out[ndev] = res
    print(json.dumps(out))
""")


@pytest.mark.slow
def test_ten_clients_one_vs_eight_devices_padded_same_metrics():
  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu")
  proc = subprocess.run([sys.executable, "-c", SCRIPT], cwd=REPO, env=env, capture_output=True,
                        text=True, timeout=900)
  assert proc.returncode == 0, proc.stderr[-3000:]
  out = json.loads(proc.stdout.strip().splitlines()[-1])
  assert out["shape1"] == [10, 1, 10, 0]
  assert out["shape8"] == [16, 8, 10, 0]  # padded to 16 rows over 8 devices, N stays 10
  exact = 0
  for label, recs in out["1"].items():
    for r1, r8 in zip(recs, out["8"][label]):
      assert r1.keys() == r8.keys()
      for k, v in r1.items():
        if k in ("round", "queries", "bytes_up", "bytes_down", "participants", "empty_rounds"):
          assert r8[k] == v, (label, k)  # ledgers: exact integers, counting real clients only
        else:
          np.testing.assert_allclose(r8[k], v, rtol=1e-6, atol=1e-7, err_msg=f"{label} {k}")
        exact += r8[k] == v
  print(f"{exact} of {sum(len(r) * len(r[0]) for r in out['1'].values())} values bitwise equal")


def test_shard_clients_splits_every_leaf_with_the_client_axis_and_replicates_the_rest():
  """shard_clients: a leaf whose leading axis is N (1-D included) is split along ``clients`` when N is a
  multiple of the device count; scalars and other leading sizes are replicated (one device here, so the
  placement shows only in the sharding's spec)."""
  mesh = client_mesh(1)
  out = sharding.shard_clients({"sizes": np.ones(4), "x": np.ones((4, 3)), "s": np.float32(1.0),
                                "other": np.ones(5)}, mesh, 4)
  assert out["sizes"].sharding.spec == out["x"].sharding.spec == jax.sharding.PartitionSpec("clients")
  assert out["s"].sharding.spec == out["other"].sharding.spec == jax.sharding.PartitionSpec()


def test_replicated_on_is_the_identity_off_a_multi_device_mesh():
  """replicated_on: the identity (the same objects) for a tree on no mesh and on a 1-device mesh; on
  several devices it constrains to replicated (the FZooS rows of test_cut_invariance.py's device test)."""
  tree = {"a": np.ones(3)}
  assert sharding.replicated_on(tree)(tree) is tree
  placed = sharding.shard_clients(tree, client_mesh(1), 3)
  assert sharding.replicated_on(placed)(placed) is placed
