"""Weak-learning oracles for functional boosting (FFGB, Shen et al. 2022, §2, App. B.3).

An oracle regresses a query phi given by its values on one client's points
(supp alpha_i) onto a learner class: WO^2_alpha (eq. 9 / eq. 23),
min_theta sum_{x in supp alpha_i} ||phi(x) - h_theta(x)||^2. Every oracle is a
:class:`WeakOracle` of two pure functions on ONE client, so the algorithms
``jax.vmap`` them over the sampled clients (and ``lax.scan`` over the K local
steps):

* ``fit(key, x, phi, mask, n) -> params``: x (M, *feature_shape) float32, phi
  (M, C) float32, mask (M,) bool (padding rows False), n int32 scalar (the
  number of real rows, which are the first n). Padded rows never enter the fit.
* ``apply(params, xq) -> (B, C)`` float32: the learner h evaluated anywhere.

Oracles (specs/ffgb.md §2.5, §4.2, §6.1):

* ``scaled``: h = gamma * phi exactly on supp alpha_i (the synthetic oracle
  that meets (9), (13), (19), (20) with equality, §4.2). Off the support h is
  the 1-nearest-neighbour extension of those values (any extension is
  allowed by the theory; 1-NN keeps shared-grid problems exact).
* ``rf_ridge``: ridge regression on random Fourier features (Rahimi & Recht
  2007): closed form (Phi^T Phi + lam n I)^{-1} Phi^T phi, one Cholesky solve
  per call in plain XLA ops (§6.1 item 2); the features are drawn from each
  call's key (the run's round -> client -> step key), see :func:`rf_ridge_oracle`.
* ``mlp``: the paper's weak learner (App. B.1): MLP d -> 32 -> 32 -> C with leaky
  ReLU (slope 0.01), trained from a FRESH initialisation with a FRESH optax Adam
  state (App. B.3: "Adam for 1000 steps ... initial step size 0.005"; [code]
  batch 128, MSE mean over batch and outputs) inside ``lax.scan``. Minibatch
  indices are ``randint(0, n)`` (with replacement); ``dedup=True`` drops the
  repeats as the code's ``torch.unique`` does (batches of at most ``batch``).
* ``cnn``: the paper's CIFAR10 weak learner (App. B.1; specs §3.1): the PyTorch
  tutorial CNN conv(6, 5x5) - maxpool 2 - conv(16, 5x5) - maxpool 2 - FC 32 -
  FC 32 - C with leaky ReLU ([code]), trained exactly like ``mlp``. On images
  smaller than 16 pixels (8x8 digits) the convolutions use 'SAME' padding so
  two 5x5 convolutions fit; otherwise 'VALID' as in the tutorial.
* ``wo_inf``: the L-infinity oracle WO^inf of FFGB.C (eq. 13), implemented as
  App. B.3 eq. (24), min_theta max_{x in supp alpha_i} ||phi(x) - h_theta(x)||^2,
  with the max replaced by a smooth max, the power mean of the squared
  residuals r_j = ||phi(x_j) - h(x_j)||^2 (:func:`wo_inf_loss`,
  ((1/n) sum_j r_j^p)^{1/p}: p = 1 is eq. 23's mean, p -> inf eq. 24's max, and
  n^{-1/p} max_j r_j <= loss <= max_j r_j; specs/ffgb.md §2.5 "a high L^p
  norm"). Its gradient weighs point j by r_j^{p-1}: the hardest points dominate.
  The learner (``family``: ``linear``, ``rf`` (random Fourier features),
  ``mlp``, ``cnn``; see :data:`FAMILIES`) is trained full batch (a max over the
  support is not estimated by a minibatch) by Adam from a fresh init.
* ``wo_lip``: the Sobolev oracle WO^lip of FFGB.L (eqs. 19-20), implemented as
  App. B.3 eq. (25): the ``wo_inf`` loss plus ``sobolev_weight`` times the mean
  over Monte-Carlo points z_s of ||grad_x phi(z_s) - grad_x h_theta(z_s)||_F^2
  (the integral over X of eq. 25, as an average over points drawn uniformly in
  the client's bounding box, :func:`sobolev_points`; Czarnecki et al. 2017).
  The caller gives the query's input-Jacobians at z (FFGB.L has them in closed
  form, specs §2.4-2.5); its ``fit`` takes ``(key, x, phi, mask, n, z, dphi)``.
  Vector inputs only (the Jacobian is taken w.r.t. the flattened input).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from fedsim import models

PyTree = Any
ORACLES = models.WEAK_ORACLES
FAMILIES = models.WEAK_FAMILIES  # learner classes trained by wo_inf / wo_lip


class WeakOracle(NamedTuple):
  """A weak-learning oracle on one client (see module docstring).

  Attributes:
    name: oracle name.
    fit: ``(key, x, phi, mask, n) -> params``; Sobolev oracles (``sobolev``)
      also take ``z`` (S, d) Monte-Carlo points and ``dphi`` (S, C, d), the
      query's input-Jacobians there (omitted: the gradient term is dropped).
    apply: ``(params, xq) -> (B, C)``.
    sobolev: True for ``wo_lip`` (eq. 25).
  """
  name: str
  fit: Callable[..., PyTree]
  apply: Callable[[PyTree, jax.Array], jax.Array]
  sobolev: bool = False


def _flat(x, feature_ndim):
  return x.reshape(x.shape[:x.ndim - feature_ndim] + (-1,))


# --------------------------------------------------------------------------- scaled
def scaled_oracle(gamma: float, feature_ndim: int = 1) -> WeakOracle:
  """h = gamma * phi on supp alpha_i (specs/ffgb.md §4.2), 1-NN extension elsewhere.

  Args:
    gamma: oracle quality in (0, 1]; ||h - phi|| = (1 - gamma) ||phi|| in every
      norm on the client's support.
    feature_ndim: number of trailing feature axes of x.

  Returns:
    The oracle; its params are {"x": (M, d), "v": (M, C), "mask": (M,)}.
  """
  def fit(key, x, phi, mask, n):
    del key, n
    return {"x": _flat(x, feature_ndim), "v": gamma * jnp.where(mask[:, None], phi, 0.0),
            "mask": mask}

  def apply(params, xq):
    xq = _flat(xq, feature_ndim)
    px = params["x"]
    d2 = (jnp.sum(xq * xq, -1)[:, None] - 2.0 * xq @ px.T + jnp.sum(px * px, -1)[None, :])
    d2 = jnp.where(params["mask"][None, :], d2, jnp.inf)
    return params["v"][jnp.argmin(d2, axis=1)]

  return WeakOracle("scaled", fit, apply)


# --------------------------------------------------------------------------- rf_ridge
def spd_solve(a, b):
  """x = a^{-1} b for a symmetric positive definite ``a``, by Cholesky in plain XLA ops.

  a = L L^T column by column (left-looking: L[:, j] = (a[:, j] - L L[j]^T) /
  sqrt(.)_j on rows >= j), then L y = b and L^T x = y by substitution, each a
  ``lax.fori_loop`` of D matrix-vector steps (O(D^3) work, D sequential steps).
  No LAPACK custom call: under ``vmap`` jaxlib's batched LAPACK LU
  (``jnp.linalg.solve``) deadlocks the CPU thread pool when 8 host devices
  (``--xla_force_host_platform_device_count=8``) run it at once.

  Args:
    a: (D, D) float SPD matrix (no check: a non-SPD ``a`` gives NaN).
    b: (D, C) float right-hand sides.

  Returns:
    (D, C) float, the solution.
  """
  D = a.shape[0]
  rows = jnp.arange(D)
  hp = jax.lax.Precision.HIGHEST  # GPUs would otherwise use TF32 in these dots

  def chol_col(j, L):
    v = a[:, j] - jnp.dot(L, L[j], precision=hp)  # columns >= j of L are still 0
    return L.at[:, j].set(jnp.where(rows >= j, v / jnp.sqrt(v[j]), 0.0))

  L = jax.lax.fori_loop(0, D, chol_col, jnp.zeros_like(a))

  def fwd(i, y):  # L y = b (entries >= i of y are still 0)
    return y.at[i].set((b[i] - jnp.dot(L[i], y, precision=hp)) / L[i, i])

  y = jax.lax.fori_loop(0, D, fwd, jnp.zeros_like(b))

  def bwd(r, x):  # L^T x = y, i = D-1..0 (entries <= i of x are still 0)
    i = D - 1 - r
    return x.at[i].set((y[i] - jnp.dot(L[:, i], x, precision=hp)) / L[i, i])

  return jax.lax.fori_loop(0, D, bwd, jnp.zeros_like(b))


def rf_ridge_oracle(num_inputs: int, num_features: int = 256, bandwidth: float = 1.0,
                    ridge: float = 1e-3, seed: int | None = None, feature_ndim: int = 1) -> WeakOracle:
  """Ridge regression on random Fourier features (closed form).

  phi_rf(x) = sqrt(2/D) cos(x W / (bandwidth sqrt(d)) + b), W ~ N(0, I), b ~ U[0, 2 pi).
  The features are drawn from the ``key`` of each ``fit`` call (``seed=None``,
  the default): in FFGB that key is the run's round -> client -> local-step key
  (DESIGN.md key hierarchy), so every learner h_{i,k}^t has its own features,
  and a different run seed draws different features. ``seed`` (an int) instead
  draws them once from ``jax.random.key(seed)`` for every call (a fixed learner
  class, for tests). The params carry the features' key (its raw key data, 2
  uint32 words for threefry), so ``apply`` and learners saved to disk rebuild
  the features: communicating a learner costs D C + 2 words.

  The fit is beta = (F^T F + ridge * n I)^{-1} F^T phi over the client's n real
  rows, solved by :func:`spd_solve` (Cholesky in plain XLA ops; the matrix is
  SPD since ridge * n > 0).

  Args:
    num_inputs: d, flattened input dimension.
    num_features: D.
    bandwidth: kernel bandwidth relative to sqrt(d).
    ridge: lambda (per sample) > 0.
    seed: None (features from each call's key) or a fixed feature seed.
    feature_ndim: trailing feature axes of x.

  Returns:
    The oracle; its params are {"beta": (D, C) float32, "key": uint32 key data}.
  """
  scale = float(np.sqrt(2.0 / num_features))

  def draw(key):
    kw, kb = jax.random.split(key)
    w = jax.random.normal(kw, (num_inputs, num_features)) / (bandwidth * np.sqrt(num_inputs))
    return w, jax.random.uniform(kb, (num_features,), maxval=2 * np.pi)

  def features(key_data, x):
    w, b = draw(jax.random.wrap_key_data(key_data))
    return scale * jnp.cos(_flat(x, feature_ndim) @ w + b)

  def fit(key, x, phi, mask, n):
    kd = jax.random.key_data(key if seed is None else jax.random.key(seed))
    f = features(kd, x) * mask[:, None]
    a = f.T @ f + ridge * jnp.maximum(n, 1) * jnp.eye(num_features, dtype=f.dtype)
    return {"beta": spd_solve(a, f.T @ jnp.where(mask[:, None], phi, 0.0)), "key": kd}

  def apply(params, xq):
    return features(params["key"], xq) @ params["beta"]

  return WeakOracle("rf_ridge", fit, apply)


# --------------------------------------------------------------------------- mlp
def _faithful_init(key, shape, dtype=jnp.float32):
  # [code] WeakLearnerMLP: N(0, sigma^2) with sigma = 1/fan_in (specs/ffgb.md §3.1;
  # f555c72 utils.py l. 151, 154, 157: nn.init.normal_(weight, 0, 1/fan_in)).
  return jax.random.normal(key, shape, dtype) / shape[0]


def _torch_bias_init(fan_in: int):
  # [code] biases keep PyTorch's nn.Linear default, U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
  bound = 1.0 / float(np.sqrt(fan_in))
  return lambda key, shape, dtype=jnp.float32: jax.random.uniform(key, shape, dtype, -bound, bound)


class WeakLearnerMLP(nn.Module):
  """The paper's MNIST weak learner (App. B.1): d -> 32 -> 32 -> C, leaky ReLU 0.01.

  Input (B, *feature_shape) float32 (flattened), output (B, C) float32.

  Attributes:
    num_outputs: C.
    widths: hidden widths (paper: (32, 32)).
    output_act: apply leaky ReLU to the output too ([code] quirk; paper: False).
    init_scheme: "default" (flax: lecun_normal weights, zero biases) or "faithful"
      ([code] weights N(0, (1/fan_in)^2), biases PyTorch's U(+-1/sqrt(fan_in))).
    feature_ndim: trailing feature axes.
  """
  num_outputs: int
  widths: Sequence[int] = (32, 32)
  output_act: bool = False
  init_scheme: str = "default"
  feature_ndim: int = 1

  @nn.compact
  def __call__(self, x):
    x = _flat(x, self.feature_ndim)

    def dense(width, v):
      if self.init_scheme == "faithful":
        return nn.Dense(width, kernel_init=_faithful_init, bias_init=_torch_bias_init(v.shape[-1]))(v)
      return nn.Dense(width, kernel_init=nn.initializers.lecun_normal())(v)

    for w in self.widths:
      x = nn.leaky_relu(dense(w, x), 0.01)
    x = dense(self.num_outputs, x)
    return nn.leaky_relu(x, 0.01) if self.output_act else x  # [code] f555c72 utils.py l. 173


def mlp_oracle(num_outputs: int, feature_shape: Sequence[int], *, steps: int = 1000,
               lr: float = 0.005, batch: int = 128, widths: Sequence[int] = (32, 32),
               output_act: bool = False, init: str = "default", dedup: bool = False) -> WeakOracle:
  """WO^2 by Adam on a fresh MLP (App. B.3: 1000 steps, lr 0.005; [code] batch 128).

  Args:
    num_outputs: C.
    feature_shape: shape of one input.
    steps: Adam steps S (static; tests use few).
    lr: Adam step size.
    batch: minibatch size (indices drawn with replacement from the n real rows).
    widths, output_act: see :class:`WeakLearnerMLP`; init: its ``init_scheme``; see :class:`WeakLearnerMLP`.
    dedup: drop repeated minibatch indices ([code] ``torch.unique``; see :func:`_adam_oracle`).

  Returns:
    The oracle; its params are the flax variables of :class:`WeakLearnerMLP`.

  Raises:
    ValueError: unknown ``init``.
  """
  if init not in ("default", "faithful"):
    raise ValueError(f"mlp init must be default or faithful; got {init!r}")
  feature_shape = tuple(feature_shape)
  model = WeakLearnerMLP(num_outputs, tuple(widths), output_act, init, len(feature_shape))
  return _adam_oracle("mlp", model, feature_shape, steps, lr, batch, dedup)


def first_occurrence(idx):
  """(B,) bool: True where idx[j] differs from every idx[j'] with j' < j.

  The rows of ``torch.unique(idx)`` as a fixed-shape mask (one kept copy per
  distinct index); O(B^2) comparisons.
  """
  same = idx[:, None] == idx[None, :]
  return ~jnp.any(jnp.tril(same, k=-1), axis=1)  # tril(-1): pairs j' < j


def minibatch_mse(pred, target, idx, dedup: bool = False):
  """The oracle's minibatch loss: nn.MSELoss (mean over rows and outputs).

  Args:
    pred, target: (B, C) float values on the rows ``idx`` (B,) int.
    dedup: average over the distinct indices only ([code] ``torch.unique``).

  Returns:
    float scalar.
  """
  err = (pred - target) ** 2
  if not dedup:
    return jnp.mean(err)
  keep = first_occurrence(idx).astype(err.dtype)
  return jnp.sum(jnp.mean(err, -1) * keep) / jnp.sum(keep)


def _adam_oracle(name, model, feature_shape, steps, lr, batch, dedup=False) -> WeakOracle:
  """WO^2 (eq. 23) by ``steps`` Adam steps on a FRESH ``model`` init and FRESH
  optax state per call (App. B.3; [code] MSE mean over batch and outputs).

  Each step draws ``batch`` indices ``randint(0, n)``; with ``dedup`` the
  duplicates are dropped ([code] f555c72 utils.py l. 191,
  ``torch.unique(torch.randint(0, n, (128,)))``), so the MSE is the mean over
  the distinct rows (at most ``batch``) and outputs."""
  opt = optax.adam(lr)

  def fit(key, x, phi, mask, n):
    del mask  # rows >= n are never sampled
    k_init, k_steps = jax.random.split(key)
    params = model.init(k_init, jnp.zeros((1,) + feature_shape, jnp.float32))

    def loss(p, idx):
      return minibatch_mse(model.apply(p, x[idx]), phi[idx], idx, dedup)

    def step(carry, k):
      p, s = carry
      idx = jax.random.randint(k, (batch,), 0, jnp.maximum(n, 1))
      g = jax.grad(loss)(p, idx)
      upd, s = opt.update(g, s, p)
      return (optax.apply_updates(p, upd), s), None

    (params, _), _ = jax.lax.scan(step, (params, opt.init(params)), jax.random.split(k_steps, steps))
    return params

  return WeakOracle(name, fit, model.apply)


class WeakLearnerCNN(nn.Module):
  """The paper's CIFAR10 weak learner (App. B.1; specs/ffgb.md §3.1).

  conv(features[0], k x k) - leaky ReLU - maxpool 2 - conv(features[1], k x k) -
  leaky ReLU - maxpool 2 - flatten - FC widths[0] - FC widths[1] - C, leaky ReLU
  slope 0.01 ([code]; the tutorial's ReLU otherwise). On 32x32x3 inputs with
  'VALID' padding it has 17,090 parameters, as in specs §3.1.

  Input (B, H, W) grey (a channel axis is added) or (B, H, W, c) float32;
  output (B, C) float32.

  Attributes:
    num_outputs: C.
    features: conv channels (6, 16).
    widths: FC hidden widths (32, 32).
    kernel_size: 5.
    padding: "VALID" (tutorial) or "SAME" (small images).
  """
  num_outputs: int
  features: Sequence[int] = (6, 16)
  widths: Sequence[int] = (32, 32)
  kernel_size: int = 5
  padding: str = "VALID"

  @nn.compact
  def __call__(self, x):
    if x.ndim == 3:
      x = x[..., None]
    def act(v):
      return nn.leaky_relu(v, 0.01)
    for f in self.features:
      x = nn.Conv(f, (self.kernel_size, self.kernel_size), padding=self.padding)(x)
      x = nn.max_pool(act(x), (2, 2), strides=(2, 2))
    x = x.reshape(x.shape[:-3] + (-1,))
    for w in self.widths:
      x = act(nn.Dense(w)(x))
    return nn.Dense(self.num_outputs)(x)


def weak_learner_cnn(num_outputs: int, feature_shape: Sequence[int], setting: str = "weak_learner"
                     ) -> WeakLearnerCNN:
  """The paper's CIFAR10 weak learner for images of ``feature_shape`` (App. B.1; specs/ffgb.md §3.1).

  'VALID' padding as the PyTorch tutorial (17,090 parameters on (32, 32, 3)); 'SAME' on images
  smaller than 16 pixels (8x8 digits), so two 5x5 convolutions fit. One definition for the
  ``cnn`` oracle, the ``cnn`` learner family of ``wo_inf`` and ``--task=lenet`` (FedAvg trains
  the same network, specs §3.1).

  Args:
    num_outputs: C.
    feature_shape: (H, W) or (H, W, c) of one image.
    setting: the setting named by the error (``weak_learner``, ``wo_family``).

  Raises:
    ValueError: ``feature_shape`` is not an image ((H, W) or (H, W, c)).
  """
  feature_shape = tuple(feature_shape)
  if len(feature_shape) not in (2, 3):
    raise ValueError(f"{setting}=cnn needs image inputs (H, W[, c]); got feature shape {feature_shape}")
  return WeakLearnerCNN(num_outputs, padding="VALID" if min(feature_shape[:2]) >= 16 else "SAME")


def cnn_oracle(num_outputs: int, feature_shape: Sequence[int], *, steps: int = 1000,
               lr: float = 0.005, batch: int = 128, dedup: bool = False) -> WeakOracle:
  """WO^2 by Adam on a fresh :class:`WeakLearnerCNN` (App. B.1, B.3), like :func:`mlp_oracle`.

  Args:
    num_outputs: C.
    feature_shape: (H, W) or (H, W, c) of one image.
    steps, lr, batch, dedup: as :func:`mlp_oracle`.

  Returns:
    The oracle; its params are the flax variables of :class:`WeakLearnerCNN`.

  Raises:
    ValueError: ``feature_shape`` is not an image ((H, W) or (H, W, c)).
  """
  feature_shape = tuple(feature_shape)
  return _adam_oracle("cnn", weak_learner_cnn(num_outputs, feature_shape, "weak_learner"), feature_shape,
                      steps, lr, batch, dedup)


# --------------------------------------------------------------------------- wo_inf / wo_lip
class LearnerFamily(NamedTuple):
  """A learner class h_theta trained by the ``wo_inf`` / ``wo_lip`` oracles.

  Attributes:
    name: one of :data:`FAMILIES`.
    init: ``key -> {"train": trainable params, "fixed": frozen params}`` (a
      FRESH init per oracle call, App. B.3 / [code]).
    apply: ``(params, xq (B, *feature_shape)) -> (B, C)``.
    penalty: ``params -> scalar`` added to the loss (``rf``: ridge ||beta||^2).
  """
  name: str
  init: Callable[[jax.Array], PyTree]
  apply: Callable[[PyTree, jax.Array], jax.Array]
  penalty: Callable[[PyTree], jax.Array]


def _no_penalty(params):
  del params
  return jnp.zeros(())


def learner_family(name: str, *, num_outputs: int, feature_shape: Sequence[int],
                   rf_features: int = 256, rf_bandwidth: float = 1.0, ridge: float = 1e-3,
                   output_act: bool = False, init: str = "default") -> LearnerFamily:
  """The learner class ``name`` (one of :data:`FAMILIES`).

  * ``linear``: h(x) = flat(x) W + b, fresh init W = 0, b = 0 (convex losses:
    deterministic fits; the closed-form family of the tests).
  * ``rf``: h(x) = sqrt(2/D) cos(flat(x) W / (bandwidth sqrt(d)) + b) beta with
    W ~ N(0, I), b ~ U[0, 2 pi) drawn from the call's key (frozen) and beta
    (init 0) trained with the ``rf_ridge`` penalty ridge ||beta||^2.
  * ``mlp`` / ``cnn``: :class:`WeakLearnerMLP` / :class:`WeakLearnerCNN` (App. B.1).

  Raises:
    ValueError: unknown name, or ``cnn`` on non-image inputs.
  """
  feature_shape = tuple(feature_shape)
  fnd = len(feature_shape)
  d = int(np.prod(feature_shape))
  C = int(num_outputs)
  if name == "linear":
    def init_l(key):
      del key
      return {"train": {"w": jnp.zeros((d, C)), "b": jnp.zeros((C,))}, "fixed": {}}

    def apply_l(params, xq):
      p = params["train"]
      return _flat(xq, fnd) @ p["w"] + p["b"]
    return LearnerFamily("linear", init_l, apply_l, _no_penalty)
  if name == "rf":
    D = int(rf_features)
    scale = float(np.sqrt(2.0 / D))

    def init_r(key):
      kw, kb = jax.random.split(key)
      w = jax.random.normal(kw, (d, D)) / (rf_bandwidth * np.sqrt(d))
      b = jax.random.uniform(kb, (D,), maxval=2 * np.pi)
      return {"train": {"beta": jnp.zeros((D, C))}, "fixed": {"w": w, "b": b}}

    def apply_r(params, xq):
      f = params["fixed"]
      return scale * jnp.cos(_flat(xq, fnd) @ f["w"] + f["b"]) @ params["train"]["beta"]

    def penalty_r(params):
      return ridge * jnp.sum(params["train"]["beta"] ** 2)
    return LearnerFamily("rf", init_r, apply_r, penalty_r)
  if name in ("mlp", "cnn"):
    model: nn.Module
    if name == "mlp":
      if init not in ("default", "faithful"):
        raise ValueError(f"mlp init must be default or faithful; got {init!r}")
      model = WeakLearnerMLP(C, (32, 32), output_act, init, fnd)
    else:
      model = weak_learner_cnn(C, feature_shape, "wo_family")

    def init_n(key):
      return {"train": model.init(key, jnp.zeros((1,) + feature_shape, jnp.float32)), "fixed": {}}

    def apply_n(params, xq):
      return model.apply(params["train"], xq)
    return LearnerFamily(name, init_n, apply_n, _no_penalty)
  raise ValueError(f"unknown learner family {name!r}; accepted: {', '.join(FAMILIES)}")


def wo_inf_loss(r, mask, p: float):
  """Smooth max of eq. (24): the power mean ((1/n) sum_j r_j^p)^{1/p} over real rows.

  r_j = ||phi(x_j) - h(x_j)||^2 >= 0. p = 1 is the mean of eq. (23); as p -> inf
  it tends to max_j r_j (eq. 24), within n^{-1/p} max_j r_j <= loss <= max_j r_j.
  d loss / d r_j = (1/n) r_j^{p-1} loss^{1-p}: the weight of point j grows as
  r_j^{p-1}, so the hardest points dominate. Computed as s (mean (r/s)^p)^{1/p}
  with s = max_j r_j held constant (exact: the power mean is 1-homogeneous), so
  r^p cannot overflow; 0 (with zero gradient) when every r_j = 0.

  Args:
    r: (M,) float squared residuals; mask: (M,) bool real rows; p >= 1 (static).

  Returns:
    float32 scalar.
  """
  r = jnp.where(mask, r, 0.0)
  n = jnp.maximum(jnp.sum(mask), 1).astype(r.dtype)
  s = jax.lax.stop_gradient(jnp.max(r))
  s = jnp.where(s > 0, s, 1.0)
  t = jnp.sum(jnp.where(mask, (r / s) ** p, 0.0)) / n
  pos = t > 0
  return jnp.where(pos, s * jnp.where(pos, t, 1.0) ** (1.0 / p), 0.0)


def input_jacobian(apply, params, z):
  """grad_x h(z) for a vector-input learner: (S, d) -> (S, C, d) (the Jacobian of
  h: R^d -> R^C at each z_s)."""
  return jax.vmap(jax.jacfwd(lambda zz: apply(params, zz[None])[0]))(z)


def sobolev_points(key, x, mask, num: int):
  """Monte-Carlo points for eq. (25)'s integral over X: ``num`` points uniform in
  the bounding box of the client's real rows (specs §2.5 [I]: "a bounding box").

  Args:
    key: PRNG key; x: (M, d) float; mask: (M,) bool; num: S (static).

  Returns:
    (S, d) float32.
  """
  big = jnp.finfo(x.dtype).max
  lo = jnp.min(jnp.where(mask[:, None], x, big), 0)
  hi = jnp.max(jnp.where(mask[:, None], x, -big), 0)
  return lo + (hi - lo) * jax.random.uniform(key, (num, x.shape[-1]), x.dtype)


def wo_oracle(name: str, family: LearnerFamily, *, steps: int = 1000, lr: float = 0.005,
              p: float = 8.0, sobolev_weight: float = 1.0) -> WeakOracle:
  """The ``wo_inf`` (eq. 24) or ``wo_lip`` (eq. 25) oracle over ``family``.

  ``fit(key, x, phi, mask, n[, z, dphi])`` runs ``steps`` full-batch Adam steps
  (``lr``; App. B.3's optimiser) from a fresh ``family.init(key)`` on

    wo_inf_loss(||phi - h||^2 on the real rows, p) + family.penalty
    [+ sobolev_weight * mean_s ||dphi_s - grad_x h(z_s)||_F^2   (wo_lip, given z)].

  Args:
    name: ``wo_inf`` or ``wo_lip``.
    family: the learner class (:func:`learner_family`).
    steps: Adam steps (static); lr: Adam step size.
    p: power of the smooth max (>= 1).
    sobolev_weight: weight of eq. 25's gradient term (the paper's is 1).

  Returns:
    The oracle; its params are ``{"train", "fixed"}`` of ``family``.

  Raises:
    ValueError: bad name, p < 1, or sobolev_weight < 0.
  """
  if name not in ("wo_inf", "wo_lip"):
    raise ValueError(f"wo_oracle name must be wo_inf or wo_lip; got {name!r}")
  if not p >= 1:
    raise ValueError(f"wo_p must be >= 1; got {p}")
  if not sobolev_weight >= 0:
    raise ValueError(f"sobolev_weight must be >= 0; got {sobolev_weight}")
  opt = optax.adam(lr)

  def fit(key, x, phi, mask, n, z=None, dphi=None):
    del n
    params = family.init(key)
    fixed = params["fixed"]

    def loss(tr):
      pr = {"train": tr, "fixed": fixed}
      r = jnp.sum((family.apply(pr, x) - phi) ** 2, -1)
      out = wo_inf_loss(r, mask, p) + family.penalty(pr)
      if name == "wo_lip" and z is not None:
        jh = input_jacobian(family.apply, pr, z)
        out = out + sobolev_weight * jnp.mean(jnp.sum((jh - dphi) ** 2, (-2, -1)))
      return out

    def step(carry, _):
      tr, s = carry
      g = jax.grad(loss)(tr)
      upd, s = opt.update(g, s, tr)
      return (optax.apply_updates(tr, upd), s), None

    tr = params["train"]
    (tr, _), _ = jax.lax.scan(step, (tr, opt.init(tr)), None, length=steps)
    return {"train": tr, "fixed": fixed}

  return WeakOracle(name, fit, family.apply, sobolev=(name == "wo_lip"))


def empirical_lip(values, x, mask, max_points: int = 256):
  """Empirical Lipschitz constant of a function known on a client's points.

  max over pairs j != j' of distinct real points among the first ``max_points``
  rows of ||v_j - v_j'||_2 / ||x_j - x_j'||_2: a lower bound of ||.||_lip (the
  Euclidean-norm Lipschitz constant of §1.1) sampled on the support. Exact
  duplicates (||x_j - x_j'|| = 0) are skipped. Distances are formed row by row
  (``lax.map``), O(P d) memory.

  Args:
    values: (M, C) float; x: (M, *feature_shape) float; mask: (M,) bool.
    max_points: P cap (static).

  Returns:
    float32 scalar (0 with fewer than two distinct real points).
  """
  P = min(values.shape[0], int(max_points))
  v, xx, mm = values[:P], x[:P].reshape(P, -1), mask[:P]

  def row(a):
    xa, va, ma = a
    dx = jnp.sqrt(jnp.sum((xx - xa) ** 2, -1))
    dv = jnp.sqrt(jnp.sum((v - va) ** 2, -1))
    ok = mm & ma & (dx > 0)
    return jnp.max(jnp.where(ok, dv / jnp.where(ok, dx, 1.0), 0.0))

  return jnp.max(jax.lax.map(row, (xx, v, mm)))


def gamma_hat_inf(h, phi, mask):
  """Empirical L-infinity oracle quality of eq. (13):
  1 - ||h - phi||_{alpha_i,inf} / ||phi||_{alpha_i,inf}, sup over the real rows
  of the Euclidean norm over outputs. h, phi (M, C); mask (M,). float32 scalar
  (1 when phi = 0 and h = 0)."""
  m = mask[:, None]
  num = jnp.sqrt(jnp.max(jnp.sum(jnp.where(m, (h - phi) ** 2, 0.0), -1)))
  den = jnp.sqrt(jnp.max(jnp.sum(jnp.where(m, phi ** 2, 0.0), -1)))
  return jnp.where(den > 0, 1.0 - num / jnp.maximum(den, 1e-30), jnp.where(num > 0, -jnp.inf, 1.0))


def make_oracle(name: str, *, num_outputs: int, feature_shape: Sequence[int], gamma: float = 1.0,
                steps: int = 1000, lr: float = 0.005, batch: int = 128, output_act: bool = False,
                init: str = "default", rf_features: int = 256, rf_bandwidth: float = 1.0,
                ridge: float = 1e-3, seed: int | None = None, family: str = "mlp", wo_p: float = 8.0,
                sobolev_weight: float = 1.0, dedup: bool = False) -> WeakOracle:
  """Builds oracle ``name`` (one of :data:`ORACLES`).

  ``seed``: rf_ridge's fixed feature seed (None: features from each call's key,
  :func:`rf_ridge_oracle`); ``dedup``: mlp / cnn minibatches without repeated
  indices ([code] ``torch.unique``, :func:`_adam_oracle`).

  ``family``, ``wo_p``, ``sobolev_weight`` configure ``wo_inf`` / ``wo_lip``
  (:func:`learner_family`, :func:`wo_oracle`; ``steps``, ``lr`` their Adam).

  Raises:
    ValueError: unknown name or bad setting (``wo_lip`` needs vector inputs).
  """
  feature_shape = tuple(feature_shape)
  fnd = len(feature_shape)
  if name in ("wo_inf", "wo_lip"):
    if name == "wo_lip" and fnd != 1:
      raise ValueError(f"weak_learner=wo_lip needs vector inputs (input-gradients of eq. 25); "
                       f"got feature shape {feature_shape}")
    fam = learner_family(family, num_outputs=num_outputs, feature_shape=feature_shape,
                         rf_features=rf_features, rf_bandwidth=rf_bandwidth, ridge=ridge,
                         output_act=output_act, init=init)
    return wo_oracle(name, fam, steps=steps, lr=lr, p=wo_p, sobolev_weight=sobolev_weight)
  if name == "scaled":
    if not 0 < gamma <= 1:
      raise ValueError(f"gamma must be in (0, 1]; got {gamma}")
    return scaled_oracle(gamma, fnd)
  if name == "rf_ridge":
    return rf_ridge_oracle(int(np.prod(feature_shape)), rf_features, rf_bandwidth, ridge, seed, fnd)
  if name == "mlp":
    return mlp_oracle(num_outputs, feature_shape, steps=steps, lr=lr, batch=batch,
                      output_act=output_act, init=init, dedup=dedup)
  if name == "cnn":
    return cnn_oracle(num_outputs, feature_shape, steps=steps, lr=lr, batch=batch, dedup=dedup)
  raise ValueError(f"unknown weak learner {name!r}; accepted: {', '.join(ORACLES)}")


def gamma_hat(h, phi, mask):
  """Empirical oracle quality 1 - ||h - phi||_{alpha_i} / ||phi||_{alpha_i} (specs §6.4).

  Args:
    h, phi: (M, C) values on the client's points.
    mask: (M,) bool.

  Returns:
    float32 scalar (1 when phi = 0 and h = 0).
  """
  m = mask[:, None]
  num = jnp.sqrt(jnp.sum(jnp.where(m, (h - phi) ** 2, 0.0)))
  den = jnp.sqrt(jnp.sum(jnp.where(m, phi ** 2, 0.0)))
  return jnp.where(den > 0, 1.0 - num / jnp.maximum(den, 1e-30), jnp.where(num > 0, -jnp.inf, 1.0))
