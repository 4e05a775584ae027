"""Cut-invariance (issue 35 item 3): a run's numbers do not depend on how it is cut into pieces.

For each algorithm family on a small task, the final state (every leaf, PRNG keys as
their raw data) and every recorded metric at the rounds both runs record (all keys
but ``wall_time_s``) are bitwise equal across:

* ``eval_every`` 1 vs 5 vs 20 (chunk lengths 1, 5 and one chunk of all T = 10 rounds);
* ``checkpoint_every`` 0 vs 5 with a kill between the checkpoint and the end (an
  exception out of ``on_eval`` at round 7, the state discarded) and a
  ``resume=True`` run from the checkpoint directory;
* ``client_block`` 0 vs 2 (5 sampled clients: blocks of 2 with one padded row) for
  the families that have the setting (FedAvg and its server optimizers, FedZO);
  the others never block their clients (``fedsim.core.client_map``);
* 1 vs 8 host devices (``shard_task`` over ``client_mesh``, 6 clients padded to 8
  rows), in a subprocess with ``--xla_force_host_platform_device_count=8``.

Exceptions, all on 1 vs 8 devices: ``TOLERANCE`` (a tolerance and its reason) and
``NOT_INVARIANT_ON_8_DEVICES`` (a known difference, reported; the test fails when it
disappears so the entry is removed). FFGB's task puts no point at two clients: with
shared points (ties) its 1- and 8-device runs differ from round 1 on.

The quadratic task is deterministic (no sampled batches), so FedAvg's client keys are
unused there; FedZO's directions exercise the client keys under ``client_block``.

Planted-bug checks (issue 35, done by hand, not committed): folding the chunk length
into the rounds key fails "eval_every 1 vs 5"; adding 1 to the saved ``queries`` total
or 1e-6 to a saved float leaf fails "checkpoint_every 0 vs 5"; folding the block index
into the client keys (``client_map``) fails "client_block 0 vs 2" (FedZO).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

from fedsim import algorithms
from fedsim.core import checkpoint, simulate

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
T = 10            # rounds of every run
KILL_AT = 7       # the killed run stops after this round's record; its checkpoint is round 5
KEY = jax.random.key(11)


def make_case(label: str):
  """(algorithm, task) of one family on its small task; the same function builds the 8-device runs."""
  from fedsim.tasks import make_task
  name, hp, task_kind = CASES[label]
  if task_kind == "quadratic":
    task = make_task("quadratic", num_clients=6, dim=8, heterogeneity=1.0, seed=0)
  elif task_kind == "smooth_erm":
    from fedsim.tasks.logistic_soft import make_smooth_erm_task
    task = make_smooth_erm_task("logistic_soft", num_clients=6, samples_per_client=8, num_features=2,
                                server_samples=4, max_rank=4, mu=0.1, heterogeneity=0.5, seed=0)
  elif task_kind == "tabular":
    from fedsim.tasks.functional import make_tabular_task
    grid = np.linspace(0.0, 1.0, 6)
    x = np.stack([grid + 0.0137 * i for i in range(6)])[..., None]   # no point shared by two clients
    y = np.sin(3 * x) + 0.1 * np.arange(6)[:, None, None]
    task = make_tabular_task(x, y)
  else:
    raise ValueError(task_kind)
  return name, hp, task


# label -> (registry name, hyperparameters, task kind).
CASES: dict[str, tuple[str, dict, str]] = {
    "fedavg": ("fedavg", dict(clients_per_round=5, local_steps=2, batch_size=4, lr=0.05), "quadratic"),
    "fedadam": ("fedadam", dict(clients_per_round=5, local_steps=2, batch_size=4, lr=0.05), "quadratic"),
    "fedzo": ("fedzo", dict(clients_per_round=5, local_steps=2, batch_size=4, lr=0.01, fd_directions=2),
              "quadratic"),
    "fedzo_aircomp": ("fedzo", dict(clients_per_round=5, local_steps=2, batch_size=4, lr=0.01, fd_directions=2,
                                    aggregation="aircomp"), "quadratic"),
    "dzopa": ("dzopa", {}, "quadratic"),
    "zone_s": ("zone_s", {}, "quadratic"),
    "decomfl": ("decomfl", dict(clients_per_round=3, local_steps=2), "quadratic"),
    "hiso": ("hiso", dict(clients_per_round=3, local_steps=2), "quadratic"),
    "fedlrgd": ("fedlrgd", {}, "smooth_erm"),
    "fedave": ("fedave", {}, "smooth_erm"),
    "fzoos": ("fzoos", dict(num_rff=8, history_size=16, gp_window=4, rff_window=8, local_steps=1,
                            rounds=T), "quadratic"),
    "fedzo_fd": ("fedzo_fd", dict(local_steps=2, fd_directions=4), "quadratic"),
    "scaffold_zo2": ("scaffold_zo2", dict(local_steps=2, fd_directions=4), "quadratic"),
    # The theory settings of tests/algorithms/test_ffgb.py (a converging run; the defaults diverge here).
    "ffgb": ("ffgb", dict(weak_learner="scaled", gamma=1.0, mu=0.1, local_steps=2, eta_schedule="theory",
                          eta_cap=1.0 / 1.1, clients_per_round=3), "tabular"),
}
BLOCKABLE = ("fedavg", "fedadam", "fedzo", "fedzo_aircomp")


def _strip(rec):
  return {k: v for k, v in rec.items() if k != "wall_time_s"}


def _leaves(state):
  return [np.asarray(jax.random.key_data(x) if checkpoint._is_key(x) else x)
          for x in jax.tree_util.tree_leaves(state)]


LEDGERS = ("round", "queries", "bytes_up", "bytes_down", "participants", "empty_rounds")

# 1 vs 8 devices only: label -> (rtol, atol, reason). Everything else, and every other cut, is bitwise.
TOLERANCE: dict[str, tuple[float, float, str]] = {
    # Measured: 3e-8 after one round, 5e-6 (state) / 2.4e-6 (metrics) relative after 10. The consensus
    # sum is pairwise (fixed order), but the per-client primal/dual updates on an (N, d) array sharded
    # over 8 devices are fused differently by XLA per shard (float32 rounding, not a different rule).
    "dzopa": (1e-4, 1e-6, "float32 rounding of the per-client (N, d) updates fused per shard"),
}
# 1 vs 8 devices, not invariant (found by this test; issue 35): FZooS's history and local GP/RFF
# weights differ at the percent level from round 1 on (x after round 1 is still equal; with Adam or
# SGD local steps alike), far above float32 rounding:
#   pytest -m slow tests/core/test_cut_invariance.py::test_one_vs_eight_devices_bitwise (fzoos entry).
NOT_INVARIANT_ON_8_DEVICES = {"fzoos": "history/GP weights differ at ~1e-2 relative from round 1 on"}


def assert_same_run(a, b, what, rtol=0.0, atol=0.0):
  """The final states' leaves and every metric at the rounds both record: bitwise, or within
  (rtol, atol) for floats when a tolerance is given (ledgers and integer leaves stay exact)."""
  (sa, ra), (sb, rb) = a, b
  assert jax.tree_util.tree_structure(sa) == jax.tree_util.tree_structure(sb), what
  for i, (x, y) in enumerate(zip(_leaves(sa), _leaves(sb))):
    assert x.dtype == y.dtype and x.shape == y.shape, (what, i)
    same = (np.allclose(x, y, rtol=rtol, atol=atol, equal_nan=True) if (rtol or atol) and x.dtype.kind == "f"
            else np.array_equal(x, y, equal_nan=True))
    assert same, f"{what}: state leaf {i} differs: {x} vs {y}"
  by_round = {r["round"]: _strip(r) for r in rb}
  common = [r for r in ra if r["round"] in by_round]
  assert common, what
  for rec in common:
    other = by_round[rec["round"]]
    assert _strip(rec).keys() == other.keys(), what
    for k, v in _strip(rec).items():
      w = other[k]
      same = v == w or (v != v and w != w)
      if not same and (rtol or atol) and k not in LEDGERS:
        same = bool(np.isclose(v, w, rtol=rtol, atol=atol))
      assert same, f"{what}: {k} at round {rec['round']}: {v!r} vs {w!r}"


class Kill(Exception):
  pass


# The costliest compilations run in the slow suite (.ci/run: pytest -m slow); the rest keep the
# default suite's share of this file under ~90 s on one core.
SLOW = ("fedzo_aircomp", "scaffold_zo2")


@pytest.mark.parametrize("label", [pytest.param(c, marks=pytest.mark.slow) if c in SLOW else c for c in CASES])
def test_cut_invariance(label, tmp_path):
  name, hp, task = make_case(label)
  if label in BLOCKABLE:
    hp = dict(hp, client_block=0)
  alg = algorithms.build(name, task, **hp)
  ref = simulate(alg, task, T, 1, KEY)
  assert [r["round"] for r in ref[1]] == list(range(T + 1))
  for every in (5, 20):
    assert_same_run(ref, simulate(alg, task, T, every, KEY), f"{label}: eval_every 1 vs {every}")

  ckpt = str(tmp_path / "ckpt")
  def kill(rec):
    if rec["round"] == KILL_AT:
      raise Kill
  with pytest.raises(Kill):
    simulate(alg, task, T, 1, KEY, checkpoint_dir=ckpt, checkpoint_every=5, on_eval=kill)
  assert checkpoint.latest_round(ckpt) == 5
  resumed = simulate(alg, task, T, 1, KEY, checkpoint_dir=ckpt, checkpoint_every=5, resume=True)
  assert [r["round"] for r in resumed[1]] == list(range(6, T + 1))
  assert_same_run(ref, resumed, f"{label}: checkpoint_every 0 vs 5 with a kill at {KILL_AT} and a resume")

  if label in BLOCKABLE:
    blocked = algorithms.build(name, task, **dict(hp, client_block=2))
    assert_same_run(ref, simulate(blocked, task, T, 5, KEY), f"{label}: client_block 0 vs 2")


DEVICES_SCRIPT = textwrap.dedent("""
    import json, sys, traceback, jax
    from fedsim import algorithms
    from fedsim.core import simulate
    from fedsim.core.sharding import client_mesh, shard_task
    from tests.core import test_cut_invariance as ci
    assert jax.device_count() == 8, jax.devices()
    out = {}
    for label in sys.argv[1:]:
      print(label, file=sys.stderr, flush=True)
      name, hp, base = ci.make_case(label)
      runs = []
      for ndev in (1, 8):
        task = shard_task(base, client_mesh(ndev))
        runs.append(simulate(algorithms.build(name, task, **hp), task, ci.T, 5, ci.KEY))
      rtol, atol, _ = ci.TOLERANCE.get(label, (0.0, 0.0, ""))
      try:
        ci.assert_same_run(runs[0], runs[1], f"{label}: 1 vs 8 devices", rtol, atol)
        out[label] = "ok"
      except AssertionError as e:
        out[label] = str(e)
    print(json.dumps(out))
""")


@pytest.mark.slow  # one subprocess compiling every family twice
def test_one_vs_eight_devices_bitwise():
  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu")
  proc = subprocess.run([sys.executable, "-c", DEVICES_SCRIPT, *CASES], cwd=REPO, env=env,
                        capture_output=True, text=True, timeout=1200)
  assert proc.returncode == 0, proc.stderr[-3000:]
  out = json.loads(proc.stdout.strip().splitlines()[-1])
  failed = {k: v for k, v in out.items() if v != "ok" and k not in NOT_INVARIANT_ON_8_DEVICES}
  assert failed == {}
  # A known non-invariance that starts to hold is reported, so its entry goes.
  assert all(out[k] != "ok" for k in NOT_INVARIANT_ON_8_DEVICES), "now invariant: drop it from the list"
