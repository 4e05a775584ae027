"""HiSo (seed 003) analysis: the learned-H diagnostic and Table 2's rounds ratio."""
