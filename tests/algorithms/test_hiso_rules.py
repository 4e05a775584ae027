"""DeComFL / HiSo update rules against plain-NumPy references (issue 15; seed 003,
specs/hiso.md §2.4-§2.5, §6).

Every reference below is written from the paper's equations in float64 NumPy on a
tiny federated quadratic f_i(x) = 1/2 sum_j lambda_j (x_j - b_ij)^2 (d = 5, N = 4
clients, m = 2 sampled a round, tau = 2 local steps, P = 2 perturbations). Only the
key plumbing is shared with fedsim: the round keys (rng), the sampled clients
(sample_clients) and the perturbation key of (r, k, p) written out as the spec's
fold_in(fold_in(fold_in(shared, r), k), p) under the run's shared stream
rng.stream(root, "shared"); u_{r,k,p} ~ N(0, I_d) is drawn from it with
jax.random.normal and everything after that is NumPy:

* client i, local step k (Alg. 2b, eq. 8 / eq. 112):
  g^{(i)}_{r,k,p} = (f_i(x^{(i)}_{r,k} + mu z_{r,k,p}) - f_i(x^{(i)}_{r,k})) / mu,
  z = H_r^{-1/2} u (DeComFL: H = 1), x^{(i)}_{r,k+1} = x^{(i)}_{r,k} - eta (1/P) sum_p g z;
* server (Alg. 2 lines 13-16): gbar = (1/m) sum_{i in C_r} g^{(i)} (m participants, not N),
  x_{r+1} = x_r - eta sum_k (1/P) sum_p gbar_{r,k,p} z_{r,k,p};
* H (eq. 12 / §4.3 / [code]): H <- clip((1 - nu) H + nu (Delta x^2 + eps), lo, hi) after
  the tau model steps, with Delta x of the last step (``last``), of every step in turn
  (``all``), or the round displacement x_{r+1} - x_r (App. C);
* ``step_norm=trace``: z = (H / hbar)^{-1/2} u, hbar = d / Tr(H^{-1}) (eq. 7's factor);
* [code] SGD weight decay: every model step is x <- x - eta (Delta x + lambda x);
* ledgers: tau P float32 scalars up per participant; tau (P + 1) (forward) or 2 tau P
  (central) evaluations of f_i; replay downloads the (r - r'_i) tau P scalars missed.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedsim import algorithms
from fedsim.algorithms import hiso
from fedsim.core import rng
from fedsim.core.sampling import sample_clients
from fedsim.tasks.illcond_quadratic import make_illcond_quadratic_task

ROOT = jax.random.key(21)
N, M, D = 4, 2, 5


def _task():
  return make_illcond_quadratic_task(D, N, 1.0, sigma=1.0, seed=4)


def _quadratic(task):
  """f(i, x) in float64 NumPy from the task's own numbers (lambda, b_i)."""
  lam = np.asarray(task.data["eval"]["lam"], np.float64)
  b = np.asarray(task.client_data["b"], np.float64)
  return lambda i, x: 0.5 * float(np.sum(lam * (x - b[i]) ** 2))


def _u(shared, r, k, p):
  """u_{r,k,p} ~ N(0, I_d) from the spec's key fold_in(fold_in(fold_in(shared, r), k), p)."""
  key = jax.random.fold_in(jax.random.fold_in(jax.random.fold_in(shared, r), k), p)
  return np.asarray(jax.random.normal(key, (D,), jnp.float64))


def _sampled(r):
  k_sample, _, _ = rng.round_subkeys(rng.round_key(rng.stream(ROOT, "rounds"), r))
  return [int(i) for i in np.asarray(sample_clients(k_sample, N, M))]


def _ema(h, sig, c):
  h = (1 - c["nu"]) * h + c["nu"] * (sig + c["eps"])                       # eq. 12 / §4.3
  return np.clip(h, c["clip_lo"] or 0.0, c["clip_hi"] or np.inf)          # Assumption 4


def _reference_round(f, x, h, r, idx, c):
  """One round of Alg. 2 / 2b in NumPy; returns (x_{r+1}, H_{r+1}, G (m, tau, P))."""
  eta, mu, tau, P, wd = c["lr"], c["smoothing"], c["local_steps"], c["num_perturbations"], c["wd"]
  shared = rng.stream(ROOT, "shared")
  heff = h
  if c.get("step_norm") == "trace":
    heff = h * np.sum(1.0 / h) / D                                       # H / hbar, hbar = d / Tr H^-1
  if c.get("preconditioner") == "scalar":
    heff = np.full(D, h.mean())
  z = {(k, p): _u(shared, r, k, p) / np.sqrt(heff) for k in range(tau) for p in range(P)}
  G = []
  for i in idx:
    xi, gi = x.copy(), []
    for k in range(tau):
      if c.get("fd_scheme") == "central":
        g = [(f(i, xi + mu * z[k, p]) - f(i, xi - mu * z[k, p])) / (2 * mu) for p in range(P)]
      else:
        f0 = f(i, xi)                                                    # one base value, shared
        g = [(f(i, xi + mu * z[k, p]) - f0) / mu for p in range(P)]
      dx = sum(g[p] * z[k, p] for p in range(P)) / P
      xi = xi - eta * (dx + wd * xi)
      gi.append(g)
    G.append(gi)
  G = np.asarray(G)
  gbar = G.sum(axis=0) / len(idx)                                        # (1/m) sum over C_r
  xn, dxs = x.copy(), []
  for k in range(tau):
    dx = sum(gbar[k, p] * z[k, p] for p in range(P)) / P
    xn = xn - eta * (dx + wd * xn)
    dxs.append(dx)
  if not c.get("preconditioned", True):
    return xn, h, G                                                      # DeComFL: H = I
  ku, sig = c.get("k_update", "last"), c.get("h_signal", "delta_x")
  if sig == "round_displacement":
    hn = _ema(h, (xn - x) ** 2, c)                                       # App. C
  elif ku == "last":
    hn = _ema(h, dxs[-1] ** 2, c)                                        # [code] last local step
  else:
    hn = h
    for k in range(tau):
      if ku == "all":
        sig_k = dxs[k] ** 2                                              # Delta x_{r,k} with H_r
      else:                          # all_code: rebuilt with the updated H (diagonal, step_norm none)
        sig_k = (sum(gbar[k, p] * _u(shared, r, k, p) for p in range(P)) / P / np.sqrt(hn)) ** 2
      hn = _ema(hn, sig_k, c)
  return xn, hn, G


BASE = dict(lr=0.05, smoothing=1e-3, local_steps=2, num_perturbations=2, wd=0.0, nu=0.3,
            eps=0.01, h0=2.0, clip_lo=None, clip_hi=None)


def _build(name, c):
  hp = {k: v for k, v in c.items() if k in algorithms.config_fields(name)}   # build rejects others
  return algorithms.build(name, _task(), clients_per_round=M, weight_decay=c["wd"], **hp)


def _check_rounds(name, c, rounds=3):
  """Runs ``rounds`` rounds of algorithm ``name`` and the NumPy reference side by side."""
  with jax.enable_x64(True):
    task = _task()
    alg = _build(name, c)
    f = _quadratic(task)
    state = alg.init(*rng.init_keys(ROOT))
    step = jax.jit(alg.round)
    parts = hiso.hiso_parts(task, alg.hparams, preconditioned=c.get("preconditioned", True))
    scalars = jax.jit(parts.client_scalars)
    x, h = np.zeros(D), np.full(D, c["h0"] if c.get("preconditioned", True) else 1.0)
    np.testing.assert_array_equal(np.asarray(state.x), x)
    for r in range(rounds):
      idx = _sampled(r)
      xn, hn, G = _reference_round(f, x, h, r, idx, c)
      # Uplink payload of each participant: its tau x P scalars (Alg. 2b line 4).
      _, k_clients, _ = rng.round_subkeys(rng.round_key(rng.stream(ROOT, "rounds"), r))
      for j, i in enumerate(idx):
        client = jax.tree_util.tree_map(lambda a, i=i: a[i], task.client_data)
        g, _ = scalars(state.x, state.h, r, state.shared_key, client, rng.client_key(k_clients, i))
        np.testing.assert_allclose(np.asarray(g), G[j], rtol=1e-7, atol=1e-9)
      state, stats = step(state, rng.round_key(rng.stream(ROOT, "rounds"), r), task.data)
      x, h = xn, hn
      np.testing.assert_allclose(np.asarray(state.x), x, rtol=1e-9, atol=1e-12)
      np.testing.assert_allclose(np.asarray(state.h), h, rtol=1e-9, atol=1e-12)
    assert np.max(np.abs(x)) > 1e-2                                   # the model really moved


# --- DeComFL: the scalar, the shared seed, the 1/m average -----------------------------------


@pytest.mark.parametrize("scheme", ["forward", "central"])
def test_decomfl_rounds_match_numpy(scheme):
  """DeComFL (H = I; HiSo's nu, eps, h0 do not exist for it and are not passed to it)."""
  _check_rounds("decomfl", dict(BASE, preconditioned=False, fd_scheme=scheme))


# --- HiSo: H^{-1/2} directions, the H update and its variants ------------------------------


@pytest.mark.parametrize("variant", [
    dict(),                                                   # [code] last step, eps > 0, H_0 = 2
    dict(k_update="all", clip_lo=0.9, clip_hi=1.6),           # eq. 12 chained, both clips act
    dict(k_update="all_code"),                                # [code] ALL_LOCAL_UPDATES
    dict(h_signal="round_displacement"),                      # App. C
    dict(step_norm="trace"),                                  # eq. 7 factor kept
    dict(preconditioner="scalar", h0=1.0),                    # ablation: mean(H) 1
], ids=["last", "all_clipped", "all_code", "round_displacement", "trace", "scalar"])
def test_hiso_rounds_match_numpy(variant):
  c = dict(BASE, **variant)
  _check_rounds("hiso", c)
  if c["clip_lo"] is not None:
    # The clips really clip: along the (clipped) run, the same rounds without clips
    # would leave [lo, hi] on both sides.
    with jax.enable_x64(True):
      f, x, h = _quadratic(_task()), np.zeros(D), np.full(D, c["h0"])
      lo_hit = hi_hit = False
      for r in range(3):
        _, h_free, _ = _reference_round(f, x, h, r, _sampled(r), dict(c, clip_lo=None, clip_hi=None))
        lo_hit |= bool(np.any(h_free < c["clip_lo"]))
        hi_hit |= bool(np.any(h_free > c["clip_hi"]))
        x, h, _ = _reference_round(f, x, h, r, _sampled(r), c)
      assert lo_hit and hi_hit


def test_code_weight_decay_rule_matches_numpy():
  """hiso_code's SGD weight decay on the clients' steps and the server's alike
  (lambda = 0.4 so that the term is visible), at the preset's eps = 0 and P = 1."""
  c = dict(BASE, wd=0.4, eps=0.0, num_perturbations=1, h0=1.0)
  _check_rounds("hiso_code", c)


# --- Ledgers ---------------------------------------------------------------------------------


@pytest.mark.parametrize("scheme, evals", [("forward", 2 + 1), ("central", 2 * 2)])
def test_ledgers_per_round(scheme, evals):
  """bytes up/down: tau P float32 scalars per participant (m = 2, not N = 4); queries:
  tau (P + 1) or 2 tau P evaluations of f_i per participant (no samples here)."""
  task = _task()
  alg = algorithms.build("hiso", task, clients_per_round=M, local_steps=2, num_perturbations=2,
                         fd_scheme=scheme, lr=0.01)
  state = alg.init(*rng.init_keys(ROOT))
  _, stats = jax.jit(alg.round)(state, rng.round_key(rng.stream(ROOT, "rounds"), 0), task.data)
  assert int(stats.bytes_up) == M * 2 * 2 * 4
  assert int(stats.bytes_down) == M * 2 * 2 * 4
  assert int(stats.queries) == M * 2 * evals
  assert int(stats.participants) == M


# --- Replay (lazy catch-up) ------------------------------------------------------------------


def test_replay_catch_up_matches_numpy_server():
  """Protocol mode, HiSo (nu > 0, weight decay > 0): every client keeps (x, H) from
  the start of its last participated round r'_i, replays rounds r'_i..r-1 from the
  averaged scalars (Alg. 2 lines 8-9, Alg. 2a) and downloads (r - r'_i) tau P 4 bytes.
  The saved states, the synced states and the downloads match the NumPy server."""
  c = dict(BASE, wd=0.1, nu=0.4)
  R = 7
  with jax.enable_x64(True):
    task = _task()
    alg = algorithms.build("hiso", task, clients_per_round=M, weight_decay=c["wd"], client_state="replay",
                           **{k: v for k, v in c.items() if k != "wd"})
    f = _quadratic(task)
    state, step = alg.init(*rng.init_keys(ROOT)), jax.jit(alg.round)
    xs_ref, hs_ref = [np.zeros(D)], [np.full(D, c["h0"])]
    last, max_gap = np.zeros(N, int), 0
    for r in range(R):
      idx = _sampled(r)
      xn, hn, _ = _reference_round(f, xs_ref[-1], hs_ref[-1], r, idx, c)
      state, stats = step(state, rng.round_key(rng.stream(ROOT, "rounds"), r), task.data)
      assert int(stats.bytes_down) == sum(r - last[i] for i in idx) * 2 * 2 * 4
      max_gap = max([max_gap] + [r - last[i] for i in idx])
      last[idx] = r
      xs_ref.append(xn)
      hs_ref.append(hn)
    cl = state.clients
    np.testing.assert_array_equal(np.asarray(cl.last), last)
    assert max_gap >= 3 and len(set(last)) >= 3       # clients really missed rounds
    for i in range(N):     # (x, H) saved at the start of round r'_i
      np.testing.assert_allclose(np.asarray(cl.x[i]), xs_ref[last[i]], rtol=1e-9, atol=1e-12)
      np.testing.assert_allclose(np.asarray(cl.h[i]), hs_ref[last[i]], rtol=1e-9, atol=1e-12)
    xs, hs = jax.jit(hiso.hiso_parts(task, alg.hparams).sync)(state)
    np.testing.assert_allclose(np.asarray(xs), np.broadcast_to(xs_ref[R], (N, D)), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(np.asarray(hs), np.broadcast_to(hs_ref[R], (N, D)), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(np.asarray(state.x), xs_ref[R], rtol=1e-9, atol=1e-12)


# --- The authors' code as a preset -----------------------------------------------------------


def test_code_presets_hold_the_code_settings():
  """hiso_code / decomfl_code = ZidongLiu/DeComFL 0c426e6 (MNIST): adam_forward.py
  l. 54-56 (no epsilon), cli_parser.py l. 113-117 (num_pert=1), data.py l. 41
  (train_batch_size=8), prepare_settings.py l. 87-93 (SGD weight_decay=1e-5 on MNIST),
  cli_parser.py l. 90 (lr 1e-4), l. 112 (mu 1e-3), l. 137-141 (hessian_smooth 0.95),
  adam_forward.py l. 39 (K_0 = ones), cli_parser.py l. 132-136 (last_local_update),
  l. 164 (one local step), l. 123-127 (vanilla estimator: rge_central)."""
  code = dict(eps=0.0, num_perturbations=1, batch_size=8, weight_decay=1e-5, lr=1e-4, smoothing=1e-3,
              nu=0.05, h0=1.0, k_update="last", h_signal="delta_x", fd_scheme="forward", local_steps=1,
              clip_lo=None, clip_hi=None, preconditioner="diagonal", step_norm="none")
  cfg = algorithms.default_config("hiso_code")
  for k, v in code.items():
    assert cfg[k] == v, (k, cfg[k], v)
  dec = algorithms.default_config("decomfl_code")
  for k in ("num_perturbations", "batch_size", "weight_decay", "lr", "smoothing", "local_steps"):
    assert dec[k] == code[k], (k, dec[k])
  assert dec["fd_scheme"] == "central"
  # The paper presets keep the paper's step (no weight decay) and the spec's epsilon.
  assert algorithms.default_config("hiso")["weight_decay"] == 0.0
  assert algorithms.default_config("hiso")["eps"] == 1e-8
  assert algorithms.default_config("decomfl")["fd_scheme"] == "forward"
  built = algorithms.build("hiso_code", _task())
  assert built.name == "hiso_code" and built.hparams.weight_decay == 1e-5 and built.metrics is not None
  assert algorithms.build("decomfl_code", _task()).metrics is None      # H = I
  with pytest.raises(ValueError, match="weight_decay"):
    algorithms.build("hiso", _task(), weight_decay=-1.0)
