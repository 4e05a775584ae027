"""FZooS (Shu et al. 2023) analysis: the Fig. 1 / Fig. 4 tables, rounds to reach, surrogate diagnostic."""
