"""The claims of the five papers of :mod:`fedsim.papers` (the developers' notes: ``../shared/specs/<paper>.md``).

One module per paper (``fzoos``, ``fedzo``, ``ffgb``, ``hiso``, ``fedlrgd``), each
with ``TITLE``, ``CLAIMS`` (a list of :class:`~experiments.reproduce.claims.Claim`)
and ``PENDING`` (the claims that have no evaluation yet, shown as such in
the report, so nothing looks covered that is not). Exact properties that the test
suite already pins (reductions, closed forms, ledger counts) are claims whose
evidence is their tests (:func:`~experiments.reproduce.claims.test_claim`); curve
and table claims run ``experiments.run`` on the papers' flagfiles and judge the
numbers by a criterion fixed in the claim.
"""

from __future__ import annotations

from experiments.reproduce.papers import fedlrgd, fedzo, ffgb, fzoos, hiso

_MODULES = {"fzoos": fzoos, "fedzo": fedzo, "ffgb": ffgb, "hiso": hiso, "fedlrgd": fedlrgd}

TITLES = {name: m.TITLE for name, m in _MODULES.items()}
PAPERS = {name: m.CLAIMS for name, m in _MODULES.items()}
PENDING = {name: m.PENDING for name, m in _MODULES.items()}
# {flagfile: Substitute}: the flagfiles that run on an offline substitute of the paper's own data
# (claims.Context.resolve moves them onto it when --data_dir has it).
SUBSTITUTES = {name: getattr(m, "SUBSTITUTES", {}) for name, m in _MODULES.items()}
