"""FedLRGD (seed 004) studies: App. C's rank histograms, Theorem 1, the simulation suite."""
