"""FFGB-family flag ranges (seed 002; specs/ffgb.md §2, §6.4): exit 2, one line naming the flag."""

import os
import subprocess
import sys

from tests.cli_probe import validate_flag_sets

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FF = ["--algorithm=ffgb", "--task=mlp", "--num_clients=8", "--clients_per_round=8"]
TAB = ["--task=shift_tabular", "--num_clients=4", "--clients_per_round=4"]

# (arguments, the flag the one-line error must name)
CASES = [
    (FF + ["--local_steps=0"], "local_steps"),
    (FF + ["--ffgb_local_steps=0"], "ffgb_local_steps"),
    (FF + ["--eta0=0"], "eta0"),
    (FF + ["--eta0=nan"], "eta0"),
    (FF + ["--eta_decay_p=-1"], "eta_decay_p"),
    (FF + ["--eta_cap=0"], "eta_cap"),
    (FF + ["--mu_eta_cap=-1"], "mu_eta_cap"),
    (FF + ["--mu=-0.1"], "mu"),
    (FF + ["--eta_schedule=theory"], "mu"),  # c/(mu(tK+k+1)) needs mu > 0
    (FF + ["--eta_schedule=fast"], "eta_schedule"),
    (FF + ["--gamma=0"], "gamma"),
    (FF + ["--gamma=1.5"], "gamma"),
    (FF + ["--weak_learner=tree"], "weak_learner"),
    (FF + ["--oracle_steps=0"], "oracle_steps"),
    (FF + ["--oracle_lr=0"], "oracle_lr"),
    (FF + ["--oracle_batch=0"], "oracle_batch"),
    (FF + ["--mlp_init=zeros"], "mlp_init"),
    (FF + ["--rf_features=0"], "rf_features"),
    (FF + ["--rf_bandwidth=-1"], "rf_bandwidth"),
    (FF + ["--ridge=0"], "ridge"),
    (FF + ["--store_learners=-1"], "store_learners"),
    (FF + ["--save_learners", "--store_learners=2", "--eval_every=10"], "store_learners"),
    (["--algorithm=ffgb_c", "--task=mlp", "--num_clients=8", "--clients_per_round=8", "--clip_G=0"], "clip_G"),
    (["--algorithm=ffgb_c", "--task=mlp", "--num_clients=8", "--clients_per_round=8", "--ffgb_c_clip_B=-2"],
     "ffgb_c_clip_B"),
    (TAB + ["--algorithm=ffgb_l", "--lip_L=0"], "lip_L"),
    (TAB + ["--algorithm=ffgb_l", "--ffgb_l_query=other"], "ffgb_l_query"),
    (FF + ["--algorithm=ffgb:gamma=2"], "algorithm"),
    (FF + ["--homo_ratio=1.5"], "homo_ratio"),
    (FF + ["--homo_ratio=-0.1"], "homo_ratio"),
    (FF + ["--comm_budget=-5"], "comm_budget"),
    (FF + ["--hidden_layers=0"], "hidden_layers"),
    (FF + ["--activation=tanh"], "activation"),
    (["--algorithm=ffgb", "--task=quadratic"], "task"),
    (["--algorithm=ffgb_l", "--task=mlp", "--num_clients=8", "--clients_per_round=8"], "task"),
    (TAB + ["--algorithm=ffgb", "--weak_learner=cnn"], "weak_learner"),
    (TAB + ["--algorithm=ffgb", "--shift_kind=kl"], "shift_kind"),
    (TAB + ["--algorithm=ffgb", "--shift_kind=tv", "--feature_shift=2"], "feature_shift"),
    (TAB + ["--algorithm=ffgb", "--tabular_loss=hinge"], "tabular_loss"),
    (TAB + ["--algorithm=ffgb,fedavg"], "algorithm"),
]
GOOD = [
    FF + ["--weak_learner=cnn", "--homo_ratio=0", "--comm_budget=0", "--hidden_layers=2",
          "--activation=leaky_relu", "--eta_cap=inf"],
    TAB + ["--algorithm=ffgb_l,ffgb_c", "--shift_kind=tv", "--feature_shift=1", "--mu=0.1",
           "--eta_schedule=theory", "--ffgb_c_clip_B=30"],
]

def test_ffgb_flag_ranges_are_checked_before_building():
  cases = [a for a, _ in CASES] + GOOD
  got = validate_flag_sets(cases)  # one process parses every case (one JAX import)
  for (args, flag), res in zip(CASES, got[:len(CASES)]):
    assert res is not None, f"{args} was accepted"
    assert res[0] == flag, (args, res)
    assert "\n" not in res[1]
  assert got[len(CASES):] == [None] * len(GOOD), got[len(CASES):]


def test_bad_ffgb_flag_exits_2_with_one_line(tmp_path):
  proc = subprocess.run([sys.executable, "-m", "experiments.run", *FF, "--gamma=0",
                         f"--output_dir={tmp_path}"], cwd=REPO, capture_output=True, text=True,
                        timeout=300, env=dict(os.environ, JAX_PLATFORMS="cpu"))
  assert proc.returncode == 2
  lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
  assert len(lines) == 1 and "--gamma" in lines[0] and "(0, 1]" in lines[0], proc.stderr
  assert not os.path.exists(tmp_path / "config.json")
