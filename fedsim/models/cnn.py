"""A small convolutional classifier: the "simple CNN" of Li et al. 2025, §6 (Fig. 5).

The paper does not print the architecture; specs/hiso.md §3.2 identifies the
authors' ``CNN_MNIST`` ([code]): conv(1 -> 16, 5x5, pad 2) - ReLU - maxpool 2
-> conv(16 -> 32, 5x5, pad 2) - ReLU - maxpool 2 -> linear(-> 10), which has
d = 28,938 parameters on 28x28 MNIST (14,538 on 8x8 digits).

Two implementations of the same function, with the same parameters (names and
shapes, so a checkpoint of one loads into the other):

* ``impl="gemm"`` (default): each convolution is one matmul of the image's
  k x k patches (im2col, built from 2k shifted slices) with the kernel reshaped
  to (k^2 C_in, C_out), and the 2 x 2 pooling a reshape and max. Under the
  engine's vmap over clients, each with its own filters, this is one batched
  GEMM of (B H W, k^2 C_in) x (k^2 C_in, C_out) per client: XLA:CPU runs a round of
  FedAvg on the digits CNN about 2x faster than the grouped convolutions the
  ``xla`` form becomes under vmap (``python -m experiments.benchmark
  --suite=roofline``).
* ``impl="xla"``: flax ``nn.Conv`` and ``nn.max_pool`` (``lax.conv_general_dilated``
  and ``reduce_window``).

Both give the same logits and gradients up to float32 summation order
(``tests/models/test_cnn.py``). They differ only where a pooling window holds
two equal positive maxima: ``gemm`` splits the gradient between them (JAX's
rule for ``max``), ``xla`` gives it to one. Tied zeros (ReLU-clipped) get no
gradient in either, since ReLU'(0) = 0.
"""

from collections.abc import Sequence

import flax.linen as nn
import jax.numpy as jnp

IMPLS = ("gemm", "xla")


class PatchConv(nn.Module):
  """A stride-1 'SAME' convolution as one matmul of the input's patches (im2col).

  Same parameters as ``nn.Conv(features, (k, k), padding="SAME")``: ``kernel``
  (k, k, C_in, C_out) with lecun-normal init, ``bias`` (C_out,) zeros. Odd k
  (the padding is k // 2 on each side).

  Input (..., H, W, C_in) float32; output (..., H, W, C_out).
  """
  features: int
  kernel_size: int

  @nn.compact
  def __call__(self, x):
    k, cin = self.kernel_size, x.shape[-1]
    if k % 2 != 1:
      raise ValueError(f"PatchConv needs an odd kernel_size ('SAME' padding k // 2), got {k}")
    kernel = self.param("kernel", nn.initializers.lecun_normal(), (k, k, cin, self.features))
    bias = self.param("bias", nn.initializers.zeros_init(), (self.features,))
    h, w = x.shape[-3], x.shape[-2]
    xp = jnp.pad(x, [(0, 0)] * (x.ndim - 3) + [(k // 2, k // 2), (k // 2, k // 2), (0, 0)])
    # (..., H, W + 2 (k // 2), k, C_in): the k row shifts; then the k column shifts of those:
    # (..., H, W, k, k, C_in), the kernel's (row, column, channel) order
    rows = jnp.stack([xp[..., i:i + h, :, :] for i in range(k)], axis=-2)
    patches = jnp.stack([rows[..., j:j + w, :, :] for j in range(k)], axis=-2)
    patches = patches.reshape(patches.shape[:-3] + (k * k * cin,))
    return patches @ kernel.reshape(k * k * cin, self.features) + bias


def max_pool_2x2(x):
  """2 x 2 max pooling with stride 2 of (..., H, W, C), floor(H / 2) x floor(W / 2)
  windows (a trailing odd row or column is dropped, as ``nn.max_pool``)."""
  h2, w2 = x.shape[-3] // 2, x.shape[-2] // 2
  x = x[..., :2 * h2, :2 * w2, :]
  return jnp.max(x.reshape(x.shape[:-3] + (h2, 2, w2, 2, x.shape[-1])), axis=(-4, -2))


class CNN(nn.Module):
  """Conv-ReLU-maxpool blocks then a linear layer.

  Input: (B, H, W) grey images (a channel axis is added) or (B, H, W, C),
  float32 in [0, 1]. Output: (B, num_classes) logits. Convolutions use 'SAME'
  padding (pad 2 for 5x5, as [code]); pooling is 2x2 with stride 2 (floor).
  ``impl``: ``gemm`` or ``xla`` (module docstring); a ValueError names the
  accepted values otherwise.
  """
  num_classes: int
  features: Sequence[int] = (16, 32)
  kernel_size: int = 5
  impl: str = "gemm"

  @nn.compact
  def __call__(self, x):
    if self.impl not in IMPLS:
      raise ValueError(f"CNN impl {self.impl!r}; accepted: {', '.join(IMPLS)}")
    if x.ndim == 3:
      x = x[..., None]
    for i, f in enumerate(self.features):
      if self.impl == "gemm":
        x = max_pool_2x2(nn.relu(PatchConv(f, self.kernel_size, name=f"Conv_{i}")(x)))
      else:
        x = nn.Conv(f, (self.kernel_size, self.kernel_size), padding="SAME", name=f"Conv_{i}")(x)
        x = nn.max_pool(nn.relu(x), (2, 2), strides=(2, 2))
    x = x.reshape(x.shape[:-3] + (-1,))
    return nn.Dense(self.num_classes)(x)
