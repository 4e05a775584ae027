"""Splitting a dataset over federated clients.

Each partitioner takes ``labels`` (n,) and ``num_clients`` N and returns a list
of N int64 index arrays (each sorted ascending) into ``labels``. For every
partitioner: every sample goes to exactly one client (the parts are disjoint
and their union is ``arange(n)``), no client is empty, and the result is a
deterministic function of the seed (an int, or a ``np.random.Generator``
whose state is advanced).

Sources:
  iid:       uniform random split (McMahan et al. 2017, "Communication-
             Efficient Learning of Deep Networks from Decentralized Data").
  dirichlet: label skew with a Dirichlet prior (Hsu, Qi & Brown 2019,
             "Measuring the Effects of Non-Identical Data Distribution for
             Federated Visual Classification"), drawn per class over clients
             as in Yurochkin et al. 2019 and Li et al. 2022 (NIID-Bench).
  shards:    sort-and-shard pathological non-IID split (McMahan et al. 2017,
             Sec. 3).
  quantity:  quantity (size) skew, label distribution IID: Dirichlet sizes as
             in Li et al. 2022 (NIID-Bench), log-normal sizes as in Acar et
             al. 2021 (FedDyn).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from fedsim.config import did_you_mean
from fedsim.core.errors import ConfigError

METHODS = ("iid", "dirichlet", "shards", "quantity", "homo_ratio")
QUANTITY_LAWS = ("dirichlet", "lognormal")
MAX_DIRICHLET_ATTEMPTS = 100

RngLike = int | np.integer | np.random.Generator


def _rng(rng: RngLike) -> np.random.Generator:
  if rng is None or isinstance(rng, bool):
    raise TypeError("pass an int seed or a np.random.Generator (partitions must be reproducible)")
  return np.random.default_rng(rng)


def _check(labels: np.ndarray, num_clients: int) -> np.ndarray:
  labels = np.asarray(labels)
  if labels.ndim != 1:
    raise ValueError(f"labels must be 1-D; got shape {labels.shape}")
  if int(num_clients) != num_clients or num_clients < 1:
    raise ConfigError("num_clients", f"must be an integer >= 1; got {num_clients}")
  if num_clients > labels.shape[0]:
    raise ConfigError("num_clients", f"{num_clients} clients but only {labels.shape[0]} "
                      "samples; every client needs at least one")
  return labels


def _finish(parts: Sequence[np.ndarray]) -> list[np.ndarray]:
  return [np.sort(np.asarray(p, np.int64)) for p in parts]


def iid(labels: np.ndarray, num_clients: int, rng: RngLike) -> list[np.ndarray]:
  """IID split: a random permutation cut into N parts of sizes differing by <= 1.

  Args:
    labels: (n,) labels (only n is used).
    num_clients: N, 1 <= N <= n.
    rng: seed or generator.

  Returns:
    N sorted int64 index arrays.
  """
  labels = _check(labels, num_clients)
  perm = _rng(rng).permutation(labels.shape[0])
  return _finish(np.array_split(perm, num_clients))


def _dirichlet_proportions(gen: np.random.Generator, alpha: float, k: int) -> np.ndarray:
  p = gen.dirichlet(np.full(k, alpha))
  if not np.all(np.isfinite(p)) or p.sum() <= 0:
    # All gamma draws underflowed (tiny alpha): the alpha -> 0 limit is one-hot.
    p = np.zeros(k)
    p[gen.integers(k)] = 1.0
  return p


def dirichlet(labels: np.ndarray, num_clients: int, alpha: float,
              rng: RngLike) -> list[np.ndarray]:
  """Label skew: each class's samples are spread over clients by Dir(alpha * 1_N).

  For each class c, proportions p_c ~ Dir(alpha, ..., alpha) over the N clients;
  the class's samples, shuffled, are cut at ``floor(cumsum(p_c) * n_c)``. Small
  alpha gives each client few classes; large alpha approaches IID. If some
  client ends up empty, everything is re-drawn (at most
  ``MAX_DIRICHLET_ATTEMPTS`` times).

  Args:
    labels: (n,) int labels.
    num_clients: N, 1 <= N <= n.
    alpha: concentration, > 0.
    rng: seed or generator.

  Returns:
    N sorted int64 index arrays.

  Raises:
    ConfigError: ``dirichlet_alpha`` <= 0 or not finite, or no draw left every
      client non-empty (alpha too small for N clients and C classes);
      ``num_clients`` < 1 or > n.
  """
  alpha = float(alpha)
  if not (math.isfinite(alpha) and alpha > 0):
    raise ConfigError("dirichlet_alpha", f"must be > 0; got {alpha}")
  labels = _check(labels, num_clients)
  gen = _rng(rng)
  classes = np.unique(labels)
  by_class = [np.flatnonzero(labels == c) for c in classes]
  for _ in range(MAX_DIRICHLET_ATTEMPTS):
    buckets: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for idx in by_class:
      idx = gen.permutation(idx)
      p = _dirichlet_proportions(gen, alpha, num_clients)
      cuts = np.minimum((np.cumsum(p)[:-1] * idx.size).astype(np.int64), idx.size)
      for k, chunk in enumerate(np.split(idx, cuts)):
        buckets[k].append(chunk)
    parts = [np.concatenate(b) for b in buckets]
    if min(p.size for p in parts) > 0:
      return _finish(parts)
  raise ConfigError(
      "dirichlet_alpha",
      f"alpha={alpha:g} left some of the {num_clients} clients empty in all "
      f"{MAX_DIRICHLET_ATTEMPTS} draws ({labels.shape[0]} samples, {classes.size} classes); "
      "raise --dirichlet_alpha or lower --num_clients")


def shards(labels: np.ndarray, num_clients: int, shards_per_client: int,
           rng: RngLike) -> list[np.ndarray]:
  """Pathological non-IID split of McMahan et al. 2017 (Sec. 3).

  Samples are sorted by label (stable; ties in random order), cut into
  ``N * shards_per_client`` contiguous shards of sizes differing by <= 1, and
  each client receives ``shards_per_client`` shards chosen at random. When the
  classes are balanced and the shard size divides the class size, a client
  sees at most ``shards_per_client`` distinct labels.

  Args:
    labels: (n,) int labels.
    num_clients: N, 1 <= N <= n.
    shards_per_client: shards per client, >= 1.
    rng: seed or generator.

  Returns:
    N sorted int64 index arrays.

  Raises:
    ConfigError: ``shards_per_client`` < 1 or ``N * shards_per_client`` > n;
      ``num_clients`` < 1 or > n.
  """
  if int(shards_per_client) != shards_per_client or shards_per_client < 1:
    raise ConfigError("shards_per_client", f"must be an integer >= 1; got {shards_per_client}")
  labels = _check(labels, num_clients)
  n = labels.shape[0]
  num_shards = num_clients * int(shards_per_client)
  if num_shards > n:
    raise ConfigError("shards_per_client", f"{num_clients} clients x {shards_per_client} shards = "
                      f"{num_shards} shards but only {n} samples; lower --shards_per_client "
                      "or --num_clients")
  gen = _rng(rng)
  perm = gen.permutation(n)
  order = perm[np.argsort(labels[perm], kind="stable")]
  pieces = np.array_split(order, num_shards)
  deal = gen.permutation(num_shards).reshape(num_clients, int(shards_per_client))
  return _finish([np.concatenate([pieces[s] for s in row]) for row in deal])


def _round_shares(q: np.ndarray, total: int) -> np.ndarray:
  """Integers summing to ``total``, proportional to ``q`` (largest-remainder rounding)."""
  exact = q * total
  out = np.floor(exact).astype(np.int64)
  short = total - int(out.sum())
  out[np.argsort(-(exact - out), kind="stable")[:short]] += 1
  return out


def quantity(labels: np.ndarray, num_clients: int, rng: RngLike, law: str = "lognormal",
             alpha: float = 0.5, sigma: float = 1.0) -> list[np.ndarray]:
  """Quantity skew: unequal client sizes, samples otherwise IID.

  Client shares are q ~ Dir(alpha * 1_N) (``law="dirichlet"``) or
  q_k ∝ exp(sigma * z_k), z_k ~ N(0, 1) (``law="lognormal"``; sigma = 0 gives
  equal sizes). Each client gets 1 sample plus its share q_k of the other n - N,
  rounded by largest remainder; the samples are a random permutation cut at
  those sizes.

  Args:
    labels: (n,) labels (only n is used).
    num_clients: N, 1 <= N <= n.
    rng: seed or generator.
    law: ``"dirichlet"`` or ``"lognormal"``.
    alpha: Dirichlet concentration (> 0), for ``law="dirichlet"``.
    sigma: log-normal standard deviation (>= 0), for ``law="lognormal"``.

  Returns:
    N sorted int64 index arrays.

  Raises:
    ConfigError: ``quantity_law`` unknown, ``dirichlet_alpha`` <= 0,
      ``quantity_sigma`` < 0, ``num_clients`` < 1 or > n.
  """
  if law not in QUANTITY_LAWS:
    raise ConfigError("quantity_law", f"unknown {law!r}{did_you_mean(law, QUANTITY_LAWS)}; "
                                      f"accepted: {', '.join(QUANTITY_LAWS)}")
  labels = _check(labels, num_clients)
  gen = _rng(rng)
  if law == "dirichlet":
    alpha = float(alpha)
    if not (math.isfinite(alpha) and alpha > 0):
      raise ConfigError("dirichlet_alpha", f"must be > 0; got {alpha}")
    q = _dirichlet_proportions(gen, alpha, num_clients)
  else:
    sigma = float(sigma)
    if not (math.isfinite(sigma) and sigma >= 0):
      raise ConfigError("quantity_sigma", f"must be >= 0; got {sigma}")
    w = gen.lognormal(0.0, sigma, num_clients)
    q = w / w.sum()
  n = labels.shape[0]
  sizes = 1 + _round_shares(q / q.sum(), n - num_clients)
  perm = gen.permutation(n)
  return _finish(np.split(perm, np.cumsum(sizes)[:-1]))


def partition(labels: np.ndarray, num_clients: int, method: str, seed: RngLike, *,
              dirichlet_alpha: float = 0.5, shards_per_client: int = 2,
              quantity_law: str = "lognormal", quantity_sigma: float = 1.0,
              homo_ratio_s: float = 0.1) -> list[np.ndarray]:
  """Dispatches on ``method`` (the ``--partition`` flag).

  Args:
    labels: (n,) int labels.
    num_clients: N.
    method: one of ``iid``, ``dirichlet``, ``shards``, ``quantity``.
    seed: int seed or ``np.random.Generator``.
    dirichlet_alpha: alpha of ``dirichlet``, and of ``quantity`` with
      ``quantity_law="dirichlet"``.
    shards_per_client: for ``shards``.
    quantity_law: ``lognormal`` or ``dirichlet``, for ``quantity``.
    quantity_sigma: log-normal sigma, for ``quantity``.
    homo_ratio_s: the IID fraction s, for ``homo_ratio``.

  Returns:
    N sorted int64 index arrays, disjoint, covering ``arange(n)``, non-empty.

  Raises:
    ConfigError: unknown ``partition``, or a bad value of the flag it names.
  """
  if method == "iid":
    return iid(labels, num_clients, seed)
  if method == "dirichlet":
    return dirichlet(labels, num_clients, dirichlet_alpha, seed)
  if method == "shards":
    return shards(labels, num_clients, shards_per_client, seed)
  if method == "quantity":
    return quantity(labels, num_clients, seed, law=quantity_law, alpha=dirichlet_alpha,
                    sigma=quantity_sigma)
  if method == "homo_ratio":
    return homo_ratio(labels, num_clients, homo_ratio_s, seed)
  raise ConfigError("partition", f"unknown {method!r}{did_you_mean(method, METHODS)}; accepted: {', '.join(METHODS)}")


def label_skew(labels: np.ndarray, parts: Sequence[np.ndarray], num_classes: int) -> float:
  """Label heterogeneity of a partition, in [0, 1].

  The unweighted mean over clients of the total-variation distance
  ``0.5 * sum_c |P_k(c) - P(c)|`` between client k's label distribution and
  the distribution over the union of the parts. 0 when every client matches
  the union; near 1 when clients hold disjoint rare classes.

  Args:
    labels: (n,) int labels in 0..num_classes-1.
    parts: client index arrays (empty clients are skipped).
    num_classes: C.

  Returns:
    The mean total-variation distance as a Python float.
  """
  labels = np.asarray(labels)
  counts = np.stack([np.bincount(labels[np.asarray(p, np.int64)], minlength=num_classes)
                     for p in parts if len(p)]).astype(np.float64)
  overall = counts.sum(0) / counts.sum()
  local = counts / counts.sum(1, keepdims=True)
  return float(np.mean(0.5 * np.abs(local - overall).sum(1)))


def homo_ratio(labels: np.ndarray, num_clients: int, s: float, rng: RngLike) -> list[np.ndarray]:
  """FFGB's split (Shen et al. 2022, §4; Karimireddy et al. 2020b): a fraction s IID, the rest label-sorted.

  As the authors' ``data_partition`` (specs/ffgb.md §3.1): after a random
  permutation, the first n_homo = int(n s) - (int(n s) mod N) samples are cut
  into N equal IID parts; the rest are sorted by label (stable) and cut into N
  chunks of ceil size (torch ``chunk``; the last is smaller). Client i gets
  both pieces. MNIST (60k, N = 56, s = 0.1): 107 IID + 965 sorted (last 933).

  Args:
    labels: (n,) int labels.
    num_clients: N.
    s: IID fraction in [0, 1].
    rng: seed or generator.

  Returns:
    N sorted int64 index arrays.

  Raises:
    ConfigError: ``homo_ratio`` outside [0, 1], or a client would be empty.
  """
  s = float(s)
  if not 0.0 <= s <= 1.0:
    raise ConfigError("homo_ratio", f"must be in [0, 1]; got {s}")
  labels = _check(labels, num_clients)
  n = labels.shape[0]
  perm = _rng(rng).permutation(n)
  n_homo = int(n * s) - int(n * s) % num_clients
  iid_parts = np.split(perm[:n_homo], num_clients)
  rest = perm[n_homo:]
  rest = rest[np.argsort(labels[rest], kind="stable")]
  size = -(-rest.size // num_clients) if rest.size else 0
  sorted_parts = [rest[i * size:(i + 1) * size] for i in range(num_clients)]
  parts = [np.concatenate([a, b]) for a, b in zip(iid_parts, sorted_parts)]
  if min(p.size for p in parts) == 0:
    raise ConfigError("homo_ratio", f"s={s:g} leaves a client empty ({n} samples, {num_clients} clients)")
  return _finish(parts)
