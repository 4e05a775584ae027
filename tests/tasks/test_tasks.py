"""Tasks: the quadratic's exact average, classification losses and batches."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from fedsim.tasks import make_task
from fedsim.tasks.quadratic import to_z


@pytest.mark.parametrize("c", [0.0, 0.5, 5.0, 50.0])
def test_quadratic_client_average_equals_global(c):
  task = make_task("quadratic", num_clients=5, dim=300, heterogeneity=c, seed=1)
  xs = jax.random.uniform(jax.random.key(0), (8, 300))
  for x in xs:
    f_i = jax.vmap(lambda row, x=x: task.loss(x, row))(task.client_data)
    f = task.evaluate(x, task.data)["objective"]
    np.testing.assert_allclose(jnp.mean(f_i), f, rtol=2e-5)


def test_quadratic_optimum_and_heterogeneity():
  d = 300
  task = make_task("quadratic", num_clients=5, dim=d, heterogeneity=5.0)
  x_star = jnp.full((d,), 0.475)
  np.testing.assert_allclose(to_z(x_star), -0.5, atol=1e-5)
  ev = task.evaluate(x_star, task.data)
  np.testing.assert_allclose(ev["objective"], 1 / (10 * d) - 0.025, atol=1e-6)
  np.testing.assert_allclose(ev["optimality_gap"], 0.0, atol=1e-6)
  # Clients disagree when C > 0: their minimisers differ.
  f_i = jax.vmap(lambda row: task.loss(x_star, row))(task.client_data)
  assert float(jnp.std(f_i)) > 1e-3


def test_quadratic_heterogeneity_is_data_so_every_c_shares_one_program():
  """C is a client-data column, not a constant: the lowered loss is the same program for every C
  (runs that differ only in C reuse their compilations), and its value moves with C."""
  x = jax.random.uniform(jax.random.key(0), (30,))
  lowered, values = set(), []
  for c in (0.5, 5.0, 50.0):
    task = make_task("quadratic", num_clients=4, dim=30, heterogeneity=c, seed=2)
    row = jax.tree.map(lambda v: v[1], task.client_data)
    lowered.add(jax.jit(task.loss).lower(x, row).as_text())
    values.append(float(task.loss(x, row)))
  assert len(lowered) == 1
  assert len(set(values)) == 3


def test_classification_objective_is_pooled_masked_loss(digits10):
  task = digits10
  params = jax.tree_util.tree_map(lambda p: 0.01 * jnp.ones_like(p), task.init_params(jax.random.key(0)))
  ev = task.evaluate(params, task.data)
  cd = task.client_data
  x = np.asarray(cd["x"])[np.asarray(cd["mask"])]
  y = np.asarray(cd["y"])[np.asarray(cd["mask"])]
  logits = x.reshape(len(x), -1) @ np.asarray(params["params"]["Dense_0"]["kernel"]) + \
      np.asarray(params["params"]["Dense_0"]["bias"])
  expected = float(jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, y)))
  np.testing.assert_allclose(ev["objective"], expected, rtol=1e-5)
  assert len(x) == int(jnp.sum(task.client_sizes))
  zero = jax.tree_util.tree_map(jnp.zeros_like, params)
  np.testing.assert_allclose(task.evaluate(zero, task.data)["objective"], np.log(10), rtol=1e-6)


def test_sample_batch_draws_only_real_samples(digits10):
  task = digits10
  sizes = np.asarray(task.client_sizes)
  i = int(np.argmin(sizes))
  client = jax.tree_util.tree_map(lambda a: a[i], task.client_data)
  batch = task.sample_batch(client, jax.random.key(0), 500)
  real = np.asarray(client["x"])[: sizes[i]].reshape(sizes[i], -1)
  got = np.asarray(batch["x"]).reshape(500, -1)
  # Every drawn row is one of the client's n_i real rows (padding rows are zeros).
  dists = ((got[:, None, :] - real[None]) ** 2).sum(-1).min(1)
  assert np.all(dists == 0)
  assert len({tuple(r) for r in got}) == len({tuple(r) for r in real}) or sizes[i] > 100


def test_classification_tasks_report_accuracy_and_the_quadratic_does_not():
  assert make_task("softmax", num_clients=3).has_accuracy is True
  assert make_task("quadratic", num_clients=3, dim=4).has_accuracy is False


def test_levy_equals_its_closed_form_and_vanishes_at_one():
  """synthetic.levy: w = 1 + (u - 1) / 4, sin^2(pi w_1) + sum_{i<d} (w_i - 1)^2 (1 + 10 sin^2(pi w_i + 1))
  + (w_d - 1)^2 (1 + sin^2(2 pi w_d)), computed by hand in numpy at a point with no w_i = 1; 0 at u = 1."""
  import math

  from fedsim.tasks.synthetic import levy
  u = np.array([0.2, 0.4, -1.3, 0.9])
  w = 1 + (u - 1) / 4
  want = (math.sin(math.pi * w[0]) ** 2
          + sum((w[i] - 1) ** 2 * (1 + 10 * math.sin(math.pi * w[i] + 1) ** 2) for i in range(1, 3))
          + (w[3] - 1) ** 2 * (1 + math.sin(2 * math.pi * w[3]) ** 2))
  np.testing.assert_allclose(float(levy(jnp.asarray(u, jnp.float32))), want, rtol=1e-5)
  assert abs(float(levy(jnp.ones(4)))) < 1e-10


def test_make_task_defaults_are_seed_zero_and_the_tasks_own_box(tmp_path):
  """make_task without seed builds seed 0's task; without perturbation_box (0) the task's own default box
  (metric_opt here, as --perturbation_box's default does)."""
  a, b = make_task("quadratic", num_clients=3, dim=4), make_task("quadratic", num_clients=3, dim=4, seed=0)
  for x, y in zip(jax.tree_util.tree_leaves(a.data), jax.tree_util.tree_leaves(b.data)):
    np.testing.assert_array_equal(x, y)
  c = make_task("quadratic", num_clients=3, dim=4, seed=1)
  assert any(not np.array_equal(x, y) for x, y in zip(jax.tree_util.tree_leaves(a.data),
                                                       jax.tree_util.tree_leaves(c.data)))
  task = make_task("metric_opt", num_clients=2, model_train_steps=30, cache_dir=str(tmp_path))
  assert task.num_clients == 2
