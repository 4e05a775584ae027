"""HiSo and DeComFL (issue 5; seed 003, specs/hiso.md §7).

* Replay is exact: every client's (x, H) rebuilt from the averaged scalars alone
  equals the server's, bitwise in float64 and float32, a never-sampled client
  included (§7 item 1); the protocol run and the fast run are the same run.
* The scalar protocol equals the FedAvg-style reference that averages explicit
  local models with the same directions (App. C; §7 item 2), tau in {1, 5}.
* HiSo with nu = 0, H_0 = 1 is bitwise DeComFL (Corollary 2; §7 item 3).
* Estimator moments on a diagonal quadratic: E Delta x = H^{-1} grad f (eq. 9,
  Lemma 2), E Delta x^T A Delta x (eq. 84 / eq. 120) and Lemma 1 (§7 item 4).
* The byte ledger reproduces Table 2 / Table 5 (§7 item 7).
* The H-update signal: E[Delta x_j^2] = H_j^{-1}[S/P + (1 + 1/P) grad_j^2 / H_j] and
  the EMA's fixed point H_j^3 = (S/P) H_j + (1 + 1/P) grad_j^2 (why H stays nearly
  isotropic, issue 5); step_norm=trace (eq. 7) makes the scale of H irrelevant.
* Direction streams: fixed by (r, k, p) only (§7 item 10).
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedsim import algorithms
from fedsim.algorithms import hiso
from fedsim.core import rng
from fedsim.core.sampling import sample_clients
from fedsim.estimators import shared_seed
from fedsim.tasks.illcond_quadratic import make_illcond_quadratic_task
from tests.conftest import digits_task

ROOT = jax.random.key(5)


def _run(alg, task, rounds, state=None, start=0):
  """Rounds start..start+rounds-1 of the engine's key schedule, in one compiled scan."""
  if state is None:
    state = jax.jit(alg.init)(*rng.init_keys(ROOT))
  rounds_key = rng.stream(ROOT, "rounds")

  @jax.jit
  def go(s, data):
    def body(s, r):
      return alg.round(s, rng.round_key(rounds_key, r), data)
    return jax.lax.scan(body, s, start + jnp.arange(rounds, dtype=jnp.int32))

  return go(state, task.data)


# --- 1. Exact replay -----------------------------------------------------------------------


@pytest.mark.parametrize("x64", [True, False])
def test_replay_is_exact_for_every_client(x64):
  """10 clients, 3 per round, 200 rounds, tau = 3, P = 5 (§7 item 1)."""
  with jax.enable_x64(x64):
    task = make_illcond_quadratic_task(200, 10, 1.0, seed=1)
    hp = dict(lr=2e-3, local_steps=3, num_perturbations=5, clients_per_round=3, replay_history=256)
    proto = algorithms.build("hiso", task, client_state="replay", **hp)
    fast = algorithms.build("hiso", task, **hp)
    state, stats = _run(proto, task, 200)
    c = state.clients
    assert state.x.dtype == (jnp.float64 if x64 else jnp.float32)
    assert float(c.mismatch) == 0.0 and int(c.full_pulls) == 0
    parts = hiso.hiso_parts(task, proto.hparams)
    # A client that was never sampled: (x_0, H_0, r' = 0), replayed over all 200 rounds.
    x0 = jnp.zeros_like(state.x)
    c = c._replace(x=c.x.at[0].set(x0), h=c.h.at[0].set(jnp.ones_like(state.h)), last=c.last.at[0].set(0))
    xs, hs = jax.jit(parts.sync)(state._replace(clients=c))
    # Bitwise in float64 (same jitted code) and, on CPU, in float32 too (<= 1e-6 required).
    np.testing.assert_array_equal(np.asarray(xs), np.broadcast_to(np.asarray(state.x), xs.shape))
    np.testing.assert_array_equal(np.asarray(hs), np.broadcast_to(np.asarray(state.h), hs.shape))
    assert not np.allclose(np.asarray(state.h), 1.0)     # H really moved
    # Clients compute from their own replayed models, so the protocol run is the fast run.
    fstate, fstats = _run(fast, task, 200)
    np.testing.assert_array_equal(np.asarray(fstate.x), np.asarray(state.x))
    np.testing.assert_array_equal(np.asarray(fstate.h), np.asarray(state.h))
    # Protocol download: every participation needs the (r - r') rounds it missed.
    assert int(stats.bytes_down[0]) == 0
    assert int(np.sum(stats.bytes_down)) > int(np.sum(fstats.bytes_down))
    np.testing.assert_array_equal(np.asarray(stats.bytes_up), np.asarray(fstats.bytes_up))


def test_replay_download_and_bounded_history():
  task = make_illcond_quadratic_task(50, 6, 1.0, seed=2)
  # Full participation: from round 1 on every client needs exactly one round of scalars.
  alg = algorithms.build("decomfl", task, lr=1e-3, local_steps=2, num_perturbations=3,
                         clients_per_round=6, client_state="replay")
  _, stats = _run(alg, task, 5)
  np.testing.assert_array_equal(np.asarray(stats.bytes_down), [0] + [6 * 2 * 3 * 4] * 4)
  # A history of 4 rounds: clients absent longer pull the full model (d reals) instead,
  # and the run is still the fast run.
  small = algorithms.build("hiso", task, lr=1e-3, clients_per_round=1, client_state="replay",
                           replay_history=4)
  state, stats = _run(small, task, 60)
  fast, _ = _run(algorithms.build("hiso", task, lr=1e-3, clients_per_round=1), task, 60)
  pulls = int(state.clients.full_pulls)
  assert pulls > 0 and float(state.clients.mismatch) == 0.0
  np.testing.assert_array_equal(np.asarray(fast.x), np.asarray(state.x))
  gaps = (np.sum(stats.bytes_down) - pulls * 2 * 50 * 4) // (5 * 4)   # scalar rounds downloaded
  assert 0 < gaps <= 60 * 4


# --- 2. Scalar protocol == FedAvg-style reference (App. C) -----------------------------------


@pytest.mark.slow  # long; .ci/run runs it (pytest -m slow)
@pytest.mark.parametrize("tau", [1, 5])
def test_protocol_equals_fedavg_reference(tau):
  """x_{r+1} = mean_i x^{(i)}_{r,tau} of explicit local models with the same shared
  directions and mini-batches (App. C), and the H update of §2.3 from it."""
  with jax.enable_x64(True):
    task = digits_task(10)
    P, m, eta, mu, nu, eps, b = 3, 4, 0.05, 1e-3, 0.2, 1e-8, 7
    alg = algorithms.build("hiso", task, lr=eta, smoothing=mu, num_perturbations=P, local_steps=tau,
                           clients_per_round=m, batch_size=b, nu=nu, eps=eps)
    parts = hiso.hiso_parts(task, alg.hparams)
    d = parts.dim
    state = jax.jit(alg.init)(*rng.init_keys(ROOT))
    kx, kh = jax.random.split(jax.random.key(1))
    x_r = 0.1 * jax.random.normal(kx, (d,), jnp.float64)
    h_r = jnp.exp(jax.random.normal(kh, (d,), jnp.float64))
    r = 3
    state = state._replace(x=x_r, h=h_r, round=jnp.int32(r))
    key = rng.round_key(rng.stream(ROOT, "rounds"), r)
    new, stats = jax.jit(alg.round)(state, key, task.data)

    # Reference: explicit loops over clients, steps and perturbations (Alg. 2b, App. C).
    from fedsim.algorithms.local import flat_problem
    _, loss = flat_problem(task, jax.random.key(0))
    loss = jax.jit(loss)
    k_sample, k_clients, _ = rng.round_subkeys(key)
    idx = np.asarray(sample_clients(k_sample, task.num_clients, m))
    z = jax.jit(lambda k, p: jax.random.normal(
        jax.random.fold_in(jax.random.fold_in(jax.random.fold_in(state.shared_key, r), k), p),
        (d,), jnp.float64) / jnp.sqrt(h_r))
    finals, scalars = [], []
    for i in idx:
      client = jax.tree_util.tree_map(lambda a, i=i: a[i], task.client_data)
      ck = rng.client_key(k_clients, int(i))
      x, gs = x_r, []
      for k in range(tau):
        batch = task.sample_batch(client, jax.random.fold_in(ck, k), b)   # one batch per step
        f0 = loss(x, batch)
        acc, g_k = jnp.zeros_like(x), []
        for p in range(P):
          g = (loss(x + mu * z(k, p), batch) - f0) / mu
          acc, g_k = acc + g * z(k, p), g_k + [g]
        x = x - eta * acc / P
        gs.append(g_k)
      finals.append(x)
      scalars.append(gs)
    x_ref = sum(finals) / m                                       # App. C "Aggregate Model"
    scale = float(jnp.max(jnp.abs(x_ref - x_r)))
    assert float(jnp.max(jnp.abs(new.x - x_ref))) <= 1e-9 * scale
    gbar = np.mean(np.asarray(scalars), axis=0)                   # (tau, P): Alg. 2 line 13
    dx_last = sum(gbar[tau - 1, p] * z(tau - 1, p) for p in range(P)) / P
    h_ref = (1 - nu) * h_r + nu * (dx_last ** 2 + eps)              # [code] last local step
    np.testing.assert_allclose(np.asarray(new.h), np.asarray(h_ref), rtol=1e-9)
    # App. C's variant: the EMA of the round displacement (x_{r+1} - x_r)^2.
    cfg = dataclasses.replace(alg.hparams, h_signal="round_displacement")
    x_c, h_c = hiso.hiso_parts(task, cfg).apply_round(x_r, h_r, r, state.shared_key, jnp.asarray(gbar))
    np.testing.assert_allclose(np.asarray(h_c), np.asarray((1 - nu) * h_r + nu * ((x_ref - x_r) ** 2 + eps)),
                               rtol=1e-8)
    assert float(jnp.max(jnp.abs(x_c - x_ref))) <= 1e-9 * scale
    # Uplink: exactly tau * P scalars per participating client.
    G, _ = parts.client_scalars(x_r, h_r, r, state.shared_key,
                                jax.tree_util.tree_map(lambda a: a[idx[0]], task.client_data),
                                rng.client_key(k_clients, int(idx[0])))
    assert G.shape == (tau, P)
    np.testing.assert_allclose(np.asarray(G), np.asarray(scalars[0]), rtol=1e-9)
    assert int(stats.bytes_up) == m * tau * P * 4
    assert int(stats.queries) == m * tau * (P + 1) * b


@pytest.mark.slow  # long; .ci/run runs it (pytest -m slow)
def test_k_update_variants_follow_their_rules():
  """``all`` chains the EMA over k with Delta x_{r,k} built with H_r (eq. 12);
  ``all_code`` ([code] ALL_LOCAL_UPDATES) takes the tau model steps with H_r
  (server.py l. 190-194) and then rebuilds step k's H signal with the updated H
  (adam_forward.py l. 121-125, 54-61)."""
  with jax.enable_x64(True):
    task = make_illcond_quadratic_task(30, 4, 1.0, seed=3)
    tau, P, eta, nu = 3, 2, 1e-2, 0.3
    gbar = jnp.asarray(np.random.default_rng(0).standard_normal((tau, P)))
    x = jnp.asarray(np.random.default_rng(1).standard_normal(30))
    h = jnp.asarray(np.exp(np.random.default_rng(2).standard_normal(30)))
    key = jax.random.key(9)
    def step(k, hh):
      return shared_seed.step_from_scalars(gbar[k], key, 0, k, 1 / jnp.sqrt(hh), 30,
                                           jnp.float64)
    for variant in ("all", "all_code"):
      cfg = hiso.HiSoConfig(lr=eta, nu=nu, eps=0.0, local_steps=tau, num_perturbations=P,
                                       k_update=variant)
      xn, hn = jax.jit(hiso.hiso_parts(task, cfg).apply_round)(x, h, 0, key, gbar)
      xr, hr = x, h
      for k in range(tau):
        xr = xr - eta * step(k, h)                    # model steps: H_r in both variants
        dx = step(k, h if variant == "all" else hr)   # H signal
        hr = (1 - nu) * hr + nu * dx ** 2
      np.testing.assert_allclose(np.asarray(xn), np.asarray(xr), rtol=1e-12)
      np.testing.assert_allclose(np.asarray(hn), np.asarray(hr), rtol=1e-12)


# --- 3. DeComFL is HiSo with H = I ---------------------------------------------------------


def test_hiso_nu0_h0_1_is_decomfl_bitwise():
  task = digits_task(8)
  hp = dict(lr=0.05, local_steps=2, num_perturbations=3, clients_per_round=3, batch_size=9)
  a, sa = _run(algorithms.build("hiso", task, nu=0.0, h0=1.0, **hp), task, 15)
  b, sb = _run(algorithms.build("decomfl", task, **hp), task, 15)
  np.testing.assert_array_equal(np.asarray(a.x), np.asarray(b.x))
  np.testing.assert_array_equal(np.asarray(a.h), np.ones(a.x.shape, np.float32))
  np.testing.assert_array_equal(np.asarray(b.h), np.ones(a.x.shape, np.float32))   # H = I fixed
  for f in ("queries", "bytes_up", "bytes_down", "participants"):
    np.testing.assert_array_equal(np.asarray(getattr(sa, f)), np.asarray(getattr(sb, f)))


# --- 4. Estimator moments ------------------------------------------------------------------


def _quadratic(d=8, seed=0):
  g = np.random.default_rng(seed)
  lam = np.exp(np.sqrt(3) * g.standard_normal(d))   # log-normal spectrum
  h = np.exp(g.standard_normal(d))                   # a random diagonal H
  x = g.standard_normal(d)
  return lam, h, x


@pytest.mark.parametrize("P, scheme", [(1, "forward"), (5, "forward"), (5, "central")])
def test_estimator_mean_and_second_moment(P, scheme):
  """2e5 draws: E Delta x = H^{-1} grad f within 3 standard errors per coordinate
  (eq. 9, exact for a quadratic, Lemma 2); E Delta x^T A Delta x =
  grad^T[(1/P) Tr(A H^{-1}) H^{-1} + (1 + 1/P) H^{-1} A H^{-1}] grad within 2 %
  (eq. 84 / eq. 120). Forward differences add (mu/2) z^T A z to each scalar, which
  is odd in z (no bias) and O(mu^2) in the second moment; central ones are exact."""
  with jax.enable_x64(True):
    lam, h, x = _quadratic()
    def f(v):
      return 0.5 * jnp.sum(jnp.asarray(lam) * v * v)
    n, key = 200_000, jax.random.key(11)
    steps = jax.jit(jax.vmap(lambda r: shared_seed.scalars_and_step(
        f, jnp.asarray(x), key, r, 0, P, 1e-3, shared_seed.inverse_sqrt(jnp.asarray(h)),
        scheme)[1]))(
            jnp.arange(n))
    steps = np.asarray(steps)
    grad, hi = lam * x, 1.0 / h
    se = steps.std(0) / np.sqrt(n)
    assert np.all(np.abs(steps.mean(0) - hi * grad) <= 3 * se)
    q = np.einsum("nd,d,nd->n", steps, lam, steps)
    pred = grad @ ((1 / P) * np.sum(lam * hi) * np.diag(hi) + (1 + 1 / P) * np.diag(hi * lam * hi)) @ grad
    assert abs(q.mean() / pred - 1) <= 0.02
    assert q.std() / np.sqrt(n) <= 0.01 * pred            # the 2 % band is >= 2 standard errors
    # The H-update signal (test_h_signal_moment): the diagonal of the same covariance,
    # E[Delta x_j^2] = H_j^{-1} [S/P + (1 + 1/P) grad_j^2 / H_j], S = grad^T H^{-1} grad.
    sq = steps ** 2
    S = np.sum(grad ** 2 * hi)
    pred_sq = hi * (S / P + (1 + 1 / P) * grad ** 2 * hi)
    assert np.all(np.abs(sq.mean(0) - pred_sq) <= 4 * sq.std(0) / np.sqrt(n))
    assert np.all(np.abs(sq.mean(0) / pred_sq - 1) <= 0.05)


def test_h_signal_moment_fixes_h_near_a_multiple_of_one():
  """Why the learned H is nearly isotropic (issue 5). With x frozen (eta = 0) the EMA
  H <- (1 - nu) H + nu (Delta x^2 + eps) (eq. 12 / §4.3 / [code]) settles, on a
  deterministic quadratic, at the fixed point of E[Delta x_j^2] = H_j, i.e.
  H_j^3 = (S/P) H_j + (1 + 1/P) grad_j^2, S = grad^T H^{-1} grad: coordinate-free
  except where grad_j^2 / H_j carries ~1/P of S, whatever the curvature lambda."""
  with jax.enable_x64(True):
    d, P, nu = 20, 5, 0.01
    task = make_illcond_quadratic_task(d, 2, 0.0, seed=6)
    alg = algorithms.build("hiso", task, lr=0.0, nu=nu, eps=0.0, num_perturbations=P,
                           clients_per_round=1)
    s0 = jax.jit(alg.init)(*rng.init_keys(ROOT))
    rounds_key = rng.stream(ROOT, "rounds")
    hs = jax.jit(lambda s: jax.lax.scan(
        lambda s, r: (alg.round(s, rng.round_key(rounds_key, r), task.data)[0],
                      s.h), s, jnp.arange(6000, dtype=jnp.int32))[1])(s0)
    h_emp = np.asarray(hs[1000:]).mean(0)             # time average after the transient
    lam = np.asarray(task.data["eval"]["lam"], np.float64)
    grad = lam * (0.0 - np.asarray(task.data["eval"]["b_star"], np.float64))   # x = x_0 = 0
    h = np.ones(d)
    for _ in range(500):                              # damped fixed-point iteration
      S = np.sum(grad ** 2 / h)
      h = 0.5 * h + 0.5 * np.sqrt(S / P + (1 + 1 / P) * grad ** 2 / h)
    np.testing.assert_allclose(h ** 3, (S / P) * h + (1 + 1 / P) * grad ** 2, rtol=1e-8)
    np.testing.assert_allclose(h_emp, h, rtol=0.1)
    # The curvature does not enter: coordinates whose gradient share is small get the
    # common value sqrt(S/P) within 10 %, whatever their lambda.
    small = grad ** 2 / h < 0.02 * S
    assert small.sum() >= d // 2 and lam[small].max() / lam[small].min() > 10
    np.testing.assert_allclose(h_emp[small], np.sqrt(S / P), rtol=0.1)


@pytest.mark.slow  # long; .ci/run runs it (pytest -m slow)
def test_trace_step_norm_makes_the_scale_of_h_irrelevant():
  """step_norm=trace keeps eq. 7's factor in expectation: directions use H / hbar,
  hbar = d / Tr(H^{-1}). A uniform H = c 1 then gives DeComFL for every c (bitwise
  for c a power of two), H_0 = 1 with nu = 0 too, and replay stays exact."""
  task = make_illcond_quadratic_task(40, 6, 1.0, seed=2)
  hp = dict(lr=1e-3, local_steps=2, num_perturbations=3, clients_per_round=3)
  ref, _ = _run(algorithms.build("decomfl", task, **hp), task, 12)
  for h0 in (1.0, 4.0, 0.25):
    a, _ = _run(algorithms.build("hiso", task, nu=0.0, h0=h0, step_norm="trace", **hp), task, 12)
    np.testing.assert_array_equal(np.asarray(a.x), np.asarray(ref.x))
  a, _ = _run(algorithms.build("hiso", task, nu=0.0, h0=3.7, step_norm="trace", **hp), task, 12)
  np.testing.assert_allclose(np.asarray(a.x), np.asarray(ref.x), rtol=1e-5, atol=1e-6)
  # Without it (eq. 8 as boxed, [code]) the scale of H is a step size: H_0 = 4 halves z.
  b, _ = _run(algorithms.build("hiso", task, nu=0.0, h0=4.0, **hp), task, 12)
  assert not np.allclose(np.asarray(b.x), np.asarray(ref.x), rtol=1e-3)
  # Direction law: z = (H/hbar)^{-1/2} u, so E Delta x = (H/hbar)^{-1} grad f.
  cfg = hiso.HiSoConfig(step_norm="trace", **hp)
  h = jnp.asarray(np.exp(np.random.default_rng(0).standard_normal(40)), jnp.float32)
  hbar = 40 / np.sum(1 / np.asarray(h, np.float64))
  np.testing.assert_allclose(np.asarray(hiso.hiso_parts(task, cfg).scale(h)),
                             np.sqrt(hbar / np.asarray(h, np.float64)), rtol=1e-6)
  # Protocol mode: replayed clients still match the server bitwise.
  proto = algorithms.build("hiso", task, step_norm="trace", client_state="replay", **hp)
  state, _ = _run(proto, task, 30)
  assert float(state.clients.mismatch) == 0.0
  xs, hs = jax.jit(hiso.hiso_parts(task, proto.hparams).sync)(state)
  np.testing.assert_array_equal(np.asarray(xs), np.broadcast_to(np.asarray(state.x), xs.shape))


def test_lemma1_fourth_moment_of_weighted_gaussian():
  """E[z z^T W z z^T] = Tr(W Lambda) Lambda + 2 Lambda W Lambda for z = H^{-1/2} u,
  Lambda = H^{-1} (Lemma 1), within 2 % (Frobenius, relative)."""
  with jax.enable_x64(True):
    d, n = 8, 200_000
    _, h, _ = _quadratic()
    g = np.random.default_rng(4).standard_normal((d, d))
    W = g @ g.T / d
    key, s = jax.random.key(12), shared_seed.inverse_sqrt(jnp.asarray(h))
    z = np.asarray(jax.jit(jax.vmap(lambda r: shared_seed.direction(key, r, 0, 0, s, d, jnp.float64)))(
        jnp.arange(n)))
    q = np.einsum("ni,ij,nj->n", z, W, z)
    emp = (z * q[:, None]).T @ z / n
    Lam = np.diag(1.0 / h)
    pred = np.trace(W @ Lam) * Lam + 2 * Lam @ W @ Lam
    assert np.linalg.norm(emp - pred) <= 0.02 * np.linalg.norm(pred)
    np.testing.assert_allclose(np.cov(z.T), Lam, atol=0.02 * np.max(1 / h))   # z ~ N(0, H^{-1})


# --- 5. Byte ledger ------------------------------------------------------------------------

# (rounds, KB as printed) from Table 2 and Table 5 (P = 5, tau = 1; spec §3.3, §7 item 7).
TABLE_KB = [(550, 21.56), (775, 30.35), (1350, 52.73), (1500, 58.59), (1125, 43.95), (350, 13.67),
            (275, 10.78), (425, 16.64), (250, 9.77), (1075, 41.85), (750, 29.30), (175, 6.84)]


def test_byte_ledger_reproduces_paper_tables():
  task = make_illcond_quadratic_task(40, 6, 1.0)
  for name in ("decomfl", "hiso"):
    alg = algorithms.build(name, task, lr=1e-3, num_perturbations=5, local_steps=1, clients_per_round=2)
    _, stats = _run(alg, task, 3)
    per_client_round = ((np.asarray(stats.bytes_up) + np.asarray(stats.bytes_down))
                        // np.asarray(stats.participants))
    np.testing.assert_array_equal(per_client_round, [40, 40, 40])     # 2 * tau * P * 4 = 40 B
    for rounds, kb in TABLE_KB:
      assert abs(rounds * per_client_round[0] / 1024 - kb) <= 0.005 * kb
  alg = algorithms.build("hiso", task, lr=1e-3, num_perturbations=4, local_steps=3, clients_per_round=2)
  _, stats = _run(alg, task, 2)
  np.testing.assert_array_equal(np.asarray(stats.bytes_up), [2 * 3 * 4 * 4] * 2)
  # FedZO and first-order methods: 2 d float32 per client per round.
  for name in ("fedzo", "fedavg"):
    alg = algorithms.build(name, task, lr=1e-3, clients_per_round=2)
    _, stats = _run(alg, task, 1)
    assert int(stats.bytes_up[0]) + int(stats.bytes_down[0]) == 2 * 2 * 40 * 4


@pytest.mark.parametrize("tau", [1, 3])
def test_shared_start_gives_the_same_scalars(tau):
  # The round's fast path (step 0 outside the step scan when every client starts from the
  # same x) returns the same G and x_tau, bit for bit, as the scan over all tau steps.
  task = make_illcond_quadratic_task(16, 4, 1.0)
  parts = hiso.hiso_parts(task, hiso.HiSoConfig(num_perturbations=3, lr=1e-2, local_steps=tau,
                                                clients_per_round=4))
  x, h, key = jnp.linspace(-1.0, 1.0, 16), jnp.linspace(0.5, 2.0, 16), jax.random.key(3)
  keys = jax.random.split(jax.random.key(4), 4)

  def scalars(shared_start):
    f = functools.partial(parts.client_scalars, shared_start=shared_start)
    return jax.jit(jax.vmap(f, in_axes=(None, None, None, None, 0, 0)))(x, h, 5, key, task.client_data, keys)

  (g_scan, x_scan), (g_fast, x_fast) = scalars(False), scalars(True)
  assert g_scan.shape == (4, tau, 3)
  np.testing.assert_array_equal(np.asarray(g_fast), np.asarray(g_scan))
  np.testing.assert_array_equal(np.asarray(x_fast), np.asarray(x_scan))


# --- 6. Direction streams ------------------------------------------------------------------


def test_directions_depend_only_on_round_step_and_index():
  task = make_illcond_quadratic_task(64, 5, 1.0)
  base = dict(lr=1e-3, local_steps=2, clients_per_round=2)
  p3 = hiso.hiso_parts(task, hiso.HiSoConfig(num_perturbations=3, **base))
  p5 = hiso.hiso_parts(task, hiso.HiSoConfig(num_perturbations=5, **base))
  x, h, key = jnp.ones(64), jnp.full((64,), 2.0), jax.random.key(3)
  client = jax.tree_util.tree_map(lambda a: a[1], task.client_data)
  g3, _ = p3.client_scalars(x, h, 7, key, client, jax.random.key(0))
  g5, _ = p5.client_scalars(x, h, 7, key, client, jax.random.key(1))   # another batch key
  np.testing.assert_array_equal(np.asarray(g3[0]), np.asarray(g5[0, :3]))   # step 0: same x
  # The shared key is the run's shared stream (rng.init_keys): rounds (whose keys drive
  # client sampling and mini-batches) never touch it, so the directions of round r are
  # fold_in(shared, r, k, p) whatever the sampling.
  alg = algorithms.build("hiso", task, **base)
  s0 = jax.jit(alg.init)(*rng.init_keys(ROOT))
  s3, _ = _run(alg, task, 3, s0)
  shared = rng.stream(ROOT, "shared")
  for s in (s0, s3):
    np.testing.assert_array_equal(jax.random.key_data(s.shared_key), jax.random.key_data(shared))
  gbar = jnp.ones((2, 5))
  assert not np.array_equal(np.asarray(p5.apply_round(s0.x, s0.h, 5, shared, gbar)[0]),
                            np.asarray(p5.apply_round(s0.x, s0.h, 4, shared, gbar)[0]))


def test_bad_hyperparameters_raise():
  task = make_illcond_quadratic_task(10, 3, 1.0)
  for bad in (dict(nu=1.5), dict(eps=-1.0), dict(h0=0.0), dict(k_update="first"),
              dict(h_signal="x"), dict(fd_scheme="backward"), dict(client_state="all"),
              dict(num_perturbations=0), dict(clip_lo=2.0, clip_hi=1.0), dict(preconditioner="full"),
              dict(step_norm="max")):
    with pytest.raises(ValueError):
      algorithms.build("hiso", task, **bad)
