"""GP posterior of the gradient (FZooS, seed 000 eqs. 4-5; specs/fzoos.md §7 check 2, §4 items 1, 5).

All in float64 (``jax.enable_x64`` scoped to each test).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedsim.estimators import gp


def _data(n=30, d=5, seed=0, invalid=5):
  k1, k2 = jax.random.split(jax.random.key(seed))
  X = jax.random.uniform(k1, (n, d), jnp.float64)
  y = jnp.sin(3 * X[:, 0]) + jnp.sum(X ** 2, axis=1) + 0.1 * jax.random.normal(k2, (n,), jnp.float64)
  mask = jnp.arange(n) < n - invalid
  return X, y, mask


@pytest.mark.parametrize("kind", gp.KERNELS)
@pytest.mark.parametrize("ls", [0.5, 1.0])
def test_mean_grad_equals_autodiff_of_posterior_mean(kind, ls):
  with jax.enable_x64(True):
    X, y, mask = _data()
    # Padding slots hold garbage that must not matter.
    X = X.at[-5:].set(99.0)
    post = gp.fit(kind, X, y, mask, X[0], ls, 1.0, 1e-6)
    for x in (X[3] + 0.05, jnp.full((5,), 0.3, jnp.float64)):
      ana = gp.posterior_mean_grad(kind, post, x)
      auto = jax.grad(lambda z: gp.posterior_mean(kind, post, z))(x)
      np.testing.assert_allclose(ana, auto, rtol=1e-8, atol=1e-10 * float(jnp.linalg.norm(auto)))
      # and central finite differences of the posterior mean (eq. 5 is the derivative of eq. 4)
      h = 1e-5
      fd = jnp.array([(gp.posterior_mean(kind, post, x + h * e) - gp.posterior_mean(kind, post, x - h * e)) / (2 * h)
                      for e in jnp.eye(5)])
      np.testing.assert_allclose(ana, fd, rtol=1e-5, atol=1e-7)


def test_mean_grad_recovers_known_gradient():
  """Dense data of f(x) = sin(2 x_1) + x_2^2 in 2-d: grad mu(x) ~ grad f(x) inside the cloud."""
  with jax.enable_x64(True):
    g = jnp.linspace(-1.0, 1.0, 9)
    X = jnp.stack(jnp.meshgrid(g, g), -1).reshape(-1, 2)
    def f(z):
      return jnp.sin(2 * z[..., 0]) + z[..., 1] ** 2
    post = gp.fit("se", X, f(X), jnp.ones(X.shape[0], bool), jnp.zeros(2), 0.5, 1.0, 1e-8)
    x = jnp.array([0.1, -0.2])
    np.testing.assert_allclose(gp.posterior_mean_grad("se", post, x), jax.grad(f)(x), atol=2e-3)


@pytest.mark.parametrize("kind", gp.KERNELS)
def test_grad_cov_formula_and_trace(kind):
  """dsigma^2(x) = d_x d_x' k - J^T A^{-1} J with J from autodiff of k; trace helper agrees."""
  with jax.enable_x64(True):
    X, y, mask = _data(n=12, d=4, invalid=2)
    post = gp.fit(kind, X, y, mask, X[0], 0.7, 1.0, 1e-6)
    x = X[1] + 0.03
    def k(z, xp):
      return gp.kernel_from_sqdist(kind, jnp.sum((z - xp) ** 2), 0.7, 1.0)
    J = jax.vmap(lambda xp: jax.grad(k)(x, xp))(X) * mask[:, None]
    m = mask.astype(jnp.float64)
    A = jax.vmap(lambda a: jax.vmap(lambda b: k(a, b))(X))(X) * m[:, None] * m[None] + jnp.diag(1e-6 * m + 1 - m)
    if kind == "se":  # d_x d_x' k at x = x' by autodiff (Matern's r = 0 is a kink of sqrt)
      hess = jax.jacfwd(jax.grad(k, argnums=1), argnums=0)(x, x + 0.0)
    else:  # Matern-5/2 near r = 0: k ~ s^2 (1 - 5 r^2 / (6 l^2)), so d_x d_x' k = 5 s^2/(3 l^2) I
      hess = 5.0 / (3.0 * 0.49) * jnp.eye(4)
    expected = hess - J.T @ jnp.linalg.solve(A + 1e-10 * jnp.eye(12), J)
    cov = gp.posterior_grad_cov(kind, post, x)
    np.testing.assert_allclose(cov, expected, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(jnp.diagonal(hess), gp.kappa(kind, 0.7), rtol=1e-10)
    tr = gp.posterior_grad_cov_trace(kind, post, jnp.stack([x, X[2] - 0.01]))
    np.testing.assert_allclose(tr[0], jnp.trace(cov), rtol=1e-8)
    np.testing.assert_allclose(tr[1], jnp.trace(gp.posterior_grad_cov(kind, post, X[2] - 0.01)), rtol=1e-8)


@pytest.mark.parametrize("kind", gp.KERNELS)
def test_adding_points_never_increases_gradient_uncertainty(kind):
  """Lemma C.6: dsigma^2 is non-increasing in PSD order as data are added; so is its trace."""
  with jax.enable_x64(True):
    n, d = 20, 6
    X = jax.random.uniform(jax.random.key(1), (n, d), jnp.float64)
    x = jnp.full((d,), 0.5, jnp.float64)
    prev_cov, prev_tr = None, None
    for m in range(n + 1):
      post = gp.fit(kind, X, jnp.zeros(n), jnp.arange(n) < m, x, 1.0, 1.0, 1e-6)
      cov = gp.posterior_grad_cov(kind, post, x)
      tr = float(gp.posterior_grad_cov_trace(kind, post, x[None])[0])
      if prev_cov is not None:
        assert tr <= prev_tr + 1e-9
        assert float(jnp.min(jnp.linalg.eigvalsh(prev_cov - cov))) >= -1e-8
      prev_cov, prev_tr = cov, tr
    assert prev_tr < d * float(gp.kappa(kind, 1.0))


@pytest.mark.slow  # long; .ci/run runs it (pytest -m slow)
def test_uncertainty_shrinks_near_observations_and_spectral_norm_degenerates():
  """Near a dense cloud the trace falls far below the prior d*kappa; far away it stays at it;
  with n < d the spectral norm stays exactly kappa (specs §2.4.1)."""
  with jax.enable_x64(True):
    d = 3
    c = jnp.full((d,), 0.5)
    X = c + 0.1 * jax.random.uniform(jax.random.key(2), (40, d), jnp.float64, -1, 1)
    post = gp.fit("se", X, jnp.zeros(40), jnp.ones(40, bool), c, 1.0, 1.0, 1e-8)
    tr = gp.posterior_grad_cov_trace("se", post, jnp.stack([c, c + 10.0]))
    assert float(tr[0]) < 0.05 * d
    np.testing.assert_allclose(tr[1], d, rtol=1e-8)
    d2 = 10
    X2 = jax.random.uniform(jax.random.key(3), (4, d2), jnp.float64)
    post2 = gp.fit("se", X2, jnp.zeros(4), jnp.ones(4, bool), X2[0], 1.0, 1.0, 1e-6)
    cov = gp.posterior_grad_cov("se", post2, X2[0] + 0.1)
    np.testing.assert_allclose(jnp.linalg.eigvalsh(cov)[-1], 1.0, rtol=1e-9)
    assert float(jnp.trace(cov)) < d2


def test_optimal_gamma_minimises_disparity():
  """Prop. 1: gamma* = (grad F - g)^T c / ||c||^2 minimises ||g + gamma c - grad F||^2 (grid, 1e-6)."""
  with jax.enable_x64(True):
    grid = jnp.linspace(-3.0, 3.0, 600001)
    for s in range(5):
      g, c, gF = jax.random.normal(jax.random.key(10 + s), (3, 20), jnp.float64)
      gs = gp.optimal_gamma(g, c, gF)
      def xi(gam, g=g, c=c, gF=gF):
        return jnp.sum((g + gam * c - gF) ** 2)
      vals = jax.vmap(xi)(grid)
      assert abs(float(grid[jnp.argmin(vals)]) - float(gs)) <= 1e-5 + 1e-6
      assert float(xi(gs)) <= float(jnp.min(vals)) + 1e-9
      expected_min = jnp.sum((g - gF) ** 2) - jnp.sum((gF - g) * c) ** 2 / jnp.sum(c * c)
      np.testing.assert_allclose(xi(gs), expected_min, rtol=1e-10)


def test_select_lengthscale_prefers_the_generating_scale():
  with jax.enable_x64(True):
    X = jax.random.uniform(jax.random.key(4), (60, 1), jnp.float64) * 4
    y = jnp.sin(4 * X[:, 0])  # wiggly: short lengthscale
    ls = gp.select_lengthscale("se", X, y, jnp.ones(60, bool), (0.1, 0.3, 1.0, 3.0, 10.0))
    assert float(ls) in (0.1, 0.3)


@pytest.mark.slow  # long; .ci/run runs it (pytest -m slow)
@pytest.mark.parametrize("kind", gp.KERNELS)
def test_lemma_c1_gradient_error_bound_on_exact_gp_samples(kind):
  """Lemma C.1 (specs §4 item 2, §7 check 2): with f ~ GP(0, k), ||grad mu(x) - grad f(x)||^2 <=
  omega ||dsigma^2(x)||, omega = d + 2 (sqrt(d) + 1) ln(1/delta), in at least 1 - delta of the
  draws (delta = 0.05). (y at the n inputs, grad f(x)) is drawn jointly and exactly from its
  Gaussian (covariances k, d_x k, d_x d_x' k); the whitened error must also have E||.||^2 = d
  (it is N(0, I) when eq. 5's mean and covariance are right), which a wrong covariance fails."""
  with jax.enable_x64(True):
    n, d, ls, noise, trials, delta = 15, 4, 0.7, 1e-4, 400, 0.05
    X = jax.random.uniform(jax.random.key(11), (n, d), jnp.float64)
    x = jnp.full((d,), 0.5, jnp.float64)
    def k(a, b):
      return gp.kernel_from_sqdist(kind, jnp.sum((a - b) ** 2), ls, 1.0)
    Kxx = jax.vmap(lambda a: jax.vmap(lambda b: k(a, b))(X))(X) + noise * jnp.eye(n)
    Kgx = jax.vmap(lambda b: jax.grad(k)(x, b))(X).T                       # (d, n) cov(grad f(x), y)
    Kgg = gp.kappa(kind, ls) * jnp.eye(d)                                   # d_x d_x' k at x = x'
    if kind == "se":  # the closed form agrees with autodiff (Matern's sqrt(r^2) has no autodiff at r = 0)
      np.testing.assert_allclose(jax.jacfwd(jax.grad(k, argnums=0), argnums=1)(x, x), Kgg, rtol=1e-12)
    cov = jnp.block([[Kxx, Kgx.T], [Kgx, Kgg]])
    L = jnp.linalg.cholesky(cov + 1e-12 * jnp.eye(n + d))
    z = jax.random.normal(jax.random.key(12), (trials, n + d), jnp.float64) @ L.T
    ys, gs = z[:, :n], z[:, n:]
    mask = jnp.ones((n,), bool)
    post = jax.vmap(lambda y: gp.fit(kind, X, y, mask, x, ls, 1.0, noise))(ys)
    mu = jax.vmap(lambda p: gp.posterior_mean_grad(kind, p, x))(post)
    S = gp.posterior_grad_cov(kind, jax.tree.map(lambda a: a[0], post), x)   # same for every draw
    err = mu - gs
    omega = d + 2 * (np.sqrt(d) + 1) * np.log(1 / delta)
    ok = np.sum(np.asarray(err) ** 2, axis=1) <= omega * float(jnp.linalg.norm(S, 2))
    assert ok.mean() >= 1 - delta, ok.mean()
    w = jnp.linalg.solve(jnp.linalg.cholesky(S), err.T)                     # whitened (d, trials)
    chi2 = np.asarray(jnp.sum(w ** 2, axis=0))
    # mean of chi^2_d over 400 draws: sd sqrt(2d/400) = 0.14 at d = 4
    assert abs(chi2.mean() - d) < 0.6, chi2.mean()


# ------------------------------------------------ closed forms written out in NumPy

def _k_np(kind, X, Y, ls, var):
  """SE: s^2 exp(-r^2/(2 l^2)); Matern-5/2: s^2 (1 + sqrt5 r/l + 5 r^2/(3 l^2)) exp(-sqrt5 r/l)."""
  r = np.sqrt(np.sum((X[:, None, :] - Y[None, :, :]) ** 2, -1))
  if kind == "se":
    return var * np.exp(-r ** 2 / (2 * ls ** 2))
  return var * (1 + np.sqrt(5) * r / ls + 5 * r ** 2 / (3 * ls ** 2)) * np.exp(-np.sqrt(5) * r / ls)


def _dk_np(kind, x, Y, ls, var):
  """d_x k(x, y_a) (n, d) by hand: SE -(x - y)/l^2 k; Matern -(5 s^2/(3 l^2)) (1 + sqrt5 r/l) e^{-sqrt5 r/l} (x - y)."""
  diff = x[None, :] - Y
  r = np.sqrt(np.sum(diff ** 2, -1))
  if kind == "se":
    g = -var * np.exp(-r ** 2 / (2 * ls ** 2)) / ls ** 2
  else:
    g = -var * 5 / (3 * ls ** 2) * (1 + np.sqrt(5) * r / ls) * np.exp(-np.sqrt(5) * r / ls)
  return g[:, None] * diff


@pytest.mark.parametrize("kind", gp.KERNELS)
def test_kernel_its_gradient_and_kappa_are_the_closed_forms(kind):
  """s^2 = 1.7, l = 0.6 (a constant, an l-vs-l^2 or a sign slip shows). The NumPy derivative is
  itself checked against central differences of the NumPy kernel; kappa = s^2/l^2 (SE),
  5 s^2/(3 l^2) (Matern-5/2)."""
  with jax.enable_x64(True):
    ls, var = 0.6, 1.7
    rs = np.random.default_rng(0)
    x, Y = rs.uniform(size=3), rs.uniform(size=(6, 3))
    sq = np.sum((x - Y) ** 2, -1)
    np.testing.assert_allclose(gp.kernel_from_sqdist(kind, jnp.asarray(sq), ls, var),
                               _k_np(kind, x[None], Y, ls, var)[0], rtol=1e-13)
    dk = _dk_np(kind, x, Y, ls, var)
    h = 1e-6
    fd = np.stack([(_k_np(kind, (x + h * e)[None], Y, ls, var)[0] - _k_np(kind, (x - h * e)[None], Y, ls, var)[0])
                   / (2 * h) for e in np.eye(3)], axis=1)
    np.testing.assert_allclose(dk, fd, rtol=1e-7, atol=1e-10)
    g = np.asarray(gp.kernel_grad_scale(kind, jnp.asarray(sq), ls, var))
    np.testing.assert_allclose(g[:, None] * (x - Y), dk, rtol=1e-12)
    want = var / ls ** 2 if kind == "se" else 5 * var / (3 * ls ** 2)
    np.testing.assert_allclose(float(gp.kappa(kind, ls, var)), want, rtol=1e-14)


@pytest.mark.parametrize("kind", gp.KERNELS)
def test_posterior_mean_gradient_covariance_and_likelihood_against_numpy(kind):
  """eqs. 4-5 on a masked window (the last 3 of 12 slots are padding holding garbage), in
  NumPy on the 9 valid points: A = K + (sigma^2 + jitter) I, alpha = A^{-1} y,
  mu = k^T alpha, grad mu = J^T alpha, dsigma^2 = kappa I - J^T A^{-1} J, its trace for
  candidates, log p(y) = -y^T alpha / 2 - log|A| / 2 - n log(2 pi) / 2, and the grid
  lengthscale of largest log p(y)."""
  with jax.enable_x64(True):
    ls, var, noise = 0.7, 1.3, 1e-3
    jit = 1e-10 * var                                    # gp.fit's float64 default jitter
    rs = np.random.default_rng(1)
    X = rs.uniform(size=(12, 4))
    y = np.sin(3 * X[:, 0]) + X[:, 1] ** 2
    mask = np.arange(12) < 9
    Xg = X.copy()
    Xg[9:] = 50.0
    yg = np.where(mask, y, 7.0)
    Xv, yv = X[:9], y[:9]
    A = _k_np(kind, Xv, Xv, ls, var) + (noise + jit) * np.eye(9)
    alpha = np.linalg.solve(A, yv)
    post = gp.fit(kind, jnp.asarray(Xg), jnp.asarray(yg), jnp.asarray(mask), jnp.asarray(X[0]), ls, var, noise)
    np.testing.assert_allclose(np.asarray(post.alpha)[:9], alpha, rtol=1e-9, atol=1e-9 * np.abs(alpha).max())
    kappa = var / ls ** 2 if kind == "se" else 5 * var / (3 * ls ** 2)
    for x in (X[2] + 0.05, np.full(4, 0.3)):
      k = _k_np(kind, x[None], Xv, ls, var)[0]
      J = _dk_np(kind, x, Xv, ls, var)
      np.testing.assert_allclose(float(gp.posterior_mean(kind, post, jnp.asarray(x))), k @ alpha, rtol=1e-9)
      np.testing.assert_allclose(gp.posterior_mean_grad(kind, post, jnp.asarray(x)), J.T @ alpha, rtol=1e-8,
                                 atol=1e-10)
      cov = kappa * np.eye(4) - J.T @ np.linalg.solve(A, J)
      np.testing.assert_allclose(gp.posterior_grad_cov(kind, post, jnp.asarray(x)), cov, rtol=1e-8, atol=1e-10)
    cands = rs.uniform(size=(5, 4))
    want = [4 * kappa - np.trace(np.linalg.solve(A, _dk_np(kind, c, Xv, ls, var) @ _dk_np(kind, c, Xv, ls, var).T))
            for c in cands]
    np.testing.assert_allclose(gp.posterior_grad_cov_trace(kind, post, jnp.asarray(cands)), want, rtol=1e-8)

    def lml(ell):
      Al = _k_np(kind, Xv, Xv, ell, 1.0) + (noise + 1e-10) * np.eye(9)
      return (-0.5 * yv @ np.linalg.solve(Al, yv) - 0.5 * np.linalg.slogdet(Al)[1] - 4.5 * np.log(2 * np.pi))
    args = (kind, jnp.asarray(Xg), jnp.asarray(yg), jnp.asarray(mask))
    np.testing.assert_allclose(float(gp.log_marginal_likelihood(*args, 0.4, 1.0, noise)), lml(0.4), rtol=1e-9)
    grid = (0.05, 0.2, 0.5, 1.0, 3.0)
    assert float(gp.select_lengthscale(*args, grid, noise=noise)) == grid[int(np.argmax([lml(ell) for ell in grid]))]


@pytest.mark.parametrize("kind", gp.KERNELS)
def test_padding_alpha_is_zero_and_default_lengthscale_is_the_papers(kind):
  # GPPosterior's contract: alpha is exactly 0 on invalid slots (their y is taken as 0);
  # fit's default lengthscale is App. B's l = 1.
  with jax.enable_x64(True):
    X, y, mask = _data()
    y = y.at[-5:].set(7.0)                       # garbage targets in the padding
    post = gp.fit(kind, X, y, mask, X[0])
    assert np.all(np.asarray(post.alpha)[~np.asarray(mask)] == 0.0)
    assert float(post.lengthscale) == 1.0
    # and the default-lengthscale posterior is the l = 1 one, not another scale
    x = jnp.full((5,), 0.3, jnp.float64)
    ref = gp.posterior_mean(kind, gp.fit(kind, X, y, mask, X[0], 1.0), x)
    other = gp.posterior_mean(kind, gp.fit(kind, X, y, mask, X[0], 2.0), x)
    assert float(gp.posterior_mean(kind, post, x)) == float(ref) != float(other)


@pytest.mark.parametrize("kind", gp.KERNELS)
def test_kernel_gradient_is_finite_at_zero_distance(kind):
  # _radius: r = sqrt(sq) with a finite derivative at sq = 0 (a GP queried at one of
  # its own points); the kernel is even in r, so d k / d x at x = x_j is 0.
  with jax.enable_x64(True):
    g = jax.grad(lambda s: gp.kernel_from_sqdist(kind, s, 1.0))(jnp.float64(0.0))
    assert np.isfinite(float(g))
    X, y, mask = _data()
    post = gp.fit(kind, X, y, mask, X[0], 1.0)
    auto = jax.grad(lambda z: gp.posterior_mean(kind, post, z))(X[3])
    assert np.all(np.isfinite(np.asarray(auto)))
    np.testing.assert_allclose(gp.posterior_mean_grad(kind, post, X[3]), auto, rtol=1e-7, atol=1e-9)


def test_optimal_gamma_by_hand_and_zero_without_a_correction():
  # Prop. 1: (grad F - g)^T c / ||c||^2; g = (1, 0), c = (1, 1), grad F = (3, 2): 4 / 2 = 2.
  g, c, gf = jnp.array([1.0, 0.0]), jnp.array([1.0, 1.0]), jnp.array([3.0, 2.0])
  assert float(gp.optimal_gamma(g, c, gf)) == 2.0
  assert float(gp.optimal_gamma(g, jnp.zeros(2), gf)) == 0.0   # c = 0: gamma = 0
