"""Defaults that cannot work are refused before compiling (issue 36 item 7, "Why" problem 9).

FedLRGD on ``ridge`` with the default rank 8 > p + 1 (every G^(i) exactly singular,
fedsim/tasks/ridge.py) used to stop at round 1 on a NaN objective; the FD baselines with
orthogonal directions on a 2-dimensional task used to end in a traceback raised while tracing.
Both are now a ConfigError naming the setting and what works, and the CLI prints one line.
The FFGB family on a task without labelled samples (quadratic, ackley, the attacks) used to end
in a KeyError while building; it is refused like FedLRGD on a task without server data.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

import fedsim
from fedsim import algorithms, api
from fedsim.core.errors import ConfigError
from tests.cli_probe import REPO


def _task(name: str, **options):
  algorithm = "ffgb" if name == "shift_tabular" else "fedavg"  # a function-space task runs the FFGB family
  return api.build_task(fedsim.ExperimentConfig(task=name, algorithms=algorithm, task_options=options))


def test_fedlrgd_on_ridge_refuses_a_rank_above_p_plus_1_and_accepts_what_works():
  task = _task("ridge")
  p = task.dim
  with pytest.raises(ConfigError, match=rf"must be <= p \+ 1 = {p + 1} .*weights_solver=pinv") as e:
    algorithms.build("fedlrgd", task)
  assert e.value.flag == "rank"
  algorithms.build("fedlrgd", task, weights_solver="pinv")            # the alternative named
  algorithms.build("fedlrgd", _task("ridge", server_samples=p + 1))    # the bound itself (--rank)
  algorithms.build("fedlrgd", _task("logistic_soft"))                  # logistic_soft: no bound


@pytest.mark.parametrize("name", ["fedzo_fd", "fedprox_zo", "scaffold_zo1", "scaffold_zo2"])
def test_orthogonal_fd_baselines_refuse_more_directions_than_dim(name):
  task = _task("logistic_soft")
  with pytest.raises(ConfigError, match=rf"fd_directions <= dim = {task.dim} .*direction=sphere") as e:
    algorithms.build(name, task)
  assert e.value.flag == "fd_directions"
  algorithms.build(name, task, fd_directions=task.dim)
  algorithms.build(name, task, direction="sphere")


def test_fedzo_orthogonal_is_refused_too_but_its_sphere_default_builds():
  task = _task("logistic_soft")
  algorithms.build("fedzo", task)
  with pytest.raises(ConfigError, match="fd_directions"):
    algorithms.build("fedzo", task, direction="orthogonal")


@pytest.mark.parametrize("args, line", [
    (["--algorithm=fedlrgd", "--task=ridge", "--x64"], "error: --rank: must be <= p + 1"),
    (["--algorithm=fedzo_fd", "--task=logistic_soft"], "error: --fd_directions: orthogonal directions need"),
])
def test_cli_refuses_in_one_line_with_exit_2(tmp_path, args, line):
  out = subprocess.run([sys.executable, "-m", "experiments.run", *args, f"--output_dir={tmp_path}"], cwd=REPO,
                       capture_output=True, text=True, timeout=120)
  assert out.returncode == 2, out.stderr[-2000:]
  assert out.stderr.strip().startswith(line) and len(out.stderr.strip().splitlines()) == 1, out.stderr


@pytest.mark.parametrize("name", ["ffgb", "ffgb_c", "ffgb_l"])
def test_ffgb_refuses_a_task_without_labelled_samples_before_compiling(name):
  # It used to end in a KeyError ('x') raised while building; the config is refused when made
  # (fedsim.algorithms.TASK_NEEDS), and the builder refuses the built task too.
  with pytest.raises(ConfigError, match=rf"^task: {name} needs (a task whose clients hold labelled samples|"
                     r"a square-loss task)") as e:
    fedsim.ExperimentConfig(task="quadratic", task_options={"dim": 3}, num_clients=2, clients_per_round=2,
                            algorithms=name, rounds=1, progress=False)
  assert e.value.flag == "task"
  with pytest.raises(ValueError, match=rf"{name} needs a task whose clients hold labelled samples"):
    algorithms.build(name, _task("quadratic", dim=3))
  with pytest.raises(ValueError, match="ffgb_l needs a square-loss task .*tabular_loss=square"):
    algorithms.build("ffgb_l", _task("softmax", hidden_width=4))


def test_a_function_space_task_refuses_every_algorithm_but_the_ffgb_family():
  # shift_tabular has value caches and no parameter vector: fedavg used to fail while tracing its round.
  task = _task("shift_tabular", samples_per_client=6)
  with pytest.raises(ConfigError, match=r"shift_tabular is a function-space task .*FFGB family \(ffgb, .*, not fedavg"):
    algorithms.build("fedavg", task)
  algorithms.build("ffgb", task)


def test_ffgb_refuses_a_task_without_class_labels_or_square_loss():
  # logistic_soft's float labels used to fail while tracing (cross-entropy needs integer labels).
  with pytest.raises(ValueError, match=r"ffgb needs class labels .*or a square-loss task"):
    algorithms.build("ffgb", _task("logistic_soft"))
