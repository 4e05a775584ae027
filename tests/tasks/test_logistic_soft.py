"""The soft-label logistic task (seed 004 App. A, eqs. (66)-(68)) and ridge.

* The objective is eq. (3)/(67) over the masked server samples and the clients;
  the per-sample gradient is (sigma(theta^T x) - y) x + mu theta.
* F_* is a float64 optimum (gradient ~ 0, no better point nearby).
* mu <= eigenvalues of the Hessian <= L1 = p/2 + mu (eq. (68)).
* Data ranges, heterogeneity boxes, server shift, Hölder features.
* ``with_server_size`` changes only values (shapes fixed), with nested server sets.
* Bad values raise ConfigError naming the flag.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedsim.core.errors import ConfigError
from fedsim.tasks import make_task
from fedsim.tasks.logistic_soft import make_smooth_erm_task, pooled_objective_and_grad, with_server_size


def make(name="logistic_soft", **kw):
  args = dict(num_clients=9, samples_per_client=6, num_features=3, server_samples=4, max_rank=7,
              mu=0.1, seed=3)
  args.update(kw)
  return make_smooth_erm_task(name, **args)


def pooled_np(task):
  d = jax.tree_util.tree_map(np.asarray, task.data)
  ms = d["server"]["mask"]
  x = np.concatenate([d["server"]["x"][ms], d["clients"]["x"].reshape(-1, d["clients"]["x"].shape[-1])])
  y = np.concatenate([d["server"]["y"][ms], d["clients"]["y"].reshape(-1)])
  return x.astype(np.float64), y.astype(np.float64)


def test_objective_and_gradient_are_eq_67():
  with jax.enable_x64(True):
    task = make()
    x, y = pooled_np(task)
    theta = np.array([0.3, -0.7, 0.9])
    z = x @ theta
    f = np.mean(y * np.log1p(np.exp(-z)) + (1 - y) * np.log1p(np.exp(z))) + 0.05 * theta @ theta
    g = np.mean((1 / (1 + np.exp(-z)) - y)[:, None] * x, 0) + 0.1 * theta
    F, G, n = jax.jit(lambda t, d: pooled_objective_and_grad(task.per_example_loss, t, d))(
        jnp.asarray(theta), task.data)
    assert int(n) == 9 * 6 + 4 == task.info["n"]
    np.testing.assert_allclose(F, f, rtol=1e-13)
    np.testing.assert_allclose(G, g, rtol=1e-12, atol=1e-15)
    ev = jax.jit(task.evaluate)(jnp.asarray(theta), task.data)
    np.testing.assert_allclose(ev["objective"], f, rtol=1e-13)
    assert float(ev["optimality_gap"]) > 0


@pytest.mark.slow  # long; .ci/run runs it (pytest -m slow)
def test_f_star_is_the_float64_optimum_and_constants():
  with jax.enable_x64(True):
    task = make(heterogeneity=0.5, server_shift=0.2)
    theta_star = task.data["eval"]["theta_star"]
    F, G, _ = pooled_objective_and_grad(task.per_example_loss, theta_star, task.data)
    assert float(jnp.linalg.norm(G)) <= 1e-12
    np.testing.assert_allclose(F, task.info["F_star"], rtol=1e-15)
    deltas = jax.random.normal(jax.random.key(0), (20, 3)) * 1e-3
    gaps = jax.jit(jax.vmap(lambda dl, d: task.evaluate(theta_star + dl, d)["optimality_gap"],
                            in_axes=(0, None)))(deltas, task.data)
    assert float(jnp.min(gaps)) > 0
    # mu <= eig(Hessian) <= L1 (App. A eq. (68)) at random points of the box.
    hess = jax.jit(jax.vmap(jax.hessian(
        lambda t, d: pooled_objective_and_grad(task.per_example_loss, t, d)[0]), in_axes=(0, None)))
    ts = jax.random.uniform(jax.random.key(1), (3, 3), jnp.float64, -1, 1)
    eig = np.linalg.eigvalsh(np.asarray(hess(ts, task.data)))
    assert eig.min() >= 0.1 - 1e-12 and eig.max() <= task.info["L1"] == 3 / 2 + 0.1
    assert task.info["kappa"] == pytest.approx(task.info["L1"] / 0.1)


def test_ridge_optimum_is_closed_form():
  with jax.enable_x64(True):
    task = make("ridge")
    x, y = pooled_np(task)
    theta = np.linalg.solve(x.T @ x / len(y) + 0.1 * np.eye(3), x.T @ y / len(y))
    np.testing.assert_allclose(task.data["eval"]["theta_star"], theta, rtol=1e-12)
    assert task.info["L1"] == 3 + 0.1


def test_data_ranges_heterogeneity_and_shift():
  h, delta = 0.6, 0.3
  task = make(num_clients=20, samples_per_client=30, heterogeneity=h, server_shift=delta, max_rank=50,
              server_samples=50)
  xc = np.asarray(task.data["clients"]["x"])
  xs = np.asarray(task.data["server"]["x"])
  ys = np.asarray(task.data["server"]["y"])
  assert xc.min() >= delta and xc.max() <= 1 and xs.min() >= 0 and xs.max() <= 1 - delta + 1e-7
  assert 0 <= ys.min() and ys.max() <= 1
  # Client c's points lie in a box of side (1 - delta)(1 - h) per coordinate.
  width = xc.max(axis=1) - xc.min(axis=1)
  assert width.max() <= (1 - delta) * (1 - h) + 1e-6
  iid = make(num_clients=20, samples_per_client=30)
  assert float(np.mean(np.asarray(iid.data["clients"]["x"]).std(axis=1))) > 0.25  # U[0,1]: sd 0.29
  hol = make(feature_map="holder", holder_eta=1.5, raw_dim=2, num_features=5)
  xh = np.asarray(hol.data["clients"]["x"])
  assert xh.shape[-1] == 5 and xh.min() >= 0 and xh.max() <= 1
  assert hol.info["data_dim"] == 3 and hol.info["holder_eta"] == 1.5


def test_with_server_size_changes_values_not_shapes():
  with jax.enable_x64(True):
    task = make(server_samples=2, max_rank=7)
    bigger = with_server_size(task, 6)
    def shapes(t):
      return jax.tree_util.tree_map(lambda a: a.shape, t.data)
    assert shapes(task) == shapes(bigger)
    assert int(jnp.sum(bigger.data["server"]["mask"])) == 6 == bigger.info["server_samples"]
    np.testing.assert_array_equal(task.data["server"]["x"], bigger.data["server"]["x"])  # nested
    assert bigger.info["F_star"] != task.info["F_star"]
    with pytest.raises(ValueError, match="rank must be in"):
      with_server_size(task, 8)


def test_float32_without_x64_and_batches():
  task = make()
  assert task.data["clients"]["x"].dtype == jnp.float32 and task.info["dtype"] == "float32"
  client = jax.tree_util.tree_map(lambda a: a[0], task.client_data)
  batch = task.sample_batch(client, jax.random.key(0), 50)
  rows = {tuple(r) for r in np.asarray(client["x"])}
  assert all(tuple(r) in rows for r in np.asarray(batch["x"]))


@pytest.mark.parametrize("kw, flag", [
    (dict(server_samples=9, max_rank=8), "--rank"),
    (dict(mu=0.0), "--l2_penalty"),
    (dict(data_heterogeneity=1.0), "--data_heterogeneity"),
    (dict(feature_map="poly"), "--feature_map"),
    (dict(samples_per_client=0), "--samples_per_client"),
])
def test_bad_values_name_the_flag(kw, flag):
  args = dict(samples_per_client=5, num_features=2, server_samples=3, max_rank=4, mu=0.1)
  args.update(kw)
  with pytest.raises(ConfigError) as e:
    make_task("logistic_soft", num_clients=3, **args)
  assert e.value.cli.startswith(f"{flag}: ") and "--" not in str(e.value)  # the CLI's words, Python's words
