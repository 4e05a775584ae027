"""Theorem 1 / Theorem 2 helpers of seed 004 against numbers worked out by hand."""

import math

import pytest

from fedsim.algorithms import theory_fedlrgd as th


def test_holder_l_is_ceil_eta_minus_one():
  # Assumption 3: l = ceil(eta) - 1 (so eta in (l, l + 1]).
  assert [th.holder_l(e) for e in (0.5, 1.0, 2.5, 3.0)] == [0, 0, 2, 2]


def test_theorem1_threshold_and_bound_by_hand():
  # d = 2, eta = 2.5 -> l = 2: threshold e sqrt(2) 2^2 (2 + 2)^2 = 64 e sqrt(2).
  assert th.theorem1_threshold(2, 2.5) == pytest.approx(64 * math.e * math.sqrt(2), rel=1e-12)
  # L2^2 e^{2 eta/d} d^{eta/d} 4^eta (l+d)^{2 eta} / (l!)^2 r^{-2 eta/d}
  # = 2.25 e^{2.5} 2^{1.25} 32 4^5 / 4 * 10^{-2.5}.
  want = 2.25 * math.exp(2.5) * 2 ** 1.25 * 32 * 1024 / 4 * 10 ** -2.5
  assert th.theorem1_bound(2, 2.5, 1.5, 10.0) == pytest.approx(want, rel=1e-12)
  # The bound falls like r^{-2 eta / d} = r^{-2.5}.
  assert th.theorem1_bound(2, 2.5, 1.5, 20.0) == pytest.approx(want * 2 ** -2.5, rel=1e-12)


def test_theory_S_eq48_by_hand():
  # kappa = 2, gap0 = 1, B = 1, p = 1, mu = 1: Delta = 1 + 9 * 4^4 / 2 = 1153,
  # S = ceil(log(1153 / eps) / log 2): eps = 1 -> 11, eps = 0.01 -> 17.
  assert th.theorem2_delta(1.0, 1.0, 1, 1.0) == 1153.0
  assert th.theory_S(kappa=2.0, gap0=1.0, B=1.0, p=1, mu=1.0, eps=1.0) == 11
  assert th.theory_S(kappa=2.0, gap0=1.0, B=1.0, p=1, mu=1.0, eps=0.01) == 17
  # kappa = 4: log(4/3) per step -> ceil(log(1153) / log(4/3)) = 25.
  assert th.theory_S(kappa=4.0, gap0=1.0, B=1.0, p=1, mu=1.0, eps=1.0) == 25
