"""The low-rank evidence (seed 004 App. C, Theorem 1) and the FedLRGD suite binaries.

* Eq. (77): the 90%-energy approximate rank of constructed matrices.
* Theorem 1: the fitted log-log slope of the tail energy of ||y - theta||_2^eta
  (n = k = 1000, r in [4, 64]) is <= -2 eta/d + 0.1 for d in {1, 2},
  eta in {0.5, 1.5, 2.5}; for eta <= 1 (L2 = 1) the explicit bound holds.
* Eqs. (75)-(76): a slice entry equals df/dtheta_q(x^(i); theta^(j)) computed directly.
* S1 (b): the logistic kernels equal the closed-form gradient (sigmoid(theta^T x) - y) x_q + mu theta_q,
  and the spectrum fits tell an exponential from a power law.
* The binaries: bad flags exit 2 with one line; a tiny fidelity run writes results.
"""

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from experiments.fedlrgd import rank_study as rs
from fedsim.algorithms.theory_fedlrgd import approximate_rank

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_approximate_rank_eq_77():
  rng = np.random.default_rng(0)
  u, _ = np.linalg.qr(rng.standard_normal((20, 20)))
  v, _ = np.linalg.qr(rng.standard_normal((20, 20)))
  for sv2, expected in [([0.5, 0.4, 0.1], 2), ([0.95, 0.05], 1), ([0.3] * 3 + [0.1 / 17] * 17, 3),
                        ([0.2] * 4 + [0.2 / 16] * 16, 12)]:
    s = np.zeros(20)
    s[: len(sv2)] = np.sqrt(sv2)
    assert approximate_rank(u @ np.diag(s) @ v.T) == expected
  assert approximate_rank(np.outer(rng.standard_normal(7), rng.standard_normal(5))) == 1
  assert approximate_rank(np.zeros((4, 4))) == 0
  assert approximate_rank(np.eye(10), energy=1.0) == 10


def test_theorem1_decay_slopes():
  rows = rs.theorem1_decay(dims=(1, 2), etas=(0.5, 1.5, 2.5), n=1000, seed=0)
  assert len(rows) == 6
  for row in rows:
    assert row["slope"] <= -2 * row["eta"] / row["d"] + 0.1, row
    tails = np.asarray(row["tails"])
    assert np.all(np.diff(tails) <= 1e-18)   # Eckart-Young tails are non-increasing
    if row["eta"] <= 1:
      assert row["bound_checked_r"] and row["bound_holds"]


def test_gradient_slices_are_eq_76(tmp_path):
  x = np.random.default_rng(1).uniform(size=(40, 6)).astype(np.float32)
  y = np.arange(40, dtype=np.int32) % 3
  cfg = rs.RankStudyConfig(hidden=5, epochs=3, batch_size=10, seed=2)
  net = rs.network("mlp", 5, (6,), 3)
  params = rs.train(x, y, cfg, net)
  coords = np.array([0, 17, 33, 40])
  M = rs.gradient_slices(net, params, x, y, coords, k=6, seed=2)
  assert M.shape == (4, 6, 6)
  theta, unravel = ravel_pytree(params)
  pick = np.asarray(rs.test_indices(40, 6, 2))
  direct = jax.jit(lambda th, xx, yy: ravel_pytree(jax.grad(rs.example_loss, argnums=1)(net, unravel(th), xx,
                                                                                        yy))[0])
  for i, j in [(0, 0), (2, 5), (5, 3)]:
    g = direct(rs.perturbation(theta, j, 2), jnp.asarray(x[pick[i]]), jnp.asarray(y[pick[i]]))
    np.testing.assert_allclose(M[:, i, j], np.asarray(g)[coords], rtol=1e-5, atol=1e-7)
  # (75): the perturbation scale is ||theta*||_1 / p.
  d = np.asarray(rs.perturbation(theta, 0, 2) - theta)
  assert 0.5 < np.std(d) / (np.abs(np.asarray(theta)).sum() / theta.size) < 1.5



def test_logistic_kernels_are_the_closed_form_gradient():
  from fedsim.tasks.logistic_soft import make_smooth_erm_task
  n, mu = 6, 0.3
  g = rs.logistic_kernels(n, 2, mu=mu, seed=4)
  assert g.shape == (n, n, 2) and g.dtype == np.float64
  with jax.enable_x64(True):
    data = make_smooth_erm_task("logistic_soft", num_clients=1, samples_per_client=n, num_features=2,
                                server_samples=1, max_rank=1, mu=mu, seed=4).data["clients"]
  x, y = np.asarray(data["x"][0]), np.asarray(data["y"][0])
  theta = np.random.default_rng(5).uniform(-1.0, 1.0, size=(n, 2))
  for j in range(n):
    for k in range(n):
      sig = 1.0 / (1.0 + np.exp(-x[j] @ theta[k]))
      np.testing.assert_allclose(g[j, k], (sig - y[j]) * x[j] + mu * theta[k], rtol=1e-12, atol=1e-14)


def test_spectrum_fits_tell_exponential_from_power_law():
  j = np.arange(1, 41, dtype=float)
  exp_fit = rs.spectrum_fits(np.exp(-0.7 * (j - 1)))
  assert exp_fit["r2_exponential"] == pytest.approx(1.0) and exp_fit["r2_power"] < 0.99
  assert exp_fit["exp_rate"] == pytest.approx(-0.7)
  assert exp_fit["fitted_j"] == 30                          # capped at j_max
  power_fit = rs.spectrum_fits(j ** -3.0)
  assert power_fit["r2_power"] == pytest.approx(1.0) and power_fit["r2_exponential"] < 0.99
  floor_fit = rs.spectrum_fits(np.exp(-2.0 * (j - 1)), floor=1e-12)
  assert floor_fit["fitted_j"] == 14                        # exp(-2 * 13) >= 1e-12 > exp(-2 * 14)


def test_logistic_study_writes_its_summary_and_plot(tmp_path):
  summary = rs.run(rs.RankStudyConfig(study="logistic", t1_n=64, output_dir=str(tmp_path)))
  assert set(summary) == {"config", "logistic"}
  rows = summary["logistic"]["coords"]
  assert [r["q"] for r in rows] == [0, 1] and all(r["sv_ratio"][0] == 1.0 for r in rows)
  assert all(np.all(np.diff(r["sv_ratio"]) <= 0) for r in rows)
  assert json.load(open(tmp_path / "summary.json"))["logistic"]["d"] == 3
  assert os.path.exists(tmp_path / "logistic.png")

def test_appc_on_digits_writes_summary(tmp_path):
  cfg = rs.RankStudyConfig(study="appc", dataset="digits", data_dir=None, hidden=8, epochs=1, k=10,
                           num_coords=40, output_dir=str(tmp_path))
  summary = rs.run(cfg)["appc"]
  assert summary["sampled"] == 40 and summary["ranked"] + summary["zero_slices"] == 40
  assert 1 <= summary["median_rank"] <= 10 and max(summary["ranks"]) <= 10
  assert sum(summary["histogram"].values()) == summary["ranked"]
  saved = json.load(open(tmp_path / "summary.json"))
  assert saved["appc"]["p"] == 64 * 8 + 8 + 8 * 10 + 10
  assert os.path.exists(tmp_path / "rank_hist.png")


def test_appc_fig1_variants_two_layers_relu_and_rmsprop():
  # App. C Fig. 1 (h): two hidden layers of K units; (i): ReLU; (g): RMSprop. Parameter count and forward
  # pass by hand, and one training step against optax's RMSprop step on the same batch.
  net = rs.network("mlp", 8, (64,), 10, layers=2, activation="relu")
  params = net.init(jax.random.key(0))
  theta, _ = ravel_pytree(params)
  assert theta.size == 64 * 8 + 8 + 8 * 8 + 8 + 8 * 10 + 10
  x = jax.random.normal(jax.random.key(1), (3, 64))
  h = jnp.maximum(jnp.maximum(x @ params["w1"] + params["b1"], 0.0) @ params["w2"] + params["b2"], 0.0)
  np.testing.assert_allclose(net.apply(params, x), h @ params["w3"] + params["b3"], rtol=1e-5, atol=1e-6)
  one = rs.network("mlp", 8, (64,), 10)  # the default: one sigmoid layer, the keys of earlier versions
  p1 = one.init(jax.random.key(0))
  assert sorted(p1) == ["b1", "b2", "w1", "w2"]
  np.testing.assert_allclose(one.apply(p1, x), jax.nn.sigmoid(x @ p1["w1"] + p1["b1"]) @ p1["w2"] + p1["b2"],
                             rtol=1e-5, atol=1e-6)
  import optax
  xs, ys = np.asarray(x), np.array([0, 1, 2])
  cfg = rs.RankStudyConfig(hidden=8, epochs=1, batch_size=3, optimizer="rmsprop", lr=0.01)
  trained = rs.train(xs, ys, cfg, one)
  start = one.init(jax.random.fold_in(jax.random.key(cfg.seed), 0))
  g = jax.grad(lambda p: jnp.mean(optax.softmax_cross_entropy_with_integer_labels(one.apply(p, x), ys)))(start)
  opt = optax.rmsprop(0.01)
  upd, _ = opt.update(g, opt.init(start), start)
  for k in start:
    np.testing.assert_allclose(trained[k], optax.apply_updates(start, upd)[k], rtol=1e-5, atol=1e-6)
    assert not np.allclose(trained[k], start[k]) or k.startswith("b")


def test_app_c_cnn_has_the_papers_parameter_count():
  # specs/fedlrgd.md §3.1: p = 1120 + 14,440 + 1,536,150 + 1510 = 1,553,220 on CIFAR-10, which needs
  # both convolutions 'same' (a 'valid' second one gives 15 x 15 x 40 into the dense layer).
  net = rs.network("cnn", 0, (32, 32, 3), 10)
  theta, _ = ravel_pytree(net.init(jax.random.key(0)))
  assert theta.size == 1_553_220
  assert net.apply(net.init(jax.random.key(0)), jnp.zeros((2, 32, 32, 3))).shape == (2, 10)
  with pytest.raises(ValueError, match="model cnn needs image inputs"):
    rs.network("cnn", 0, (64,), 10)


def test_appc_cnn_on_tiny_cifar10(tmp_path):
  from tests.data.test_cifar10 import make_cifar_dir
  make_cifar_dir(tmp_path / "cifar-10-batches-bin")
  cfg = rs.RankStudyConfig(study="appc", dataset="cifar10", data_dir=str(tmp_path), model="cnn", epochs=1,
                           batch_size=5, k=3, num_coords=20, threshold=0.0, output_dir=str(tmp_path / "out"))
  s = rs.run(cfg)["appc"]
  assert s["model"] == "cnn" and s["p"] == 1_553_220 and s["sampled"] == 20
  assert s["ranked"] + s["zero_slices"] == 20 and 1 <= s["max_rank"] <= 3  # a 3 x 3 slice (3 test images) has rank <= 3
  assert (tmp_path / "out" / "rank_hist.png").exists()


def _run(module, *args):
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, env=env, capture_output=True,
                        text=True, timeout=300)


@pytest.mark.parametrize("module, args, flag", [
    ("experiments.fedlrgd.suite", ["--ranks=0,4"], "--ranks"),
    ("experiments.run", ["--task=logistic_soft", "--algorithm=fedlrgd", "--rank=40", "--max_rank=32"], "--rank"),
    ("experiments.fedlrgd.rank_study", ["--model=rnn"], "--model"),
    ("experiments.fedlrgd.rank_study", ["--optimizer=sgd"], "--optimizer"),
    ("experiments.fedlrgd.rank_study", ["--activation=tanh"], "--activation"),
    ("experiments.fedlrgd.rank_study", ["--study=appc", "--dataset=digits", "--k=5000"], "--k"),
])
def test_bad_flags_exit_2(module, args, flag, tmp_path):
  proc = _run(module, *args, f"--output_dir={tmp_path}")
  lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
  assert proc.returncode == 2 and len(lines) == 1 and flag in lines[0], proc.stderr


def test_bad_configurations_raise_naming_the_flag():
  from fedsim import algorithms
  from fedsim.core.errors import ConfigError
  from tests.conftest import digits_task
  with pytest.raises(ConfigError, match="--study"):
    rs.validate(rs.RankStudyConfig(study="histo"))
  with pytest.raises(ConfigError, match="--t1_n"):
    rs.validate(rs.RankStudyConfig(t1_n=32))
  with pytest.raises(ValueError, match="server data"):   # experiments.run turns it into --algorithm
    algorithms.build("fedlrgd", digits_task(3))


@pytest.mark.slow  # long; .ci/run runs it (pytest -m slow)
def test_suite_fidelity_smoke(tmp_path):
  proc = _run("experiments.fedlrgd.suite", "--study=fidelity", "--seeds=2", "--ranks=2,8", "--rounds=30",
              "--num_clients=10", "--samples_per_client=8", "--num_thetas=4", f"--output_dir={tmp_path}")
  assert proc.returncode == 0, proc.stderr[-2000:]
  rows = json.load(open(tmp_path / "results.json"))["rows"]
  assert [r["r"] for r in rows] == [2, 8]
  assert rows[1]["median_of_median_rel_err"] < rows[0]["median_of_median_rel_err"]
  assert rows[1]["max_anchor_rel_err"] < 1e-8


@pytest.mark.slow  # long; .ci/run runs it (pytest -m slow)
def test_crossover_same_start_and_same_instances():
  """S5: FedLRGD and FedAve start from the engine's theta^(0) and, for every rank r, are
  scored on the same instance: r server samples, n = m s + r (eq. (3)), that instance's F_*."""
  from experiments.fedlrgd import suite as fs
  from fedsim import algorithms
  from fedsim.core import rng
  from fedsim.tasks.logistic_soft import make_smooth_erm_task, with_server_size
  m, s, ranks, seed = 3, 4, [2, 4], 5
  with jax.enable_x64(True):
    task = make_smooth_erm_task("logistic_soft", num_clients=m, samples_per_client=s, num_features=2,
                                server_samples=4, max_rank=4, mu=0.1, feature_map="holder", holder_eta=2.5,
                                raw_dim=1, seed=0)
    res = fs.crossover_runs(task, ranks, seed, 3, {"b2": dict(local_steps=2, lr_schedule="constant", lr=0.5)},
                            2, 1, 0.1)
    theta0 = np.asarray(algorithms.build("fedave", task).init(*rng.init_keys(jax.random.key(seed))).theta)
    f_stars = [with_server_size(task, r).info["F_star"] for r in ranks]
  np.testing.assert_array_equal(res["theta0"], theta0)          # FedLRGD starts where FedAve does
  d = jax.tree_util.tree_map(np.asarray, task.data)
  recs = res["fedave"]["b2"]
  assert [r["round"] for r in recs] == [0, 1, 2]
  for j, r in enumerate(ranks):
    x = np.concatenate([d["server"]["x"][:r], d["clients"]["x"].reshape(-1, 2)])
    y = np.concatenate([d["server"]["y"][:r], d["clients"]["y"].reshape(-1)])
    assert len(y) == m * s + r
    z = x @ theta0
    gap0 = np.mean(np.logaddexp(0, z) - y * z) + 0.05 * theta0 @ theta0 - f_stars[j]   # eq. (67)
    np.testing.assert_allclose(res["fedlrgd_gaps"][j, 0], gap0, rtol=1e-10)
    np.testing.assert_allclose(recs[0]["gaps"][j], gap0, rtol=1e-10)
  # The instances differ (r = 2 vs 4 server samples), and FedAve's gaps move with its iterates.
  assert abs(recs[0]["gaps"][0] - recs[0]["gaps"][1]) > 1e-4
  assert recs[2]["gaps"][1] < recs[0]["gaps"][1]


def test_crossover_row_picks_cheapest_runs_on_fedlrgd_instance():
  from experiments.fedlrgd import suite as fs
  ranks, s, m, phi, eps = [2, 4], 5, 3, 10.0, 1e-3
  # FedLRGD reaches eps after 6 steps at r = 2 and 1 step at r = 4:
  # Gamma = r^2 + r s + r S + phi m r = 4 + 10 + 12 + 60 = 86 vs 16 + 20 + 4 + 120 = 160.
  gaps = np.array([[1, 1, 1, 1, 1, 1, 1e-4, 0], [1, 1e-4, 0, 0, 0, 0, 0, 0]], float)
  def rec(t, g2, g4):
    return {"round": t, "gaps": [g2, g4]}
  # FedAve on instance r = 2 reaches eps at epoch 4 (b = 1) or 2 (b = 40): T (b + phi m) = 124 vs 140;
  # on instance r = 4 it would be epoch 2 with b = 1 (the wrong instance gives 62).
  fedave = {(1, "L1"): [rec(0, 1, 1), rec(2, 1, 1e-4), rec(4, 1e-4, 0)],
            (40, "L1"): [rec(0, 1, 1), rec(2, 1e-4, 1)]}
  row = fs.crossover_row(gaps, fedave, ranks, s, m, phi, eps)
  assert row["fedlrgd"] == {"gamma": 86.0, "r": 2, "S": 6} and row["server_samples"] == 2
  assert row["fedave"] == {"gamma": 124.0, "b": 1, "T": 4, "step": "L1"}
  assert row["ratio"] == 86 / 124 and row["fedlrgd_wins"]
  # FedLRGD never reaches eps: FedAve is scored on the largest instance, ratio inf.
  none = fs.crossover_row(np.ones((2, 8)), fedave, ranks, s, m, phi, eps)
  assert none["fedlrgd"] is None and none["server_samples"] == 4 and none["ratio"] == np.inf
  assert none["fedave"] == {"gamma": 62.0, "b": 1, "T": 2, "step": "L1"}
