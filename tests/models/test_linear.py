"""fedsim.models.linear.Softmax against the same model written in flax (the model it replaced), and the imports it
spares."""

import subprocess
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedsim import models
from fedsim.models import linear, mlp


class FlaxSoftmax(nn.Module):
  """The flax reference: logits = x W + b by one zero-kernel ``nn.Dense`` on the flattened input."""
  num_classes: int
  feature_ndim: int = 1

  @nn.compact
  def __call__(self, x):
    x = x.reshape(x.shape[:-self.feature_ndim] + (-1,)) if self.feature_ndim > 1 else x
    return nn.Dense(self.num_classes, kernel_init=nn.initializers.zeros)(x)


def _loss(model):
  def loss(params, x, y):
    logits = model.apply(params, x)
    return jnp.mean(jax.nn.logsumexp(logits, -1) - jnp.take_along_axis(logits, y[..., None], -1)[..., 0])
  return loss


@pytest.mark.parametrize("feature_shape", [(64,), (8, 8)])
def test_same_parameters_program_and_bits_as_flax(feature_shape):
  ours, theirs = (linear.Softmax(10, feature_ndim=len(feature_shape)),
                  FlaxSoftmax(10, feature_ndim=len(feature_shape)))
  x0 = jnp.zeros((1,) + feature_shape, jnp.float32)
  p_ours, p_theirs = ours.init(jax.random.key(0), x0), theirs.init(jax.random.key(3), x0)
  assert jax.tree_util.tree_structure(p_ours) == jax.tree_util.tree_structure(p_theirs)
  for a, b in zip(jax.tree_util.tree_leaves(p_ours), jax.tree_util.tree_leaves(p_theirs)):
    assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)
  rng = np.random.default_rng(0)
  params = jax.tree_util.tree_map(lambda a: jnp.asarray(rng.normal(size=a.shape), jnp.float32), p_theirs)
  x = jnp.asarray(rng.uniform(size=(5, 7) + feature_shape), jnp.float32)
  y = jnp.asarray(rng.integers(0, 10, size=(5, 7)), jnp.int32)
  # The same program (jaxpr) for the loss's value and gradient, batched over clients as the engine does.
  progs = [jax.make_jaxpr(jax.vmap(jax.value_and_grad(_loss(m)), in_axes=(None, 0, 0)))(params, x, y)
           for m in (ours, theirs)]
  assert str(progs[0]) == str(progs[1])
  for fn in (lambda m: jax.jit(m.apply)(params, x), lambda m: jax.jit(jax.grad(_loss(m)))(params, x, y)):
    for a, b in zip(jax.tree_util.tree_leaves(fn(ours)), jax.tree_util.tree_leaves(fn(theirs))):
      assert np.asarray(a).tobytes() == np.asarray(b).tobytes()


def test_lazy_names_resolve():
  assert models.MLP is mlp.MLP and models.Softmax is linear.Softmax
  assert models.CNN.__name__ == "CNN" and models.training.TrainConfig and models.weak_learners.ORACLES
  assert mlp.ACTIVATIONS is models.ACTIVATIONS
  from fedsim.algorithms import ffgb
  from fedsim.models import weak_learners
  assert ffgb.WEAK_LEARNERS == weak_learners.ORACLES and ffgb.WO_FAMILIES == weak_learners.FAMILIES
  from fedsim import tasks
  from fedsim.tasks import attack, attack_cw, finetune, metric_opt
  assert (attack.MODELS, attack_cw.CLASSIFIERS, finetune.SHIFTS, metric_opt.METRICS) == (
      tasks.ATTACK_CLASSIFIERS, tasks.ATTACK_CW_CLASSIFIERS, tasks.FINETUNE_SHIFTS, tasks.OPT_METRICS)
  with pytest.raises(AttributeError):
    models.Nothing  # noqa: B018


def test_main_job_imports_no_flax():
  # The main job (experiments.run: FedAvg on the softmax task) builds without importing flax.
  code = ("import sys, jax, experiments.run, fedsim.algorithms as A; from fedsim.tasks import make_task; "
          "t = make_task('softmax', dataset='digits', num_clients=10, seed=0); A.build('fedavg', t); "
          "jax.eval_shape(t.init_params, jax.random.key(0)); "
          "print(sorted(m for m in sys.modules if m.split('.')[0] == 'flax'))")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
  assert out.stdout.strip() == "[]"
