"""Zeroth-order gradient estimators."""
from fedsim.estimators.finite_difference import LAWS, directions, direction_scale, fd_gradient
