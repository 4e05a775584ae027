"""IDX reader and MNIST loader."""

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from fedsim.core.errors import ConfigError, DataError
from fedsim.data import load_dataset, load_fashion_mnist, load_mnist, read_idx

REAL_MNIST = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "mnist"


def idx_bytes(arr: np.ndarray, magic: int | None = None) -> bytes:
  arr = np.asarray(arr, np.uint8)
  if magic is None:
    magic = 0x00000800 | arr.ndim
  header = magic.to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in arr.shape)
  return header + arr.tobytes()


def write(path: Path, data: bytes, gz: bool) -> Path:
  if gz:
    path = path.with_name(path.name + ".gz")
    path.write_bytes(gzip.compress(data))
  else:
    path.write_bytes(data)
  return path


@pytest.mark.parametrize("gz", [False, True])
def test_read_idx_good(tmp_path, gz):
  rng = np.random.default_rng(0)
  images = rng.integers(0, 256, (5, 4, 3), dtype=np.uint8)
  labels = rng.integers(0, 10, 5, dtype=np.uint8)
  pi = write(tmp_path / "img", idx_bytes(images), gz)
  pl = write(tmp_path / "lab", idx_bytes(labels), gz)
  np.testing.assert_array_equal(read_idx(pi), images)
  np.testing.assert_array_equal(read_idx(str(pl)), labels)
  assert read_idx(pi).dtype == np.uint8


@pytest.mark.parametrize("gz", [False, True])
def test_read_idx_wrong_magic(tmp_path, gz):
  data = idx_bytes(np.zeros((2, 2, 2)), magic=0x00000D03)  # float32 type code
  p = write(tmp_path / "bad-magic", data, gz)
  with pytest.raises(DataError, match="bad IDX magic number 0x00000d03") as e:
    read_idx(p)
  assert str(e.value).startswith(str(p) + ":")
  p2 = write(tmp_path / "junk", b"hello world, not idx", gz)
  with pytest.raises(DataError, match="junk"):
    read_idx(p2)


@pytest.mark.parametrize("gz", [False, True])
def test_read_idx_truncated_data(tmp_path, gz):
  data = idx_bytes(np.zeros((3, 4, 4)))[:-5]
  p = write(tmp_path / "short", data, gz)
  with pytest.raises(DataError, match="48 bytes of data but the file has 43 .truncated.") as e:
    read_idx(p)
  assert str(p) in str(e.value)


def test_read_idx_trailing_and_header(tmp_path):
  p = write(tmp_path / "long", idx_bytes(np.zeros(3)) + b"\0", False)
  with pytest.raises(DataError, match="trailing bytes"):
    read_idx(p)
  p = write(tmp_path / "hdr", idx_bytes(np.zeros((3, 4, 4)))[:9], False)
  with pytest.raises(DataError, match="truncated IDX header"):
    read_idx(p)
  p = write(tmp_path / "tiny", b"\0\0", False)
  with pytest.raises(DataError, match="too short"):
    read_idx(p)


def test_read_idx_truncated_gzip_stream(tmp_path):
  blob = gzip.compress(idx_bytes(np.arange(200, dtype=np.uint8) % 7))
  p = tmp_path / "cut.gz"
  p.write_bytes(blob[: len(blob) // 2])
  with pytest.raises(DataError, match="gzip") as e:
    read_idx(p)
  assert str(p) in str(e.value)


def test_read_idx_missing_file(tmp_path):
  with pytest.raises(DataError, match="nope"):
    read_idx(tmp_path / "nope")


def make_mnist_dir(root: Path, n_train: int | None, n_test: int, gz: bool) -> None:
  rng = np.random.default_rng(1)
  root.mkdir(exist_ok=True)
  splits = [("t10k", n_test)] + ([("train", n_train)] if n_train else [])
  for prefix, n in splits:
    write(root / f"{prefix}-images-idx3-ubyte", idx_bytes(rng.integers(0, 256, (n, 28, 28))), gz)
    write(root / f"{prefix}-labels-idx1-ubyte", idx_bytes(np.arange(n) % 10), gz)


@pytest.mark.parametrize("gz", [False, True])
def test_load_mnist_official_split(tmp_path, gz):
  make_mnist_dir(tmp_path, n_train=60, n_test=20, gz=gz)
  ds = load_mnist(tmp_path)
  assert ds.x_train.shape == (60, 28, 28) and ds.x_test.shape == (20, 28, 28)
  assert ds.x_train.dtype == np.float32 and ds.y_train.dtype == np.int32
  assert ds.info["split"].startswith("official")
  assert 0.0 <= ds.x_train.min() and ds.x_train.max() <= 1.0
  json.dumps(ds.info)


def test_load_mnist_t10k_only(tmp_path):
  make_mnist_dir(tmp_path, n_train=None, n_test=100, gz=True)
  ds = load_mnist(tmp_path, seed=3)
  assert (ds.n_train, ds.n_test) == (80, 20)
  assert ds.info["split"].startswith("t10k-only: 80/20") and ds.info["seed"] == 3
  # Stratified: each of the 10 classes has 2 test examples.
  np.testing.assert_array_equal(np.bincount(ds.y_test, minlength=10), np.full(10, 2))
  again = load_mnist(tmp_path, seed=3)
  np.testing.assert_array_equal(ds.x_test, again.x_test)
  other = load_mnist(tmp_path, seed=4)
  assert not np.array_equal(ds.y_test, other.y_test) or not np.array_equal(ds.x_test, other.x_test)


def test_load_mnist_missing(tmp_path):
  with pytest.raises(DataError) as e:
    load_mnist(tmp_path)
  msg = str(e.value)
  assert msg.startswith(str(tmp_path) + ":")
  assert "t10k-images-idx3-ubyte" in msg and "t10k-labels-idx1-ubyte" in msg
  with pytest.raises(DataError, match="not a directory"):
    load_mnist(tmp_path / "absent")
  # Half of the training pair present is an error, not a silent fallback.
  make_mnist_dir(tmp_path, n_train=None, n_test=20, gz=False)
  write(tmp_path / "train-images-idx3-ubyte", idx_bytes(np.zeros((3, 28, 28))), False)
  with pytest.raises(DataError, match="missing MNIST file.s. train-labels-idx1-ubyte"):
    load_mnist(tmp_path)


def test_load_mnist_label_count_mismatch(tmp_path):
  make_mnist_dir(tmp_path, n_train=None, n_test=20, gz=False)
  write(tmp_path / "t10k-labels-idx1-ubyte", idx_bytes(np.zeros(19)), False)
  with pytest.raises(DataError, match="19 labels"):
    load_mnist(tmp_path)


def test_load_dataset_flags(tmp_path, monkeypatch):
  monkeypatch.setenv("FEDSIM_DATA", str(tmp_path / "cache"))   # an empty data cache
  with pytest.raises(ConfigError, match=r"^data_dir: dataset='mnist' is not in the data cache") as e:
    load_dataset("mnist")
  assert e.value.cli.startswith("--data_dir: --dataset=mnist is not in the data cache")
  with pytest.raises(ConfigError, match=r"^data_dir: dataset='libsvm'"):
    load_dataset("libsvm", "")
  with pytest.raises(ConfigError) as e:
    load_dataset("cifar100")
  assert str(e.value) == ("--dataset: unknown 'cifar100' (did you mean 'cifar10'?); accepted: digits, mnist, libsvm, "
                          "fashion_mnist, cifar10")
  make_mnist_dir(tmp_path, n_train=None, n_test=50, gz=False)
  assert load_dataset("mnist", tmp_path).name == "mnist"


@pytest.mark.parametrize("gz", [False, True])
def test_load_fashion_mnist(tmp_path, gz):
  """Fashion-MNIST: MNIST's four IDX file names and format, its own name and provenance."""
  rng = np.random.default_rng(5)
  arrays = {"train": (rng.integers(0, 256, (12, 28, 28)), np.arange(12) % 10),
            "t10k": (rng.integers(0, 256, (4, 28, 28)), np.array([9, 0, 3, 7]))}
  for prefix, (images, labels) in arrays.items():
    write(tmp_path / f"{prefix}-images-idx3-ubyte", idx_bytes(images), gz)
    write(tmp_path / f"{prefix}-labels-idx1-ubyte", idx_bytes(labels), gz)
  ds = load_dataset("fashion_mnist", tmp_path)
  assert ds.name == "fashion_mnist" and ds.num_classes == 10
  assert ds.x_train.shape == (12, 28, 28) and ds.x_test.shape == (4, 28, 28)
  assert ds.x_train.dtype == np.float32 and ds.y_test.dtype == np.int32
  np.testing.assert_array_equal(ds.x_train, arrays["train"][0].astype(np.float32) / np.float32(255))
  np.testing.assert_array_equal(ds.x_test, arrays["t10k"][0].astype(np.float32) / np.float32(255))
  np.testing.assert_array_equal(ds.y_test, [9, 0, 3, 7])
  assert ds.info["source"].startswith("Fashion-MNIST") and ds.info["split"].startswith("official")
  suffix = ".gz" if gz else ""
  assert set(ds.info["files"]) == {f"{p}-{k}" for p in ("train", "t10k")
                                   for k in ("images-idx3-ubyte", "labels-idx1-ubyte")}
  assert all(v["path"].endswith(suffix) for v in ds.info["files"].values())
  json.dumps(ds.info)
  assert load_fashion_mnist(tmp_path).name == "fashion_mnist"
  assert load_mnist(tmp_path).name == "mnist"  # same files, MNIST's name and source
  assert load_mnist(tmp_path).info["source"].startswith("MNIST")
  (tmp_path / f"t10k-labels-idx1-ubyte{suffix}").unlink()
  with pytest.raises(DataError, match=r"missing Fashion-MNIST file\(s\) t10k-labels-idx1-ubyte"):
    load_dataset("fashion_mnist", tmp_path)
  with pytest.raises(ValueError, match="variant"):
    load_mnist(tmp_path, variant="kmnist")


@pytest.mark.skipif(not REAL_MNIST.is_dir(), reason=f"no real MNIST at {REAL_MNIST}")
def test_real_mnist():
  ds = load_dataset("mnist", REAL_MNIST, seed=0)
  assert ds.x_train.shape == (8000, 28, 28) and ds.x_test.shape == (2000, 28, 28)
  assert ds.n_train + ds.n_test == 10_000
  assert ds.num_classes == 10
  assert set(np.unique(ds.y_train)) == set(range(10)) == set(np.unique(ds.y_test))
  assert ds.x_train.dtype == np.float32
  assert ds.x_train.min() == 0.0 and ds.x_train.max() == 1.0
  assert "8000/2000" in ds.info["split"] and ds.info["seed"] == 0
  md5 = {k: v["md5"] for k, v in ds.info["files"].items()}
  assert md5 == {"t10k-images-idx3-ubyte": "9fb629c4189551a2d022fa330f9573f3",
                 "t10k-labels-idx1-ubyte": "ec29112dd5afa0611ce80d1b7f02629c"}
  json.dumps(ds.info)
