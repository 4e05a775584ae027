"""``python -m experiments.reproduce``: claims reports with verdicts, figures and evidence.

See :mod:`experiments.reproduce.__main__` for the flags, :mod:`.claims` for the
machinery and :mod:`.papers` for the claims.
"""
