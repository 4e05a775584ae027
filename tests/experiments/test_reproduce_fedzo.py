"""FedZO's reproduction claims: what each measure reads from hand-made runs (no real runs), and what the
verdict protocol then makes of it (experiments/reproduce/declarations/fedzo.toml, judged by the engine)."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest

from experiments.reproduce import engine
from experiments.reproduce.papers import fedzo as F
from tests.experiments.test_reproduce import FakeContext

SNRS = ("inf", "0", "-5", "-10", "-20", "-30", "-40")
DECL = engine.load("fedzo")


class Ctx(FakeContext):
  """A FakeContext at either scale whose diagnostic script writes the given records."""

  def __init__(self, root, runs=None, diags=None, scale="paper"):
    super().__init__(root, runs=runs)
    self.scale, self._diags = scale, diags or {}

  def pick(self, smoke, paper):
    return smoke if self.scale == "smoke" else paper

  def script(self, name, module, **flags):
    out = os.path.join(self.root, "runs", name)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "result.json"), "w") as f:
      json.dump(self._diags[name], f)
    self.commands.append(" ".join([f"-m {module}", *(f"--{k}={','.join(map(str, v)) if isinstance(v, tuple) else v}"
                                                     for k, v in flags.items())]))
    return out


def _judge(cid, measured):
  return engine.judge(DECL[cid], measured)


def _hist(final, start=7.0, rounds=100, **extra):
  return [{"round": 0, "objective": start, "participants": 0, **{k: 0.0 for k in extra}},
          {"round": rounds, "objective": final, **extra}]


def _diag(ms, snrs, ratio=1e-4, noise=(1e-5, 0.06)):
  return [{"round": 0, "objective": 7.0, "N": 50, "d": 64, "H": 20, "eta": 1e-3, "progress": 0.07,
           "seed_std": 3e-4, "linear_progress": 0.07,
           "sampling_ratio": {str(m): ratio if m < 50 else 0.0 for m in ms},
           "noise_ratio": {f"{float(s)}": r for s, r in zip(snrs, noise)},
           "noise_over_seed": {f"{float(s)}": r * 0.07 / 3e-4 for s, r in zip(snrs, noise)},
           "noise_sq_over_update_sq": {f"{float(s)}": 0.1 for s in snrs}}]


def _diags(ratio=1e-4):
  return {"fedzo_variance_attack": _diag(F.M_VALUES, (-10, -40, 0, -5, -20, -30), ratio,
                                         (1e-5, 0.06, 1e-6, 3e-6, 3e-4, 5e-3)),
          "fedzo_variance_softmax": _diag((10, 20, 50), (-10, 0, -5), ratio, (1e-5, 1e-6, 3e-6))}


def test_every_claim_is_declared_and_every_declared_measure_is_wired():
  assert [c.id for c in F.CLAIMS] == list(DECL)
  measured = {cid for cid, d in DECL.items() if d.kind not in ("not evaluated",) and not d.tests}
  assert measured == set(F.MEASURES)
  assert all(d.form for d in DECL.values() if d.kind == "paper")


def test_cor2_entry_is_the_corollary_2_schedule():
  entry = F.cor2_entry(5, 64)
  eta = (5 * 25 * 20 / (64 * 20 * 300)) ** 0.5
  mu = (64 * 25 * 20 * 5 * 20 * 300) ** -0.25
  assert entry == f"fedzo:clients_per_round=5:lr={eta:.4g}:smoothing={mu:.4g}"
  assert F.cor2_entry(50, 64).startswith("fedzo:clients_per_round=50:lr=0.2552:")
  # By default the paper's d (CIFAR-10's 3 x 32 x 32), not the stand-in's: eta sqrt(3072 / 64) = 6.9x smaller.
  assert F.cor2_entry(5) == F.cor2_entry(5, 3072)
  assert F.cor2_entry(5).split(":")[2] == f"lr={(5 * 25 * 20 / (3072 * 20 * 300)) ** 0.5:.4g}" == "lr=0.01165"


# --- Fig. 1(a), Fig. 2 ----------------------------------------------------------------------------

def _fig1a_seeds(finals_by_seed, acc_by_seed=None):
  """Fig. 1(a)'s runs, one per row: ``finals_by_seed[s]`` = final losses of H_LABELS + dzopa, zone_s."""
  labels = (*F.H_LABELS, "dzopa", "zone_s")
  acc_by_seed = acc_by_seed or [[0.5] * len(labels)] * len(finals_by_seed)
  return {f"fedzo_fig1a_s{s}": {lab: _hist(v, attack_accuracy=a, distortion=1.0)
                                for lab, v, a in zip(labels, fin, acc)}
          for s, (fin, acc) in enumerate(zip(finals_by_seed, acc_by_seed))}


SPREAD = [[v + d for v in (6.0, 5.0, 4.0, 3.0, 6.5, 6.6)] for d in (-0.2, -0.1, 0.0, 0.1, 0.2)]


def test_fig1a_h_orders_the_four_h_per_seed(tmp_path):
  m = F.fig1a_h(Ctx(tmp_path, runs=_fig1a_seeds(SPREAD)))
  assert list(m.runs) == ["Fig. 1(a)"] and len(m.runs["Fig. 1(a)"]) == 5
  assert os.path.exists(tmp_path / m.figures[0])
  ev = _judge("fedzo.fig1a_H", m)
  assert ev.verdict == "reproduced" and ev.results[0]["per_seed"] == pytest.approx([3.0] * 5)  # in the claim's favour
  # H = 50 above H = 20 on every seed: 10 of 15 adjacent steps agree, Page's test still holds over four levels.
  swapped = [[r[0], r[1], r[3], r[2], *r[4:]] for r in SPREAD]
  assert "10 of 15" in _judge("fedzo.fig1a_H", F.fig1a_h(Ctx(tmp_path, runs=_fig1a_seeds(swapped)))).results[0]["note"]


def test_fig1a_h_at_smoke_runs_two_seeds_one_round_each(tmp_path):
  # Page's test needs two rows; two seeds that both order all four H give its exact p = (1/24)^2.
  ctx = Ctx(tmp_path, runs=_fig1a_seeds(SPREAD[:2]), scale="smoke")
  ev = {c.id: c for c in F.CLAIMS}["fedzo.fig1a_H"].evaluate(ctx)
  assert ctx.commands == ["run fedzo_fig1a_s0", "run fedzo_fig1a_s1"]
  assert ev.verdict == "reproduced" and ev.results[0]["p"] == pytest.approx(1 / 24 ** 2)


def test_fig1a_baselines_compare_each_h_with_both_baselines_on_the_same_seeds(tmp_path):
  # Every arm closes most of its gap from 7: the baselines work beside every H.
  strong = [[v + d for v in (3.0, 2.8, 2.6, 2.4, 3.2, 3.3)] for d in (-0.2, -0.1, 0.0, 0.1, 0.2)]
  m = F.fig1a_baselines(Ctx(tmp_path, runs=_fig1a_seeds(strong)))
  assert list(m.runs) == ["H=5", "H=10", "H=20", "H=50"]
  h10 = m.runs["H=10"][3]
  assert {"fedzo", "dzopa", "zone_s", *F.H_LABELS} == set(h10)  # every method of the run: one floor for the gates
  assert h10["fedzo"][-1]["objective"] == pytest.approx(2.9)
  assert m.numbers["attack loss at T = 300, dzopa minus fedzo H=5, per seed"] == pytest.approx([0.2] * 5)
  ev = _judge("fedzo.fig1a_baselines", m)
  # Eight comparisons at n = 5: unanimous seeds cannot hold after Holm.
  assert ev.verdict == "inconclusive" and {r["outcome"] for r in ev.results} == {"too few seeds"}
  # A baseline that closes under half its gap beside H = 10 is gated, not beaten.
  weak = [[v + d for v in (3.0, 2.8, 2.6, 2.4, 3.2, 5.5)] for d in (-0.2, -0.1, 0.0, 0.1, 0.2)]
  gated = _judge("fedzo.fig1a_baselines", F.fig1a_baselines(Ctx(tmp_path, runs=_fig1a_seeds(weak))))
  assert [r["outcome"] for r in gated.results if "zone_s" in r["setting"]] == ["broken baseline"] * 4


def test_fig2_compares_accuracy_at_h20_and_h50_and_reports_the_h5_exception(tmp_path):
  fin = [[5.0] * 6] * 5
  acc = [[0.3, 0.4, 0.5, 0.55 + 0.01 * s, 0.35, 0.45] for s in range(5)]
  m = F.fig2_accuracy(Ctx(tmp_path, runs=_fig1a_seeds(fin, acc)))
  assert list(m.runs) == ["H=20", "H=50"]
  assert m.numbers["final attack_accuracy zone_s, per seed"] == [0.45] * 5
  ev = _judge("fedzo.fig2_accuracy", m)
  # The baselines reach 0.35 and 0.45 of an accuracy that starts at 0 and tops at 0.5-0.59: both work.
  assert [r["setting"] for r in ev.results] == ["H=20: fedzo vs dzopa", "H=20: fedzo vs zone_s",
                                                 "H=50: fedzo vs dzopa", "H=50: fedzo vs zone_s"]
  assert all(r["effect"] > 0 for r in ev.results)


# --- Fig. 1(b) ----------------------------------------------------------------------------------

def _fig1b_runs(fixed, cor2, seeds=5):
  """Fig. 1(b)'s runs with the given final losses per M, eta = 1e-3 and Corollary 2; seed s adds
  0.01 s (i + 1) to the i-th M's loss, so the paired differences differ across seeds."""
  labels = [f"fedzo-clients_per_round={m}" for m in F.M_VALUES]
  cor = [F.cor2_entry(m).replace(":", "-") for m in F.M_VALUES]
  return {f"fedzo_fig1b_s{s}": {**{k: _hist(v + 0.01 * s * (i + 1)) for i, (k, v) in enumerate(zip(labels, fixed))},
                                **{k: _hist(v + 0.01 * s * (i + 1)) for i, (k, v) in enumerate(zip(cor, cor2))}}
          for s in range(seeds)}


def test_fig1b_and_cor2_read_their_own_entries(tmp_path):
  runs = _fig1b_runs((6.0, 5.0, 4.0, 3.0), (7.0, 7.0, 7.0, 7.0))
  fixed = F.fig1b_m(Ctx(tmp_path, runs=runs))
  assert [h[-1]["objective"] for h in fixed.runs["Fig. 1(b)"][0].values()] == [6.0, 5.0, 4.0, 3.0]
  assert _judge("fedzo.fig1b_M", fixed).verdict == "reproduced"
  cor2 = F.cor2_speedup(Ctx(tmp_path, runs=runs))
  assert list(cor2.runs["Fig. 1(b), Corollary 2's eta and mu"][0]) == ["M=5", "M=10", "M=25", "M=50"]
  assert {h[-1]["objective"] for h in cor2.runs["Fig. 1(b), Corollary 2's eta and mu"][0].values()} == {7.0}


def test_fig1b_m_reversed_is_opposite(tmp_path):
  ev = _judge("fedzo.fig1b_M", F.fig1b_m(Ctx(tmp_path, runs=_fig1b_runs((3.0, 4.0, 5.0, 6.0), (7.0,) * 4))))
  assert ev.verdict == "not reproduced" and ev.results[0]["outcome"] == "opposite"


@pytest.mark.parametrize("ratio,verdict", [(1e-4, "reproduced"), (5e-3, "partly reproduced"),
                                           (-0.05, "not reproduced")])
def test_m_variance_rule(tmp_path, ratio, verdict):
  ev = F.m_variance(Ctx(tmp_path, diags=_diags(ratio)))
  assert ev.verdict == verdict
  assert ev.numbers["softmax: sampling cost / progress M=10 at round 0"] == ratio


# --- Fig. 1(c) and the AirComp probes -----------------------------------------------------------

def _fig1c_runs(gaps, participation=(0.527, 0.278)):
  """Five seeds; ``gaps[snr]`` is a function of the seed giving that SNR's final loss minus noise-free."""
  runs = {}
  for s in range(5):
    run = {f"fedzo-snr_db={k}": _hist(5.0 + gaps.get(k, lambda s: 0.0)(s),
                                      participants=participation[0] * 50 * 100) for k in SNRS}
    run[F.CODE_LABEL] = _hist(5.0, participants=participation[1] * 50 * 100)
    runs[f"fedzo_fig1c_s{s}"] = run
  return runs


def test_fig1c_reads_the_papers_snrs_named_by_their_db(tmp_path):
  runs = _fig1c_runs({"-10": lambda s: 0.3 + 0.01 * s, "-5": lambda s: 0.2, "0": lambda s: 0.1,
                      "-40": lambda s: -3.0})
  m = F.fig1c_snr(Ctx(tmp_path, runs=runs))
  assert list(m.runs["Fig. 1(c)"][0]) == ["noise-free", "0 dB", "-5 dB", "-10 dB"]
  assert _judge("fedzo.fig1c_snr", m).verdict == "reproduced"
  zero = F.fig1c_0db(Ctx(tmp_path, runs=runs))
  assert list(zero.runs["Fig. 1(c)"][0]) == ["noise-free", "0 dB", "-5 dB", "-10 dB"]
  # 0 dB ends 0.1 above noise-free on every seed, inside the 0.45 margin, but so do -5 and -10 dB (the controls).
  ev = _judge("fedzo.fig1c_0db", zero)
  assert ev.verdict == "inconclusive" and "does not discriminate" in ev.why
  assert ev.results[0]["effect"] == pytest.approx(0.1)
  apart = _fig1c_runs({"-10": lambda s: 2.0 + 0.01 * s, "-5": lambda s: 1.0 + 0.01 * s, "0": lambda s: 0.1})
  assert _judge("fedzo.fig1c_0db", F.fig1c_0db(Ctx(tmp_path, runs=apart))).verdict == "reproduced"


def test_aircomp_noise_compares_noise_free_with_every_snr_and_reports_the_noise_cost(tmp_path):
  runs = _fig1c_runs({"-40": lambda s: 0.5 + 0.01 * s})
  m = F.aircomp_noise(Ctx(tmp_path, runs=runs, diags=_diags()))
  assert list(m.runs["Fig. 1(c)"][0]) == ["noise-free", "0 dB", "-5 dB", "-10 dB", "-20 dB", "-30 dB", "-40 dB"]
  assert m.numbers["noise cost / per-round progress at -40 dB, round 0"] == 0.06
  ev = _judge("fedzo.aircomp_noise", m)
  assert len(ev.results) == 6 and ev.results[-1]["effect"] == pytest.approx(0.52)


@pytest.mark.parametrize("participation,verdict", [
    ((0.527, 0.278), "reproduced"), ((0.527, 0.5), "partly reproduced"), ((0.9, 0.9), "not reproduced")])
def test_participation_rule(tmp_path, participation, verdict):
  ev = F.participation(Ctx(tmp_path, runs=_fig1c_runs({}, participation)))
  assert ev.verdict == verdict
  assert ev.numbers["mean |M_t| of N = 50, paper channel CN(0,1)"] == pytest.approx(participation[0] * 50)
  assert ev.numbers["8 |M_t| gamma at 0 dB (Corollary 3 needs >= N H = 1000)"] == pytest.approx(
      8 * participation[0] * 50 * 0.64)


@pytest.mark.parametrize("se_off,verdict", [(2.5, "reproduced"), (-2.5, "reproduced"), (3.5, "partly reproduced")])
def test_participation_is_judged_within_three_binomial_standard_errors(tmp_path, se_off, verdict):
  """The paper channel's fraction se_off binomial standard errors sqrt(p (1 - p) / trials) from
  p = exp(-0.8^2) (trials = 50 clients x 100 rounds x 5 seeds): inside 3 of them it matches, at 3.5 it
  does not (the code channel exact), so a wrong standard error moves the verdict."""
  p, q = math.exp(-0.64), math.exp(-0.64 / 0.5)
  frac = p + se_off * math.sqrt(p * (1 - p) / (50 * 100 * 5))
  assert F.participation(Ctx(tmp_path, runs=_fig1c_runs({}, (frac, q)))).verdict == verdict


# --- Figs. 3-5 ----------------------------------------------------------------------------------

def _softmax_runs(fig, finals, start=2.3, spread=0.01):
  """Paper-scale softmax runs: 5 seeds, seed s's every final shifted by spread * s (shared by the entries)."""
  return {f"fedzo_{fig}_s{s}": {k: _hist(v + spread * s, start=start, test_accuracy=0.5) for k, v in finals.items()}
          for s in range(5)}


def test_fig3_measures_feed_the_comparable_and_the_faster_claims(tmp_path):
  runs = _softmax_runs("fig3", {"fedzo-local_steps=5": 1.1, "fedzo-local_steps=20": 1.02,
                                "fedavg-local_steps=5": 1.0}, start=4.0, spread=0.4)
  m = F._fig3(Ctx(tmp_path, runs=runs))
  assert m.numbers["final test accuracy fedzo-local_steps=20, per seed"] == [0.5] * 5
  # Paired by seed: the 0.4 spread of the seeds does not hide FedZO H = 5's 0.1 (p = 1/32).
  faster = _judge("fedzo.fig3_fedavg_faster", m)
  assert faster.verdict == "reproduced" and faster.results[0]["p"] == pytest.approx(1 / 32)
  comparable = _judge("fedzo.fig3_softmax_H", m)  # FedZO H = 20 0.02 above FedAvg H = 5: inside +-0.1
  assert comparable.verdict == "reproduced"
  far = _softmax_runs("fig3", {"fedzo-local_steps=5": 1.1, "fedzo-local_steps=20": 0.5, "fedavg-local_steps=5": 1.0})
  assert _judge("fedzo.fig3_softmax_H", F._fig3(Ctx(tmp_path, runs=far))).verdict == "not reproduced"


def test_fig4_orders_m_and_compares_m50_with_fedavg(tmp_path):
  labels = [f"fedzo-clients_per_round={m}" for m in (10, 20, 50)]
  runs = _softmax_runs("fig4", {**dict(zip(labels, (1.5, 1.3, 1.05))), F.FEDAVG_M50: 1.0})
  m = F._fig4(Ctx(tmp_path, runs=runs))
  assert _judge("fedzo.fig4_softmax_M", m).verdict == "reproduced"
  assert _judge("fedzo.fig4_fedavg_comparable", m).results[0]["effect"] == pytest.approx(0.05)


def test_fig5_names_the_snrs_and_a_noisier_channel_ending_lower_is_opposite(tmp_path):
  runs = _softmax_runs("fig5", dict(zip(F.SNR_LABELS, (1.0, 0.99, 0.98, 0.97))))
  m = F.fig5_softmax_aircomp(Ctx(tmp_path, runs=runs))
  assert list(m.runs["Fig. 5 (H = 5)"][0]) == ["noise-free", "0 dB", "-5 dB", "-10 dB"]
  ev = _judge("fedzo.fig5_softmax_aircomp", m)
  assert ev.verdict == "not reproduced" and ev.results[0]["outcome"] == "opposite"


# --- Corollary 2 on the logistic task -------------------------------------------------------------

def test_rate_task_is_the_flagfiles_and_keeps_the_linear_speed_up_condition():
  with open("experiments/flagfiles/fedzo_rate_trend.cfg") as f:
    flags = dict(line.strip()[2:].split("=", 1) for line in f if line.startswith("--"))
  t = F.RATE_TASK
  assert (int(flags["num_features"]), int(flags["batch_size"]), int(flags["local_steps"]), int(flags["rounds"])) \
      == (t["d"], t["b1"], t["H"], t["T"])
  assert all(t["H"] <= t["d"] / (t["b1"] * b2) for b2 in F.RATE_B2 + (F.RATE_B20,))  # Corollary 2
  assert flags["algorithm"] == F.rate_entry(F.RATE_M0, F.RATE_B20, t["T"])


def test_rate_entry_is_corollary_2_with_its_directions():
  eta = (10 * 1 * 40 / (100 * 2 * 200)) ** 0.5  # d = 100, b1 = 1, H = 2 (fedzo_rate_trend.cfg)
  mu = (100 * 1 * 40 * 10 * 2 * 200) ** -0.25
  assert F.rate_entry(10, 40, 200) == f"fedzo:fd_directions=40:clients_per_round=10:lr={eta:.4g}:smoothing={mu:.4g}"
  fixed = F.rate_entry(50, 5, 200, schedule_at=(10, 20))
  assert fixed == F.rate_entry(10, 20, 200).replace("fd_directions=20:clients_per_round=10",
                                                    "fd_directions=5:clients_per_round=50")


def test_log_slope_and_min_of_the_seed_mean():
  assert F.log_slope((5, 10, 20, 40), [3.0 * b ** -0.5 for b in (5, 10, 20, 40)]) == pytest.approx(-0.5)
  # Seed 0 is lowest at round 2, seed 1 at round 1: the minimum of the mean is at round 1, (1 + 4) / 2.
  runs = [{"a": [{"round": 0, "grad_norm": 3.0}, {"round": 1, "grad_norm": 1.0}, {"round": 2, "grad_norm": 0.0}]},
          {"a": [{"round": 0, "grad_norm": 3.0}, {"round": 1, "grad_norm": 2.0}, {"round": 2, "grad_norm": 3.0}]}]
  assert F.min_mean_sq_grad(runs, "a") == 2.5
  assert F.seed_min_sq_grad(runs[1], "a") == 4.0


def _rate_runs(power_b2, power_m, name="fedzo_rate", schedule_at=None, spread=0.0):
  """Ten seeds' runs whose ||grad F||^2 ends at (b2 / 20)^power_b2 (M / 10)^power_m; seed s's b2 power is
  tilted by spread * (s - 4.5) / 4.5."""
  out = {}
  for s in range(10):
    tilt = spread * (s - 4.5) / 4.5
    run = {}
    for m, b2 in [(F.RATE_M0, b2) for b2 in F.RATE_B2] + [(m, F.RATE_B20) for m in F.RATE_M]:
      end = (b2 / 20) ** (power_b2 + tilt) * (m / 10) ** power_m
      run[F.rate_entry(m, b2, 400, schedule_at).replace(":", "-")] = [
          {"round": 0, "grad_norm": 100.0}, {"round": 400, "grad_norm": end ** 0.5}]
    out[f"{name}_s{s}"] = run
  return out


@pytest.mark.parametrize("powers,verdict", [
    ((-0.7, -0.8), "reproduced"),
    ((-1.0, -0.9), "reproduced"),   # steeper than the bound is consistent with it (the old band called -1 out)
    ((-0.1, -0.9), "mixed"),        # flatter in b2: opposite there
])
def test_rate_trend_per_seed_slopes_against_the_bound(tmp_path, powers, verdict):
  fixed = _rate_runs(0.0, -0.6, "fedzo_rate_fixed", schedule_at=(F.RATE_M0, F.RATE_B20))
  m = F.rate_trend(Ctx(tmp_path, runs={**_rate_runs(*powers, spread=0.2), **fixed}))
  b2, ms = m.values.values()
  assert np.mean(b2["fedzo"]) == pytest.approx(powers[0]) and ms["fedzo"] == pytest.approx([powers[1]] * 10)
  assert m.numbers["fixed eta (Corollary 2's at M = 10, b2 = 20): per-seed slope, M = 5, 10, 25, 50 (b2 = 20)"] \
      == pytest.approx([-0.6] * 10)
  assert os.path.exists(tmp_path / m.figures[0])
  assert _judge("fedzo.rate_trend", m).verdict == verdict


def _penalty_runs(floors, name="fedzo_penalty"):
  """Ten seeds' runs whose ||grad F||^2 ends at floors[(M, H)] plus 1e-5 s at M < N (seed s)."""
  return {f"{name}_s{s}": {F.penalty_entry(m, h, 200).replace(":", "-"): [
      {"round": 0, "grad_norm": 2.0}, {"round": 200, "grad_norm": (v + (1e-5 * s if m < 50 else 0.0)) ** 0.5}]
      for (m, h), v in floors.items()} for s in range(10)}


def test_penalty_entry_changes_only_h_and_m_at_one_step_size():
  a, b = F.penalty_entry(10, 1, 200), F.penalty_entry(50, 10, 200)
  assert a.startswith("fedzo:local_steps=1:fd_directions=20:clients_per_round=10:")
  assert b.startswith("fedzo:local_steps=10:fd_directions=20:clients_per_round=50:")
  assert a.split(":lr=")[1] == b.split(":lr=")[1] == F.rate_entry(10, 20, 200).split(":lr=")[1]


def test_sampling_penalty_is_the_paired_gap_per_h(tmp_path):
  het = {(50, h): 1e-3 for h in F.PENALTY_H} | {(10, h): 1e-3 + g for h, g in zip(F.PENALTY_H, (1, 2, 3, 4))}
  iid = {(m, h): 1e-3 for m in F.PENALTY_M for h in F.PENALTY_H}
  runs = {**_penalty_runs(het), **_penalty_runs(iid, "fedzo_penalty_iid")}
  m = F.sampling_penalty(Ctx(tmp_path, runs=runs))
  gaps = m.values["logistic, heterogeneous clients"]
  assert gaps["H=5"] == pytest.approx([3 + 1e-5 * s for s in range(10)])
  assert m.numbers["i.i.d. clients: M=10 minus M=50, H=10, per seed"] == pytest.approx([1e-5 * s for s in range(10)])
  assert _judge("fedzo.sampling_penalty", m).verdict == "reproduced"


def _h_cap_runs(error, seeds=10):
  """fedzo.h_cap's runs: ``error(b2, h, s)`` is seed s's min_t ||grad F||^2 at (b2, H)."""
  runs = {}
  for s in range(seeds):
    run = {}
    for b2 in F.H_CAP_B2:
      for k in F.H_CAP_SCALE:
        h = max(1, round(k * F.h_cap(b2)))
        run[F.h_cap_entry(b2, h, F.RATE_TASK["T"]).replace(":", "-")] = [
            {"round": 0, "grad_norm": 4.0}, {"round": 1, "grad_norm": error(b2, h, s) ** 0.5},
            {"round": 2, "grad_norm": 2 * error(b2, h, s) ** 0.5}]
    runs[f"fedzo_h_cap_s{s}"] = run
  return runs


def test_h_cap_grid_and_entries_are_corollary_2s():
  assert [F.h_cap(b2) for b2 in F.H_CAP_B2] == [5, 20]  # d / (b1 b2) with d = 100, b1 = 1
  entry = F.h_cap_entry(5, 100, 400)
  eta, mu = (10 * 1 * 5 / (100 * 100 * 400)) ** 0.5, (100 * 1 * 5 * 10 * 100 * 400) ** -0.25
  assert entry == f"fedzo:local_steps=100:fd_directions=5:clients_per_round=10:lr={eta:.4g}:smoothing={mu:.4g}"


@pytest.mark.parametrize("shape,why", [
    # The bound's shape: a kink at the cap, and nearly the same at half and twice the cap (the controls).
    (lambda c, h: (c / h) ** 0.5 + (h / c) ** 0.5, "does not discriminate"),
    (lambda c, h: h ** -0.5, "power"),  # the same speed-up at every H: no kink anywhere
])
def test_h_cap_slopes_below_and_above_the_cap(tmp_path, shape, why):
  noise = np.exp(0.05 * np.random.default_rng(0).standard_normal((len(F.H_CAP_B2), 101, 10)))  # 5% per seed

  def error(b2, h, s):
    return shape(F.h_cap(b2), h) * noise[F.H_CAP_B2.index(b2), h, s]
  m = F.h_cap_measure(Ctx(tmp_path, runs=_h_cap_runs(error)))
  kink = m.values["b2=20 (cap d/(b1 b2) = 5)"]["cap"]
  below, above = [1, 2, 5], [5, 10, 25]  # H <= 5 and H >= 5 of H = 1, 2, 5, 10, 25
  assert kink[3] == pytest.approx(F.log_slope(below, [error(20, h, 3) for h in below])
                                  - F.log_slope(above, [error(20, h, 3) for h in above]))
  assert m.numbers["b2=20 (cap d/(b1 b2) = 5) min_t ||grad F||^2, H=5, per seed"][3] == pytest.approx(error(20, 5, 3))
  assert os.path.exists(tmp_path / m.figures[0])
  ev = _judge("fedzo.h_cap", m)
  assert (ev.verdict if why == "reproduced" else ev.why.split(";")[0]) == why
