"""The claims of FedLRGD and FedAve (seed 004; ``../shared/specs/fedlrgd.md`` §3, §7).

See :mod:`experiments.reproduce.papers` for how claims are collected.
"""

from __future__ import annotations

from experiments.reproduce.claims import T_ALG, test_claim

TITLE = "FedLRGD and FedAve (seed 004): low-rank gradient descent"

CLAIMS = [
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

# Issue 14's claims of this paper that have no evaluation yet (listed in the report as pending).
PENDING = ["crossover against FedAve", "App. C rank evidence"]
