"""LIBSVM reader and loader."""

import json

import numpy as np
import pytest

from fedsim.core.errors import DataError
from fedsim.data import load_dataset, load_libsvm, read_libsvm


def test_read_libsvm_basic(tmp_path):
  p = tmp_path / "toy"
  p.write_text("# header comment\n"
               "+1 1:0.5 3:2\n"
               "\n"
               "-1 2:1e-1   # trailing comment\n"
               "2 qid:4 3:-1\n"
               "0\n")
  x, y = read_libsvm(p)
  np.testing.assert_allclose(x, [[0.5, 0, 2], [0, 0.1, 0], [0, 0, -1], [0, 0, 0]], rtol=1e-6)
  np.testing.assert_array_equal(y, [1, -1, 2, 0])
  assert x.dtype == np.float32
  x5, _ = read_libsvm(p, num_features=5)
  assert x5.shape == (4, 5)


@pytest.mark.parametrize("line, what", [
    ("abc 1:2", "bad label"),
    ("1 1:2 3", "bad feature '3'"),
    ("1 x:2", "bad feature index 'x'"),
    ("1 0:2", "1-based"),
    ("1 2:foo", "bad feature value 'foo'"),
    ("1 2:nan", "not finite"),
    ("1 2:1 2:3", "repeated"),
])
def test_read_libsvm_malformed(tmp_path, line, what):
  p = tmp_path / "bad.svm"
  p.write_text(f"1 1:1\n# ok\n\n{line}\n1 2:2\n")
  with pytest.raises(DataError) as e:
    read_libsvm(p)
  msg = str(e.value)
  assert msg.startswith(f"{p}: line 4: "), msg
  assert what in msg


def test_read_libsvm_too_many_features_and_empty(tmp_path):
  p = tmp_path / "f"
  p.write_text("1 7:1\n")
  with pytest.raises(DataError, match="line 1: feature index 7 exceeds num_features=5"):
    read_libsvm(p, num_features=5)
  p.write_text("# nothing\n\n")
  with pytest.raises(DataError, match="no examples"):
    read_libsvm(p)
  with pytest.raises(DataError, match="cannot read"):
    read_libsvm(tmp_path / "absent")


def write_random(path, n, d, labels, seed):
  rng = np.random.default_rng(seed)
  lines = []
  for i in range(n):
    feats = " ".join(f"{j + 1}:{rng.normal() * 10:.4f}" for j in range(d) if rng.random() < 0.7)
    lines.append(f"{labels[i % len(labels)]} {feats}")
  path.write_text("\n".join(lines) + "\n")


def test_load_libsvm_single_file(tmp_path):
  p = tmp_path / "heart"
  write_random(p, 50, 6, ["-1", "+1"], 0)
  ds = load_libsvm(p, seed=0)
  assert ds.name == "libsvm:heart"
  assert (ds.n_train, ds.n_test) == (40, 10)
  assert ds.x_train.shape == (40, 6) and ds.x_train.dtype == np.float32
  assert ds.num_classes == 2 and ds.info["label_values"] == [-1, 1]
  assert ds.y_train.dtype == np.int32 and set(np.unique(ds.y_train)) <= {0, 1}
  for x in (ds.x_train, ds.x_test):
    assert x.min() >= 0.0 and x.max() <= 1.0
  # Train scaling reaches both ends of [0, 1] on every non-constant feature.
  np.testing.assert_allclose(ds.x_train.min(0), 0.0)
  np.testing.assert_allclose(ds.x_train.max(0), 1.0)
  # The split is a partition of the file, fixed by the seed.
  x_all, _ = read_libsvm(p)
  assert ds.n_train + ds.n_test == x_all.shape[0]
  again = load_libsvm(p, seed=0)
  np.testing.assert_array_equal(again.x_test, ds.x_test)
  other = load_libsvm(p, seed=1)
  assert not np.array_equal(other.y_test, ds.y_test) or not np.array_equal(other.x_test, ds.x_test)
  json.dumps(ds.info)
  assert "40/10" in ds.info["split"]


def test_load_libsvm_folder_pair(tmp_path):
  (tmp_path / "toy").write_text("3 1:0 2:5\n"
                                "1 1:10 2:5\n"
                                "3 1:5 2:5\n")
  (tmp_path / "toy.t").write_text("2 1:20 4:1\n"
                                  "1 1:-5\n")
  (tmp_path / "README").write_text("not part of a pair\n")
  ds = load_dataset("libsvm", tmp_path)
  assert ds.name == "libsvm:toy"
  assert (ds.n_train, ds.n_test) == (3, 2)
  assert ds.num_features == 4  # max over both files
  assert ds.info["label_values"] == [1, 2, 3] and ds.num_classes == 3
  np.testing.assert_array_equal(ds.y_train, [2, 0, 2])
  np.testing.assert_array_equal(ds.y_test, [1, 0])
  # Feature 1: train min 0, max 10 -> test 20 clips to 1, -5 clips to 0.
  np.testing.assert_allclose(ds.x_train[:, 0], [0, 1, 0.5])
  np.testing.assert_allclose(ds.x_test[:, 0], [1, 0])
  # Feature 2 and 4 are constant on train -> 0 everywhere.
  assert not ds.x_train[:, 1].any() and not ds.x_test[:, 1].any()
  assert not ds.x_test[:, 3].any()


def test_load_libsvm_folder_errors(tmp_path):
  with pytest.raises(DataError, match="found 0"):
    load_libsvm(tmp_path)
  for name in ("a", "a.t", "b", "b.t"):
    (tmp_path / name).write_text("1 1:1\n2 1:2\n")
  with pytest.raises(DataError, match=r"found 2 \(a \+ a.t, b \+ b.t\)") as e:
    load_libsvm(tmp_path)
  assert str(e.value).startswith(str(tmp_path) + ":")
  with pytest.raises(DataError, match="no such"):
    load_libsvm(tmp_path / "missing")


def test_load_libsvm_degenerate(tmp_path):
  p = tmp_path / "one"
  p.write_text("1 1:1\n")
  with pytest.raises(DataError, match="need at least 2"):
    load_libsvm(p)
  p.write_text("1 1:1\n1 1:2\n1 1:3\n")
  with pytest.raises(DataError, match="only one distinct label"):
    load_libsvm(p)


def test_load_libsvm_refuses_a_file_without_features(tmp_path):
  path = tmp_path / "labels_only"
  path.write_text("1\n0\n1\n0\n")
  with pytest.raises(DataError, match="no features"):
    load_libsvm(path)


def test_integer_valued_labels_are_written_as_integers():
  """config.json's label values: an integer-valued float as an int, any other as a float."""
  from fedsim.data.libsvm import _json_number
  assert _json_number(3.0) == 3 and isinstance(_json_number(3.0), int)
  assert _json_number(np.float64(-1.0)) == -1 and isinstance(_json_number(np.float64(-1.0)), int)
  assert _json_number(2.5) == 2.5 and isinstance(_json_number(2.5), float)
