"""Weak-learning oracles for functional boosting (FFGB, seed 002 §2, App. B.3).

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
* ``rf_ridge``: ridge regression on fixed random Fourier features
  (Rahimi & Recht 2007): closed form (Phi^T Phi + lam n I)^{-1} Phi^T phi, one
  solve per call (§6.1 item 2); the features are shared by all clients.
* ``mlp``: the paper's weak learner (App. B.1): MLP d -> 32 -> 32 -> C with leaky
  ReLU (slope 0.01), trained from a FRESH initialisation with a FRESH optax Adam
  state (App. B.3: "Adam for 1000 steps ... initial step size 0.005"; [code]
  batch 128, MSE mean over batch and outputs) inside ``lax.scan``. Minibatch
  indices are ``randint(0, n)`` (with replacement; the code's torch.unique
  dedup is not reproduced).
* ``cnn``: the paper's CIFAR10 weak learner (App. B.1; specs §3.1): the PyTorch
  tutorial CNN conv(6, 5x5) - maxpool 2 - conv(16, 5x5) - maxpool 2 - FC 32 -
  FC 32 - C with leaky ReLU ([code]), trained exactly like ``mlp``. On images
  smaller than 16 pixels (8x8 digits) the convolutions use 'SAME' padding so
  two 5x5 convolutions fit; otherwise 'VALID' as in the tutorial.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

PyTree = Any
ORACLES = ("scaled", "rf_ridge", "mlp", "cnn")


class WeakOracle(NamedTuple):
  """A weak-learning oracle on one client (see module docstring).

  Attributes:
    name: oracle name.
    fit: ``(key, x, phi, mask, n) -> params``.
    apply: ``(params, xq) -> (B, C)``.
  """
  name: str
  fit: Callable[..., PyTree]
  apply: Callable[[PyTree, jax.Array], jax.Array]


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
def rf_ridge_oracle(num_inputs: int, num_features: int = 256, bandwidth: float = 1.0,
                    ridge: float = 1e-3, seed: int = 0, feature_ndim: int = 1) -> WeakOracle:
  """Ridge regression on fixed random Fourier features (closed form).

  phi_rf(x) = sqrt(2/D) cos(x W / (bandwidth sqrt(d)) + b), W ~ N(0, I), b ~ U[0, 2 pi),
  drawn once from ``seed`` and shared by every client and call. The fit is
  beta = (F^T F + ridge * n I)^{-1} F^T phi over the client's n real rows.

  Args:
    num_inputs: d, flattened input dimension.
    num_features: D.
    bandwidth: kernel bandwidth relative to sqrt(d).
    ridge: lambda (per sample) > 0.
    seed: feature seed.
    feature_ndim: trailing feature axes of x.

  Returns:
    The oracle; its params are beta (D, C) float32.
  """
  kw, kb = jax.random.split(jax.random.key(seed))
  w = np.asarray(jax.random.normal(kw, (num_inputs, num_features))) / (bandwidth * np.sqrt(num_inputs))
  b = np.asarray(jax.random.uniform(kb, (num_features,), maxval=2 * np.pi))
  scale = float(np.sqrt(2.0 / num_features))

  def features(x):
    return scale * jnp.cos(_flat(x, feature_ndim) @ w + b)

  def fit(key, x, phi, mask, n):
    del key
    f = features(x) * mask[:, None]
    a = f.T @ f + ridge * jnp.maximum(n, 1) * jnp.eye(num_features, dtype=f.dtype)
    return jnp.linalg.solve(a, f.T @ jnp.where(mask[:, None], phi, 0.0))

  def apply(params, xq):
    return features(xq) @ params

  return WeakOracle("rf_ridge", fit, apply)


# --------------------------------------------------------------------------- mlp
def _faithful_init(key, shape, dtype=jnp.float32):
  # [code] WeakLearnerMLP: N(0, sigma^2) with sigma = 1/fan_in (specs/ffgb.md §3.1).
  return jax.random.normal(key, shape, dtype) / shape[0]


class WeakLearnerMLP(nn.Module):
  """The paper's MNIST weak learner (App. B.1): d -> 32 -> 32 -> C, leaky ReLU 0.01.

  Input (B, *feature_shape) float32 (flattened), output (B, C) float32.

  Attributes:
    num_outputs: C.
    widths: hidden widths (paper: (32, 32)).
    output_act: apply leaky ReLU to the output too ([code] quirk; paper: False).
    init_scheme: "default" (flax lecun_normal) or "faithful" ([code] N(0, (1/fan_in)^2)).
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
    kinit = _faithful_init if self.init_scheme == "faithful" else nn.initializers.lecun_normal()
    for w in self.widths:
      x = nn.leaky_relu(nn.Dense(w, kernel_init=kinit)(x), 0.01)
    x = nn.Dense(self.num_outputs, kernel_init=kinit)(x)
    return nn.leaky_relu(x, 0.01) if self.output_act else x


def mlp_oracle(num_outputs: int, feature_shape: Sequence[int], *, steps: int = 1000,
               lr: float = 0.005, batch: int = 128, widths: Sequence[int] = (32, 32),
               output_act: bool = False, init: str = "default") -> WeakOracle:
  """WO^2 by Adam on a fresh MLP (App. B.3: 1000 steps, lr 0.005; [code] batch 128).

  Args:
    num_outputs: C.
    feature_shape: shape of one input.
    steps: Adam steps S (static; tests use few).
    lr: Adam step size.
    batch: minibatch size (indices drawn with replacement from the n real rows).
    widths, output_act: see :class:`WeakLearnerMLP`; init: its ``init_scheme``; see :class:`WeakLearnerMLP`.

  Returns:
    The oracle; its params are the flax variables of :class:`WeakLearnerMLP`.

  Raises:
    ValueError: unknown ``init``.
  """
  if init not in ("default", "faithful"):
    raise ValueError(f"mlp init must be default or faithful; got {init!r}")
  feature_shape = tuple(feature_shape)
  model = WeakLearnerMLP(num_outputs, tuple(widths), output_act, init, len(feature_shape))
  return _adam_oracle("mlp", model, feature_shape, steps, lr, batch)


def _adam_oracle(name, model, feature_shape, steps, lr, batch) -> WeakOracle:
  """WO^2 (eq. 23) by ``steps`` Adam steps on a FRESH ``model`` init and FRESH
  optax state per call (App. B.3; [code] MSE mean over batch and outputs)."""
  opt = optax.adam(lr)

  def fit(key, x, phi, mask, n):
    del mask  # rows >= n are never sampled
    k_init, k_steps = jax.random.split(key)
    params = model.init(k_init, jnp.zeros((1,) + feature_shape, jnp.float32))

    def loss(p, idx):
      return jnp.mean((model.apply(p, x[idx]) - phi[idx]) ** 2)  # nn.MSELoss (mean)

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
    act = lambda v: nn.leaky_relu(v, 0.01)
    for f in self.features:
      x = nn.Conv(f, (self.kernel_size, self.kernel_size), padding=self.padding)(x)
      x = nn.max_pool(act(x), (2, 2), strides=(2, 2))
    x = x.reshape(x.shape[:-3] + (-1,))
    for w in self.widths:
      x = act(nn.Dense(w)(x))
    return nn.Dense(self.num_outputs)(x)


def cnn_oracle(num_outputs: int, feature_shape: Sequence[int], *, steps: int = 1000,
               lr: float = 0.005, batch: int = 128) -> WeakOracle:
  """WO^2 by Adam on a fresh :class:`WeakLearnerCNN` (App. B.1, B.3), like :func:`mlp_oracle`.

  Args:
    num_outputs: C.
    feature_shape: (H, W) or (H, W, c) of one image.
    steps, lr, batch: as :func:`mlp_oracle`.

  Returns:
    The oracle; its params are the flax variables of :class:`WeakLearnerCNN`.

  Raises:
    ValueError: ``feature_shape`` is not an image ((H, W) or (H, W, c)).
  """
  feature_shape = tuple(feature_shape)
  if len(feature_shape) not in (2, 3):
    raise ValueError(f"weak_learner=cnn needs image inputs (H, W[, c]); got feature shape {feature_shape}")
  padding = "VALID" if min(feature_shape[:2]) >= 16 else "SAME"
  return _adam_oracle("cnn", WeakLearnerCNN(num_outputs, padding=padding), feature_shape, steps, lr, batch)


def make_oracle(name: str, *, num_outputs: int, feature_shape: Sequence[int], gamma: float = 1.0,
                steps: int = 1000, lr: float = 0.005, batch: int = 128, output_act: bool = False,
                init: str = "default", rf_features: int = 256, rf_bandwidth: float = 1.0,
                ridge: float = 1e-3, seed: int = 0) -> WeakOracle:
  """Builds oracle ``name`` (one of :data:`ORACLES`).

  Raises:
    ValueError: unknown name or bad setting.
  """
  feature_shape = tuple(feature_shape)
  fnd = len(feature_shape)
  if name == "scaled":
    if not 0 < gamma <= 1:
      raise ValueError(f"gamma must be in (0, 1]; got {gamma}")
    return scaled_oracle(gamma, fnd)
  if name == "rf_ridge":
    return rf_ridge_oracle(int(np.prod(feature_shape)), rf_features, rf_bandwidth, ridge, seed, fnd)
  if name == "mlp":
    return mlp_oracle(num_outputs, feature_shape, steps=steps, lr=lr, batch=batch,
                      output_act=output_act, init=init)
  if name == "cnn":
    return cnn_oracle(num_outputs, feature_shape, steps=steps, lr=lr, batch=batch)
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
