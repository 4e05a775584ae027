"""Multinomial logistic regression without flax: the ``softmax`` task's model.

:class:`Softmax` has the interface of a flax module that the tasks use (``init(key, x)``,
``apply(params, x)``) and the parameters of a flax module holding one ``nn.Dense`` with zero kernel,
``{"params": {"Dense_0": {"kernel": (F, C), "bias": (C,)}}}`` (the flax model it replaced, so cached
classifiers still load), and it applies the same operations (``lax.dot_general`` over the last axis, then
the bias added), so programs built from either are the same and give the same bits
(``tests/models/test_linear.py``). It spares a run on the softmax task the import of flax.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from jax import lax


@dataclasses.dataclass(frozen=True)
class Softmax:
  """logits = x W + b, with W (F, C) and b (C,) initialised to zero.

  Attributes:
    num_classes: C.
    feature_ndim: trailing input axes flattened into the F features (1: none).
  """

  num_classes: int
  feature_ndim: int = 1

  def _flat(self, x):
    return x.reshape(x.shape[:-self.feature_ndim] + (-1,)) if self.feature_ndim > 1 else x

  def init(self, key: jax.Array, x) -> dict:
    """Zero parameters for inputs shaped like ``x`` ((B, *feature_shape)); ``key`` is unused."""
    del key
    features = self._flat(jnp.asarray(x)).shape[-1]
    return {"params": {"Dense_0": {"kernel": jnp.zeros((features, self.num_classes), jnp.float32),
                                   "bias": jnp.zeros((self.num_classes,), jnp.float32)}}}

  def apply(self, params: dict, x):
    """Logits (..., C) of ``x`` (..., *feature_shape) float32."""
    dense = params["params"]["Dense_0"]
    x = self._flat(x)
    y = lax.dot_general(x, dense["kernel"], (((x.ndim - 1,), (0,)), ((), ())), precision=None)
    return y + jnp.reshape(dense["bias"], (1,) * (y.ndim - 1) + (-1,))
