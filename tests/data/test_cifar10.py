"""CIFAR-10 binary-release loader, on tiny batch files written here."""

import json
import math
from pathlib import Path

import jax
import numpy as np
import pytest

from fedsim.core.errors import ConfigError, DataError
from fedsim.data import DATASETS, load_cifar10, load_dataset, read_cifar10_batch
from fedsim.data.cifar10 import FOLDER, TEST_FILE, TRAIN_FILES

REAL_CIFAR10 = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "cifar10"
RECORDS = 3  # per tiny batch file


def records(labels, seed: int) -> tuple[bytes, np.ndarray]:
  """Binary records with the given labels; returns (bytes, pixels (n, 3, 32, 32) uint8 as written)."""
  rng = np.random.default_rng(seed)
  pixels = rng.integers(0, 256, (len(labels), 3, 32, 32), dtype=np.uint8)
  blob = b"".join(bytes([lab]) + img.tobytes() for lab, img in zip(labels, pixels))
  return blob, pixels


def make_cifar_dir(folder: Path) -> dict:
  """Writes data_batch_1..5.bin and test_batch.bin with RECORDS records each; returns what was written."""
  folder.mkdir(parents=True, exist_ok=True)
  written = {}
  for i, name in enumerate(TRAIN_FILES + (TEST_FILE,)):
    labels = [(i * RECORDS + j) % 10 for j in range(RECORDS)]
    blob, pixels = records(labels, seed=i)
    (folder / name).write_bytes(blob)
    written[name] = (np.array(labels), pixels)
  return written


def test_record_layout_channel_major_to_nhwc(tmp_path):
  # One record: label 7, R channel byte k = 5 * 32 + 9 (row 5, col 9) set to 200, G byte at
  # (row 0, col 31) 100, B byte at (row 31, col 0) 50; everything else 0.
  pix = np.zeros(3072, np.uint8)
  pix[0 * 1024 + 5 * 32 + 9] = 200
  pix[1 * 1024 + 0 * 32 + 31] = 100
  pix[2 * 1024 + 31 * 32 + 0] = 50
  path = tmp_path / "one.bin"
  path.write_bytes(bytes([7]) + pix.tobytes() + bytes([2]) + bytes(range(256)) * 12)
  images, labels = read_cifar10_batch(path)
  assert images.shape == (2, 32, 32, 3) and images.dtype == np.uint8
  assert images.flags["C_CONTIGUOUS"]
  np.testing.assert_array_equal(labels, [7, 2])
  assert images[0, 5, 9, 0] == 200 and images[0, 0, 31, 1] == 100 and images[0, 31, 0, 2] == 50
  assert int(images[0].sum()) == 350
  # Second record: byte b of the 3072 is (b % 256); byte c*1024 + 32*r + w -> [r, w, c].
  for c, r, w in [(0, 0, 0), (0, 1, 3), (1, 7, 30), (2, 31, 31)]:
    assert images[1, r, w, c] == (c * 1024 + 32 * r + w) % 256


@pytest.mark.parametrize("nested", [False, True])
def test_load_cifar10_tiny(tmp_path, nested):
  folder = tmp_path / FOLDER if nested else tmp_path
  written = make_cifar_dir(folder)
  ds = load_cifar10(tmp_path)  # the parent works when nested
  assert ds.name == "cifar10" and ds.num_classes == 10
  assert ds.x_train.shape == (5 * RECORDS, 32, 32, 3) and ds.x_test.shape == (RECORDS, 32, 32, 3)
  assert ds.x_train.dtype == np.float32 and ds.y_train.dtype == np.int32 and ds.y_test.dtype == np.int32
  assert ds.num_features == 3072 and ds.feature_shape == (32, 32, 3)
  # Training set = batches 1..5 in order; exact pixel values / 255 in NHWC.
  y_train = np.concatenate([written[n][0] for n in TRAIN_FILES])
  np.testing.assert_array_equal(ds.y_train, y_train)
  np.testing.assert_array_equal(ds.y_test, written[TEST_FILE][0])
  chw = np.concatenate([written[n][1] for n in TRAIN_FILES])
  np.testing.assert_array_equal(ds.x_train, chw.transpose(0, 2, 3, 1).astype(np.float32) / np.float32(255))
  np.testing.assert_array_equal(ds.x_test[1, 4, 6, 2], np.float32(written[TEST_FILE][1][1, 2, 4, 6]) / 255)
  assert 0.0 <= ds.x_train.min() and ds.x_train.max() <= 1.0
  assert ds.info["split"].startswith("official") and ds.info["classes"][4] == "deer"
  assert (ds.info["n_train"], ds.info["n_test"]) == (15, 3)
  assert ds.info["data_dir"] == str(folder.resolve())
  assert set(ds.info["files"]) == set(TRAIN_FILES) | {TEST_FILE}
  json.dumps(ds.info)
  # Through the --dataset registry, with either folder.
  assert "cifar10" in DATASETS
  again = load_dataset("cifar10", folder)
  np.testing.assert_array_equal(again.x_test, ds.x_test)


def test_load_cifar10_missing(tmp_path):
  with pytest.raises(DataError) as e:
    load_cifar10(tmp_path)
  msg = str(e.value)
  assert msg.startswith(str(tmp_path) + ":") and "--data_dir" in msg
  assert "data_batch_1.bin" in msg and "test_batch.bin" in msg and "cifar-10-binary.tar.gz" in msg
  with pytest.raises(DataError, match="not a directory"):
    load_cifar10(tmp_path / "absent")
  make_cifar_dir(tmp_path)
  (tmp_path / "data_batch_3.bin").unlink()
  with pytest.raises(DataError, match=r"missing CIFAR-10 file\(s\) data_batch_3.bin;") as e:
    load_cifar10(tmp_path)
  assert "test_batch.bin" not in str(e.value).split(";")[0]
  # The Python (pickle) release is recognised, not read.
  py = tmp_path / "py"
  py.mkdir()
  (py / "data_batch_1").write_bytes(b"\x80\x04pickle")
  with pytest.raises(DataError, match="pickle release"):
    load_cifar10(py)


def test_load_cifar10_truncated_and_bad_label(tmp_path):
  make_cifar_dir(tmp_path)
  path = tmp_path / "data_batch_2.bin"
  blob = path.read_bytes()
  path.write_bytes(blob[:-10])
  with pytest.raises(DataError) as e:
    load_cifar10(tmp_path)
  msg = str(e.value)
  assert msg.startswith(str(path) + ":") and "--data_dir" in msg
  assert f"{len(blob) - 10} bytes is not a multiple of the 3073-byte record" in msg and "truncated" in msg
  path.write_bytes(b"")
  with pytest.raises(DataError, match="empty file"):
    load_cifar10(tmp_path)
  bad = bytearray(blob)
  bad[3073] = 10  # label of record 1
  path.write_bytes(bytes(bad))
  with pytest.raises(DataError, match=r"record 1 \(byte offset 3073\) has label 10; CIFAR-10 labels are 0..9"):
    load_cifar10(tmp_path)
  with pytest.raises(DataError, match="nope.bin"):
    read_cifar10_batch(tmp_path / "nope.bin")


def test_load_dataset_cifar10_without_data_dir_reads_the_cache(tmp_path, monkeypatch):
  monkeypatch.setenv("FEDSIM_DATA", str(tmp_path / "cache"))   # an empty data cache
  with pytest.raises(ConfigError, match=r"^data_dir: dataset='cifar10' is not in the data cache .*"
                     r"fetch cifar10` or give data_dir \(the cifar-10-batches-bin") as e:
    load_dataset("cifar10")
  assert e.value.cli.startswith("--data_dir: --dataset=cifar10 is not in the data cache")
  with pytest.raises(ConfigError, match=r"^data_dir: dataset='fashion_mnist' is not in the data cache"):
    load_dataset("fashion_mnist", "")


@pytest.mark.parametrize("task", ["softmax", "cnn", "lenet"])
def test_task_on_tiny_cifar10(tmp_path, task):
  from fedsim.tasks import make_task
  make_cifar_dir(tmp_path / FOLDER)
  t = make_task(task, dataset="cifar10", data_dir=str(tmp_path), num_clients=2, partition="iid", seed=0)
  assert t.num_clients == 2 and t.info["dataset"] == "cifar10"
  assert t.info["feature_shape"] == [32, 32, 3] and math.prod(t.info["feature_shape"]) == 3072
  assert t.data["clients"]["x"].shape[2:] == (32, 32, 3)
  assert int(t.data["sizes"].sum()) == 5 * RECORDS
  params = t.init_params(jax.random.PRNGKey(0))
  if task == "softmax":
    kernel = params["params"]["Dense_0"]["kernel"]
    assert kernel.shape == (3072, 10)
    metrics = t.evaluate(params, t.data)  # zero init: uniform logits, CE = log 10
    np.testing.assert_allclose(float(metrics["objective"]), math.log(10), rtol=1e-6)
  elif task == "cnn":
    assert params["params"]["Conv_0"]["kernel"].shape == (5, 5, 3, 16)
    assert np.isfinite(float(t.evaluate(params, t.data)["objective"]))
  else:  # FFGB's CIFAR-10 weak learner (App. B.1): 17,090 parameters (specs/ffgb.md §3.1), the
    # same tree as the cnn oracle's learner, so FedAvg trains the network FFGB's oracle fits
    from fedsim.models.weak_learners import weak_learner_cnn
    sizes = jax.tree.map(lambda a: a.shape, params)
    assert sum(math.prod(s) for s in jax.tree.leaves(sizes, is_leaf=lambda x: isinstance(x, tuple))) == 17_090
    learner = weak_learner_cnn(10, (32, 32, 3)).init(jax.random.PRNGKey(0), np.zeros((1, 32, 32, 3), np.float32))
    assert jax.tree.map(lambda a: a.shape, learner) == sizes
    assert params["params"]["Conv_0"]["kernel"].shape == (5, 5, 3, 6)  # 'VALID': 32 -> 28 -> 14 -> 10 -> 5
    assert params["params"]["Dense_0"]["kernel"].shape == (400, 32)
    assert np.isfinite(float(t.evaluate(params, t.data)["objective"]))


def test_lenet_needs_images(tmp_path):
  from fedsim.tasks import make_task
  from tests.data.test_libsvm import write_random
  write_random(tmp_path / "tab", 50, 6, ["-1", "+1"], 0)
  with pytest.raises(ConfigError, match=r"^task: lenet needs image data; libsvm"):
    make_task("lenet", dataset="libsvm", data_dir=str(tmp_path / "tab"), num_clients=2, partition="iid")


def test_finetune_flip_mirrors_width_not_channels(tmp_path):
  from fedsim.tasks.finetune import shift_dataset
  make_cifar_dir(tmp_path)
  ds = load_cifar10(tmp_path)
  flipped = shift_dataset(ds, "flip")
  np.testing.assert_array_equal(flipped.x_train[:, :, ::-1], ds.x_train)
  np.testing.assert_array_equal(flipped.x_train[0, 3, 0, :], ds.x_train[0, 3, 31, :])  # RGB order kept


@pytest.mark.skipif(not REAL_CIFAR10.is_dir(), reason=f"no real CIFAR-10 at {REAL_CIFAR10}")
def test_real_cifar10():
  ds = load_dataset("cifar10", REAL_CIFAR10)
  assert ds.x_train.shape == (50_000, 32, 32, 3) and ds.x_test.shape == (10_000, 32, 32, 3)
  np.testing.assert_array_equal(np.bincount(ds.y_train, minlength=10), np.full(10, 5000))
  np.testing.assert_array_equal(np.bincount(ds.y_test, minlength=10), np.full(10, 1000))
  assert ds.x_train.min() == 0.0 and ds.x_train.max() == 1.0
