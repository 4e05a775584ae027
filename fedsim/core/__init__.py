"""The round engine, contracts, sampling, key hierarchy, sharding and errors."""
from fedsim.core.engine import init_state, simulate
from fedsim.core.errors import ConfigError, DataError, DivergenceError
from fedsim.core.sampling import sample_clients
from fedsim.core.types import FederatedAlgorithm, RoundStats, Task, make_stats

__all__ = ["ConfigError", "DataError", "DivergenceError", "FederatedAlgorithm", "RoundStats", "Task", "init_state",
           "make_stats", "sample_clients", "simulate"]
