"""The tasks of issue 5 (seed 003): ill-conditioned quadratic (§5.1 toy), CNN, fine-tuning."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from fedsim.core.errors import ConfigError
from fedsim.models.cnn import CNN
from fedsim.tasks import make_task
from fedsim.tasks.illcond_quadratic import make_illcond_quadratic_task, spectrum, whitening_rank


def test_illcond_quadratic_global_objective_and_optimum():
  with jax.enable_x64(True):
    task = make_illcond_quadratic_task(30, 7, 2.0, seed=3)
    x = jnp.asarray(np.random.default_rng(0).standard_normal(30))
    rows = task.client_data
    f_mean = np.mean([float(task.loss(x, jax.tree_util.tree_map(lambda a, i=i: a[i], rows))) for i in range(7)])
    ev = task.evaluate(x, task.data)
    np.testing.assert_allclose(float(ev["objective"]), f_mean, rtol=1e-6)        # F = mean_i f_i
    b_star = task.data["eval"]["b_star"].astype(jnp.float64)
    at_opt = task.evaluate(b_star, task.data)
    assert float(at_opt["optimality_gap"]) == 0.0
    np.testing.assert_allclose(float(at_opt["objective"]), task.info["F_star"], rtol=1e-6)
    # grad F(b*) = 0: b* minimises the mean of the client losses.
    g = jax.grad(lambda v: jnp.mean(jax.vmap(lambda r: task.loss(v, r))(rows)))(b_star)
    assert float(jnp.max(jnp.abs(g))) < 1e-5 * task.info["L"]


def test_isotropic_control_keeps_the_trace():
  aniso, iso = spectrum(500, seed=4), spectrum(500, seed=4, isotropic=True)
  np.testing.assert_allclose(iso.sum(), aniso.sum(), rtol=1e-12)
  assert np.all(iso == iso[0]) and aniso.max() / aniso.min() > 1e3
  t_iso = make_task("illcond_quadratic", num_clients=4, dim=500, seed=4, heterogeneity=1.0,
                    isotropic=True)
  assert t_iso.info["condition_number"] == pytest.approx(1.0)


def test_whitening_toy_reproduces_fig4_ordering():
  """§5.1 / Fig. 4: 200 log-normal eigenvalues (variance 3): zeta(eps) << L kappa << L d,
  and zeta(0) = d (spec §3.1, §7 item 6)."""
  for seed in range(5):
    lam = spectrum(200, seed=seed)
    L, tr = lam.max(), lam.sum()
    assert whitening_rank(lam, 0.0) == pytest.approx(200)
    assert whitening_rank(lam, 1.0) < tr < L * 200
    assert 40 < whitening_rank(lam, 1.0) < 160 and 300 < tr < 3000 and 2e3 < L * 200 < 2e5


def test_bad_illcond_settings_name_the_flag():
  with pytest.raises(ConfigError, match="spectrum_sigma"):
    make_task("illcond_quadratic", num_clients=3, dim=5, spectrum_sigma=-1.0)


def test_cnn_matches_the_papers_model_size():
  """CNN_MNIST of the authors' code: d = 28,938 on 28x28 (spec §3.2)."""
  for shape, d in (((28, 28), 28_938), ((8, 8), 14_538)):
    params = jax.eval_shape(CNN(10).init, jax.random.key(0), jnp.zeros((1,) + shape))
    assert sum(a.size for a in jax.tree.leaves(params)) == d
  task = make_task("cnn", num_clients=64, dirichlet_alpha=1.0, seed=0)
  assert task.dim == 14_538 and task.num_clients == 64
  ev = jax.jit(lambda p, data: task.evaluate(p, data))(task.init_params(jax.random.key(0)), task.data)
  assert np.isfinite(float(ev["objective"])) and 0.0 <= float(ev["test_accuracy"]) <= 1.0


def test_finetune_starts_from_the_pretrained_model(tmp_path):
  kw = dict(num_clients=6, dirichlet_alpha=1.0, seed=0, cache_dir=str(tmp_path))
  flip = make_task("finetune", finetune_shift="flip", **kw)
  info = flip.info
  assert info["pretrained_source_test_accuracy"] > 0.9
  assert info["pretrained_target_test_accuracy"] < info["pretrained_source_test_accuracy"] - 0.2
  # The run starts at the pre-trained weights (loaded from the cache the second time).
  again = make_task("finetune", finetune_shift="relabel", **kw)
  assert again.info["pretrain_loaded"] and not info["pretrain_loaded"]
  a, _ = ravel_pytree(flip.init_params(jax.random.key(0)))
  b, _ = ravel_pytree(again.init_params(jax.random.key(1)))
  np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  ev = flip.evaluate(flip.init_params(None), flip.data)
  assert float(ev["test_accuracy"]) == pytest.approx(info["pretrained_target_test_accuracy"], abs=1e-6)
  assert again.info["pretrained_target_test_accuracy"] < 0.1       # labels shifted by one
  with pytest.raises(ConfigError, match="finetune_shift"):
    make_task("finetune", finetune_shift="rotate", **kw)


def test_spectrum_rank_keeps_the_large_eigenvalues_as_d_grows():
  """--spectrum_rank=k: k log-normal eigenvalues, the same for every d >= k (so a seed's runs at several d
  pair), the other d - k at TAIL; Tr A and L then barely move with d (spec §7 item 5)."""
  from fedsim.tasks.illcond_quadratic import TAIL, spectrum
  small, large = spectrum(100, seed=3, rank=100), spectrum(10_000, seed=3, rank=100)
  np.testing.assert_array_equal(large[:100], small)
  assert np.all(large[100:] == TAIL) and large.max() == small.max()
  assert large.sum() - small.sum() == pytest.approx(9_900 * TAIL)
  np.testing.assert_array_equal(spectrum(50, seed=3, rank=0), spectrum(50, seed=3, rank=50))  # k >= d: all d
  task = make_task("illcond_quadratic", num_clients=3, dim=200, spectrum_rank=100, seed=3)
  assert task.info["spectrum_rank"] == 100 and task.info["trace_A"] == pytest.approx(small.sum() + 100 * TAIL)
  with pytest.raises(ConfigError, match="spectrum_rank"):
    make_task("illcond_quadratic", num_clients=3, dim=5, spectrum_rank=-1)
