"""The verdict statistics (experiments/reproduce/stats.py) and declarations (declare.py) on hand-computed
cases: each test fails if a direction is flipped, a pairing dropped, a "never" averaged as 0, or a
saturated or too-small comparison given a verdict."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from experiments.reproduce import declare, stats

INF = math.inf


def test_paired_exact_wilcoxon_p_is_one_over_2_to_the_n_when_every_pair_favours_the_claim():
  c = stats.compare("x", [1, 2, 3, 4, 5], [2, 4, 6, 8, 10], lower_is_better=True)
  assert c.test == "one-sided exact Wilcoxon signed-rank (paired)"
  assert c.p == pytest.approx(1 / 32) and c.outcome == "holds" and (c.wins, c.losses, c.ties) == (5, 0, 0)
  assert c.effect == pytest.approx(3.0)  # mean of b - a = (1 + 2 + 3 + 4 + 5) / 5
  assert c.ci95[0] <= 3.0 <= c.ci95[1] and 1.0 <= c.ci95[0]  # bootstrap means lie within [min, max] diff
  assert stats.compare("x", [1, 2, 3, 4, 5], [2, 4, 6, 8, 10], lower_is_better=True) == c  # fixed generator


def test_direction_flips_with_higher_is_better():
  lower = stats.compare("x", [1, 2, 3, 4, 5], [2, 4, 6, 8, 10], lower_is_better=True)
  higher = stats.compare("x", [1, 2, 3, 4, 5], [2, 4, 6, 8, 10], lower_is_better=False)
  assert higher.outcome == "opposite" and higher.effect == -lower.effect and higher.p == lower.p_opposite


def test_pairing_decides_where_the_seed_spread_hides_a_consistent_gain():
  # Seeds differ by 10x (different problems); within each seed A is 1% better.
  b = [1.0, 10.0, 100.0, 1000.0, 10000.0]
  a = [0.99 * v for v in b]
  assert stats.compare("p", a, b, lower_is_better=True).outcome == "holds"
  unpaired = stats.compare("u", a, b, lower_is_better=True, paired=False)
  assert unpaired.test == "one-sided Mann-Whitney U (unpaired)" and unpaired.outcome == "undecided"
  assert unpaired.p == pytest.approx(sps.mannwhitneyu(b, a, alternative="greater").pvalue)


def test_never_is_censored_beyond_the_horizon_not_averaged_as_zero():
  # HiSo Table 2's per-seed ratios [1.02, never, 1.09] read as rounds: HiSo never reaching on seed 1 is a
  # loss for HiSo on that pair, not a zero that drags a mean down.
  c = stats.compare("t", [98.0, INF, 92.0, 90.0, 95.0], [100.0, 100.0, 100.0, 100.0, 100.0], lower_is_better=True)
  assert c.test == "one-sided exact sign test (paired, censored)" and c.censored == 1
  assert (c.wins, c.losses) == (4, 1) and c.effect == pytest.approx(0.8)
  assert c.p == pytest.approx(sps.binomtest(4, 5, 0.5, alternative="greater").pvalue)  # 6/32
  lo, hi = sps.binomtest(4, 5, 0.5).proportion_ci(confidence_level=0.95, method="exact")
  assert c.ci95 == (pytest.approx(lo), pytest.approx(hi)) and c.outcome == "undecided"
  both = stats.compare("t", [INF, 1, 1, 1, 1], [INF, 2, 2, 2, 2], lower_is_better=True)
  assert (both.wins, both.ties) == (4, 1)  # never on both sides is a tie


def test_unpaired_censored_times_take_the_log_rank_test_and_restricted_means():
  """Times to a first success on different targets (unpaired), some never reached: the one-sided log-rank test
  (H1: the claimed side succeeds sooner); "never" is censored at the last observed time, never averaged as 0."""
  inf = math.inf
  fast = [5.0, 5.0, 10.0, 10.0, 5.0, 10.0, 5.0, 10.0]
  slow = [20.0, 45.0, inf, 30.0, inf, 25.0, inf, 60.0]
  c = stats.compare("P", fast, slow, lower_is_better=True, paired=False)
  assert c.test == "one-sided log-rank (unpaired, censored)" and c.censored == 3 and c.n == 16
  assert c.outcome == "holds" and c.p < 0.01 and c.p_opposite > 0.9

  def data(v, at=60.0):
    v = np.asarray(v)
    return sps.CensoredData(uncensored=v[np.isfinite(v)], right=np.full(int(np.isinf(v).sum()), np.nextafter(at, inf)))

  assert c.p == pytest.approx(sps.logrank(data(fast), data(slow), alternative="greater").pvalue)
  # Restricted means cut at the last time observed (60): never counts as 60, not as 0 or inf.
  assert c.effect == pytest.approx(np.mean([20, 45, 60, 30, 60, 25, 60, 60]) - np.mean(fast))
  assert c.ci95[0] <= c.effect <= c.ci95[1]
  flipped = stats.compare("P", slow, fast, lower_is_better=True, paired=False)
  assert flipped.outcome == "opposite" and flipped.effect == pytest.approx(-c.effect)
  assert stats.compare("P", [inf] * 3, [inf] * 3, lower_is_better=True, paired=False).outcome == "undecided"
  # One number a side (a smoke run's one target): no test can decide and no CI to resample, but no error.
  for one, other in (([5.0], [7.0]), ([inf], [7.0]), ([5.0], [inf])):
    c1 = stats.compare("P", one, other, lower_is_better=True, paired=False)
    assert c1.outcome == "too few" and c1.ci95[0] == c1.ci95[1] == c1.effect
  with pytest.raises(ValueError, match="lower_is_better"):
    stats.compare("acc", [0.9, inf], [0.8, 0.7], lower_is_better=False, paired=False)


def test_too_few_pairs_cannot_decide_even_when_unanimous():
  c = stats.compare("x", [1, 1, 1], [2, 2, 2], lower_is_better=True)
  assert c.p == pytest.approx(1 / 8) and c.outcome == "too few"
  assert stats.verdict([c]) == ("inconclusive", "too few seeds")
  ties = stats.compare("x", [1] * 5, [1] * 5, lower_is_better=True)
  assert ties.outcome == "undecided"  # five equal pairs: no difference, not too few


def test_proportion_is_an_exact_binomial_test_against_p0_with_a_clopper_pearson_ci():
  # 10 of 10 above p0 = 0.8: P(X >= 10 | p = 0.8) = 0.8^10 = 0.107 (too few to decide at 5%);
  # 20 of 20: 0.8^20 = 0.0115 (holds); 2 of 10: P(X <= 2 | 0.8) = 7.8e-5 (the opposite).
  few = stats.proportion("x", 10, 10, 0.8)
  assert few.p == pytest.approx(0.8 ** 10) and few.outcome == "too few" and few.effect == 1.0
  holds = stats.proportion("x", 20, 20, 0.8)
  assert holds.p == pytest.approx(0.8 ** 20) and holds.outcome == "holds"
  assert holds.ci95 == pytest.approx((0.025 ** (1 / 20), 1.0))  # Clopper-Pearson at x = n: [(alpha/2)^(1/n), 1]
  low = stats.proportion("x", 2, 10, 0.8)
  assert low.outcome == "opposite" and low.p_opposite == pytest.approx(sps.binom.cdf(2, 10, 0.8))
  assert stats.proportion("x", 85, 100, 0.8).outcome == "undecided"  # above 0.8, not beyond chance (p = 0.13)
  with pytest.raises(ValueError, match="successes"):
    stats.proportion("x", 11, 10, 0.8)


def test_versus_bound_is_the_one_sample_wilcoxon_against_the_constant():
  c = stats.versus_bound("x", [-1.0, -2.0, -3.0, -4.0, -5.0], -0.5, lower_is_better=True)
  assert c.p == pytest.approx(1 / 32) and c.outcome == "holds" and c.effect == pytest.approx(2.5)
  assert c.test == "one-sided exact Wilcoxon signed-rank (one sample, against -0.5)"
  assert sps.wilcoxon([-0.5, -1.5, -2.5, -3.5, -4.5], alternative="less").pvalue == pytest.approx(c.p)
  above = stats.versus_bound("x", [-1.0, -2.0, -3.0, -4.0, -5.0], -0.5, lower_is_better=False)
  assert above.outcome == "opposite"
  mixed = stats.versus_bound("x", [-1.0, -2.0, -3.0, -4.0, -0.3], -0.5, lower_is_better=True)
  assert mixed.p == pytest.approx(2 / 32) and mixed.outcome == "undecided"  # one seed beyond: rank 1 of 5, W+ = 14


def test_versus_bound_judges_a_never_by_its_side_of_the_bound():
  # A ratio of rounds (higher is better) whose method never got there is -inf, censored: the sign test, not a 0
  # averaged into a mean distance.
  c = stats.versus_bound("ratio", [2.0, 3.0, -INF, 2.5, 1.6], 1.4, lower_is_better=False)
  assert c.censored == 1 and (c.wins, c.losses) == (4, 1) and c.effect == pytest.approx(4 / 5)
  assert c.test == "one-sided exact sign test (one sample, censored, against 1.4)"
  assert c.p == pytest.approx(sps.binomtest(4, 5, 0.5, alternative="greater").pvalue) and c.outcome == "undecided"
  assert "fraction" in c.effect_name
  assert stats.versus_bound("ratio", [-INF] * 5, 1.4, lower_is_better=False).outcome == "opposite"


def test_deterministic_judges_one_computation_against_its_band():
  # Five seeds that agree to float32 rounding are one computation: n = 1, no p from a test.
  slopes = [-1.9603039, -1.9602971, -1.9602966, -1.9602971, -1.9603045]
  c = stats.deterministic("slope", slopes, -1.3, -0.7)
  assert c.outcome == "opposite" and (c.p, c.p_opposite) == (1.0, 0.0) and c.n == 1
  assert c.effect == pytest.approx(sum(slopes) / 5) and c.ci95 == (min(slopes), max(slopes))
  assert c.test == stats.DETERMINISTIC and stats.verdict([c]) == ("not reproduced", "")
  inside = stats.deterministic("slope", [-0.92431, -0.92430], -math.inf, -0.3)
  assert inside.outcome == "holds" and (inside.p, inside.p_opposite) == (0.0, 1.0)
  assert stats.deterministic("slope", [-3.67], -math.inf, -0.7).outcome == "holds"  # one seed is one computation
  # The band's edges: inside at the edge, outside just beyond it, on either side.
  assert stats.deterministic("x", [-1.3], -1.3, -0.7).outcome == "holds"
  assert stats.deterministic("x", [-1.31], -1.3, -0.7).outcome == "opposite"
  assert stats.deterministic("x", [-0.69], -1.3, -0.7).outcome == "opposite"
  # Seeds that change the number are not one computation: a test over them must judge it.
  with pytest.raises(ValueError, match="spread by 0.08"):
    stats.deterministic("slope", [-1.32, -1.3, -1.28, -1.26, -1.24], -1.3, -0.7)
  with pytest.raises(ValueError, match="not deterministic"):
    stats.deterministic("slope", [-1.0, -1.0002], -1.3, -0.7)
  assert stats.deterministic("slope", [-1.0, -1.00002], -1.3, -0.7).n == 1   # within rtol = 1e-4
  with pytest.raises(ValueError, match="not deterministic"):   # near 0 a relative tolerance alone is too tight
    stats.deterministic("slope", [1e-7, -1e-7], -math.inf, -0.3)
  assert stats.deterministic("slope", [1e-7, -1e-7], -math.inf, -0.3, atol=1e-4).outcome == "opposite"
  with pytest.raises(ValueError, match="finite"):
    stats.deterministic("slope", [], -1.3, -0.7)
  with pytest.raises(ValueError, match="finite"):
    stats.deterministic("slope", [-1.0, math.nan], -1.3, -0.7)


def test_equivalent_is_two_one_sided_paired_tests_against_the_margin():
  a, b = [1.0, 2.0, 3.0, 4.0, 5.0], [1.02, 1.97, 3.01, 4.03, 4.98]
  c = stats.equivalent("x", a, b, 0.1)
  assert c.outcome == "holds" and c.p == pytest.approx(1 / 32)   # every |a - b| < 0.1: both tests 5 of 5
  assert (c.wins, c.losses, c.ties) == (5, 0, 0)                   # pairs within / outside the margin
  assert c.effect == pytest.approx(sum(x - y for x, y in zip(a, b)) / 5)
  assert stats.equivalent("x", a, b, 0.025).outcome == "undecided"  # two differences beyond +-0.025
  far = stats.equivalent("x", [x + 1.0 for x in a], a, 0.1)
  assert far.outcome == "undecided" and far.p == 1.0 and far.effect == pytest.approx(1.0)
  assert stats.equivalent("x", a[:3], b[:3], 0.1).outcome == "too few"
  with pytest.raises(ValueError, match="margin"):
    stats.equivalent("x", a, b, 0.0)


def test_in_band_bootstraps_the_seeds_of_a_joint_estimate():
  import numpy as np
  values = np.array([-0.5, -0.4, -0.6, -0.5, -0.45])
  c = stats.in_band("x", lambda idx: float(values[idx].mean()), 5, -0.8, -0.2)
  assert c.outcome == "holds" and c.effect == pytest.approx(-0.49) and -0.6 <= c.ci95[0] <= c.ci95[1] <= -0.4
  assert c.p == 0.0 and stats.in_band("x", lambda idx: float(values[idx].mean()), 5, -0.8, -0.2) == c
  far = stats.in_band("x", lambda idx: float(values[idx].mean()) + 1.0, 5, -0.8, -0.2)
  assert far.outcome == "opposite" and far.p == 1.0
  straddles = stats.in_band("x", lambda idx: float(values[idx].mean()), 5, -0.8, -0.5)
  assert straddles.outcome == "undecided" and 0.0 < straddles.p < 1.0
  assert stats.in_band("x", lambda idx: -0.5, 1, -0.8, -0.2).outcome == "too few"


def test_errors():
  with pytest.raises(ValueError, match="different lengths"):
    stats.compare("x", [1, 2], [1], lower_is_better=True)
  with pytest.raises(ValueError, match="censored"):
    stats.compare("x", [1, INF], [1, 2], lower_is_better=False, paired=False)
  with pytest.raises(ValueError, match="NaN"):
    stats.compare("x", [1, math.nan], [1, 2], lower_is_better=True)
  with pytest.raises(ValueError, match="inconclusive reason"):
    stats.verdict([], inconclusive="bad luck")


def _c(outcome):
  return stats.Comparison("c", "t", 5, 0.0, "e", (0.0, 0.0), 0.5, 0.5, outcome=outcome)


@pytest.mark.parametrize("outcomes,verdict", [
    (("holds", "holds"), ("reproduced", "")),
    (("holds", "opposite"), ("partly reproduced", "")),
    (("holds", "saturated"), ("partly reproduced", "")),
    (("undecided", "opposite"), ("not reproduced", "")),
    (("undecided", "undecided"), ("not reproduced", "")),
    (("saturated", "saturated"), ("inconclusive", "saturated")),
    (("too few", "undecided"), ("inconclusive", "too few seeds")),
])
def test_verdict_combines_outcomes(outcomes, verdict):
  assert stats.verdict([_c(o) for o in outcomes]) == verdict
  assert stats.verdict([_c(o) for o in outcomes], inconclusive="baseline untuned") == ("inconclusive",
                                                                                         "baseline untuned")


def test_weakest_is_the_largest_p():
  a = stats.compare("a", [1, 2, 3, 4, 5], [2, 4, 6, 8, 10], lower_is_better=True)
  b = stats.compare("b", [1, 2, 3, 4, 5], [2, 4, 6, 8, 4], lower_is_better=True)
  assert stats.weakest([a, b]) is b


def _run(values_by_label, per=None):
  per = per or {}
  return {lab: [{"round": r, "queries": r * per.get(lab, 10), "objective": v} for r, v in enumerate(vs)]
          for lab, vs in values_by_label.items()}


def test_reach_targets_a_fraction_of_each_seeds_own_gap():
  # Seed floor 0 (b's end), start 10: the 10% target is 1.0. a gets there at round 2, b at round 3.
  run = _run({"a": [10, 5, 1.0, 0.5], "b": [10, 9, 2, 0.0]})
  got = declare.per_seed([run], ["a", "b"], declare.Measure("reach", x="round", fraction=0.1))
  assert got == {"a": [2.0], "b": [3.0]}
  got = declare.per_seed([run], ["a", "b"], declare.Measure("reach", x="queries", fraction=0.5))
  assert got == {"a": [10.0], "b": [20.0]}  # target 5.0
  assert declare.per_seed([run], ["a", "b"], declare.Measure("final")) == {"a": [0.5], "b": [0.0]}


def test_saturated_needs_both_near_the_floor_for_the_last_quarter_on_every_seed():
  near = _run({"a": [10, 1, 0.05, 0.05, 0.05], "b": [10, 2, 0.0, 0.0, 0.0]})  # 0.05 <= 1% of the gap 10
  far = _run({"a": [10, 1, 0.5, 0.5, 0.5], "b": [10, 2, 0.0, 0.0, 0.0]})
  late = _run({"a": [10, 9, 8, 7, 0.0], "b": [10, 9, 8, 7, 0.0]})  # equal, but only just arrived
  assert declare.saturated([near, near], "a", "b") and not declare.saturated([near, far], "a", "b")
  assert not declare.saturated([late], "a", "b")
  acc = {lab: [{"round": r["round"], "acc": 1 - r["objective"] / 10} for r in recs] for lab, recs in near.items()}
  assert declare.saturated([acc], "a", "b", "acc", lower_is_better=False)


def test_outperforms_pairs_each_setting_and_baseline():
  seeds = [_run({"a": [10, 1, 0], "b": [10, 5, 0.0 + s], "c": [10, 9, 8]}) for s in range(5)]
  comps, numbers = declare.outperforms("a", ["b", "c", "missing"], {"C=1": seeds},
                                       declare.Measure("reach", fraction=0.1))
  assert [c.name for c in comps] == ["C=1: round to 90% of the initial gap, a vs b",
                                     "C=1: round to 90% of the initial gap, a vs c"]
  assert numbers["C=1 round to 90% of the initial gap c"] == ["never"] * 5
  assert all(c.outcome == "holds" for c in comps)
  assert declare.judged(comps)[0] == "reproduced"


def test_an_unpaired_censored_comparison_where_nothing_happens_is_undecided_with_p_one():
  """Both groups "never" (every time inf): no event to test, so p = 1 both ways and the outcome undecided."""
  c = stats._censored_unpaired("never", np.full(4, np.inf), np.full(5, np.inf))
  assert (c.p, c.p_opposite, c.outcome, c.n, c.censored) == (1.0, 1.0, "undecided", 9, 9)


def test_in_band_a_ci_that_touches_the_band_from_above_is_undecided_not_opposite():
  """in_band: "opposite" needs the CI wholly outside the band; a CI whose low end is exactly the band's
  high end (here half of the resamples give exactly `high`) touches it: undecided."""
  c = stats.in_band("touch", lambda idx: -0.2 + max(0.0, float(idx.mean()) - 4.5), 10, -0.8, -0.2)
  assert c.ci95[0] == -0.2 < c.ci95[1] and c.outcome == "undecided"
