"""Digits loader, to_client_arrays, and the Dataset type."""

import dataclasses
import json

import numpy as np
import pytest

from fedsim.core.errors import ConfigError
from fedsim.data import Dataset, load_dataset, load_digits, partition, to_client_arrays


def test_digits_shapes_and_range():
  ds = load_digits()
  assert ds.name == "digits" and ds.num_classes == 10
  assert ds.x_train.shape == (1437, 8, 8) and ds.x_test.shape == (360, 8, 8)
  assert ds.feature_shape == (8, 8) and ds.num_features == 64
  assert ds.x_train.dtype == np.float32 and ds.y_train.dtype == np.int32
  for x in (ds.x_train, ds.x_test):
    assert x.min() == 0.0 and x.max() == 1.0
  assert set(np.unique(ds.y_train)) == set(range(10))
  json.dumps(ds.info)
  assert ds.info["seed"] == 0 and ds.info["n_test"] == 360


def test_digits_stratified_and_deterministic():
  ds = load_digits(seed=0)
  train_p = np.bincount(ds.y_train, minlength=10) / ds.n_train
  test_p = np.bincount(ds.y_test, minlength=10) / ds.n_test
  np.testing.assert_allclose(train_p, test_p, atol=0.01)
  again = load_dataset("digits", seed=0)
  np.testing.assert_array_equal(ds.x_test, again.x_test)
  other = load_digits(seed=1)
  assert not np.array_equal(ds.x_test, other.x_test)
  np.testing.assert_array_equal(np.bincount(other.y_test), np.bincount(ds.y_test))


def test_digits_bad_fraction():
  with pytest.raises(ConfigError, match="--test_fraction"):
    load_digits(test_fraction=1.0)


def test_dataset_frozen():
  ds = load_digits()
  with pytest.raises(dataclasses.FrozenInstanceError):
    ds.num_classes = 3
  with pytest.raises(TypeError):
    Dataset("bad", ds.x_train.astype(np.float64), ds.y_train, ds.x_test, ds.y_test, 10, {})


def test_to_client_arrays_padding_and_mask():
  x = np.arange(10 * 2 * 3, dtype=np.float64).reshape(10, 2, 3)
  y = np.arange(10) % 4
  parts = [np.array([3, 1, 4]), np.array([0]), np.array([2, 5, 6, 7, 8, 9])]
  out = to_client_arrays(x, y, parts)
  assert set(out) == {"x", "y", "mask", "n"}
  assert out["x"].shape == (3, 6, 2, 3) and out["x"].dtype == np.float32
  assert out["y"].shape == (3, 6) and out["y"].dtype == np.int32
  assert out["mask"].shape == (3, 6) and out["mask"].dtype == bool
  np.testing.assert_array_equal(out["n"], [3, 1, 6])
  assert out["n"].dtype == np.int32
  np.testing.assert_array_equal(out["mask"].sum(1), out["n"])
  for k, p in enumerate(parts):
    m = out["mask"][k]
    assert m[: p.size].all() and not m[p.size:].any()
    np.testing.assert_array_equal(out["x"][k, : p.size], x[p])
    np.testing.assert_array_equal(out["y"][k, : p.size], y[p])
    assert not out["x"][k, p.size:].any() and not out["y"][k, p.size:].any()


def test_to_client_arrays_roundtrip_with_partition():
  ds = load_digits()
  parts = partition(ds.y_train, 13, "dirichlet", 0, dirichlet_alpha=0.5)
  out = to_client_arrays(ds.x_train, ds.y_train, parts)
  assert out["x"].shape[:2] == (13, max(p.size for p in parts))
  assert out["n"].sum() == ds.n_train
  np.testing.assert_array_equal(np.sort(out["y"][out["mask"]]), np.sort(ds.y_train))
  np.testing.assert_allclose(out["x"][out["mask"]].sum(), ds.x_train.sum(), rtol=1e-5)


def test_to_client_arrays_errors():
  with pytest.raises(ValueError, match="out of range"):
    to_client_arrays(np.zeros((3, 2)), np.zeros(3), [np.array([0, 3])])
  with pytest.raises(ValueError):
    to_client_arrays(np.zeros((3, 2)), np.zeros(4), [np.array([0])])
  with pytest.raises(ValueError):
    to_client_arrays(np.zeros((3, 2)), np.zeros(3), [])
