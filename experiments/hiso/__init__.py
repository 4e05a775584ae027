"""HiSo (Li et al. 2025) analysis: the learned-H diagnostic and Table 2's rounds ratio."""
