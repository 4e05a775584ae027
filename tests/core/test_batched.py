"""fedsim.core.batched: K seeds x V hyperparameter values in one compiled program
equal K x V separate ``simulate`` runs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedsim import algorithms
from fedsim.core import simulate
from fedsim.core.batched import ProgramCache, simulate_batched, stack_padded, traceable
from tests.conftest import digits_task

HP = dict(clients_per_round=3, local_steps=2, batch_size=8)


@pytest.fixture(scope="module")
def tasks():
  return [digits_task(8, seed=s) for s in (0, 1, 2)]


def _build(name):
  return lambda t, hp: algorithms.build(name, t, **hp)


_RUNS = {}


def _separate(name, task, seed, rounds, eval_every, **hp):
  """``simulate`` of one configuration (memoised: several tests compare with the same run)."""
  key = (name, id(task), seed, rounds, eval_every, tuple(sorted(hp.items())))
  if key not in _RUNS:
    _, _RUNS[key] = simulate(algorithms.build(name, task, **hp), task, rounds, eval_every,
                             jax.random.key(seed))
  return _RUNS[key]


def _compare(a, b, rtol):
  assert [r["round"] for r in a] == [r["round"] for r in b]
  for ra, rb in zip(a, b):
    for k in ("queries", "bytes_up", "bytes_down", "participants", "empty_rounds"):
      assert ra[k] == rb[k], k  # ledgers are exact
    for k in ("objective", "test_accuracy", "test_loss"):
      np.testing.assert_allclose(ra[k], rb[k], rtol=rtol, atol=0)


def test_stack_padded_pads_masked_sample_axis(tasks):
  datas = [t.data for t in tasks]
  n_max = [d["clients"]["mask"].shape[1] for d in datas]
  assert len(set(n_max)) > 1  # the seeds' partitions really differ in shape
  out = stack_padded(datas)
  assert out["clients"]["x"].shape[:3] == (3, 8, max(n_max))
  for k, d in enumerate(datas):
    n = n_max[k]
    np.testing.assert_array_equal(out["clients"]["x"][k, :, :n], d["clients"]["x"])
    np.testing.assert_array_equal(out["clients"]["mask"][k, :, :n], d["clients"]["mask"])
    assert not np.any(out["clients"]["mask"][k, :, n:])  # padding is masked out
    assert not np.any(out["clients"]["x"][k, :, n:])
    np.testing.assert_array_equal(out["sizes"][k], d["sizes"])
  # Shapes that padding cannot reconcile (a different number of clients): None.
  assert stack_padded([datas[0], digits_task(5, seed=0).data]) is None
  # Client data without a mask cannot mark padded samples as absent: sample counts that differ are
  # not padded but refused (None), whether the clients are a dict without "mask" or not a dict.
  no_mask = [{"clients": {"x": np.ones((2, n, 3))}, "sizes": np.ones(2)} for n in (4, 5)]
  assert stack_padded(no_mask) is None
  assert stack_padded([{"clients": np.ones((2, n)), "sizes": np.ones(2)} for n in (4, 5)]) is None


@pytest.mark.slow  # long; .ci/run runs it (pytest -m slow)
def test_batched_seeds_equal_separate_runs(tasks):
  """Seeds 0, 1, 2 (three partitions of different n_max) in one program vs three simulate runs."""
  hp = dict(HP, lr=0.1)
  cache = ProgramCache()
  recs, div = simulate_batched(_build("fedavg"), tasks[0], [t.data for t in tasks], [0, 1, 2], hp, [],
                               4, 2, cache=cache)
  assert cache.compiles == {"init": 1, "eval": 1, "chunk": 1}
  for k in range(3):
    assert not div[k][0]
    _compare(recs[k][0], _separate("fedavg", tasks[k], k, 4, 2, **hp), rtol=1e-6)
  # The runs differ from each other (seeds and partitions are really different).
  assert len({recs[k][0][-1]["objective"] for k in range(3)}) == 3


@pytest.mark.slow  # long; .ci/run runs it (pytest -m slow)
def test_vmapped_lr_equals_separate_runs(tasks):
  lrs = [0.1, 0.3]
  recs, _ = simulate_batched(_build("fedavg"), tasks[0], [t.data for t in tasks[:2]], [0, 1], HP,
                             [{"lr": lr} for lr in lrs], 4, 2)
  for k in range(2):
    for v, lr in enumerate(lrs):
      _compare(recs[k][v], _separate("fedavg", tasks[k], k, 4, 2, lr=lr, **HP), rtol=1e-6)
  assert recs[0][0][-1]["objective"] != recs[0][1][-1]["objective"]


@pytest.mark.slow  # long; .ci/run runs it (pytest -m slow)
def test_fedzo_batched_equals_separate_runs(tasks):
  """FedZO (sphere directions, mu = 1e-3), 2 seeds x 2 traced learning rates. The
  estimator divides function differences by mu, so a 1-ulp change of F (XLA CPU
  picks another matmul loop for a batch of >= 3 members; with <= 2 members the
  arithmetic is bit for bit the separate runs') becomes ~1e-4 of the direction,
  hence the looser tolerance here; the ledgers stay exact."""
  hp = dict(HP, fd_directions=4)
  lrs = [0.02, 0.05]
  recs, _ = simulate_batched(_build("fedzo"), tasks[0], [t.data for t in tasks[:2]], [0, 1], hp,
                             [{"lr": lr} for lr in lrs], 2, 2)
  for k in range(2):
    for v, lr in enumerate(lrs):
      _compare(recs[k][v], _separate("fedzo", tasks[k], k, 2, 2, lr=lr, **hp), rtol=1e-4)
  assert recs[0][0][-1]["objective"] != recs[0][1][-1]["objective"]


def test_traceable_detects_shape_hyperparameters(tasks):
  build, t = _build("fedzo"), tasks[0]
  base = dict(HP, fd_directions=4, lr=0.01, smoothing=1e-3)
  def drop(n):
    return {k: v for k, v in base.items() if k != n}
  assert traceable(build, t, drop("lr"), {"lr": 0.01})[0]
  assert traceable(build, t, drop("smoothing"), {"smoothing": 1e-3})[0]
  ok, why = traceable(build, t, drop("local_steps"), {"local_steps": 2})
  assert not ok and "Error" in why  # lax.scan length must be concrete
  assert not traceable(build, t, drop("clients_per_round"), {"clients_per_round": 3})[0]
  assert not traceable(build, t, drop("lr"), {"lr": "x"})[0]


def test_program_cache_counts_and_shares():
  cache = ProgramCache()
  def f(x):
    return jnp.sin(x) * 2
  a = cache.get("chunk", f, jnp.ones(3))
  b = cache.get("chunk", f, jnp.zeros(3))
  c = cache.get("chunk", f, jnp.ones(4))
  assert a is b and c is not a
  assert cache.compiles == {"chunk": 2} and cache.hits == {"chunk": 1}
  np.testing.assert_allclose(c(jnp.ones(4)), 2 * np.sin(1.0) * np.ones(4), rtol=1e-6)
  # An unused argument of another shape must not reuse a program compiled for the first.
  def g(x, unused):
    return x + 1
  cache.get("init", g, jnp.ones(2), jnp.ones(3))
  cache.get("init", g, jnp.ones(2), jnp.ones(5))(jnp.ones(2), jnp.ones(5))
  assert cache.compiles["init"] == 2
