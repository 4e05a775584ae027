"""shift_tabular: the TV / W1 heterogeneity knob of FFGB.C / FFGB.L (seed 002; specs/ffgb.md §1.3)."""

import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats

from fedsim.tasks import make_task
from fedsim.tasks.functional import TABULAR_LIP, tv_distance, w1_distance


def test_w1_distance_is_exact_on_1d_clouds_and_tv_on_simplex():
  rs = np.random.default_rng(0)
  a, b = rs.normal(size=12), rs.normal(size=8) + 0.7
  np.testing.assert_allclose(w1_distance(a[:, None], b[:, None]),
                             scipy.stats.wasserstein_distance(a, b), rtol=1e-9)
  # A translation by v moves every atom by ||v||: W1 = ||v||.
  x = rs.uniform(size=(10, 2))
  np.testing.assert_allclose(w1_distance(x, x + np.array([0.3, 0.4])), 0.5, rtol=1e-9)
  assert tv_distance([0.5, 0.5, 0.0], [0.0, 0.5, 0.5]) == pytest.approx(0.5)


@pytest.mark.parametrize("kind, knobs", [("tv", (0.0, 0.2, 0.5, 1.0)), ("w1", (0.0, 0.25, 0.5, 1.0, 2.0))])
def test_measured_shift_grows_with_the_knob_and_is_zero_without(kind, knobs):
  key = "shift_" + kind
  loss = "ce" if kind == "tv" else "square"
  tasks = [make_task("shift_tabular", num_clients=8, shift_kind=kind, feature_shift=s, tabular_loss=loss,
                     samples_per_client=40, num_features=2, seed=3) for s in knobs]
  omega = [t.info[key] for t in tasks]
  assert omega[0] == pytest.approx(0.0, abs=1e-12)
  assert all(a < b for a, b in zip(omega, omega[1:])), omega
  # Recompute omega = mean_i D(alpha, alpha_i) from the client arrays themselves.
  t = tasks[-2]
  x = np.asarray(t.data["clients"]["x"])
  if kind == "w1":
    allx = x.reshape(-1, 2)
    np.testing.assert_allclose(np.mean([w1_distance(allx, xi) for xi in x]), omega[-2], rtol=1e-6)
    # The label map is shared and L-Lipschitz (eq. 16): |y - y'| <= L ||x - x'||.
    y = np.asarray(t.data["clients"]["y"]).reshape(-1)
    d = np.linalg.norm(allx[:, None] - allx[None], axis=-1)
    assert np.all(np.abs(y[:, None] - y[None]) <= TABULAR_LIP * d + 1e-5)
  else:
    pool = np.unique(x.reshape(-1, 2), axis=0)
    dens = np.array([[np.mean(np.all(xi == p, -1)) for p in pool] for xi in x])
    assert np.allclose(dens.sum(1), 1.0)
    np.testing.assert_allclose(np.mean([tv_distance(dens.mean(0), di) for di in dens]), omega[-2],
                               rtol=1e-6)
    assert t.info["num_outputs"] == 3 and t.info["loss"] == "ce"


def test_the_square_loss_objective_is_the_mean_over_every_clients_samples():
  """cache_view (square loss): F = (1 / n) sum_i sum_j 0.5 ||f_ij - y_ij||^2 over the valid samples, n their
  count (here 2 clients x 3 samples, one masked off: n = 5), computed by hand."""
  from fedsim.tasks.functional import make_tabular_task
  x = np.zeros((2, 3, 1))
  y = np.arange(6, dtype=np.float64).reshape(2, 3, 1)
  mask = np.array([[True, True, True], [True, True, False]])
  task = make_tabular_task(x, y, mask=mask)
  f = np.ones((2, 3, 1))
  got = task.evaluate({"train": jnp.asarray(f, jnp.float32)}, task.data)["objective"]
  want = sum(0.5 * (1.0 - y[i, j, 0]) ** 2 for i in range(2) for j in range(3) if mask[i, j]) / 5
  np.testing.assert_allclose(float(got), want, rtol=1e-6)


def test_the_mcshane_gradient_is_zero_at_a_data_point():
  """mcshane_grad: L (x - x_j*) / ||x - x_j*|| is defined as 0 where x is the minimising point x_j* itself
  (no 0 / 0), and has norm L elsewhere."""
  from fedsim.tasks.functional import mcshane_grad
  x_i = jnp.asarray([[0.0, 0.0], [1.0, 0.0]])
  y_i = jnp.asarray([[0.0], [5.0]])
  g = np.asarray(mcshane_grad(x_i, y_i, 2.0, jnp.asarray([[0.0, 0.0], [0.0, 3.0]])))
  np.testing.assert_array_equal(g[0], 0.0)
  np.testing.assert_allclose(np.linalg.norm(g[1], axis=-1), 2.0, rtol=1e-6)
