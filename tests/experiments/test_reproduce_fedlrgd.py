"""experiments.reproduce.papers.fedlrgd: what each measure reads from hand-made script outputs (no real runs),
and the verdict its declaration (declarations/fedlrgd.toml) gives through the engine."""

from __future__ import annotations

import json
import math
import os

import pytest

from experiments.reproduce import engine
from experiments.reproduce.claims import SCALES
from experiments.reproduce.papers import fedlrgd as F
from tests.experiments.test_reproduce import FakeContext


class ScriptContext(FakeContext):
  """A FakeContext whose ``script`` returns a folder holding the given output files."""

  def __init__(self, root, outputs):
    super().__init__(root)
    self._outputs = outputs            # {run name: {file name: JSON-able}}
    self.flags = {}                    # {run name: the flags it was given}

  def script(self, name, module, **flags):
    self.commands.append(f"script {name} {module}")
    self.flags[name] = flags
    out = os.path.join(self.root, "runs", name)
    os.makedirs(out, exist_ok=True)
    for fname, content in self._outputs[name].items():
      with open(os.path.join(out, fname), "w") as f:
        json.dump(content, f)
    return out


RANKS = (2, 4, 8, 10, 16)


def fidelity_results(errs, gaps=None):
  """results.json of --study=fidelity: errs[r] the per-seed median errors, gaps[r] the per-seed final gaps
  (default 1e-9 everywhere)."""
  n = len(errs[RANKS[0]])
  gaps = {r: (gaps or {}).get(r, (1e-9,) * n) for r in RANKS}
  rows = [{"r": r, "median_of_median_rel_err": sorted(errs[r])[n // 2], "median_max_rel_err": 1.0,
           "max_anchor_rel_err": 1e-15, "median_path_rel_err": 1e-3, "median_cond_max": 10.0 ** r,
           "frac_seeds_gap_le_1e-5": sum(g <= 1e-5 for g in gaps[r]) / n} for r in RANKS]
  return {"rows": rows, "err_median": [[errs[r][s] for r in RANKS] for s in range(n)],
          "final_gap": [[gaps[r][s] for r in RANKS] for s in range(n)], "flags": {"ranks": [str(r) for r in RANKS]}}


SEED = (1.0, 1.5, 0.7, 1.2, 0.9)  # five seeds' factors
GOOD_ERR = {r: tuple(e * f for f in SEED) for r, e in {2: 0.3, 4: 3e-3, 8: 2e-4, 10: 5e-5, 16: 1e-7}.items()}


# GOOD_ERR with the two seeds within 20% of each other (std of log10 error 0.056 at every r).
TIGHT_ERR = {r: (v[0], 1.2 * v[0]) for r, v in GOOD_ERR.items()}


def ten_seeds(factor, spread=0.1, at16=None):
  """S2-fidelity results of 10 seeds: seed s's error at rank r is TIGHT_ERR[r][0] (1 + spread s) times
  ``factor`` (``at16``: another factor at r = 16)."""
  per = {r: [v[0] * (1 + spread * k) * (at16 if r == 16 and at16 is not None else factor) for k in range(10)]
         for r, v in TIGHT_ERR.items()}
  rows = [{"r": r, "median_of_median_rel_err": sorted(per[r])[4]} for r in RANKS]
  return {"results.json": {"rows": rows, "err_median": [[per[r][k] for r in RANKS] for k in range(10)],
                           "flags": {"ranks": [str(r) for r in RANKS]}}}


def logistic_summary(r2s, ratios_at_8):
  """summary.json of --study=logistic: per coordinate (R^2 exponential, R^2 power) and sigma_8/sigma_1."""
  coords = [{"q": q, "sv_ratio": [1.0, 0.5, 0.1, 1e-2, 3e-3, 1e-3, 5e-4, r8, 1e-5, 5e-6, 2e-6, 1e-6],
             "fitted_j": 12, "r2_exponential": e, "r2_power": pw, "exp_rate": -0.7}
            for q, ((e, pw), r8) in enumerate(zip(r2s, ratios_at_8))]
  return {"summary.json": {"logistic": {"p": 2, "d": 3, "n": 1000, "coords": coords}}}


def logistic_runs(r2s, ratios):
  """The 10 seeds' logistic_spectrum outputs, seed k's R^2s and ratios shifted by k / 1000."""
  return {"logistic_spectrum" + (f"_s{k}" if k else ""): logistic_summary(
      [(e + k / 1000, pw + k / 1000) for e, pw in r2s], [r * (1 + k / 10) for r in ratios]) for k in range(10)}


def precision_results(ratios):
  """results.json of --study=precision: per r, the float32-solve / float64 error ratio of each of 3 seeds."""
  rows = []
  for r, qs in ratios.items():
    f64 = [1e-6, 2e-6, 4e-6]
    for run, errs in (("float64", f64), ("float32", [2 * e for e in f64]),
                      ("float32, float32 solve", [q * e for q, e in zip(qs, f64)])):
      rows.append({"r": r, "run": run, "median_rel_err": sorted(errs)[1], "median_final_gap": 1e-12,
                   "max_final_gap": 1e-11, "rel_err_per_seed": errs})
  return {"rows": rows, "flags": {"seeds": 3}}


def convergence_results(gaps, s=40, m=100, S=30, T=30, b=10, every=10, corrupt=False):
  """results.json of --study=convergence: final gap gaps[method] (geometric decay to it) with the
  ledger's (compute, uploads); ``corrupt`` breaks one FedAve record."""
  runs = {}
  for method, final in gaps.items():
    recs = []
    horizon = S if method.startswith("fedlrgd") else T
    for t in range(0, horizon + 1, every):
      if method.startswith("fedlrgd"):
        r = int(method.split("=")[1])
        comp, up = (0, 0) if t == 0 else (r * r + r * s + r * t, m * r)
      elif method.startswith("fedave"):
        comp, up = t * b, t * m
      else:
        comp, up = t * s, t * m
      recs.append({"round": t, "gap": 1.0 * (final / 1.0) ** (t / horizon), "compute": comp, "uploads": up})
    runs[method] = recs
  if corrupt:
    runs[f"fedave b={b}"][-1]["compute"] += 1
  return {str(m): runs, "flags": {"samples_per_client": s}, "seconds": 1.0}


def crossover_row(eta, phi, eps, predicted, wins):
  ratio = 0.5 if wins else 2.0
  return {"d": 1, "eta": eta, "phi": phi, "eps": eps, "server_samples": 4,
          "fedlrgd": {"gamma": 100.0 * ratio, "r": 4, "S": 30},
          "fedave": {"gamma": 100.0, "b": 10, "T": 5, "step": "L1"},
          "ratio": ratio, "fedlrgd_wins": wins, "prop1_predicts_win": predicted}


def rank_summary(le10, median, slopes_ok=(True,) * 6, bound=True, ranks=None):
  appc = {"dataset": "digits", "hidden": 32, "p": 100, "k": 30, "median_rank": median,
          "frac_rank_le_5": 0.5, "frac_rank_le_10": le10, "max_rank": 12, "ranked": 90, "zero_slices": 10,
          "all_weights": {"median_rank": 4.0, "frac_rank_le_10": 0.9}, "train_accuracy": 0.99,
          "test_accuracy": 0.95}
  t1 = []
  for i, (d, eta) in enumerate([(d, e) for d in (1, 2) for e in (0.5, 1.5, 2.5)]):
    rate = -2 * eta / d
    row = {"d": d, "eta": eta, "rate": rate, "slope": rate - 0.5 if slopes_ok[i] else rate + 0.2,
           "tails": [10.0 ** -k for k in range(1, 65)], "threshold": 5.4}
    if eta <= 1:
      row["bound_holds"] = bound
    t1.append(row)
  return {"summary.json": {"appc": appc, "theorem1": t1}, "ranks.json": ranks or []}




CLAIMS = {c.id: c for c in F.CLAIMS}


def judged(cid, ctx):
  """The declared claim's evidence: its measure on ``ctx``, judged by the engine."""
  return CLAIMS[cid].evaluate(ctx)


def test_declarations_cover_the_measures_with_their_kinds_and_scales():
  decls = engine.load("fedlrgd")
  assert set(F.MEASURES) <= set(decls) and list(CLAIMS) == list(decls)
  kinds = {cid: c.kind for cid, c in CLAIMS.items()}
  assert [c for c, k in kinds.items() if k == "paper"] == ["fedlrgd.appc_rank", "fedlrgd.appc_variants",
                                                           "fedlrgd.theorem1"]
  assert kinds["fedlrgd.prop1_crossover"] == kinds["fedlrgd.appc_cifar10"] == "not evaluated"
  assert kinds["fedlrgd.s5_crossover"] == "diagnostic" and kinds["fedlrgd.s3_convergence"] == "check"
  assert CLAIMS["fedlrgd.s4_shift"].scales == ("paper",) and CLAIMS["fedlrgd.appc_rank"].scales == SCALES
  assert judged("fedlrgd.prop1_crossover", None).verdict == "not evaluated"
  assert CLAIMS["fedlrgd.precision"].from_record is not None
  assert all(d.deviations for d in decls.values() if d.kind == "paper")


@pytest.mark.parametrize("errs, verdict", [
    (GOOD_ERR, "reproduced"),
    ({r: GOOD_ERR[RANKS[-1 - k]] for k, r in enumerate(RANKS)}, "not reproduced"),   # the error rises with r
])
def test_s2_fidelity_orders_each_seeds_log_error_by_rank(tmp_path, errs, verdict):
  ctx = ScriptContext(tmp_path, {"s2_fidelity": {"results.json": fidelity_results(errs)}})
  m = F.s2_fidelity(ctx)
  assert ctx.flags["s2_fidelity"] == {"flagfile": F.FIDELITY, "seeds": 5}   # smoke: 5 seeds
  assert m.values["i.i.d."]["r=16"] == pytest.approx([math.log10(v) for v in errs[16]])
  assert m.numbers["final F - F_* r=8"].n == 5 and os.path.exists(tmp_path / m.figures[0])
  assert judged("fedlrgd.s2_fidelity", ctx).verdict == verdict


@pytest.mark.parametrize("factors, verdict", [
    # error factor for i.i.d., shift 0.25, shift 0.5, heterogeneity 0.5
    ((1, 3, 10, 1), "reproduced"),
    ((1, 3, 10, 10), "inconclusive"),           # heterogeneous clients degrade too: the control passes
    ((1, 0.5, 0.2, 1), "not reproduced"),       # the error falls with the shift
])
def test_s4_shift_contrasts_the_shift_with_heterogeneity(tmp_path, factors, verdict):
  names = ["s2_fidelity", "s4_shift0.25", "s4_shift0.5", "s4_heterogeneity0.5"]
  ctx = ScriptContext(tmp_path, {n: ten_seeds(f) for n, f in zip(names, factors)})
  m = F.s4_shift(ctx)
  assert list(m.values) == ["r=8", "r=16"]
  assert list(m.values["r=8"]) == ["i.i.d.", "server_shift=0.25", "server_shift=0.5", "data_heterogeneity=0.5"]
  # Paired by seed: seed k's shifted error is factor x its i.i.d. error, a constant log10 difference.
  diff = [a - b for a, b in zip(m.values["r=8"]["server_shift=0.5"], m.values["r=8"]["i.i.d."])]
  assert diff == pytest.approx([math.log10(factors[2])] * 10)
  assert ctx.flags["s4_shift0.5"] == {"flagfile": F.FIDELITY, "seeds": 10, "server_shift": 0.5}
  assert ctx.flags["s4_heterogeneity0.5"]["data_heterogeneity"] == 0.5
  ev = judged("fedlrgd.s4_shift", ctx)
  assert ev.verdict == verdict, ev.why
  if verdict == "inconclusive":
    assert "does not discriminate" in ev.why


@pytest.mark.parametrize("factors, verdict", [
    ((100, 10, 1), "reproduced"),               # eta = 0.5, 1.5, 2.5
    ((1, 10, 100), "not reproduced"),
])
def test_s4_smoothness_orders_the_error_by_eta(tmp_path, factors, verdict):
  names = ["s4_holder0.5", "s4_holder1.5", "s4_holder2.5"]
  ctx = ScriptContext(tmp_path, {n: ten_seeds(f) for n, f in zip(names, factors)})
  assert judged("fedlrgd.s4_smoothness", ctx).verdict == verdict
  assert ctx.flags["s4_holder1.5"] == {"flagfile": F.FIDELITY, "seeds": 10, "feature_map": "holder",
                                       "holder_eta": 1.5, "raw_dim": 1}


def test_s1b_logistic_pairs_the_fits_per_draw(tmp_path):
  ctx = ScriptContext(tmp_path, logistic_runs(((0.96, 0.95), (0.96, 0.95)), (9e-5, 1e-4)))
  m = F.s1b_logistic(ctx)
  assert m.values["q=1"]["exponential"] == pytest.approx([0.96 + k / 1000 for k in range(10)])
  assert m.numbers["sigma_8 / sigma_1 q=1"][0] == 1e-4
  assert ctx.flags["logistic_spectrum_s9"] == {"study": "logistic", "t1_n": 1000, "seed": 9}
  ev = judged("fedlrgd.s1b_logistic", ctx)   # 2 comparisons at n = 10: unanimity gives p = 1/512 after Holm
  assert ev.verdict == "reproduced", ev.why


def test_precision_pairs_the_seeds_and_judges_a_record_as_its_runs(tmp_path):
  ratios = {8: (0.1, 1.0, 10.0), 12: (0.1, 1.0, 10.0), 16: (5.0, 10.0, 20.0), 20: (5.0, 10.0, 20.0)}
  ctx = ScriptContext(tmp_path, {"precision": {"results.json": precision_results(ratios)}})
  m = F.precision(ctx)
  assert list(m.values) == ["r=16", "r=20"]                      # the claim is about r >= 16
  assert m.values["r=16"]["float32"] == pytest.approx([math.log10(5.0), 1.0, math.log10(20.0)])
  assert m.numbers[F.RATIO + "8"] == pytest.approx([0.1, 1.0, 10.0])
  runs = judged("fedlrgd.precision", ctx)
  # A record made before the protocol (Stat dicts) and one made by it (lists) judge as the runs do.
  old = {F.RATIO + str(r): {"mean": 0.0, "std": 0.0, "n": 3, "values": list(q)} for r, q in ratios.items()}
  for numbers in (old, {F.RATIO + str(r): list(q) for r, q in ratios.items()}):
    ev = CLAIMS["fedlrgd.precision"].from_record({"numbers": numbers})
    assert ev.results == runs.results and "judged from the record" in ev.why
  assert runs.verdict == "inconclusive" and "too few seeds" in runs.why    # 3 seeds


def test_s3_convergence_measures_the_final_gap_of_r_at_least_8(tmp_path):
  gaps = {"fedlrgd r=4": 1e-3, "fedlrgd r=8": 1e-7, "fedlrgd r=16": 1e-12, "gd": 1e-9, "fedave b=10": 1e-4}
  outs = {f"s3_convergence_s{k}": {"results.json": convergence_results({m: g * (1 + k / 10) for m, g in gaps.items()})}
          for k in range(10)}
  for out in outs.values():
    out["results.json"]["100"]["fedlrgd r=16"][-1]["gap"] = -1e-16   # round-off below F_*
  ctx = ScriptContext(tmp_path, outs)
  ctx.pick = lambda smoke, paper: paper  # paper scale: 10 seeds
  m = F.s3_convergence(ctx)
  assert list(m.values) == ["m=100 r=8", "m=100 r=16"]
  assert m.values["m=100 r=8"]["fedlrgd"] == pytest.approx([math.log10(1e-7 * (1 + k / 10)) for k in range(10)])
  assert m.values["m=100 r=16"]["fedlrgd"] == [-17.0] * 10        # round-off below F_*: converged
  assert all(os.path.exists(tmp_path / f) for f in m.figures) and len(m.figures) == 2
  assert m.numbers["Gamma to F - F_* <= 1e-5 m=100 phi=10 fedave b=10"].values == (math.inf,) * 10
  assert judged("fedlrgd.ledger_runs", ctx).verdict == "reproduced"


def test_gamma_to_reach_and_ledger_mismatch():
  res = convergence_results({"fedlrgd r=8": 1e-9, "fedave b=10": 1e-4}, corrupt=True)
  recs = res["100"]["fedlrgd r=8"]
  first = next(rec for rec in recs if rec["round"] > 0 and rec["gap"] <= 1e-5)
  assert F.gamma_to_reach(recs, 10.0, 1e-5) == first["compute"] + 10.0 * first["uploads"]
  assert F.gamma_to_reach(res["100"]["fedave b=10"], 10.0, 1e-5) == math.inf
  checked, bad = F.ledger_mismatches(res)
  assert checked == 6 and len(bad) == 1 and "fedave b=10 round 30" in bad[0]


@pytest.mark.parametrize("wins, verdict", [
    ((True,) * 5, "reproduced"),
    ((False,) * 5, "not reproduced"),
])
def test_s5_crossover_pairs_the_cells_of_the_regime(tmp_path, wins, verdict):
  rows = [crossover_row(8.5, phi, 1e-5, True, w) for phi, w in zip((10.0, 30.0, 100.0, 300.0, 1000.0), wins)]
  rows.append(crossover_row(1.5, 100.0, 1e-5, False, not wins[0]))   # outside the regime: not compared
  ctx = ScriptContext(tmp_path, {"s5_crossover": {"results.json": {"rows": rows}}})
  m = F.s5_crossover(ctx)
  assert m.values["cells of Prop. 1's regime"]["fedave"] == [100.0] * 5
  assert m.numbers["cells in Prop. 1's regime"] == 5.0 and os.path.exists(tmp_path / m.figures[0])
  assert judged("fedlrgd.s5_crossover", ctx).verdict == verdict
  never = [{**row, "fedave": None} for row in rows[:5]]   # FedAve never reaches eps: censored
  m = F.s5_crossover(ScriptContext(tmp_path, {"s5_crossover": {"results.json": {"rows": never}}}))
  assert m.values["cells of Prop. 1's regime"]["fedave"] == [math.inf] * 5


@pytest.mark.parametrize("ranks, le10, le5", [
    ([2] * 100, 20.0, 50.0),
    ([2] * 40 + [8] * 60, 20.0, -10.0),        # all <= 10, 40% <= 5
    ([12] * 100, -80.0, -50.0),
])
def test_appc_rank_measures_the_shares_above_the_papers_levels(tmp_path, ranks, le10, le5):
  ctx = ScriptContext(tmp_path, {"rank_study": rank_summary(0.9, 4.0, ranks=ranks)})
  m = F.appc_rank(ctx)
  assert m.values["rank <= 10 (almost all: 80%)"]["mlp"] == [pytest.approx(le10)]
  assert m.values["rank <= 5 (about half: 50%)"]["mlp"] == [pytest.approx(le5)]
  assert m.numbers["zero slices"] == [10.0] and os.path.exists(tmp_path / m.figures[0])
  ev = judged("fedlrgd.appc_rank", ctx)       # one training seed
  assert ev.verdict == "inconclusive" and "too few seeds" in ev.why


def test_appc_variants_one_run_each_and_all_weights_from_the_base_run(tmp_path):
  outs = {"rank_study_" + label.split(":")[0]: rank_summary(0.9, 4.0, ranks=[2] * 100)
          for label, change in F.APPC_VARIANTS if change}
  outs["rank_study"] = rank_summary(0.9, 4.0, ranks=[2] * 100)
  ctx = ScriptContext(tmp_path, outs)
  m = F.appc_variants(ctx)
  assert list(m.values) == [label for label, _ in F.APPC_VARIANTS]
  assert m.values["d: all weights"]["mlp"] == [pytest.approx(10.0)]   # the base run's all weights: 90% <= 10
  assert m.values["i: ReLU"]["mlp"] == [pytest.approx(20.0)]
  assert ctx.flags["rank_study_g"] == {"flagfile": F.MNIST, "study": "appc", "optimizer": "rmsprop"}
  assert os.path.exists(tmp_path / m.figures[0])
  # Paper scale: seeds 1-9 of every network as runs of their own (``<name>_s<seed>``), paired by position.
  ctx = ScriptContext(tmp_path, {f"{name}_s{k}" if k else name: out for name, out in outs.items() for k in range(10)})
  ctx.pick = lambda smoke, paper: paper
  m = F.appc_variants(ctx)
  assert m.values["i: ReLU"]["mlp"] == [pytest.approx(20.0)] * 10 and len(m.values["d: all weights"]["mlp"]) == 10
  assert ctx.flags["rank_study_g_s3"] == {"flagfile": F.MNIST, "study": "appc", "optimizer": "rmsprop", "seed": 3}
  assert ctx.flags["rank_study_s9"] == {"flagfile": F.MNIST, "study": "appc", "seed": 9}


@pytest.mark.parametrize("slopes_ok, sign", [((True,) * 6, -1), ((False,) * 6, 1)])
def test_theorem1_measures_each_draws_slope_against_the_rate(tmp_path, slopes_ok, sign):
  outs = {name: rank_summary(0.9, 4.0, slopes_ok) for name in ("rank_study", *(f"theorem1_s{k}" for k in range(1, 5)))}
  ctx = ScriptContext(tmp_path, outs)
  m = F.theorem1(ctx)
  assert list(m.values)[:2] == ["d=1 eta=0.5", "d=1 eta=1.5"] and len(m.values) == 6
  assert m.values["d=2 eta=2.5"]["kernel"] == pytest.approx([-0.5] * 5 if sign < 0 else [0.2] * 5)
  assert m.numbers["explicit bound holds d=1 eta=0.5 (seeds)"] == 5.0
  assert ctx.flags["theorem1_s4"] == {"flagfile": F.MNIST, "study": "theorem1", "seed": 4, "t1_n": 256}
  ev = judged("fedlrgd.theorem1", ctx)       # 6 comparisons at n = 5: unanimity gives p = 6/32 after Holm
  assert ev.verdict == "inconclusive" and "too few seeds" in ev.why


def test_theorem1_lists_a_setting_whose_threshold_lies_above_most_fitted_ranks(tmp_path):
  outs = {name: rank_summary(0.9, 4.0) for name in ("rank_study", *(f"theorem1_s{k}" for k in range(1, 5)))}
  for out in outs.values():
    out["summary.json"]["theorem1"][3]["threshold"] = 61.5  # d = 2, eta = 0.5: the rate holds from r = 62 of 1..64
  ctx = ScriptContext(tmp_path, outs)
  assert F.theorem1(ctx).gates == {"d=2 eta=0.5": {"kernel": "out of range"}}
  assert [r["outcome"] for r in judged("fedlrgd.theorem1", ctx).results].count("out of range") == 1
