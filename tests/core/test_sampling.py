"""fedsim.core.sampling: M distinct clients uniformly without replacement (FedAvg,
McMahan et al. 2017; FedZO seed 001, Alg. 1 line 3).

Uniform M-subsets have two checkable laws: each client is included with
probability M/N, and every one of the C(N, M) subsets is equally likely. Both
are tested over many fixed keys (deterministic: the tolerances only set the
power, the outcome does not vary between runs).
"""

import itertools
import math

import jax
import numpy as np
import pytest
from scipy import stats

from fedsim.core.sampling import sample_clients

R = 6000  # rounds


def _draws(num_clients, m, rounds=R, seed=0):
  keys = jax.random.split(jax.random.key(seed), rounds)
  out = jax.jit(jax.vmap(lambda k: sample_clients(k, num_clients, m)))(keys)
  return np.asarray(out)


@pytest.mark.parametrize("num_clients, m", [(7, 3), (10, 1), (5, 4), (12, 6)])
def test_distinct_in_range_int32(num_clients, m):
  s = _draws(num_clients, m, rounds=500)
  assert s.shape == (500, m) and s.dtype == np.int32
  assert s.min() >= 0 and s.max() < num_clients
  assert all(len(set(row.tolist())) == m for row in s)  # no duplicates in a round


@pytest.mark.parametrize("num_clients, m", [(7, 3), (10, 1), (5, 4)])
def test_inclusion_frequency_is_m_over_n(num_clients, m):
  # Each client's count over R rounds ~ Binomial(R, M/N): within 4.5 standard deviations.
  s = _draws(num_clients, m)
  counts = np.bincount(s.reshape(-1), minlength=num_clients)
  p = m / num_clients
  sd = math.sqrt(R * p * (1 - p))
  assert np.all(np.abs(counts - R * p) < 4.5 * sd), (counts, R * p, sd)


def test_every_subset_equally_likely():
  # N = 6, M = 3: 20 subsets, 6000 rounds -> 300 each; chi-square goodness of fit. A sampler
  # with the right marginals but correlated pairs (e.g. consecutive blocks) fails here.
  num_clients, m = 6, 3
  s = np.sort(_draws(num_clients, m, seed=1), axis=1)
  subsets = list(itertools.combinations(range(num_clients), m))
  index = {c: i for i, c in enumerate(subsets)}
  counts = np.bincount([index[tuple(row)] for row in s.tolist()], minlength=len(subsets))
  assert counts.min() > 0
  p_value = stats.chisquare(counts).pvalue
  assert p_value > 1e-4, (p_value, counts)


def test_full_participation_is_arange_and_same_key_same_draw():
  np.testing.assert_array_equal(sample_clients(jax.random.key(3), 5, 5), np.arange(5))
  k = jax.random.key(4)
  np.testing.assert_array_equal(sample_clients(k, 9, 4), sample_clients(k, 9, 4))
  draws = {tuple(np.sort(np.asarray(sample_clients(jax.random.key(i), 9, 4)))) for i in range(20)}
  assert len(draws) > 10  # keys matter


@pytest.mark.parametrize("m", [0, 6, -1])
def test_bad_m(m):
  with pytest.raises(ValueError, match=r"clients_per_round must be in \[1, 5\]"):
    sample_clients(jax.random.key(0), 5, m)
