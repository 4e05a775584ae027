"""Small flax.linen classifiers on flattened inputs."""

from collections.abc import Sequence

import flax.linen as nn

from fedsim.models import ACTIVATIONS  # noqa: F401 (declared without flax; fedsim.models.mlp.ACTIVATIONS)


class MLP(nn.Module):
  """Fully connected network: hidden ``widths`` then a linear output layer.

  ``activation`` is ``relu`` (default) or ``leaky_relu`` (negative slope 0.01,
  the FFGB weak learner of Shen et al. 2022, App. B.1: with widths (32, 32) this is the
  same network, parameter for parameter, as
  ``fedsim.models.weak_learners.WeakLearnerMLP``).
  """
  num_classes: int
  widths: Sequence[int] = (64,)
  feature_ndim: int = 1
  activation: str = "relu"

  @nn.compact
  def __call__(self, x):
    x = x.reshape(x.shape[:-self.feature_ndim] + (-1,)) if self.feature_ndim > 1 else x
    act = (lambda v: nn.leaky_relu(v, 0.01)) if self.activation == "leaky_relu" else nn.relu
    for w in self.widths:
      x = act(nn.Dense(w)(x))
    return nn.Dense(self.num_classes)(x)
