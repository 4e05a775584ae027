"""The engine that judges declared claims (VERDICTS.md §10), on synthetic numbers and runs whose right
verdict is known by construction."""

from __future__ import annotations

import math

import numpy as np
import pytest

from experiments.reproduce import engine
from experiments.reproduce.claims import Context, Evidence


def decl(**kw) -> engine.Declaration:
  table = {"id": "toy.c", "kind": "paper", "statement": "s", "source": "Fig. 1", **kw}
  return engine._declaration(table, "toy.toml")


REACH = {"kind": "reach", "unit": "rounds", "fraction": 0.1}
FINAL = {"kind": "final", "unit": "F"}
CUSTOM = {"kind": "custom", "unit": "rounds"}


def curve(values, metric="objective"):
  return [{"round": r, "queries": 10 * r, metric: float(v)} for r, v in enumerate(values)]


def test_declarations_are_validated_naming_the_claim_and_key(tmp_path):
  with pytest.raises(engine.DeclarationError, match="toy.c: unknown keys colour"):
    decl(form="better", claimed="a", arms=["b"], measure=FINAL, colour="red")
  with pytest.raises(engine.DeclarationError, match="form 'faster'; accepted: better, ordered"):
    decl(form="faster", claimed="a", arms=["b"], measure=FINAL)
  with pytest.raises(engine.DeclarationError, match="form equivalent needs margin"):
    decl(form="equivalent", claimed="a", arms=["b"], measure=FINAL)
  with pytest.raises(engine.DeclarationError, match="measure needs kind"):
    decl(form="better", claimed="a", arms=["b"], measure={"kind": "final"})
  with pytest.raises(engine.DeclarationError, match="says what it needs"):
    engine._declaration({"id": "toy.n", "kind": "not evaluated", "statement": "s", "source": "Fig. 2"}, "t")
  (tmp_path / "toy.toml").write_text('[[claim]]\nid = "other.x"\nkind = "check"\nstatement = "s"\nsource = "x"\n')
  with pytest.raises(engine.DeclarationError, match="not under toy."):
    engine.load("toy", str(tmp_path))


def test_a_declarations_digest_changes_with_its_criterion_and_not_with_key_order():
  a = decl(form="better", claimed="a", arms=["b"], measure=FINAL, smallest_effect=1.0)
  b = engine._declaration({"smallest_effect": 1.0, "measure": FINAL, "arms": ["b"], "claimed": "a", "form": "better",
                           "source": "Fig. 1", "statement": "s", "kind": "paper", "id": "toy.c"}, "t")
  c = decl(form="better", claimed="a", arms=["b"], measure=FINAL, smallest_effect=2.0)
  assert a.digest == b.digest != c.digest


def test_twelve_comparisons_at_five_seeds_cannot_hold_and_at_ten_they_do():
  d = decl(form="better", claimed="a", arms=[f"b{i}" for i in range(4)], measure=CUSTOM)
  for n, verdict in ((5, "inconclusive"), (10, "reproduced")):
    values = {f"C={c}": {"a": [1.0] * n, **{f"b{i}": [2.0 + 0.1 * s for s in range(n)] for i in range(4)}}
              for c in range(3)}
    ev = engine.judge(d, engine.Measured(values=values))
    assert ev.verdict == verdict, (n, ev.why)
  ev = engine.judge(d, engine.Measured(values={"C=0": {"a": [1.0] * 5, "b0": [2.0] * 5}}))
  assert ev.verdict == "reproduced"  # one comparison at n = 5: unanimity gives p = 1/32


def test_curve_measures_reach_and_final_with_the_seed_floor_as_target():
  d = decl(form="better", claimed="a", arms=["b"], measure=REACH)
  runs = [{"a": curve([10, 5, 2, 1, 1]), "b": curve([10, 8, 6, 3, 1])} for _ in range(5)]
  c = engine.reduce_runs(runs, ["a", "b"], d.measure)
  # floor 1, target 1 + 0.1 * 9 = 1.9: a reaches it at round 3, b at round 4
  assert c.values == {"a": [3.0] * 5, "b": [4.0] * 5}
  ev = engine.judge(d, engine.Measured(runs={"s": runs}))
  assert ev.verdict == "reproduced" and ev.effect["value"] == 1.0 and ev.effect["unit"] == "rounds"
  assert ev.effect["ratio"] == pytest.approx(0.75)


def test_a_baseline_that_does_not_learn_never_yields_a_hold():
  d = decl(form="better", claimed="a", arms=["b"], measure=FINAL)
  runs = [{"a": curve([10, 5, 1 + 0.01 * s]), "b": curve([10, 9.8, 9.7])} for s in range(10)]
  ev = engine.judge(d, engine.Measured(runs={"s": runs}))
  assert [r["outcome"] for r in ev.results] == ["broken baseline"]
  assert ev.verdict == "inconclusive" and "broken baseline" in ev.why


def test_the_working_baseline_gate_reads_one_floor_per_run_and_an_accuracy_claims_objective():
  d = decl(form="better", claimed="a", arms=["b"], measure=FINAL)
  # b closes 8/9 of its gap to a's floor (about 1); with a third method of the run at -8 the run's floor is -8,
  # b closes 8/18 < 1/2 of its gap to it, and the comparison is gated.
  runs = [{"a": curve([10, 5, 1 - 0.01 * s]), "b": curve([10, 4, 2]), "c": curve([10, 0, -8])} for s in range(10)]
  assert [r["outcome"] for r in engine.judge(d, engine.Measured(runs={"s": runs})).results] == ["broken baseline"]
  two = [{k: v for k, v in r.items() if k != "c"} for r in runs]
  assert [r["outcome"] for r in engine.judge(d, engine.Measured(runs={"s": two})).results] == ["holds"]
  # accuracy: b's accuracy closes 0.2 of the gap to a's 0.9, yet its loss closes most of its gap: b works
  acc = decl(form="better", claimed="a", arms=["b"],
             measure={"kind": "final", "metric": "acc", "unit": "pp", "lower_is_better": False})

  def run(accs, losses):
    return [{"round": i, "acc": a, "objective": f} for i, (a, f) in enumerate(zip(accs, losses))]
  runs = [{"a": run([0.1, 0.5, 0.9 + 0.001 * s], [2.0, 1.0, 0.5]), "b": run([0.1, 0.2, 0.26], [2.0, 1.0, 0.7])}
          for s in range(10)]
  assert [r["outcome"] for r in engine.judge(acc, engine.Measured(runs={"s": runs})).results] == ["holds"]


def test_a_claimed_method_that_diverges_where_the_baseline_works_is_opposite():
  d = decl(form="better", claimed="a", arms=["b"], measure=REACH)
  runs = [{"a": curve([10, 12, math.inf]), "b": curve([10, 4, 1 + 0.1 * s])} for s in range(5)]
  ev = engine.judge(d, engine.Measured(runs={"s": runs}))
  assert ev.results[0]["outcome"] == "opposite" and ev.verdict == "not reproduced"


def test_two_methods_at_the_floor_are_saturated():
  d = decl(form="better", claimed="a", arms=["b"], measure=FINAL)
  runs = [{"a": curve([10, 1.001, 1.0, 1.0, 1.0]), "b": curve([10, 1.002, 1.001, 1.0 + 1e-3 * (s + 1), 1.001])}
          for s in range(5)]
  ev = engine.judge(d, engine.Measured(runs={"s": runs}))
  assert ev.results[0]["outcome"] == "saturated" and ev.verdict == "inconclusive"


def test_a_contrast_whose_control_passes_too_does_not_discriminate():
  # "rounds at d = 10,000 / rounds at d = 100 stay below 2, unlike the control"
  d = decl(form="contrast", test="value", claimed="hiso", controls=["decomfl"], target=2.0,
           measure={"kind": "custom", "unit": "ratio", "lower_is_better": True})
  both = {"d": {"hiso": [1.1, 1.5, 1.2, 1.3, 1.4], "decomfl": [1.22, 1.3, 1.25, 1.33, 1.28]}}
  ev = engine.judge(d, engine.Measured(values=both))
  assert ev.verdict == "inconclusive" and "does not discriminate" in ev.why
  only = {"d": {"hiso": [1.1, 1.5, 1.2, 1.3, 1.4], "decomfl": [3.0, 2.5, 4.0, 3.3, 2.8]}}
  assert engine.judge(d, engine.Measured(values=only)).verdict == "reproduced"


def test_a_decay_steeper_than_an_upper_bound_is_consistent():
  d = decl(form="bound", claimed="ffgb", bound=-1.0, measure={"kind": "custom", "unit": "decades per decade"})
  steep = engine.judge(d, engine.Measured(values={"K": {"ffgb": [-1.96, -1.9, -2.0, -1.95, -1.97]}}))
  shallow = engine.judge(d, engine.Measured(values={"K": {"ffgb": [-0.5, -0.6, -0.4, -0.55, -0.45]}}))
  assert steep.verdict == "reproduced" and shallow.verdict == "not reproduced"
  speedup = decl(form="bound", claimed="m", bound=1.0,
                 measure={"kind": "custom", "unit": "speed-up per participant", "lower_is_better": False})
  assert engine.judge(speedup, engine.Measured(values={"M": {"m": [1.2, 1.3, 1.1, 1.25, 1.4]}})).verdict == "reproduced"


def test_a_deterministic_measure_is_compared_exactly_and_only_when_its_seeds_agree():
  unit = {"kind": "custom", "unit": "bound exponents"}
  parts = {f"part {i}": {"ffgb": [-1.96 + 1e-6 * s for s in range(5)]} for i in range(3)}
  sampled = engine.judge(decl(form="bound", claimed="ffgb", bound=-1.0, measure=unit), engine.Measured(values=parts))
  assert sampled.verdict == "inconclusive" and sampled.why.startswith("too few seeds")  # 3 x n = 5: Holm's floor
  exact = decl(form="bound", claimed="ffgb", bound=-1.0, measure=unit, deterministic=True)
  assert engine.judge(exact, engine.Measured(values=parts)).verdict == "reproduced"
  above = {k: {"ffgb": [-0.9] * 5} for k in parts}  # slower than the bound on every part, exactly
  assert engine.judge(exact, engine.Measured(values=above)).verdict == "not reproduced"
  noisy = {k: {"ffgb": [-1.96, -1.5, -2.4, -1.9, -2.0]} for k in parts}  # seeds that differ are samples again
  ev = engine.judge(exact, engine.Measured(values=noisy))
  assert ev.verdict == "inconclusive" and all("seeds differ" in r["note"] for r in ev.results)


def test_ordered_levels_use_pages_test_in_the_claimed_direction():
  d = decl(form="ordered", arms=["H=1", "H=5", "H=20"], measure=FINAL)
  rng = np.random.default_rng(0)
  falls = {"x": {lab: list(v - rng.random(8) * 0.1) for lab, v in (("H=1", 3.0), ("H=5", 2.0), ("H=20", 1.0))}}
  rises = {"x": {lab: list(v - rng.random(8) * 0.1) for lab, v in (("H=1", 1.0), ("H=5", 2.0), ("H=20", 3.0))}}
  assert engine.judge(d, engine.Measured(values=falls)).verdict == "reproduced"
  assert engine.judge(d, engine.Measured(values=rises)).verdict == "not reproduced"
  two = {"x": {lab: v for lab, v in falls["x"].items() if lab != "H=5"}}  # a smoke run measures two levels only
  ev = engine.judge(d, engine.Measured(values=two))
  assert ev.verdict == "inconclusive" and ev.why.startswith("too few levels")


def test_equivalence_with_zero_true_effect_passes_and_a_shift_beyond_the_margin_does_not():
  d = decl(form="equivalent", claimed="f32", arms=["f64"], margin=0.05, measure=FINAL)
  rng = np.random.default_rng(1)
  base = rng.normal(1.0, 0.1, 10)
  same = engine.judge(d, engine.Measured(values={"C": {"f32": list(base + rng.normal(0, 0.01, 10)),
                                                       "f64": list(base)}}))
  shifted = engine.judge(d, engine.Measured(values={"C": {"f32": list(base + 0.2 + rng.normal(0, 0.01, 10)),
                                                          "f64": list(base)}}))
  assert same.verdict == "reproduced" and shifted.verdict == "not reproduced"


def test_claims_come_from_declarations_with_the_not_evaluated_ones_listed(tmp_path):
  (tmp_path / "toy.toml").write_text(
      '[[claim]]\nid = "toy.fig"\nkind = "paper"\nstatement = "a beats b"\nsource = "Fig. 1"\nform = "better"\n'
      'claimed = "a"\narms = ["b"]\nmeasure = { kind = "custom", unit = "rounds" }\nheadline = true\n'
      'deviations = ["digits for CIFAR-10"]\n\n'
      '[[claim]]\nid = "toy.llm"\nkind = "not evaluated"\nstatement = "LLM table"\nsource = "Table 3"\n'
      'needs = "OPT-13B and SST-2"\n')
  measured = engine.Measured(values={"s": {"a": [1.0] * 5, "b": [2.0] * 5}})
  out = engine.claims("toy", {"toy.fig": lambda ctx: measured}, folder=str(tmp_path))
  assert [c.id for c in out] == ["toy.fig", "toy.llm"]
  fig, llm = out
  assert fig.headline and fig.declaration.deviations == ("digits for CIFAR-10",) and "Wilcoxon" in fig.criterion
  assert fig.evaluate(None).verdict == "reproduced"
  assert llm.kind == "not evaluated" and "OPT-13B" in llm.evaluate(None).why
  with pytest.raises(TypeError, match="Measured numbers, not a verdict"):
    engine.claims("toy", {"toy.fig": lambda ctx: Evidence("reproduced", "x")}, folder=str(tmp_path))[0].evaluate(
        Context(str(tmp_path), "smoke"))
  with pytest.raises(engine.DeclarationError, match="measures without a declaration: toy.ghost"):
    engine.claims("toy", {"toy.fig": lambda ctx: measured, "toy.ghost": lambda ctx: measured}, folder=str(tmp_path))
