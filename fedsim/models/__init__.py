"""Flax modules shared by tasks (and, later, weak learners)."""
from fedsim.models.cnn import CNN
from fedsim.models.mlp import MLP, Softmax

__all__ = ["CNN", "MLP", "Softmax"]
