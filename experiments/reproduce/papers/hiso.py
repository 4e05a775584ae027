"""The claims of HiSo and DeComFL (seed 003; ``../shared/specs/hiso.md`` §3, §7).

See :mod:`experiments.reproduce.papers` for how claims are collected.
"""

from __future__ import annotations

from experiments.reproduce.claims import T_ALG, test_claim

TITLE = "HiSo and DeComFL (seed 003): Hessian-informed scalar-only ZO"

CLAIMS = [
    test_claim("hiso.bytes", "HiSo and DeComFL send scalars only: the per-round bytes of the paper's "
               "tables (e.g. 40 B per round at the paper's settings).", "seed 003 Tables 1-2",
               f"{T_ALG}/test_hiso.py::test_byte_ledger_reproduces_paper_tables"),
    test_claim("hiso.replay", "Clients rebuild the global model exactly from the shared seeds and "
               "scalars (scalar-only replay).", "seed 003 Alg. 1",
               f"{T_ALG}/test_hiso.py::test_replay_is_exact_for_every_client"),
    test_claim("hiso.decomfl_reduction", "DeComFL is HiSo with H = I (nu = 0, H_0 = 1), bitwise.",
               "seed 003 §3", f"{T_ALG}/test_hiso.py::test_hiso_nu0_h0_1_is_decomfl_bitwise"),
]

# Issue 14's claims of this paper that have no evaluation yet (listed in the report as pending).
PENDING = ["Table 2 rounds ratio vs tuned DeComFL", "H fixed-point bound and its ablations"]
