"""Property tests for fedsim.data.partitions."""

import importlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedsim.core.errors import ConfigError

# ``fedsim.data.partitions`` the attribute is the dispatcher function; fetch the module.
P = importlib.import_module("fedsim.data.partitions")

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@st.composite
def problems(draw, max_n=300):
  """(labels, num_clients, seed) with 1 <= num_clients <= n."""
  n = draw(st.integers(1, max_n))
  num_classes = draw(st.integers(1, 10))
  label_seed = draw(st.integers(0, 2**16))
  labels = np.random.default_rng(label_seed).integers(0, num_classes, n)
  num_clients = draw(st.integers(1, min(n, 40)))
  seed = draw(st.integers(0, 2**31 - 1))
  return labels, num_clients, seed


def assert_valid(parts, n, num_clients):
  assert len(parts) == num_clients
  assert all(p.dtype == np.int64 and p.ndim == 1 for p in parts)
  assert all(p.size > 0 for p in parts), [p.size for p in parts]
  allidx = np.concatenate(parts)
  assert allidx.size == n  # disjoint (no repeats) given completeness below
  np.testing.assert_array_equal(np.sort(allidx), np.arange(n))


def assert_same(a, b):
  assert len(a) == len(b)
  for x, y in zip(a, b):
    np.testing.assert_array_equal(x, y)


@SETTINGS
@given(problems())
def test_iid_properties(problem):
  labels, k, seed = problem
  parts = P.iid(labels, k, seed)
  assert_valid(parts, labels.size, k)
  sizes = [p.size for p in parts]
  assert max(sizes) - min(sizes) <= 1
  assert_same(parts, P.iid(labels, k, seed))


@SETTINGS
@given(problems(), st.sampled_from([0.05, 0.3, 1.0, 10.0, 100.0]))
def test_dirichlet_properties(problem, alpha):
  labels, k, seed = problem
  try:
    parts = P.dirichlet(labels, k, alpha, seed)
  except ConfigError as e:
    # Only possible when alpha is too small for this many clients.
    assert e.flag == "dirichlet_alpha"
    assert "dirichlet_alpha" in str(e)
    return
  assert_valid(parts, labels.size, k)
  assert_same(parts, P.dirichlet(labels, k, alpha, seed))


@SETTINGS
@given(problems(), st.integers(1, 5))
def test_shards_properties(problem, spc):
  labels, k, seed = problem
  if k * spc > labels.size:
    with pytest.raises(ConfigError, match="--shards_per_client"):
      P.shards(labels, k, spc, seed)
    return
  parts = P.shards(labels, k, spc, seed)
  assert_valid(parts, labels.size, k)
  assert_same(parts, P.shards(labels, k, spc, seed))


@SETTINGS
@given(problems(), st.sampled_from(["dirichlet", "lognormal"]),
       st.sampled_from([0.05, 0.5, 5.0]), st.sampled_from([0.0, 0.5, 2.0]))
def test_quantity_properties(problem, law, alpha, sigma):
  labels, k, seed = problem
  parts = P.quantity(labels, k, seed, law=law, alpha=alpha, sigma=sigma)
  assert_valid(parts, labels.size, k)
  assert_same(parts, P.quantity(labels, k, seed, law=law, alpha=alpha, sigma=sigma))


@SETTINGS
@given(problems(), st.sampled_from(P.METHODS))
def test_dispatcher_properties(problem, method):
  labels, k, seed = problem
  kwargs = dict(dirichlet_alpha=1.0, shards_per_client=1)
  try:
    parts = P.partition(labels, k, method, seed, **kwargs)
  except ConfigError as e:
    # Dirichlet may fail to give every client a sample; homo_ratio's label-sorted
    # chunks (torch.chunk sizes) can leave the last client empty on tiny n.
    assert (method, e.flag) in {("dirichlet", "dirichlet_alpha"), ("homo_ratio", "homo_ratio")}
    return
  assert_valid(parts, labels.size, k)
  assert_same(parts, P.partition(labels, k, method, seed, **kwargs))
  assert_same(parts, P.partition(labels, k, method, np.random.default_rng(seed), **kwargs))


def test_different_seeds_differ():
  labels = np.repeat(np.arange(10), 50)
  for method in P.METHODS:
    a = P.partition(labels, 10, method, 0)
    b = P.partition(labels, 10, method, 1)
    assert any(not np.array_equal(x, y) for x, y in zip(a, b)), method


def test_dirichlet_skew_grows_as_alpha_shrinks():
  labels = np.repeat(np.arange(10), 200)  # 2000 samples, 10 classes
  def skew(alpha):
    return np.mean([P.label_skew(labels, P.dirichlet(labels, 20, alpha, s), 10)
                    for s in range(5)])
  high, low = skew(100.0), skew(0.1)
  assert high < 0.15, high
  assert low > 0.5, low
  assert low > high + 0.3


def test_label_skew_extremes():
  labels = np.repeat(np.arange(4), 25)
  # Each client holds one class: TV distance 1 - 1/4.
  one_class = [np.flatnonzero(labels == c) for c in range(4)]
  assert P.label_skew(labels, one_class, 4) == pytest.approx(0.75)
  # Each client a perfect stratified slice: 0.
  stratified = [np.flatnonzero((np.arange(100) // 5) % 5 == k) for k in range(5)]
  labels2 = np.tile(np.arange(5), 20)
  assert P.label_skew(labels2, stratified, 5) == pytest.approx(0.0)


@SETTINGS
@given(st.integers(2, 10), st.integers(1, 4), st.integers(1, 6), st.integers(0, 1000))
def test_shards_label_count(num_classes, spc, shards_per_class, seed):
  # Balanced classes whose size is a multiple of the shard size.
  num_shards_total = num_classes * shards_per_class
  if num_shards_total % spc:
    return
  num_clients = num_shards_total // spc
  shard_size = 7
  labels = np.random.default_rng(seed).permutation(
      np.repeat(np.arange(num_classes), shards_per_class * shard_size))
  parts = P.shards(labels, num_clients, spc, seed)
  assert_valid(parts, labels.size, num_clients)
  for p in parts:
    assert p.size == spc * shard_size
    assert np.unique(labels[p]).size <= spc


def test_shards_mcmahan_setting():
  labels = np.repeat(np.arange(10), 600)  # MNIST-like, 1/10 scale
  parts = P.shards(labels, 10, 2, 0)
  assert all(np.unique(labels[p]).size <= 2 for p in parts)


def test_quantity_is_unequal_but_label_iid():
  labels = np.repeat(np.arange(10), 500)
  parts = P.quantity(labels, 20, 0, law="lognormal", sigma=1.5)
  sizes = np.array([p.size for p in parts])
  assert sizes.max() > 3 * sizes.min()
  big = parts[int(np.argmax(sizes))]
  assert np.unique(labels[big]).size == 10
  equal = P.quantity(labels, 20, 0, law="lognormal", sigma=0.0)
  assert max(p.size for p in equal) - min(p.size for p in equal) <= 1


# --- error cases -----------------------------------------------------------

@pytest.mark.parametrize("alpha", [0.0, -1.0, float("nan"), float("inf")])
def test_dirichlet_bad_alpha(alpha):
  with pytest.raises(ConfigError, match=r"^--dirichlet_alpha: must be > 0; got") as e:
    P.dirichlet(np.zeros(10, int), 2, alpha, 0)
  assert e.value.flag == "dirichlet_alpha"


def test_dirichlet_impossible():
  # One class and a tiny alpha: nearly all mass on one client every draw.
  labels = np.zeros(20, int)
  with pytest.raises(ConfigError, match="--dirichlet_alpha") as e:
    P.dirichlet(labels, 10, 1e-4, 0)
  assert "10 clients" in str(e.value)
  assert "raise --dirichlet_alpha" in str(e.value)


@pytest.mark.parametrize("method", P.METHODS)
def test_too_many_clients(method):
  with pytest.raises(ConfigError, match=r"^--num_clients: 11 clients but only 10 samples"):
    P.partition(np.arange(10) % 2, 11, method, 0)


@pytest.mark.parametrize("num_clients", [0, -3, 2.5])
def test_bad_num_clients(num_clients):
  with pytest.raises(ConfigError, match="--num_clients"):
    P.iid(np.arange(10), num_clients, 0)


def test_shards_errors():
  with pytest.raises(ConfigError, match=r"^--shards_per_client: 5 clients x 3 shards = 15"):
    P.shards(np.arange(10), 5, 3, 0)
  with pytest.raises(ConfigError, match=r"^--shards_per_client: must be"):
    P.shards(np.arange(10), 5, 0, 0)


def test_quantity_errors():
  with pytest.raises(ConfigError,
                     match=r"^--quantity_law: unknown 'zipf'; accepted: dirichlet, lognormal"):
    P.quantity(np.arange(10), 2, 0, law="zipf")
  with pytest.raises(ConfigError, match=r"^--quantity_sigma"):
    P.quantity(np.arange(10), 2, 0, law="lognormal", sigma=-1.0)
  with pytest.raises(ConfigError, match=r"^--dirichlet_alpha"):
    P.quantity(np.arange(10), 2, 0, law="dirichlet", alpha=0.0)


def test_unknown_partition():
  with pytest.raises(ConfigError) as e:
    P.partition(np.arange(10), 2, "pathological", 0)
  assert str(e.value) == ("--partition: unknown 'pathological'; "
                          "accepted: iid, dirichlet, shards, quantity, homo_ratio")
  assert e.value.flag == "partition"


def test_seed_none_rejected():
  with pytest.raises(TypeError):
    P.iid(np.arange(10), 2, None)


# --- independent NumPy references (issue 15) -------------------------------
# Each reference re-derives a partition from the documented rule with its own
# ``np.random.default_rng(seed)`` making the same draws in the same order; the
# partitioner must reproduce it exactly. The statistical tests below check the
# laws themselves (without the draw order).

def _sorted_parts(parts):
  return [np.sort(np.asarray(p, np.int64)) for p in parts]


def ref_iid(labels, n_clients, seed):
  """McMahan et al. 2017: a uniform permutation cut into N near-equal parts."""
  perm = np.random.default_rng(seed).permutation(len(labels))
  sizes = [len(labels) // n_clients + (k < len(labels) % n_clients) for k in range(n_clients)]
  bounds = np.concatenate([[0], np.cumsum(sizes)])
  return _sorted_parts([perm[bounds[k]:bounds[k + 1]] for k in range(n_clients)])


def ref_dirichlet(labels, n_clients, alpha, seed):
  """Per class c (ascending): shuffle its samples, draw p ~ Dir(alpha 1_N), give client k
  the samples at positions [floor(P_{k-1} n_c), floor(P_k n_c)), P_k = p_1 + ... + p_k."""
  gen = np.random.default_rng(seed)
  while True:
    got = [[] for _ in range(n_clients)]
    for c in sorted(set(labels.tolist())):
      idx = gen.permutation(np.flatnonzero(labels == c))
      p = gen.dirichlet([alpha] * n_clients)
      edges = [0] + [int(np.floor(s * len(idx))) for s in np.cumsum(p)[:-1]] + [len(idx)]
      for k in range(n_clients):
        got[k].extend(idx[edges[k]:edges[k + 1]].tolist())
    if all(got):
      return _sorted_parts(got)


def ref_shards(labels, n_clients, spc, seed):
  """McMahan et al. 2017 Sec. 3: label-sorted order (random ties) cut into N*spc contiguous
  shards (sizes differing by <= 1, larger first); client k gets shards deal[k]."""
  gen = np.random.default_rng(seed)
  perm = gen.permutation(len(labels))
  order = sorted(perm.tolist(), key=lambda i: labels[i])  # Python's sort is stable
  s = n_clients * spc
  sizes = [len(labels) // s + (j < len(labels) % s) for j in range(s)]
  bounds = np.concatenate([[0], np.cumsum(sizes)])
  shard = [order[bounds[j]:bounds[j + 1]] for j in range(s)]
  deal = gen.permutation(s).reshape(n_clients, spc)
  return _sorted_parts([sum((shard[j] for j in row), []) for row in deal]), shard, deal


def ref_quantity_sizes(n, n_clients, q):
  """1 + largest-remainder rounding of q (n - N) (ties to the lower client index)."""
  exact = [qk * (n - n_clients) for qk in q]
  base = [int(np.floor(e)) for e in exact]
  short = (n - n_clients) - sum(base)
  order = sorted(range(n_clients), key=lambda k: (-(exact[k] - base[k]), k))
  for k in order[:short]:
    base[k] += 1
  return [1 + b for b in base]


def ref_quantity(labels, n_clients, seed, law, alpha=0.5, sigma=1.0):
  gen = np.random.default_rng(seed)
  if law == "dirichlet":
    q = gen.dirichlet([alpha] * n_clients)
  else:
    w = gen.lognormal(0.0, sigma, n_clients)
    q = w / w.sum()
  sizes = ref_quantity_sizes(len(labels), n_clients, q / q.sum())
  perm = gen.permutation(len(labels))
  bounds = np.concatenate([[0], np.cumsum(sizes)])
  return _sorted_parts([perm[bounds[k]:bounds[k + 1]] for k in range(n_clients)]), sizes


def ref_homo_ratio(labels, n_clients, s, seed):
  """specs/ffgb.md §3.1: the first n_homo = int(n s) - int(n s) mod N permuted samples in N
  equal IID parts; the rest label-sorted (stable) in chunks of ceil(rest / N)."""
  n = len(labels)
  perm = np.random.default_rng(seed).permutation(n)
  n_homo = int(n * s) - int(n * s) % n_clients
  per = n_homo // n_clients
  rest = sorted(perm[n_homo:].tolist(), key=lambda i: labels[i])
  size = -(-len(rest) // n_clients)
  iid_parts = [perm[k * per:(k + 1) * per].tolist() for k in range(n_clients)]
  sorted_parts = [rest[k * size:(k + 1) * size] for k in range(n_clients)]
  return _sorted_parts([a + b for a, b in zip(iid_parts, sorted_parts)]), iid_parts


CASES = [(np.random.default_rng(11).integers(0, 4, 53), 5),
         (np.repeat(np.arange(3), [30, 7, 12]), 4),
         (np.random.default_rng(12).integers(0, 10, 400), 9)]


@pytest.mark.parametrize("labels, n_clients", CASES)
@pytest.mark.parametrize("seed", [0, 5])
def test_iid_matches_reference(labels, n_clients, seed):
  assert_same(P.iid(labels, n_clients, seed), ref_iid(labels, n_clients, seed))


@pytest.mark.parametrize("labels, n_clients", CASES)
@pytest.mark.parametrize("alpha", [0.1, 1.0, 30.0])
def test_dirichlet_matches_reference(labels, n_clients, alpha):
  for seed in (0, 3):
    got = P.dirichlet(labels, n_clients, alpha, seed)
    assert_valid(got, labels.size, n_clients)
    assert_same(got, ref_dirichlet(labels, n_clients, alpha, seed))
    assert_same(got, P.partition(labels, n_clients, "dirichlet", seed, dirichlet_alpha=alpha))


@pytest.mark.parametrize("labels, n_clients", CASES)
@pytest.mark.parametrize("spc", [1, 2, 3])
def test_shards_matches_reference(labels, n_clients, spc):
  for seed in (0, 4):
    want, shard, deal = ref_shards(labels, n_clients, spc, seed)
    got = P.shards(labels, n_clients, spc, seed)
    assert_same(got, want)
    assert_same(got, P.partition(labels, n_clients, "shards", seed, shards_per_client=spc))
    # Each client holds exactly spc shards; every shard is a block of consecutive samples
    # of the label-sorted order, so its labels are sorted and its size is n/(N spc) +- 1.
    s = n_clients * spc
    for k, p in enumerate(got):
      assert p.size == sum(len(shard[j]) for j in deal[k])
      assert sorted(p.tolist()) == sorted(sum((shard[j] for j in deal[k]), []))
    assert {len(sh) for sh in shard} <= {labels.size // s, labels.size // s + 1}


@pytest.mark.parametrize("labels, n_clients", CASES)
@pytest.mark.parametrize("law, alpha, sigma", [("lognormal", 0.5, 1.0), ("lognormal", 0.5, 2.5),
                                               ("dirichlet", 0.3, 1.0), ("dirichlet", 5.0, 1.0)])
def test_quantity_matches_reference(labels, n_clients, law, alpha, sigma):
  for seed in (0, 2):
    want, sizes = ref_quantity(labels, n_clients, seed, law, alpha, sigma)
    got = P.quantity(labels, n_clients, seed, law=law, alpha=alpha, sigma=sigma)
    assert [p.size for p in got] == sizes and sum(sizes) == labels.size and min(sizes) >= 1
    assert_same(got, want)
    assert_same(got, P.partition(labels, n_clients, "quantity", seed, quantity_law=law,
                                 dirichlet_alpha=alpha, quantity_sigma=sigma))


def test_quantity_largest_remainder_by_hand():
  # n = 10, N = 3: 7 samples to share by q = (0.5, 0.3, 0.2): exact 3.5, 2.1, 1.4 ->
  # floors 3, 2, 1 (6), one left for the largest remainder (0.5, client 0): 4 + 1, 2 + 1, 1 + 1.
  assert ref_quantity_sizes(10, 3, [0.5, 0.3, 0.2]) == [5, 3, 2]
  np.testing.assert_array_equal(P._round_shares(np.array([0.5, 0.3, 0.2]), 7), [4, 2, 1])
  np.testing.assert_array_equal(P._round_shares(np.array([0.2, 0.3, 0.5]), 7), [1, 2, 4])
  # Remainders 0.8, 0.8, 0.4 (2.8, 2.8, 1.4 of 7): floors 2, 2, 1 (5); two left go to clients 0, 1.
  np.testing.assert_array_equal(P._round_shares(np.array([0.4, 0.4, 0.2]), 7), [3, 3, 1])


@pytest.mark.parametrize("labels, n_clients", CASES)
@pytest.mark.parametrize("s", [0.0, 0.1, 0.5, 1.0])
def test_homo_ratio_matches_reference(labels, n_clients, s):
  for seed in (0, 6):
    want, iid_parts = ref_homo_ratio(labels, n_clients, s, seed)
    if min(p.size for p in want) == 0:
      with pytest.raises(ConfigError, match="--homo_ratio"):
        P.homo_ratio(labels, n_clients, s, seed)
      continue
    got = P.homo_ratio(labels, n_clients, s, seed)
    assert_valid(got, labels.size, n_clients)
    assert_same(got, want)
    assert_same(got, P.partition(labels, n_clients, "homo_ratio", seed, homo_ratio_s=s))
    # The IID share: N equal parts totalling int(n s) rounded down to a multiple of N.
    n_homo = int(labels.size * s) - int(labels.size * s) % n_clients
    assert sum(len(a) for a in iid_parts) == n_homo
    assert {len(a) for a in iid_parts} == {n_homo // n_clients}


def test_homo_ratio_structure_without_rng():
  # s = 0: every client's labels form one block of the sorted labels, sizes ceil(n/N) with
  # the remainder last: n = 22, N = 4 -> 6, 6, 6, 4.
  labels = np.random.default_rng(0).integers(0, 5, 22)
  parts = P.homo_ratio(labels, 4, 0.0, 1)
  assert [p.size for p in parts] == [6, 6, 6, 4]
  blocks = [np.sort(labels[p]) for p in parts]
  np.testing.assert_array_equal(np.concatenate(blocks), np.sort(labels))
  # s = 1 with N | n: all IID, equal sizes n / N.
  parts = P.homo_ratio(labels, 2, 1.0, 1)
  assert [p.size for p in parts] == [11, 11]
  # s = 0.5, n = 22, N = 4: n_homo = 11 - 3 = 8 (2 IID per client), 14 sorted in chunks of 4.
  parts = P.homo_ratio(labels, 4, 0.5, 1)
  assert [p.size for p in parts] == [2 + 4, 2 + 4, 2 + 4, 2 + 2]


@pytest.mark.parametrize("s", [-0.1, 1.5])
def test_homo_ratio_bad_s(s):
  with pytest.raises(ConfigError, match=r"^--homo_ratio: must be in \[0, 1\]"):
    P.homo_ratio(np.arange(10), 2, s, 0)


def test_homo_ratio_empty_client_rejected():
  # n = 9, N = 4, s = 0: chunks of ceil(9/4) = 3 -> 3, 3, 3, 0: the last client is empty.
  with pytest.raises(ConfigError, match="--homo_ratio.*leaves a client empty"):
    P.homo_ratio(np.arange(9) % 3, 4, 0.0, 0)


def test_dirichlet_prior_mean_and_variance_over_seeds():
  # Under Dir(alpha 1_N) each client's share p_k of a class has mean 1/N and variance
  # (1/N)(1 - 1/N)/(N alpha + 1). With n_c = 2000 samples a class, the realised share
  # floor(P_k n_c)/n_c differs from p_k by < 1/n_c. 80 seeds x 4 classes x 5 clients.
  n_clients, n_c, classes = 5, 2000, 4
  labels = np.repeat(np.arange(classes), n_c)
  for alpha in (0.3, 3.0):
    shares = []
    for seed in range(80):
      parts = P.dirichlet(labels, n_clients, alpha, seed)
      shares.append([np.bincount(labels[p], minlength=classes) / n_c for p in parts])
    shares = np.asarray(shares)  # (seeds, N, C)
    var = (1 / n_clients) * (1 - 1 / n_clients) / (n_clients * alpha + 1)
    # Each client's mean share: 80 x 4 draws, 4 standard errors sqrt(var / 320).
    np.testing.assert_allclose(shares.mean(axis=(0, 2)), 1 / n_clients,
                               atol=4 * np.sqrt(var / (shares.shape[0] * classes)))
    # Variance within 25% (alpha = 0.3: 0.064; alpha = 3: 0.01).
    np.testing.assert_allclose(shares.var(), var, rtol=0.25)


def test_dirichlet_small_alpha_few_labels_per_client():
  # 10 classes x 100 samples over 10 clients: alpha = 0.01 puts almost all of a class on one
  # client (E[#clients with >= 5% of a class] ~ 1), alpha = 100 spreads every class.
  labels = np.repeat(np.arange(10), 100)
  def labels_per_client(alpha):
    out = []
    for seed in range(10):
      for p in P.dirichlet(labels, 10, alpha, seed):
        counts = np.bincount(labels[p], minlength=10)
        out.append(np.sum(counts >= 5))
    return np.mean(out)
  assert labels_per_client(0.01) < 2.0
  assert labels_per_client(100.0) == 10.0


def test_dirichlet_redraws_exactly_max_attempts_times_before_refusing(monkeypatch):
  """A draw that leaves a client empty is redrawn, MAX_DIRICHLET_ATTEMPTS = 100 times in all, then
  refused naming dirichlet_alpha (proportions forced to put a one-class dataset on client 0 only)."""
  calls = []

  def all_on_first(gen, alpha, n):
    calls.append(alpha)
    return np.eye(n)[0]
  monkeypatch.setattr(P, "_dirichlet_proportions", all_on_first)
  with pytest.raises(ConfigError, match="dirichlet_alpha"):
    P.dirichlet(np.zeros(10, int), 2, 0.5, 0)
  assert len(calls) == 100 == P.MAX_DIRICHLET_ATTEMPTS


def test_quantity_defaults_are_alpha_half_and_sigma_one():
  """quantity's defaults (alpha = 0.5 for the Dirichlet law, sigma = 1 for the lognormal one) give the
  partitions of those values passed explicitly."""
  labels = np.arange(60) % 3
  assert_same(P.quantity(labels, 5, 1, law="dirichlet"), P.quantity(labels, 5, 1, law="dirichlet", alpha=0.5))
  assert_same(P.quantity(labels, 5, 1), P.quantity(labels, 5, 1, law="lognormal", sigma=1.0))
