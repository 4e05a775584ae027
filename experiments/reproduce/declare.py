"""Comparative claims as declarations, judged by one engine.

A paper claim that one method does better than others on runs is declared, not coded: the
claimed method, its baselines, and a :class:`Measure` (what one run's curve becomes: its final
value, or the rounds / queries to reach a fraction of the initial gap), evaluated per setting
(a C, a heterogeneity level) over runs that share seeds. :func:`outperforms` pairs the methods by
seed and judges each (setting, baseline) with :func:`experiments.reproduce.stats.compare`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from experiments.reproduce import stats

SATURATION = 0.01
"""A final-value comparison is ``saturated`` when, on every seed, both methods are within this
fraction of the seed's initial gap (``F(x_0)`` minus the seed's floor, the lowest value any method
reached) of the floor at the end and three quarters of the way through the run: the claim then
compares noise at the floor."""


@dataclasses.dataclass(frozen=True)
class Measure:
  """How a run's records become the one number per seed that a claim compares.

  Attributes:
    kind: ``final`` (the metric's last value: "ends lower") or ``reach`` (the first ``x`` at which the
      metric is within ``fraction`` of the seed's initial gap above the seed's floor: "converges
      faster"; never reached is ``inf``, censored).
    metric: the record field, e.g. ``objective``.
    x: ``round`` or ``queries`` (``reach`` only).
    fraction: the fraction of the initial gap a ``reach`` target leaves (0.1: 90% of the gap closed).
    lower_is_better: True for an objective or a gap.
  """
  kind: str
  metric: str = "objective"
  x: str = "round"
  fraction: float = 0.1
  lower_is_better: bool = True

  def __post_init__(self):
    if self.kind not in ("final", "reach"):
      raise ValueError(f"measure kind {self.kind!r}; accepted: final, reach")

  def describe(self) -> str:
    if self.kind == "final":
      return f"final {self.metric}"
    return f"{self.x} to {1 - self.fraction:.0%} of the initial gap"


def _value(history: list[dict], metric: str) -> float | None:
  v = history[-1].get(metric) if history else None
  finite = [r[metric] for r in history if r.get(metric) is not None and math.isfinite(r[metric])]
  return float(v) if v is not None and math.isfinite(v) else (float(finite[-1]) if finite else None)


def per_seed(runs: Sequence[dict[str, list[dict]]], labels: Sequence[str], measure: Measure) -> dict[str, list[float]]:
  """``{label: [measure on seed s for s in runs]}``; the runs are one per seed, every label of a run
  shares its x_0 (its round-0 value is the seed's ``F(x_0)``), and the seed's floor is the lowest
  finite value any label reached.

  Raises:
    KeyError: a label is missing from a run.
  """
  out: dict[str, list[float]] = {lab: [] for lab in labels}
  sign = 1.0 if measure.lower_is_better else -1.0
  for run in runs:
    values = [sign * r[measure.metric] for lab in labels for r in run[lab]
              if r.get(measure.metric) is not None and math.isfinite(r[measure.metric])]
    floor = sign * min(values)
    start = run[labels[0]][0][measure.metric]
    target = floor + measure.fraction * (start - floor)
    for lab in labels:
      if measure.kind == "final":
        v = _value(run[lab], measure.metric)
        out[lab].append(math.inf * sign if v is None else v)
      else:
        out[lab].append(stats.first_reach(run[lab], measure.metric, target, measure.x, measure.lower_is_better))
  return out


def saturated(runs: Sequence[dict[str, list[dict]]], a: str, b: str, metric: str = "objective",
              lower_is_better: bool = True) -> bool:
  """Whether labels ``a`` and ``b`` both end within :data:`SATURATION` of the initial gap of every
  seed's floor (the best value any label of the seed reached; for a metric where higher is better,
  its ceiling)."""
  sign = 1.0 if lower_is_better else -1.0
  for run in runs:
    finite = [sign * r[metric] for lab in run for r in run[lab]
              if r.get(metric) is not None and math.isfinite(r[metric])]
    if run[a][0].get(metric) is None:  # no value at round 0 (a diagnostic metric): no gap to measure
      return False
    floor, start = min(finite), sign * run[a][0][metric]
    # Both at the floor at the end and already three quarters of the way through the run (a flat tail:
    # two curves still moving together are not saturated).
    ends = [_value(run[lab][: max(1, (3 * len(run[lab])) // 4)], metric) for lab in (a, b)]
    ends += [_value(run[lab], metric) for lab in (a, b)]
    if any(e is None or sign * e - floor > SATURATION * (start - floor) for e in ends):
      return False
  return True


def outperforms(claimed: str, baselines: Sequence[str], settings: dict[str, Sequence[dict[str, list[dict]]]],
                measure: Measure) -> tuple[list[stats.Comparison], dict[str, object]]:
  """Judges "``claimed`` does better than each of ``baselines`` on ``measure``" in every setting.

  Args:
    claimed: the claimed method's label.
    baselines: the labels it is compared with (those missing from a setting's runs are skipped).
    settings: ``{setting name: runs}``, the runs of a setting one per seed, each ``{label: records}``.
    measure: what is compared (:class:`Measure`).

  Returns:
    (comparisons, numbers): one paired :class:`~experiments.reproduce.stats.Comparison` per
    (setting, baseline), outcome ``saturated`` for a final-value pair that :func:`saturated` says
    compares noise at the floor; numbers ``{"<setting> <measure> <label>": [per-seed values]}``.
  """
  comparisons, numbers = [], {}
  for name, runs in settings.items():
    labels = [claimed, *(b for b in baselines if b in runs[0])]
    values = per_seed(runs, labels, measure)
    for lab in labels:
      numbers[f"{name} {measure.describe()} {lab}"] = [plain(v) for v in values[lab]]
    for b in labels[1:]:
      c = stats.compare(f"{name}: {measure.describe()}, {claimed} vs {b}", values[claimed], values[b],
                        lower_is_better=measure.lower_is_better or measure.kind == "reach")
      if measure.kind == "final" and saturated(runs, claimed, b, measure.metric, measure.lower_is_better):
        c = dataclasses.replace(c, outcome="saturated")
      comparisons.append(c)
  return comparisons, numbers


def plain(v: float) -> float | str:
  """A per-seed number for claims.json (strict JSON): ``"never"`` for a censored time."""
  return "never" if math.isinf(v) else v


def judged(comparisons: Sequence[stats.Comparison], inconclusive: str | None = None) -> tuple[str, str]:
  """(verdict, why) of a declared claim: :func:`experiments.reproduce.stats.verdict` and one sentence
  that counts the comparisons by outcome (one holds at one-sided p < ALPHA; the record's ``comparisons``
  name each)."""
  verdict, reason = stats.verdict(comparisons, inconclusive)
  n = len(comparisons)
  counts = [f"{k} {words}" for words, k in (
      ("the other way", sum(c.outcome == "opposite" for c in comparisons)),
      ("undecided", sum(c.outcome == "undecided" for c in comparisons)),
      ("with too few pairs to decide", sum(c.outcome == "too few" for c in comparisons)),
      ("saturated at the floor", sum(c.outcome == "saturated" for c in comparisons))) if k]
  why = (f"{sum(c.outcome == 'holds' for c in comparisons)} of {n} comparisons hold"
         + (f"; {', '.join(counts)}" if counts else ""))
  return verdict, (f"{reason}: {why}" if reason else why)
