"""Plain FFGB's update rule (seed 002 Alg. 1-2) against a plain-NumPy reference (issue 15).

Tiny cross-entropy problem: N = 4 clients holding 3, 2, 3, 1 distinct points
x in R^1 (padded to 3) with labels in C = 3 classes, 4 test points, m = 2
clients sampled per round, K = 2 local steps, 2 rounds, mu = 0.1, the
``scaled`` oracle h = gamma phi (gamma = 0.6) on the client's support,
extended off it by the value at the nearest support point (1-NN), so the
oracle is closed-form and the residual is not zero. The reference writes the
paper's rules out in float64 on every point (all clients' and the test points),
treating each function by its values there:

* Alg. 1 line 4 / App. F: f^{t+1} = (1/m) sum_{i in S^t} g_i^{K+1,t}, S^t the
  m sampled clients (tests/algorithms/tiny_problem.py reproduces the draw).
* Alg. 2, for k = 1..K, from g_i^{1,t} = f^t and Delta_i^{0,t} = 0:
  line 3  phi = Delta_i^{k-1,t} + grad R_i[g_i^{k,t}], with eq. (6) for CE:
          grad R_i[g](x_ij) = softmax(g(x_ij)) - e_{y_ij} on client i's points;
  line 4  h_i^{k,t} = WO(phi) = gamma phi on supp alpha_i (1-NN off it);
  line 5  g_i^{k+1,t} = g_i^{k,t} - eta^{k,t} (h_i^{k,t} + mu g_i^{k,t});
  line 6  Delta_i^{k,t} = Delta_i^{k-1,t} + grad R_i[g_i^{k,t}] - h_i^{k,t}.
* the experiments' step (§4): eta^{k,t} = eta_0 / (t K + k + 1), t = 0, 1, ...
* ``ffgb_nores`` (Fig. 2a): the same with Delta == 0 (phi = grad R_i).
* ledgers per round: queries = K sum_{i in S^t} n_i (the K gradient queries
  on each participant's n_i points); bytes_up = m K P 4 (each participant
  uploads its K learners, P float32 words each); bytes_down = (N - 1) m K P 4
  (every one of the N clients downloads the round's m K learners except the K
  it sent itself: N m K - m K; specs/ffgb.md §1.4: (N - 1) K per client at
  m = N); participants = m. The scaled learner's words are its support
  values: x (M, d), v (M, C) and the mask (M,), P = M (d + C + 1).
"""

import numpy as np
import pytest

from fedsim import algorithms
from fedsim.tasks.functional import make_tabular_task
from tests.algorithms import tiny_problem as tp

N, M_MAX, C, D = 4, 3, 3, 1
SIZES = (3, 2, 3, 1)
M, K, T = 2, 2, 2
GAMMA, MU, ETA0 = 0.6, 0.1, 0.5


@pytest.fixture(scope="module")
def problem():
  rs = np.random.default_rng(7)
  x = rs.uniform(size=(N, M_MAX, D))
  y = rs.integers(0, C, size=(N, M_MAX))
  mask = np.arange(M_MAX)[None, :] < np.asarray(SIZES)[:, None]
  x_test = rs.uniform(size=(4, D))
  task = make_tabular_task(x * mask[..., None], y * mask, mask=mask, x_test=x_test,
                           y_test=rs.integers(0, C, size=4), loss="ce", num_outputs=C)
  return task, x, y, mask, x_test


def _points(x, mask, x_test):
  """All points P (real client points, then test points) and each client's indices in P."""
  pts, idx = [], []
  for i in range(N):
    idx.append(list(range(len(pts), len(pts) + SIZES[i])))
    pts.extend(x[i, :SIZES[i]])
  return np.asarray(pts + list(x_test), np.float64), idx


def _softmax(z):
  e = np.exp(z - z.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


def _reference_round(f, t, ids, pts, idx, y, residual=True):
  """f^{t+1} on every point from f^t (P, C), Alg. 1-2 written out."""
  out = np.zeros_like(f)
  for i in ids:
    sup = pts[idx[i]]
    nn = np.argmin(np.abs(pts[:, None, 0] - sup[None, :, 0]), axis=1)  # 1-NN in supp alpha_i
    onehot = np.eye(C)[y[i, :SIZES[i]]]
    g = f.copy()
    delta = np.zeros((SIZES[i], C))
    for k in range(1, K + 1):
      eta = ETA0 / (t * K + k + 1)
      grad = _softmax(g[idx[i]]) - onehot  # eq. (6), CE
      phi = delta + grad if residual else grad  # line 3
      h_sup = GAMMA * phi  # line 4 (scaled oracle)
      h = h_sup[nn]
      g = g - eta * (h + MU * g)  # line 5
      delta = delta + grad - h_sup if residual else np.zeros_like(delta)  # line 6
    out += g
  return out / len(ids)  # Alg. 1 line 4: mean over the m participants


@pytest.mark.parametrize("name", ["ffgb", "ffgb_nores"])
def test_two_rounds_partial_participation_against_numpy(problem, name):
  task, x, y, mask, x_test = problem
  alg = algorithms.build(name, task, weak_learner="scaled", gamma=GAMMA, mu=MU, local_steps=K,
                         clients_per_round=M, eta0=ETA0, eta_schedule="paper", store_learners=T)
  states, stats = tp.run(alg, task, T)
  pts, idx = _points(x, mask, x_test)
  n_real = sum(SIZES)
  f = np.zeros((len(pts), C))
  other = np.zeros((len(pts), C))  # the other variant (with / without residual), for contrast
  for t in range(T):
    ids = tp.participants(task, t, M)
    assert sorted(np.asarray(states[t + 1].store["ids"][t]).tolist()) == sorted(ids)
    other = _reference_round(f, t, ids, pts, idx, y, residual=(name == "ffgb_nores"))
    f = _reference_round(f, t, ids, pts, idx, y, residual=(name == "ffgb"))
    s = states[t + 1]
    got_train = np.asarray(s.f_train)
    for i in range(N):
      np.testing.assert_allclose(got_train[i, :SIZES[i]], f[idx[i]], rtol=1e-5, atol=1e-6,
                                 err_msg=f"{name} round {t} client {i}")
      assert not np.any(got_train[i, SIZES[i]:])  # padding rows stay 0
    np.testing.assert_allclose(np.asarray(s.f_test), f[n_real:], rtol=1e-5, atol=1e-6)
    # The ablation differs exactly by the residual: the two references are far apart.
    assert np.max(np.abs(other - f)) > 1e-3
    st = stats[t]
    words = M_MAX * (D + C + 1)
    assert tp.ledger(st, "queries") == K * sum(SIZES[i] for i in ids)
    assert tp.ledger(st, "bytes_up") == M * K * words * 4
    assert tp.ledger(st, "bytes_down") == (N - 1) * M * K * words * 4
    assert tp.ledger(st, "participants") == M


def test_full_participation_averages_over_all_clients(problem):
  # m = N: S^t = [N] every round, so the 1/m average is over all four clients.
  task, x, y, mask, x_test = problem
  alg = algorithms.build("ffgb", task, weak_learner="scaled", gamma=GAMMA, mu=MU, local_steps=K,
                         clients_per_round=N, eta0=ETA0, eta_schedule="paper")
  states, stats = tp.run(alg, task, 1)
  pts, idx = _points(x, mask, x_test)
  f = _reference_round(np.zeros((len(pts), C)), 0, list(range(N)), pts, idx, y)
  np.testing.assert_allclose(np.asarray(states[1].f_test), f[sum(SIZES):], rtol=1e-5, atol=1e-6)
  assert tp.ledger(stats[0], "queries") == K * sum(SIZES)
