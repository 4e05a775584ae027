"""Flags and set-up shared by the experiment binaries (run, sweep, benchmark).

Core flags have the same names in every binary (DESIGN.md). Algorithm
hyperparameters exist twice: ``--lr`` sets the value for every algorithm of
the run, ``--fedzo_lr`` for one; an algorithm otherwise keeps its own default
(a learning rate right for FedAvg is wrong for FedZO). Precedence:
``--<alg>_<hp>`` given > ``--<hp>`` given > the binary's per-algorithm default
(:data:`ALGORITHM_DEFAULTS`) > the algorithm's paper default.
"""

from __future__ import annotations

import math
import sys

from absl import flags

from fedsim import algorithms
from fedsim.core.errors import ConfigError
from fedsim.data import METHODS as PARTITIONS
from fedsim.data import DATASETS
from fedsim.estimators import LAWS
from fedsim.tasks import TASKS

FLAGS = flags.FLAGS

# Hyperparameters settable for all algorithms (--NAME) or one (--ALG_NAME).
HPARAMS = {
    "clients_per_round": (int, "clients sampled per round (M)"),
    "lr": (float, "client learning rate (eta)"),
    "client_block": (int, "clients per vmapped block, 0 = all at once (speed/memory only)"),
    "local_steps": (int, "local steps per round (H)"),
    "batch_size": (int, "samples per local step (b1 / B)"),
    "fd_directions": (int, "finite-difference directions per step (b2 / Q)"),
    "smoothing": (float, "finite-difference smoothing radius (mu)"),
    "direction": (str, f"direction law: {', '.join(LAWS)}"),
    "local_optimizer": (str, "client optimizer: sgd, adam"),
    "weighting": (str, "aggregation weights: uniform, size"),
    "server_lr": (float, "server learning rate"),
    "beta1": (float, "server first-moment decay (FedOpt)"),
    "beta2": (float, "server second-moment decay (FedOpt)"),
    "tau": (float, "server adaptivity epsilon (FedOpt)"),
    "aggregation": (str, "how deltas reach the server: mean, aircomp (FedZO)"),
    "snr_db": (float, "AirComp transmit SNR P/sigma_w^2 in dB; inf = noise-free"),
    "h_min": (float, "AirComp participation threshold on |h|"),
    "channel_var": (float, "AirComp E|h|^2: 1.0 (paper), 0.5 (authors' code)"),
    "noise_model": (str, "AirComp noise: real_full, complex_real_part, code_compat"),
    "empty_round": (str, "AirComp round with no device: skip (keep model), resample (code)"),
    "transceiver": (str, "AirComp simulation: shortcut (eq. 17), full (eqs. 14-17)"),
    "variant": (str, "DZOPA / ZONE-S / FZooS and its FD baselines: paper, code (the authors' code preset)"),
    "consensus_weight": (float, "DZOPA code variant: consensus weight gamma_c"),
    "alpha": (float, "DZOPA consensus weight alpha / ZONE-S alpha (default 1/N)"),
    "beta": (float, "DZOPA dual step beta"),
    "rho": (float, "ZONE-S penalty rho (paper 500; code 1/lr = 5e5)"),
    "num_perturbations": (int, "DeComFL/HiSo shared perturbations per local step (P)"),
    "fd_scheme": (str, "DeComFL/HiSo finite difference: forward (paper), central (code's DeComFL)"),
    "client_state": (str, "DeComFL/HiSo client state: none (fast), replay (protocol: replay from scalars)"),
    "replay_history": (int, "DeComFL/HiSo rounds of scalars kept for replay (client_state=replay)"),
    "nu": (float, "HiSo EMA weight nu of H (code 0.05)"),
    "eps": (float, "HiSo epsilon floor in the H update (paper eq. 12; code 0)"),
    "h0": (float, "HiSo initial H_0 = h0 * 1 (code 1)"),
    "k_update": (str, "HiSo H update per round: last (code), all (eq. 12), all_code"),
    "h_signal": (str, "HiSo H signal: delta_x (code, eq. 12), round_displacement (App. C)"),
    "clip_lo": (float, "HiSo lower clip of H (Assumption 4; default off)"),
    "clip_hi": (float, "HiSo upper clip of H (Assumption 4; default off)"),
    "preconditioner": (str, "HiSo directions: diagonal (paper), scalar (ablation: mean(H) 1)"),
    "step_norm": (str, "HiSo step scale: none (eq. 8, factor absorbed in eta; code), trace (eq. 7: H / harmonic mean)"),
    "weight_decay": (float, "DeComFL/HiSo SGD weight decay lambda: eta (Delta x + lambda x) (paper 0; "
                     "code 1e-5 on MNIST, presets hiso_code / decomfl_code)"),
    # FedLRGD / FedAve / GD (seed 004; specs/fedlrgd.md).
    "phi": (float, "communication-to-computation ratio phi of the oracle-complexity ledger (Definition 1)"),
    "step_size": (float, "FedLRGD / GD step (default 1/L1 of the task)"),
    "weights_solver": (str, "FedLRGD weight solve: solve (LU), inverse (paper-literal), pinv, ridge"),
    "rcond": (float, "FedLRGD pinv relative singular-value cut-off"),
    "ridge_lambda": (float, "FedLRGD ridge (Tikhonov) weight, relative to sigma_max(G)^2"),
    "anchor_dist": (str, "FedLRGD parameter anchors: uniform (U[-a,a]^p), gaussian (theta0 + a N(0,I))"),
    "anchor_scale": (float, "FedLRGD anchor scale a"),
    "project_box": (float, "FedLRGD: clip theta to [-b,b]^p after each step (default off: Alg. 1)"),
    "lr_schedule": (str, "FedAve step: fedpaq (4/(mu((t+T0)b+1))), constant (--lr)"),
    "schedule_offset": (int, "FedAve fedpaq schedule offset T0 (default ceil(4 kappa))"),
    "quantizer": (str, "FedAve upload quantizer: none (seed 004), qsgd (FedPAQ)"),
    "qsgd_levels": (int, "FedAve QSGD levels s"),
}

# FFGB family (seed 002; specs/ffgb.md §6.5).
HPARAMS.update({
    "eta0": (float, "FFGB eta_0 of eta0/(tK+k+1)^p (MNIST script 20)"),
    "eta_schedule": (str, "FFGB step: paper, code ((t+1)K+k0+1), theory (c/(mu(tK+k+1)))"),
    "eta_decay_p": (float, "FFGB step exponent p"),
    "eta_cap": (float, "FFGB cap on eta"),
    "mu": (float, "FFGB Tikhonov mu (eq. 3; experiments 0)"),
    "weak_learner": (str, "FFGB oracle: mlp, cnn (image data), rf_ridge, scaled (WO^2, eq. 23), "
                     "wo_inf (eq. 24; ffgb_c default), wo_lip (Sobolev eq. 25; ffgb_l default)"),
    "wo_family": (str, "FFGB wo_inf / wo_lip learner class: mlp, cnn, rf, linear"),
    "wo_p": (float, "FFGB wo_inf smooth max: power mean ((1/n) sum r_j^p)^(1/p) of squared residuals (>= 1)"),
    "sobolev_weight": (float, "FFGB wo_lip weight of eq. 25's gradient term (paper 1)"),
    "sobolev_samples": (int, "FFGB wo_lip Monte-Carlo points per client round (eq. 25's integral)"),
    "gamma": (float, "FFGB scaled-oracle gamma / FFGB.C's gamma of (13) (ffgb_c default 0.5)"),
    "oracle_steps": (int, "FFGB mlp oracle Adam steps (paper 1000)"),
    "oracle_lr": (float, "FFGB mlp oracle Adam lr (paper 0.005)"),
    "oracle_batch": (int, "FFGB mlp oracle batch (code 128)"),
    "store_learners": (int, "FFGB: rounds of learners kept in the state (>= eval_every to write all)"),
    "mu_eta_cap": (float, "FFGB cap on mu*eta (Lemma D.2 needs <= 1)"),
    "clip_G": (float, "FFGB.C gradient bound G of Assumption 3.2 (CE: sqrt 2)"),
    "clip_B": (float, "FFGB.C projection radius B (default 2G/(mu gamma), Thm D.1)"),
    "lip_L": (float, "FFGB.L Lipschitz constant L of (16)-(17): wo_lip's query gradient "
                     "(default: the task's, shift_tabular 3)"),
    "rf_features": (int, "FFGB rf_ridge oracle: random Fourier features D"),
    "rf_bandwidth": (float, "FFGB rf_ridge oracle: bandwidth relative to sqrt(d)"),
    "ridge": (float, "FFGB rf_ridge oracle: ridge lambda per sample"),
    "mlp_init": (str, "FFGB mlp oracle init: default (lecun), faithful ([code] N(0, 1/fan_in^2))"),
    "mlp_output_act": (bool, "FFGB mlp oracle: leaky ReLU after the output layer too ([code]; paper false)"),
    "oracle_dedup": (bool, "FFGB mlp/cnn oracle: drop repeated minibatch indices ([code] torch.unique)"),
    "ffgb_l_query": (str, "FFGB.L query: fixed (u - Delta, specs §2.4), printed (Alg. 4 as printed)"),
})
# Hyperparameters that are core flags (always given, no per-algorithm default).
CORE_HPARAMS = ("clients_per_round",)

# Accepted values of the string hyperparameters.
CHOICES = {
    "direction": LAWS,
    "local_optimizer": ("sgd", "adam"),
    "weighting": ("uniform", "size"),
    "aggregation": ("mean", "aircomp"),
    "noise_model": ("real_full", "complex_real_part", "code_compat"),
    "empty_round": ("skip", "resample"),
    "transceiver": ("shortcut", "full"),
    "variant": ("paper", "code"),
    "fd_scheme": ("forward", "central"),
    "client_state": ("none", "replay"),
    "k_update": ("last", "all", "all_code"),
    "h_signal": ("delta_x", "round_displacement"),
    "preconditioner": ("diagonal", "scalar"),
    "step_norm": ("none", "trace"),
    "weights_solver": ("solve", "inverse", "pinv", "ridge"),
    "anchor_dist": ("uniform", "gaussian"),
    "lr_schedule": ("fedpaq", "constant"),
    "quantizer": ("none", "qsgd"),
    "eta_schedule": ("paper", "code", "theory"),
    "weak_learner": ("scaled", "rf_ridge", "mlp", "cnn", "wo_inf", "wo_lip"),
    "wo_family": ("mlp", "cnn", "rf", "linear"),
    "mlp_init": ("default", "faithful"),
    "ffgb_l_query": ("fixed", "printed"),
}

# FZooS and its FD baselines (seed 000; specs/fzoos.md §2.6, §6).
HPARAMS.update({
    "num_rff": (int, "FZooS random Fourier features M (App. E: 10000)"),
    "kernel": (str, "FZooS local GP kernel: se (paper), matern52 (authors' code)"),
    "gp_lengthscale": (str, "FZooS GP lengthscale: fixed (--lengthscale, paper), auto (ML-II grid)"),
    "lengthscale": (float, "FZooS SE lengthscale l of the RFF and the fixed GP (paper 1.0)"),
    "gp_window": (int, "FZooS local GP window (nearest history points, code 150)"),
    "rff_window": (int, "FZooS RFF fit window (points nearest x_r, code 500)"),
    "history_size": (int, "FZooS per-client history slots: 0 = the whole run (from --rounds), H > 0 = ring of the last H queries"),
    "gamma_schedule": (str, "FZooS correction length: inv_t (paper), one, zero (Fig. 6b ablations)"),
    "correction_point": (str, "FZooS correction at: current iterate (eq. 8), round_start (Fig. 6b)"),
    "prox_gamma": (float, "FedProx-ZO correction weight gamma (code 1)"),
    "fd_normalization": (str, "FD baselines: code (divide by lambda Q), unbiased (d/(lambda Q))"),
    "track_cosine": (int, "FZooS / FD baselines: 1 logs grad_cosine, cos(local direction, true grad F) "
                     "(Fig. 4; true F outside the query model)"),
    "accept_if_improves": (int, "FZooS / FD baselines: 1 keeps x_{r-1} unless the true F improves "
                           "(authors' code; outside the query model)"),
})
CHOICES.update({
    "kernel": ("se", "matern52"),
    "gp_lengthscale": ("fixed", "auto"),
    "gamma_schedule": ("inv_t", "one", "zero"),
    "correction_point": ("current", "round_start"),
    "fd_normalization": ("code", "unbiased"),
})

# This binary's per-algorithm defaults where the paper's value does not suit
# the embedded digits main job. FedZO's paper eta = 1e-3 (seed 001 §V-B,
# Fashion-MNIST, T unstated) reaches ~0.72 test accuracy on digits in 200
# rounds; 1e-2 reaches ~0.90. Pass --fedzo_lr=0.001 for the paper's value.
ALGORITHM_DEFAULTS = {"fedzo": {"lr": 1e-2}}


def define_flags():
  """Defines the core flags (DESIGN.md) and the hyperparameter flags."""
  flags.DEFINE_list("algorithm", ["fedavg", "fedzo"],
                    "comma-separated algorithms run side by side, each NAME or NAME:HP=VALUE[:HP=VALUE] "
                    f"(e.g. fedzo:local_steps=20); NAME in: {', '.join(algorithms.REGISTRY)}")
  flags.DEFINE_string("task", "softmax", f"task: {', '.join(TASKS)}")
  flags.DEFINE_string("dataset", "digits", f"dataset (supervised tasks): {', '.join(DATASETS)}")
  flags.DEFINE_string("data_dir", None, "folder (or LIBSVM file) with the dataset's files")
  flags.DEFINE_integer("num_clients", 100, "N, number of clients")
  flags.DEFINE_integer("clients_per_round", 10, "M, clients sampled per round (M = N: full participation)")
  flags.DEFINE_integer("rounds", 300, "T, communication rounds")
  flags.DEFINE_string("partition", "dirichlet", f"partition: {', '.join(PARTITIONS)}")
  flags.DEFINE_float("dirichlet_alpha", 0.5, "Dirichlet concentration of the label (or quantity) skew")
  flags.DEFINE_integer("shards_per_client", 2, "shards per client (--partition=shards)")
  flags.DEFINE_string("quantity_law", "lognormal", "client-size law (--partition=quantity): lognormal, dirichlet")
  flags.DEFINE_float("quantity_sigma", 1.0, "log-normal sigma of client sizes (--partition=quantity)")
  flags.DEFINE_float("heterogeneity", 5.0, "C, heterogeneity of the synthetic tasks")
  flags.DEFINE_integer("dim", 300, "d, dimension of the synthetic tasks")
  flags.DEFINE_integer("hidden_width", 64, "hidden units of --task=mlp")
  flags.DEFINE_integer("hidden_layers", 1, "hidden layers of --task=mlp (2 with --hidden_width=32 "
                       "--activation=leaky_relu: FFGB's MLP weak learner, seed 002 App. B.1)")
  flags.DEFINE_string("activation", "relu", "hidden activation of --task=mlp: relu, leaky_relu (slope 0.01)")
  # --task=shift_tabular (seed 002, FFGB.C / FFGB.L): N clients x --samples_per_client points in
  # --num_features dimensions with a feature-shift knob.
  flags.DEFINE_string("shift_kind", "w1", "shift_tabular shift: tv (shared support, reweighted), "
                      "w1 (translated clouds)")
  flags.DEFINE_float("feature_shift", 0.0, "shift_tabular knob: tv mixture weight in [0,1]; w1 spread >= 0")
  flags.DEFINE_string("tabular_loss", "square", "shift_tabular loss: square (FFGB.L), ce (3 classes)")
  flags.DEFINE_integer("target_class", 4, "attacked class (--task=attack_cw)")
  flags.DEFINE_float("attack_c", 1.0, "distortion weight c of the attack loss (FedZO eq. 21)")
  flags.DEFINE_string("classifier", "mlp", "attacked classifier (--task=attack_cw): mlp, softmax")
  flags.DEFINE_string("cache_dir", None, "where trained classifiers are cached (default ~/.cache/fedsim)")
  flags.DEFINE_float("spectrum_sigma", 3 ** 0.5, "std of log lambda (--task=illcond_quadratic; seed 003 §5.1)")
  flags.DEFINE_bool("isotropic", False, "all eigenvalues equal, same trace (--task=illcond_quadratic control)")
  flags.DEFINE_string("finetune_shift", "flip", "target shift of --task=finetune: flip, relabel, none")
  # --task=logistic_soft / ridge (seed 004 App. A; specs/fedlrgd.md §3.3).
  flags.DEFINE_integer("rank", 8, "r: the server's samples = FedLRGD's approximate rank (logistic_soft, ridge)")
  flags.DEFINE_integer("max_rank", 32, "R >= r: static padding of the server data (same R: no recompilation)")
  flags.DEFINE_integer("num_features", 2, "p: features of logistic_soft / ridge")
  flags.DEFINE_integer("samples_per_client", 40, "s: samples per client (logistic_soft, ridge)")
  flags.DEFINE_float("l2_penalty", 0.1, "mu: L2 weight / strong convexity (logistic_soft, ridge)")
  flags.DEFINE_float("data_heterogeneity", 0.0, "h in [0,1): client c's data on the box [a_c, a_c+1-h], a_c ~ U[0,h]")
  flags.DEFINE_float("server_shift", 0.0, "delta in [0,1): server data on [0,1-delta], clients on [delta,1]")
  flags.DEFINE_string("feature_map", "identity", "logistic_soft / ridge features: identity, holder")
  flags.DEFINE_float("holder_eta", 2.5, "Hölder order eta of --feature_map=holder (||u - c_j||^eta)")
  flags.DEFINE_integer("raw_dim", 1, "D: dimension of the raw points of --feature_map=holder")
  flags.DEFINE_bool("x64", False, "enable float64 (jax_enable_x64) before anything is built; same random "
                    "draws (FedLRGD: its weight solve is float64 either way, its GD steps need x64 at r >= 16)")
  flags.DEFINE_integer("seed", 0, "root seed (data partition, initialisation, all randomness)")
  flags.DEFINE_integer("eval_every", 10, "rounds per compiled chunk / between evaluations")
  flags.DEFINE_string("output_dir", "runs/main", "where config.json, metrics and curves.png go")
  flags.DEFINE_integer("num_devices", 0, "devices of the 'clients' mesh axis (0 = all)")
  flags.DEFINE_float("homo_ratio", 0.1, "s: IID fraction of --partition=homo_ratio (FFGB §4)")
  flags.DEFINE_integer("comm_budget", 0, "models per client (FFGB m*K a round, FedAvg 2, both start "
                       "at 2); > 0 sets each algorithm's rounds to ceil((budget - 2) / cost)")
  # --task=attack / metric_opt (seed 000 §6.2-6.3; specs/fzoos.md §3.2-3.3).
  flags.DEFINE_float("portion", None, "P in (0,1]: each client's share of the classes (attack: "
                     "default 0.7; metric_opt: class shards, default 0.3); larger P = less heterogeneous")
  flags.DEFINE_string("opt_metric", "precision", "metric_opt objective 1 - macro METRIC: "
                      "precision, recall, f1, jaccard")
  flags.DEFINE_integer("attack_target", -1, "attack: index of the eligible target image (-1 = --seed)")
  flags.DEFINE_integer("model_train_steps", 0, "attack / metric_opt: Adam steps of the task's "
                       "classifiers (0 = task default: attack 400, metric_opt 2000); fewer steps leave "
                       "more test points near a decision boundary")
  flags.DEFINE_float("perturbation_box", 0.0, "attack / metric_opt box eps of the perturbation "
                     "(0 = task default: attack 0.3, metric_opt 0.2)")
  flags.DEFINE_bool("save_learners", False, "FFGB family: write each round's learners to "
                    "<output_dir>/<alg>/learners/ (needs store_learners >= eval_every)")
  flags.DEFINE_integer("blas_threads", 1, "threads of the BLAS/LAPACK libraries behind XLA's CPU linear "
                       "algebra (threadpoolctl; 0 = the libraries' default). 1 by default: jaxlib's "
                       "Cholesky/LU (FZooS GP and RFF fits, FFGB rf_ridge) runs 2 spinning OpenBLAS "
                       "threads that slow it 100x when other processes share the cores")
  # Checkpoint/resume and multi-host runs (issue 8; BUILD.md "Devices and hosts").
  flags.DEFINE_integer("checkpoint_every", 0, "save the full state every K rounds (at the first chunk "
                       "end at or after each multiple; last 2 kept) under <output_dir>/<alg>/checkpoints; "
                       "0 = off")
  flags.DEFINE_bool("resume", False, "continue each algorithm from its newest checkpoint in "
                    "<output_dir>/<alg>/checkpoints (metrics.jsonl kept up to it and appended)")
  flags.DEFINE_string("coordinator_address", None, "multi-host: host:port of process 0's "
                      "jax.distributed coordinator (needs --num_processes > 1)")
  flags.DEFINE_integer("num_processes", 1, "multi-host: number of processes (one per host/GPU); 1 = single process")
  flags.DEFINE_integer("process_id", 0, "multi-host: this process's index in [0, num_processes)")
  for name, (typ, help_) in HPARAMS.items():
    if name not in CORE_HPARAMS:
      _define(name, typ, None, f"{help_}; sets it for every algorithm (default: each algorithm's own)")
    for alg in algorithms.REGISTRY:
      if name in algorithms.config_fields(alg):
        _define(f"{alg}_{name}", typ, None, f"{help_}, for {alg} only")


def _define(name, typ, default, help_):
  {float: flags.DEFINE_float, int: flags.DEFINE_integer, str: flags.DEFINE_string,
   bool: flags.DEFINE_bool}[typ](name, default, help_)


def _convert(typ, value: str):
  """``NAME=VALUE`` override text -> typ (bool: true/false/1/0, any case).

  Raises:
    ValueError: not a value of typ.
  """
  if typ is bool:
    low = value.lower()
    if low not in ("true", "false", "1", "0"):
      raise ValueError(value)
    return low in ("true", "1")
  return typ(value)


def parse_spec(spec: str):
  """Splits an ``--algorithm`` entry ``NAME[:HP=VALUE...]`` into (NAME, overrides).

  ``fedzo:local_steps=20:lr=0.001`` runs FedZO with H = 20 and eta = 1e-3 next to
  other entries (e.g. ``fedzo:local_steps=5``), each in its own output folder.

  Raises:
    ConfigError: unknown algorithm, hyperparameter, or a value of the wrong type.
  """
  name, *items = spec.split(":")
  if name not in algorithms.REGISTRY:
    raise ConfigError("algorithm", f"unknown {name!r}; accepted: {', '.join(algorithms.REGISTRY)}")
  fields, out = algorithms.config_fields(name), {}
  for item in items:
    key, eq, value = item.partition("=")
    if not eq or key not in fields or key not in HPARAMS:
      accepted = ", ".join(f for f in fields if f in HPARAMS)
      raise ConfigError("algorithm", f"bad override {item!r} in {spec!r}; accepted NAME=VALUE "
                        f"with NAME in: {accepted}")
    try:
      out[key] = _convert(HPARAMS[key][0], value)
    except ValueError:
      raise ConfigError("algorithm", f"{key}={value!r} in {spec!r} is not a {HPARAMS[key][0].__name__}")
  return name, out


def run_label(spec: str) -> str:
  """The output-folder name of an ``--algorithm`` entry (':' -> '-')."""
  return spec.replace(":", "-").replace("/", "_")


def hparams_for(spec: str) -> dict:
  """The hyperparameters an ``--algorithm`` entry runs with (see module docstring
  for precedence; ``NAME:HP=VALUE`` overrides come last)."""
  alg, overrides = parse_spec(spec)
  cfg = algorithms.default_config(alg)
  cfg.update(ALGORITHM_DEFAULTS.get(alg, {}))
  for name in HPARAMS:
    if name not in cfg or name in CORE_HPARAMS:
      continue
    if FLAGS[f"{alg}_{name}"].present:
      cfg[name] = FLAGS[f"{alg}_{name}"].value
    elif FLAGS[name].present:
      cfg[name] = FLAGS[name].value
  if "clients_per_round" in cfg:
    flag = FLAGS[f"{alg}_clients_per_round"]
    cfg["clients_per_round"] = flag.value if flag.present else FLAGS.clients_per_round
  if "rounds" in cfg:  # FZooS sizes its history from the run (seed 000 Alg. 2 keeps the trajectory)
    cfg["rounds"] = (comm_rounds(alg, cfg, FLAGS.num_clients, FLAGS.comm_budget)
                     if FLAGS.comm_budget > 0 else FLAGS.rounds)
  cfg.update(overrides)
  return cfg


def _positive(flag, value, integer=False):
  if value is None:
    return
  bad = not math.isfinite(value) or value <= 0
  if bad:
    raise ConfigError(flag, f"must be a positive {'integer' if integer else 'number'}; got {value}")


def validate():
  """Checks every flag before anything is built or compiled.

  Raises:
    ConfigError: naming the flag and the accepted values.
  """
  for spec in FLAGS.algorithm:
    parse_spec(spec)
  if len({run_label(s) for s in FLAGS.algorithm}) != len(FLAGS.algorithm):
    raise ConfigError("algorithm", "an entry is repeated; give repeated algorithms different overrides")
  if not FLAGS.algorithm:
    raise ConfigError("algorithm", f"empty; accepted: {', '.join(algorithms.REGISTRY)}")
  for flag, accepted in (("task", TASKS), ("dataset", DATASETS), ("partition", PARTITIONS)):
    _check_one_of(flag, accepted)
  if FLAGS.num_clients < 1:
    raise ConfigError("num_clients", f"must be >= 1; got {FLAGS.num_clients}")
  if not 1 <= FLAGS.clients_per_round <= FLAGS.num_clients:
    raise ConfigError("clients_per_round",
                      f"must be in [1, num_clients={FLAGS.num_clients}]; got {FLAGS.clients_per_round}")
  if FLAGS.rounds < 0:
    raise ConfigError("rounds", f"must be >= 0; got {FLAGS.rounds}")
  if FLAGS.eval_every < 1:
    raise ConfigError("eval_every", f"must be >= 1; got {FLAGS.eval_every}")
  if not FLAGS.dirichlet_alpha > 0:
    raise ConfigError("dirichlet_alpha", f"must be > 0; got {FLAGS.dirichlet_alpha}")
  if FLAGS.shards_per_client < 1:
    raise ConfigError("shards_per_client", f"must be >= 1; got {FLAGS.shards_per_client}")
  validate_distributed()
  if FLAGS.checkpoint_every < 0:
    raise ConfigError("checkpoint_every", f"must be >= 0 (0 = off); got {FLAGS.checkpoint_every}")
  if FLAGS.blas_threads < 0:
    raise ConfigError("blas_threads", f"must be >= 0 (0 = the libraries' default); got {FLAGS.blas_threads}")
  import jax
  if not 0 <= FLAGS.num_devices <= jax.device_count():
    raise ConfigError("num_devices", f"must be in [0, {jax.device_count()}]; got {FLAGS.num_devices}")
  for spec in FLAGS.algorithm:
    alg, overrides = parse_spec(spec)
    hp = hparams_for(spec)
    where = lambda n: ("algorithm" if n in overrides else
                       f"{alg}_{n}" if FLAGS[f"{alg}_{n}"].present else n)
    for n in ("lr", "smoothing", "server_lr", "tau", "rho", "consensus_weight"):
      if n in hp:
        _positive(where(n), hp[n])
    if hp.get("client_block") is not None and hp["client_block"] < 0:
      raise ConfigError(where("client_block"), f"must be >= 0 (0 = all clients in one vmap); "
                        f"got {hp['client_block']}")
    if "clients_per_round" in hp and not 1 <= hp["clients_per_round"] <= FLAGS.num_clients:
      raise ConfigError(where("clients_per_round"), f"must be in [1, num_clients={FLAGS.num_clients}]; "
                        f"got {hp['clients_per_round']}")
    for n in ("num_perturbations", "replay_history"):
      if hp.get(n) is not None and hp[n] < 1:
        raise ConfigError(where(n), f"must be >= 1; got {hp[n]}")
    if "nu" in hp and not 0 <= hp["nu"] <= 1:
      raise ConfigError(where("nu"), f"must be in [0, 1]; got {hp['nu']}")
    if "eps" in hp and not hp["eps"] >= 0:
      raise ConfigError(where("eps"), f"must be >= 0; got {hp['eps']}")
    if "weight_decay" in hp and not hp["weight_decay"] >= 0:
      raise ConfigError(where("weight_decay"), f"must be >= 0; got {hp['weight_decay']}")
    for n in ("h0", "clip_lo", "clip_hi"):
      if n in hp:
        _positive(where(n), hp[n])
    for n in ("local_steps", "batch_size", "fd_directions"):
      if hp.get(n) is not None and hp[n] < 1:
        raise ConfigError(where(n), f"must be >= 1; got {hp[n]}")
    for n, accepted in CHOICES.items():
      if hp.get(n) is not None and hp[n] not in accepted:
        raise ConfigError(where(n), f"unknown {hp[n]!r}; accepted: {', '.join(accepted)}")
    if "h_min" in hp and not hp["h_min"] >= 0:
      raise ConfigError(where("h_min"), f"must be >= 0; got {hp['h_min']}")
    if "channel_var" in hp:
      _positive(where("channel_var"), hp["channel_var"])
    if "snr_db" in hp and math.isnan(hp["snr_db"]):
      raise ConfigError(where("snr_db"), "must be a number of dB or inf")
    if hp.get("transceiver") == "full" and hp.get("noise_model") == "code_compat":  # seed 001 §IV
      raise ConfigError(where("noise_model"), "code_compat (the authors' closed-form noise std) cannot "
                        "be simulated by transceiver=full; accepted with full: real_full, complex_real_part")
    for n in ("beta1", "beta2"):
      if n in hp and not 0 <= hp[n] < 1:
        raise ConfigError(where(n), f"must be in [0, 1); got {hp[n]}")
    if hp.get("direction") == "orthogonal" and FLAGS.task == "quadratic" and hp["fd_directions"] > FLAGS.dim:
      raise ConfigError(where("fd_directions"), f"orthogonal directions need <= dim={FLAGS.dim}")
    if "phi" in hp and not hp["phi"] >= 0:
      raise ConfigError(where("phi"), f"must be >= 0; got {hp['phi']}")
    for n in ("step_size", "rcond", "ridge_lambda", "anchor_scale", "project_box"):
      if n in hp:
        _positive(where(n), hp[n])
    if hp.get("qsgd_levels") is not None and hp["qsgd_levels"] < 1:
      raise ConfigError(where("qsgd_levels"), f"must be >= 1; got {hp['qsgd_levels']}")
    if hp.get("schedule_offset") is not None and hp["schedule_offset"] < 0:
      raise ConfigError(where("schedule_offset"), f"must be >= 0; got {hp['schedule_offset']}")
    for n in ("track_cosine", "accept_if_improves"):  # FZooS family (seed 000); None = the preset's
      if hp.get(n) is not None and hp[n] not in (0, 1):
        raise ConfigError(where(n), f"must be 0 or 1; got {hp[n]}")
    if alg in FFGB_FAMILY:
      validate_ffgb(alg, hp, where)
  if FLAGS.task in ("attack", "metric_opt"):  # seed 000 §6.2-6.3
    _check_fzoos_task_flags()
  if not 0 <= FLAGS.homo_ratio <= 1:
    raise ConfigError("homo_ratio", f"must be in [0, 1]; got {FLAGS.homo_ratio}")
  if FLAGS.comm_budget < 0:
    raise ConfigError("comm_budget", f"must be >= 0 (0 = use --rounds); got {FLAGS.comm_budget}")
  if FLAGS.hidden_layers < 1:
    raise ConfigError("hidden_layers", f"must be >= 1; got {FLAGS.hidden_layers}")
  _check_one_of("activation", ("relu", "leaky_relu"))
  if FLAGS.task == "shift_tabular":
    _check_one_of("shift_kind", ("tv", "w1"))
    _check_one_of("tabular_loss", ("square", "ce"))
    hi = 1.0 if FLAGS.shift_kind == "tv" else math.inf
    if not (0 <= FLAGS.feature_shift <= hi and math.isfinite(FLAGS.feature_shift)):
      raise ConfigError("feature_shift", f"must be in [0, {hi:g}] for shift_kind={FLAGS.shift_kind} "
                        f"(finite); got {FLAGS.feature_shift}")
    bad = [a for a in FLAGS.algorithm if parse_spec(a)[0] not in FFGB_FAMILY]
    if bad:
      raise ConfigError("algorithm", f"--task=shift_tabular runs only {', '.join(FFGB_FAMILY)}; got {bad[0]}")


def validate_distributed():
  """Checks the multi-host flags without touching JAX (they are used before any backend starts).

  Raises:
    ConfigError: naming the flag and the accepted values.
  """
  if FLAGS.num_processes < 1:
    raise ConfigError("num_processes", f"must be >= 1; got {FLAGS.num_processes}")
  if not 0 <= FLAGS.process_id < FLAGS.num_processes:
    raise ConfigError("process_id", f"must be in [0, num_processes={FLAGS.num_processes}); "
                      f"got {FLAGS.process_id}")
  if FLAGS.num_processes > 1:
    host, _, port = (FLAGS.coordinator_address or "").rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
      raise ConfigError("coordinator_address", f"must be HOST:PORT (e.g. localhost:1234) with "
                        f"--num_processes > 1; got {FLAGS.coordinator_address!r}")


def build_task():
  """The task described by the flags (loads and partitions data)."""
  from fedsim.tasks import make_task
  return make_task(FLAGS.task, num_clients=FLAGS.num_clients, seed=FLAGS.seed, dataset=FLAGS.dataset,
                   data_dir=FLAGS.data_dir, partition=FLAGS.partition,
                   dirichlet_alpha=FLAGS.dirichlet_alpha, shards_per_client=FLAGS.shards_per_client,
                   quantity_law=FLAGS.quantity_law, quantity_sigma=FLAGS.quantity_sigma,
                   hidden_width=FLAGS.hidden_width, dim=FLAGS.dim, heterogeneity=FLAGS.heterogeneity,
                   target_class=FLAGS.target_class, attack_c=FLAGS.attack_c,
                   classifier=FLAGS.classifier, cache_dir=FLAGS.cache_dir,
                   spectrum_sigma=FLAGS.spectrum_sigma, isotropic=FLAGS.isotropic,
                   finetune_shift=FLAGS.finetune_shift, homo_ratio=FLAGS.homo_ratio,
                   hidden_layers=FLAGS.hidden_layers, activation=FLAGS.activation,
                   shift_kind=FLAGS.shift_kind, feature_shift=FLAGS.feature_shift,
                   tabular_loss=FLAGS.tabular_loss,
                   **smooth_erm_kwargs(), **fzoos_task_kwargs())


def _check_fzoos_task_flags():
  """--task=attack / metric_opt flag checks (exit 2 before anything is built)."""
  if FLAGS.portion is not None and not 0 < FLAGS.portion <= 1:
    raise ConfigError("portion", f"must be in (0, 1]; got {FLAGS.portion}")
  if not (math.isfinite(FLAGS.perturbation_box) and FLAGS.perturbation_box >= 0):
    raise ConfigError("perturbation_box", f"must be >= 0 (0 = task default); got {FLAGS.perturbation_box}")
  if FLAGS.model_train_steps < 0:
    raise ConfigError("model_train_steps", f"must be >= 0 (0 = task default); got {FLAGS.model_train_steps}")
  from fedsim.tasks.metric_opt import METRICS
  if FLAGS.task == "metric_opt":
    _check_one_of("opt_metric", METRICS)
  if FLAGS.task == "attack":
    if FLAGS.classifier not in ("cnn", "mlp"):
      raise ConfigError("classifier", f"unknown {FLAGS.classifier!r} for --task=attack; accepted: cnn, mlp")
    if FLAGS.dataset not in ("digits", "mnist"):
      raise ConfigError("dataset", f"--task=attack needs images; accepted: digits, mnist")


def _check_one_of(flag: str, accepted) -> None:
  """Raises ConfigError(flag, "unknown V; accepted: A, B") unless FLAGS.<flag> is in ``accepted``."""
  value = getattr(FLAGS, flag)
  if value not in accepted:
    raise ConfigError(flag, f"unknown {value!r}; accepted: {', '.join(accepted)}")


def fzoos_task_kwargs() -> dict:
  """The attack / metric_opt arguments of ``make_task`` from the flags (seed 000 §6.2-6.3)."""
  return dict(portion=FLAGS.portion, opt_metric=FLAGS.opt_metric, attack_target=FLAGS.attack_target,
              perturbation_box=FLAGS.perturbation_box, model_train_steps=FLAGS.model_train_steps)


def set_blas_threads(n: int) -> list:
  """Limits every loaded BLAS/LAPACK library to ``n`` threads (0: leave the default).

  Loads jaxlib's LAPACK first (one tiny Cholesky) so its OpenBLAS is among the
  libraries limited (threadpoolctl, a scikit-learn dependency). XLA's own CPU
  matmuls do not use these libraries and are unaffected. Returns
  [[library path, threads]] after the change.
  """
  import jax
  import jax.numpy as jnp
  from threadpoolctl import threadpool_info, threadpool_limits
  jax.block_until_ready(jnp.linalg.cholesky(jnp.eye(2)))
  if n > 0:
    threadpool_limits(limits=n, user_api="blas")
  return [[i["filepath"], i["num_threads"]] for i in threadpool_info() if i.get("user_api") == "blas"]


def smooth_erm_kwargs() -> dict:
  """The logistic_soft / ridge arguments of ``make_task`` from the flags (seed 004)."""
  return dict(samples_per_client=FLAGS.samples_per_client, num_features=FLAGS.num_features,
              server_samples=FLAGS.rank, max_rank=FLAGS.max_rank, mu=FLAGS.l2_penalty,
              data_heterogeneity=FLAGS.data_heterogeneity, server_shift=FLAGS.server_shift,
              feature_map=FLAGS.feature_map, holder_eta=FLAGS.holder_eta, raw_dim=FLAGS.raw_dim)


def parse_flags_or_exit(argv):
  """absl flags parser that turns a flag error into one line and exit status 2."""
  try:
    argv = FLAGS(argv)
  except flags.Error as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
  if "x64" in FLAGS and FLAGS.x64:  # before any array exists (specs/fedlrgd.md §6.3)
    import jax
    jax.config.update("jax_enable_x64", True)
  return argv


FFGB_FAMILY = ("ffgb", "ffgb_nores", "ffgb_c", "ffgb_l", "ffgb_code", "ffgb_nores_code")
FFGB_TASKS = ("softmax", "mlp", "cnn", "shift_tabular")  # tasks with per-client points x (seed 002)


def validate_ffgb(alg: str, hp: dict, where):
  """Range checks of the FFGB-family hyperparameters (seed 002; specs/ffgb.md §2, §6.4).

  Args:
    alg: an FFGB_FAMILY name; hp: its hyperparameters; where: hp name -> flag name.

  Raises:
    ConfigError: naming the flag and the accepted range.
  """
  def finite_pos(n, inf_ok=False):
    v = hp.get(n)
    if v is not None and not (v > 0 and (inf_ok or math.isfinite(v))):
      raise ConfigError(where(n), f"must be > 0{'' if inf_ok else ' and finite'}; got {v}")

  for n in ("eta0", "oracle_lr", "clip_G", "clip_B", "lip_L", "rf_bandwidth", "ridge"):
    finite_pos(n)
  for n in ("eta_cap", "mu_eta_cap"):
    finite_pos(n, inf_ok=True)
  for n in ("eta_decay_p", "mu"):
    if not (hp[n] >= 0 and math.isfinite(hp[n])):
      raise ConfigError(where(n), f"must be >= 0 and finite; got {hp[n]}")
  if not 0 < hp["gamma"] <= 1:
    raise ConfigError(where("gamma"), f"must be in (0, 1]; got {hp['gamma']}")
  for n in ("oracle_steps", "oracle_batch", "rf_features", "sobolev_samples"):
    if hp[n] < 1:
      raise ConfigError(where(n), f"must be >= 1; got {hp[n]}")
  if not (hp["wo_p"] >= 1 and math.isfinite(hp["wo_p"])):
    raise ConfigError(where("wo_p"), f"must be >= 1 and finite; got {hp['wo_p']}")
  if not (hp["sobolev_weight"] >= 0 and math.isfinite(hp["sobolev_weight"])):
    raise ConfigError(where("sobolev_weight"), f"must be >= 0 and finite; got {hp['sobolev_weight']}")
  if hp["weak_learner"] == "wo_lip" and alg != "ffgb_l":
    raise ConfigError(where("weak_learner"), f"wo_lip (eq. 25) needs FFGB.L's closed-form query "
                      f"gradient; accepted for {alg}: scaled, rf_ridge, mlp, cnn, wo_inf")
  if hp["weak_learner"] in ("wo_inf", "wo_lip") and hp["wo_family"] == "cnn" and (
      hp["weak_learner"] == "wo_lip" or FLAGS.task == "shift_tabular" or FLAGS.dataset == "libsvm"):
    raise ConfigError(where("wo_family"), "cnn needs image data (and wo_inf); accepted: mlp, rf, linear")
  if hp["store_learners"] < 0:
    raise ConfigError(where("store_learners"), f"must be >= 0; got {hp['store_learners']}")
  if FLAGS.save_learners and hp["store_learners"] < FLAGS.eval_every:
    raise ConfigError(where("store_learners"), f"--save_learners needs >= eval_every={FLAGS.eval_every}; "
                      f"got {hp['store_learners']}")
  if hp["eta_schedule"] == "theory" and alg != "ffgb_l" and hp["mu"] <= 0:
    raise ConfigError(where("mu"), "eta_schedule=theory (c/(mu(tK+k+1)), Thm 3.1) needs mu > 0")
  if FLAGS.task not in FFGB_TASKS:
    raise ConfigError("task", f"{alg} needs a task with client points; accepted: {', '.join(FFGB_TASKS)}")
  if alg == "ffgb_l" and not (FLAGS.task == "shift_tabular" and FLAGS.tabular_loss == "square"):
    raise ConfigError("task", "ffgb_l needs square loss (problem (14)): --task=shift_tabular --tabular_loss=square")
  if hp["weak_learner"] == "cnn" and (FLAGS.task == "shift_tabular" or FLAGS.dataset == "libsvm"):
    raise ConfigError(where("weak_learner"), "cnn needs image data (--dataset=digits or mnist); "
                      "accepted otherwise: scaled, rf_ridge, mlp")


def comm_rounds(alg: str, hp: dict, num_clients: int, budget: int) -> int:
  """Rounds within ``--comm_budget`` (Figs. 1, 4; [code] comm starts at 2):
  ceil((budget - 2) / cost), cost = m K for the FFGB family, 2 otherwise."""
  if alg in FFGB_FAMILY:
    cost = (hp.get("clients_per_round") or num_clients) * hp["local_steps"]
  else:
    cost = 2
  return max(0, -(-(budget - 2) // cost))
