"""Random Fourier features (FZooS, seed 000 App. B, eqs. 6-7; specs/fzoos.md §7 check 1, §4 item 3)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedsim.estimators import rff


def test_lemma_c3_kernel_approximation_at_m_10000():
  """>= 99% of 1000 random pairs in [0,1]^300 satisfy |phi^T phi' - k| <= sqrt(8 ln(2/delta)/M)
  = 0.0651 (M = 10^4, delta = 0.01); half the pairs are close (k far from 0)."""
  M, d = 10_000, 300
  feats = rff.draw(jax.random.key(0), M, d)
  k1, k2, k3 = jax.random.split(jax.random.key(1), 3)
  x = jax.random.uniform(k1, (1000, d))
  far = jax.random.uniform(k2, (500, d))
  near = x[500:] + 0.05 * jax.random.uniform(k3, (500, d), minval=-1, maxval=1)
  xp = jnp.concatenate([far, near])
  approx = jnp.sum(rff.features(feats, x) * rff.features(feats, xp), axis=1)
  exact = rff.kernel_se(x, xp)
  assert float(jnp.max(exact[500:])) > 0.5
  bound = np.sqrt(8 * np.log(2 / 0.01) / M)
  assert abs(bound - 0.0651) < 1e-4
  assert float(jnp.mean(jnp.abs(approx - exact) <= bound)) >= 0.99


def test_rff_gradient_equals_autodiff_of_surrogate():
  """eq. 7: -sqrt(2/M) V^T (w * sin(V x + b)) == jax.grad(phi(x)^T w) (float64, 1e-10)."""
  with jax.enable_x64(True):
    feats = rff.draw(jax.random.key(2), 2000, 30, 0.8, jnp.float64)
    w = jax.random.normal(jax.random.key(3), (2000,), jnp.float64)
    for s in range(3):
      x = jax.random.uniform(jax.random.key(4 + s), (30,), jnp.float64)
      ana = rff.gradient(feats, w, x)
      auto = jax.grad(lambda z: rff.features(feats, z) @ w)(x)
      np.testing.assert_allclose(ana, auto, rtol=1e-10, atol=1e-10)


def test_kernel_error_decreases_like_inverse_sqrt_m():
  """RMS |phi^T phi' - k| over pairs scales like M^{-1/2} (log-log slope in [-0.7, -0.3])."""
  d = 5
  x = jax.random.uniform(jax.random.key(5), (400, d))
  xp = jax.random.uniform(jax.random.key(6), (400, d))
  exact = rff.kernel_se(x, xp)
  Ms = [100, 400, 1600, 6400]
  errs = []
  for M in Ms:
    e = []
    for rep in range(4):
      f = rff.draw(jax.random.fold_in(jax.random.key(7), 10 * M + rep), M, d)
      e.append(jnp.mean((jnp.sum(rff.features(f, x) * rff.features(f, xp), 1) - exact) ** 2))
    errs.append(float(jnp.sqrt(jnp.mean(jnp.array(e)))))
  slope = np.polyfit(np.log(Ms), np.log(errs), 1)[0]
  assert -0.7 <= slope <= -0.3, (slope, errs)


def test_weight_fit_interpolates_and_ignores_masked_rows():
  """eq. 6 with sigma^2 -> 0 and n < M: phi(x_tau)^T w = y_tau; padding rows change nothing."""
  with jax.enable_x64(True):
    feats = rff.draw(jax.random.key(8), 3000, 6, 1.0, jnp.float64)
    X = jax.random.uniform(jax.random.key(9), (40, 6), jnp.float64)
    y = jnp.sin(X @ jnp.arange(1.0, 7.0))
    w = rff.fit_weights(feats, X, y, jnp.ones(40, bool), ridge=1e-12)
    np.testing.assert_allclose(rff.features(feats, X) @ w, y, atol=1e-5)
    Xp = jnp.concatenate([X, jnp.full((10, 6), 5.0)])
    yp = jnp.concatenate([y, jnp.full((10,), 123.0)])
    wp = rff.fit_weights(feats, Xp, yp, jnp.arange(50) < 40, ridge=1e-12)
    np.testing.assert_allclose(wp, w, rtol=1e-7, atol=1e-9)
    # with a ridge, exactly Phi^T (Phi Phi^T + sigma^2 I)^{-1} y: sigma^2 added once
    P = np.asarray(rff.features(feats, X))
    ref = P.T @ np.linalg.solve(P @ P.T + 1e-3 * np.eye(40), np.asarray(y))
    np.testing.assert_allclose(rff.fit_weights(feats, X, y, jnp.ones(40, bool), ridge=1e-3), ref, rtol=1e-9)


def test_shared_draw_is_reproducible_from_the_init_key():
  k = jax.random.key(11)
  a = rff.draw(rff.shared_key(k), 50, 4)
  b = rff.draw(rff.shared_key(k), 50, 4)
  np.testing.assert_array_equal(a.V, b.V)
  np.testing.assert_array_equal(a.b, b.b)
  c = rff.draw(rff.shared_key(jax.random.key(12)), 50, 4)
  assert not np.allclose(a.V, c.V)


@pytest.mark.slow  # long; .ci/run runs it (pytest -m slow)
def test_lemma_c4_rff_gradient_converges_to_exact_gp_like_one_over_m():
  """Lemma C.4 (specs §7 check 3): with the history fixed, the squared gap between the RFF
  surrogate gradient grad phi(x)^T w (eq. 6-7, ridge sigma^2) and the exact SE-GP posterior-mean
  gradient with the same sigma^2 (eq. 5) falls like 1/M: the log-log slope over
  M in {1e3, 3e3, 1e4, 3e4} (mean over 16 feature draws) is in [-1.3, -0.7]."""
  from fedsim.estimators import gp
  with jax.enable_x64(True):
    n, d, noise = 20, 3, 1e-2
    X = jax.random.uniform(jax.random.key(5), (n, d), jnp.float64)
    y = jnp.sin(3 * X[:, 0]) + X[:, 1] ** 2
    x = jnp.full((d,), 0.4, jnp.float64)
    mask = jnp.ones((n,), bool)
    exact = gp.posterior_mean_grad("se", gp.fit("se", X, y, mask, x, 1.0, 1.0, noise, jitter=0.0), x)
    Ms = [1000, 3000, 10000, 30000]
    gaps = []
    for M in Ms:
      def one(key, M=M):
        f = rff.draw(key, M, d, 1.0, jnp.float64)
        return jnp.sum((rff.gradient(f, rff.fit_weights(f, X, y, mask, noise), x) - exact) ** 2)
      gaps.append(float(jnp.mean(jax.vmap(one)(jax.random.split(jax.random.key(M), 16)))))
    slope = np.polyfit(np.log(Ms), np.log(gaps), 1)[0]
    assert -1.3 <= slope <= -0.7, (slope, gaps)


def test_draw_follows_the_se_spectral_law_with_lengthscale():
  """App. B: v_j ~ N(0, I / l^2), b_j ~ U[0, 2 pi]. At l = 0.5, M = 20,000, d = 3: the sample
  std of V is 1/l = 2 (within 2%; the standard error is 0.4%), b lies in [0, 2 pi] with mean
  pi and variance (2 pi)^2 / 12 (within 3%), and phi^T phi' estimates exp(-|x - x'|^2/(2 l^2))
  within 0.03 (sqrt(8 ln(2/delta)/M) = 0.065 at delta = 0.01 bounds it by Lemma C.3)."""
  with jax.enable_x64(True):
    feats = rff.draw(jax.random.key(21), 20_000, 3, 0.5, jnp.float64)
    V, b = np.asarray(feats.V), np.asarray(feats.b)
    assert V.shape == (20_000, 3) and b.shape == (20_000,)
    assert abs(V.std() - 2.0) < 0.04 and abs(V.mean()) < 0.03
    assert b.min() >= 0 and b.max() <= 2 * np.pi
    assert abs(b.mean() - np.pi) < 0.03 * np.pi and abs(b.var() - (2 * np.pi) ** 2 / 12) < 0.03 * (2 * np.pi) ** 2 / 12
    x = np.array([[0.1, 0.2, 0.3], [0.5, 0.5, 0.5], [0.9, 0.0, 0.4]])
    xp = x + np.array([[0.05, -0.1, 0.2], [0.3, 0.3, -0.3], [0.0, 0.0, 0.0]])
    Phi = np.sqrt(2 / 20_000) * np.cos(x @ V.T + b)
    Phip = np.sqrt(2 / 20_000) * np.cos(xp @ V.T + b)
    exact = np.exp(-np.sum((x - xp) ** 2, 1) / (2 * 0.5 ** 2))
    assert np.abs(np.sum(Phi * Phip, 1) - exact).max() < 0.03


def test_features_gradient_and_fit_are_the_numpy_closed_forms():
  """phi(x) = sqrt(2/M) cos(V x + b) (App. B: the sqrt(2/M) scale, not its '2/sqrt(M)' typo);
  grad phi(x)^T w = -sqrt(2/M) V^T (w * sin(V x + b)) (eq. 7); w = Phi^T (Phi Phi^T + sigma^2 I)^{-1} y
  on the valid rows of a masked window (eq. 6)."""
  with jax.enable_x64(True):
    M, d = 50, 4
    feats = rff.draw(jax.random.key(22), M, d, 0.8, jnp.float64)
    V, b = np.asarray(feats.V), np.asarray(feats.b)
    rs = np.random.default_rng(3)
    X = rs.uniform(size=(9, d))
    np.testing.assert_allclose(rff.features(feats, jnp.asarray(X)), np.sqrt(2 / M) * np.cos(X @ V.T + b), rtol=1e-13)
    w = rs.normal(size=M)
    x = rs.uniform(size=d)
    np.testing.assert_allclose(rff.gradient(feats, jnp.asarray(w), jnp.asarray(x)),
                               -np.sqrt(2 / M) * V.T @ (w * np.sin(V @ x + b)), rtol=1e-12)
    y = np.cos(X @ np.arange(1.0, d + 1))
    mask = np.arange(9) < 6
    Xg, yg = np.where(mask[:, None], X, 3.0), np.where(mask, y, -5.0)
    P = np.sqrt(2 / M) * np.cos(X[:6] @ V.T + b)
    want = P.T @ np.linalg.solve(P @ P.T + 0.05 * np.eye(6), y[:6])
    got = rff.fit_weights(feats, jnp.asarray(Xg), jnp.asarray(yg), jnp.asarray(mask), ridge=0.05)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_fit_weights_singular_window_retries_with_jitter_and_stays_finite():
  # ridge = 0 (the code's min-norm fit) and one point repeated 8 times: Phi Phi^T has rank 1,
  # its float32 Cholesky fails (checked below), the retry adds 1e-6 jitter; the weights are
  # finite and interpolate the (consistent) target.
  r = rff.draw(jax.random.key(0), 64, 2)
  X = jnp.tile(jnp.array([[0.1, 0.2]], jnp.float32), (8, 1))
  y = jnp.full((8,), 0.7, jnp.float32)
  phi = rff.features(r, X)
  assert not bool(jnp.all(jnp.isfinite(jnp.linalg.cholesky(phi @ phi.T))))  # the retry is needed
  w = rff.fit_weights(r, X, y, jnp.ones(8, bool), ridge=0.0)
  assert np.all(np.isfinite(np.asarray(w)))
  np.testing.assert_allclose(np.asarray(phi @ w), np.asarray(y), atol=1e-2)


def test_cached_fit_equals_fit_weights_over_a_sequence_of_windows():
  """fit_weights_cached (eq. 6 reusing the cached phi(x) and Gram of the points a client's slots
  hold) gives fit_weights's w on the same window, for two clients at once, over windows that share
  rows, reorder them, mask some, and reuse a row position for a new point under a new id (a ring
  slot overwritten); chunks of 16 < the new rows (60 at first, then 15-40), so the new-row loop takes
  several steps. Tolerance 1e-12 x max|w|: the two differ only in the round-off of products of
  other shapes and of the slot order. After every fit each slot's features are phi of its point
  and G = Phi Phi^T over all slots (the invariant that lets a point re-enter without recomputation)."""
  with jax.enable_x64(True):
    M, d, n, H = 2000, 12, 60, 150
    feats = rff.draw(jax.random.key(30), M, d, 1.0, jnp.float64)
    rs = np.random.default_rng(4)
    HX, Hy = rs.normal(size=(2, H, d)) * 0.3, rs.normal(size=(2, H))
    ids = np.stack([np.arange(H), np.arange(H)])
    cache = jax.tree_util.tree_map(lambda a: jnp.stack([a, a]), rff.empty_cache(n, M, jnp.float64))
    cached = jax.jit(lambda X, y, m, i, c: rff.fit_weights_cached(feats, X, y, m, i, c, 1e-8, chunk=16))
    plain = jax.jit(jax.vmap(lambda X, y, m: rff.fit_weights(feats, X, y, m, 1e-8)))
    hits, rows = [], np.stack([np.arange(n), np.arange(n)])
    for it in range(8):
      for c in range(2):
        new = rs.choice(H, 10, replace=False)          # overwritten points: new x, new y, new id
        HX[c, new], Hy[c, new] = rs.normal(size=(10, d)) * 0.3, rs.normal(size=10)
        ids[c, new] = ids[c].max() + 1 + np.arange(10)
        if (it + c) % 3 == 0:                          # a shuffled window: 20 of its rows swapped
          rows[c] = rs.permutation(np.concatenate([rows[c, 20:], rs.choice(np.setdiff1d(np.arange(H), rows[c]), 20,
                                                                              replace=False)]))
        else:                                          # the nearest-first order of a drifting centre
          fresh = rs.choice(np.setdiff1d(np.arange(H), rows[c]), 15, replace=False)
          rows[c] = np.concatenate([fresh, rows[c, :n - 15]])
      mask = np.stack([np.arange(n) < (n - 3 * ((it + c) % 2)) for c in range(2)])
      prev = np.asarray(cache.ids)
      X = np.take_along_axis(HX, rows[..., None], 1)
      y, wid = np.take_along_axis(Hy, rows, 1), np.take_along_axis(ids, rows, 1).astype(np.int32)
      w, cache = cached(X, y, mask, wid, cache)
      hits.append(min(int(np.isin(np.where(mask[c], wid[c], -2), prev[c]).sum()) for c in range(2)))
      ref = plain(X, y, mask)
      np.testing.assert_allclose(w, ref, rtol=0, atol=1e-12 * float(jnp.max(jnp.abs(ref))))
      for c in range(2):
        held = np.asarray(cache.ids[c])
        assert set(wid[c][mask[c]]) <= set(held[held >= 0])              # every window point has a slot
        assert len(set(held[held >= 0])) == int((held >= 0).sum())        # no point in two slots
        for s in np.flatnonzero(held >= 0):                               # each slot: phi of its point
          (where,) = np.nonzero(ids[c] == held[s])
          if where.size:
            np.testing.assert_allclose(cache.Phi[c, s], rff.features(feats, HX[c, where[0]]), rtol=0, atol=1e-13)
        P = np.asarray(cache.Phi[c])
        np.testing.assert_allclose(cache.G[c], P @ P.T, rtol=0, atol=1e-12)
    assert hits[0] == 0 and min(hits[1:]) >= 20 and max(hits[1:]) < n   # rows reused and new rows
    # An id that stays but whose point changed is not detected (ids must identify points):
    # the cached fit then differs, which is what the test above would catch.
    X2 = X.copy()
    X2[0, 0] += 1.0
    w_stale, _ = cached(X2, y, mask, wid, cache)
    assert float(jnp.max(jnp.abs(w_stale - plain(X2, y, mask)))) > 1e-6


@pytest.mark.parametrize("n, M, radius", [(60, 2000, 0.01), (60, 2000, 1.0)])
def test_float32_fit_of_a_near_singular_window_is_finite_and_near_the_float64_fit(n, M, radius):
  """FZooS's windows (queries within `radius` of x_r, SE kernel l = 1, y min-max normalised):
  at radius 0.01 the float32 Cholesky of G + sigma^2 I fails with the code's sigma^2 = 1e-8
  and the 1e-6 retry (checked: the fit was NaN before rff.float32_jitter); with the u tr(G)
  floor the float32 w is finite, interpolates y to 1% and gives eq. 7's gradient at x_r within
  2% of the float64 fit of the same draw and window."""
  with jax.enable_x64(True):
    r64 = rff.draw(jax.random.key(5), M, 4, 1.0, jnp.float64)
    rs = np.random.default_rng(0)
    x0 = rs.normal(size=4)
    X = x0 + radius * rs.uniform(-1, 1, size=(n, 4))
    y = np.sum((X - 0.3) ** 2, 1)
    y = (y - y.min()) / (y.max() - y.min())
    mask = jnp.ones(n, bool)
    w64 = rff.fit_weights(r64, jnp.asarray(X), jnp.asarray(y), mask, 1e-8)
    r32 = rff.RFF(r64.V.astype(jnp.float32), r64.b.astype(jnp.float32))
    X32, y32 = jnp.asarray(X, jnp.float32), jnp.asarray(y, jnp.float32)
    phi32 = rff.features(r32, X32)
    old = jnp.linalg.cholesky(phi32 @ phi32.T + (1e-8 + 1e-6 + 1e-6) * jnp.eye(n, dtype=jnp.float32))
    assert bool(jnp.all(jnp.isfinite(old))) == (radius > 0.1)  # without the floor: no factor at 0.01
    w32 = rff.fit_weights(r32, X32, y32, mask, 1e-8)
    assert w32.dtype == jnp.float32 and np.all(np.isfinite(np.asarray(w32)))
    w = w32.astype(jnp.float64)
    Phi = rff.features(r64, jnp.asarray(X))
    assert float(jnp.linalg.norm(Phi @ w - y) / np.linalg.norm(y)) < 1e-2
    g64, g32 = rff.gradient(r64, w64, jnp.asarray(x0)), rff.gradient(r64, w, jnp.asarray(x0))
    assert float(jnp.linalg.norm(g32 - g64) / jnp.linalg.norm(g64)) < 2e-2
    # The float64 fit is eq. 6 with sigma^2 as given (no floor): --x64 runs are unchanged.
    A = np.asarray(Phi @ Phi.T) + 1e-8 * np.eye(n)
    np.testing.assert_allclose(w64, np.asarray(Phi).T @ np.linalg.solve(A, y), rtol=1e-6,
                               atol=1e-6 * float(jnp.max(jnp.abs(w64))))


def test_fast_cos_is_within_two_ulp_of_jnp_cos():
  """rff.fast_cos (the cached fit's cosine of V x + b): float64 within 2^-52 of jnp.cos everywhere
  and within 2 ulp where |cos a| >= 2^-10 (near cos's zeros the reduction's ~1e-29 absolute error is
  many of their ulps), on arguments up to FAST_COS_MAX in size (both signs, octant boundaries, 0);
  jnp.cos itself for an array with a larger argument and for float32; under jit."""
  with jax.enable_x64(True):
    rs = np.random.default_rng(0)
    k = np.arange(-4000, 4000)
    a = np.concatenate([rs.normal(0.0, 40.0, 200_000), rs.uniform(-rff.FAST_COS_MAX, rff.FAST_COS_MAX, 20_000),
                        k * np.pi / 4, np.nextafter(k * np.pi / 4, np.inf), [0.0, -0.0]])
    want = np.cos(a)
    got = np.asarray(jax.jit(rff.fast_cos)(jnp.asarray(a)))
    err = np.abs(got - want)
    assert err.max() <= 2.0 ** -52, err.max()
    big_enough = np.abs(want) >= 2.0 ** -10
    ulps = err[big_enough] / np.spacing(np.abs(want[big_enough]))
    assert ulps.max() <= 2, ulps.max()
    big = jnp.asarray(np.append(a[:100], 2 * rff.FAST_COS_MAX))
    np.testing.assert_array_equal(jax.jit(rff.fast_cos)(big), jax.jit(jnp.cos)(big))
    a32 = jnp.asarray(a[:1000], jnp.float32)
    np.testing.assert_array_equal(jax.jit(rff.fast_cos)(a32), jax.jit(jnp.cos)(a32))
