"""Wireless channel models: AirComp (over-the-air) aggregation."""
from fedsim.channels.aircomp import AirCompConfig, aggregate, participating_channels

__all__ = ["AirCompConfig", "aggregate", "participating_channels"]
