"""The FZooS paper's FD baselines against a hand reference (seed 000 App. D eqs. 87-93;
specs/fzoos.md §2.3): FedZO-FD, FedProx-ZO, SCAFFOLD-ZO I / II and the exact-gradient
oracle, on N = 3 clients (all take part every round: the averages are (1/N) sum_i),
d = 3, T = 2 local SGD steps, 3 rounds, float64.

With Q = d orthonormal directions the estimator of eq. 3 in the code's normalisation,
(1/(lambda Q)) sum_q (f(x + lambda u_q) - f(x)) u_q, equals grad f(x) / Q up to
O(lambda ||Hess f||) whatever the directions (sum_q u_q u_q^T = I); with lambda = 1e-8 the
reference needs no random draw. grad f_i is eq. 98's derivative written out by hand:

    d f_i / d x_j = 20 (2 qa_j z_j + qb_j) / (10 d) for 0 < x_j < 1 (0 outside),
    z = 20 clip(x, 0, 1) - 10,
    qa = 1 + C (a^i - 1/N),  qb = 1 + C (b^i - 1/N).

Per round r (no correction in round 1, [code]), client i from x_{r-1}, t = 1..T:

    ghat = g_i(x) + corr,   x <- x - eta ghat,   g_i = Delta^(i) = grad f_i / Q
    fedzo_fd      corr = 0                                                  (eq. 87)
    fedprox_zo    corr = gamma (x - x_{r-1})                                (eq. 89)
    scaffold_zo1  corr = c - c_i, c_i = g_i(x_{r-1}), c = (1/N) sum_j c_j   (eq. 91)
    scaffold_zo2  corr = c - c_i, c_i = (1/T) sum_tau g_i(x_{r-1,tau-1}) (raw, last round)  (eq. 93)
    fedavg_true_grad  g_i = grad f_i exactly ([code] gd_opt), corr = 0
    server        x_r = (1/N) sum_i x_{r,T}^(i)  (then the accept rule under variant=code)
"""

import jax
import numpy as np
import pytest

from fedsim import algorithms
from fedsim.core import rng
from fedsim.tasks import make_task

ROOT = jax.random.key(11)
N, D, T, R, C = 3, 3, 2, 3, 5.0
Q, LAM, LR, PROX = 3, 1e-8, 0.01, 0.7
HP = dict(fd_directions=Q, smoothing=LAM, lr=LR, local_steps=T, local_optimizer="sgd",
          prox_gamma=PROX, direction="orthogonal")


def grad_np(x, a, b):
  z = 20.0 * np.clip(x, 0.0, 1.0) - 10.0
  qa, qb = 1.0 + C * (a - 1.0 / N), 1.0 + C * (b - 1.0 / N)
  return np.where((x > 0) & (x < 1), 20.0 * (2.0 * qa * z + qb) / (10.0 * D), 0.0)


def f_np(x, a, b):
  z = 20.0 * np.clip(x, 0.0, 1.0) - 10.0
  qa, qb = 1.0 + C * (a - 1.0 / N), 1.0 + C * (b - 1.0 / N)
  return (np.sum(qa * z * z + qb * z) + 1.0) / (10.0 * D)


def reference(kind, x0, a, b, lr=LR, accept=False, prox_sign=1.0, prox=PROX, cv_sign=1.0, round1=False,
              scale=1.0 / Q, avg=1.0 / N, cv_raw=True):
  """Rounds of eqs. 87-93 by hand; keyword arguments after ``accept`` are deliberate
  defects (power checks). Returns per round (x_r, c_local, c_global)."""
  def g(i, x):
    return (1.0 if kind == "true" else scale) * grad_np(x, a[i], b[i])
  def F(x):
    return np.mean([f_np(x, a[i], b[i]) for i in range(N)])
  x_prev, c_loc, c_glob, out = x0.copy(), np.zeros((N, D)), np.zeros(D), []
  for r in range(R):
    xT, gavg = [], []
    for i in range(N):
      x, gs = x_prev.copy(), np.zeros(D)
      for _ in range(T):
        gi = g(i, x)
        corr = np.zeros(D)
        if r > 0 or round1:
          if kind == "prox":
            corr = prox_sign * prox * (x - x_prev)                       # eq. (89)
          elif kind in ("scaffold1", "scaffold2"):
            corr = cv_sign * (c_glob - c_loc[i])                          # eq. (91) / (93)
        gs += gi if cv_raw else gi + corr                                 # raw Delta^(i) ([code] gx_avg)
        x = x - lr * (gi + corr)
      xT.append(x)
      gavg.append(gs / T)
    x_new = avg * np.sum(xT, axis=0)                                     # Alg. 1 server average
    if accept and F(x_prev) <= F(x_new):                                 # [code] settings.py:79-80
      x_new = x_prev
    if kind == "scaffold1":
      c_loc = np.array([g(i, x_new) for i in range(N)])                  # Delta^(i)(x_r)
    elif kind == "scaffold2":
      c_loc = np.array(gavg)
    c_glob = c_loc.mean(axis=0)
    out.append((x_new, c_loc, c_glob))
    x_prev = x_new
  return out


NAMES = {"none": "fedzo_fd", "prox": "fedprox_zo", "scaffold1": "scaffold_zo1",
         "scaffold2": "scaffold_zo2", "true": "fedavg_true_grad"}
DEFECTS = {"none": [dict(scale=1.0), dict(avg=1.0 / (N - 1))],
           "prox": [dict(prox_sign=-1.0), dict(prox=1.0), dict(round1=True)],
           "scaffold1": [dict(cv_sign=-1.0), dict(scale=1.0)],
           "scaffold2": [dict(cv_sign=-1.0), dict(cv_raw=False)],
           "true": [dict(avg=1.0 / (N + 1))]}


def _run(name, task, **kw):
  alg = algorithms.build(name, task, **{**HP, **kw})
  state = jax.jit(alg.init)(*rng.init_keys(ROOT))
  step = jax.jit(alg.round)
  states, stats = [state], []
  for r in range(R):
    state, s = step(state, rng.round_key(rng.stream(ROOT, "rounds"), r), task.data)
    states.append(state)
    stats.append(s)
  return alg, states, stats


@pytest.mark.parametrize("kind", list(NAMES))
def test_fd_baseline_rounds_match_the_hand_reference(kind):
  with jax.enable_x64(True):
    task = make_task("quadratic", num_clients=N, dim=D, heterogeneity=C, seed=4)
    a, b = (np.asarray(task.data["clients"][k]) for k in ("a", "b"))   # float32, as the task
    alg, states, stats = _run(NAMES[kind], task)
  x0 = np.asarray(states[0].x)
  ref = reference(kind, x0, a, b)
  for r, (x_r, c_loc, c_glob) in enumerate(ref, start=1):
    np.testing.assert_allclose(states[r].x, x_r, rtol=0, atol=5e-7)
    if kind in ("scaffold1", "scaffold2"):
      np.testing.assert_allclose(states[r].c_local, c_loc, rtol=1e-6, atol=5e-6)  # FD: O(lambda) + roundoff
      np.testing.assert_allclose(states[r].c_global, c_glob, rtol=1e-6, atol=5e-6)  # FD: O(lambda) + roundoff
  for defect in DEFECTS[kind]:                                          # the comparison's power
    bad = reference(kind, x0, a, b, **defect)
    assert max(np.abs(g[0] - w[0]).max() for g, w in zip(ref, bad)) > 1e-4, defect  # tol 5e-7
  # Ledger ([code] rgf_opt: x_{r-1} + (Q + 1) a step): 1 + T (Q + 1) per client; the oracle 0.
  per_client = 0 if kind == "true" else 1 + T * (Q + 1)
  extra_d = D if kind in ("scaffold1", "scaffold2") else 0             # c_i up, c down
  for s in stats:
    assert int(s.queries) == N * per_client
    assert int(s.bytes_up) == int(s.bytes_down) == N * (D + extra_d) * 4
    assert int(s.participants) == N
  if kind == "scaffold1":                                               # Q + 1 uncounted at x_r
    assert int(alg.metrics(states[-1])["extra_queries"]) == R * N * (Q + 1)


def test_code_variant_applies_the_accept_rule_to_scaffold_control_variates():
  """variant=code: x_r = x_{r-1} unless F improves, and SCAFFOLD I's c_i are estimated at the
  accepted point. At lr 0.24 both branches run (seen: rounds 1 and 3 overshoot, x kept; round 2,
  corrected by c_i estimated at the kept x_0, improves; F gaps >= 0.01)."""
  with jax.enable_x64(True):
    task = make_task("quadratic", num_clients=N, dim=D, heterogeneity=C, seed=4)
    a, b = (np.asarray(task.data["clients"][k]) for k in ("a", "b"))
    alg, states, _ = _run("scaffold_zo1", task, variant="code", lr=0.24)
  ref = reference("scaffold1", np.asarray(states[0].x), a, b, lr=0.24, accept=True)
  free = reference("scaffold1", np.asarray(states[0].x), a, b, lr=0.24, accept=False)
  assert alg.hparams.accept_if_improves == 1
  kept = [bool(np.all(np.asarray(states[r + 1].x) == np.asarray(states[r].x))) for r in range(R)]
  assert True in kept and False in kept, kept
  for r, (x_r, c_loc, _) in enumerate(ref, start=1):
    np.testing.assert_allclose(states[r].x, x_r, rtol=0, atol=5e-7)
    np.testing.assert_allclose(states[r].c_local, c_loc, rtol=1e-6, atol=5e-6)  # FD: O(lambda) + roundoff
  assert max(np.abs(g[0] - w[0]).max() for g, w in zip(ref, free)) > 1e-3
