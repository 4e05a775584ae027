"""experiments.reproduce.papers.ffgb: each curve claim's criterion on hand-made runs (no real runs)."""

from __future__ import annotations

import json
import math
import os

import pytest

from experiments.reproduce import stats
from experiments.reproduce.papers import ffgb as F
from tests.experiments.test_reproduce import FakeContext

ABL = F._label(F.CODE_PAPER_LEARNER)


def _hist(acc, rounds=(0, 2), cost=28, train=None, gh=0.5, objective=None):
  """Records at ``rounds`` rising linearly to the final ``acc`` (``objective``: the training loss
  per record, if given)."""
  out = []
  for j, r in enumerate(rounds):
    a = 0.1 + (acc - 0.1) * j / max(len(rounds) - 1, 1)
    out.append({"round": r, "test_accuracy": a, "train_accuracy": a if train is None else train[j],
                "comm": 2.0 + cost * r, "gamma_hat_min_all": gh if r else float("inf"), "gamma_hat_mean": gh,
                "gamma_hat_min": gh if r else 1.0})
    if objective is not None:
      out[-1]["objective"] = objective[j]
  return out


def _versus_run(ffgb, code, abl, fedavg, gh=0.5):
  return {"ffgb": _hist(ffgb, gh=gh), "ffgb_code": _hist(code, gh=gh), ABL: _hist(abl, gh=gh),
          "fedavg": [{k: v for k, v in r.items() if k not in ("train_accuracy", "comm", "gamma_hat_mean")}
                     for r in _hist(fedavg, rounds=(0, 14, 28))]}  # FedAvg logs none of these


OFFSETS = (-0.02, -0.01, 0.0, 0.01, 0.02)  # five seeds, each shifting every algorithm's accuracy alike


def _paper_runs(accs_s1, accs_s3=None, offsets=OFFSETS):
  """Paper-scale versus runs: s = 0.1 and 0.3, one per seed; seed k adds offsets[k] to every accuracy."""
  out = {}
  for s, accs in ((1, accs_s1), (3, accs_s3 or accs_s1)):
    for seed, d in enumerate(offsets):
      out[f"digits_s0{s}_seed{seed}"] = run = _versus_run(*(a + d for a in accs))
      run["ffgb_nores"] = run[F._label(F.PAPER_CODE_LEARNER)] = _hist(0.5)
  return out


class PaperSeeds(FakeContext):
  def pick(self, smoke, paper):
    return paper


@pytest.mark.parametrize("accs, paper, code", [
    ((0.9, 0.85, 0.88, 0.8), "reproduced", "reproduced"),
    ((0.7, 0.6, 0.88, 0.8), "not reproduced", "not reproduced"),
])
def test_versus_fedavg_criteria(tmp_path, accs, paper, code):
  runs = _paper_runs(accs)
  ev = F.versus_fedavg("digits", code=False)(PaperSeeds(tmp_path, runs=runs))
  assert ev.verdict == paper, ev.why
  assert [c.n for c in ev.comparisons] == [5, 5] and ev.comparisons[0].test.endswith("(paired)")
  assert ev.numbers["s=0.1 final test accuracy ffgb"].mean == pytest.approx(accs[0])
  assert ev.numbers["s=0.1 fedavg test accuracy at FFGB's last round (2)"].mean == pytest.approx(0.1)
  assert all(os.path.exists(tmp_path / f) for f in ev.figures) and len(ev.figures) == 4
  ev = F.versus_fedavg("digits", code=True)(PaperSeeds(tmp_path, runs=runs))
  assert ev.verdict == code
  if code != "reproduced":  # the ablation with the paper learner wins: the learner is the cause
    assert "the learner (N(0, 1/fan_in^2)" in ev.why


def test_versus_fedavg_code_ablation_not_the_cause(tmp_path):
  ev = F.versus_fedavg("digits", code=True)(PaperSeeds(tmp_path, runs=_paper_runs((0.9, 0.6, 0.7, 0.8))))
  assert ev.verdict == "not reproduced" and "learner alone is not the cause" in ev.why


def test_versus_fedavg_partly_at_paper_scale(tmp_path):
  runs = _paper_runs((0.9, 0.6, 0.7, 0.8), (0.7, 0.6, 0.7, 0.8))
  ev = F.versus_fedavg("digits", code=False)(PaperSeeds(tmp_path, runs=runs))
  assert ev.verdict == "partly reproduced" and ev.numbers["s=0.3 final test accuracy ffgb"].n == 5


def test_versus_fedavg_pairs_the_seeds(tmp_path):
  # FFGB 0.90 vs FedAvg 0.88 on every seed, the seeds spread +-0.02 alike: the gap (0.02) is within twice the
  # seed std (0.032), which the old unpaired rule called no win; paired by seed FFGB wins 5 of 5 at each s.
  ev = F.versus_fedavg("digits", code=False)(PaperSeeds(tmp_path, runs=_paper_runs((0.9, 0.6, 0.7, 0.88))))
  assert ev.verdict == "reproduced" and all(c.wins == 5 and c.p == pytest.approx(1 / 32) for c in ev.comparisons)
  # One seed (smoke scale) cannot decide.
  ev = F.versus_fedavg("digits", code=False)(FakeContext(tmp_path, runs=_paper_runs((0.9, 0.6, 0.7, 0.88))))
  assert ev.verdict == "inconclusive" and ev.why.startswith("too few seeds")


def test_versus_fedavg_from_a_records_numbers_equals_the_runs_judgment(tmp_path):
  from experiments.reproduce import report
  runs = _paper_runs((0.7, 0.6, 0.88, 0.8))
  for code in (False, True):
    ev = F.versus_fedavg("digits", code=code)(PaperSeeds(tmp_path, runs=runs))
    record = {"numbers": json.loads(json.dumps({k: report._number(v) for k, v in ev.numbers.items()}))}
    again = next(c for c in F.CLAIMS if c.id == ("ffgb.fig4_digits_code" if code else "ffgb.fig4_digits")
                 ).from_record(record)
    assert again.comparisons == ev.comparisons and again.verdict == ev.verdict == "not reproduced"
    assert again.why.startswith(ev.why) and "the record's per-seed numbers" in again.why


def test_comm_accounting(tmp_path):
  runs = {"digits_s01_seed0": _versus_run(0.9, 0.8, 0.8, 0.8)}
  assert F.comm_accounting(FakeContext(tmp_path, runs=runs)).verdict == "reproduced"
  runs["digits_s01_seed0"]["ffgb"][-1]["comm"] += 1
  assert F.comm_accounting(FakeContext(tmp_path, runs=runs)).verdict == "not reproduced"
  runs = {"digits_s01_seed0": _versus_run(0.9, 0.8, 0.8, 0.8)}
  runs["digits_s01_seed0"]["fedavg"][-1]["round"] = 27
  assert F.comm_accounting(FakeContext(tmp_path, runs=runs)).verdict == "not reproduced"


class SpecContext(FakeContext):
  """A FakeContext that keeps each run's flagfile and flags."""

  def __init__(self, root, runs):
    super().__init__(root, runs=runs)
    self.specs = {}

  def run(self, name, flagfile=None, **flags):
    self.specs[name] = (flagfile, flags)
    return super().run(name, flagfile, **flags)


def test_oracle_fidelity(tmp_path):
  runs = {"digits_s01_seed0": _versus_run(0.9, 0.8, 0.8, 0.8),
          "oracle_steps40_seed0": _versus_run(0.9, 0.8, 0.8, 0.8, gh=0.2)}
  ctx = SpecContext(tmp_path, runs)
  assert F.oracle_fidelity(ctx).verdict == "reproduced"
  assert "oracle_steps40_seed0" not in ctx.specs                           # no ablation when every call passes
  runs["digits_s01_seed0"]["ffgb_code"] = _hist(0.8, gh=-0.1)
  ev = F.oracle_fidelity(ctx)
  assert ev.verdict == "partly reproduced"
  assert "the oracle's step count is the cause" in ev.why and "lowest gamma-hat <= 0 falls in rounds 1-2" in ev.why
  flagfile, flags = ctx.specs["oracle_steps40_seed0"]
  assert flagfile == "ffgb_digits_s01.cfg"
  assert flags == {"algorithm": ["ffgb", "ffgb_code", F.CODE_PAPER_LEARNER, "fedavg"], "seed": 0,
                   "comm_budget": 2 + 28 * 2, "oracle_steps": 40, "eval_every": 1}
  assert ev.numbers["ablation 40 Adam steps, rounds 1-2: min gamma-hat ffgb_code"].mean == 0.2
  runs["digits_s01_seed0"]["ffgb"] = _hist(0.8, gh=0.0)
  runs["oracle_steps40_seed0"]["ffgb"] = _hist(0.8, gh=-0.5)
  ev = F.oracle_fidelity(ctx)
  assert ev.verdict == "not reproduced"
  assert "calls with gamma-hat <= 0 remain for ffgb (rounds [2]), so the step count alone is not the cause" in ev.why
  assert ev.numbers["ablation min gamma-hat at round 2 ffgb"].mean == -0.5


def test_oracle_fidelity_says_when_bad_calls_come_after_the_first_evaluation(tmp_path):
  runs = {"digits_s01_seed0": _versus_run(0.9, 0.8, 0.8, 0.8),
          "oracle_steps40_seed0": _versus_run(0.9, 0.8, 0.8, 0.8, gh=0.2)}
  late = _hist(0.8, rounds=(0, 2, 4), gh=0.3)
  late[2]["gamma_hat_min_all"] = -0.1                                        # a bad call in rounds 3-4
  runs["digits_s01_seed0"]["ffgb_code"] = late
  ev = F.oracle_fidelity(SpecContext(tmp_path, runs))
  assert "some runs reach their lowest gamma-hat <= 0 after round 2" in ev.why
  late[1]["gamma_hat_min_all"] = -0.1                                        # ... unless it was there by round 2
  late[2]["gamma_hat_min_all"] = -0.1
  runs["digits_s01_seed0"]["ffgb"] = _hist(0.8, rounds=(0, 2, 4), gh=0.3)
  runs["digits_s01_seed0"]["ffgb"][2]["gamma_hat_min_all"] = 0.1            # lower later, but still > 0
  ev = F.oracle_fidelity(SpecContext(tmp_path, runs))
  assert "every run's lowest gamma-hat <= 0 falls in rounds 1-2" in ev.why


def _residual_runs(res, nores, seeds=5, spread=0.0):
  """Fig. 2a runs of ``seeds`` seeds at rounds 0, 2, 4: ffgb's train accuracy ``res`` and ffgb_nores's
  ``nores`` per round, seed k shifted by k ``spread`` (both variants alike: the seed's split)."""
  return {f"residual_seed{k}": {"ffgb": _hist(0.5, (0, 2, 4), train=tuple(v + k * spread for v in res)),
                                "ffgb_nores": _hist(0.5, (0, 2, 4), train=tuple(v + k * spread for v in nores))}
          for k in range(seeds)}


@pytest.mark.parametrize("res, nores, verdict", [
    ((0.1, 0.7, 0.8), (0.1, 0.6, 0.7), "reproduced"),
    ((0.1, 0.5, 0.9), (0.1, 0.6, 0.8), "partly reproduced"),  # above at the end only
    ((0.1, 0.6, 0.8), (0.1, 0.6, 0.8), "not reproduced"),     # equal: undecided on 5 seeds
    ((0.1, 0.5, 0.7), (0.1, 0.6, 0.8), "not reproduced"),
])
def test_fig2a_residual(tmp_path, res, nores, verdict):
  ev = F.fig2a_residual(PaperSeeds(tmp_path, runs=_residual_runs(res, nores, spread=0.01)))
  assert ev.verdict == verdict, ev.why
  assert [c.name for c in ev.comparisons] == ["round 2: final train_accuracy, ffgb vs ffgb_nores",
                                              "round 4: final train_accuracy, ffgb vs ffgb_nores"]
  if verdict == "partly reproduced":
    assert "gamma-hat" in ev.why
  one = F.fig2a_residual(FakeContext(tmp_path, runs=_residual_runs(res, nores, seeds=1)))  # smoke: one seed
  assert one.verdict in ("inconclusive", "not reproduced")


def test_fig2a_residual_pairs_the_seeds(tmp_path):
  # The seeds spread 0.05 apart (more than the 0.01 gap); each seed's residual run is above its ablation.
  ev = F.fig2a_residual(PaperSeeds(tmp_path, runs=_residual_runs((0.1, 0.61, 0.81), (0.1, 0.6, 0.8), spread=0.05)))
  assert ev.verdict == "reproduced" and ev.comparisons[-1].wins == 5


def _k_runs(finals, spread=0.05, mids=None, seeds=5):
  """K-sweep runs over ``seeds`` seeds: train accuracy 0.1 at round 0, ``mids`` (default: the finals minus 0.05)
  at round 10, ``finals`` at round 20, every value of seed s shifted by (s - 2) x ``spread`` (more than the
  gaps between K: only pairing decides)."""
  mids = mids or [v - 0.05 for v in finals]
  return {f"k_sweep_seed{s}": {k: _hist(0.5, rounds=(0, 10, 20), train=(0.1, m + (s - 2) * spread,
                                                                          v + (s - 2) * spread),
                                        objective=(2.3, 1.5 - m, 1.0 - v))
                               for k, m, v in zip(F.K_LABELS, mids, finals)}
          for s in range(seeds)}


@pytest.mark.parametrize("finals, verdict", [
    ((0.5, 0.6, 0.65, 0.7, 0.8), "reproduced"),
    ((0.5, 0.6, 0.6, 0.7, 0.8), "partly reproduced"),  # a tie is not a rise
    ((0.5, 0.7, 0.6, 0.7, 0.8), "partly reproduced"),
    ((0.8, 0.7, 0.6, 0.5, 0.4), "not reproduced"),
])
def test_fig2b_k_sweep_pairs_the_seeds(tmp_path, finals, verdict):
  ev = F.fig2b_k_sweep(PaperSeeds(tmp_path, runs=_k_runs(finals)))
  assert ev.verdict == verdict, ev.why
  # (4 adjacent pairs + K = 40 vs 1) x (round 10, round 20)
  assert len(ev.comparisons) == 10
  assert ev.comparisons[0].name == "round 10: final train_accuracy, ffgb-local_steps=5 vs ffgb-local_steps=1"
  assert ev.numbers["round 20 final train_accuracy ffgb-local_steps=40"] == pytest.approx(
      [finals[-1] + (s - 2) * 0.05 for s in range(5)])
  assert all(os.path.exists(tmp_path / f) for f in ev.figures)
  one = F.fig2b_k_sweep(FakeContext(tmp_path, runs={"k_sweep_seed0": _k_runs(finals, seeds=1)["k_sweep_seed0"]}))
  assert one.verdict == "inconclusive"   # smoke: one seed decides nothing


def test_fig2b_saturated_accuracies_are_inconclusive_and_the_loss_is_reported(tmp_path):
  """Every K at 100% training accuracy from round 5 on (evaluated every 5 rounds, as the flagfile does): every
  comparison is saturated, none is lost."""
  runs = {f"k_sweep_seed{s}": {k: _hist(0.5, rounds=(0, 5, 10, 15, 20), train=(0.1, 1.0, 1.0, 1.0, 1.0),
                                        objective=(2.3, 0.5 - 0.01 * i, 0.2, 0.1, 0.05))
                               for i, k in enumerate(F.K_LABELS)} for s in range(5)}
  ev = F.fig2b_k_sweep(PaperSeeds(tmp_path, runs=runs))
  assert ev.verdict == "inconclusive" and ev.why.startswith("saturated"), ev.why
  assert [c.name.split(":")[0] for c in ev.comparisons[::5]] == ["round 10", "round 20"]
  assert ev.numbers["train loss at round 5 ffgb-local_steps=10"].mean == pytest.approx(0.48)
  assert "round 5 0.5000, 0.4900, 0.4800, 0.4700, 0.4600 (non-increasing in K)" in ev.why


class SweepContext(FakeContext):
  """A FakeContext whose ``script`` writes a given results.csv."""

  def __init__(self, root, rows):
    super().__init__(root)
    self.rows = rows

  def script(self, name, module, **flags):
    self.commands.append(f"script {name}")
    out = os.path.join(self.root, "runs", name)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "results.csv"), "w") as f:
      f.write("algorithm,feature_shift,seed,final_objective\n")
      for alg, eps, value in self.rows:  # value: one seed's, or a tuple of per-seed values
        values = value if isinstance(value, tuple) else (value,)
        f.writelines(f"{alg},{eps},{seed},{v}\n" for seed, v in enumerate(values))
    return out


def _seeds(mean, spread=0.1):
  """Five per-seed values around ``mean``, seed s at (s - 2) x ``spread``."""
  return tuple(mean + (s - 2) * spread for s in range(5))


@pytest.mark.parametrize("c_means, verdict", [
    ((0.2, 0.3, 0.4, 0.5), "reproduced"),          # rises with every shift on every seed (seeds spread 0.1 apart)
    ((0.2, 0.4, 0.3, 0.5), "partly reproduced"),   # 0.25 -> 0.5 falls
    ((0.5, 0.4, 0.3, 0.2), "not reproduced"),
])
def test_ffgb_c_tv_pairs_the_seeds(tmp_path, c_means, verdict):
  rows = [("ffgb_c", e, _seeds(v)) for e, v in zip((0, 0.25, 0.5, 1), c_means)] + [("ffgb", 0, _seeds(0.25))]
  ev = F.ffgb_c_tv(SeedSweepContext(tmp_path, rows))
  assert ev.verdict == verdict, ev.why
  assert [c.name for c in ev.comparisons][-1] == "ffgb_c final objective, eps = 1 vs 0"
  assert ev.numbers["final objective ffgb_c eps=1"] == pytest.approx(list(_seeds(c_means[-1])))
  assert os.path.exists(tmp_path / ev.figures[0])


def test_shift_sweep_pairs_rows_by_their_seed_column(tmp_path):
  folder = tmp_path / "sweep"
  folder.mkdir()
  (folder / "results.csv").write_text("algorithm,feature_shift,seed,final_objective\n"
                                      "ffgb_c,0,1,0.5\nffgb_c,0,0,0.2\nffgb_c,1,0,0.3\nffgb_c,1,1,0.6\n")
  assert F._sweep_finals(str(folder)) == {"ffgb_c": {0.0: [0.2, 0.5], 1.0: [0.3, 0.6]}}


@pytest.mark.parametrize("l_means, printed, verdict", [
    ((0.01, 0.02, 0.03, 0.04, 0.05), 5.0, "reproduced"),
    ((0.05, 0.04, 0.03, 0.02, 0.01), 5.0, "partly reproduced"),   # falls with the shift; printed worse
    ((0.01, 0.02, 0.03, 0.04, 0.05), 0.0, "partly reproduced"),   # rises; printed better
    ((0.05, 0.04, 0.03, 0.02, 0.01), 0.0, "not reproduced"),
])
def test_ffgb_l_w1_pairs_the_seeds(tmp_path, l_means, printed, verdict):
  eps = (0, 0.25, 0.5, 1, 2)
  rows = ([("ffgb_l", e, _seeds(v, 0.001)) for e, v in zip(eps, l_means)]
          + [("ffgb_l-ffgb_l_query=printed", e, _seeds(printed, 0.001)) for e in eps])
  ev = F.ffgb_l_w1(SeedSweepContext(tmp_path, rows))
  assert ev.verdict == verdict, ev.why
  assert len(ev.comparisons) == 5 + 5   # 4 adjacent shifts + eps 2 vs 0, then printed vs fixed at each eps


class SeedSweepContext(SweepContext):
  """Paper scale; each (algorithm, eps) row gives a tuple of per-seed values."""

  def pick(self, smoke, paper):
    return paper


def test_nothing_pending_and_every_claim_is_this_papers():
  assert all(c.id.startswith("ffgb.") for c in F.CLAIMS)
  assert len({c.id for c in F.CLAIMS}) == len(F.CLAIMS)


# ------------------------------------------------------------------ ffgb.thm31_rate (experiments/ffgb/rate.py)
class RateCtx(FakeContext):
  """A FakeContext at either scale whose ``script`` writes the given result.json and keeps its flags."""

  def __init__(self, root, result, scale="paper"):
    super().__init__(root)
    self.scale, self.result, self.flags = scale, result, {}

  def pick(self, smoke, paper):
    return smoke if self.scale == "smoke" else paper

  def script(self, name, module, **flags):
    self.flags[name] = (module, flags)
    out = os.path.join(self.root, "runs", name)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "result.json"), "w") as f:
      json.dump(self.result, f)
    return out


def _rate_result(a, b, c, seeds=5, wobble=1e-7):
  """A result.json whose errors follow exact power laws of slopes ``a`` (in T), ``b`` (in K) and ``c`` (in T),
  seed s's slope off by (s - 2) ``wobble`` (1e-7: float32 rounding, as the real seeds differ)."""
  flags = F.RATE_FLAGS["paper"]
  ts, ks, cts = flags["a_rounds"], flags["b_local_steps"], flags["c_rounds"]
  def law(xs, slope, s):
    return [0.5 * (x / xs[0]) ** (slope + (s - 2) * wobble) for x in xs]
  return {"settings": {}, "a": {"rounds": list(ts), "errors": [law(ts, a, s) for s in range(seeds)]},
          "b": {"local_steps": list(ks), "errors": [law(ks, b, s) for s in range(seeds)]},
          "c": {"rounds": list(cts), "local_steps": [math.ceil(math.sqrt(t)) for t in cts],
                "errors": [law(cts, c, s) for s in range(seeds)]}}


@pytest.mark.parametrize("slopes, outcomes, verdict", [
    ((-1.0, -1.0, -0.5), ("holds", "holds", "holds"), "reproduced"),
    ((-3.7, -0.8, -0.35), ("holds", "holds", "holds"), "reproduced"),
    ((-3.7, -1.96, -0.92), ("holds", "opposite", "holds"), "partly reproduced"),   # (b) steeper than 1/K
    ((-1.0, -1.31, -0.5), ("holds", "opposite", "holds"), "partly reproduced"),    # (b) just below the band
    ((-1.0, -0.69, -0.29), ("holds", "opposite", "opposite"), "partly reproduced"),  # just above the bands
    ((-0.5, -0.5, -0.2), ("opposite", "opposite", "opposite"), "not reproduced"),
    ((0.1, -2.0, 0.0), ("opposite", "opposite", "opposite"), "not reproduced"),
])
def test_thm31_rate_verdicts(tmp_path, slopes, outcomes, verdict):
  ctx = RateCtx(tmp_path, _rate_result(*slopes))
  ev = F.thm31_rate(ctx)
  assert ev.verdict == verdict, ev.why
  # The seeds agree to rounding: each slope is one computation (n = 1) against its band, with no test.
  assert tuple(c.outcome for c in ev.comparisons) == outcomes, ev.why
  assert all(c.test == stats.DETERMINISTIC and c.n == 1 for c in ev.comparisons)
  assert [c.effect for c in ev.comparisons] == pytest.approx(slopes, abs=1e-6)
  assert ev.comparisons[1].name == "(b) gamma = 0.5, T = 300: slope of log error in log K"
  assert ev.numbers["(b) slope of log error vs log K"].values == pytest.approx(
      [slopes[1] + (s - 2) * 1e-7 for s in range(5)])
  assert ev.numbers["(a) relative error at T = 400"].n == 5
  assert ev.numbers["(c) relative error at T = 16"].mean == pytest.approx(0.5)
  assert all(os.path.exists(tmp_path / f) for f in ev.figures) and len(ev.figures) == 2
  if slopes[1] < -1.3:
    assert "steeper than 1/K" in ev.why
  if outcomes == ("holds", "opposite", "holds"):
    assert ev.why.startswith("2 of 3 comparisons hold; 1 the other way: (a) exact oracle")
    assert "(b) gamma = 0.5, T = 300, error vs K: slope" in ev.why and "band in [-1.3, -0.7]: fails" in ev.why
  assert ctx.flags["ffgb_thm31_rate"] == ("experiments.ffgb.rate", F.RATE_FLAGS["paper"])


def test_thm31_rate_tests_over_the_seeds_where_they_differ(tmp_path):
  # Seeds whose slopes differ (by 0.02 a seed) are replicates, not one computation: each edge of a band is then
  # judged by a one-sample Wilcoxon over the 5 seeds. (b)'s slopes -1.32 ... -1.24 straddle -1.3.
  ev = F.thm31_rate(RateCtx(tmp_path, _rate_result(-1.0, -1.28, -0.5, wobble=0.02)))
  names = [c.name for c in ev.comparisons]
  assert names == ["(a) gamma = 1, K = 1: slope of log error in log T below -0.7",
                   "(b) gamma = 0.5, T = 300: slope of log error in log K above -1.3",
                   "(b) gamma = 0.5, T = 300: slope of log error in log K below -0.7",
                   "(c) gamma = 0.5, K = ceil(sqrt(T)): slope of log error in log T below -0.3"]
  assert all(c.n == 5 and c.test.startswith("one-sided exact Wilcoxon signed-rank (one sample") for c in ev.comparisons)
  assert [c.outcome for c in ev.comparisons] == ["holds", "undecided", "holds", "holds"]
  assert ev.verdict == "partly reproduced"


def test_thm31_rate_smoke_runs_one_seed_on_smaller_grids(tmp_path):
  res = _rate_result(-1.0, -1.0, -0.5, seeds=1)
  smoke = F.RATE_FLAGS["smoke"]
  for part, key, flag in (("a", "rounds", "a_rounds"), ("b", "local_steps", "b_local_steps"),
                          ("c", "rounds", "c_rounds")):
    n = len(smoke[flag])
    res[part][key] = res[part][key][:n]
    res[part]["errors"] = [e[:n] for e in res[part]["errors"]]
  ctx = RateCtx(tmp_path, res, scale="smoke")
  ev = F.thm31_rate(ctx)
  assert ev.verdict == "reproduced", ev.why
  _, flags = ctx.flags["ffgb_thm31_rate"]
  assert flags["seeds"] == 1 and len(flags["a_rounds"]) < len(F.RATE_FLAGS["paper"]["a_rounds"])
  assert ev.numbers["(a) slope of log error vs log T"].n == 1


def test_thm31_rate_is_a_headline_paper_claim():
  (claim,) = [c for c in F.CLAIMS if c.id == "ffgb.thm31_rate"]
  assert claim.kind == "paper" and claim.headline
  assert "n = 1, judged against its band with no test" in claim.criterion
  assert "Thm 3.1" in claim.source and "Cor. 3.1" in claim.source


def test_loglog_slope_is_the_least_squares_fit():
  assert F.loglog_slope([1, 2, 4, 8], [3.0, 1.5, 0.75, 0.375]) == pytest.approx(-1.0)
  assert F.loglog_slope([1, 10, 100], [1.0, 10.0 ** -0.4, 10.0 ** -1.2]) == pytest.approx(-0.6)


def test_rate_binary_has_the_spec_settings():
  # §4.3 / §7.1-7.2: N = 8, M = 12, mu = 0.1, the scaled oracle, the theory schedule; (a) gamma = 1, K = 1; (b)
  # gamma = 0.5, T = 300; (c) K = ceil(sqrt(T)).
  from experiments.ffgb import rate
  res = rate.measure([0], a_rounds=(2,), b_rounds=3, b_local_steps=(1, 2), c_rounds=(4, 9))
  s = res["settings"]
  assert (s["clients"], s["grid_points"], s["mu"], s["weak_learner"], s["eta_schedule"], s["algorithm"]) == (
      8, 12, 0.1, "scaled", "theory", "ffgb")
  assert s["fstar"] == "mean_i ybar_i / (1 + mu)"
  assert (s["a"]["gamma"], s["a"]["local_steps"], s["b"]["gamma"], s["b"]["rounds"], s["c"]["gamma"]) == (
      1.0, 1, 0.5, 3, 0.5)
  assert s["b"]["eta_cap"] == s["c"]["eta_cap"] == pytest.approx(1 / 1.1)
  assert res["c"]["local_steps"] == [2, 3]
  assert F.RATE_FLAGS["paper"]["b_rounds"] == 300 and F.RATE_FLAGS["paper"]["c_rounds"] == (16, 64, 256, 1024)
  # The binary's own defaults are the paper-scale grids.
  from absl import flags as absl_flags
  fv = absl_flags.FlagValues()
  rate.define_flags(fv)
  fv(["rate"])
  paper = F.RATE_FLAGS["paper"]
  assert fv.seeds == paper["seeds"] and fv.b_rounds == paper["b_rounds"] and fv.mu == 0.1
  for name in ("a_rounds", "b_local_steps", "c_rounds"):
    assert [int(v) for v in fv[name].value] == list(paper[name]), name
  assert fv.a_eta_cap == 0.01 and fv.b_gamma == fv.c_gamma == 0.5 and (fv.clients, fv.grid_points) == (8, 12)


def test_rate_errors_are_the_closed_form_of_one_exact_step():
  # gamma = 1, K = 1: every client maps f to (1 - eta (1 + mu)) f + eta ybar_i, so with f^0 = 0 the relative
  # error is (1 - eta (1 + mu))^(2t): 1 at t = 0 (up to float32 rounding), and with eta = min(2/(mu(t + 2)),
  # 0.01) = 0.01 (t < 1998) it is 0.989^(2t). With the cap 1/(1 + mu) the first step lands on f*.
  import numpy as np

  from experiments.ffgb import rate
  errs = rate.relative_errors([0, 1], 5, gamma=1.0, local_steps=1, eta_cap=0.01, clients=3, grid_points=4)
  assert errs.shape == (2, 6)
  np.testing.assert_allclose(errs, np.broadcast_to(0.989 ** (2 * np.arange(6)), (2, 6)), rtol=1e-5)
  one = rate.relative_errors([0], 2, gamma=1.0, local_steps=1, eta_cap=1 / 1.1, clients=3, grid_points=4)
  assert one[0, 0] == pytest.approx(1.0, abs=1e-6) and np.all(one[0, 1:] < 1e-12)


def test_oracle_note_says_when_the_runs_oracle_steps_differ_from_the_papers(tmp_path):
  """Issue 34 item 6: a claim whose MLP oracle takes fewer Adam steps than App. B.3's 1000 says so in its why;
  the paper's steps, or an oracle without Adam steps (rf_ridge), say nothing."""
  mlp200 = {"weak_learner": "mlp", "oracle_steps": 200}
  ctx = FakeContext(str(tmp_path), configs={"ffgb": mlp200, "ffgb_nores": mlp200})
  note = F.oracle_note(ctx, "residual_seed0", ["ffgb", "ffgb_nores"])
  assert "200 Adam steps per call, not the paper's 1000" in note
  paper = FakeContext(str(tmp_path), configs={"ffgb": {"weak_learner": "mlp", "oracle_steps": F.ORACLE_STEPS_CITED}})
  assert F.oracle_note(paper, "r", ["ffgb"]) == ""
  ridge = FakeContext(str(tmp_path), configs={"ffgb": {"weak_learner": "rf_ridge", "oracle_steps": 200}})
  assert F.oracle_note(ridge, "r", ["ffgb"]) == ""
