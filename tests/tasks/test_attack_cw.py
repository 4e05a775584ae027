"""The black-box attack task (FedZO eq. 21) on the embedded digits."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedsim import data as fdata
from fedsim.core.errors import ConfigError
from fedsim.models import training
from fedsim.tasks import attack_cw
from fedsim.tasks.attack_cw import adversarial_image, make_attack_cw_task

NUM_CLIENTS = 6


@pytest.fixture(scope="module")
def digits():
  return fdata.load_digits()


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
  return tmp_path_factory.mktemp("classifiers")


@pytest.fixture(scope="module")
def task(digits, cache_dir):
  return make_attack_cw_task(digits, NUM_CLIENTS, seed=0, cache_dir=cache_dir)


def _np_params(path):
  with np.load(path, allow_pickle=False) as z:
    return {k: np.asarray(z[k], np.float64) for k in z.files if k != "__meta__"}


def _np_logits(p, images01):
  """The MLP in float64 numpy: relu(x W0 + b0) W1 + b1, images in [0, 1]."""
  h = np.maximum(images01 @ p["params/Dense_0/kernel"] + p["params/Dense_0/bias"], 0.0)
  return h @ p["params/Dense_1/kernel"] + p["params/Dense_1/bias"]


def _np_psi(p, x, z, y, c):
  """Eq. 21 written out directly in float64."""
  z = np.asarray(z, np.float64)
  a = 0.5 * np.tanh(np.arctanh(2.0 * z) + np.asarray(x, np.float64))
  logits = _np_logits(p, a + 0.5)
  rows = np.arange(len(y))
  others = logits.copy()
  others[rows, y] = -np.inf
  margin = np.maximum(logits[rows, y] - others.max(1), 0.0)
  return margin + c * np.sum((a - z) ** 2, axis=1), margin


def _row(task, i):
  return jax.tree_util.tree_map(lambda a: a[i], task.client_data)


def test_shapes_and_info(task, digits):
  assert task.dim == 64
  x0 = task.init_params(jax.random.key(0))
  assert x0.shape == (64,) and x0.dtype == jnp.float32 and not np.any(np.asarray(x0))
  info = task.info
  json.dumps(info)
  assert info["target_class"] == 4 and info["c"] == 1.0
  assert info["classifier_test_accuracy"] > 0.9
  assert 0 < info["num_targets"] <= info["num_target_candidates"] == int(np.sum(digits.y_train == 4))
  assert sum(info["client_sizes"]["sizes"]) == info["num_targets"]
  cd = task.client_data
  n_max = cd["z"].shape[1]
  assert cd["z"].shape == (NUM_CLIENTS, n_max, 64) and cd["mask"].shape == (NUM_CLIENTS, n_max)
  assert np.all(np.asarray(cd["y"])[np.asarray(cd["mask"])] == 4)
  z = np.asarray(cd["z"])
  assert np.all(np.abs(z) <= 0.5 - 1e-6 + 1e-9)


def test_clients_disjoint_cover_all_targets(task, digits):
  cd = task.client_data
  mask, index = np.asarray(cd["mask"]), np.asarray(cd["index"])
  sizes = np.asarray(task.client_sizes)
  np.testing.assert_array_equal(mask.sum(1), sizes)
  assert np.all(sizes >= 1) and len(set(sizes.tolist())) > 1  # quantity skew
  assert np.all(index[~mask] == -1)
  idx = index[mask]
  assert len(np.unique(idx)) == idx.size == task.info["num_targets"]  # disjoint
  # The targets are exactly the class-4 training images the classifier gets right.
  p = _np_params(task.info["classifier_cache_path"])
  cand = np.flatnonzero(digits.y_train == 4)
  pred = np.argmax(_np_logits(p, digits.x_train[cand].reshape(len(cand), -1)), 1)
  np.testing.assert_array_equal(np.sort(idx), cand[pred == 4])
  # The stored images are those rows, shifted to [-0.5, 0.5] and clipped.
  want = np.clip(digits.x_train[idx].reshape(idx.size, -1) - 0.5, -0.499999, 0.499999)
  np.testing.assert_allclose(np.asarray(cd["z"])[mask], want, atol=1e-6)


def test_loss_matches_eq21(task):
  p = _np_params(task.info["classifier_cache_path"])
  x = 0.7 * jax.random.normal(jax.random.key(1), (64,))
  client = _row(task, 0)
  k = min(5, int(task.client_sizes[0]))
  batch = {"z": client["z"][:k], "y": client["y"][:k], "mask": jnp.ones((k,), bool)}
  psi, _ = _np_psi(p, x, batch["z"], np.asarray(batch["y"]), 1.0)
  np.testing.assert_allclose(task.loss(x, batch), psi.mean(), rtol=1e-4, atol=1e-5)
  per = jax.vmap(lambda z, y: task.per_example_loss(x, {"z": z, "y": y}))(batch["z"], batch["y"])
  np.testing.assert_allclose(per, psi, rtol=1e-4, atol=1e-5)
  # Padding rows do not count: the full (masked) row gives f_n over the n_n real images.
  n = int(task.client_sizes[0])
  psi_all, _ = _np_psi(p, x, client["z"][:n], np.asarray(client["y"][:n]), 1.0)
  np.testing.assert_allclose(task.loss(x, task.full_batch(client)), psi_all.mean(), rtol=1e-4)


def test_evaluate_equal_client_weights(task):
  x = 0.5 * jax.random.normal(jax.random.key(2), (64,))
  ev = jax.jit(task.evaluate)(x, task.data)
  f_n = jax.vmap(lambda row: task.loss(x, task.full_batch(row)))(task.client_data)
  np.testing.assert_allclose(ev["objective"], jnp.mean(f_n), rtol=1e-5)
  np.testing.assert_allclose(ev["objective"], ev["margin_loss"] + ev["distortion"], rtol=1e-5)
  assert float(ev["distortion"]) > 0


def test_zero_perturbation(task):
  ev = jax.jit(task.evaluate)(task.init_params(jax.random.key(0)), task.data)
  assert float(ev["distortion"]) < 1e-10  # atanh / tanh round trip only
  assert float(ev["attack_accuracy"]) == 0.0
  assert float(ev["attack_accuracy_test"]) == 0.0
  assert float(ev["margin_loss"]) > 0  # correctly classified: positive logit margins
  np.testing.assert_allclose(ev["objective"], ev["margin_loss"], rtol=1e-6)


def test_large_perturbation_and_gradient_steps_fool_the_classifier(task):
  ev = task.evaluate(jnp.full((64,), 5.0), task.data)
  assert float(ev["attack_accuracy"]) > 0
  # Diagnostics only (the ZO algorithms never differentiate the loss).
  def obj(x):
    return task.evaluate(x, task.data)["objective"]
  step = jax.jit(lambda x: x - 0.5 * jax.grad(obj)(x))
  x = task.init_params(jax.random.key(0))
  start = float(obj(x))
  for _ in range(10):
    x = step(x)
  ev = task.evaluate(x, task.data)
  assert float(ev["objective"]) < start
  assert float(ev["attack_accuracy"]) > 0.2 and float(ev["attack_accuracy_test"]) > 0


def test_loss_finite_at_pixel_extremes(task):
  z = jnp.asarray(np.tile([-0.5, 0.5, 0.0, 0.25], 16), jnp.float32)  # raw, unclipped ±0.5
  for x in (jnp.zeros(64), jnp.full((64,), 50.0), jnp.full((64,), -50.0)):
    a = adversarial_image(x, z)
    assert np.all(np.isfinite(a)) and np.all(np.abs(a) <= 0.5)
    val = task.per_example_loss(x, {"z": z, "y": jnp.int32(4)})
    grad = jax.grad(task.per_example_loss)(x, {"z": z, "y": jnp.int32(4)})
    assert np.isfinite(float(val)) and np.all(np.isfinite(grad))
  np.testing.assert_allclose(adversarial_image(jnp.zeros(64), z), z, atol=2e-6)


def test_sample_batch_only_real_rows(task):
  i = int(np.argmin(np.asarray(task.client_sizes)))
  n = int(task.client_sizes[i])
  client = _row(task, i)
  # Make padding recognisable: any padded row drawn would be all 0.3.
  client = dict(client, z=jnp.where(client["mask"][:, None], client["z"], 0.3))
  batch = jax.jit(task.sample_batch, static_argnums=2)(client, jax.random.key(3), 400)
  assert batch["z"].shape == (400, 64) and bool(jnp.all(batch["mask"]))
  real = np.asarray(client["z"])[:n]
  got = np.asarray(batch["z"])
  match = np.all(got[:, None, :] == real[None], axis=-1)  # (400, n)
  assert np.all(match.any(1))
  assert np.all(match.any(0))  # with 400 draws every real row shows up


def test_cache_second_construction_loads(digits, cache_dir, task, monkeypatch):
  path = task.info["classifier_cache_path"]
  assert path.startswith(str(cache_dir)) and path.endswith(".npz")
  def boom(*args, **kwargs):
    raise AssertionError("trained again instead of loading the cache")
  monkeypatch.setattr(training, "train_classifier", boom)
  again = make_attack_cw_task(digits, NUM_CLIENTS, seed=0, cache_dir=cache_dir)
  assert again.info["classifier_loaded_from_cache"] and again.info["classifier_cache_path"] == path
  assert again.info["classifier_test_accuracy"] == task.info["classifier_test_accuracy"]
  x = 0.3 * jnp.ones(64)
  ev, ev_again = task.evaluate(x, task.data), again.evaluate(x, again.data)
  for k in ev:
    np.testing.assert_array_equal(ev[k], ev_again[k])
  # Another seed is another classifier (another cache entry), trained afresh.
  with pytest.raises(AssertionError, match="trained again"):
    make_attack_cw_task(digits, NUM_CLIENTS, seed=1, cache_dir=cache_dir)


def test_training_is_deterministic(digits, cache_dir, tmp_path, task):
  fresh = make_attack_cw_task(digits, NUM_CLIENTS, seed=0, cache_dir=tmp_path)
  assert not fresh.info["classifier_loaded_from_cache"]
  a, b = _np_params(fresh.info["classifier_cache_path"]), _np_params(task.info["classifier_cache_path"])
  assert a.keys() == b.keys()
  for k in a:
    np.testing.assert_array_equal(a[k], b[k])


def test_bad_configuration(digits, cache_dir, task):
  with pytest.raises(ConfigError, match="num_clients"):
    make_attack_cw_task(digits, task.info["num_targets"] + 1, cache_dir=cache_dir)
  with pytest.raises(ConfigError, match="classifier"):
    make_attack_cw_task(digits, 3, classifier="cnn", cache_dir=cache_dir)
  with pytest.raises(ConfigError, match="target_class"):
    make_attack_cw_task(digits, 3, target_class=10, cache_dir=cache_dir)
  with pytest.raises(ConfigError, match="quantity_law"):
    make_attack_cw_task(digits, 3, quantity_law="zipf", cache_dir=cache_dir)
  assert attack_cw.CLASSIFIERS == ("mlp", "softmax")
