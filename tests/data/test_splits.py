"""Train/test splits of every loader and of the tasks built on them (issue 15).

Each file the tests write encodes its row's index in its content, so a loaded
example can be traced back to the row it came from; the embedded digits have
1,797 distinct images, traced back by content. Checked: train and test are
disjoint and together are every row once, sizes are as documented, labels stay
with their rows, and the split is a function of the seed (the documented rule
re-derived in NumPy where the rule is ours).
"""

import numpy as np
import pytest
import sklearn.datasets

from fedsim.data import load_dataset, load_digits, load_libsvm, load_mnist
from fedsim.tasks import make_task
from tests.data.test_mnist import REAL_MNIST, idx_bytes

# --------------------------------------------------------------------------- helpers


def _ids_by_content(rows, reference):
  """Index into ``reference`` (k, ...) of each row of ``rows`` (exact match; every
  reference row distinct)."""
  where = {r.tobytes(): i for i, r in enumerate(np.ascontiguousarray(reference))}
  assert len(where) == len(reference), "reference rows must be distinct"
  return np.array([where[r.tobytes()] for r in np.ascontiguousarray(rows)], np.int64)


def _assert_disjoint_cover(ids_train, ids_test, n):
  assert np.intersect1d(ids_train, ids_test).size == 0, "train and test overlap"
  assert np.unique(ids_train).size == ids_train.size and np.unique(ids_test).size == ids_test.size
  np.testing.assert_array_equal(np.sort(np.concatenate([ids_train, ids_test])), np.arange(n))


# --------------------------------------------------------------------------- digits


def _digits_reference():
  bunch = sklearn.datasets.load_digits()
  return (bunch.images.astype(np.float64) / 16.0).astype(np.float32), bunch.target


@pytest.mark.parametrize("seed, fraction, n_test", [(0, 0.2, 360), (3, 0.2, 360), (0, 0.35, 629)])
def test_digits_split_disjoint_sized_stratified(seed, fraction, n_test):
  # n_test = ceil(1797 f) (sklearn rounds the test share up): 360 at 0.2, 629 at 0.35.
  x_all, y_all = _digits_reference()
  ds = load_digits(seed=seed, test_fraction=fraction)
  ids_train, ids_test = _ids_by_content(ds.x_train, x_all), _ids_by_content(ds.x_test, x_all)
  _assert_disjoint_cover(ids_train, ids_test, 1797)
  assert (ds.n_train, ds.n_test) == (1797 - n_test, n_test)
  assert (ds.info["n_train"], ds.info["n_test"]) == (1797 - n_test, n_test)
  # Labels travel with their images; both splits keep the file order.
  np.testing.assert_array_equal(ds.y_train, y_all[ids_train])
  np.testing.assert_array_equal(ds.y_test, y_all[ids_test])
  assert np.all(np.diff(ids_train) > 0) and np.all(np.diff(ids_test) > 0)
  # Stratified: each class's test count is within 1 of f times its size.
  per_class = np.bincount(y_all, minlength=10)
  assert np.all(np.abs(np.bincount(ds.y_test, minlength=10) - fraction * per_class) <= 1)
  # Same seed, same split (also through load_dataset); another seed, another split.
  again = load_dataset("digits", seed=seed) if fraction == 0.2 else load_digits(seed, fraction)
  np.testing.assert_array_equal(_ids_by_content(again.x_test, x_all), ids_test)
  other = load_digits(seed=seed + 1, test_fraction=fraction)
  assert not np.array_equal(_ids_by_content(other.x_test, x_all), ids_test)


@pytest.mark.parametrize("seed", [0, 1, 7, 123])
@pytest.mark.parametrize("fraction", [0.2, 0.1, 0.35, 0.73])
def test_digits_split_is_sklearns_train_test_split(seed, fraction):
  # The loader splits without importing scikit-learn; its indices are train_test_split's, sorted.
  import sklearn.model_selection

  from fedsim.data.digits import stratified_split
  _, y_all = _digits_reference()
  ref_train, ref_test = sklearn.model_selection.train_test_split(
      np.arange(len(y_all)), test_size=fraction, stratify=y_all, random_state=seed)
  train, test = stratified_split(y_all.astype(np.int32), fraction, seed)
  np.testing.assert_array_equal(train, np.sort(ref_train))
  np.testing.assert_array_equal(test, np.sort(ref_test))
  ds = load_digits(seed=seed, test_fraction=fraction)
  x_all, _ = _digits_reference()
  np.testing.assert_array_equal(ds.x_test, x_all[np.sort(ref_test)])


def test_loading_digits_does_not_import_sklearn():
  import subprocess
  import sys
  code = ("import sys; from fedsim.data import load_dataset; load_dataset('digits'); "
          "print(sorted(m for m in sys.modules if m.split('.')[0] in ('sklearn', 'scipy', 'pandas')))")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
  assert out.stdout.strip() == "[]"


# --------------------------------------------------------------------------- LIBSVM

BITS = 7  # row ids 0..127 in binary features 1..7; feature 8 is noise


def _write_libsvm(path, ids, labels):
  """Row with id i: features 1..BITS are the bits of i (0/1; a 0 is written explicitly
  or omitted alternately), feature BITS+1 a value in [0, 1]."""
  lines = []
  for r, (i, lab) in enumerate(zip(ids, labels)):
    feats = [f"{b + 1}:{(i >> b) & 1}" for b in range(BITS) if (i >> b) & 1 or (r + b) % 2]
    lines.append(f"{lab} " + " ".join(feats + [f"{BITS + 1}:{(i * 37 % 101) / 100:.2f}"]))
  path.write_text("\n".join(lines) + "\n")


def _libsvm_ids(x):
  """Row ids from the bit features (scaled features are exactly 0/1 when every bit takes
  both values on the training split)."""
  bits = x[:, :BITS]
  assert np.all((bits == 0) | (bits == 1))
  return (bits.astype(np.int64) << np.arange(BITS)).sum(1)


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_libsvm_single_file_split_matches_documented_rule(tmp_path, seed):
  # 80/20 by numpy.random.default_rng(seed).permutation(n): test = perm[:round(0.2 n)].
  n = 100
  labels = np.array(["-1", "+1", "2"])[np.arange(n) % 3]
  path = tmp_path / "toy"
  _write_libsvm(path, np.arange(n), labels)
  ds = load_libsvm(path, seed=seed)
  ids_train, ids_test = _libsvm_ids(ds.x_train), _libsvm_ids(ds.x_test)
  _assert_disjoint_cover(ids_train, ids_test, n)
  perm = np.random.default_rng(seed).permutation(n)
  np.testing.assert_array_equal(ids_test, np.sort(perm[:20]))
  np.testing.assert_array_equal(ids_train, np.sort(perm[20:]))
  assert (ds.n_train, ds.n_test) == (80, 20) == (ds.info["n_train"], ds.info["n_test"])
  # Labels stay with their rows (sorted raw values -1 < +1 < 2 -> classes 0, 1, 2).
  cls = {"-1": 0, "+1": 1, "2": 2}
  np.testing.assert_array_equal(ds.y_train, [cls[labels[i]] for i in ids_train])
  np.testing.assert_array_equal(ds.y_test, [cls[labels[i]] for i in ids_test])
  # load_dataset passes the seed through.
  via = load_dataset("libsvm", path, seed=seed)
  np.testing.assert_array_equal(_libsvm_ids(via.x_test), ids_test)


@pytest.mark.parametrize("n, n_test", [(2, 1), (3, 1), (4, 1), (8, 2), (13, 3), (17, 3), (23, 5)])
def test_libsvm_single_file_sizes(tmp_path, n, n_test):
  # n_test = min(max(1, round(0.2 n)), n - 1); labels are the row ids, so y identifies rows.
  path = tmp_path / "small"
  path.write_text("".join(f"{i} 1:{i % 2} 2:{(i // 2) % 2}\n" for i in range(n)))
  ds = load_libsvm(path, seed=5)
  assert (ds.n_train, ds.n_test) == (n - n_test, n_test)
  _assert_disjoint_cover(ds.y_train.astype(np.int64), ds.y_test.astype(np.int64), n)
  perm = np.random.default_rng(5).permutation(n)
  np.testing.assert_array_equal(ds.y_test, np.sort(perm[:n_test]))


def test_libsvm_folder_pair_keeps_the_files_split(tmp_path):
  # <name> is the training split, <name>.t the test split, row order kept, nothing mixed.
  train_ids, test_ids = np.arange(0, 70), np.arange(70, 100)
  _write_libsvm(tmp_path / "pair", train_ids, np.where(train_ids % 2, "1", "-1"))
  _write_libsvm(tmp_path / "pair.t", test_ids, np.where(test_ids % 2, "1", "-1"))
  ds = load_libsvm(tmp_path)
  np.testing.assert_array_equal(_libsvm_ids(ds.x_train), train_ids)
  np.testing.assert_array_equal(_libsvm_ids(ds.x_test), test_ids)
  np.testing.assert_array_equal(ds.y_test, test_ids % 2)
  # The seed plays no part in a given split.
  np.testing.assert_array_equal(load_libsvm(tmp_path, seed=9).x_test, ds.x_test)


# --------------------------------------------------------------------------- MNIST


def _write_idx_split(root, prefix, ids, labels):
  """Image of row id i: pixel (0, 0) = i mod 256, pixel (0, 1) = i // 256, the rest 7."""
  img = np.full((len(ids), 28, 28), 7, np.uint8)
  img[:, 0, 0], img[:, 0, 1] = np.asarray(ids) % 256, np.asarray(ids) // 256
  (root / f"{prefix}-images-idx3-ubyte").write_bytes(idx_bytes(img))
  (root / f"{prefix}-labels-idx1-ubyte").write_bytes(idx_bytes(np.asarray(labels)))


def _mnist_ids(x):
  px = np.rint(x[:, 0, :2] * 255).astype(np.int64)
  return px[:, 0] + 256 * px[:, 1]


@pytest.mark.parametrize("seed", [0, 3])
def test_mnist_t10k_only_split_disjoint_stratified(tmp_path, seed):
  # n = 300 t10k images, labels i mod 10 (30 a class): test n // 5 = 60, 6 a class.
  n = 300
  labels = np.arange(n) % 10
  _write_idx_split(tmp_path, "t10k", np.arange(n), labels)
  ds = load_mnist(tmp_path, seed=seed)
  ids_train, ids_test = _mnist_ids(ds.x_train), _mnist_ids(ds.x_test)
  _assert_disjoint_cover(ids_train, ids_test, n)
  assert (ds.n_train, ds.n_test) == (240, 60) == (ds.info["n_train"], ds.info["n_test"])
  np.testing.assert_array_equal(ds.y_train, labels[ids_train])
  np.testing.assert_array_equal(ds.y_test, labels[ids_test])
  np.testing.assert_array_equal(np.bincount(ds.y_test, minlength=10), np.full(10, 6))
  assert np.all(np.diff(ids_train) > 0) and np.all(np.diff(ids_test) > 0)
  again = load_dataset("mnist", tmp_path, seed=seed)
  np.testing.assert_array_equal(_mnist_ids(again.x_test), ids_test)
  other = load_mnist(tmp_path, seed=seed + 1)
  assert not np.array_equal(_mnist_ids(other.x_test), ids_test)


def test_mnist_official_split_keeps_the_files(tmp_path):
  # train-* is the training split and t10k-* the test split, in file order; ids 0..49 and
  # 1000..1019 so that a swap or a mix would show.
  train_ids, test_ids = np.arange(50), np.arange(1000, 1020)
  _write_idx_split(tmp_path, "train", train_ids, train_ids % 10)
  _write_idx_split(tmp_path, "t10k", test_ids, test_ids % 10)
  ds = load_mnist(tmp_path, seed=4)
  np.testing.assert_array_equal(_mnist_ids(ds.x_train), train_ids)
  np.testing.assert_array_equal(_mnist_ids(ds.x_test), test_ids)
  np.testing.assert_array_equal(ds.y_test, test_ids % 10)


@pytest.mark.skipif(not (REAL_MNIST / "t10k-labels-idx1-ubyte").exists()
                    and not (REAL_MNIST / "t10k-labels-idx1-ubyte.gz").exists(),
                    reason="real MNIST files not present")
def test_real_mnist_t10k_split_disjoint_by_content():
  ds = load_mnist(REAL_MNIST)
  tr = {r.tobytes() for r in ds.x_train}
  te = {r.tobytes() for r in ds.x_test}
  # Every image of the 10,000 is distinct, so content equality would mean the same row.
  assert len(tr) + len(te) == ds.n_train + ds.n_test == 10_000
  assert not tr & te


# --------------------------------------------------------------------------- tasks


@pytest.mark.parametrize("partition", ["iid", "dirichlet", "shards", "quantity", "homo_ratio"])
def test_classification_task_clients_cover_train_and_never_see_test(partition):
  # make_task: the split seed is fixed (0); the run seed drives the partition only. Every
  # training image is in exactly one client's real rows, the evaluation set is the test
  # split, and no client row is a test image.
  x_all, y_all = _digits_reference()
  ref = load_digits(seed=0)
  train_ids = _ids_by_content(ref.x_train, x_all)
  test_ids = _ids_by_content(ref.x_test, x_all)
  for seed in (0, 2):
    task = make_task("softmax", num_clients=6, seed=seed, dataset="digits", partition=partition,
                     dirichlet_alpha=0.5, shards_per_client=2)
    c = task.client_data
    mask = np.asarray(c["mask"])
    rows = np.asarray(c["x"])[mask]
    client_ids = _ids_by_content(rows, x_all)
    np.testing.assert_array_equal(np.sort(client_ids), np.sort(train_ids))  # each once
    assert np.intersect1d(client_ids, test_ids).size == 0
    np.testing.assert_array_equal(np.asarray(c["y"])[mask], y_all[client_ids])
    np.testing.assert_array_equal(np.asarray(task.client_sizes), mask.sum(1))
    ev = task.data["eval"]
    np.testing.assert_array_equal(_ids_by_content(np.asarray(ev["x"]), x_all), test_ids)
    np.testing.assert_array_equal(np.asarray(ev["y"]), y_all[test_ids])
    # Padding rows are zero and masked out.
    assert not np.any(np.asarray(c["x"])[~mask])


def test_metric_opt_class_shards_reference():
  # [code] generate_noniid_data: per class (ascending), shuffle, cut into k = max(1, int(P N))
  # near-equal shards, deal them to clients in the order of repeated permutations of N.
  from fedsim.tasks.metric_opt import class_shards
  labels = np.random.default_rng(0).integers(0, 6, 230)
  for n_clients, portion, seed in [(4, 0.5, 0), (5, 0.3, 2), (3, 1.0, 1)]:
    gen = np.random.default_rng(seed)
    k = max(1, int(portion * n_clients))
    queue, want = [], [[] for _ in range(n_clients)]
    for c in range(6):
      idx = gen.permutation(np.flatnonzero(labels == c))
      sizes = [len(idx) // k + (j < len(idx) % k) for j in range(k)]
      start = 0
      for size in sizes:
        if not queue:
          queue = list(gen.permutation(n_clients))
        want[queue.pop(0)].extend(idx[start:start + size].tolist())
        start += size
    got = class_shards(labels, n_clients, portion, seed)
    assert len(got) == n_clients
    for g, w in zip(got, want):
      np.testing.assert_array_equal(g, np.sort(w))
    _assert_disjoint_cover(np.concatenate(got[:1]), np.concatenate(got[1:]), labels.size)
