"""The claims of the five papers (seeds 000-004; ``../shared/specs/<paper>.md``).

Each paper is a list of :class:`~experiments.reproduce.claims.Claim`. Exact
properties that the test suite already pins (reductions, closed forms, ledger
counts) are claims whose evidence is their tests (:func:`test_claim`); curve and
table claims run ``experiments.run`` on the papers' flagfiles and judge the
numbers by a criterion fixed in the claim.

The claims here are the first part of issue 14's list; the remaining ones are
named in ``PENDING`` and shown as such in the index, so nothing looks covered
that is not.
"""

from __future__ import annotations

import os

from experiments.reproduce.claims import Claim, Context, Evidence, Stat, final, over_seeds, test_claim
from experiments.reproduce.report import plot_curves

TITLES = {
    "fzoos": "FZooS (seed 000): federated zeroth-order optimisation with trajectory-informed surrogates",
    "fedzo": "FedZO (seed 001): federated zeroth-order optimisation with AirComp",
    "ffgb": "FFGB, FFGB.C, FFGB.L (seed 002): federated functional gradient boosting",
    "hiso": "HiSo and DeComFL (seed 003): Hessian-informed scalar-only ZO",
    "fedlrgd": "FedLRGD and FedAve (seed 004): low-rank gradient descent",
}

T_ALG = "tests/algorithms"


def _curves(runs: list[dict[str, list[dict]]], metric: str, x: str = "round") -> dict:
  """``{label: [[(x, metric), ...] per seed]}`` from the runs of one setting."""
  return {label: [[(r[x], r[metric]) for r in run[label] if r.get(metric) is not None] for run in runs]
          for label in runs[0]}


# ------------------------------------------------------------------ FedZO (seed 001)

def _fig1a(ctx: Context) -> list[dict[str, list[dict]]]:
  seeds = ctx.pick((0,), (0, 1, 2))
  return [ctx.run(f"fedzo_fig1a_s{s}", "fedzo_fig1a_attack_H.cfg", seed=s,
                  rounds=ctx.pick(20, 300), eval_every=ctx.pick(5, 10)) for s in seeds]


H_LABELS = ("fedzo-local_steps=5", "fedzo-local_steps=10", "fedzo-local_steps=20", "fedzo-local_steps=50")


def fedzo_fig1a_h(ctx: Context) -> Evidence:
  runs = _fig1a(ctx)
  loss = over_seeds(runs, "objective")
  fig = plot_curves(os.path.join(ctx.root, "fig", "fedzo_fig1a.png"), _curves(runs, "objective"),
                    "round", "attack loss (eq. 21)", "FedZO Fig. 1a: local steps H, DZOPA, ZONE-S")
  means = [loss[h].mean for h in H_LABELS]
  ordered = all(a > b for a, b in zip(means, means[1:]))
  if ordered:
    verdict, why = "reproduced", "the final attack loss falls with every increase of H"
  elif means[-1] < means[0]:
    verdict, why = "partly reproduced", "H = 50 ends below H = 5, but the losses are not ordered in H"
  else:
    verdict, why = "not reproduced", "H = 50 does not end below H = 5"
  return Evidence(verdict, why, numbers={f"final loss {k}": v for k, v in loss.items()},
                  figures=[os.path.relpath(fig, ctx.root)])


def fedzo_fig1a_baselines(ctx: Context) -> Evidence:
  loss = over_seeds(_fig1a(ctx), "objective")
  best = min(loss[h].mean for h in H_LABELS)
  worst = max(loss[h].mean for h in H_LABELS)
  base = min(loss["dzopa"].mean, loss["zone_s"].mean)
  if worst < base:
    verdict, why = "reproduced", "every H ends below both baselines"
  elif best < base:
    verdict, why = "partly reproduced", "the best H ends below both baselines, not every H"
  else:
    verdict, why = "not reproduced", "no H ends below the better baseline"
  return Evidence(verdict, why, numbers={f"final loss {k}": v for k, v in loss.items()})


SNR_LABELS = ("fedzo-snr_db=inf", "fedzo-snr_db=0", "fedzo-snr_db=-5", "fedzo-snr_db=-10")


def fedzo_fig1c_snr(ctx: Context) -> Evidence:
  seeds = ctx.pick((0, 1), (0, 1, 2, 3, 4))
  runs = [ctx.run(f"fedzo_fig1c_s{s}", "fedzo_fig1c_attack_aircomp.cfg", seed=s,
                  rounds=ctx.pick(5, 100), eval_every=5) for s in seeds]
  loss = over_seeds(runs, "objective")
  fig = plot_curves(os.path.join(ctx.root, "fig", "fedzo_fig1c.png"), _curves(runs, "objective"),
                    "round", "attack loss (eq. 21)", "FedZO Fig. 1c: AirComp at SNR inf, 0, -5, -10 dB")
  means = [loss[k].mean for k in SNR_LABELS]
  gap = means[-1] - means[0]  # -10 dB minus noise-free
  spread = max(loss[k].std for k in SNR_LABELS)
  numbers = {f"final loss {k}": loss[k] for k in SNR_LABELS}
  numbers["loss gap -10 dB minus noise-free"] = gap
  numbers["largest seed std"] = spread
  # Diagnostic (not part of the criterion): the runs of one seed share channels and devices, so
  # the paired per-seed difference shows the channel noise's own effect apart from seed noise.
  numbers["paired gap -10 dB minus noise-free, per seed"] = Stat.of(
      final(r["fedzo-snr_db=-10"], "objective") - final(r["fedzo-snr_db=inf"], "objective") for r in runs)
  ordered = all(a <= b for a, b in zip(means, means[1:]))
  if ordered and gap > 2 * spread:
    verdict, why = "reproduced", "lower SNR ends higher, by more than twice the seed spread"
  elif ordered:
    verdict, why = "partly reproduced", ("the means are ordered by SNR but the -10 dB gap "
                                         f"({gap:.2g}) is within twice the seed spread ({spread:.2g})")
  else:
    verdict, why = "not reproduced", (f"the means are not ordered by SNR; the -10 dB gap ({gap:.2g}) "
                                      f"against a seed spread of {spread:.2g}")
  return Evidence(verdict, why, numbers=numbers, figures=[os.path.relpath(fig, ctx.root)])


FEDZO = [
    Claim("fedzo.fig1a_H", "More local steps H make FedZO's attack loss fall faster per round.",
          "seed 001 Fig. 1(a)",
          "reproduced: mean final loss strictly decreasing over H = 5, 10, 20, 50; partly: H = 50 "
          "below H = 5 only; not reproduced: otherwise", fedzo_fig1a_h),
    Claim("fedzo.fig1a_baselines", "FedZO reaches a lower attack loss than DZOPA and ZONE-S.",
          "seed 001 Fig. 1(a)",
          "reproduced: every H's mean final loss below both baselines'; partly: the best H's only",
          fedzo_fig1a_baselines),
    Claim("fedzo.fig1c_snr", "With AirComp, a lower SNR gives a higher attack loss; the noise-free "
          "channel is best.", "seed 001 Fig. 1(c)",
          "reproduced: mean final loss ordered inf <= 0 <= -5 <= -10 dB and the -10 dB minus noise-free "
          "gap above twice the largest seed std; partly: ordered only; not reproduced: otherwise",
          fedzo_fig1c_snr),
    test_claim("fedzo.alg1_rule", "Each round is Algorithm 1: H local ZO-SGD steps with b2 random "
               "directions, averaged over the M participants.", "seed 001 Alg. 1, eq. 5",
               f"{T_ALG}/test_fedzo_rules.py::test_fedzo_two_rounds_match_algorithm_1"),
    test_claim("fedzo.aircomp_eq17", "AirComp aggregation is eqs. 14-17: truncated channel "
               "inversion, threshold h_min, receiver noise at the given SNR.", "seed 001 §IV eqs. 14-17",
               "tests/channels/test_aircomp.py::test_shortcut_is_eq_17_exactly",
               "tests/channels/test_aircomp.py::test_full_transceiver_is_eqs_14_to_17_written_out",
               "tests/channels/test_aircomp.py::test_participation_probability_is_exp_minus_h_min_squared"),
]

# ------------------------------------------------------------------ FedLRGD (seed 004)

FEDLRGD = [
    test_claim("fedlrgd.anchor_exact", "The low-rank interpolation reproduces each client's gradient "
               "exactly at the anchor points.", "seed 004 Alg. 1 (interpolation step)",
               f"{T_ALG}/test_fedlrgd.py::test_anchor_exactness"),
    test_claim("fedlrgd.ridge_exact", "For ridge regression at r = p + 1 the approximation is exact, "
               "so FedLRGD's iterates equal exact GD's.", "seed 004 §3, App. A",
               f"{T_ALG}/test_fedlrgd.py::test_exact_rank_ridge_reproduces_gradient_and_gd"),
    test_claim("fedlrgd.ledger", "FedLRGD's oracle complexity is Theorem 2's Gamma formula.",
               "seed 004 Theorem 2", f"{T_ALG}/test_fedlrgd.py::test_fedlrgd_ledger_is_theorem2_formula",
               f"{T_ALG}/test_fedlrgd_rules.py::test_fedlrgd_alg1_weights_steps_and_ledger"),
]

# ------------------------------------------------------------------ HiSo / DeComFL (seed 003)

HISO = [
    test_claim("hiso.bytes", "HiSo and DeComFL send scalars only: the per-round bytes of the paper's "
               "tables (e.g. 40 B per round at the paper's settings).", "seed 003 Tables 1-2",
               f"{T_ALG}/test_hiso.py::test_byte_ledger_reproduces_paper_tables"),
    test_claim("hiso.replay", "Clients rebuild the global model exactly from the shared seeds and "
               "scalars (scalar-only replay).", "seed 003 Alg. 1",
               f"{T_ALG}/test_hiso.py::test_replay_is_exact_for_every_client"),
    test_claim("hiso.decomfl_reduction", "DeComFL is HiSo with H = I (nu = 0, H_0 = 1), bitwise.",
               "seed 003 §3", f"{T_ALG}/test_hiso.py::test_hiso_nu0_h0_1_is_decomfl_bitwise"),
]

# ------------------------------------------------------------------ FZooS (seed 000)

FZOOS = [
    test_claim("fzoos.queries", "FZooS makes 107 queries per client per round at T = 10 and the FD "
               "baselines 211 (Q = 20).", "seed 000 App. E",
               f"{T_ALG}/test_fzoos_rules.py::test_code_counts_107_queries_per_client_round_and_211_for_fd"),
    test_claim("fzoos.active_queries", "Active queries pick the most uncertain candidates (largest "
               "posterior variance).", "seed 000 Alg. 2",
               f"{T_ALG}/test_fzoos_rules.py::test_active_queries_pick_the_most_uncertain_candidates"),
]

# ------------------------------------------------------------------ FFGB (seed 002)

FFGB = [
    test_claim("ffgb.c_alg5", "One FFGB.C round is Algorithm 5 (WO-infinity oracle, clipped "
               "residual).", "seed 002 Alg. 5, eq. 24",
               f"{T_ALG}/test_ffgb_c_l.py::test_ffgb_c_one_round_matches_numpy_alg5"),
    test_claim("ffgb.l_alg4", "One FFGB.L round is Algorithm 4 (sign-fixed, Sobolev WO-lip oracle).",
               "seed 002 Alg. 4, eq. 25", f"{T_ALG}/test_ffgb_c_l.py::test_ffgb_l_one_round_matches_numpy_alg4"),
    test_claim("ffgb.semi_heterogeneous_limit", "With square loss FFGB converges to mean / (1 + mu) "
               "in the semi-heterogeneous setting.", "seed 002 Thm 3.1",
               f"{T_ALG}/test_ffgb.py::test_semi_heterogeneous_square_loss_converges_to_mean_over_one_plus_mu"),
]

PAPERS = {"fzoos": FZOOS, "fedzo": FEDZO, "ffgb": FFGB, "hiso": HISO, "fedlrgd": FEDLRGD}

# Issue 14's claims that have no evaluation yet (listed in each report as pending).
PENDING = {
    "fzoos": ["Fig. 1 at C in {0.5, 5, 50} (paper and code presets, drift statistic)", "Fig. 4 cosines",
              "Fig. 6 ablations", "attack and metric-optimisation comparisons"],
    "fedzo": ["Fig. 1b M effect (with the variance diagnostic)", "Fig. 1c AirComp SNR ordering",
              "Figs. 3-5 softmax H, M, AirComp against FedAvg", "Corollary 2 speed-up schedule",
              "participation threshold numbers"],
    "ffgb": ["FFGB vs FedAvg at equal communication (digits, MNIST-10k; s = 0.1, 0.3; paper and code)",
             "residual ablation (Fig. 2a)", "K sweep (Fig. 2b)", "FFGB.C / FFGB.L under TV / W1 shift"],
    "hiso": ["Table 2 rounds ratio vs tuned DeComFL", "H fixed-point bound and its ablations"],
    "fedlrgd": ["crossover against FedAve", "App. C rank evidence"],
}
