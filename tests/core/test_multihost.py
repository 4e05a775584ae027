"""Multi-host (issue 8): two CPU processes on localhost run one simulation together
(jax.distributed, gloo collectives), checkpoint and resume it, and agree with an
uninterrupted single-process run (measured: bitwise; asserted <= 1e-6 relative)."""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

from fedsim.core import checkpoint
from tests.core import test_cut_invariance as ci

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ARGS = ["--algorithm=fedavg,fedzo", "--num_clients=10", "--clients_per_round=4", "--eval_every=2",
        "--lr=0.05"]


def _free_port():
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


def _env(devices):
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
  return env


def _metrics(path):
  with open(path) as f:
    return [{k: v for k, v in json.loads(line).items() if k != "wall_time_s"} for line in f]


def _two_processes(out, *extra):
  port = _free_port()
  procs = [subprocess.Popen(
      [sys.executable, "-m", "experiments.run", *ARGS, *extra, f"--output_dir={out}",
       f"--coordinator_address=localhost:{port}", "--num_processes=2", f"--process_id={i}"],
      cwd=REPO, env=_env(2), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
      for i in range(2)]
  outs = [p.communicate(timeout=600) for p in procs]
  for p, (_, err) in zip(procs, outs):
    assert p.returncode == 0, err[-3000:]
  return outs


@pytest.mark.slow
def test_two_processes_agree_with_one_and_resume(tmp_path):
  # 2 processes x 2 fake devices, N = 10 padded to 12; "interrupted" after round 5
  # with a checkpoint at round 4 (both processes save, process 0 writes), then resumed to round 6.
  out = tmp_path / "multi"
  first = _two_processes(out, "--rounds=5", "--checkpoint_every=4")
  assert "[fedavg] round 4/5" in first[0][0] and "round" not in first[1][0]  # process 0 reports
  assert [r["round"] for r in _metrics(out / "fedzo" / "metrics.jsonl")] == [0, 2, 4, 5]
  cfg = json.loads((out / "config.json").read_text())
  assert cfg["processes"] == 2 and cfg["devices"] == 4 and cfg["task"]["padded_clients"] == 12
  second = _two_processes(out, "--rounds=6", "--checkpoint_every=4", "--resume")
  assert "[fedzo] resuming from round 4" in second[0][0]
  single = subprocess.run([sys.executable, "-m", "experiments.run", *ARGS, "--rounds=6",
                           f"--output_dir={tmp_path / 'single'}"], cwd=REPO, env=_env(1),
                          capture_output=True, text=True, timeout=600)
  assert single.returncode == 0, single.stderr[-3000:]
  for alg in ("fedavg", "fedzo"):
    multi = _metrics(out / alg / "metrics.jsonl")
    ref = _metrics(tmp_path / "single" / alg / "metrics.jsonl")
    assert [r["round"] for r in multi] == [r["round"] for r in ref] == [0, 2, 4, 6]
    for rm, rs in zip(multi, ref):
      assert rm.keys() == rs.keys()
      for k, v in rs.items():
        np.testing.assert_allclose(rm[k], v, rtol=1e-6, atol=1e-7, err_msg=f"{alg} {k}")


# One process of a run of tests/core/test_cut_invariance.py's small cases over a 2-device mesh, saving
# checkpoints under argv[1]: with argv [dir, port, process_id] it is one of 2 jax.distributed processes
# (1 device each), with [dir] one process with 2 devices. Prints, as JSON, each case's final state leaves
# and records (process 0).
PLACEMENT_SCRIPT = """
import hashlib, json, sys
import numpy as np
from fedsim.core import distributed
if len(sys.argv) > 2:
  distributed.initialize(f"localhost:{sys.argv[2]}", 2, int(sys.argv[3]))
import jax
from fedsim import algorithms
from fedsim.core import simulate
from fedsim.core.sharding import client_mesh, shard_task
from tests.core import test_cut_invariance as ci
assert jax.device_count() == 2, jax.devices()
out = {}
for label in ("fedavg", "fedzo", "fzoos"):
  name, hp, base = ci.make_case(label)
  task = shard_task(base, client_mesh(2))
  state, records = simulate(algorithms.build(name, task, **hp), task, ci.T, 5, ci.KEY,
                            checkpoint_dir=f"{sys.argv[1]}/{label}", checkpoint_every=5)
  leaves = distributed.fetch([jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)
                              else x for x in jax.tree_util.tree_leaves(state)])
  out[label] = {"state": [hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest() for a in leaves],
                "records": [ci._strip(r) for r in records]}
if distributed.is_main():
  print(json.dumps(out))
"""


@pytest.mark.slow
def test_two_processes_give_the_bits_of_one_process_with_two_devices(tmp_path):
  """FedAvg, FedZO and FZooS (issue 46 item 4) on 2 jax.distributed processes with one CPU device each
  against one process with 2 devices, the same 2-device mesh, both checkpointing: the final states (every
  leaf's bytes) and every record (but wall time) are identical, and the 2-process checkpoints restore."""
  port = _free_port()
  procs = [subprocess.Popen([sys.executable, "-c", PLACEMENT_SCRIPT, str(tmp_path / "multi"), str(port), str(i)],
                            cwd=REPO, env=_env(1),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
  outs = [p.communicate(timeout=900) for p in procs]
  for p, (_, err) in zip(procs, outs):
    assert p.returncode == 0, err[-3000:]
  single = subprocess.run([sys.executable, "-c", PLACEMENT_SCRIPT, str(tmp_path / "one")], cwd=REPO, env=_env(2),
                          capture_output=True, text=True, timeout=900)
  assert single.returncode == 0, single.stderr[-3000:]
  multi, one = (json.loads(o.strip().splitlines()[-1]) for o in (outs[0][0], single.stdout))
  assert "{" not in outs[1][0]   # process 1 prints no result (gloo prints its connection line)
  for label in one:
    assert multi[label]["records"] == one[label]["records"], label
    assert multi[label]["state"] == one[label]["state"], label
    assert checkpoint.latest_round(str(tmp_path / "multi" / label)) == ci.T
