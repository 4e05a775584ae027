"""Flax modules shared by tasks (and, later, weak learners)."""
from fedsim.models.mlp import MLP, Softmax
from fedsim.models.cnn import CNN
