"""fedsim.models.training's cache: processes that need one classifier at once train it once."""

import threading
import time

import jax
import jax.numpy as jnp
import numpy as np

from fedsim.models import training
from fedsim.models.mlp import MLP


def test_concurrent_callers_train_a_classifier_once_and_share_it(tmp_path, monkeypatch):
  model = MLP(3, (4,), feature_ndim=1)
  x, y = np.zeros((8, 5), np.float32), np.arange(8) % 3
  calls = []

  def slow_train(model, x, y, seed, config):
    calls.append(seed)
    time.sleep(0.5)  # the other caller checks the cache meanwhile
    return model.init(jax.random.key(len(calls)), jnp.zeros((1, 5)))

  monkeypatch.setattr(training, "train_classifier", slow_train)
  out = []

  def call():
    out.append(training.train_or_load(model, x, y, seed=0, config=training.TrainConfig(steps=1),
                                      key={"test": 1}, cache_dir=tmp_path))

  threads = [threading.Thread(target=call) for _ in range(2)]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  assert calls == [0]  # without the lock both miss the cache and train
  assert sorted(loaded for _, _, loaded in out) == [False, True]
  (a, path_a, _), (b, path_b, _) = out
  assert path_a == path_b
  for u, v in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
    np.testing.assert_array_equal(u, v)
