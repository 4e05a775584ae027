"""The claims of the five papers of :mod:`fedsim.papers` (the developers' notes: ``../shared/specs/<paper>.md``).

One module per paper (``fzoos``, ``fedzo``, ``ffgb``, ``hiso``, ``fedlrgd``), each with ``TITLE``, ``CLAIMS``
(its declarations, ``experiments/reproduce/declarations/<paper>.toml``, with the measures that feed them:
:func:`experiments.reproduce.engine.claims`) and ``PENDING`` (the claims with no evaluation yet, so nothing looks
covered that is not). Checks are the tests that pin them; curve and table claims run ``experiments.run`` on the
papers' flagfiles and are judged by the protocol.
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
