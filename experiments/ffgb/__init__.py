"""FFGB (Shen et al. 2022) analysis: the rate of Theorem 3.1 and Corollary 3.1 on the exact tabular task."""
