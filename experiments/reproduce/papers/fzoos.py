"""The claims of FZooS (seed 000; ``../shared/specs/fzoos.md`` §3, §7).

See :mod:`experiments.reproduce.papers` for how claims are collected.
"""

from __future__ import annotations

from experiments.reproduce.claims import T_ALG, test_claim

TITLE = "FZooS (seed 000): federated zeroth-order optimisation with trajectory-informed surrogates"

CLAIMS = [
    test_claim("fzoos.queries", "FZooS makes 107 queries per client per round at T = 10 and the FD "
               "baselines 211 (Q = 20).", "seed 000 App. E",
               f"{T_ALG}/test_fzoos_rules.py::test_code_counts_107_queries_per_client_round_and_211_for_fd"),
    test_claim("fzoos.active_queries", "Active queries pick the most uncertain candidates (largest "
               "posterior variance).", "seed 000 Alg. 2",
               f"{T_ALG}/test_fzoos_rules.py::test_active_queries_pick_the_most_uncertain_candidates"),
]

# Issue 14's claims of this paper that have no evaluation yet (listed in the report as pending).
PENDING = ["Fig. 1 at C in {0.5, 5, 50} (paper and code presets, drift statistic)", "Fig. 4 cosines",
           "Fig. 6 ablations", "attack and metric-optimisation comparisons"]
