"""Small flax.linen classifiers on flattened inputs."""

from typing import Sequence

import flax.linen as nn
import jax.numpy as jnp


class Softmax(nn.Module):
  """Multinomial logistic regression with bias: logits = W x + b.

  Input (..., *feature_shape) float32, flattened; output (..., num_classes).
  """
  num_classes: int

  @nn.compact
  def __call__(self, x):
    x = x.reshape(x.shape[:-self.feature_ndim] + (-1,)) if self.feature_ndim > 1 else x
    return nn.Dense(self.num_classes, kernel_init=nn.initializers.zeros)(x)

  feature_ndim: int = 1


class MLP(nn.Module):
  """Fully connected ReLU network: hidden ``widths`` then a linear output layer."""
  num_classes: int
  widths: Sequence[int] = (64,)
  feature_ndim: int = 1

  @nn.compact
  def __call__(self, x):
    x = x.reshape(x.shape[:-self.feature_ndim] + (-1,)) if self.feature_ndim > 1 else x
    for w in self.widths:
      x = nn.relu(nn.Dense(w)(x))
    return nn.Dense(self.num_classes)(x)
