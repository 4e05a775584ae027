"""The statistics every claim's verdict uses, all from ``scipy.stats``.

A paper claim says that one method (``A``, the claimed one) does better than another
(``B``) on some number: a final value, the rounds or queries to reach a fraction of the
initial gap, the round of a first success. :func:`compare` turns the per-seed (or per-target)
numbers of the two into a :class:`Comparison`:

* **paired** when the two share seeds or targets (same x_0, clients, target image): a
  one-sided exact Wilcoxon signed-rank test in the claimed direction, and the mean paired
  difference with a paired bootstrap 95% CI (``scipy.stats.bootstrap``, percentile method,
  fixed generator, so a re-judgment from stored evidence prints the same digits);
* **censored** when some numbers are "never reached" (``math.inf``: beyond the horizon,
  never 0): a one-sided exact sign test (``scipy.stats.binomtest``) on the pairs that differ,
  which needs only their order, and as effect the fraction of those pairs the claimed method
  wins, with its exact (Clopper-Pearson) 95% CI;
* **unpaired** only when the runs share nothing: a one-sided Mann-Whitney U test and the
  difference of means with a two-sample bootstrap CI; when some times are "never reached"
  (censored, e.g. first successes of attacks on different targets), the one-sided log-rank
  test (``scipy.stats.logrank``) and the difference of restricted mean times (each time cut
  at the last one observed, "never" counted there) with a two-sample bootstrap CI.

A claim that per-seed numbers lie beyond a stated bound ("converges to 1e-6", "the slope is at most
-0.7") is judged by :func:`versus_bound`: the one-sample form of the same Wilcoxon test.
A claim that two methods are "comparable" is judged by :func:`equivalent` (two one-sided paired tests
against a stated margin).
A number computed from all seeds together (a slope of the mean curve) is judged by :func:`in_band`, a
bootstrap over the seeds.
A number that the seeds do not change (an exact computation whose seeds agree to rounding: they are
pseudo-replicates, not evidence) is judged against a stated band by :func:`deterministic`, with no test.
A claim about a fraction of a population ("almost all ranks are <= 10") is judged by
:func:`proportion`: a one-sided exact binomial test against the stated fraction, with the
observed fraction and its Clopper-Pearson 95% CI.

Each comparison's ``outcome`` is ``holds`` (p < :data:`ALPHA` in the claimed direction),
``opposite`` (p < ALPHA the other way), ``undecided``, or ``too few`` when even a unanimous
result could not reach ALPHA (an exact one-sided paired test needs n >= 5 pairs: 0.5^5 = 0.031).
:func:`verdict` combines a claim's comparisons.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np
from scipy import stats as sps

ALPHA = 0.05       # one-sided level of every test, in the direction the paper claims
RESAMPLES = 9999   # bootstrap resamples
SEED = 0           # the bootstrap's generator: fixed, so stored evidence re-judges to the same digits
OUTCOMES = ("holds", "opposite", "undecided", "too few", "saturated")
INCONCLUSIVE = ("saturated", "flat substitute", "baseline untuned", "baseline diverged", "too few seeds")
"""The reasons a verdict is ``inconclusive``, written after the word."""


@dataclasses.dataclass(frozen=True)
class Comparison:
  """One claimed-better-than comparison, judged.

  Attributes:
    name: what is compared, e.g. ``"C=5: rounds to 10% of the gap, fzoos vs fedzo_fd"``.
    test: the test, e.g. ``"one-sided exact Wilcoxon signed-rank (paired)"``.
    n: pairs (paired, censored) or the two sample sizes' sum (unpaired).
    effect: paired: mean of ``B - A`` (or ``A - B`` when higher is better), so a positive effect
      favours the claim; censored: the fraction of differing pairs the claimed method wins;
      unpaired: the difference of means, signed likewise.
    effect_name: what ``effect`` is, in words.
    ci95: the 95% CI of ``effect`` (bootstrap or Clopper-Pearson).
    p: the one-sided p-value in the claimed direction.
    p_opposite: the one-sided p-value in the opposite direction.
    wins, losses, ties: pairs in which the claimed method is better, worse, equal (paired and
      censored; unpaired: 0).
    censored: pairs with a "never" (inf) on either side.
    outcome: one of :data:`OUTCOMES` (``saturated``: set by the claim, not by the test, when both
      methods end at the floor: :func:`experiments.reproduce.declare.saturated`).
  """
  name: str
  test: str
  n: int
  effect: float
  effect_name: str
  ci95: tuple[float, float]
  p: float
  p_opposite: float
  wins: int = 0
  losses: int = 0
  ties: int = 0
  censored: int = 0
  outcome: str = "undecided"

  def line(self) -> str:
    """One line: ``name: effect [CI] (test, n, p, wins/losses): outcome``."""
    wl = f", {self.wins} wins / {self.losses} losses / {self.ties} ties" if self.wins + self.losses + self.ties else ""
    cens = f", {self.censored} censored (never)" if self.censored else ""
    return (f"{self.name}: {self.effect_name} {_g(self.effect)} [{_g(self.ci95[0])}, {_g(self.ci95[1])}] "
            f"({self.test}, n = {self.n}, p = {self.p:.3g}{wl}{cens}): {self.outcome}")

  def as_dict(self) -> dict:
    return dataclasses.asdict(self)


def _g(x: float) -> str:
  return f"{x:.3g}" if math.isfinite(x) else ("inf" if x > 0 else "-inf" if x < 0 else "nan")


def _outcome(p: float, p_opposite: float, p_min: float) -> str:
  if p < ALPHA:
    return "holds"
  if p_opposite < ALPHA:
    return "opposite"
  return "too few" if p_min >= ALPHA else "undecided"


def compare(name: str, a: Sequence[float], b: Sequence[float], *, lower_is_better: bool,
            paired: bool = True) -> Comparison:
  """Judges "the claimed method A does better than B" from their per-seed numbers.

  Args:
    name: the comparison, in words.
    a: the claimed method's numbers, one per seed (or target); ``math.inf`` is "never
      reached" (a censored time, beyond the horizon; unpaired: times only, lower_is_better).
    b: the other method's, in the same order when ``paired``.
    lower_is_better: True for errors, gaps, rounds to a target; False for accuracies.
    paired: the i-th numbers of ``a`` and ``b`` share a seed or target (the runs share x_0,
      clients, data); False only when they share nothing.

  Returns:
    The :class:`Comparison` (module docstring: which test, effect and CI).

  Raises:
    ValueError: paired numbers of different lengths, an empty side, a NaN, or a censored
      (inf) value in an unpaired comparison where higher is better.
  """
  a = np.asarray(a, float)
  b = np.asarray(b, float)
  if a.size == 0 or b.size == 0:
    raise ValueError(f"{name}: no numbers")
  if np.isnan(a).any() or np.isnan(b).any():
    raise ValueError(f"{name}: NaN in the numbers (a diverged run is judged by the claim, not here)")
  sign = 1.0 if lower_is_better else -1.0
  if not paired:
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
      if not lower_is_better:
        raise ValueError(f"{name}: censored (inf) numbers are times to an event: lower_is_better=True")
      return _censored_unpaired(name, a, b)
    p = float(sps.mannwhitneyu(sign * b, sign * a, alternative="greater").pvalue)
    q = float(sps.mannwhitneyu(sign * b, sign * a, alternative="less").pvalue)
    p_min = float(sps.mannwhitneyu(np.arange(b.size) + a.size, np.arange(a.size), alternative="greater").pvalue)
    effect = float(sign * (b.mean() - a.mean()))
    low = high = effect  # one number on a side (or all equal): nothing to resample
    if a.size > 1 and b.size > 1 and np.ptp(np.concatenate([a, b])) > 0:
      ci = sps.bootstrap((sign * b, sign * a), lambda x, y, axis=-1: x.mean(axis) - y.mean(axis),
                         confidence_level=0.95, n_resamples=RESAMPLES, method="percentile",
                         rng=np.random.default_rng(SEED)).confidence_interval
      low, high = float(ci.low), float(ci.high)
    return Comparison(name, "one-sided Mann-Whitney U (unpaired)", int(a.size + b.size), effect,
                      "difference of means (favouring the claim)", (low, high), p, q, outcome=_outcome(p, q, p_min))
  if a.shape != b.shape:
    raise ValueError(f"{name}: paired numbers of different lengths ({a.size} vs {b.size})")
  censored = int((~np.isfinite(a) | ~np.isfinite(b)).sum())
  # better[i] > 0: the claimed method is better on pair i (inf - inf: both never, a tie).
  with np.errstate(invalid="ignore"):
    diff = np.where(a == b, 0.0, sign * (b - a))
  wins, losses = int((diff > 0).sum()), int((diff < 0).sum())
  ties = int(a.size - wins - losses)
  differing = wins + losses
  p_min = 0.5 ** a.size  # "too few": even n differing pairs all one way could not decide (ties make it undecided)
  if censored:
    if differing == 0:
      return Comparison(name, "one-sided exact sign test (paired, censored)", int(a.size), math.nan,
                        "fraction of differing pairs won", (math.nan, math.nan), 1.0, 1.0, 0, 0, ties,
                        censored, _outcome(1.0, 1.0, p_min))
    test = sps.binomtest(wins, differing, 0.5, alternative="greater")
    p = float(test.pvalue)
    q = float(sps.binomtest(wins, differing, 0.5, alternative="less").pvalue)
    ci = sps.binomtest(wins, differing, 0.5).proportion_ci(confidence_level=0.95, method="exact")  # two-sided
    return Comparison(name, "one-sided exact sign test (paired, censored)", int(a.size), wins / differing,
                      "fraction of differing pairs won", (float(ci.low), float(ci.high)), p, q, wins, losses,
                      ties, censored, _outcome(p, q, p_min))
  if differing == 0:
    p = q = 1.0
  else:
    p = float(sps.wilcoxon(diff, alternative="greater", zero_method="wilcox", method="exact").pvalue)
    q = float(sps.wilcoxon(diff, alternative="less", zero_method="wilcox", method="exact").pvalue)
  if a.size > 1 and np.ptp(diff) > 0:
    ci = sps.bootstrap((diff,), np.mean, confidence_level=0.95, n_resamples=RESAMPLES, method="percentile",
                       rng=np.random.default_rng(SEED)).confidence_interval
    low, high = float(ci.low), float(ci.high)
  else:  # every pair differs by the same amount: the bootstrap distribution is one point
    low = high = float(diff.mean())
  return Comparison(name, "one-sided exact Wilcoxon signed-rank (paired)", int(a.size), float(diff.mean()),
                    "mean paired difference (favouring the claim)", (low, high), p, q, wins, losses, ties, 0,
                    _outcome(p, q, p_min))


def _censored_unpaired(name: str, a: np.ndarray, b: np.ndarray) -> Comparison:
  """"A reaches the event sooner than B" for two groups of times (``inf``: never, right-censored) that share
  nothing: the one-sided log-rank test (H1: A's event rate is the greater, ``scipy.stats.logrank``); effect the
  difference of restricted mean times, mean(min(t, tau)) of B minus A's, tau the last finite time of either
  (every "never" counted at tau), with its two-sample percentile bootstrap CI."""
  finite = np.concatenate([a[np.isfinite(a)], b[np.isfinite(b)]])
  test = "one-sided log-rank (unpaired, censored)"
  censored = int((~np.isfinite(a)).sum() + (~np.isfinite(b)).sum())
  if finite.size == 0:  # nothing ever happened on either side
    return Comparison(name, test, int(a.size + b.size), 0.0, "difference of restricted mean times",
                      (0.0, 0.0), 1.0, 1.0, censored=censored, outcome="undecided")
  tau = float(finite.max())
  beyond = float(np.nextafter(tau, np.inf))   # a censored time after every event: at risk at each of them

  def data(v):
    return sps.CensoredData(uncensored=v[np.isfinite(v)], right=np.full(int((~np.isfinite(v)).sum()), beyond))

  p = float(sps.logrank(data(a), data(b), alternative="greater").pvalue)
  q = float(sps.logrank(data(a), data(b), alternative="less").pvalue)
  p_min = float(sps.logrank(sps.CensoredData(uncensored=np.arange(a.size, dtype=float)),
                            sps.CensoredData(uncensored=np.arange(b.size, dtype=float) + a.size),
                            alternative="greater").pvalue)
  ca, cb = np.minimum(a, tau), np.minimum(b, tau)
  if np.ptp(np.concatenate([ca, cb])) > 0 and a.size > 1 and b.size > 1:
    ci = sps.bootstrap((cb, ca), lambda x, y, axis=-1: x.mean(axis) - y.mean(axis), confidence_level=0.95,
                       n_resamples=RESAMPLES, method="percentile", rng=np.random.default_rng(SEED)).confidence_interval
    low, high = float(ci.low), float(ci.high)
  else:
    low = high = float(cb.mean() - ca.mean())
  return Comparison(name, test, int(a.size + b.size), float(cb.mean() - ca.mean()),
                    f"difference of restricted mean times (cut at {tau:g}; favouring the claim)", (low, high), p, q,
                    censored=censored, outcome=_outcome(p, q, p_min))


def proportion(name: str, successes: int, n: int, p0: float) -> Comparison:
  """Judges "the fraction of a population with some property exceeds ``p0``" from ``successes`` of
  ``n`` items drawn from it uniformly (e.g. App. C's coordinates of one network): a one-sided exact
  binomial test of H0: fraction <= p0 (``scipy.stats.binomtest``); effect the observed fraction
  with its exact (Clopper-Pearson) 95% CI.

  >>> c = proportion("rank <= 10", 480, 500, 0.8)
  >>> c.outcome, round(c.effect, 2)
  ('holds', 0.96)

  Raises:
    ValueError: n < 1, successes outside [0, n], or p0 outside (0, 1).
  """
  if n < 1 or not 0 <= successes <= n or not 0 < p0 < 1:
    raise ValueError(f"{name}: need 0 <= successes <= n, n >= 1 and 0 < p0 < 1; got {successes}, {n}, {p0}")
  test = sps.binomtest(successes, n, p0, alternative="greater")
  q = float(sps.binomtest(successes, n, p0, alternative="less").pvalue)
  ci = sps.binomtest(successes, n, p0).proportion_ci(confidence_level=0.95, method="exact")
  p_min = float(sps.binomtest(n, n, p0, alternative="greater").pvalue)
  return Comparison(name, f"one-sided exact binomial test (H0: fraction <= {p0:g})", int(n), successes / n,
                    "fraction", (float(ci.low), float(ci.high)), float(test.pvalue), q,
                    outcome=_outcome(float(test.pvalue), q, p_min))


def versus_bound(name: str, values: Sequence[float], bound: float, *, lower_is_better: bool) -> Comparison:
  """Judges "the per-seed ``values`` lie below ``bound``" (or above, when ``lower_is_better`` is False):
  :func:`compare` against the constant, i.e. a one-sided exact one-sample Wilcoxon signed-rank test of
  the differences from the bound; effect their mean (favouring the claim) with its bootstrap CI. A value that
  was never reached (``math.inf`` for a time, ``-math.inf`` for a higher-is-better ratio of times) is censored:
  the test is then the exact sign test of the values' sides of the bound, the effect the fraction of the values
  (those not equal to the bound) beyond it in the claimed direction, with its Clopper-Pearson CI.

  >>> versus_bound("slope", [-1.1, -1.2, -0.9, -1.3, -1.0], -0.7, lower_is_better=True).outcome
  'holds'
  """
  c = compare(name, values, [bound] * len(values), lower_is_better=lower_is_better)
  if c.censored:  # a "never" among the values: the sign test of the values' side of the bound
    test = c.test.replace("(paired, censored)", f"(one sample, censored, against {bound:g})")
    return dataclasses.replace(c, test=test, effect_name="fraction of the values beyond the bound (of those off it)")
  return dataclasses.replace(c, test=c.test.replace("(paired)", f"(one sample, against {bound:g})"),
                             effect_name="mean distance from the bound (favouring the claim)")


def equivalent(name: str, a: Sequence[float], b: Sequence[float], margin: float) -> Comparison:
  """Judges "A is comparable to B" (paired by seed): the mean of ``a - b`` lies within +-``margin``, by two
  one-sided exact Wilcoxon signed-rank tests on the paired differences (TOST: below +margin and above
  -margin); p is the larger of the two, effect the mean difference with its paired bootstrap CI; ``wins`` /
  ``losses`` count the pairs within / outside the margin.

  >>> equivalent("x", [1.0, 2.0, 3.0, 4.0, 5.0], [1.01, 1.98, 3.02, 3.99, 5.0], 0.1).outcome
  'holds'

  Raises:
    ValueError: margin <= 0, or as :func:`compare`.
  """
  if not margin > 0:
    raise ValueError(f"{name}: the equivalence margin must be > 0; got {margin}")
  diff = np.asarray(a, float) - np.asarray(b, float)
  upper = versus_bound(name, diff, margin, lower_is_better=True)
  lower = versus_bound(name, diff, -margin, lower_is_better=False)
  base = compare(name, b, a, lower_is_better=True)  # effect mean(a - b) and its CI, paired
  p = max(upper.p, lower.p)
  outcome = "holds" if p < ALPHA else ("too few" if 0.5 ** diff.size >= ALPHA else "undecided")
  return dataclasses.replace(base, test=f"two one-sided exact Wilcoxon signed-rank tests (paired, within "
                             f"+-{margin:.3g})", effect_name="mean paired difference (a - b)", p=p,
                             p_opposite=min(upper.p_opposite, lower.p_opposite), outcome=outcome,
                             wins=int(np.sum(np.abs(diff) < margin)), losses=int(np.sum(np.abs(diff) >= margin)),
                             ties=0)


def in_band(name: str, estimate, seeds: int, low: float, high: float) -> Comparison:
  """Judges "a statistic of the runs lies in [low, high]" when it is computed from all seeds together (a
  slope of the mean-over-seeds curve, say) and has no per-seed value: ``estimate(idx)`` on the seeds ``idx``
  (an int array), bootstrapped over the seeds (``scipy.stats.bootstrap``, percentile method, fixed generator).
  Holds when the 95% CI lies inside the band, ``opposite`` when it lies wholly outside; p is the share of the
  resamples outside the band (``p_opposite`` the share inside); effect the estimate on all seeds.

  >>> c = in_band("slope", lambda idx: -0.5 + 0.01 * (idx.mean() - 4.5), 10, -0.8, -0.2)
  >>> c.outcome, round(c.effect, 3)
  ('holds', -0.5)

  One seed cannot be resampled: the outcome is then ``too few``.

  Raises:
    ValueError: seeds < 1 or low >= high.
  """
  if seeds < 1 or not low < high:
    raise ValueError(f"{name}: need >= 1 seed and low < high; got {seeds}, [{low}, {high}]")
  idx = np.arange(seeds)
  test = f"bootstrap over seeds (95% CI inside [{low:g}, {high:g}])"
  if seeds == 1:
    est = float(estimate(idx))
    return Comparison(name, test, 1, est, "estimate on all seeds", (est, est), 1.0, 1.0, outcome="too few")
  boot = sps.bootstrap((idx,), lambda i: estimate(np.asarray(i, int)), vectorized=False, confidence_level=0.95,
                       n_resamples=RESAMPLES, method="percentile", rng=np.random.default_rng(SEED))
  lo, hi = float(boot.confidence_interval.low), float(boot.confidence_interval.high)
  dist = np.asarray(boot.bootstrap_distribution)
  outside = float(np.mean((dist < low) | (dist > high)))
  outcome = "holds" if low <= lo and hi <= high else ("opposite" if hi < low or lo > high else "undecided")
  return Comparison(name, test, seeds, float(estimate(idx)), "estimate on all seeds", (lo, hi), outside, 1.0 - outside,
                    outcome=outcome)


DETERMINISTIC = ("deterministic: an exact computation the seeds do not change (no test; p is 0 inside the band, "
                 "1 outside)")


def deterministic(name: str, values: Sequence[float], low: float, high: float, *, rtol: float = 1e-4,
                  atol: float = 0.0) -> Comparison:
  """Judges "a number lies in [low, high]" when the seeds do not change it: an exact computation whose
  per-seed ``values`` agree to rounding (the seeds are pseudo-replicates, so a test over them would count one
  computation n times). No test: the outcome is ``holds`` when the value lies in the band (p = 0,
  p_opposite = 1) and ``opposite`` when it does not (p = 1, p_opposite = 0); n = 1 (one distinct computation);
  effect the mean of the values, ci95 their (min, max), which shows how far the seeds agree.

  >>> c = deterministic("slope", [-1.0000001, -1.0, -0.9999999], -1.3, -0.7)
  >>> c.outcome, round(c.effect, 6), c.n
  ('holds', -1.0, 1)
  >>> deterministic("slope", [-1.96, -1.96], -1.3, -0.7).outcome
  'opposite'

  Args:
    name: the number, in words.
    values: its value on each seed (one is enough).
    low, high: the band (``-math.inf`` or ``math.inf`` for a one-sided one).
    rtol, atol: how far the values may spread: max - min <= atol + rtol x the largest magnitude among them
      (``atol`` for a number that may be near 0, such as a slope).

  Raises:
    ValueError: no values, a non-finite value, low > high, or values that spread beyond ``rtol`` (the
      seeds change the number: it is not deterministic, and a test over the seeds must judge it).
  """
  v = np.asarray(values, float)
  if v.size == 0 or not np.isfinite(v).all() or not low <= high:
    raise ValueError(f"{name}: need finite values and low <= high; got {list(v)}, [{low}, {high}]")
  spread = float(np.ptp(v))
  if spread > atol + rtol * float(np.abs(v).max()):
    raise ValueError(f"{name}: the seeds' values spread by {spread:.3g} (from {v.min():.6g} to {v.max():.6g}), "
                     f"beyond rtol = {rtol:g}, atol = {atol:g}: not deterministic; judge it by a test over the seeds")
  value = float(v.mean())
  inside = low <= value <= high
  return Comparison(name, DETERMINISTIC, 1, value, "the value (mean of the seeds, which agree)",
                    (float(v.min()), float(v.max())), 0.0 if inside else 1.0, 1.0 if inside else 0.0,
                    outcome="holds" if inside else "opposite")


def first_reach(history: Sequence[dict], metric: str, target: float, x: str = "round",
                lower_is_better: bool = True) -> float:
  """The first ``x`` (round, queries) at which ``metric`` reaches ``target`` (``<=`` when lower is
  better, ``>=`` otherwise); ``math.inf`` when no record does: censored, beyond the horizon.

  >>> first_reach([{"round": 0, "f": 3.0}, {"round": 5, "f": 0.5}], "f", 1.0)
  5.0
  >>> first_reach([{"round": 0, "f": 3.0}], "f", 1.0)
  inf
  """
  for r in history:
    v = r.get(metric)
    if v is not None and math.isfinite(v) and (v <= target if lower_is_better else v >= target):
      return float(r[x])
  return math.inf


def verdict(comparisons: Sequence[Comparison], inconclusive: str | None = None) -> tuple[str, str]:
  """The verdict of a claim that holds when every comparison holds, and its reason.

  Args:
    comparisons: the claim's comparisons (each judged by :func:`compare`).
    inconclusive: a reason of :data:`INCONCLUSIVE` the claim found before testing (every
      method saturated at the floor; a flat substitute; a diverged or edge-tuned baseline):
      the verdict is then ``inconclusive`` whatever the tests say.

  Returns:
    ``(verdict, reason)``: ``reproduced`` (every comparison holds), ``partly reproduced``
    (some hold), ``not reproduced`` (none holds and some go the opposite way, or the undecided
    ones had n >= 5), ``inconclusive`` with ``reason`` (``saturated``: every comparison is at the
    floor; ``too few seeds``: no comparison decided and some could not have at their n; or the
    given reason).

  Raises:
    ValueError: no comparisons, or an unknown ``inconclusive`` reason.
  """
  if inconclusive is not None:
    if inconclusive not in INCONCLUSIVE:
      raise ValueError(f"inconclusive reason {inconclusive!r}; accepted: {', '.join(INCONCLUSIVE)}")
    return "inconclusive", inconclusive
  if not comparisons:
    raise ValueError("a verdict needs at least one comparison")
  outcomes = [c.outcome for c in comparisons]
  holds = outcomes.count("holds")
  if holds == len(outcomes):
    return "reproduced", ""
  if holds:
    return "partly reproduced", ""
  if "opposite" in outcomes:
    return "not reproduced", ""
  if all(o == "saturated" for o in outcomes):
    return "inconclusive", "saturated"
  if "too few" in outcomes:
    return "inconclusive", "too few seeds"
  return "not reproduced", ""


def weakest(comparisons: Sequence[Comparison]) -> Comparison:
  """The comparison a claim's headline ``effect``/``ci95``/``n`` quote: the one with the largest
  p in the claimed direction (the claim is only as strong as it)."""
  return max(comparisons, key=lambda c: (c.p, c.name))


def loglog_slope(xs: Sequence[float], ys: Sequence[float]) -> float:
  """The least-squares slope of log ``ys`` against log ``xs`` (a power law's exponent; ``numpy.polyfit``, degree 1).

  >>> round(loglog_slope([1, 2, 4], [8.0, 4.0, 2.0]), 12)
  -1.0
  """
  return float(np.polyfit(np.log(np.asarray(xs, float)), np.log(np.asarray(ys, float)), 1)[0])
