r"""The low-rank evidence of Jadbabaie et al. 2023: App. C's rank histograms and Theorem 1's decay.

**App. C** (specs/fedlrgd.md §3.1, §7 item 10): train a one-hidden-layer sigmoid
MLP (784 -> K -> 10, softmax, cross-entropy; Adam, batch 200, 25 epochs) on
MNIST (the data cache's ``mnist``, with the 10,000 t10k images only: 8,000 train / 2,000
test) or digits, or (``--model=cnn``) App. C's CIFAR-10 CNN (:class:`AppCCNN`:
conv 40 3x3 - conv 40 3x3 - maxpool 2 - dense 150 - 10, sigmoid; Adam, batch 200,
15 epochs; p = 1,553,220 on CIFAR-10); take k random test samples x^(i) and k perturbations

    theta^(j) = theta* + (||theta*||_1 / p) g_j,   g_j ~ N(0, I_p)                    (75)

form M_q[i, j] = df/dtheta_q(x^(i); theta^(j)) (76) for ``num_coords`` coordinates q
drawn uniformly among the non-trivial ones (|theta*_q| >= 0.005), and plot the
histogram of their approximate ranks

    min{J : sum_{i<=J} sigma_i(M_q)^2 >= 0.9 ||M_q||_F^2}                           (77)

The paper defines (77) for non-zero M_q; slices that are exactly zero (weights
of pixels that are 0 on all k test images) are counted separately, not as rank 0.
The paper's label one-hot is part of its data x; here it enters through the loss.

**Theorem 1** (§3.3 S1, §7 item 5): for the Hölder kernels ||y - vartheta||_2^eta
(y, vartheta ~ U[0,1]^d, n = k), the tail energy (1/(nk)) ||M - M_r||_F^2 against r
on a log-log plot with the rate r^{-2 eta/d}, the fitted slope on r in [4, 64],
and the explicit bound where L2 is known (eta <= 1: L2 = 1).

**Logistic kernel** (§3.3 S1 (b), ``--study=logistic``): the same spectra for
M_q[j, k] = df/dtheta_q (y^(j); vartheta^(k)) of the soft-label logistic loss (App. A,
eq. (66); ``fedsim.tasks.logistic_soft``), data y = (x, soft label) with 2 features
(d = 3) drawn as the S2 task draws them, anchors vartheta ~ U[-1,1]^2, n = k = t1_n,
float64. An analytic data dependence should give an about exponential decay of
sigma_j / sigma_1, faster than any Hölder rate; the study fits log(sigma_j / sigma_1)
against j (exponential) and against log j (power law) over the j above 1e-12.

  python -m experiments.fedlrgd.rank_study --flagfile=experiments/flagfiles/fedlrgd_rank_study_mnist.cfg

Writes under --output_dir: ``summary.json`` (rank statistics, accuracies,
Theorem 1 slopes), ``ranks.json`` (every approximate rank), ``rank_hist.png``,
``theorem1.png``, ``logistic.png``. Bad flags exit with status 2 and one line.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import time
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from fedsim.runner import series_style

STUDIES = ("appc", "theorem1", "logistic", "both")  # both: appc and theorem1
MODELS = ("mlp", "cnn")  # App. C's MNIST MLP, its CIFAR-10 CNN
OPTIMIZERS = ("adam", "rmsprop")  # App. C: Adam; "in one case" RMSprop (Fig. 1 (g), Fig. 2 (c))
ACTIVATIONS = ("sigmoid", "relu")  # App. C: logistic; "in one case" ReLU (Fig. 1 (i), Fig. 2 (d))


@dataclasses.dataclass(frozen=True)
class RankStudyConfig:
  """App. C defaults: K = 784, k = 60, 25 epochs of Adam with batch 200, threshold 0.005,
  energy 0.9, ~500 coordinates; one hidden layer of sigmoid units. App. C's Fig. 1 variants:
  k = 30, 90 (a, c), K = 500, 1000 (e, f), ``optimizer = rmsprop`` (g), ``hidden_layers = 2`` (h),
  ``activation = relu`` (i)."""
  study: str = "both"
  dataset: str = "mnist"
  data_dir: str | None = None   # None: the data cache (fedsim.data.fetch)
  model: str = "mlp"
  hidden: int = 784
  hidden_layers: int = 1
  activation: str = "sigmoid"
  optimizer: str = "adam"
  epochs: int = 25
  batch_size: int = 200
  lr: float = 1e-3
  k: int = 60
  num_coords: int = 500
  threshold: float = 0.005
  energy: float = 0.9
  seed: int = 0
  t1_n: int = 1000
  t1_dims: tuple = (1, 2)
  t1_etas: tuple = (0.5, 1.5, 2.5)
  output_dir: str = "runs/rank_study"


def validate(cfg: RankStudyConfig):
  """Raises ConfigError naming the flag."""
  from fedsim.core.errors import ConfigError
  if cfg.study not in STUDIES:
    raise ConfigError("study", f"unknown {cfg.study!r}; accepted: {', '.join(STUDIES)}")
  if cfg.model not in MODELS:
    raise ConfigError("model", f"unknown {cfg.model!r}; accepted: {', '.join(MODELS)}")
  if cfg.optimizer not in OPTIMIZERS:
    raise ConfigError("optimizer", f"unknown {cfg.optimizer!r}; accepted: {', '.join(OPTIMIZERS)}")
  if cfg.activation not in ACTIVATIONS:
    raise ConfigError("activation", f"unknown {cfg.activation!r}; accepted: {', '.join(ACTIVATIONS)}")
  if cfg.model == "cnn" and (cfg.hidden_layers != 1 or cfg.activation != "sigmoid"):
    raise ConfigError("hidden_layers", "hidden_layers and activation apply to --model=mlp only")
  for name in ("hidden", "hidden_layers", "epochs", "batch_size", "num_coords", "t1_n"):
    if getattr(cfg, name) < 1:
      raise ConfigError(name, f"must be >= 1; got {getattr(cfg, name)}")
  if cfg.k < 2:
    raise ConfigError("k", f"must be >= 2; got {cfg.k}")
  if not 0 < cfg.energy <= 1:
    raise ConfigError("energy", f"must be in (0, 1]; got {cfg.energy}")
  if not cfg.threshold >= 0:
    raise ConfigError("threshold", f"must be >= 0; got {cfg.threshold}")
  if not cfg.lr > 0:
    raise ConfigError("lr", f"must be > 0; got {cfg.lr}")
  if any(d < 1 for d in cfg.t1_dims) or any(not e > 0 for e in cfg.t1_etas):
    raise ConfigError("t1_dims", "dimensions must be >= 1 and etas > 0")
  if cfg.t1_n < 64:
    raise ConfigError("t1_n", f"must be >= 64 (the slope is fitted on r in [4, 64]); got {cfg.t1_n}")


# ----------------------------------------------------------------------------------------------
# App. C.
# ----------------------------------------------------------------------------------------------

def init_mlp(key, d_in: int, hidden: int, classes: int, layers: int = 1):
  """Glorot-uniform weights, zero biases (Keras' Dense defaults, as in App. C): ``w1, b1`` ...
  ``w{L+1}, b{L+1}`` for L = ``layers`` hidden layers of ``hidden`` units (one key per layer)."""
  import jax
  import jax.numpy as jnp
  keys = jax.random.split(key, layers + 1)
  sizes = [d_in] + [hidden] * layers + [classes]

  def glorot(k, a, b):
    return jax.random.uniform(k, (a, b), jnp.float32, -1.0, 1.0) * math.sqrt(6.0 / (a + b))

  params = {}
  for i in range(layers + 1):
    params[f"w{i + 1}"] = glorot(keys[i], sizes[i], sizes[i + 1])
    params[f"b{i + 1}"] = jnp.zeros((sizes[i + 1],), jnp.float32)
  return params


def mlp_logits(params, x, activation: str = "sigmoid"):
  """784 -> K -> ... -> K (``activation``: sigmoid, App. C, or relu, Fig. 1 (i)) -> 10 (logits;
  softmax in the loss); the hidden layers are ``params``' w1 ... wL."""
  import jax
  act = {"sigmoid": jax.nn.sigmoid, "relu": jax.nn.relu}[activation]
  layers = len(params) // 2 - 1
  h = x
  for i in range(1, layers + 1):
    h = act(h @ params[f"w{i}"] + params[f"b{i}"])
  return h @ params[f"w{layers + 1}"] + params[f"b{layers + 1}"]


class Net(NamedTuple):
  """App. C's network: ``init(key) -> params``; ``apply(params, x (B, *feature_shape)) -> (B, C)`` logits."""
  init: Callable
  apply: Callable


def _app_c_cnn(classes: int):
  """App. C's CIFAR-10 CNN (specs/fedlrgd.md §3.1): conv(40, 3x3, 'same') - conv(40, 3x3,
  'same') - maxpool 2x2 - dense 150 - dense C, sigmoid activations, Keras' default
  initialisers (Glorot-uniform kernels, zero biases). On (32, 32, 3) inputs p = 1120 + 14,440
  + 1,536,150 + 1510 = 1,553,220, the paper's count (so both convolutions keep 32 x 32)."""
  import flax.linen as nn

  class AppCCNN(nn.Module):
    num_classes: int

    @nn.compact
    def __call__(self, x):
      init = nn.initializers.glorot_uniform()
      if x.ndim == 3:
        x = x[..., None]
      x = nn.sigmoid(nn.Conv(40, (3, 3), padding="SAME", kernel_init=init)(x))
      x = nn.sigmoid(nn.Conv(40, (3, 3), padding="SAME", kernel_init=init)(x))
      x = nn.max_pool(x, (2, 2), strides=(2, 2))
      x = nn.sigmoid(nn.Dense(150, kernel_init=init)(x.reshape(x.shape[0], -1)))
      return nn.Dense(self.num_classes, kernel_init=init)(x)

  return AppCCNN(classes)


def network(model: str, hidden: int, feature_shape: tuple, classes: int, layers: int = 1,
            activation: str = "sigmoid") -> Net:
  """App. C's ``model`` (:data:`MODELS`) for inputs of ``feature_shape``: ``mlp`` (the flattened
  input -> ``layers`` x ``hidden`` ``activation`` units -> ``classes``; :func:`init_mlp`,
  :func:`mlp_logits`) or ``cnn`` (:func:`_app_c_cnn`, image inputs).

  Raises:
    ValueError: an unknown ``model``, or ``cnn`` on inputs that are not images.
  """
  if model == "mlp":
    d_in = math.prod(feature_shape)
    return Net(lambda key: init_mlp(key, d_in, hidden, classes, layers),
               lambda params, x: mlp_logits(params, x.reshape(x.shape[0], -1), activation))
  if model != "cnn":
    raise ValueError(f"model {model!r}; accepted: {', '.join(MODELS)}")
  if len(feature_shape) not in (2, 3):
    raise ValueError(f"model cnn needs image inputs (H, W[, c]); got feature shape {feature_shape}")
  import jax.numpy as jnp
  cnn = _app_c_cnn(classes)
  return Net(lambda key: cnn.init(key, jnp.zeros((1, *feature_shape), jnp.float32)), cnn.apply)


def example_loss(net: Net, params, x, y):
  """Cross-entropy of one sample: f(x; theta)."""
  import optax
  return optax.softmax_cross_entropy_with_integer_labels(net.apply(params, x[None]), y[None])[0]


def train(x, y, cfg: RankStudyConfig, net: Net):
  """Adam (or ``optimizer = rmsprop``: optax's RMSprop, decay 0.9, Fig. 1 (g)), batch ``batch_size``,
  ``epochs`` passes of shuffled mini-batches, one jitted scan.

  Returns:
    the trained parameters (a pytree of float32 arrays).
  """
  import jax
  import jax.numpy as jnp
  import optax
  n = x.shape[0]
  bs = min(cfg.batch_size, n)
  steps_per_epoch = n // bs
  key = jax.random.key(cfg.seed)
  params = net.init(jax.random.fold_in(key, 0))
  opt = {"adam": optax.adam, "rmsprop": optax.rmsprop}[cfg.optimizer](cfg.lr)

  def batch_loss(p, xb, yb):
    return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(net.apply(p, xb), yb))

  @jax.jit
  def run(params, x, y):
    def epoch(carry, e):
      perm = jax.random.permutation(jax.random.fold_in(key, 1 + e), n)[: steps_per_epoch * bs]

      def step(c, idx):
        p, s = c
        g = jax.grad(batch_loss)(p, x[idx], y[idx])
        upd, s = opt.update(g, s, p)
        return (optax.apply_updates(p, upd), s), None

      return jax.lax.scan(step, carry, perm.reshape(steps_per_epoch, bs))[0], None

    return jax.lax.scan(epoch, (params, opt.init(params)), jnp.arange(cfg.epochs))[0][0]

  with jax.default_matmul_precision("highest"):
    return run(params, jnp.asarray(x), jnp.asarray(y))


def accuracy(net: Net, params, x, y, batch: int = 1000) -> float:
  """Top-1 accuracy, ``batch`` samples at a time (lax.map)."""
  import jax
  import jax.numpy as jnp
  pred = jax.jit(lambda p, xs: jax.lax.map(lambda xi: jnp.argmax(net.apply(p, xi[None])[0]), xs,
                                           batch_size=batch))(params, jnp.asarray(x))
  return float(jnp.mean(pred == jnp.asarray(y)))


def test_indices(n_test: int, k: int, seed: int):
  """The k test samples x^(1..k) of App. C: a uniform k-subset of the test set."""
  import jax
  return jax.random.choice(jax.random.fold_in(jax.random.key(seed + 7), 0), n_test, (k,), replace=False)


def perturbation(theta, j, seed: int):
  """theta^(j) = theta* + (||theta*||_1 / p) g_j, g_j ~ N(0, I_p) (eq. (75)); theta (p,) flat."""
  import jax
  import jax.numpy as jnp
  g = jax.random.normal(jax.random.fold_in(jax.random.fold_in(jax.random.key(seed + 7), 1), j),
                        theta.shape, theta.dtype)
  return theta + (jnp.sum(jnp.abs(theta)) / theta.shape[0]) * g


def gradient_slices(net: Net, params, x_test, y_test, coords, k: int, seed: int):
  """M (Q, k, k): M[q, i, j] = df/dtheta_{coords[q]}(x^(i); theta^(j)) (eq. (76)), with the
  perturbations theta^(j) of eq. (75). Gradients of the k samples at one theta^(j)
  at a time (lax.map over j), so only (k, p) gradients are ever in memory."""
  import jax
  import jax.numpy as jnp
  from jax.flatten_util import ravel_pytree
  theta, unravel = ravel_pytree(params)
  pick = test_indices(x_test.shape[0], k, seed)
  xs, ys = jnp.asarray(x_test)[pick], jnp.asarray(y_test)[pick]
  coords = jnp.asarray(coords)

  @jax.jit
  def run(theta, xs, ys):
    def one_theta(j):
      th = perturbation(theta, j, seed)
      g = jax.vmap(lambda x, y: ravel_pytree(jax.grad(example_loss, argnums=1)(net, unravel(th), x, y))[0])(
          xs, ys)
      return g[:, coords]                                               # (k_i, Q)
    return jax.lax.map(one_theta, jnp.arange(k))                        # (k_j, k_i, Q)

  with jax.default_matmul_precision("highest"):
    out = run(theta, xs, ys)
  return np.transpose(np.asarray(out, np.float64), (2, 1, 0))           # (Q, k_i, k_j)


def appc(cfg: RankStudyConfig) -> dict:
  """App. C on ``cfg.dataset``: train, build the slices, approximate ranks (77)."""
  import jax
  import jax.numpy as jnp
  from jax.flatten_util import ravel_pytree

  from fedsim.algorithms.theory_fedlrgd import approximate_rank
  from fedsim.data import load_dataset
  t0 = time.perf_counter()
  ds = load_dataset(cfg.dataset, cfg.data_dir, seed=0)
  x_tr, x_te = ds.x_train, ds.x_test
  net = network(cfg.model, cfg.hidden, tuple(ds.x_train.shape[1:]), int(ds.y_train.max()) + 1,
                cfg.hidden_layers, cfg.activation)
  params = jax.block_until_ready(train(x_tr, ds.y_train, cfg, net))
  t_train = time.perf_counter() - t0
  theta, _ = ravel_pytree(params)
  theta = np.asarray(theta)
  rng = np.random.default_rng(cfg.seed)
  nontrivial = np.flatnonzero(np.abs(theta) >= cfg.threshold)
  coords = rng.choice(nontrivial, size=min(cfg.num_coords, nontrivial.size), replace=False)
  all_coords = rng.choice(theta.size, size=min(cfg.num_coords, theta.size), replace=False)
  M = gradient_slices(net, params, x_te, ds.y_test, np.concatenate([coords, all_coords]), cfg.k, cfg.seed)
  norms = np.linalg.norm(M.reshape(M.shape[0], -1), axis=1)
  ranks = np.array([approximate_rank(Mq, cfg.energy) if nq > 0 else 0 for Mq, nq in zip(M, norms)])
  r_nt, n_nt = ranks[: coords.size], norms[: coords.size]
  r_all, n_all = ranks[coords.size:], norms[coords.size:]
  nz = r_nt[n_nt > 0]
  nz_all = r_all[n_all > 0]
  return {
      "dataset": ds.name, "dataset_info": ds.info, "model": cfg.model, "p": int(theta.size),
      "hidden": cfg.hidden, "hidden_layers": cfg.hidden_layers, "activation": cfg.activation,
      "optimizer": cfg.optimizer, "k": cfg.k,
      "train_accuracy": accuracy(net, params, x_tr, ds.y_train),
      "test_accuracy": accuracy(net, params, x_te, ds.y_test),
      "nontrivial_coords": int(nontrivial.size), "sampled": int(coords.size),
      "zero_slices": int(np.sum(n_nt == 0)),
      "ranked": int(nz.size),
      "median_rank": float(np.median(nz)) if nz.size else float("nan"),
      "frac_rank_le_5": float(np.mean(nz <= 5)) if nz.size else float("nan"),
      "frac_rank_le_10": float(np.mean(nz <= 10)) if nz.size else float("nan"),
      "max_rank": int(nz.max()) if nz.size else 0,
      "histogram": {int(v): int(c) for v, c in zip(*np.unique(nz, return_counts=True))},
      "all_weights": {"sampled": int(all_coords.size), "zero_slices": int(np.sum(n_all == 0)),
                      "median_rank": float(np.median(nz_all)) if nz_all.size else float("nan"),
                      "frac_rank_le_10": float(np.mean(nz_all <= 10)) if nz_all.size else float("nan")},
      "ranks": [int(v) for v in nz], "train_seconds": t_train,
      "seconds": time.perf_counter() - t0, "backend": jax.default_backend(),
      "x64": bool(jnp.zeros(()).dtype == jnp.float64),
  }


# ----------------------------------------------------------------------------------------------
# Theorem 1.
# ----------------------------------------------------------------------------------------------

def theorem1_decay(dims=(1, 2), etas=(0.5, 1.5, 2.5), n: int = 1000, seed: int = 0,
                   r_range=(4, 64)) -> list[dict]:
  """Tail energies of the ||y - vartheta||_2^eta kernels and their fitted slopes.

  Returns one dict per (d, eta): slope (fit of log tail vs log r on r_range),
  rate -2 eta/d, the tails for r = 1..r_range[1], and, for eta <= 1 (L2 = 1), the
  explicit bound of Theorem 1 at the r >= threshold in range and whether it holds.
  """
  from fedsim.algorithms import theory_fedlrgd as th
  out = []
  rs = np.arange(r_range[0], r_range[1] + 1)
  for d in dims:
    for eta in etas:
      tails = th.tail_energies(th.holder_kernel_matrix(d, eta, n, n, seed))
      row = {"d": d, "eta": eta, "rate": -2.0 * eta / d, "slope": th.fitted_slope(rs, tails[rs]),
             "tails": [float(t) for t in tails[1: r_range[1] + 1]],
             "threshold": th.theorem1_threshold(d, eta)}
      if eta <= 1:
        check = [r for r in range(1, r_range[1] + 1) if r >= row["threshold"]]
        row["bound_checked_r"] = check
        row["bound_holds"] = bool(all(tails[r] <= th.theorem1_bound(d, eta, 1.0, r) for r in check))
      out.append(row)
  return out


def spectrum_fits(ratio, floor: float = 1e-12, j_max: int = 30) -> dict:
  """Fits of log(sigma_j / sigma_1) over j = 1..J (J: the last j with ratio >= floor, at most j_max):
  ``{"fitted_j", "r2_exponential" (against j), "r2_power" (against log j), "exp_rate"}``."""
  ratio = np.asarray(ratio, np.float64)
  js = np.arange(1, min(j_max, int(np.sum(ratio >= floor))) + 1)
  logs = np.log(ratio[js - 1])
  return {"fitted_j": int(js[-1]), "r2_exponential": _r2(js.astype(float), logs),
          "r2_power": _r2(np.log(js), logs), "exp_rate": float(np.polyfit(js, logs, 1)[0])}


def _r2(x, y) -> float:
  """R^2 of the least-squares line of y against x."""
  coef = np.polyfit(x, y, 1)
  res = y - np.polyval(coef, x)
  return float(1.0 - np.sum(res ** 2) / np.sum((y - y.mean()) ** 2))


def logistic_kernels(n: int, num_features: int = 2, mu: float = 0.1, seed: int = 0) -> np.ndarray:
  """M[j, k, q] = df/dtheta_q (y^(j); vartheta^(k)) of the soft-label logistic loss (66), float64.

  The n data points y^(j) = (x, soft label) are the S2 task's (``make_smooth_erm_task`` with one
  client of n samples, ``seed``); the n anchors vartheta^(k) ~ U[-1,1]^p (``seed + 1``). Shape (n, n, p).
  """
  import jax
  import jax.numpy as jnp

  from fedsim.tasks.logistic_soft import logistic_soft_loss, make_smooth_erm_task
  with jax.enable_x64(True):
    task = make_smooth_erm_task("logistic_soft", num_clients=1, samples_per_client=n,
                                num_features=num_features, server_samples=1, max_rank=1, mu=mu, seed=seed)
    data = {"x": task.data["clients"]["x"][0], "y": task.data["clients"]["y"][0]}
    anchors = jnp.asarray(np.random.default_rng(seed + 1).uniform(-1.0, 1.0, size=(n, num_features)))
    grad = jax.grad(logistic_soft_loss)
    per_point = jax.vmap(lambda ex: jax.vmap(lambda th: grad(th, ex, mu))(anchors))    # (n, k, p)
    return np.asarray(jax.jit(per_point)(data), np.float64)


def logistic_spectrum(n: int = 1000, num_features: int = 2, mu: float = 0.1, seed: int = 0,
                      floor: float = 1e-12, j_max: int = 30) -> dict:
  """§3.3 S1 (b): the singular values of the soft-label logistic gradient kernels.

  Args:
    n: data points = anchors (the (n, n) matrices M_q of :func:`logistic_kernels`).
    num_features: p; the data dimension is d = p + 1 (the soft label is data).
    mu: the loss's l2 weight (its gradient adds the rank-one mu vartheta_q).
    seed: the data's seed; the anchors use ``seed + 1``.
    floor: the fits use the j with sigma_j / sigma_1 >= floor (float64 round-off lies below).
    j_max: at most this many singular values are fitted and reported.

  Returns:
    ``{"p", "d", "n", "coords": [per q: {"q", "sv_ratio" (sigma_j / sigma_1, j = 1..j_max),
    "fitted_j", "r2_exponential", "r2_power", "exp_rate" (the slope of log ratio per j)}]}``.
  """
  from fedsim.algorithms.theory_fedlrgd import singular_values
  g = logistic_kernels(n, num_features, mu, seed)
  coords = []
  for q in range(num_features):
    sv = singular_values(g[:, :, q])
    ratio = sv / sv[0]
    coords.append({"q": q, "sv_ratio": [float(v) for v in ratio[:j_max]], **spectrum_fits(ratio, floor, j_max)})
  return {"p": num_features, "d": num_features + 1, "n": n, "coords": coords}


# ----------------------------------------------------------------------------------------------
# Plots and the binary.
# ----------------------------------------------------------------------------------------------

def plot(summary: dict, output_dir: str):
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  if "appc" in summary:
    s = summary["appc"]
    fig, ax = plt.subplots(figsize=(5, 3.5))
    if s["ranks"]:
      ax.hist(s["ranks"], bins=np.arange(0.5, max(s["ranks"]) + 1.5), edgecolor="k")
    ax.set_xlabel("approximate rank (90% energy, eq. (77))")
    ax.set_ylabel("frequency")
    net = f"K={s['hidden']}" if s.get("model", "mlp") == "mlp" else "CNN"
    net += "".join(f", {v}" for v in (f"{s.get('hidden_layers', 1)} layers" if s.get("hidden_layers", 1) > 1 else "",
                                       s.get("activation", "sigmoid"), s.get("optimizer", "adam"))
                   if v and v not in ("sigmoid", "adam"))
    ax.set_title(f"{s['dataset']}, {net}, k={s['k']}: median {s['median_rank']:g}, "
                 f"{100 * s['frac_rank_le_10']:.0f}% <= 10", fontsize=9)
    fig.tight_layout()
    fig.savefig(os.path.join(output_dir, "rank_hist.png"), dpi=120)
    plt.close(fig)
  if "theorem1" in summary:
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for i, row in enumerate(summary["theorem1"]):
      r = np.arange(1, len(row["tails"]) + 1)
      label = f"d={row['d']}, eta={row['eta']}: slope {row['slope']:.2f} (rate {row['rate']:.2f})"
      line, = ax.loglog(r, row["tails"], **series_style(i, len(r)), label=label)
      ax.loglog(r, row["tails"][3] * (r / 4.0) ** row["rate"], ":", color=line.get_color())
    ax.set_xlabel("r")
    ax.set_ylabel("(1/nk) ||M - M_r||_F^2")
    ax.legend(fontsize=6)
    ax.set_title("Theorem 1: tails of ||y - theta||_2^eta (dotted: r^{-2eta/d})", fontsize=9)
    fig.tight_layout()
    fig.savefig(os.path.join(output_dir, "theorem1.png"), dpi=120)
    plt.close(fig)
  if "logistic" in summary:
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for i, row in enumerate(summary["logistic"]["coords"]):
      ratio = row["sv_ratio"]
      ax.semilogy(np.arange(1, len(ratio) + 1), ratio, "o-", color=series_style(i, len(ratio))["color"], ms=3,
                  label=f"q={row['q']}: R^2 exp {row['r2_exponential']:.3f}, power {row['r2_power']:.3f}")
    ax.set_xlabel("j")
    ax.set_ylabel("sigma_j / sigma_1")
    ax.legend(fontsize=7)
    ax.set_title(f"S1(b): logistic gradient kernels, p = {summary['logistic']['p']}, "
                 f"n = k = {summary['logistic']['n']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(os.path.join(output_dir, "logistic.png"), dpi=120)
    plt.close(fig)


def run(cfg: RankStudyConfig) -> dict:
  """Runs the configured studies, writes the outputs, returns the summary."""
  os.makedirs(cfg.output_dir, exist_ok=True)
  summary = {"config": dataclasses.asdict(cfg)}
  if cfg.study in ("appc", "both"):
    summary["appc"] = appc(cfg)
  if cfg.study in ("theorem1", "both"):
    summary["theorem1"] = theorem1_decay(cfg.t1_dims, cfg.t1_etas, cfg.t1_n, cfg.seed)
  if cfg.study == "logistic":
    summary["logistic"] = logistic_spectrum(cfg.t1_n, seed=cfg.seed)
  with open(os.path.join(cfg.output_dir, "summary.json"), "w") as f:
    json.dump({k: ({kk: vv for kk, vv in v.items() if kk != "ranks"} if k == "appc" else v)
               for k, v in summary.items()}, f, indent=2, default=str)
  if "appc" in summary:
    with open(os.path.join(cfg.output_dir, "ranks.json"), "w") as f:
      json.dump(summary["appc"]["ranks"], f)
  plot(summary, cfg.output_dir)
  return summary


def _define_flags():
  from absl import flags
  d = RankStudyConfig()
  flags.DEFINE_string("study", d.study, f"which study: {', '.join(STUDIES)}")
  flags.DEFINE_string("dataset", d.dataset, "App. C dataset: mnist (IDX files in --data_dir), digits, cifar10 "
                      "(the binary release in --data_dir)")
  flags.DEFINE_string("data_dir", d.data_dir, "folder with the dataset's files (default: the data cache)")
  flags.DEFINE_string("model", d.model, f"App. C network: {', '.join(MODELS)} (mlp: MNIST's 784 -> K -> 10; "
                      "cnn: CIFAR-10's conv 40 - conv 40 - pool - 150 - 10)")
  flags.DEFINE_integer("hidden", d.hidden, "K, hidden units per layer of --model=mlp (App. C: 784; Fig. 1: 500, 1000)")
  flags.DEFINE_integer("hidden_layers", d.hidden_layers, "hidden layers of --model=mlp (App. C: 1; Fig. 1 (h): 2)")
  flags.DEFINE_string("activation", d.activation, f"hidden activation of --model=mlp: {', '.join(ACTIVATIONS)} "
                      "(App. C: sigmoid; Fig. 1 (i): relu)")
  flags.DEFINE_string("optimizer", d.optimizer, f"training optimizer: {', '.join(OPTIMIZERS)} (App. C: adam; "
                      "Fig. 1 (g): rmsprop)")
  flags.DEFINE_integer("epochs", d.epochs, "training epochs (App. C: 25)")
  flags.DEFINE_integer("batch_size", d.batch_size, "Adam batch size (App. C: 200)")
  flags.DEFINE_float("lr", d.lr, "Adam / RMSprop learning rate (Keras default 1e-3)")
  flags.DEFINE_integer("k", d.k, "test samples = perturbations per slice (App. C: 30, 60, 90)")
  flags.DEFINE_integer("num_coords", d.num_coords, "coordinates q sampled for the histogram (App. C: ~500)")
  flags.DEFINE_float("threshold", d.threshold, "non-trivial weights: |theta*_q| >= threshold (App. C: 0.005)")
  flags.DEFINE_float("energy", d.energy, "energy fraction of the approximate rank (eq. (77): 0.9)")
  flags.DEFINE_integer("seed", d.seed, "seed of the training, the test samples and the perturbations")
  flags.DEFINE_integer("t1_n", d.t1_n, "n = k of the Theorem 1 and logistic kernel matrices")
  flags.DEFINE_list("t1_dims", [str(v) for v in d.t1_dims], "data dimensions d of the Theorem 1 kernels")
  flags.DEFINE_list("t1_etas", [str(v) for v in d.t1_etas], "Hölder orders eta of the Theorem 1 kernels")
  flags.DEFINE_string("output_dir", d.output_dir, "where summary.json, ranks.json and the plots go")


def main(argv):
  del argv
  from absl import flags, logging

  from fedsim.core.errors import ConfigError
  logging.set_verbosity(logging.WARNING)
  F = flags.FLAGS
  try:
    try:
      dims, etas = tuple(int(v) for v in F.t1_dims), tuple(float(v) for v in F.t1_etas)
    except ValueError:
      raise ConfigError("t1_dims", "t1_dims must be integers and t1_etas numbers") from None
    cfg = RankStudyConfig(study=F.study, dataset=F.dataset, data_dir=F.data_dir, model=F.model, hidden=F.hidden,
                          hidden_layers=F.hidden_layers, activation=F.activation, optimizer=F.optimizer,
                          epochs=F.epochs, batch_size=F.batch_size, lr=F.lr, k=F.k,
                          num_coords=F.num_coords, threshold=F.threshold, energy=F.energy, seed=F.seed,
                          t1_n=F.t1_n, t1_dims=dims, t1_etas=etas, output_dir=F.output_dir)
    validate(cfg)
    if cfg.study in ("appc", "both"):
      from fedsim.data import load_dataset
      ds = load_dataset(cfg.dataset, cfg.data_dir, seed=0)     # data errors before any training
      if cfg.model == "cnn" and len(ds.feature_shape) not in (2, 3):
        raise ConfigError("model", f"cnn needs image data; {ds.name} is not")
      if cfg.k > ds.x_test.shape[0]:
        raise ConfigError("k", f"must be <= the {ds.x_test.shape[0]} test samples of {ds.name}; got {cfg.k}")
  except ConfigError as e:  # a data_dir error's command-line form names --data_dir (FieldError.cli)
    print(f"error: {getattr(e, 'cli', None) or e}", file=sys.stderr)
    sys.exit(2)
  summary = run(cfg)
  if "appc" in summary:
    s = summary["appc"]
    print(f"[appc] {s['dataset']} {s['model']} K={s['hidden']} p={s['p']} train acc {s['train_accuracy']:.4f} "
          f"test acc "
          f"{s['test_accuracy']:.4f}; {s['ranked']} non-trivial non-zero slices (+{s['zero_slices']} zero): "
          f"median rank {s['median_rank']:g}, <=5: {100 * s['frac_rank_le_5']:.1f}%, "
          f"<=10: {100 * s['frac_rank_le_10']:.1f}%, max {s['max_rank']}; {s['seconds']:.1f}s", flush=True)
  for row in summary.get("theorem1", []):
    print(f"[theorem1] d={row['d']} eta={row['eta']}: slope {row['slope']:.2f} <= rate {row['rate']:.2f} "
          f"+ 0.1: {row['slope'] <= row['rate'] + 0.1}"
          + (f"; bound holds: {row['bound_holds']}" if "bound_holds" in row else ""), flush=True)
  for row in summary.get("logistic", {}).get("coords", []):
    print(f"[logistic] q={row['q']}: sigma_8/sigma_1 {row['sv_ratio'][7]:.2e}, R^2 exponential "
          f"{row['r2_exponential']:.3f}, power {row['r2_power']:.3f}", flush=True)
  print(f"wrote {cfg.output_dir}/summary.json, ranks.json, rank_hist.png, theorem1.png", flush=True)


if __name__ == "__main__":
  from absl import app

  from experiments import common
  _define_flags()
  app.run(main, flags_parser=common.parse_flags_or_exit)
