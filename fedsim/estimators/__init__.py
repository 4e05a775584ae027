"""Zeroth-order gradient estimators."""
from fedsim.estimators.finite_difference import LAWS, direction_scale, directions, fd_gradient

__all__ = ["LAWS", "direction_scale", "directions", "fd_gradient"]
