"""FFGB / FFGB.C / FFGB.L mathematics (seed 002; specs/ffgb.md §4.3, §7).

Closed-form limits use the ``scaled`` oracle (h = gamma phi exactly) on tabular
functions over a grid shared by every client (semi-heterogeneous, §4.3).
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedsim import algorithms
from fedsim.algorithms import ffgb
from fedsim.core import rng, simulate
from fedsim.tasks.functional import cache_view, make_tabular_task, mcshane

N, M, MU = 8, 12, 0.1
ROOT = jax.random.key(3)


def _grid_task(shift=0.0, labels=None, n=N, m=M, seed=0):
  base = np.linspace(0.0, 1.0, m)
  x = np.stack([base + shift * i / n for i in range(n)])[..., None]
  y = (np.random.default_rng(seed).normal(size=(n, m, 1)) if labels is None else labels(x))
  return make_tabular_task(x, y), x, y


def _errors(alg, task, T, target):
  """Relative ||f^t - target||^2 per round, all rounds in one lax.scan."""
  k_rounds = rng.stream(ROOT, "rounds")

  @jax.jit
  def run(state, data):
    def body(s, r):
      s, _ = alg.round(s, rng.round_key(k_rounds, r), data)
      return s, jnp.sum((s.f_train - target) ** 2)
    return jax.lax.scan(body, state, jnp.arange(T))
  state, errs = run(alg.init(*rng.init_keys(ROOT)), task.data)
  return state, np.asarray(errs) / float(jnp.sum(target ** 2))


def _theory(name, task, **kw):
  hp = dict(weak_learner="scaled", gamma=1.0, mu=MU, local_steps=5, eta_schedule="theory",
            eta_cap=1.0 / (1.0 + MU))
  hp.update(kw)
  return algorithms.build(name, task, **hp)


def test_semi_heterogeneous_square_loss_converges_to_mean_over_one_plus_mu():
  # §7.1: f* = mean_i ybar_i / (1 + mu); error <= 1e-3 of the initial (f^0 = 0) by T = 2000.
  task, _, y = _grid_task()
  fstar = jnp.broadcast_to(y.mean(0) / (1 + MU), y.shape)
  _, errs = _errors(_theory("ffgb", task), task, 2000, fstar)
  assert errs[-1] <= 1e-3
  # Thm 3.1 rate O(1/(KT)) or faster: with square loss and an exact oracle the local
  # map is affine in ybar_i with client-independent coefficients, so there is no
  # client drift and the decay is geometric (steeper than any power law): check
  # the log-log slope over the first rounds with a small step cap is <= -1.
  _, slow = _errors(_theory("ffgb", task, eta_cap=0.01, local_steps=1), task, 400, fstar)
  ts = np.array([50, 100, 200, 400])
  slope = np.polyfit(np.log(ts), np.log(slow[ts - 1]), 1)[0]
  assert slope <= -1.0, slope


@pytest.mark.slow  # long; .ci/run runs it (pytest -m slow)
def test_no_residual_limit_is_biased_and_residual_error_falls_with_k():
  # §4.3: without the residual, gamma (f - ybar) + mu f = 0  =>  f = gamma ybar / (gamma + mu).
  task, _, y = _grid_task()
  ybar = y.mean(0)
  g = 0.5
  lim = jnp.broadcast_to(g * ybar / (g + MU), y.shape)
  for K in (1, 5):
    _, errs = _errors(_theory("ffgb_nores", task, gamma=g, local_steps=K), task, 3000, lim)
    assert math.sqrt(errs[-1]) <= 1e-3
  fstar = jnp.broadcast_to(ybar / (1 + MU), y.shape)
  finals = [_errors(_theory("ffgb", task, gamma=g, local_steps=K), task, 300, fstar)[1][-1]
            for K in (1, 2, 5, 10, 20)]
  assert all(a > b for a, b in zip(finals, finals[1:])), finals
  _, nores = _errors(_theory("ffgb_nores", task, gamma=g, local_steps=20), task, 300, fstar)
  assert finals[-1] < 0.1 * nores[-1]


@pytest.mark.parametrize("gamma", [0.3, 0.7])
def test_lemma_d_bounds_hold_and_ffgb_c_clips_are_inactive_on_support(gamma):
  # Lemmas D.1-D.2 (CE, G = sqrt 2): |Delta| <= (1-g)G/g, |h| <= (2-g)G/g, |g| <= 2G/(g mu).
  from fedsim.data import load_digits
  ds = load_digits()
  n = 6
  xs = np.asarray(ds.x_train[:n * 20]).reshape(n, 20, -1)
  ys = np.asarray(ds.y_train[:n * 20]).reshape(n, 20)
  base = make_tabular_task(xs, np.zeros((n, 20, 10)))
  data = {"clients": {"x": jnp.asarray(xs), "y": jnp.asarray(ys), "mask": jnp.ones((n, 20), bool)},
          "sizes": jnp.full((n,), 20, jnp.int32), "eval": {}}
  import dataclasses
  task = cache_view(dataclasses.replace(base, data=data, info={"loss": "ce", "num_outputs": 10}))
  G = math.sqrt(2)
  cfg = ffgb.FFGBConfig(weak_learner="scaled", gamma=gamma, mu=MU, local_steps=4, eta_schedule="theory")
  oracle = ffgb.build_oracle(task, cfg)
  client = jax.jit(ffgb.make_client_round(task, cfg, "ffgb_c", oracle))
  plain = jax.jit(ffgb.make_client_round(task, cfg, "ffgb", oracle))
  alg = ffgb.make_ffgb(task, cfg, "ffgb_c")
  state = alg.init(*rng.init_keys(ROOT))
  rnd = jax.jit(alg.round)
  for t in range(6):
    etas = ffgb.step_sizes(cfg, "ffgb_c", t)
    assert float(jnp.max(etas * MU)) <= 1.0 + 1e-6
    for i in range(n):
      args = (jax.random.key(i), data["clients"]["x"][i], data["clients"]["y"][i],
              data["clients"]["mask"][i], jnp.int32(20), state.f_train[i], etas)
      _, aux = client(*args)
      _, aux_plain = plain(*args)
      tol = 1e-5
      assert float(jnp.max(jnp.abs(aux["delta"]))) <= (1 - gamma) * G / gamma + tol
      assert float(jnp.max(jnp.abs(aux["h"]))) <= (2 - gamma) * G / gamma + tol
      assert float(jnp.max(jnp.abs(aux["g"]))) <= 2 * G / (gamma * MU) + tol
      assert float(jnp.max(aux["clip_change"])) == 0.0
      np.testing.assert_array_equal(np.asarray(aux["g"]), np.asarray(aux_plain["g"]))
    state, _ = rnd(state, rng.round_key(rng.stream(ROOT, "rounds"), t), task.data)


def test_ffgb_l_sign_fix_one_shot_and_interpolation():
  task, x, y = _grid_task(labels=lambda x: np.sin(3 * x) + 0.1 * np.arange(N)[:, None, None])
  fstar = jnp.broadcast_to(y.mean(0), y.shape)  # problem (14), shared points: f* = mean_i y_i
  hp = dict(weak_learner="scaled", gamma=1.0, local_steps=3, eta_schedule="theory")
  s_rounds, errs = _errors(algorithms.build("ffgb_l", task, **hp), task, 400, fstar)
  assert errs[-1] < 1e-3
  _, errs_printed = _errors(algorithms.build("ffgb_l", task, ffgb_l_query="printed", **hp), task, 400, fstar)
  assert errs_printed[-1] > 1.0  # Alg. 4 as printed (Delta - u) runs away from f*
  # Remark 3.1: one-shot (learners of round 0 reused) == T-round mode, deterministic oracle.
  s_one, _ = _errors(algorithms.build("ffgb_l", task, one_shot=True, **hp), task, 400, fstar)
  np.testing.assert_allclose(np.asarray(s_one.f_train), np.asarray(s_rounds.f_train), rtol=1e-5, atol=1e-6)
  # eq. (17): u_i interpolates L-Lipschitz data.
  xi = jnp.asarray(x[0])
  yi = jnp.asarray(np.sin(3 * x[0]))
  np.testing.assert_allclose(np.asarray(mcshane(xi, yi, 3.0, xi)), np.asarray(yi), atol=1e-6)


def test_ffgb_l_radius_grows_with_feature_shift_and_is_zero_without():
  hp = dict(weak_learner="scaled", gamma=1.0, local_steps=3, eta_schedule="theory")
  losses = []
  # Shifts below half the grid spacing, so the 1-NN extension keeps the same neighbours.
  for shift in (0.0, 0.01, 0.02, 0.04):
    task, x, y = _grid_task(shift=shift, labels=lambda x: np.sin(3 * x))
    _, rec = simulate(algorithms.build("ffgb_l", task, **hp), task, 300, 300, ROOT)
    losses.append(rec[-1]["objective"])
  assert losses[0] < 1e-6
  assert all(a <= b + 1e-7 for a, b in zip(losses, losses[1:])), losses


@pytest.mark.slow  # long; .ci/run runs it (pytest -m slow)
def test_partial_participation_full_equals_and_subsets_are_unbiased():
  task, _, y = _grid_task()
  hp = dict(weak_learner="scaled", gamma=0.5, mu=MU, local_steps=3, eta_schedule="theory",
            eta_cap=1 / (1 + MU))
  full = algorithms.build("ffgb", task, **hp)
  same = algorithms.build("ffgb", task, clients_per_round=N, **hp)
  k0 = rng.round_key(rng.stream(ROOT, "rounds"), 0)
  s0 = full.init(*rng.init_keys(ROOT))
  s0 = s0._replace(f_train=jnp.asarray(y) * 0.3)
  a, _ = full.round(s0, k0, task.data)
  b, _ = same.round(s0, k0, task.data)
  np.testing.assert_allclose(np.asarray(a.f_train), np.asarray(b.f_train), rtol=1e-6, atol=1e-7)
  part = algorithms.build("ffgb", task, clients_per_round=3, **hp)
  draws = jax.jit(jax.vmap(lambda k: part.round(s0, k, task.data)[0].f_train))(
      jax.random.split(jax.random.key(11), 2000))
  mean, se = np.asarray(draws.mean(0)), np.asarray(draws.std(0)) / math.sqrt(2000)
  # The state is shared by every client's row, so compare where the spread is non-zero.
  assert np.all(np.abs(mean - np.asarray(a.f_train)) <= 3 * se + 1e-5)


@pytest.mark.slow  # long; .ci/run runs it (pytest -m slow)
def test_learners_written_per_round_reload_to_the_test_cache(tmp_path):
  rs = np.random.default_rng(1)
  x = rs.uniform(size=(4, 10, 2))
  y = np.sin(x.sum(-1, keepdims=True) * 3)
  xt = rs.uniform(size=(7, 2))
  task = make_tabular_task(x, y, x_test=xt, y_test=np.zeros((7, 1)))
  for variant in ("ffgb", "ffgb_c"):
    cfg = ffgb.FFGBConfig(weak_learner="rf_ridge", rf_features=32, local_steps=2, eta0=1.0,
                          mu=0.5, gamma=0.9, store_learners=2)
    alg = ffgb.make_ffgb(task, cfg, variant)
    out = tmp_path / variant
    alg = ffgb.attach_learner_writer(alg, str(out), cfg, variant)
    state, _ = simulate(alg, task, 5, 2, ROOT)
    assert len(list(out.glob("round_*.npz"))) == 5
    pred = ffgb.predict_saved(str(out), task, cfg, jnp.asarray(xt, jnp.float32))
    np.testing.assert_allclose(np.asarray(pred), np.asarray(alg.solution(state)["test"]),
                               rtol=1e-4, atol=1e-5)


def test_step_size_schedules():
  cfg = ffgb.FFGBConfig(eta0=20.0, local_steps=2)
  np.testing.assert_allclose(ffgb.step_sizes(cfg, "ffgb", 3), 20.0 / (6 + np.array([1, 2]) + 1))
  code = cfg.replace(eta_schedule="code", eta_decay_p=0.5) if hasattr(cfg, "replace") else \
      ffgb.FFGBConfig(eta0=20.0, local_steps=2, eta_schedule="code", eta_decay_p=0.5)
  np.testing.assert_allclose(ffgb.step_sizes(code, "ffgb", 3), 20.0 / (4 * 2 + np.array([0, 1]) + 1) ** 0.5,
                             rtol=1e-6)
  th = ffgb.FFGBConfig(mu=0.5, local_steps=2, eta_schedule="theory")
  # 4/(mu (k+1)) = 4, 2.67 for k = 1, 2, both clamped to mu*eta <= 1 (specs §2.3 pitfall).
  np.testing.assert_allclose(ffgb.step_sizes(th, "ffgb_c", 0), [2.0, 2.0], rtol=1e-6)
  rho, w = ffgb.combine_weights(jnp.array([0.3, 0.2]), 0.5)
  np.testing.assert_allclose([rho, *w], [0.85 * 0.9, -0.3 * 0.9, -0.2], rtol=1e-6)


# ------------------------------------------------------------------ rf_ridge oracle (issue 15)
def _rf_reference(key, x, phi, n, D, bw, lam):
  """beta = (F^T F + lam n I)^{-1} F^T phi on the n real rows (float64), with
  F = sqrt(2/D) cos(x W / (bw sqrt d) + b), W ~ N(0, I), b ~ U[0, 2 pi) drawn as
  documented in rf_ridge_oracle: (kw, kb) = split(key)."""
  d = x.shape[1]
  kw, kb = jax.random.split(key)
  w = np.asarray(jax.random.normal(kw, (d, D)), np.float64) / (bw * np.sqrt(d))
  b = np.asarray(jax.random.uniform(kb, (D,), maxval=2 * np.pi), np.float64)
  def feats(z):
    return np.sqrt(2.0 / D) * np.cos(np.asarray(z, np.float64) @ w + b)
  f = feats(x[:n])
  beta = np.linalg.solve(f.T @ f + lam * n * np.eye(D), f.T @ np.asarray(phi[:n], np.float64))
  return beta, feats


def test_rf_ridge_is_the_closed_form_ridge_on_features_drawn_from_the_call_key():
  from fedsim.models.weak_learners import make_oracle
  rs = np.random.default_rng(4)
  D, bw, lam, n = 16, 0.7, 1e-2, 7
  x = jnp.asarray(rs.uniform(size=(10, 3)), jnp.float32)
  phi = jnp.asarray(rs.normal(size=(10, 2)), jnp.float32).at[n:].set(1e3)  # garbage padding
  mask = jnp.arange(10) < n
  o = make_oracle("rf_ridge", num_outputs=2, feature_shape=(3,), rf_features=D, rf_bandwidth=bw, ridge=lam)
  k1, k2 = jax.random.key(11), jax.random.key(12)
  fit, apply = jax.jit(o.fit), jax.jit(o.apply)
  p1 = fit(k1, x, phi, mask, jnp.int32(n))
  beta, feats = _rf_reference(k1, np.asarray(x), np.asarray(phi), n, D, bw, lam)
  np.testing.assert_allclose(np.asarray(p1["beta"]), beta, rtol=2e-3, atol=2e-4 * np.abs(beta).max())
  xq = rs.uniform(size=(5, 3))
  np.testing.assert_allclose(np.asarray(apply(p1, jnp.asarray(xq, jnp.float32))), feats(xq) @ beta,
                             rtol=1e-3, atol=1e-4)
  # Another key draws other features (and so another learner); a fixed seed does not.
  p2 = fit(k2, x, phi, mask, jnp.int32(n))
  assert np.max(np.abs(np.asarray(apply(p1, x)) - np.asarray(apply(p2, x)))) > 1e-2
  fixed = jax.jit(make_oracle("rf_ridge", num_outputs=2, feature_shape=(3,), rf_features=D,
                              rf_bandwidth=bw, ridge=lam, seed=5).fit)
  np.testing.assert_array_equal(np.asarray(fixed(k1, x, phi, mask, jnp.int32(n))["beta"]),
                                np.asarray(fixed(k2, x, phi, mask, jnp.int32(n))["beta"]))


def test_rf_ridge_features_follow_the_run_seed():
  # Full participation and a deterministic fit: before issue 15 every seed gave the
  # same f^1 (features from seed 0); now the features come from the run's keys.
  rs = np.random.default_rng(1)
  x = rs.uniform(size=(3, 6, 2))
  y = np.sin(3 * x.sum(-1, keepdims=True))
  task = make_tabular_task(x, y)
  alg = algorithms.build("ffgb", task, weak_learner="rf_ridge", rf_features=8, local_steps=1,
                         eta0=1.0, clients_per_round=3)
  step = jax.jit(alg.round)

  def f1(seed):
    root = jax.random.key(seed)
    s, _ = step(alg.init(*rng.init_keys(root)), rng.round_key(rng.stream(root, "rounds"), 0), task.data)
    return np.asarray(s.f_train)

  a, b, a2 = f1(0), f1(1), f1(0)
  np.testing.assert_array_equal(a, a2)
  assert np.max(np.abs(a - b)) > 1e-3


RF8_SCRIPT = """
import json, jax, numpy as np
from fedsim import algorithms
from fedsim.core import rng
from fedsim.core.sharding import client_mesh, shard_task
from fedsim.tasks.functional import make_tabular_task
assert jax.device_count() == 8, jax.devices()
rs = np.random.default_rng(0)
x = rs.uniform(size=(8, 10, 2)); y = np.sin(3 * x.sum(-1, keepdims=True))
task = shard_task(make_tabular_task(x, y), client_mesh(8))
alg = algorithms.build("ffgb", task, weak_learner="rf_ridge", rf_features=32, local_steps=2,
                       eta0=1.0, clients_per_round=8)
root = jax.random.key(0)
s, _ = jax.jit(alg.round)(alg.init(*rng.init_keys(root)), rng.round_key(rng.stream(root, "rounds"), 0),
                          task.data)
print(json.dumps(np.asarray(s.f_train).tolist()))
"""


@pytest.mark.slow
def test_rf_ridge_runs_on_eight_host_devices():
  # jnp.linalg.solve's batched LAPACK LU deadlocked here (3 of 3 tries at D = 32);
  # the fit now solves by Cholesky in plain XLA ops (weak_learners.spd_solve).
  import json
  import os
  import subprocess
  import sys
  repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu")
  proc = subprocess.run([sys.executable, "-c", RF8_SCRIPT], cwd=repo, env=env, capture_output=True,
                        text=True, timeout=240)
  assert proc.returncode == 0, proc.stderr[-3000:]
  got = np.asarray(json.loads(proc.stdout.strip().splitlines()[-1]))
  # The same round on this process's single device.
  rs = np.random.default_rng(0)
  x = rs.uniform(size=(8, 10, 2))
  y = np.sin(3 * x.sum(-1, keepdims=True))
  task = make_tabular_task(x, y)
  alg = algorithms.build("ffgb", task, weak_learner="rf_ridge", rf_features=32, local_steps=2,
                         eta0=1.0, clients_per_round=8)
  root = jax.random.key(0)
  s, _ = jax.jit(alg.round)(alg.init(*rng.init_keys(root)), rng.round_key(rng.stream(root, "rounds"), 0),
                            task.data)
  np.testing.assert_allclose(got, np.asarray(s.f_train), rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------ --save_learners (issue 15)
def test_save_learners_writes_from_process_zero_only(tmp_path, monkeypatch):
  task, _, _ = _grid_task(n=3, m=4)
  cfg = ffgb.FFGBConfig(weak_learner="scaled", gamma=0.5, local_steps=1, eta0=1.0, store_learners=2)
  for proc, expect in ((1, []), (0, ["round_00000.npz", "round_00001.npz"])):
    monkeypatch.setattr(jax, "process_index", lambda *a, _p=proc, **k: _p)
    out = tmp_path / f"proc{proc}"
    alg = ffgb.attach_learner_writer(ffgb.make_ffgb(task, cfg, "ffgb"), str(out), cfg, "ffgb")
    simulate(alg, task, 2, 1, ROOT)
    assert sorted(p.name for p in out.glob("*")) == expect, proc
    assert out.exists() == (proc == 0)


# ------------------------------------------------------------------ the authors' code preset (issue 15)
def test_code_preset_has_the_authors_code_settings():
  # shenzebang/fed_functional_gradient @ f555c72, read with `git show f555c72:<file>`:
  code = {
      "eta_schedule": "code",  # utils.py l. 236-239: step_size_0 / ((n_round + 1) * local_steps + k + 1) ** p
      "eta0": 20.0,            # script/mnist_batch_ffgd.sh l. 42: --step_size_0 20
      "eta_decay_p": 1.0,      # script/mnist_batch_ffgd.sh l. 43: --p 1
      "local_steps": 2,        # script/mnist_batch_ffgd.sh l. 43: --worker_local_steps 2
      "oracle_batch": 128,     # script/mnist_batch_ffgd.sh l. 43: --oracle_mb_size 128
      "oracle_lr": 5e-3,       # script/mnist_batch_ffgd.sh l. 44: --oracle_step_size 5e-3
      "oracle_steps": 2000,    # script/mnist_batch_ffgd.sh l. 44: --oracle_local_steps 2000
      "mu": 0.0,               # core/ffgd_joblib.py l. 46-48: f_data - step * g_data, no mu term
      "weak_learner": "mlp",   # utils.py l. 344-345: get_init_weak_learner(..., type="MLP") on mnist
      "mlp_init": "faithful",  # utils.py l. 151, 154, 157: nn.init.normal_(weight, 0.0, 1 / fan_in)
      "mlp_output_act": True,  # utils.py l. 173: x = self.activation(self.fc3(x))
      "oracle_dedup": True,    # utils.py l. 191: torch.unique(torch.randint(0, n, size=(mb_size,)))
  }
  for name, variant in (("ffgb_code", "ffgb"), ("ffgb_nores_code", "ffgb_nores")):
    cfg = algorithms.default_config(name)
    assert {k: cfg[k] for k in code} == code, name
    task, _, _ = _grid_task(n=2, m=4)
    assert ffgb.CODE_PRESETS[name] == variant
    assert algorithms.build(name, task, oracle_steps=3).hparams.oracle_steps == 3  # flags still win
  # The paper's defaults differ where the code does (App. B.3: 1000 Adam steps, plain init).
  paper = algorithms.default_config("ffgb")
  assert (paper["eta_schedule"], paper["oracle_steps"], paper["mlp_init"], paper["mlp_output_act"],
          paper["oracle_dedup"]) == ("paper", 1000, "default", False, False)
  # utils.py l. 239 with k = 0..K-1 (fedsim's k = 1..K): 20 / ((t + 1) 2 + k + 1).
  c = ffgb.FFGBConfig(**{k: v for k, v in algorithms.default_config("ffgb_code").items()})
  for t in (0, 3):
    np.testing.assert_allclose(ffgb.step_sizes(c, "ffgb", t), [20 / ((t + 1) * 2 + k + 1) for k in (0, 1)],
                               rtol=1e-6)


def _np_mlp(params, x, output_act):
  def lrelu(z):
    return np.where(z > 0, z, 0.01 * z)
  p = params["params"]
  h = np.asarray(x, np.float64)
  for j in range(3):
    h = h @ np.asarray(p[f"Dense_{j}"]["kernel"], np.float64) + np.asarray(p[f"Dense_{j}"]["bias"])
    if j < 2 or output_act:
      h = lrelu(h)
  return h


def _untrained(cfg):
  """``cfg`` with oracle_steps = 0 (the initial learner), below the accepted range (>= 1), set
  past the dataclass's validation: these tests inspect the oracle's initialisation."""
  object.__setattr__(cfg, "oracle_steps", 0)
  return cfg


def test_code_preset_oracle_init_output_activation_and_dedup(monkeypatch):
  from fedsim.models import weak_learners as wl
  rs = np.random.default_rng(0)
  x = rs.normal(size=(2, 50, 64)).astype(np.float32)  # digits-sized inputs (MNIST: 784)
  task = make_tabular_task(x, rs.integers(0, 10, size=(2, 50)), loss="ce", num_outputs=10)
  cfg = _untrained(ffgb.FFGBConfig(**algorithms.default_config("ffgb_code")))
  seen = []
  monkeypatch.setattr(wl, "minibatch_mse", lambda *a, **k: seen.append(a[3]) or jnp.mean((a[0] - a[1]) ** 2))
  oracle = ffgb.build_oracle(task, cfg)
  x0 = jnp.asarray(x[0])
  params = jax.jit(oracle.fit)(jax.random.key(0), x0, jnp.zeros((50, 10)), jnp.ones(50, bool), jnp.int32(50))
  assert seen and all(d is True for d in seen)  # the preset's oracle de-duplicates (traced once)
  p = params["params"]
  for j, fan_in in enumerate((64, 32, 32)):  # weight ~ N(0, (1/fan_in)^2), bias ~ U(+-1/sqrt(fan_in))
    w, b = np.asarray(p[f"Dense_{j}"]["kernel"]), np.asarray(p[f"Dense_{j}"]["bias"])
    assert abs(w.std() * fan_in - 1) < 0.15 and abs(w.mean()) * fan_in < 0.1, (j, w.std() * fan_in)
    assert np.all(np.abs(b) <= 1 / np.sqrt(fan_in)) and b.std() * np.sqrt(3 * fan_in) > 0.5
  xq = rs.normal(size=(6, 64)).astype(np.float32)
  np.testing.assert_allclose(np.asarray(oracle.apply(params, xq)), _np_mlp(params, xq, True),
                             rtol=1e-4, atol=1e-6)
  paper = ffgb.build_oracle(task, _untrained(ffgb.FFGBConfig()))
  pp = jax.jit(paper.fit)(jax.random.key(0), x0, jnp.zeros((50, 10)), jnp.ones(50, bool), jnp.int32(50))
  np.testing.assert_allclose(np.asarray(paper.apply(pp, xq)), _np_mlp(pp, xq, False), rtol=1e-4, atol=1e-6)


def test_dedup_minibatch_mse_is_the_mean_over_distinct_rows():
  from fedsim.models.weak_learners import first_occurrence, minibatch_mse
  idx = jnp.array([3, 1, 3, 0, 1, 3])
  np.testing.assert_array_equal(np.asarray(first_occurrence(idx)), [1, 1, 0, 1, 0, 0])
  rs = np.random.default_rng(0)
  pred, target = rs.normal(size=(4, 2)), rs.normal(size=(4, 2))
  pr, tg = jnp.asarray(pred[np.asarray(idx)]), jnp.asarray(target[np.asarray(idx)])
  uniq = np.unique(np.asarray(idx))  # torch.unique(index) rows, nn.MSELoss mean
  np.testing.assert_allclose(float(minibatch_mse(pr, tg, idx, dedup=True)),
                             np.mean((pred[uniq] - target[uniq]) ** 2), rtol=1e-6)
  np.testing.assert_allclose(float(minibatch_mse(pr, tg, idx)),
                             np.mean((pred[np.asarray(idx)] - target[np.asarray(idx)]) ** 2), rtol=1e-6)


def test_code_preset_flags_are_reachable_from_the_cli():
  from experiments import common
  name, hp = common.parse_spec("ffgb:mlp_output_act=true:oracle_dedup=0:mlp_init=faithful")
  assert (name, hp) == ("ffgb", {"mlp_output_act": True, "oracle_dedup": False, "mlp_init": "faithful"})
  assert common.HPARAMS["mlp_output_act"][0] is bool and common.HPARAMS["oracle_dedup"][0] is bool
  assert {"ffgb_code", "ffgb_nores_code"} <= set(common.FFGB_FAMILY)
  with pytest.raises(Exception, match="mlp_output_act"):
    common.parse_spec("ffgb:mlp_output_act=maybe")
