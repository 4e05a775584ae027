"""FZooS's real-task analogues (seed 000 §6.2-6.3; specs/fzoos.md §3.2-3.3): the federated
black-box attack and the non-differentiable metric optimisation."""

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from sklearn import metrics as skm

from fedsim.data import load_dataset
from fedsim.models import training
from fedsim.tasks import attack, metric_opt

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = training.TrainConfig(steps=30, batch_size=32, learning_rate=3e-3)


@pytest.fixture(scope="module")
def digits():
  return load_dataset("digits")


def test_attack_margin_objective_on_a_hand_built_classifier(digits, tmp_path):
  """f_i(x) = Phi_y(a) - max_{c != y} Phi_c(a), a = clip(z + eps (2x - 1), 0, 1), for a linear
  network written into the client slots by hand (hidden = identity on [0,1] pixels, ReLU-safe);
  success iff the mean margin F < 0."""
  task = attack.make_attack_task(digits, 2, seed=0, portion=1.0, model="mlp", box=0.3,
                                 cache_dir=tmp_path, train_config=TINY)
  rng = np.random.default_rng(0)
  W = rng.normal(size=(2, 64, 10)).astype(np.float32)
  b = rng.normal(size=(2, 10)).astype(np.float32)
  eye = np.broadcast_to(np.eye(64, dtype=np.float32), (2, 64, 64))
  params = {"params": {"Dense_0": {"kernel": jnp.asarray(eye), "bias": jnp.zeros((2, 64))},
                       "Dense_1": {"kernel": jnp.asarray(W), "bias": jnp.asarray(b)}}}
  data = dict(task.data, clients=dict(task.data["clients"], params=params))
  z = np.asarray(data["clients"]["z"][0]).reshape(64)
  y = int(data["clients"]["y"][0])
  for x in (np.full(64, 0.5), rng.uniform(-0.2, 1.2, 64)):
    a = np.clip(z + 0.3 * (2 * np.clip(x, 0, 1) - 1), 0, 1)
    want = []
    for i in range(2):
      logits = a @ W[i] + b[i]
      want.append(logits[y] - np.max(np.delete(logits, y)))
    def row(i):
      return jax.tree_util.tree_map(lambda v: v[i], data["clients"])
    got = [float(task.loss(jnp.asarray(x), row(i))) for i in range(2)]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    ev = task.evaluate(jnp.asarray(x), data)
    np.testing.assert_allclose(float(ev["objective"]), np.mean(want), rtol=1e-5, atol=1e-5)
    assert float(ev["success_rate"]) == float(np.mean(want) < 0)
    ensemble = np.mean([a @ W[i] + b[i] for i in range(2)], axis=0)       # mean logits over the clients
    assert float(ev["ensemble_fooled"]) == float(np.argmax(ensemble) != y)


@pytest.mark.slow  # long; .ci/run runs it (pytest -m slow)
def test_attack_classifier_cache_hit_reproduces_the_classifiers(digits, tmp_path):
  kw = dict(seed=1, portion=0.5, model="mlp", cache_dir=tmp_path, train_config=TINY)
  a = attack.make_attack_task(digits, 3, **kw)
  b = attack.make_attack_task(digits, 3, **kw)
  assert a.info["classifiers_loaded_from_cache"] == [False] * 3
  assert b.info["classifiers_loaded_from_cache"] == [True] * 3
  for u, v in zip(jax.tree_util.tree_leaves(a.data), jax.tree_util.tree_leaves(b.data)):
    np.testing.assert_array_equal(np.asarray(u), np.asarray(v))
  # Each client has round(P C) = 5 classes; its classifier was trained only on them.
  assert [len(c) for c in a.info["client_classes"]] == [5, 5, 5]
  x0 = a.init_params(jax.random.key(0))
  assert float(a.evaluate(x0, a.data)["objective"]) > 0  # eligible targets: positive margin at x_0


@pytest.mark.parametrize("metric, fn", [("precision", skm.precision_score), ("recall", skm.recall_score),
                                        ("f1", skm.f1_score), ("jaccard", skm.jaccard_score)])
@pytest.mark.slow  # long; .ci/run runs it (pytest -m slow)
def test_macro_metric_equals_sklearn(metric, fn):
  rng = np.random.default_rng(hash(metric) % 2**32)
  for _ in range(20):
    n, C = int(rng.integers(1, 40)), 7
    # restricted label ranges so that some classes appear only in y_true or only in y_pred
    yt = rng.integers(0, int(rng.integers(1, C + 1)), n)
    yp = rng.integers(int(rng.integers(0, C)), C, n)
    mask = rng.random(n) < 0.8
    mask[0] = True
    want = fn(yt[mask], yp[mask], average="macro", zero_division=0)
    got = metric_opt.macro_metric(jnp.asarray(yt), jnp.asarray(yp), jnp.asarray(mask), C, metric)
    np.testing.assert_allclose(float(got), want, rtol=1e-6, atol=1e-7)


def test_metric_opt_task(digits, tmp_path):
  """x_0 = 0.5 is theta*; f_i = 1 - macro precision of the client's shard; shards cover the test
  split exactly once; a larger P gives each client more classes (less heterogeneity)."""
  task = metric_opt.make_metric_opt_task(digits, 5, seed=0, portion=0.4, cache_dir=tmp_path,
                                         train_config=TINY)
  assert task.info["dim"] == 64 * 30 + 30 + 30 * 14 + 14 + 14 * 10 + 10
  again = metric_opt.make_metric_opt_task(digits, 5, seed=0, portion=0.4, cache_dir=tmp_path,
                                          train_config=TINY)
  assert again.info["mlp_loaded_from_cache"] and not task.info["mlp_loaded_from_cache"]
  x0 = task.init_params(jax.random.key(0))
  row = jax.tree_util.tree_map(lambda v: v[2], task.client_data)
  from fedsim.models import MLP
  theta, _, hit = metric_opt.train_mlp(digits, 0, TINY, tmp_path)
  assert hit
  m = np.asarray(row["mask"])
  pred = np.argmax(np.asarray(MLP(10, metric_opt.HIDDEN).apply(theta, np.asarray(row["x"])[m])), -1)
  want = 1 - skm.precision_score(np.asarray(row["y"])[m], pred, average="macro", zero_division=0)
  np.testing.assert_allclose(float(task.loss(x0, row)), want, rtol=1e-5, atol=1e-6)
  parts = metric_opt.class_shards(digits.y_test, 5, 0.4, 0)
  np.testing.assert_array_equal(np.sort(np.concatenate(parts)), np.arange(digits.n_test))
  def classes(P):
    return np.mean([len(np.unique(digits.y_test[p]))
                    for p in metric_opt.class_shards(digits.y_test, 5, P, 0)])
  assert classes(0.2) < classes(0.6) <= classes(1.0)


@pytest.mark.parametrize("args, flag", [
    (["--task=attack", "--portion=1.5"], "--portion"),
    (["--task=attack", "--classifier=softmax"], "--classifier"),
    (["--task=metric_opt", "--opt_metric=auc"], "--opt_metric"),
    (["--task=metric_opt", "--perturbation_box=-1"], "--perturbation_box"),
    (["--task=metric_opt", "--model_train_steps=-5"], "--model_train_steps"),
    (["--task=quadratic", "--algorithm=fzoos", "--fzoos_track_cosine=2"], "--fzoos_track_cosine"),
])
def test_bad_flags_exit_2(args, flag, tmp_path):
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  proc = subprocess.run([sys.executable, "-m", "experiments.run", "--algorithm=fzoos", *args,
                         f"--output_dir={tmp_path}"], cwd=REPO, env=env, capture_output=True,
                        text=True, timeout=300)
  assert proc.returncode == 2, proc.stderr[-2000:]
  lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
  assert len(lines) == 1 and flag in lines[0], proc.stderr


def test_the_attack_target_is_an_image_the_clean_ensemble_classifies_correctly(digits, tmp_path):
  """The target z is drawn among the test images with a positive mean margin over the N classifiers
  (§6.2: an attack starts from a correctly classified image), so at x = 1/2 (no perturbation) F > 0."""
  for target in range(3):
    task = attack.make_attack_task(digits, 2, seed=0, portion=1.0, model="mlp", box=0.3,
                                   cache_dir=tmp_path, train_config=TINY, target=target)
    ev = task.evaluate(jnp.full(64, 0.5), task.data)
    assert float(ev["objective"]) > 0 and float(ev["success_rate"]) == 0.0


def test_attack_cnn_is_two_5x5_convolutions_of_16_and_32_then_64_units():
  """App. E.2's CNN: conv(16, 5x5) - pool 2 - conv(32, 5x5) - pool 2 - dense(64) - dense(C); on 28 x 28
  MNIST images the first dense layer reads 7 x 7 x 32 features."""
  params = attack.AttackCNN(num_classes=10).init(jax.random.key(0), jnp.zeros((1, 28, 28)))["params"]
  shapes = {k: tuple(v["kernel"].shape) for k, v in params.items()}
  assert shapes == {"Conv_0": (5, 5, 1, 16), "Conv_1": (5, 5, 16, 32), "Dense_0": (7 * 7 * 32, 64),
                    "Dense_1": (64, 10)}
