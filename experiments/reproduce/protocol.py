"""The verdict protocol (VERDICTS.md) as one engine: forms pick the test, gates come first, Holm counts.

A paper claim declares one **form** (section 2 of the protocol); :func:`judge` evaluates it per setting into
:class:`Result` rows and :func:`aggregate` turns the rows into one verdict (section 5). No claim carries its own
verdict logic: per-claim code computes measures (numbers per seed) and hands them here.

Forms and their tests (one-sided level :data:`ALPHA`, in the claimed direction):

* ``better``: paired by seed; the Wilcoxon signed-rank test (exact); the sign test when a measure is censored
  ("never reached", ``inf``). ``opposite`` when the same test holds the other way.
* ``ordered``: Page's trend test over 3 or more levels, paired by seed.
* ``equivalent``: TOST on the paired differences with the margin declared before the runs.
* ``bound``: one-sided: per-seed rates at least as fast as the bound's (a steeper decay is consistent);
  ``opposite`` when significantly slower.
* ``contrast``: the claimed arm passes the form's test and the named contrast fails it (section 3, negative
  control): a contrast that passes too makes the claim ``inconclusive (does not discriminate)``.
* ``value``: one-sample Wilcoxon against the stated value.

:func:`later` is the one test for two groups no seed pairs (a diagnostic's): the one-sided log-rank test.

Gates (section 3) are outcomes too: ``broken baseline``, ``saturated``, ``resolution``; a
comparison that fails a gate is listed, not counted. An undecided comparison whose power
(:func:`power`) is below :data:`POWER` is ``inconclusive (power)``, never ``not reproduced``.

Example::

  r = better("C=5", claimed=[30, 28, 31, 29, 27], baseline=[50, 48, 55, 47, 52], lower_is_better=True,
             unit="rounds")
  r.outcome                    # "holds" (all 5 seeds agree: p = 1/32)
  aggregate([r]).verdict       # "reproduced"
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np
from scipy import stats

ALPHA = 0.05          # one-sided level of every test
POWER = 0.8           # below it an undecided comparison is inconclusive (power)
POWER_DRAWS, POWER_SEED = 2000, 0  # simulated replications of a power computation, their generator's seed
FORMS = ("better", "ordered", "equivalent", "bound", "contrast", "value")
COUNTED = ("holds", "opposite", "undecided")
GATES = ("broken baseline", "saturated", "resolution", "does not discriminate", "too few seeds", "too few levels",
         "baseline untuned", "trivial", "out of range")  # any run passes it; outside the theorem's range
"""Outcomes that are not counted (VERDICTS.md §3-4); ``baseline untuned``: a baseline's best learning rate sits
at its grid's edge, so it is not known to work at its best."""
VERDICTS = ("reproduced", "partly reproduced", "mixed", "not reproduced", "inconclusive")


@dataclasses.dataclass(frozen=True)
class Result:
  """One comparison of one claim at one setting.

  Attributes:
    setting: where it ran ("C=5"); form: its form (:data:`FORMS`).
    outcome: ``holds``, ``opposite``, ``undecided`` or a gate (:data:`GATES`).
    p: the one-sided p-value in the claimed direction (NaN for a gate); p_holm: after Holm's correction over the
      claim's counted comparisons (:func:`aggregate` fills it).
    effect: the headline effect in ``unit``, positive in the claim's favour (the median paired difference, the
      median distance beyond a bound or a target, the median first-to-last change of an ordered measure);
      interval: an exact interval for it (sign-test order statistics) or (NaN, NaN).
    ratio: claimed / baseline median where natural (else NaN).
    p_other: the one-sided p-value the other way (an ``opposite`` needs it below ALPHA after Holm).
    gate: the gate that decided the outcome (section 3), empty when the test did.
    per_seed: the per-seed values the test used (differences, rates, ...).
    power: the test's power at the declared smallest effect of interest, or None.
    note: a short reason (the gate's numbers, the test's name).
  """

  setting: str
  form: str
  outcome: str
  p: float
  effect: float
  unit: str
  interval: tuple[float, float] = (math.nan, math.nan)
  ratio: float = math.nan
  per_seed: tuple[float, ...] = ()
  power: float | None = None
  note: str = ""
  p_holm: float = math.nan
  p_other: float = math.nan
  gate: str = ""


def median_interval(values: Sequence[float], level: float = 0.95) -> tuple[float, float]:
  """Exact distribution-free interval for a median: the order statistics x_(k) and x_(n+1-k) with the largest k
  whose binomial(n, 1/2) coverage 1 - 2 P(B <= k-1) is at least ``level``.

  When no k reaches ``level`` (n <= 5 at 95%), the range (min, max) is returned: its coverage is 1 - 2^(1-n)
  (93.75% at n = 5). (NaN, NaN) for no values."""
  x = np.sort(np.asarray(values, dtype=float))
  n = len(x)
  if n == 0:
    return math.nan, math.nan
  k = 1
  while k + 1 <= (n + 1) // 2 and 1 - 2 * stats.binom.cdf(k, n, 0.5) >= level:
    k += 1
  return float(x[k - 1]), float(x[n - k])


def _signed_test(d: np.ndarray, censored: bool) -> tuple[float, float]:
  """One-sided p-values (greater, less) of the paired differences ``d`` (exact)."""
  d = d[d != 0]
  if len(d) == 0:
    return 1.0, 1.0
  if censored or not np.all(np.isfinite(d)):
    pos = int(np.sum(d > 0))
    return (stats.binomtest(pos, len(d), 0.5, alternative="greater").pvalue,
            stats.binomtest(pos, len(d), 0.5, alternative="less").pvalue)
  method = "exact" if len(d) <= 50 else "auto"
  return tuple(float(stats.wilcoxon(d, alternative=a, method=method).pvalue) for a in ("greater", "less"))


def _outcome(p: float, p_other: float, n: int | None = None) -> str:
  """holds / opposite / undecided; ``too few seeds`` when n seeds cannot reach ALPHA at all
  (an exact signed test's smallest p is 2^-n: n >= 5 is needed at 0.05)."""
  if n is not None and 0.5 ** n >= ALPHA:
    return "too few seeds"
  return "holds" if p < ALPHA else "opposite" if p_other < ALPHA else "undecided"


def power(test, n: int, effect: float, sd: float) -> float:
  """The fraction of :data:`POWER_DRAWS` simulated experiments (paired differences N(``effect``, ``sd``), n seeds,
  a fixed generator) in which the test holds; ``test`` maps a (draws, n) array to one boolean per draw."""
  if sd <= 0 or n < 1:
    return math.nan
  rng = np.random.default_rng(POWER_SEED)
  return float(np.mean(test(rng.normal(effect, sd, size=(POWER_DRAWS, n)))))


def better_test(rows: np.ndarray) -> np.ndarray:
  """The ``better`` form's test (one-sided exact Wilcoxon signed-rank) on rows of paired differences."""
  return stats.wilcoxon(rows, axis=1, alternative="greater", method="exact").pvalue < ALPHA


def plan_seeds(test, effect: float, sd: float, *, target: float = POWER, max_n: int = 50) -> int | None:
  """The fewest seeds (5..``max_n``) at which ``test`` reaches ``target`` power (:func:`power`),
  or None. Declared before the runs (section 4)."""
  for n in range(5, max_n + 1):
    if power(test, n, effect, sd) >= target:
      return n
  return None


def tost(d: np.ndarray, margin: float) -> np.ndarray:
  """TOST p-value(s) of paired differences ``d`` (last axis: seeds) against ±``margin``: the
  larger of the two one-sided one-sample t-tests (Schuirmann 1987)."""
  lower = stats.ttest_1samp(d, -margin, axis=-1, alternative="greater").pvalue
  upper = stats.ttest_1samp(d, margin, axis=-1, alternative="less").pvalue
  return np.maximum(lower, upper)


def better(setting: str, claimed: Sequence[float], baseline: Sequence[float], *, lower_is_better: bool,
           unit: str, smallest_effect: float | None = None, censored: bool = False) -> Result:
  """``better`` form: the claimed arm beats the baseline, paired by seed.

  Args:
    claimed, baseline: the measure per seed (same seed order); ``inf`` means never reached
      (then the sign test is used).
    lower_is_better: True for rounds, queries, loss; False for accuracy.
    unit: the measure's unit ("rounds", "F", "pp").
    smallest_effect: the smallest improvement of interest, in ``unit`` (for :func:`power`).
  """
  a, b = np.asarray(claimed, dtype=float), np.asarray(baseline, dtype=float)
  if a.shape != b.shape:
    raise ValueError(f"{setting}: claimed and baseline need the same seeds; got {a.shape} and {b.shape}")
  with np.errstate(invalid="ignore"):
    d = (b - a) if lower_is_better else (a - b)    # > 0: the claimed arm is better
  d = np.where(np.isnan(d), 0.0, d)                # both censored: a tie
  greater, less = _signed_test(d, censored)
  finite = d[np.isfinite(d)]
  effect = float(np.median(d)) if len(d) else math.nan
  ratio = float(np.median(a) / np.median(b)) if np.median(b) not in (0, math.inf) else math.nan
  pw = None
  if smallest_effect is not None and len(finite) > 1:
    pw = power(better_test, len(d), smallest_effect, float(np.std(finite, ddof=1)) or abs(smallest_effect))
  return Result(setting, "better", _outcome(greater, less, len(d)), float(greater), effect, unit,
                median_interval(d), ratio, tuple(float(v) for v in d), pw,
                "sign test (censored)" if censored else "Wilcoxon signed-rank", p_other=float(less))


def ordered(setting: str, table: Sequence[Sequence[float]], *, increasing: bool, unit: str) -> Result:
  """``ordered`` form: rows are seeds, columns the levels in the claimed order; the measure
  rises (``increasing``) or falls along them. Page's trend test (exact for small tables)."""
  x = np.asarray(table, dtype=float)
  if x.ndim != 2 or x.shape[1] < 3:
    raise ValueError(f"{setting}: ordered needs seeds x 3 or more levels; got shape {x.shape}")
  ranks = list(range(1, x.shape[1] + 1))
  up, down = (ranks, ranks[::-1]) if increasing else (ranks[::-1], ranks)
  p = float(stats.page_trend_test(x, predicted_ranks=up).pvalue)
  p_other = float(stats.page_trend_test(x, predicted_ranks=down).pvalue)
  steps = np.diff(x, axis=1) * (1 if increasing else -1)
  first = int(np.argmax(np.all(np.isfinite(x), axis=0))) if np.all(np.isfinite(x[:, -1])) else 0
  span = (x[:, -1] - x[:, first]) * (1 if increasing else -1)  # from the first level every seed reached: > 0 as claimed
  return Result(setting, "ordered", _outcome(p, p_other), p, float(np.median(span)), unit,
                median_interval(span), per_seed=tuple(float(v) for v in span),
                note=f"Page's L; adjacent steps in the claimed direction: {int(np.sum(steps > 0))} of {steps.size}"
                + (f"; effect from level {first + 1} of {x.shape[1]} (the first every seed reached)" if first else ""),
                p_other=p_other)


def equivalent(setting: str, a: Sequence[float], b: Sequence[float], *, margin: float, unit: str) -> Result:
  """``equivalent`` form: TOST on the paired differences a - b with margin ±``margin`` declared before the runs;
  holds when the 90% interval lies inside; ``opposite`` when it lies outside; one seed is ``too few seeds``."""
  x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
  d = x - y
  if margin <= 0:
    raise ValueError(f"{setting}: an equivalence margin must be > 0; got {margin}")
  if np.allclose(d, d[0]):  # no spread: the interval is the point
    p = 0.0 if abs(d[0]) < margin else 1.0
    lo = hi = float(d[0])
  else:
    p = float(tost(d, margin))
    half = stats.t.ppf(1 - ALPHA, len(d) - 1) * np.std(d, ddof=1) / math.sqrt(len(d))
    lo, hi = float(np.mean(d) - half), float(np.mean(d) + half)
  outcome = ("too few seeds" if len(d) < 2 else "holds" if p < ALPHA  # one seed has no interval
             else "opposite" if (lo > margin or hi < -margin) else "undecided")
  return Result(setting, "equivalent", outcome, p, float(np.mean(d)), unit, (lo, hi), per_seed=tuple(map(float, d)),
                note=f"TOST, margin ±{margin:g} {unit}, 90% interval", p_other=0.0 if outcome == "opposite" else 1.0)


def bound(setting: str, rates: Sequence[float], bound_rate: float, *, unit: str = "decades per decade",
          lower_is_better: bool = True) -> Result:
  """``bound`` form: per-seed rates (log-log slopes, negative = decaying) at least as good as the
  bound's ``bound_rate``: at or below it when ``lower_is_better`` (a steeper decay is consistent),
  at or above it otherwise (a speed-up at least linear). ``opposite`` when significantly worse."""
  r = np.asarray(rates, dtype=float)
  d = (bound_rate - r) if lower_is_better else (r - bound_rate)   # > 0: better than the bound
  greater, less = _signed_test(d, False)
  return Result(setting, "bound", _outcome(greater, less, len(d)), float(greater), float(np.median(d)), unit,
                median_interval(d), per_seed=tuple(float(v) for v in r),
                note=f"bound rate {bound_rate:g}; median rate {np.median(r):.3g}",
                p_other=float(less))


SEED_FREE = "seed-independent"


def seed_free(result: Result, rtol: float = 1e-3) -> Result:
  """A measure its declaration calls ``deterministic`` (a computation its seeds do not change, e.g. a rate on
  an exact task) has no sampling error to test: when its per-seed values agree within ``rtol`` it holds on
  the claimed side of its bound or target (p = 0) and is opposite on the other (p_other = 0). Otherwise the
  sampled test stands, with a note that the seeds disagree."""
  v = np.asarray(result.per_seed, dtype=float)
  if not len(v) or np.ptp(v) > rtol * max(np.max(np.abs(v)), 1e-300):
    return dataclasses.replace(result, note=f"{result.note}; declared deterministic, but the seeds differ")
  side = np.sign(result.effect)
  return dataclasses.replace(result, outcome={1: "holds", -1: "opposite"}.get(int(side), "undecided"),
                             p=float(side <= 0), p_other=float(side >= 0), interval=(math.nan, math.nan),
                             note=f"{SEED_FREE}: the {len(v)} seeds agree within {rtol:g}; {result.note}")


def contrast(claimed: Result, control: Result) -> Result:
  """``contrast`` form: the claimed arm's result and the named control's, by the same test.
  Holds when the claimed holds and the control does not; a control that holds too makes it
  ``does not discriminate``."""
  if claimed.outcome == "holds" and control.outcome == "holds":
    outcome, note = "does not discriminate", f"the control {control.setting} passes the same test (p = {control.p:.3g})"
  else:
    outcome, note = claimed.outcome, f"control {control.setting}: {control.outcome} (p = {control.p:.3g})"
  note += f"; {claimed.note}" if claimed.note else ""
  return dataclasses.replace(claimed, form="contrast", outcome=outcome, note=note)


def value(setting: str, values: Sequence[float], target: float, *, greater_is_better: bool, unit: str) -> Result:
  """``value`` form: the measure reaches ``target`` (one-sample signed-rank test)."""
  x = np.asarray(values, dtype=float)
  d = (x - target) if greater_is_better else (target - x)
  greater, less = _signed_test(d, False)
  return Result(setting, "value", _outcome(greater, less, len(d)), float(greater), float(np.median(d)), unit,
                median_interval(d), per_seed=tuple(float(v) for v in x),
                note=f"against {target:g} {unit}; median {np.median(x):.3g}",
                p_other=float(less))


def later(setting: str, late: Sequence[float], early: Sequence[float], *, unit: str) -> Result:
  """Not a form of its own: "``late``'s times come after ``early``'s" for two groups that share nothing (no
  seed pairs them; a diagnostic's, e.g. each P's own attack targets), as a ``better`` row. The one-sided
  log-rank test (``scipy.stats.logrank``; ``inf``, never, is censored after every event); effect the
  difference of the medians in ``unit``; ``p_other`` the test the other way.
  """
  finite = [x for x in (*late, *early) if math.isfinite(x)]
  beyond = float(np.nextafter(max(finite, default=0.0), np.inf))

  def data(v):
    v = np.asarray(v, float)
    return stats.CensoredData(uncensored=v[np.isfinite(v)], right=np.full(int(np.isinf(v).sum()), beyond))

  p, q = ((float(stats.logrank(data(early), data(late), alternative=a).pvalue) for a in ("greater", "less"))
          if finite else (1.0, 1.0))
  with np.errstate(invalid="ignore"):  # both medians never: no effect (NaN)
    effect = float(np.median(late) - np.median(early))
  return Result(setting, "better", _outcome(p, q), p, effect, unit,
                note="one-sided log-rank (unpaired, never censored)", p_other=q)


# --- gates ----------------------------------------------------------------------------------

def gated(result: Result, *, baseline_works: bool = True, claimed_diverges: bool = False,
          saturated: bool = False, tied_fraction: float = 0.0) -> Result:
  """``result`` after the gates of section 3, in order: the claimed method diverging where the
  baseline works is ``opposite``; a broken baseline, a saturated pair or a measure too coarse to
  separate the arms (most pairs tie) replaces the outcome with the gate's name."""
  if claimed_diverges and baseline_works:
    return dataclasses.replace(result, outcome="opposite", gate="claimed diverges",
                               note="the claimed method diverges where the baseline works")
  if not baseline_works:
    return dataclasses.replace(result, outcome="broken baseline", gate="broken baseline")
  if saturated:
    return dataclasses.replace(result, outcome="saturated", gate="saturated")
  if tied_fraction > 0.5:
    return dataclasses.replace(result, outcome="resolution", gate="resolution",
                               note=f"{tied_fraction:.0%} of the pairs tie")
  return result


# --- from comparisons to a verdict ----------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Verdict:
  """A claim's verdict (section 5): ``verdict`` (:data:`VERDICTS`), ``reason`` (where it holds,
  or the inconclusive reason), and the comparisons with Holm-corrected p-values."""

  verdict: str
  reason: str
  results: tuple[Result, ...]

  @property
  def label(self) -> str:
    return f"{self.verdict} ({self.reason})" if self.reason else self.verdict


def holm(results: Sequence[Result]) -> list[Result]:
  """The counted comparisons after Holm's step-down correction over the claim (section 4), in each direction: a hold
  needs its corrected p below ALPHA, and so does an ``opposite`` (its ``p_other`` corrected over the same family; a
  comparison without one keeps its outcome). Gated comparisons are returned as they are."""
  import gc

  from statsmodels.stats.multitest import multipletests
  idx = [i for i, r in enumerate(results) if r.outcome in COUNTED and not math.isnan(r.p) and not r.gate]
  out = list(results)
  if not idx:
    return out

  def adjusted(ps):
    # statsmodels' Holm branch calls gc.collect(): about 1.5 s in a process holding a large heap (a test worker
    # after many compiled programs; 894 s for 300 families). Frozen, the heap is not walked; the p-values are the same.
    gc.freeze()
    try:
      return multipletests(ps, alpha=ALPHA, method="holm")[1]
    finally:
      gc.unfreeze()

  corrected = adjusted([results[i].p for i in idx])
  others = [results[i].p_other for i in idx]
  other = (adjusted([1.0 if math.isnan(q) else q for q in others])
           if any(not math.isnan(q) for q in others) else [math.nan] * len(idx))
  signed = ("better", "bound", "value", "contrast")  # exact signed tests: the smallest p at n seeds is 2^-n
  for i, p, q in zip(idx, corrected, other):
    r = results[i]
    outcome = r.outcome
    exact = r.form in signed and "TOST" not in r.note and SEED_FREE not in r.note  # (TOST is a t-test)
    if exact and r.per_seed and len(idx) * 0.5 ** len(r.per_seed) >= ALPHA:
      # Even n unanimous seeds cannot hold after the correction over this family: more seeds, not a verdict.
      out[i] = dataclasses.replace(r, p_holm=float(p), outcome="too few seeds",
                                   note=(r.note + "; " if r.note else "")
                                   + f"{len(idx)} comparisons at n = {len(r.per_seed)}: unanimity gives p = "
                                   f"{len(idx) * 0.5 ** len(r.per_seed):.2g} after Holm")
      continue
    if outcome == "holds" and p >= ALPHA:
      outcome = "undecided"
    if outcome == "opposite" and not math.isnan(r.p_other) and q >= ALPHA:
      outcome = "undecided"
    out[i] = dataclasses.replace(r, p_holm=float(p), outcome=outcome)
  return out


def aggregate(results: Sequence[Result]) -> Verdict:
  """One verdict from a claim's comparisons (section 5), holds counted after :func:`holm`.

  * reproduced: every counted comparison holds;
  * partly reproduced: at least half hold and none is opposite (the reason names where);
  * mixed: some hold and some are opposite (the reason names both);
  * not reproduced: none holds and some are opposite, or all undecided with power >= 0.8;
  * inconclusive (reason): anything else: a gate, ``power``, or ``too few seeds``.
  """
  rs = holm(results)
  counted = [r for r in rs if r.outcome in COUNTED]
  holds = [r.setting for r in counted if r.outcome == "holds"]
  opposite = [r.setting for r in counted if r.outcome == "opposite"]
  undecided = [r for r in counted if r.outcome == "undecided"]
  if counted and len(holds) == len(counted):
    return Verdict("reproduced", "", tuple(rs))
  if holds and opposite:
    return Verdict("mixed", f"holds at {', '.join(holds)}; opposite at {', '.join(opposite)}", tuple(rs))
  if holds and 2 * len(holds) >= len(counted):
    return Verdict("partly reproduced", f"holds at {', '.join(holds)}", tuple(rs))
  if not holds and opposite:
    return Verdict("not reproduced", f"opposite at {', '.join(opposite)}", tuple(rs))
  if counted and not holds and all(r.power is not None and r.power >= POWER for r in undecided):
    return Verdict("not reproduced", "no effect where the test had the power to find it", tuple(rs))
  if not counted:
    gates = [r.outcome for r in rs]
    reason = max(dict.fromkeys(gates), key=gates.count) if gates else "no comparison"
    return Verdict("inconclusive", reason, tuple(rs))
  if holds:  # fewer than half hold, none opposite
    return Verdict("inconclusive", f"holds at {', '.join(holds)} only; the rest undecided", tuple(rs))
  return Verdict("inconclusive", "power", tuple(rs))
