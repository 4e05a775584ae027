"""What do partial participation and AirComp noise cost FedZO per round? (Fang et al. 2022, Thms. 2-3.)

At the global point x of a FedZO run (x^0, or after ``--at_rounds`` rounds of
full-participation, noise-free FedZO on the same task), every one of the N
clients computes its round delta Delta_i with FedZO's own local update (H
steps of the eq.-2 estimator; ``fedsim.algorithms.local.make_local_update``),
``--repeats`` times with independent keys. With Dbar the mean of all N deltas
and f the task's objective (``task.evaluate``; evaluated in float64, outside
the query model) it measures:

* ``progress``: f(x) - f(x + Dbar), the per-round decrease under full
  participation, and ``seed_std``: its standard deviation over the repeats
  (the estimator's own randomness, i.e. seed noise, per round);
* ``linear_progress``: eta H ||grad f(x)||^2 (autodiff), the first-order
  prediction of that decrease;
* ``sampling_cost[M]``: the expected extra loss of averaging M clients drawn
  without replacement instead of all N. Sampling leaves the mean update
  unchanged and only adds the variance Sigma_M = (N - M) / (M (N - 1)) S with
  S = (1/N) sum_i (Delta_i - Dbar)(Delta_i - Dbar)^T, so the cost is the
  second-order term (N - M) / (M (N - 1)) (1/N) sum_i c(Delta_i - Dbar) with
  c(u) = (f(y + u) + f(y - u)) / 2 - f(y), y = x + Dbar: a symmetric second
  difference (exact for a quadratic; no Monte-Carlo noise from the linear
  term). ``sampling_ratio[M]`` = sampling_cost / progress;
* ``noise_cost[snr]``: the expected extra loss of the AirComp channel noise
  (eq. 17) at transmit SNR ``snr`` dB: channels and masks from
  ``fedsim.channels.aircomp`` (h ~ CN(0, channel_var), |h| >= h_min), the
  noise n = y - y_noise_free of ``aircomp.aggregate``, cost c(n) at the
  noise-free aggregate, averaged over ``--channel_draws`` draws;
  ``noise_ratio[snr]`` = noise_cost / progress and ``noise_over_seed[snr]`` =
  noise_cost / seed_std; also the mean |M_t| / N and E||n||^2 / ||Dbar||^2.

All of these are per round. The result is one JSON file (``--result``; default
``<--output_dir>/result.json``) with a list of such dictionaries, one per point
of ``--at_rounds``.

Usage (any FedZO flagfile; the first fedzo entry's hyperparameters are used,
``clients_per_round`` ignored):

  python -m experiments.fedzo.variance_cost \
      --flagfile=experiments/flagfiles/fedzo_fig1b_attack_M.cfg \
      --ms=5,10,25,50 --snrs=0,-10,-20,-30,-40 --result=/tmp/vc.json
"""

from __future__ import annotations

import json
import os
import sys

from absl import app, flags

from experiments import common

FLAGS = flags.FLAGS


def define_flags():
  common.define_flags()
  flags.DEFINE_list("ms", ["5", "10", "25", "50"], "participants M whose sampling cost is measured")
  flags.DEFINE_list("snrs", ["0", "-5", "-10"], "AirComp transmit SNRs (dB) whose noise cost is measured")
  flags.DEFINE_list("at_rounds", ["0"], "measure at x after these many full-participation FedZO rounds")
  flags.DEFINE_integer("repeats", 4, "independent draws of all N deltas (seed noise per round)")
  flags.DEFINE_integer("channel_draws", 16, "channel + noise draws per repeat for the AirComp cost")
  flags.DEFINE_string("result", None, "JSON file written with the measurements (default: "
                      "<--output_dir>/result.json)")


def measure(task, hp: dict, ms, snrs, at_rounds, repeats: int, channel_draws: int, seed: int) -> list[dict]:
  """The per-round costs of the module docstring.

  Args:
    task: a ``fedsim`` Task (N clients, flat dimension d).
    hp: FedZO hyperparameters (``lr``, ``smoothing``, ``local_steps``, ``batch_size``,
      ``fd_directions``, ``direction``, and the AirComp ``h_min``, ``channel_var``,
      ``noise_model``, ``empty_round``).
    ms: participant counts M (each <= N). snrs: transmit SNRs in dB.
    at_rounds: sorted round counts at which to measure.
    repeats, channel_draws: Monte-Carlo sizes. seed: root seed.

  Returns:
    One dict per entry of ``at_rounds`` (keys as in the module docstring).
  """
  import jax
  import jax.numpy as jnp
  import numpy as np
  from jax.flatten_util import ravel_pytree

  from fedsim.algorithms.fedzo import zo_oracle
  from fedsim.algorithms.local import flat_problem, flat_solution, local_optimizer, make_local_update
  from fedsim.channels import aircomp
  from fedsim.core import rng
  from fedsim.core.client_map import map_clients

  n = task.num_clients
  H, eta = int(hp["local_steps"]), float(hp["lr"])
  unravel = flat_solution(task)
  local_update = make_local_update(lambda x, b: task.loss(unravel(x), b), task,
                                   zo_oracle(hp["direction"], int(hp["fd_directions"]), hp["smoothing"]),
                                   local_optimizer("sgd", eta), H, int(hp["batch_size"]))
  clients, ids = task.data["clients"], jnp.arange(n)

  @jax.jit
  def all_deltas(x, key):  # (N, d) float32: every client's FedZO round delta
    return map_clients(local_update, (None, 0, 0), x, clients, rng.client_keys(key, ids))

  root = jax.random.key(seed)
  x0, _ = flat_problem(task, rng.init_keys(root)[0])
  def f64(a):
    return a.astype(jnp.float64) if jnp.issubdtype(a.dtype, jnp.floating) else a

  data64 = jax.tree_util.tree_map(f64, task.data)
  params64 = jax.tree_util.tree_map(f64, unravel(x0))
  _, unravel64 = ravel_pytree(params64)
  f = jax.jit(lambda x: task.evaluate(unravel64(x), data64)["objective"])  # float64 objective
  grad_norm_sq = jax.jit(lambda x: jnp.sum(jax.grad(f)(x) ** 2))
  second = jax.jit(lambda y, U: jax.vmap(lambda u: (f(y + u) + f(y - u)) / 2 - f(y))(U))

  def channel_cost(deltas, snr, key):
    ch = aircomp.AirCompConfig(snr_db=snr, h_min=hp["h_min"], channel_var=hp["channel_var"],
                               noise_model=hp["noise_model"], empty_round=hp["empty_round"])
    clean = aircomp.AirCompConfig(snr_db=float("inf"), h_min=hp["h_min"], channel_var=hp["channel_var"],
                                  noise_model=hp["noise_model"], empty_round=hp["empty_round"])

    def one(k):
      k_chan, k_noise = jax.random.split(k)
      h, mask = aircomp.participating_channels(k_chan, n, ch)
      y, m_size, _ = aircomp.aggregate(deltas, h, mask, k_noise, ch)
      y0, _, _ = aircomp.aggregate(deltas, h, mask, k_noise, clean)
      return y0, y - y0, m_size
    return jax.vmap(one)(jax.random.split(key, channel_draws))

  channel_cost = jax.jit(channel_cost, static_argnums=1)
  out, x, done = [], x0, 0
  rounds_key = rng.stream(root, "rounds")
  for target in at_rounds:
    for r in range(done, target):  # full-participation, noise-free FedZO rounds
      x = x + jnp.mean(all_deltas(x, rng.round_key(rounds_key, r)), axis=0)
    done = target
    x64 = x.astype(jnp.float64)
    fx = float(f(x64))
    prog, samp, noise, m_frac, n_rel = [], {m: [] for m in ms}, {s: [] for s in snrs}, {s: [] for s in snrs}, \
        {s: [] for s in snrs}
    for k in range(repeats):
      key = jax.random.fold_in(jax.random.fold_in(root, 1_000_003), target * 1009 + k)
      deltas = all_deltas(x, key)
      d64 = deltas.astype(jnp.float64)
      dbar = jnp.mean(d64, axis=0)
      y = x64 + dbar
      prog.append(fx - float(f(y)))
      curv = float(jnp.mean(second(y, d64 - dbar)))  # (1/N) sum_i c(Delta_i - Dbar)
      for m in ms:
        samp[m].append((n - m) / (m * (n - 1)) * curv)
      for s in snrs:
        y0, noise_vec, m_size = channel_cost(deltas, float(s), jax.random.fold_in(key, 7))
        y0, noise_vec = y0.astype(jnp.float64), noise_vec.astype(jnp.float64)
        c = jax.vmap(lambda a, b, x=x64: (f(x + a + b) + f(x + a - b)) / 2 - f(x + a))(y0, noise_vec)
        noise[s].append(float(jnp.mean(c)))
        m_frac[s].append(float(jnp.mean(m_size)) / n)
        n_rel[s].append(float(jnp.mean(jnp.sum(noise_vec ** 2, axis=1))) / float(jnp.sum(dbar ** 2)))
    progress = float(np.mean(prog))
    seed_std = float(np.std(prog, ddof=1)) if repeats > 1 else 0.0
    rec = {"round": target, "objective": fx, "N": n, "d": int(x0.shape[0]), "H": H, "eta": eta,
           "progress": progress, "seed_std": seed_std,
           "linear_progress": eta * H * float(grad_norm_sq(x64)),
           "sampling_cost": {str(m): float(np.mean(v)) for m, v in samp.items()},
           "sampling_ratio": {str(m): float(np.mean(v)) / progress for m, v in samp.items()},
           "noise_cost": {str(s): float(np.mean(v)) for s, v in noise.items()},
           "noise_ratio": {str(s): float(np.mean(v)) / progress for s, v in noise.items()},
           "noise_over_seed": {str(s): float(np.mean(v)) / seed_std if seed_std > 0 else float("nan")
                               for s, v in noise.items()},
           "participation": {str(s): float(np.mean(v)) for s, v in m_frac.items()},
           "noise_sq_over_update_sq": {str(s): float(np.mean(v)) for s, v in n_rel.items()}}
    out.append(rec)
    print(json.dumps(rec), flush=True)
  return out


def main(argv):
  del argv
  import jax
  jax.config.update("jax_enable_x64", True)  # the second differences need float64 (before any array)
  cfg = common.experiment_config()
  from fedsim import api
  fedzo = [r for r in cfg.resolve().values() if r.name == "fedzo"]
  if not fedzo:
    print("error: the flags run no fedzo entry", file=sys.stderr)
    sys.exit(2)
  hp = dict(fedzo[0].values)
  task = api.build_task(cfg)
  ms = [int(m) for m in FLAGS.ms]
  if any(not 1 <= m <= task.num_clients for m in ms):
    print(f"error: --ms must lie in [1, {task.num_clients}]", file=sys.stderr)
    sys.exit(2)
  recs = measure(task, hp, ms, [float(s) for s in FLAGS.snrs], sorted(int(r) for r in FLAGS.at_rounds),
                 FLAGS.repeats, FLAGS.channel_draws, cfg.seed)
  result = FLAGS.result or os.path.join(cfg.output_dir, "result.json")
  os.makedirs(os.path.dirname(os.path.abspath(result)), exist_ok=True)
  with open(result, "w") as fh:
    json.dump(recs, fh, indent=1)


if __name__ == "__main__":
  define_flags()
  app.run(main, flags_parser=common.parse_flags_or_exit)
