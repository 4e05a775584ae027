"""FedLRGD (Jadbabaie et al. 2023) studies: App. C's rank histograms, Theorem 1, the simulation suite."""
