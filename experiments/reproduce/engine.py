"""Claims as declarations, judged by one engine (VERDICTS.md §10).

A paper's claims are data: ``experiments/reproduce/declarations/<paper>.toml`` holds one ``[[claim]]`` table per
claim (:class:`Declaration`: its quote and source, its form, measure, claimed method, arms, settings, seeds,
controls, margin, deviations, the flagfile that makes its runs). Per-claim Python only *measures*: it runs (or
reads) the claim's runs and returns a :class:`Measured` (per-seed numbers per setting and arm, or the runs
themselves for a curve measure the declaration names), never a verdict. :func:`judge` applies the protocol
(:mod:`experiments.reproduce.protocol`: the form picks the test, gates first, Holm over the claim's comparisons,
the aggregation of section 5) and returns the claim's :class:`~experiments.reproduce.claims.Evidence`.

A declaration table (TOML)::

  [[claim]]
  id = "fzoos.fig1_rounds_paper"
  kind = "paper"                 # paper | check | diagnostic | not evaluated
  headline = true
  statement = "FZooS converges in fewer rounds than the FD baselines at every C."
  quote = "FZooS ... achieves better communication efficiency"
  source = "Shu et al. 2023, §6.1, Fig. 1 (top)"
  form = "better"                # better | ordered | equivalent | bound | contrast | value
  claimed = "fzoos"
  arms = ["fedzo_fd", "scaffold_zo2"]
  settings = ["C=0.5", "C=5", "C=50"]
  seeds = 5
  measure = { kind = "reach", metric = "objective", x = "round", fraction = 0.1, unit = "rounds" }
  smallest_effect = 2.0          # in the measure's unit: the power of an undecided comparison
  deviations = ["d = 300 (paper: 300)", "5 seeds (the protocol asks for 10)"]
  flagfile = "fzoos_fig1_quadratic.cfg"
  declared = "2026-12-07"        # when this criterion was fixed
  after_data = true              # fixed after the runs it judges (VERDICTS §8)
  finding = "diverges at C = 50 in the authors' code too"   # the summary's one clause (optional)

Required keys by form: ``better``/``equivalent``: ``claimed``, ``arms`` (``equivalent`` also ``margin``);
``ordered``: ``arms``, the levels in the claimed order (the measure improves along them); ``bound``: ``claimed``,
``bound`` (the bound's rate); ``value``: ``claimed``, ``target``; ``contrast``: ``claimed``, ``controls`` and
``test`` (the inner form: ``better`` or ``equivalent`` against ``arms[0]``, ``value`` against ``target``, or
``bound`` against ``bound``). ``not evaluated`` needs ``needs`` (the command or data it would take). ``check``
claims name their ``tests`` (pytest node ids). Optional: ``scales = ["paper"]`` (its runs exceed the smoke budget),
``paper_data = "cifar10"`` (it runs only on the paper's own data set), ``deterministic = true`` (a ``bound`` or
``value`` measure its seeds do not change: compared exactly, :func:`protocol.seed_free`), and a measure function
with a ``from_record`` attribute (record -> :class:`Measured`, or a diagnostic's ``Evidence``) judges a record whose
runs' metrics were not stored from the numbers it keeps (its ``per`` attribute names them: ``per-seed`` unless said,
``per-target``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import tomllib

from experiments.reproduce import protocol
from experiments.reproduce.claims import KINDS, Claim, Context, Evidence, plain_number, test_claim

FOLDER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "declarations")
MEASURES = ("final", "reach", "custom")
INNER = ("better", "value", "bound", "equivalent")  # the tests a contrast may apply to the claimed arm and its controls
CRITERION = ("form", "measure", "claimed", "arms", "controls", "settings", "seeds", "test", "margin", "bound", "target",
             "smallest_effect", "kind", "tests", "deterministic")  # the keys that decide a verdict (the digest's)


@dataclasses.dataclass(frozen=True)
class MeasureSpec:
  """What one run (or one seed) becomes: the number a claim compares.

  Attributes:
    kind: ``final`` (the metric's last finite value), ``reach`` (the first ``x`` at which the metric closes ``1 -
      fraction`` of the seed's initial gap to its floor; never is ``inf``, censored), or ``custom`` (per-claim code
      computes it; ``name`` says what it is).
    metric: the record field (``objective``, ``attack_accuracy``, ...).
    x: ``round`` or ``queries`` (``reach`` only).
    fraction: the gap a ``reach`` target leaves (0.1: 90% closed).
    unit: the unit every effect is written in (``rounds``, ``F``, ``pp``, ``decades``).
    lower_is_better: True for losses, rounds, errors; False for accuracies.
    name: the measure in words (default from the other fields).
    optimum: the known optimum F* of the metric (quadratics, convex tasks): a ``reach`` target and the
      working-baseline gate then measure the gap to it (VERDICTS.md §3, targets); None: to the best value any
      arm of the seed reached.
  """
  kind: str
  unit: str
  metric: str = "objective"
  x: str = "round"
  fraction: float = 0.1
  lower_is_better: bool = True
  name: str = ""
  optimum: float | None = None

  def describe(self) -> str:
    if self.name:
      return self.name
    if self.kind == "final":
      return f"final {self.metric}"
    if self.kind == "reach":
      gap = "the gap to F*" if self.optimum is not None else "the initial gap"
      return f"{self.x if self.x.endswith('s') else self.x + 's'} to {1 - self.fraction:.0%} of {gap}"
    return self.metric


@dataclasses.dataclass(frozen=True)
class Declaration:
  """One claim as data (the module docstring lists the keys)."""
  id: str
  kind: str
  statement: str
  source: str
  quote: str = ""
  form: str = ""
  claimed: str = ""
  arms: tuple[str, ...] = ()
  controls: tuple[str, ...] = ()
  settings: tuple[str, ...] = ()
  seeds: int = 0
  measure: MeasureSpec | None = None
  test: str = ""
  smallest_effect: float | None = None
  margin: float | None = None
  bound: float | None = None
  target: float | None = None
  deviations: tuple[str, ...] = ()
  flagfile: str = ""
  declared: str = ""
  after_data: bool = False
  finding: str = ""
  needs: str = ""
  tests: tuple[str, ...] = ()
  headline: bool = False
  scales: tuple[str, ...] = ()
  paper_data: str = ""
  deterministic: bool = False
  table: Mapping = dataclasses.field(default_factory=dict, compare=False, repr=False)

  @property
  def digest(self) -> str:
    """The first 12 hex digits of the sha256 of the declaration's criterion (the keys of :data:`CRITERION`,
    canonical JSON): a record keeps it, so a criterion changed after its runs shows; its words may change."""
    criterion = {k: self.table[k] for k in CRITERION if k in self.table}
    return hashlib.sha256(json.dumps(criterion, sort_keys=True).encode()).hexdigest()[:12]

  def criterion(self) -> str:
    """The criterion in words, derived from the form (VERDICTS.md §2)."""
    if self.kind == "not evaluated":
      return f"not evaluated here: {self.needs}"
    if self.kind == "check" and self.tests:
      return "reproduced when every cited test passes"
    m = self.measure.describe() if self.measure else "the measure"
    unit = self.measure.unit if self.measure else ""
    where = f" per setting ({', '.join(self.settings)})" if self.settings else ""
    if self.form == "better":
      text = (f"{self.claimed} better than each of {', '.join(self.arms)} on {m}{where}, paired by seed (one-sided "
              "exact Wilcoxon signed-rank; the sign test where a time is censored)")
    elif self.form == "ordered":
      text = f"{m} improves along {' < '.join(self.arms)}{where} (Page's trend test, paired by seed)"
    elif self.form == "equivalent":
      text = (f"{self.claimed} equivalent to each of {', '.join(self.arms)} on {m}{where}: TOST with the margin "
              f"±{self.margin:g} {unit} fixed in the declaration")
    elif self.form == "bound":
      text = f"{m} of {self.claimed} at least as good as the bound's {self.bound:g} {unit}{where} (one-sided)"
    elif self.form == "value":
      text = f"{m} of {self.claimed} beyond {self.target:g} {unit}{where} (one-sample signed-rank)"
    elif self.form == "contrast":
      text = (f"{self.claimed} passes the {self.test} test and {', '.join(self.controls)} fails the same test on "
              f"{m}{where}")
    else:
      text = f"a rule of its own ({self.kind})"
    return text + "; gates, Holm's correction over the claim's comparisons and the aggregation of VERDICTS.md"


class DeclarationError(ValueError):
  """A declaration file or table is malformed (its message names the file, claim and key)."""


def _declaration(table: Mapping, where: str) -> Declaration:
  t = dict(table)
  for key in ("id", "kind", "statement", "source"):
    if key not in t:
      raise DeclarationError(f"{where}: a claim needs {key!r}")
  where = f"{where}: {t['id']}"
  if t["kind"] not in KINDS:
    raise DeclarationError(f"{where}: kind {t['kind']!r}; accepted: {', '.join(KINDS)}")
  fields = {f.name for f in dataclasses.fields(Declaration)} - {"table"}
  unknown = sorted(set(t) - fields)
  if unknown:
    raise DeclarationError(f"{where}: unknown keys {', '.join(unknown)}; accepted: {', '.join(sorted(fields))}")
  measure = None
  if "measure" in t:
    m = dict(t["measure"])
    if m.get("kind") not in MEASURES or "unit" not in m:
      raise DeclarationError(f"{where}: measure needs kind ({', '.join(MEASURES)}) and unit; got {m}")
    measure = MeasureSpec(**m)
  d = Declaration(**{k: tuple(v) if isinstance(v, list) else v for k, v in t.items() if k != "measure"},
                  measure=measure, table=t)
  if d.kind == "not evaluated" and not d.needs:
    raise DeclarationError(f"{where}: a 'not evaluated' claim says what it needs ('needs')")
  if d.kind in ("paper", "diagnostic") and d.form:
    if d.form not in protocol.FORMS:
      raise DeclarationError(f"{where}: form {d.form!r}; accepted: {', '.join(protocol.FORMS)}")
    need = {"better": ("claimed", "arms", "measure"), "equivalent": ("claimed", "arms", "margin", "measure"),
            "ordered": ("arms", "measure"), "bound": ("claimed", "bound", "measure"),
            "value": ("claimed", "target", "measure"), "contrast": ("claimed", "controls", "test", "measure")}
    missing = [k for k in need[d.form] if getattr(d, k) in (None, "", ())]
    if missing:
      raise DeclarationError(f"{where}: form {d.form} needs {', '.join(missing)}")
    if d.form == "contrast" and d.test not in INNER:
      raise DeclarationError(f"{where}: a contrast's test {d.test!r}; accepted: {', '.join(INNER)}")
    if d.form == "ordered" and len(d.arms) < 3:
      raise DeclarationError(f"{where}: ordered needs 3 or more levels in 'arms'")
  return d


def load(paper: str, folder: str = FOLDER) -> dict[str, Declaration]:
  """``{claim id: Declaration}`` of ``folder/<paper>.toml``, in file order.

  Raises:
    DeclarationError: a malformed table, an unknown key, a duplicate id, or an id not under ``paper.``.
  """
  path = os.path.join(folder, f"{paper}.toml")
  with open(path, "rb") as f:
    tables = tomllib.load(f).get("claim", [])
  out: dict[str, Declaration] = {}
  for t in tables:
    d = _declaration(t, path)
    if d.id in out or not d.id.startswith(paper + "."):
      raise DeclarationError(f"{path}: {d.id}: duplicate, or not under {paper}.")
    out[d.id] = d
  return out


def paper_info(paper: str, folder: str = FOLDER) -> dict:
  """The ``[paper]`` table of ``folder/<paper>.toml`` (``ran``, ``not_run``, ``mechanisms``, ``flips``: the
  one-minute summary's lines), or ``{}`` when the paper has no declarations yet."""
  path = os.path.join(folder, f"{paper}.toml")
  if not os.path.exists(path):
    return {}
  with open(path, "rb") as f:
    return dict(tomllib.load(f).get("paper", {}))


# --- what per-claim code returns -------------------------------------------------------------------

@dataclasses.dataclass
class Measured:
  """What a claim's measuring code returns: numbers, never a verdict.

  Attributes:
    runs: for a ``final`` or ``reach`` measure, ``{setting: runs}``, the runs of a setting one per seed,
      each ``{arm label: metric records}``; the engine computes the measure and the curve gates.
    values: for a ``custom`` measure, ``{setting: {arm: per-seed values}}`` (``inf``: never reached).
    gates: ``{setting: {arm: gate}}``, a gate per-claim code found (``broken baseline``, ``saturated``,
      ``resolution``, ``claimed diverges``): the comparisons with that arm are gated.
    numbers: further numbers for the record (``{name: value or per-seed list}``).
    figures: the figures (paths relative to the paper's report folder).
  """
  runs: dict = dataclasses.field(default_factory=dict)
  values: dict = dataclasses.field(default_factory=dict)
  gates: dict = dataclasses.field(default_factory=dict)
  numbers: dict = dataclasses.field(default_factory=dict)
  figures: list = dataclasses.field(default_factory=list)


def _last_finite(history: Sequence[dict], metric: str) -> float | None:
  finite = [r[metric] for r in history if r.get(metric) is not None and math.isfinite(r[metric])]
  return float(finite[-1]) if finite else None


def first_reach(history: Sequence[dict], metric: str, target: float, x: str = "round", lower_is_better=True) -> float:
  """The first ``x`` at which ``metric`` reaches ``target``; ``inf`` when no record does (censored).

  >>> first_reach([{"round": 0, "f": 3.0}, {"round": 5, "f": 0.5}], "f", 1.0)
  5.0
  """
  for r in history:
    v = r.get(metric)
    if v is not None and math.isfinite(v) and (v <= target if lower_is_better else v >= target):
      return float(r[x])
  return math.inf


def loglog_slope(xs: Sequence[float], ys: Sequence[float]) -> float:
  """The least-squares slope of log ``ys`` against log ``xs`` (a power law's exponent; ``numpy.polyfit``).

  >>> round(loglog_slope([1, 2, 4], [8.0, 4.0, 2.0]), 12)
  -1.0
  """
  return float(np.polyfit(np.log(np.asarray(xs, float)), np.log(np.asarray(ys, float)), 1)[0])


@dataclasses.dataclass(frozen=True)
class Curves:
  """A setting's runs reduced per arm: the measure per seed and the facts the gates need."""
  values: dict[str, list[float]]
  start: dict[str, list[float]]      # round-0 value per seed
  end: dict[str, list[float | None]]  # last finite value per seed (None: no finite value)
  floor: list[float]                  # per seed: the best value any arm reached
  diverged: dict[str, list[bool]]     # per seed: the run ends non-finite or above its start


def reduce_runs(runs: Sequence[Mapping[str, list[dict]]], arms: Sequence[str], measure: MeasureSpec) -> Curves:
  """The measure of every arm on every seed, with the start, end, floor and divergence per seed.

  The floor of a seed is the measure's known ``optimum`` if declared, else the best finite value any of its
  arms reached (the target of a ``reach`` measure is ``floor + fraction (start - floor)``, the start the
  seed's round-0 value of the first arm).
  """
  sign = 1.0 if measure.lower_is_better else -1.0
  vals: dict[str, list[float]] = {a: [] for a in arms}
  start: dict[str, list[float]] = {a: [] for a in arms}
  end: dict[str, list[float | None]] = {a: [] for a in arms}
  div: dict[str, list[bool]] = {a: [] for a in arms}
  floors = []
  for run in runs:
    finite = [sign * r[measure.metric] for a in run for r in run[a]  # every method of the run: one floor
              if r.get(measure.metric) is not None and math.isfinite(r[measure.metric])]
    floor = measure.optimum if measure.optimum is not None else sign * min(finite)
    first = run[arms[0]][0][measure.metric]
    target = floor + measure.fraction * (first - floor)
    floors.append(floor)
    for a in arms:
      s0 = run[a][0].get(measure.metric)
      last = run[a][-1].get(measure.metric)
      e = _last_finite(run[a], measure.metric)
      start[a].append(float(s0) if s0 is not None else math.nan)
      end[a].append(e)
      div[a].append(last is None or not math.isfinite(last) or (s0 is not None and sign * (last - s0) > 0))
      if measure.kind == "final":
        vals[a].append(sign * math.inf if e is None else e)
      else:
        vals[a].append(first_reach(run[a], measure.metric, target, measure.x, measure.lower_is_better))
  return Curves(vals, start, end, floors, div)


def _closed(c: Curves, arm: str, sign: float) -> np.ndarray:
  """Fraction of each seed's initial gap (start - floor) the arm closed by its end."""
  out = []
  for s0, e, f in zip(c.start[arm], c.end[arm], c.floor):
    gap = sign * (s0 - f)
    out.append(0.0 if e is None or gap <= 0 else sign * (s0 - e) / gap)
  return np.asarray(out)


def curve_gate(c: Curves, claimed: str, arm: str, measure: MeasureSpec, work: Curves | None = None) -> str | None:
  """The gate (VERDICTS.md §3) a comparison of ``claimed`` with ``arm`` fails, or None.

  ``claimed diverges`` (it ends above its start on most seeds while the arm works), ``broken baseline``
  (the arm closes less than half its initial gap to the run's floor on most seeds), ``saturated`` (both end
  within 1% of the gap of the floor, also three quarters through: final-value measures only; checked by the
  caller from the runs), ``resolution`` (most pairs tie on a ``reach`` measure while neither is censored).
  ``work``: the curves whether a method works and diverges is read on (default ``c``; the objective, a loss,
  for an accuracy measure)."""
  w = work or c
  sign = 1.0 if w is not c or measure.lower_is_better else -1.0  # the objective is a loss
  works = lambda a: bool(np.sum(_closed(w, a, sign) >= 0.5) > len(w.floor) / 2)  # noqa: E731
  if sum(w.diverged[claimed]) > len(w.floor) / 2 and works(arm):
    return "claimed diverges"
  if not works(arm):
    return "broken baseline"
  if measure.kind == "reach":
    a, b = np.asarray(c.values[claimed]), np.asarray(c.values[arm])
    ties = np.sum((a == b) & np.isfinite(a))
    if ties > len(a) / 2:
      return "resolution"
  return None


def saturated(runs: Sequence[Mapping[str, list[dict]]], a: str, b: str, measure: MeasureSpec) -> bool:
  """Both arms within 1% of the seed's initial gap of its floor at the end and three quarters through,
  on every seed (VERDICTS.md §3: the comparison is noise at the floor)."""
  sign = 1.0 if measure.lower_is_better else -1.0
  for run in runs:
    finite = [sign * r[measure.metric] for lab in run for r in run[lab]
              if r.get(measure.metric) is not None and math.isfinite(r[measure.metric])]
    s0 = run[a][0].get(measure.metric)
    if s0 is None or not finite:
      return False
    floor, start = min(finite), sign * s0
    ends = [_last_finite(run[lab][: max(1, (3 * len(run[lab])) // 4)], measure.metric) for lab in (a, b)]
    ends += [_last_finite(run[lab], measure.metric) for lab in (a, b)]
    if any(e is None or sign * e - floor > 0.01 * (start - floor) for e in ends):
      return False
  return True


# --- the engine ------------------------------------------------------------------------------------------

def _gate(result: protocol.Result, gate: str | None) -> protocol.Result:
  if gate is None:
    return result
  if gate == "claimed diverges":
    return protocol.gated(result, claimed_diverges=True)
  return dataclasses.replace(result, outcome=gate, gate=gate, note=(result.note + "; " if result.note else "") + gate)


def _settings(decl: Declaration, measured: Measured) -> dict[str, tuple[dict[str, list[float]], dict]]:
  """``{setting: (per-arm values, per-arm gates)}``, curve measures reduced and gated."""
  out = {}
  arms = [a for a in (decl.claimed, *decl.arms, *decl.controls) if a]
  if decl.measure and decl.measure.kind != "custom":
    for setting, runs in measured.runs.items():
      present = [a for a in dict.fromkeys(arms) if a in runs[0]]
      c = reduce_runs(runs, present, decl.measure)
      on_loss = not decl.measure.lower_is_better and "objective" in runs[0][present[0]][-1]
      work = reduce_runs(runs, present, MeasureSpec("final", "")) if on_loss else c  # "works" on its objective
      gates = dict(measured.gates.get(setting, {}))
      if decl.claimed in present and decl.form in ("better", "equivalent", "contrast"):
        for a in present:
          if a == decl.claimed or a in gates:
            continue
          g = curve_gate(c, decl.claimed, a, decl.measure, work)
          if g is None and decl.measure.kind == "final" and saturated(runs, decl.claimed, a, decl.measure):
            g = "saturated"
          if g:
            gates[a] = g
      out[setting] = (c.values, gates)
  for setting, values in measured.values.items():
    out[setting] = (values, dict(measured.gates.get(setting, {})))
  return out


def _compare(decl: Declaration, form: str, values: Mapping[str, list[float]], gates: Mapping[str, str],
             where: str, arm: str, ref: str | None = None) -> protocol.Result:
  """One comparison of ``arm`` (against ``ref`` for ``better``/``equivalent``) by ``form``, gated."""
  m = decl.measure
  unit, lower = (m.unit, m.lower_is_better) if m else ("", True)
  name = f"{where}: {arm}" + (f" vs {ref}" if ref else "")
  if form == "better":
    a, b = values[arm], values[ref]
    censored = not (np.all(np.isfinite(a)) and np.all(np.isfinite(b)))
    r = protocol.better(name, a, b, lower_is_better=lower, unit=unit, smallest_effect=decl.smallest_effect,
                        censored=censored)
    return _gate(r, gates.get(ref) or (gates.get(arm) if gates.get(arm) == "claimed diverges" else None))
  if form == "equivalent":
    return _gate(protocol.equivalent(name, values[arm], values[ref], margin=decl.margin, unit=unit), gates.get(ref))
  exact = protocol.seed_free if decl.deterministic else (lambda r: r)
  if form == "value":
    return _gate(exact(protocol.value(name, values[arm], decl.target, greater_is_better=not lower, unit=unit)),
                 gates.get(arm))
  if form == "bound":
    return _gate(exact(protocol.bound(name, values[arm], decl.bound, unit=unit, lower_is_better=lower)),
                 gates.get(arm))
  raise ValueError(f"{decl.id}: no test for form {form!r}")


def results(decl: Declaration, measured: Measured) -> list[protocol.Result]:
  """The comparisons of a declared claim, one per (setting, arm) for ``better``/``equivalent``, one per
  setting otherwise (one per control for ``contrast``), each gated (VERDICTS.md §2-3)."""
  lower = decl.measure.lower_is_better if decl.measure else True
  out: list[protocol.Result] = []
  for where, (values, gates) in _settings(decl, measured).items():
    if decl.form in ("better", "equivalent"):
      out += [_compare(decl, decl.form, values, gates, where, decl.claimed, a)
              for a in decl.arms if a in values and decl.claimed in values]
    elif decl.form in ("value", "bound"):
      if decl.claimed in values:
        out.append(_compare(decl, decl.form, values, gates, where, decl.claimed))
    elif decl.form == "ordered":
      levels = [a for a in decl.arms if a in values]
      if levels:
        table = np.asarray([values[a] for a in levels], dtype=float).T
        name = f"{where}: {' < '.join(levels)}"
        short = "too few levels" if len(levels) < 3 else "too few seeds" if table.shape[0] < 2 else None
        if short:  # Page's test needs three levels (a smoke run may measure two) and two seeds at least
          out.append(protocol.Result(name, "ordered", short, math.nan, math.nan, decl.measure.unit, gate=short))
          continue
        r = protocol.ordered(name, table, increasing=not lower, unit=decl.measure.unit)
        gate = next((gates[a] for a in levels if gates.get(a)), None)  # a gated level gates the trend
        out.append(_gate(r, gate))
    elif decl.form == "contrast":
      ref = decl.arms[0] if decl.test in ("better", "equivalent") else None
      if decl.claimed in values and (ref is None or ref in values):
        claimed = _compare(decl, decl.test, values, gates, where, decl.claimed, ref)
        out += [protocol.contrast(claimed, _compare(decl, decl.test, values, gates, where, c, ref))
                for c in decl.controls if c in values]
  return out


def headline_effect(verdict: protocol.Verdict, unit: str) -> dict:
  """The record's headline effect (VERDICTS.md §6): the median of the comparisons' median effects (positive
  favours the claim) over those that hold, or, when none holds, over those a working baseline allowed (every
  comparison but the broken-baseline, saturated and resolution ones), with its unit and, where each of them
  has one, the median ratio claimed / baseline."""
  held = [r for r in verdict.results if r.outcome == "holds"]
  allowed = [r for r in verdict.results if r.outcome not in ("broken baseline", "saturated", "resolution")]
  pool, over = (held, "the comparisons that hold") if held else (allowed, "the comparisons with a working baseline") \
      if allowed else (list(verdict.results), "all comparisons")
  effects = [r.effect for r in pool if not math.isnan(r.effect)]
  log_scale = any(w in unit for w in ("decade", "log"))  # a ratio of logarithms means nothing
  ratios = [] if log_scale else [r.ratio for r in pool if math.isfinite(r.ratio)]
  out = {"value": plain_number(float(np.median(effects)) if effects else math.nan), "unit": unit, "over": over}
  if ratios and len(ratios) == len(pool):
    out["ratio"] = float(np.median(ratios))
  raw = [v for r in pool if r.form in ("value", "bound", "contrast") for v in r.per_seed if math.isfinite(v)]
  if raw and all(r.form in ("value", "bound", "contrast") for r in pool):
    out["measured"] = float(np.median(raw))  # the measure itself, beside its distance from the target or bound
  return out


def judge(decl: Declaration, measured: Measured) -> Evidence:
  """The claim's evidence by the protocol: its comparisons, gated, Holm-corrected and aggregated.

  Raises:
    ValueError: the measured settings hold none of the declared arms (a declaration and its code disagree).
  """
  rows = results(decl, measured)
  if not rows:
    arms = {a for v in measured.values.values() for a in v} | {a for r in measured.runs.values() for a in r[0]}
    raise ValueError(f"{decl.id}: no comparison could be made from the measured arms {sorted(arms)}")
  numbers = {}
  for setting, (values, _) in _settings(decl, measured).items():
    for arm, vals in values.items():
      numbers[f"{setting} {decl.measure.describe() if decl.measure else ''} {arm}".replace("  ", " ")] = [
          plain_number(x) for x in vals]
  numbers.update(measured.numbers)
  return evidence(rows, decl.measure.unit if decl.measure else "", numbers, measured.figures)


def evidence(rows: Sequence[protocol.Result], unit: str, numbers: dict, figures: Sequence[str] = ()) -> Evidence:
  """The evidence of a claim's comparisons ``rows``: :func:`protocol.aggregate`'s verdict (Holm, section 5),
  a why that counts the gated comparisons, the rows as dicts and the headline effect in ``unit``."""
  v = protocol.aggregate(rows)
  why = v.reason or {"reproduced": "every counted comparison holds"}.get(v.verdict, "")
  gated = [r.outcome for r in v.results if r.outcome not in protocol.COUNTED]
  if gated:
    why += ("; " if why else "") + "listed, not counted: " + ", ".join(
        f"{gated.count(g)} {g}" for g in dict.fromkeys(gated))
  ev = Evidence(v.verdict, why, numbers=dict(numbers), figures=list(figures))
  ev.results = [_row(r) for r in v.results]
  ev.effect = headline_effect(v, unit)
  return ev


def _row(r: protocol.Result) -> dict:
  d = dataclasses.asdict(r)
  d["per_seed"] = [plain_number(x) for x in r.per_seed]
  d["interval"] = [plain_number(x) for x in r.interval]
  return {k: (plain_number(x) if isinstance(x, float) else x) for k, x in d.items()}


# --- claims from declarations -------------------------------------------------------------------------------

def claims(paper: str, measures: Mapping[str, Callable[[Context], Measured | Evidence]],
           folder: str = FOLDER) -> list[Claim]:
  """The paper's claims in declaration order: a ``check`` with ``tests`` becomes a test claim, a ``not
  evaluated`` one a record with what it needs, every other one a claim whose evaluation calls its measure
  (``measures[id]``) and :func:`judge` (a measure returning an ``Evidence`` is a check or diagnostic that
  keeps a rule of its own; a paper claim must return :class:`Measured`).

  Raises:
    DeclarationError: a claim with no measure, a measure with no declaration, or a paper claim without a form.
  """
  decls = load(paper, folder)
  extra = sorted(set(measures) - set(decls))
  if extra:
    raise DeclarationError(f"{paper}: measures without a declaration: {', '.join(extra)}")
  out = []
  for d in decls.values():
    if d.kind == "check" and d.tests:
      c = test_claim(d.id, d.statement, d.source, *d.tests)
    elif d.kind == "not evaluated":
      c = Claim(d.id, d.statement, d.source, d.criterion(), kind="not evaluated",
                evaluate=lambda ctx, d=d: Evidence("not evaluated", f"not evaluated here: {d.needs}"))
    else:
      if d.id not in measures:
        raise DeclarationError(f"{paper}: {d.id} has no measure")
      if d.kind == "paper" and not d.form:
        raise DeclarationError(f"{paper}: {d.id}: a paper claim declares a form")
      c = Claim(d.id, d.statement, d.source, d.criterion(), _evaluate(d, measures[d.id]),
                kind="paper" if d.kind == "paper" else d.kind)
    if d.scales:  # e.g. ["paper"]: its runs exceed the smoke budget
      c = dataclasses.replace(c, scales=d.scales)
    if d.paper_data:  # runs only on the paper's own data set (a key of claims.PAPER_DATA)
      c = c.on_paper_data(d.paper_data)
    from_record = getattr(measures.get(d.id), "from_record", None)
    if from_record is not None:  # record -> Measured: its runs' metrics were not stored, its numbers were
      per = getattr(measures[d.id], "per", "per-seed")
      c = dataclasses.replace(c, from_record=_judged_record(d, from_record, per))
    out.append(dataclasses.replace(c, headline=d.headline, declaration=d))
  return out


def _judged_record(decl: Declaration, from_record: Callable[[dict], Measured | Evidence],
                   per: str) -> Callable[[dict], Evidence]:
  def judged(record: dict) -> Evidence:
    out = from_record(record)
    ev = out if isinstance(out, Evidence) else judge(decl, out)
    ev.why += f"; judged from the record's {per} numbers (its runs' metrics were not stored; a re-run stores them)"
    return ev
  return judged


def _evaluate(decl: Declaration, measure: Callable[[Context], Measured | Evidence]) -> Callable[[Context], Evidence]:
  def evaluate(ctx: Context) -> Evidence:
    out = measure(ctx)
    if isinstance(out, Evidence):
      if decl.kind == "paper":
        raise TypeError(f"{decl.id}: a paper claim's measure returns Measured numbers, not a verdict")
      return out
    return judge(decl, out)
  return evaluate
