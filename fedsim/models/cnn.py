"""A small convolutional classifier: the "simple CNN" of seed 003 §6 (Fig. 5).

The paper does not print the architecture; specs/hiso.md §3.2 identifies the
authors' ``CNN_MNIST`` ([code]): conv(1 -> 16, 5x5, pad 2) - ReLU - maxpool 2
-> conv(16 -> 32, 5x5, pad 2) - ReLU - maxpool 2 -> linear(-> 10), which has
d = 28,938 parameters on 28x28 MNIST (14,538 on 8x8 digits).
"""

from collections.abc import Sequence

import flax.linen as nn


class CNN(nn.Module):
  """Conv-ReLU-maxpool blocks then a linear layer.

  Input: (B, H, W) grey images (a channel axis is added) or (B, H, W, C),
  float32 in [0, 1]. Output: (B, num_classes) logits. Convolutions use 'SAME'
  padding (pad 2 for 5x5, as [code]); pooling is 2x2 with stride 2 (floor).
  """
  num_classes: int
  features: Sequence[int] = (16, 32)
  kernel_size: int = 5

  @nn.compact
  def __call__(self, x):
    if x.ndim == 3:
      x = x[..., None]
    for f in self.features:
      x = nn.Conv(f, (self.kernel_size, self.kernel_size), padding="SAME")(x)
      x = nn.max_pool(nn.relu(x), (2, 2), strides=(2, 2))
    x = x.reshape(x.shape[:-3] + (-1,))
    return nn.Dense(self.num_classes)(x)
