"""The verdict protocol's engine (experiments/reproduce/protocol.py) on synthetic numbers whose
right verdict is known by construction (VERDICTS.md sections 2-5)."""

import math

import numpy as np
import pytest

from experiments.reproduce import protocol as P

FAST = [30, 28, 31, 29, 27, 26, 33, 30, 29, 28]
SLOW = [50, 48, 55, 47, 52, 51, 49, 53, 50, 54]


def test_better_holds_in_the_claimed_direction_and_is_opposite_the_other_way():
  r = P.better("C=5", FAST, SLOW, lower_is_better=True, unit="rounds")
  assert r.outcome == "holds" and r.p == pytest.approx(1 / 1024) and r.effect == 22.0 and r.unit == "rounds"
  assert r.ratio == pytest.approx(29 / 50.5)   # medians of the arms
  assert r.per_seed == tuple(float(b - a) for a, b in zip(FAST, SLOW))
  assert P.better("C=5", SLOW, FAST, lower_is_better=True, unit="rounds").outcome == "opposite"
  assert P.better("C=5", FAST, SLOW, lower_is_better=False, unit="pp").outcome == "opposite"


def test_five_seeds_hold_only_when_all_agree_and_four_are_too_few():
  assert P.better("s", FAST[:5], SLOW[:5], lower_is_better=True, unit="rounds").p == pytest.approx(1 / 32)
  one_off = [*FAST[:4], 60]
  assert P.better("s", one_off, SLOW[:5], lower_is_better=True, unit="rounds").outcome == "undecided"
  assert P.better("s", FAST[:4], SLOW[:4], lower_is_better=True, unit="rounds").outcome == "too few seeds"


def test_never_reached_is_censored_and_judged_by_the_sign_test():
  inf = math.inf
  r = P.better("C=50", FAST[:6], [inf] * 6, lower_is_better=True, unit="rounds", censored=True)
  assert r.outcome == "holds" and r.p == pytest.approx(1 / 64) and "sign test" in r.note
  both = P.better("C=50", [inf] * 6, [inf] * 6, lower_is_better=True, unit="rounds", censored=True)
  assert both.outcome == "undecided" and both.p == 1.0   # all ties: nothing to say


def test_median_interval_is_the_exact_order_statistic_interval():
  assert P.median_interval(list(range(1, 11))) == (2.0, 9.0)   # k = 2: coverage 1 - 2 * 11/1024 = 0.979
  assert P.median_interval([5, 1, 4, 2, 3]) == (1.0, 5.0)       # n = 5: no k reaches 95%; the range
  assert P.median_interval(list(range(1, 21))) == (6.0, 15.0)   # k = 6: 1 - 2 P(B(20) <= 5) = 0.959


def test_ordered_uses_pages_test_in_the_claimed_direction():
  rng = np.random.default_rng(1)
  table = np.arange(4)[None, :] + 0.3 * rng.normal(size=(10, 4))
  assert P.ordered("K", table, increasing=True, unit="F").outcome == "holds"
  assert P.ordered("K", table, increasing=False, unit="F").outcome == "opposite"
  with pytest.raises(ValueError, match="3 or more levels"):
    P.ordered("K", table[:, :2], increasing=True, unit="F")


def test_a_steeper_than_bound_decay_is_consistent_and_a_shallower_one_opposite():
  steep = [-1.96, -1.90, -2.01, -1.95, -1.97, -1.92]   # Theorem 3.1's 1/K is an upper bound
  assert P.bound("b", steep, -1.0).outcome == "holds"
  assert P.bound("b", [-0.5, -0.45, -0.52, -0.48, -0.55, -0.5], -1.0).outcome == "opposite"


def test_equivalence_with_zero_true_effect_passes_at_the_planned_seeds():
  sd, margin = 1.0, 1.0
  n = P.plan_seeds(lambda rows: P.tost(rows, margin) < P.ALPHA, 0.0, sd)
  assert n is not None and 5 <= n <= 20
  rng = np.random.default_rng(7)
  passes = np.mean([P.equivalent("e", rng.normal(0, sd, n), np.zeros(n), margin=margin, unit="F").outcome == "holds"
                    for _ in range(400)])
  assert passes >= 0.75   # the plan's 80% (400 draws: standard error 0.02)
  shifted = P.equivalent("e", np.full(10, 3.0) + rng.normal(0, 0.1, 10), np.zeros(10), margin=margin, unit="F")
  assert shifted.outcome == "opposite"
  assert P.equivalent("e", [0.1], [0.0], margin=margin, unit="F").outcome == "too few seeds"  # no interval from one


@pytest.mark.slow  # 3,600 exact signed-rank tests (about a minute)
def test_a_family_of_null_comparisons_does_not_reach_partly_above_the_nominal_rate():
  rng = np.random.default_rng(3)
  reached = 0
  families = 300
  for _ in range(families):
    results = [P.better(f"s{i}", rng.normal(0, 1, 10), rng.normal(0, 1, 10), lower_is_better=True, unit="F")
               for i in range(12)]
    reached += P.aggregate(results).verdict in ("reproduced", "partly reproduced", "mixed")
  assert reached / families <= P.ALPHA   # Holm keeps the family-wise rate of any hold at or below alpha


def test_holm_turns_a_lone_marginal_hold_among_many_into_undecided():
  marginal = P.Result("a", "better", "holds", 0.03, 1.0, "F")
  others = [P.Result(f"b{i}", "better", "undecided", 0.5, 0.0, "F") for i in range(5)]
  rs = P.holm([marginal, *others])
  assert rs[0].outcome == "undecided" and rs[0].p_holm == pytest.approx(0.18)
  assert P.holm([marginal])[0].outcome == "holds"


def test_a_control_that_passes_makes_the_claim_inconclusive():
  claimed = P.better("d=1e4", FAST, SLOW, lower_is_better=True, unit="rounds")
  control = P.better("d=1e4", FAST, SLOW, lower_is_better=True, unit="rounds")   # the contrast passes too
  r = P.contrast(claimed, control)
  assert r.outcome == "does not discriminate"
  assert P.aggregate([r]).label == "inconclusive (does not discriminate)"
  failing = P.better("d=1e4", SLOW, SLOW[::-1], lower_is_better=True, unit="rounds")
  assert P.aggregate([P.contrast(claimed, failing)]).verdict == "reproduced"


def test_a_broken_baseline_never_yields_a_hold():
  baseline_final = [9.0, 9.5, 8.8, 9.9, 9.2, 9.1]      # from 10 towards 0: closes under half of its gap
  r = P.better("C=0.5", [1.0] * 6, baseline_final, lower_is_better=True, unit="F")
  assert r.outcome == "holds"
  gated = P.gated(r, baseline_works=False)   # the working-baseline gate (engine.curve_gate) fails
  assert gated.outcome == "broken baseline"
  assert P.aggregate([gated]).label == "inconclusive (broken baseline)"


def test_a_diverging_claimed_method_is_opposite_and_gates_are_not_counted():
  r = P.better("C=50", FAST, SLOW, lower_is_better=True, unit="rounds")
  assert P.gated(r, claimed_diverges=True).outcome == "opposite"
  assert P.gated(r, saturated=True).outcome == "saturated"
  assert P.gated(r, tied_fraction=0.8).outcome == "resolution"
  hold = P.better("C=5", FAST, SLOW, lower_is_better=True, unit="rounds")
  assert P.aggregate([hold, P.gated(r, saturated=True)]).verdict == "reproduced"


def _r(setting, outcome, p, power=None):
  return P.Result(setting, "better", outcome, p, 0.0, "F", power=power)


@pytest.mark.parametrize("results,label", [
    ([_r("a", "holds", 0.001), _r("b", "holds", 0.001)], "reproduced"),
    ([_r("a", "holds", 0.001), _r("b", "undecided", 0.4)], "partly reproduced (holds at a)"),
    ([_r("a", "holds", 0.001), _r("b", "opposite", 0.99)], "mixed (holds at a; opposite at b)"),
    ([_r("a", "undecided", 0.3), _r("b", "opposite", 0.99)], "not reproduced (opposite at b)"),
    ([_r("a", "undecided", 0.3, power=0.9)], "not reproduced (no effect where the test had the power to find it)"),
    ([_r("a", "undecided", 0.3, power=0.4)], "inconclusive (power)"),
    ([_r("a", "undecided", 0.3)], "inconclusive (power)"),
    ([_r("a", "holds", 0.001), _r("b", "undecided", 0.3), _r("c", "undecided", 0.3)],
     "inconclusive (holds at a only; the rest undecided)"),
    ([_r("a", "saturated", math.nan)], "inconclusive (saturated)"),
])
def test_aggregation_follows_section_5(results, label):
  assert P.aggregate(results).label == label


def test_better_reports_power_at_the_declared_smallest_effect():
  r = P.better("C=5", FAST, SLOW, lower_is_better=True, unit="rounds", smallest_effect=0.1)
  assert r.power is not None and r.power < 0.2           # a tiny effect against ~3 rounds of noise
  big = P.better("C=5", FAST, SLOW, lower_is_better=True, unit="rounds", smallest_effect=10.0)
  assert big.power is not None and big.power > 0.95
