"""experiments.fzoos.float32_equivalence: its measures and its judging rule on small synthetic inputs whose
answers are known (one setting equivalent, one not)."""

import numpy as np

from experiments.fzoos import float32_equivalence as fe

F64, F32 = fe.F64, fe.F32
ROUNDS = "rounds to 10% of the initial gap"


def _table(f32_shift_f: float, f32_shift_rounds: float, seed: int):
  """One setting's values on 10 seeds: float32 = float64 + shift + small noise (sd 0.002 F, 0.3 rounds)."""
  rng = np.random.default_rng(seed)
  f64 = rng.uniform(0.01, 0.05, 10)
  r64 = rng.integers(8, 14, 10).astype(float)
  return {
      "F(x_50) - F*": {F64: list(f64), F32: list(f64 + f32_shift_f + rng.normal(0, 0.002, 10))},
      ROUNDS: {F64: list(r64), F32: list(r64 + f32_shift_rounds + rng.normal(0, 0.3, 10))},
  }


def test_judge_holds_only_when_every_interval_is_inside_its_margin():
  rows, equivalent = fe.judge({"C=5": _table(0.001, 0.0, 0)})
  assert [r.outcome for r in rows] == ["holds", "holds"] and equivalent
  # 0.05 F lies outside the F margin (0.03), 3 rounds outside the rounds margin (2): both opposite, not equivalent
  rows, equivalent = fe.judge({"C=5": _table(0.001, 0.0, 0), "C=50": _table(0.05, 3.0, 1)})
  assert [r.outcome for r in rows] == ["holds", "holds", "opposite", "opposite"] and not equivalent
  assert rows[2].setting == "C=50: F(x_50) - F*" and rows[3].unit == "rounds"
  # 0.05 rounds is inside the rounds margin but not the F margin: the margin follows the measure's name
  shifted = _table(0.05, 0.0, 2)["F(x_50) - F*"]
  rows, _ = fe.judge({"C=0.5": {ROUNDS: shifted, "F(x_50) - F*": shifted}})
  assert [r.outcome for r in rows] == ["holds", "opposite"]


def test_measures_read_the_round_r_value_and_the_reach_round():
  def run(gaps64, gaps32):
    return {lab: [{"round": r, "optimality_gap": g} for r, g in enumerate(gaps)]
            for lab, gaps in ((F64, gaps64), (F32, gaps32))}
  g64 = [10.0] + [5.0] * 9 + [0.9] * 16 + [0.5] * 25   # rounds 0..50: reaches 10% (1.0) at round 10
  g32 = [10.0] + [5.0] * 11 + [0.8] * 14 + [0.4] * 25  # reaches it at round 12
  m = fe.measures([run(g64, g32)])
  assert m["F(x_10) - F*"] == {F64: [0.9], F32: [5.0]}
  assert m["F(x_25) - F*"] == {F64: [0.9], F32: [0.8]}
  assert m["F(x_50) - F*"] == {F64: [0.5], F32: [0.4]}
  assert m[ROUNDS] == {F64: [10.0], F32: [12.0]}
