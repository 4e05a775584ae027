"""FFGB.C (Alg. 5) and FFGB.L (Alg. 4, sign-fixed) against NumPy references (seed 002;
specs/ffgb.md §2.3-2.5).

One round on a tiny case (N = 3 clients, m = 2 sampled without replacement, K = 2,
round t = 2) with the ``scaled`` oracle h = gamma phi, whose off-support extension
is the 1-nearest-neighbour value, so every quantity has a closed form. The
references write the paper's equations out:

  Alg. 5 (FFGB.C): phi = Delta + gradR_i[g], h = gamma phi,
    g <- g - eta_k (Pi_{G2}(h) + mu g), Delta <- Pi_{G1}(phi - h),
    G1 = (1-gamma)G/gamma, G2 = (2-gamma)G/gamma, eta_k = 4/(mu(tK+k+1)) (Thm 3.2);
    the server returns Pi_B(f^T).
  Alg. 4 (FFGB.L): phi = u_i - Delta, h = gamma phi, g <- (1-eta) g + eta h,
    Delta <- Delta - u_i + h, eta_k = 4/(tK+k+1) (Thm 3.3, mu = 1).
  Alg. 1 / App. F: f^{t+1} = (1/m) sum_{i in S} g_i^{K+1} as functions.
"""

import jax
import jax.numpy as jnp
import numpy as np

from fedsim import algorithms
from fedsim.algorithms import ffgb
from fedsim.core import rng
from fedsim.models.weak_learners import WeakOracle
from fedsim.tasks.functional import make_tabular_task

N, M, K, m, T0 = 3, 4, 2, 2, 2
ROOT = jax.random.key(7)
# Client i holds x = i/10 + (0, .3, .6, .9): the nearest neighbours are unique.
X = np.stack([i / 10 + np.array([0.0, 0.3, 0.6, 0.9]) for i in range(N)])[..., None]
XT = np.array([[0.05], [0.52], [1.04], [-0.2]])


def _nn(xq, xi):
  """Index of the nearest point of xi (M, 1) for each query (B, 1)."""
  return np.argmin(np.abs(xq[:, None, 0] - xi[None, :, 0]), 1)


def _lip_np(v, x):
  """max_{j != j'} ||v_j - v_j'|| / ||x_j - x_j'|| over distinct points."""
  out = 0.0
  for a in range(len(x)):
    for b in range(len(x)):
      d = np.linalg.norm(x[a] - x[b])
      if d > 0:
        out = max(out, np.linalg.norm(v[a] - v[b]) / d)
  return out


def _one_round(name, task, f0, ft0, **hp):
  alg = algorithms.build(name, task, weak_learner="scaled", local_steps=K, clients_per_round=m,
                         eta_schedule="theory", store_learners=1, **hp)
  s0 = alg.init(*rng.init_keys(ROOT))
  s0 = s0._replace(t=jnp.int32(T0), f_train=jnp.asarray(f0, jnp.float32),
                   f_test=jnp.asarray(ft0, jnp.float32))
  s1, _ = jax.jit(alg.round)(s0, rng.round_key(rng.stream(ROOT, "rounds"), T0), task.data)
  ids = np.asarray(s1.store["ids"][0])
  assert len(set(ids.tolist())) == m and set(ids.tolist()) <= set(range(N))  # without replacement
  return alg, s1, ids


def test_ffgb_c_one_round_matches_numpy_alg5():
  rs = np.random.default_rng(0)
  C, gam, mu, G, B = 2, 0.6, 0.1, 0.15, 1.0
  y = rs.integers(0, C, size=(N, M))
  task = make_tabular_task(X, y, x_test=XT, y_test=np.zeros(4, int), loss="ce", num_outputs=C)
  f0 = rs.normal(size=(N, M, C)) * 1.5
  ft0 = rs.normal(size=(4, C)) * 1.5
  alg, s1, ids = _one_round("ffgb_c", task, f0, ft0, gamma=gam, mu=mu, clip_G=G, clip_B=B)

  G1, G2 = (1 - gam) * G / gam, (2 - gam) * G / gam  # Thm 3.2
  eta = np.array([4.0 / (mu * (T0 * K + k + 1)) for k in (1, 2)])  # Thm 3.2 step, t = 2
  assert np.all(mu * eta <= 1)  # the mu*eta <= 1 clamp is inactive here
  def clipv(v, r):
    return np.clip(v, -r, r)
  x_all = X.reshape(N * M, 1)
  f_all0 = f0.reshape(N * M, C)
  phis, hs, pre_d, n_all_clip = {}, {}, [], 0
  g_next_all = np.zeros((N * M, C))
  g_next_test = np.zeros((4, C))
  for i in ids:
    g, d = f0[i].copy(), np.zeros((M, C))
    hk_all, hk_test = [], []
    for k in range(K):
      sm = np.exp(g) / np.exp(g).sum(-1, keepdims=True)
      phi = d + sm - np.eye(C)[y[i]]  # Alg. 5 line 4 query: Delta + gradR_i[g] (CE, eq. 6)
      h = gam * phi  # the scaled oracle on supp alpha_i
      g = g - eta[k] * (clipv(h, G2) + mu * g)  # Alg. 5 line 5
      pre_d.append(phi - h)
      d = clipv(phi - h, G1)  # Alg. 5 line 6
      phis.setdefault(i, []).append(phi)
      hs.setdefault(i, []).append(h)
      hk_all.append(h[_nn(x_all, X[i])])
      hk_test.append(h[_nn(XT, X[i])])  # 1-NN extension
    # g_i^{K+1} as a function: rho f^t + sum_k w_k Pi_G2(h_k), w_k = -eta_k prod_{k'>k}(1 - eta_k' mu)
    rho = np.prod(1 - eta * mu)
    w = np.array([-eta[0] * (1 - eta[1] * mu), -eta[1]])
    np.testing.assert_allclose(rho * f0[i] + sum(w[k] * clipv(hs[i][k], G2) for k in range(K)), g,
                               rtol=1e-5, atol=1e-6)
    g_next_all += (rho * f_all0 + sum(w[k] * clipv(hk_all[k], G2) for k in range(K))) / m
    g_next_test += (rho * ft0 + sum(w[k] * clipv(hk_test[k], G2) for k in range(K))) / m
    n_all_clip += sum(int(np.sum(np.abs(hk) > G2)) for hk in hk_all)
  # The clips act: on-support entries both above and below G1 / G2.
  h_on, d_on = np.concatenate([np.ravel(hs[i]) for i in ids]), np.concatenate([np.ravel(v) for v in pre_d])
  assert 0 < np.sum(np.abs(h_on) > G2) < h_on.size and 0 < np.sum(np.abs(d_on) > G1) < d_on.size
  np.testing.assert_allclose(np.asarray(s1.f_train).reshape(N * M, C), g_next_all, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(np.asarray(s1.f_test), g_next_test, rtol=1e-5, atol=1e-6)
  # Server output Pi_B(f) (Alg. 1 line 5 / Thm D.1): entries above B clipped, below untouched.
  sol = alg.solution(s1)
  assert 0 < np.sum(np.abs(g_next_all) > B) < g_next_all.size
  np.testing.assert_allclose(np.asarray(sol["train"]).reshape(N * M, C), clipv(g_next_all, B),
                             rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(np.asarray(sol["test"]), clipv(g_next_test, B), rtol=1e-5, atol=1e-6)
  # Metrics: how often each clip acts, and the Lipschitz / L-inf quality estimates.
  met = {k: float(v) for k, v in alg.metrics(s1).items()}
  np.testing.assert_allclose(met["clip_fraction_G2"], np.mean(np.abs(h_on) > G2), rtol=1e-6)
  np.testing.assert_allclose(met["clip_fraction_G1"], np.mean(np.abs(d_on) > G1), rtol=1e-6)
  np.testing.assert_allclose(met["clip_fraction_G2_all"], n_all_clip / (m * K * N * M * C), rtol=1e-6)
  n_b = np.sum(np.abs(g_next_all) > B) + np.sum(np.abs(g_next_test) > B)
  np.testing.assert_allclose(met["clip_fraction_B"], n_b / ((N * M + 4) * C), rtol=1e-6)
  ref_lip = max(_lip_np(hs[i][k], X[i]) for i in ids for k in range(K))
  ref_qlip = max(_lip_np(phis[i][k], X[i]) for i in ids for k in range(K))
  np.testing.assert_allclose(met["learner_lip"], ref_lip, rtol=1e-5)
  np.testing.assert_allclose(met["query_lip"], ref_qlip, rtol=1e-5)
  np.testing.assert_allclose(met["gamma_hat_inf_min"], gam, rtol=1e-5)  # ||h - phi|| = (1-g)||phi||


def test_ffgb_l_one_round_matches_numpy_alg4():
  rs = np.random.default_rng(1)
  gam = 0.7
  y = np.sin(3 * X) + 0.2 * np.arange(N)[:, None, None]
  task = make_tabular_task(X, y, x_test=XT, y_test=np.zeros((4, 1)))
  f0 = rs.normal(size=(N, M, 1))
  ft0 = rs.normal(size=(4, 1))
  alg, s1, ids = _one_round("ffgb_l", task, f0, ft0, gamma=gam)
  eta = np.array([min(4.0 / (T0 * K + k + 1), 1.0) for k in (1, 2)])  # Thm 3.3 (mu = 1), t = 2
  assert np.all(eta < 1)
  x_all = X.reshape(N * M, 1)
  nxt_all = np.zeros((N * M, 1))
  nxt_test = np.zeros((4, 1))
  lips = []
  for i in ids:
    g, d, u = f0[i].copy(), np.zeros((M, 1)), y[i]  # u_i = y on supp (eq. 17 interpolates)
    h_all, h_test = [], []
    for k in range(K):
      phi = u - d  # Alg. 4 line 4 (sign fix, specs §2.4)
      h = gam * phi
      g = (1 - eta[k]) * g + eta[k] * h  # line 5
      d = d - u + h  # line 6
      h_all.append(h[_nn(x_all, X[i])])
      h_test.append(h[_nn(XT, X[i])])
      lips.append(_lip_np(h, X[i]))
    rho = np.prod(1 - eta)
    w = np.array([eta[0] * (1 - eta[1]), eta[1]])
    np.testing.assert_allclose(rho * f0[i] + sum(w[k] * h_all[k][i * M:(i + 1) * M] for k in range(K)), g,
                               rtol=1e-5, atol=1e-6)
    nxt_all += (rho * f0.reshape(N * M, 1) + sum(w[k] * h_all[k] for k in range(K))) / m
    nxt_test += (rho * ft0 + sum(w[k] * h_test[k] for k in range(K))) / m
  np.testing.assert_allclose(np.asarray(s1.f_train).reshape(N * M, 1), nxt_all, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(np.asarray(s1.f_test), nxt_test, rtol=1e-5, atol=1e-6)
  met = {k: float(v) for k, v in alg.metrics(s1).items()}
  np.testing.assert_allclose(met["learner_lip"], max(lips), rtol=1e-5)
  f_lip = max(_lip_np(nxt_all[i * M:(i + 1) * M], X[i]) for i in range(N))
  np.testing.assert_allclose(met["f_lip"], f_lip, rtol=1e-5)


def _recording_oracle(d, C):
  """A Sobolev oracle whose learner is linear, h_k(x) = x W_k with W_k = mean(phi_k) P
  (P fixed), and whose params record the z and dphi it was called with."""
  P = jnp.arange(1.0, d * C + 1).reshape(d, C) / (d * C)

  def fit(key, x, phi, mask, n, z=None, dphi=None):
    return {"w": jnp.sum(jnp.where(mask[:, None], phi, 0.0)) / n * P, "z": z, "dphi": dphi}

  return WeakOracle("recording", fit, lambda p, xq: xq @ p["w"], sobolev=True)


def test_ffgb_l_wo_lip_query_gradient_is_closed_form():
  # specs §2.4-2.5: phi_k = k u_i - sum_{kappa<k} h^kappa, so
  # grad phi_k(z) = k grad u_i(z) - sum_{kappa<k} grad h^kappa(z), grad u_i from eq. 17 with L.
  rs = np.random.default_rng(2)
  d, C, Mi, L, Kl = 2, 2, 6, 2.5, 3
  xi = rs.uniform(size=(Mi, d))
  yi = rs.normal(size=(Mi, C)) * 0.3
  mask = np.arange(Mi) < 5
  task = make_tabular_task(xi[None], yi[None], mask=mask[None])
  def u(q):
    return np.min(yi[None, :5] + L * np.linalg.norm(q[:, None] - xi[None, :5], axis=-1)[..., None], 1)
  for query, sign in (("fixed", 1.0), ("printed", -1.0)):
    cfg = ffgb.FFGBConfig(weak_learner="wo_lip", local_steps=Kl, lip_L=L, sobolev_samples=5,
                          ffgb_l_query=query)
    client = jax.jit(ffgb.make_client_round(task, cfg, "ffgb_l", _recording_oracle(d, C)))
    th, _ = client(jax.random.key(3), jnp.asarray(xi, jnp.float32), jnp.asarray(yi, jnp.float32),
                   jnp.asarray(mask), jnp.int32(5), jnp.zeros((Mi, C)), jnp.full((Kl,), 0.5))
    z = np.asarray(th["z"], np.float64)
    assert np.all(z == z[0])  # one Monte-Carlo set per client round
    lo, hi = xi[:5].min(0), xi[:5].max(0)
    assert np.all((z[0] >= lo - 1e-6) & (z[0] <= hi + 1e-6))  # in the client's bounding box
    gu = np.stack([(u(z[0] + e) - u(z[0] - e)) / 2e-6 for e in np.eye(d) * 1e-6], -1)  # (S, C, d)
    W = np.asarray(th["w"], np.float64)  # grad_x h_k = W_k^T
    for k in range(Kl):
      ref = sign * ((k + 1) * gu - sum(W[j].T[None] for j in range(k)))
      np.testing.assert_allclose(np.asarray(th["dphi"][k]), ref, atol=2e-3)
    assert np.max(np.abs(W[1])) > 0.01  # the learners' gradients enter the later queries


def test_ffgb_c_l_default_oracles_and_gamma_keep_the_residual():
  # Thm 3.2 assumes WO^inf (13) and Thm 3.3 WO^lip (19)-(20): the ffgb_c / ffgb_l defaults;
  # plain FFGB keeps WO^2 (mlp). gamma = 1 would claim an exact oracle: G1 = 0 zeroes Delta.
  assert algorithms.default_config("ffgb")["weak_learner"] == "mlp"
  assert algorithms.default_config("ffgb_c")["weak_learner"] == "wo_inf"
  assert algorithms.default_config("ffgb_l")["weak_learner"] == "wo_lip"
  gam = algorithms.default_config("ffgb_c")["gamma"]
  assert 0 < gam < 1
  rs = np.random.default_rng(3)
  y = rs.integers(0, 2, size=(N, M))
  task = make_tabular_task(X, y, loss="ce", num_outputs=2)
  alg = algorithms.build("ffgb_c", task, wo_family="linear", oracle_steps=20, mu=0.1,
                         eta_schedule="theory", local_steps=K)
  cfg = alg.hparams
  client = jax.jit(ffgb.make_client_round(task, cfg, "ffgb_c", ffgb.build_oracle(task, cfg)))
  _, aux = client(jax.random.key(0), jnp.asarray(X, jnp.float32)[0], jnp.asarray(y)[0],
                  jnp.ones(M, bool), jnp.int32(M), jnp.zeros((M, 2)), ffgb.step_sizes(cfg, "ffgb_c", 0))
  G1 = (1 - gam) * np.sqrt(2) / gam
  pre = np.asarray(aux["phi"]) - np.asarray(aux["h"])  # phi - h before Alg. 5 line 6's clip
  np.testing.assert_allclose(np.asarray(aux["delta"]), np.clip(pre, -G1, G1), rtol=1e-5, atol=1e-6)
  assert np.max(np.abs(np.asarray(aux["delta"]))) > 1e-3  # the residual survives
  # The whole default round compiles vmapped over the sampled clients and logs the diagnostics.
  s, _ = jax.jit(alg.round)(alg.init(*rng.init_keys(ROOT)), jax.random.key(1), task.data)
  met = alg.metrics(s)
  assert set(ffgb.diag_keys("ffgb_c")) <= set(met) and all(np.isfinite(float(met[k]))
                                                          for k in ffgb.diag_keys("ffgb_c"))
