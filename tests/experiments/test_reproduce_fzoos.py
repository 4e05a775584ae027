"""The FZooS claims' criteria (experiments/reproduce/papers/fzoos.py) on hand-made runs: every
verdict branch of every curve claim, so that a flipped comparison fails a test. No real runs."""

from __future__ import annotations

import json
import os

import pytest
from scipy import stats as sps

from experiments.reproduce import report
from experiments.reproduce.claims import Stat
from experiments.reproduce.papers import fzoos as fz
from tests.experiments.test_reproduce import FakeContext

FD = fz.FD


def _h(values, per=100, **extra):
  """A history: round r, r * per queries, objective values[r] (plus constant ``extra`` keys)."""
  return [{"round": r, "queries": r * per, "objective": float(v), **extra} for r, v in enumerate(values)]


class Ctx(FakeContext):
  """FakeContext with ``script`` (the drift and FD-resolution diagnostics) and a scale."""

  def __init__(self, root, runs=None, drift=200.0, scale="smoke", zeros=None):
    super().__init__(root, runs=runs, configs={"fedzo_fd": {"smoothing": 0.01, "fd_directions": 20,
                                                            "direction": "orthogonal"}})
    self.scale, self._drift, self.script_flags = scale, drift, {}
    self._zeros = zeros or {0.01: 1.0, 0.1: 1.0, 1.0: 0.9}  # lambda -> share of zero differences

  def pick(self, smoke, paper):
    return smoke if self.scale == "smoke" else paper

  def script(self, name, module, **flags):
    self.commands.append(f"script {module}")
    self.script_flags[module] = flags
    out = os.path.join(self.root, "runs", name)
    os.makedirs(out, exist_ok=True)
    if module == "experiments.fzoos.fd_resolution":
      rows = [{"run": os.path.basename(r), "seed": 0, "smoothing": 0.01 * k, "zero_fraction": self._zeros[0.01 * k]}
              for r in flags["runs"] for k in flags["scales"]]
      with open(os.path.join(out, "fd_resolution.json"), "w") as f:
        json.dump({"rows": rows}, f)
      return out
    rows = [{"heterogeneity": float(c), "seed": 0, "drift": self._drift * (float(c) / 50.0) ** 2}
            for c in flags["heterogeneity"]]
    with open(os.path.join(out, "drift.json"), "w") as f:
      json.dump({"rows": rows}, f)
    return out


def _fig1_run(fzoos, fd=(3.0, 2.0, 2.5, 1.5), gamma_one=None, per_fd=200):
  """One Fig. 1 run: FZooS ends at ``fzoos``, the FD baselines at ``fd`` (same order as FD)."""
  run = {"fzoos": _h([3.0, 2.5, fzoos], 100)}
  run.update({b: _h([3.0, 3.0, v], per_fd) for b, v in zip(FD, fd)})
  if gamma_one is not None:
    run[fz.GAMMA_ONE] = _h([3.0, 2.0, gamma_one], 100)
  return run


def _runs(c05, c50, code_final=3.0, code_fd=2.0, gamma_one=0.5, fd05=(3.0, 2.0, 2.5, 1.5),
          fd50=(3.0, 2.0, 2.5, 1.5)):
  return {"fig1_paper_C0.5_s0": _fig1_run(c05, fd05),
          "fig1_paper_C50_s0": _fig1_run(c50, fd50, gamma_one=gamma_one),
          "fig1_code_C50_s0": {"fzoos": _h([3.0, 3.0, code_final]), "fedzo_fd": _h([3.0, 2.5, code_fd], 200)}}


def _paper_fig1(fzoos_rounds, fd_rounds, seeds=5, cs=(0.5, 5.0, 50.0), per_fd=200):
  """Paper-scale Fig. 1 runs: from F(x_0) = 3 each method drops to the floor 0 at the round its
  ``*_rounds`` gives (per C, or one for every C; None: it stays at 3, never reaching the target)."""
  def curve(at):
    return [3.0 if at is None or r < at else 0.0 for r in range(7)]
  runs = {}
  for c in cs:
    fz_at = fzoos_rounds[c] if isinstance(fzoos_rounds, dict) else fzoos_rounds
    fd_at = fd_rounds[c] if isinstance(fd_rounds, dict) else fd_rounds
    for s in range(seeds):
      run = {"fzoos": _h(curve(fz_at), 100)}
      run.update({b: _h(curve(fd_at), per_fd) for b in FD})
      runs[f"fig1_paper_C{c:g}_s{s}"] = run
  return runs


@pytest.mark.parametrize("fzoos_rounds,fd_rounds,verdict", [
    (2, 4, "reproduced"),                                  # faster on every seed, every C, every baseline
    (2, None, "reproduced"),                               # the baselines never get there: censored, not 0
    ({0.5: 2, 5.0: 2, 50.0: 5}, 4, "partly reproduced"),   # slower at C = 50
    (None, 4, "not reproduced"),                           # FZooS never gets there: every pair the other way
])
def test_fig1_rounds_paper_pairs_the_seeds(tmp_path, fzoos_rounds, fd_rounds, verdict):
  ev = fz.fig1_rounds_paper(Ctx(tmp_path, _paper_fig1(fzoos_rounds, fd_rounds), scale="paper"))
  assert ev.verdict == verdict, ev.why
  assert len(ev.comparisons) == 3 * len(FD) and {c.n for c in ev.comparisons} == {5}
  first = ev.comparisons[0]
  assert first.name == "C=0.5: round to 90% of the initial gap, fzoos vs fedzo_fd"
  if fd_rounds is None:
    assert first.test.startswith("one-sided exact sign test") and first.censored == 5 and first.effect == 1.0
    assert ev.numbers["C=0.5 round to 90% of the initial gap fedzo_fd"] == ["never"] * 5
  elif verdict == "reproduced":
    assert first.test.startswith("one-sided exact Wilcoxon") and first.effect == 2.0 and first.p == 0.5 ** 5
  assert len(ev.figures) == 3 and all(os.path.exists(tmp_path / f) for f in ev.figures)


def test_fig1_queries_counts_queries_not_rounds(tmp_path):
  # Both reach the target at round 2; FZooS spends 100 queries a round, the FD baselines 200.
  runs = _paper_fig1(2, 2)
  assert fz.fig1_rounds_paper(Ctx(tmp_path, runs, scale="paper")).verdict == "not reproduced"  # all ties
  ev = fz.fig1_queries_paper(Ctx(tmp_path, runs, scale="paper"))
  assert ev.verdict == "reproduced" and ev.comparisons[0].effect == 200.0
  runs = _paper_fig1(2, 2, per_fd=50)  # the FD baselines query less
  assert fz.fig1_queries_paper(Ctx(tmp_path, runs, scale="paper")).verdict == "not reproduced"


def test_fig1_final_is_inconclusive_when_every_method_ends_at_the_floor(tmp_path):
  ev = fz.fig1_final_paper(Ctx(tmp_path, _paper_fig1(2, 4), scale="paper"))
  assert ev.verdict == "inconclusive" and ev.why.startswith("saturated")
  assert {c.outcome for c in ev.comparisons} == {"saturated"}


def test_fig1_on_one_seed_is_inconclusive_too_few_seeds(tmp_path):
  runs = {k.replace("paper", "code"): v for k, v in _paper_fig1(2, 4, seeds=1, cs=(50.0,)).items()}
  ev = fz.fig1_rounds_code(Ctx(tmp_path, runs))  # smoke: one seed, C = 50
  assert ev.verdict == "inconclusive" and ev.why.startswith("too few seeds")


def _heterogeneity_runs(finals, spread=0.01):
  """Paper-scale Fig. 1 runs: at each C, FZooS and the four FD baselines end at ``finals[C]`` plus ``spread``
  times the seed (5 seeds, every method of a seed shifted alike)."""
  runs = {f"fig1_paper_C{c:g}_s{k}": _fig1_run(v[0] + spread * k, tuple(x + spread * k for x in v[1:]),
                                               gamma_one=0.5 if c == 50.0 else None)
          for c, v in finals.items() for k in range(5)}
  # The code-preset C = 50 runs the not-reproduced diagnostic reads.
  runs.update({f"fig1_code_C50_s{k}": {"fzoos": _h([3.0, 3.0, 3.0]), "fedzo_fd": _h([3.0, 2.5, 2.0], 200)}
               for k in range(5)})
  return runs


@pytest.mark.parametrize("c50, verdict", [
    ((2.0, 2.0, 2.0, 2.0, 2.0), "reproduced"),
    ((2.0, 0.5, 0.5, 0.5, 0.5), "partly reproduced"),   # the FD baselines fall from C = 5 to 50
    ((0.5, 0.5, 0.5, 0.5, 0.5), "partly reproduced"),   # every method rises 0.5 -> 5 only
])
def test_fig1_heterogeneity(tmp_path, c50, verdict):
  finals = {0.5: (0.5, 0.6, 0.6, 0.6, 0.6), 5.0: (1.0, 1.0, 1.0, 1.0, 1.0), 50.0: c50}
  ev = fz.fig1_heterogeneity(Ctx(tmp_path, _heterogeneity_runs(finals), scale="paper"))
  assert ev.verdict == verdict, ev.why
  assert len(ev.comparisons) == 10 and {c.n for c in ev.comparisons} == {5}
  falling = {0.5: (2.0,) * 5, 5.0: (1.0,) * 5, 50.0: (0.5,) * 5}
  assert fz.fig1_heterogeneity(Ctx(tmp_path, _heterogeneity_runs(falling), scale="paper")).verdict == "not reproduced"
  # Paired: the seeds spread 0.5 apart (more than any step of C), each seed's finals rise with C.
  ev = fz.fig1_heterogeneity(Ctx(tmp_path, _heterogeneity_runs(finals | {50.0: (2.0,) * 5}, spread=0.5),
                                 scale="paper"))
  assert ev.verdict == "reproduced"


def _reach_runs(at, seeds=5, cs=(0.5, 5.0, 50.0)):
  """Paper-scale Fig. 1 runs where label L drops from 3 to the floor 0 at round ``at[L]`` (a number, or
  ``{C: number}``; None: never)."""
  runs = {}
  for c in cs:
    for s in range(seeds):
      runs[f"fig1_paper_C{c:g}_s{s}"] = {
          lab: _h([3.0 if (r_at := (a[c] if isinstance(a, dict) else a)) is None or r < r_at else 0.0
                   for r in range(7)]) for lab, a in at.items()}
  return runs


@pytest.mark.parametrize("scaffold2, verdict", [(2, "reproduced"), ({0.5: 2, 5.0: 2, 50.0: 4}, "partly reproduced"),
                                               (4, "not reproduced"), (6, "not reproduced")])
def test_fig1_scaffold(tmp_path, scaffold2, verdict):
  at = {"fzoos": 2, "fedzo_fd": 3, "fedprox_zo": 3, "scaffold_zo1": 4, "scaffold_zo2": scaffold2}
  ev = fz.fig1_scaffold(Ctx(tmp_path, _reach_runs(at), scale="paper"))
  assert ev.verdict == verdict, ev.why
  assert [c.name for c in ev.comparisons] == [f"C={c}: round to 90% of the initial gap, scaffold_zo2 vs scaffold_zo1"
                                              for c in ("0.5", "5", "50")]


@pytest.mark.parametrize("fedprox, scaffold1, verdict", [(4, 4, "reproduced"), (4, 2, "partly reproduced"),
                                                         (2, 2, "not reproduced")])
def test_fig1_fedzo_small_c(tmp_path, fedprox, scaffold1, verdict):
  at = {"fzoos": 2, "fedzo_fd": 3, "fedprox_zo": fedprox, "scaffold_zo1": scaffold1, "scaffold_zo2": 3}
  ev = fz.fig1_fedzo_small_c(Ctx(tmp_path, _reach_runs(at), scale="paper"))
  assert ev.verdict == verdict, ev.why
  assert len(ev.comparisons) == 4 and not any(k.startswith("C=50") for k in ev.numbers)  # C = 50 is not small


def _cos_run(fz_cos, early, late, fd_cos=0.2):
  run = {"fzoos": _h([3.0, 2.0], grad_cosine=fz_cos, grad_cosine_early=early, grad_cosine_late=late)}
  run.update({b: _h([3.0, 2.5], grad_cosine=fd_cos, grad_cosine_early=fd_cos, grad_cosine_late=fd_cos)
              for b in FD})
  return run


@pytest.mark.parametrize("cos,early,late,verdict", [(0.5, 0.6, 0.4, "reproduced"),
                                                    (0.5, 0.4, 0.6, "partly reproduced"),
                                                    (0.1, 0.2, 0.3, "not reproduced")])
def test_fig4_cosine(tmp_path, cos, early, late, verdict):
  # Paper scale: 5 seeds of each preset, seed s shifting every cosine by 0.01 s (a paired design).
  runs = {f"fig4{tag}_s{s}": _cos_run(cos + 0.01 * s, early + 0.01 * s, late + 0.01 * s, fd_cos=0.2 + 0.01 * s)
          for tag in ("", "_code") for s in range(5)}
  ev = fz.fig4_cosine(Ctx(tmp_path, runs, scale="paper"))
  assert ev.verdict == verdict, ev.why
  assert len(ev.comparisons) == 2 * (len(FD) + 1)
  assert ev.comparisons[-1].name == "code preset: fzoos cosine late (t > T/2) vs early (t <= T/2)"
  assert fz.fig4_cosine(Ctx(tmp_path, {"fig1_paper_C0.5_s0": _cos_run(cos, early, late)})).verdict == "inconclusive"


def _paper_fig6(c, finals):
  return {f"fig6_C{c:g}_s{s}": {fz.FIG6[role]: _h([3.0, v]) for role, v in finals.items()} for s in range(5)}


def test_fig6b_c50(tmp_path):
  # Smoke: one seed, gamma = 1 alone (the fully fixed correction runs at paper scale only): too few to decide.
  ev = fz.fig6b_c50(Ctx(tmp_path, _runs(1.0, 1.0, gamma_one=0.5)))
  assert ev.verdict == "inconclusive" and os.path.exists(tmp_path / ev.figures[0]), ev.why
  assert "paper scale only" in ev.why
  base = {"adaptive": 1.0, "fixed length": 0.8, "fixed vector": 2.0, "fixed both": 0.5, "none": 3.0, "M=10000": 1.0}
  ev = fz.fig6b_c50(Ctx(tmp_path, _paper_fig6(50, base), scale="paper"))
  assert ev.verdict == "reproduced", ev.why
  assert [c.name for c in ev.comparisons] == ["C=50: final objective, fixed both vs adaptive",
                                              "C=50: final objective, fixed length vs adaptive"]
  base["fixed length"] = 1.5
  assert fz.fig6b_c50(Ctx(tmp_path, _paper_fig6(50, base), scale="paper")).verdict == "partly reproduced"
  base["fixed both"] = 1.5
  assert fz.fig6b_c50(Ctx(tmp_path, _paper_fig6(50, base), scale="paper")).verdict == "not reproduced"


def test_fig6b_ablations_c5(tmp_path):
  base = {"adaptive": 1.0, "fixed length": 2.0, "fixed vector": 0.5, "fixed both": 2.0, "none": 3.0, "M=10000": 1.0}
  ev = fz.fig6b_ablations_c5(Ctx(tmp_path, _paper_fig6(5, base), scale="paper"))
  assert ev.verdict == "partly reproduced" and ev.comparisons[1].outcome == "opposite", ev.why
  base["fixed vector"] = 2.0
  assert fz.fig6b_ablations_c5(Ctx(tmp_path, _paper_fig6(5, base), scale="paper")).verdict == "reproduced"


@pytest.mark.parametrize("m1k_c5,m10k_c5,m1k_c50,m10k_c50,verdict", [
    (1.0, 1.0, 2.0, 1.0, "reproduced"),          # M = 10,000 gains 1.0 at C = 50, 0 at C = 5
    (1.0, 0.5, 2.0, 1.8, "partly reproduced"),   # helps at C = 50 (0.2) but gains less than at C = 5 (0.5)
    (1.0, 1.5, 2.0, 2.2, "partly reproduced"),   # gain grows with C (-0.5 -> -0.2) but never helps
    (1.0, 0.5, 2.0, 2.5, "not reproduced"),
])
def test_fig6a_m(tmp_path, m1k_c5, m10k_c5, m1k_c50, m10k_c50, verdict):
  base = {"adaptive": 9.0, "fixed length": 9.0, "fixed vector": 9.0, "fixed both": 9.0, "none": 9.0}
  runs = {**_paper_fig6(5, {**base, "adaptive": m1k_c5, "M=10000": m10k_c5}),
          **_paper_fig6(50, {**base, "adaptive": m1k_c50, "M=10000": m10k_c50})}
  ev = fz.fig6a_m(Ctx(tmp_path, runs, scale="paper"))
  assert ev.verdict == verdict and os.path.exists(tmp_path / ev.figures[0]), ev.why
  assert ev.numbers["C=50 gain of M = 10,000 (F(x_R) M=1000 - M=10000)"] == pytest.approx([m1k_c50 - m10k_c50] * 5)
  assert ("ends above F(x_0)" in ev.why) == (max(m1k_c50, m10k_c50) > 3.0)  # the runs start at 3.0


def test_fig6a_m_says_when_the_c50_runs_rise(tmp_path):
  base = {"adaptive": 9.0, "fixed length": 9.0, "fixed vector": 9.0, "fixed both": 9.0, "none": 9.0}
  runs = {**_paper_fig6(5, {**base, "adaptive": 1.0, "M=10000": 1.0}),
          **_paper_fig6(50, {**base, "adaptive": 4.0, "M=10000": 5.0})}
  ev = fz.fig6a_m(Ctx(tmp_path, runs, scale="paper"))
  assert ev.verdict == "not reproduced" and "ends above F(x_0) on 5 (M = 1000) and 5 (M = 10,000) of 5" in ev.why


@pytest.mark.parametrize("drift,gamma_one,c50,code_final,verdict", [
    (200.0, 0.5, 4.0, 3.0, "reproduced"),
    (200.0, 0.5, 1.0, 3.0, "partly reproduced"),   # gamma = 1/t beats the FD baselines too
    (200.0, 2.0, 4.0, 2.9, "partly reproduced"),
    (50.0, 2.0, 4.0, 2.9, "not reproduced"),
])
def test_c50_known(tmp_path, drift, gamma_one, c50, code_final, verdict):
  ev = fz.c50_known(Ctx(tmp_path, _runs(1.0, c50, code_final=code_final, gamma_one=gamma_one), drift=drift))
  assert ev.verdict == verdict
  assert ev.numbers["C=50 code preset seeds with FZooS flat at F(x_0)"] == float(code_final == 3.0)
  assert len(ev.figures) == 2


@pytest.mark.parametrize("finals,verdict", [((1.0, 2.0, 3.0), "reproduced"), ((2.5, 2.0, 3.0), "partly reproduced"),
                                            ((3.5, 2.0, 3.0), "not reproduced")])
def test_attack_and_metric(tmp_path, finals, verdict):
  # 15 targets, each shifting every method's final margin alike by 0.1 t: paired by target.
  runs = {f"attack_t{t}": {lab: _h([4.0, v + 0.1 * t], success_rate=float(v + 0.1 * t < 0))
                           for lab, v in zip(("fzoos", "fedzo_fd", "scaffold_zo2"), finals)} for t in range(15)}
  ev = fz.attack(Ctx(tmp_path, runs, scale="paper"))
  assert ev.verdict == verdict, ev.why
  assert "final success_rate fzoos" in ev.numbers and [c.n for c in ev.comparisons] == [15, 15]
  reach = ev.numbers["rounds for FZooS to reach the best baseline's final objective"].mean
  assert (reach == 1.0) if finals[0] <= 2.0 else reach != reach  # nan: never reached
  assert ev.numbers["seeds (targets) on which FZooS reaches the best baseline's final objective"] == (
      15 if finals[0] <= 2.0 else 0)
  # One target (smoke) cannot decide; the metric task's one seed neither.
  assert fz.attack(Ctx(tmp_path, {"attack_t0": runs["attack_t0"]})).verdict == "inconclusive"
  assert fz.metric(Ctx(tmp_path, {"metric_s0": runs["attack_t0"]})).verdict == "inconclusive"


def test_attack_judged_from_a_records_numbers_equals_the_runs_judgment(tmp_path):
  runs = {f"attack_t{t}": {lab: _h([4.0, v + 0.1 * t], success_rate=0.0) for lab, v in zip(("fzoos", "fedzo_fd"),
                                                                                              (1.0, 2.0))}
          for t in range(15)}
  ev = fz.attack(Ctx(tmp_path, runs, scale="paper"))
  # The record's JSON form of the numbers (claims.json), as a later --from_evidence reads it.
  record = {"numbers": json.loads(json.dumps({k: report._number(v) for k, v in ev.numbers.items()}))}
  again = _claim("fzoos.attack").from_record(record)
  assert again.comparisons == ev.comparisons and again.verdict == ev.verdict == "reproduced"
  assert "judged from the record's per-target numbers" in again.why


@pytest.mark.parametrize("fd_end, verdict", [(2.0, "reproduced"), (4.0, "inconclusive"), (0.5, "not reproduced")])
def test_metric_pairs_seeds_and_a_flat_substitute_decides_nothing(tmp_path, fd_end, verdict):
  # 5 seeds; FZooS ends at 1.0. FD baselines at 4.0 = F(x_0) on every seed: flat, no evidence either way.
  runs = {f"metric_s{s}": {"fzoos": _h([4.0 + 0.01 * s, 1.0 + 0.01 * s]),
                           "fedzo_fd": _h([4.0 + 0.01 * s, fd_end + 0.01 * s])} for s in range(5)}
  ev = fz.metric(Ctx(tmp_path, runs, scale="paper"))
  assert ev.verdict == verdict, ev.why
  if verdict == "inconclusive":
    assert ev.why.startswith("flat substitute")


def test_attack_compares_at_fzoos_queries_too(tmp_path):
  # FedZO ends lower (0.5 against 1.0) but spends 200 queries a round to FZooS's 100: within
  # FZooS's 100 queries its best is its start, 4.0. The verdict reads the finals (one target: too few to
  # decide); the why says both.
  run = {"fzoos": _h([4.0, 1.0], 100, success_rate=0.0), "fedzo_fd": _h([4.0, 0.5], 200, success_rate=0.0)}
  ev = fz.attack(Ctx(tmp_path, {"attack_t0": run}))
  assert ev.verdict == "inconclusive" and ev.comparisons[0].losses == 1
  assert ev.numbers["best objective within 100 queries fedzo_fd"].mean == 4.0
  assert ev.numbers["best objective within 100 queries fzoos"].mean == 1.0
  assert "At FZooS's own total queries (100) its best objective 1 is below fedzo_fd beyond noise" in ev.why


def test_metric_reports_why_the_fd_baselines_stay_at_their_start(tmp_path):
  # fedzo_fd never moves; scaffold_zo2 moves on the one seed. The diagnostic gets the runs' folders (it
  # rebuilds each task from its config.json) and tries the runs' lambda, 10x and 100x it.
  run = {"fzoos": _h([4.0, 3.0]), "fedzo_fd": _h([4.0, 4.0]), "scaffold_zo2": _h([4.0, 3.5])}
  ctx = Ctx(tmp_path, {"metric_s0": run})
  ev = fz.metric(ctx)
  assert ev.numbers["seeds on which fedzo_fd ends exactly at F(x_0)"] == 1
  assert ev.numbers["seeds on which scaffold_zo2 ends exactly at F(x_0)"] == 0
  assert ev.numbers["share of FD differences exactly 0 at x_0, lambda=0.01"].mean == 1.0
  assert ev.numbers["share of FD differences exactly 0 at x_0, lambda=1"].mean == 0.9
  sent = ctx.script_flags["experiments.fzoos.fd_resolution"]
  assert sent == {"runs": [str(tmp_path / "runs" / "metric_s0")], "label": "fedzo_fd", "scales": [1, 10, 100]}
  assert "fedzo_fd 1, scaffold_zo2 0 of 1 seeds" in ev.why
  assert "100.0% of their finite differences" in ev.why and "lambda = 0.1: 100.0%, 1: 90.0%" in ev.why


def test_fd_resolution_counts_exact_zeros_on_a_real_metric_task(tmp_path):
  # A real (tiny) metric run: 10 Adam steps of the MLP, N = 3, one FedZO-FD round. Rebuilt from its
  # config.json, the runs' lambda = 0.01 moves theta by 0.4 lambda |u_j| ~ 1e-4 per weight, which flips
  # no prediction; 5000 x lambda (x clipped to the box) flips some.
  import subprocess
  import sys

  from experiments.fzoos.fd_resolution import run_differences
  run = tmp_path / "metric"
  subprocess.run([sys.executable, "-m", "experiments.run", "--flagfile=experiments/flagfiles/fzoos_metric_digits.cfg",
                  "--algorithm=fedzo_fd", "--num_clients=3", "--clients_per_round=3", "--rounds=1", "--eval_every=1",
                  "--model_train_steps=10", "--fd_directions=4", f"--cache_dir={tmp_path}", f"--output_dir={run}"],
                 check=True, capture_output=True)
  small, large = run_differences(str(run), "fedzo_fd", [1, 5000])
  assert small == {"run": "metric", "seed": 0, "smoothing": 0.01, "zero_fraction": 1.0,
                   "mean_abs_difference": 0.0, "differences": 12}
  assert large["smoothing"] == 50.0 and large["zero_fraction"] < 1.0 and large["mean_abs_difference"] > 0.0


def _attack_targets(series, tag=""):
  """Paper-scale attack runs: target t's objective per round for each method (success when < 0)."""
  out = {}
  for t in range(15):
    out[f"attack_{tag}t{t}"] = {lab: [{"round": 5 * r, "queries": 100 * r, "objective": v, "success_rate": float(v < 0)}
                                 for r, v in enumerate(vals(t))] for lab, vals in series.items()}
  return out


def test_attack_success_compares_the_success_rate_over_the_15_targets(tmp_path):
  # FZooS succeeds on targets 0-9 at round 5; fedzo_fd on 0-9 too but at round 10; scaffold_zo2 on
  # 0-10 (11 targets) at round 10. Paired by target: level with fedzo_fd (15 ties), one target behind scaffold_zo2.
  series = {"fzoos": lambda t: (1.0, -1.0 if t < 10 else 0.5, -1.0 if t < 10 else 0.5),
            "fedzo_fd": lambda t: (1.0, 0.5, -1.0 if t < 10 else 0.5),
            "scaffold_zo2": lambda t: (1.0, 0.5, -1.0 if t < 11 else 0.5)}
  ctx = Ctx(tmp_path, _attack_targets(series), scale="paper")
  ev = fz.attack_success(ctx)
  assert ev.verdict == "not reproduced", ev.why
  assert [c.outcome for c in ev.comparisons] == ["undecided", "undecided"]
  assert [(c.wins, c.losses, c.ties, c.n) for c in ev.comparisons] == [(0, 0, 15, 15), (0, 1, 14, 15)]
  assert ev.numbers["success rate at R fzoos (mean over targets)"].mean == pytest.approx(10 / 15)
  assert ev.numbers["success rate at R fzoos (mean over targets)"].n == 15
  # Never attacked targets count as the last round + 1 (11): (10 x 5 + 5 x 11) / 15 = 7.
  assert ev.numbers["round of first success fzoos (never: last + 1)"].mean == pytest.approx(7.0)
  assert ev.numbers["targets never attacked fedzo_fd"] == 5
  assert len(ev.figures) == 2 and all(os.path.exists(tmp_path / f) for f in ev.figures)
  # FZooS attacks 12 targets: 2 and 1 more than the baselines, on no target fewer; 2 or 1 wins cannot decide.
  series["fzoos"] = lambda t: (1.0, -1.0, -1.0 if t < 12 else 0.5)
  assert fz.attack_success(Ctx(tmp_path, _attack_targets(series), scale="paper")).verdict == "not reproduced"
  # FZooS attacks every target, the baselines 10 and 11: 5 and 4 wins out of 5 and 4 differing targets.
  series["fzoos"] = lambda t: (1.0, -1.0, -1.0)
  ev = fz.attack_success(Ctx(tmp_path, _attack_targets(series), scale="paper"))
  assert [c.outcome for c in ev.comparisons] == ["holds", "undecided"] and ev.verdict == "partly reproduced"
  assert ev.comparisons[0].p == pytest.approx(1 / 32) and ev.comparisons[1].p == pytest.approx(1 / 16)
  # FZooS attacks 5 targets, fewer than both: the other way.
  series["fzoos"] = lambda t: (1.0, -1.0, -1.0 if t < 5 else 0.5)
  ev = fz.attack_success(Ctx(tmp_path, _attack_targets(series), scale="paper"))
  assert ev.verdict == "not reproduced" and [c.outcome for c in ev.comparisons] == ["opposite", "opposite"]


def test_attack_success_at_the_ceiling_is_saturated_not_a_tie_that_fails(tmp_path):
  # The committed record's shape: FZooS, FedZO and SCAFFOLD II attack all 15 targets, FedProx 8 (7 never).
  every = lambda t: (1.0, -1.0)  # noqa: E731
  series = {"fzoos": every, "fedzo_fd": every, "fedprox_zo": lambda t: (1.0, -1.0 if t < 8 else 0.5),
            "scaffold_zo2": every}
  ev = fz.attack_success(Ctx(tmp_path, _attack_targets(series), scale="paper"))
  assert [c.outcome for c in ev.comparisons] == ["saturated", "holds", "saturated"], ev.why
  held = ev.comparisons[1]
  assert (held.wins, held.losses, held.ties) == (7, 0, 8) and held.p == pytest.approx(1 / 128)
  assert ev.verdict == "partly reproduced"
  assert "saturated here is the ceiling: FZooS and fedzo_fd, scaffold_zo2 attack every target" in ev.why
  # Every baseline at the ceiling too: the rate decides nothing.
  series["fedprox_zo"] = every
  ev = fz.attack_success(Ctx(tmp_path, _attack_targets(series), scale="paper"))
  assert (ev.verdict, ev.why.split(":")[0]) == ("inconclusive", "saturated")
  # One target (smoke) cannot decide.
  one = {"attack_t0": _attack_targets({"fzoos": every, "fedzo_fd": lambda t: (1.0, 0.5)})["attack_t0"]}
  assert fz.attack_success(Ctx(tmp_path, one)).why.startswith("too few seeds")


def test_attack_success_judged_from_a_records_numbers_equals_the_runs_judgment(tmp_path):
  every = lambda t: (1.0, -1.0)  # noqa: E731
  series = {"fzoos": every, "fedzo_fd": lambda t: (1.0, -1.0 if t < 8 else 0.5), "scaffold_zo2": every}
  ev = fz.attack_success(Ctx(tmp_path, _attack_targets(series), scale="paper"))
  record = {"numbers": json.loads(json.dumps({k: report._number(v) for k, v in ev.numbers.items()}))}
  again = _claim("fzoos.attack_success").from_record(record)
  assert again.comparisons == ev.comparisons and again.verdict == ev.verdict == "partly reproduced"
  assert again.why == ev.why + ("; judged from the record's per-target numbers (its runs' metrics were not stored; "
                                "a re-run stores them)")


S = Stat.of


def test_seed_rounds_to_times_each_seed_to_its_own_target():
  runs = [{"fzoos": _h([3.0, 2.0, 1.0])}, {"fzoos": _h([3.0, 1.0, 0.5])}]
  assert fz.seed_rounds_to(runs, "fzoos", [2.0, 2.0]) == [1.0, 1.0]
  assert fz.seed_rounds_to(runs, "fzoos", [1.0, 0.5]) == [2.0, 2.0]
  assert fz.seed_rounds_to(runs, "fzoos", [0.9, 1.0]) == [float("inf"), 1.0]  # seed 0 never: censored


def _drop(at, n=25, floor=0.0):
  """F(x_0) = 3 falling linearly to ``floor`` at round ``at`` (then flat); None: flat at 3."""
  return [3.0 if at is None else max(floor, 3.0 - 3.0 * r / at) if r < at else floor for r in range(n)]


def _fig5_paper(fz_at=(8, 6, 4), fd_at=12, seeds=5):
  """Paper-scale Fig. 5 runs at T = 5, 10 (Fig. 1's), 20: FZooS reaches the floor at round fz_at[i] (+ s on
  seed s), every FD baseline at ``fd_at`` (+ s); queries 100 a round for FZooS, 200 for the baselines."""
  out = {}
  for (name, at) in zip(("fig5_T5_s{}", "fig1_paper_C5_s{}", "fig5_T20_s{}"), fz_at):
    for s in range(seeds):
      out[name.format(s)] = {"fzoos": _h(_drop(None if at is None else at + s), 100),
                             **{b: _h(_drop(None if fd_at is None else fd_at + s), 200) for b in FD}}
  return out


@pytest.mark.parametrize("fz_at, fd_at, verdict", [
    ((8, 6, 4), 12, "reproduced"),          # faster than FD at every T; T = 20 reaches T = 5's final sooner, 2x < 4x
    ((16, 8, 2), 20, "partly reproduced"),  # T helps by 8x on seed 0 (16 / 2), more than T's 4x
    ((8, 8, 8), 12, "partly reproduced"),   # T does not help: equal rounds at every T
    ((4, 6, 8), 2, "not reproduced"),       # FD faster everywhere, T hurts (its gain then not compared with 4x)
])
def test_fig5_t_pairs_the_seeds(tmp_path, fz_at, fd_at, verdict):
  ev = fz.fig5_t(Ctx(tmp_path, _fig5_paper(fz_at, fd_at), scale="paper"))
  assert ev.verdict == verdict, ev.why
  # 3 T x 4 baselines x (rounds, queries), then T helps, then (where it does) the gain against 4.
  helps = fz_at[2] < fz_at[0]
  assert len(ev.comparisons) == 2 * 3 * len(FD) + 1 + helps
  assert ev.comparisons[2 * 3 * len(FD)].name == "FZooS rounds to each seed's T=5 final F, T=20 vs T=5"
  assert os.path.exists(tmp_path / ev.figures[0])


def test_fig5_t_censors_a_t_that_never_gets_there(tmp_path):
  ev = fz.fig5_t(Ctx(tmp_path, _fig5_paper((8, 6, None), 12), scale="paper"))
  assert ev.numbers["FZooS rounds to each seed's T=5 final F at T=20"] == ["never"] * 5
  helps = ev.comparisons[-1]
  assert helps.outcome == "opposite" and helps.censored == 5 and "not compared with 4x" in ev.why


def _noisy_fig6(c, finals, spread):
  """Fig. 6 runs over 5 seeds, each role's final at its mean plus (-2, -1, 0, 1, 2) x ``spread``."""
  return {f"fig6_C{c:g}_s{s}": {fz.FIG6[role]: _h([3.0, v + (s - 2) * spread]) for role, v in finals.items()}
          for s in range(5)}


def test_fig6_pairs_the_seeds(tmp_path):
  # The adaptive correction ends 0.5 below every ablation on every seed while the seeds spread by
  # +-1: the unpaired rule saw no effect, the paired test sees 5 of 5 seeds in its favour.
  base = {"adaptive": 1.0, "fixed length": 1.5, "fixed vector": 1.5, "fixed both": 1.5, "none": 1.5, "M=10000": 1.0}
  ev = fz.fig6b_ablations_c5(Ctx(tmp_path, _noisy_fig6(5, base, 0.5), scale="paper"))
  assert ev.verdict == "reproduced", ev.why
  assert [c.name for c in ev.comparisons] == [f"C=5: final objective, adaptive vs {r}"
                                              for r in ("fixed length", "fixed vector", "fixed both", "none")]
  # One seed the other way (the adaptive run 1.0 above the ablation on seed 4): the exact Wilcoxon p is 0.094.
  runs = _noisy_fig6(5, base, 0.5)
  runs["fig6_C5_s4"][fz.FIG6["adaptive"]] = _h([3.0, 3.5])
  assert fz.fig6b_ablations_c5(Ctx(tmp_path, runs, scale="paper")).verdict == "not reproduced"
  # Fig. 6(a): M = 10,000 gains 1.0 at C = 50 and 0 at C = 5 on every seed, the finals spread by +-2.
  m = {"adaptive": 9.0, "fixed length": 9.0, "fixed vector": 9.0, "fixed both": 9.0, "none": 9.0}
  runs = {**_noisy_fig6(5, {**m, "adaptive": 1.0, "M=10000": 1.0}, 0.0),
          **_noisy_fig6(50, {**m, "adaptive": 2.0, "M=10000": 1.0}, 1.0)}
  ev = fz.fig6a_m(Ctx(tmp_path, runs, scale="paper"))
  assert ev.verdict == "reproduced", ev.why
  assert ev.comparisons[-1].name == "gain of M = 10,000 at C = 50 vs at C = 5"


def test_fig4_cosine_pairs_the_seeds(tmp_path):
  # FZooS 0.05 above the FD baselines on every seed, the seeds themselves spread by 0.1 (unpaired: noise).
  runs = {f"fig4{tag}_s{s}": _cos_run(0.25 + 0.1 * s, 0.3 + 0.1 * s, 0.2 + 0.1 * s, fd_cos=0.2 + 0.1 * s)
          for tag in ("", "_code") for s in range(5)}
  assert fz.fig4_cosine(Ctx(tmp_path, runs, scale="paper")).verdict == "reproduced"

def test_fig8_sweeps_judge_every_setting_on_the_15_targets(tmp_path):
  # T = 10 (the attack claims' own runs): FZooS first succeeds at round 5 on every target, fedzo_fd at round 10.
  early = {"fzoos": lambda t: (1.0, -1.0, -1.0), "fedzo_fd": lambda t: (1.0, 0.5, -1.0)}
  # T = 5: both first succeed at round 10 on targets 0-13; FZooS never on target 14, fedzo_fd does.
  late = {"fzoos": lambda t: (1.0, 0.5, -1.0 if t < 14 else 0.5), "fedzo_fd": lambda t: (1.0, 0.5, -1.0)}
  ctx = Ctx(tmp_path, {**_attack_targets(early), **_attack_targets(late, "local_steps5_")}, scale="paper")
  ev = _claim("fzoos.fig8_T").evaluate(ctx)
  assert "run attack_local_steps5_t14" in ctx.commands and "run attack_t14" in ctx.commands
  assert ev.numbers["success rate at R fzoos, local_steps=5"].mean == pytest.approx(14 / 15)
  assert ev.numbers["success rate at R fedzo_fd, local_steps=10"].n == 15
  # Never attacked: round 11 (last + 1) in the numbers, censored (inf) in the test: (14 x 10 + 11) / 15.
  assert ev.numbers["round of first success fzoos, local_steps=5 (never: last + 1)"].mean == pytest.approx(151 / 15)
  assert ev.numbers["attack rounds R"] == 10.0
  t5, t10 = ev.comparisons
  # Paired by target: at T = 10 FZooS (round 5) is earlier on all 15; at T = 5 the pairs tie on targets 0-13
  # and FZooS is later on target 14 (never against 10): a sign test on the one differing pair.
  assert (t10.wins, t10.losses, t10.outcome) == (15, 0, "holds")
  assert (t5.wins, t5.losses, t5.ties, t5.censored, t5.outcome) == (0, 1, 14, 1, "undecided")
  assert t5.test == "one-sided exact sign test (paired, censored)"
  assert ev.verdict == "partly reproduced", ev.why
  assert len(ev.figures) == 4 and all(os.path.exists(tmp_path / f) for f in ev.figures)
  ctx = Ctx(tmp_path, {**_attack_targets(early), **_attack_targets(early, "local_steps5_")}, scale="paper")
  assert _claim("fzoos.fig8_T").evaluate(ctx).verdict == "reproduced"
  # P = 0.5 runs are named after the portion, and the base is the attack claims' P = 0.7 runs.
  ctx = Ctx(tmp_path, {**_attack_targets(late), **_attack_targets(late, "portion0.5_")}, scale="paper")
  ev = _claim("fzoos.fig8_P").evaluate(ctx)
  assert ev.verdict == "not reproduced" and "run attack_portion0.5_t0" in ctx.commands


def test_fig8_from_a_record_censors_the_never_attacked_targets_at_the_flagfiles_r():
  # A record made before "attack rounds R" was kept: R is the flagfile's 100, so 101 (R + 1) is never.
  assert fz.attack_rounds() == 100
  def stat(values):
    return {"mean": sum(values) / len(values), "std": 0.0, "n": len(values), "values": values}
  numbers = {"round of first success fzoos, T=5 (never: last + 1)": stat([5.0] * 10 + [101.0] * 5),
             "round of first success fedprox_zo, T=5 (never: last + 1)": stat([101.0] * 15),
             "round of first success fedzo_fd, T=5 (never: last + 1)": stat([10.0] * 15),
             "targets FZooS first succeeds earlier than fedzo_fd, T=5": 10}   # an old number, ignored
  ev = _claim("fzoos.fig8_T").from_record({"numbers": numbers})
  prox, fd = ev.comparisons
  # fedprox_zo never: 10 wins, 5 ties (both never); fedzo_fd: 10 wins, 5 losses (FZooS never), p = P(X >= 10).
  assert (prox.wins, prox.losses, prox.ties, prox.outcome) == (10, 0, 5, "holds")
  assert (fd.wins, fd.losses, fd.censored) == (10, 5, 5)
  assert fd.p == pytest.approx(sps.binomtest(10, 15, 0.5, alternative="greater").pvalue) and fd.outcome == "undecided"
  assert ev.verdict == "partly reproduced" and ev.numbers is not numbers and ev.numbers == numbers


def _claim(claim_id):
  return next(c for c in fz.CLAIMS if c.id == claim_id)


def test_lower_p_is_judged_unpaired_with_never_censored():
  """fzoos.fig8_lower_P: each P has its own targets, so P = 0.7 against P = 0.5 per method is unpaired; a target
  never attacked within R (recorded as R + 1) is censored (log-rank), and a slower P = 0.5 is the claimed way."""
  first, never = fz.FIRST, fz.NEVER
  numbers = {"attack rounds R": 100.0,
             f"{first}fzoos, portion=0.5{never}": Stat.of([10.0, 15.0, 10.0, 20.0, 15.0, 10.0]),
             f"{first}fzoos, portion=0.7{never}": Stat.of([5.0, 5.0, 10.0, 5.0, 5.0, 5.0]),
             f"{first}fedprox_zo, portion=0.5{never}": Stat.of([101.0, 101.0, 60.0, 101.0, 101.0, 101.0]),
             f"{first}fedprox_zo, portion=0.7{never}": Stat.of([30.0, 45.0, 101.0, 35.0, 40.0, 50.0])}
  ev = fz.lower_p_judged(numbers)
  by = {c.name.split(":")[0]: c for c in ev.comparisons}
  assert by["fzoos"].test == "one-sided Mann-Whitney U (unpaired)" and by["fzoos"].outcome == "holds"
  assert by["fedprox_zo"].test == "one-sided log-rank (unpaired, censored)" and by["fedprox_zo"].censored == 6
  assert by["fedprox_zo"].outcome == "holds" and ev.verdict == "reproduced"
  # The other way round (P = 0.5 faster) is the opposite of the claim.
  swapped = {k.replace("0.5", "x").replace("0.7", "0.5").replace("x", "0.7"): v for k, v in numbers.items()}
  assert {c.outcome for c in fz.lower_p_judged(swapped).comparisons} == {"opposite"}


def test_committed_lower_p_record_is_judged_from_fig8_p_numbers():
  with open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "reproduction", "fzoos", "claims.json")) as f:
    recs = {r["id"]: r for r in json.load(f)["claims"]}
  rec, fig8 = recs["fzoos.fig8_lower_P"], recs["fzoos.fig8_P"]
  assert rec["kind"] == "paper" and rec["n"] == 30 and rec["statistic"].startswith("one-sided")
  for k, v in rec["numbers"].items():
    if k.startswith(fz.FIRST):
      assert v == fig8["numbers"][k]
