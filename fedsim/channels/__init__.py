"""Wireless channel models: AirComp (over-the-air) aggregation."""
from fedsim.channels.aircomp import AirCompConfig, aggregate, participating_channels
