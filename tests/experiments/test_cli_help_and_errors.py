"""Issue 36 items 1-2 on the command line: help that fits a person, and errors that name where they
came from (one line, exit 2, before anything compiles). The Python side is tests/test_api_errors.py."""

import json
import os
import re
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _binary(module, *args, timeout=300):
  return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, capture_output=True, text=True,
                        timeout=timeout, env=dict(os.environ, JAX_PLATFORMS="cpu"))


def _one_line(proc) -> str:
  lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
  assert proc.returncode == 2 and len(lines) == 1, (proc.returncode, proc.stderr[-3000:])
  assert "Traceback" not in proc.stderr
  return lines[0]


# --- item 1: help -------------------------------------------------------------------------

def test_help_exits_0_with_the_runs_own_flags_grouped_in_under_150_lines():
  proc = _binary("experiments.run", "--help")
  assert proc.returncode == 0, proc.stderr[-2000:]
  lines = proc.stdout.rstrip("\n").splitlines()
  assert len(lines) < 150, len(lines)
  for group in ("experiment:", "data:", "algorithm selection:", "output:", "compute:", "multi-host:"):
    assert group in lines, group
  assert any(line.startswith("task") and line.endswith(":") for line in lines)
  for flag in ("--rounds=300", "--seed=0", "--dataset=digits", "--task=softmax", "--algorithm=fedavg,fedzo",
               "--output_dir=runs/main", "--flagfile=FILE", "--hidden_width=64", "--[no]overwrite"):
    assert any(line.lstrip().startswith(flag) for line in lines), flag
  assert "--fedzo_lr" not in proc.stdout                   # per-algorithm flags: experiments.hparams NAME
  assert "python -m experiments.hparams NAME" in lines[-2] and "--helpfull" in lines[-1]
  # The same text from -h; --helpfull (absl's list of every flag) still works.
  assert _binary("experiments.run", "-h").stdout == proc.stdout
  full = _binary("experiments.run", "--helpfull")
  assert full.returncode == 0 and "--fedzo_lr" in full.stdout and len(full.stdout.splitlines()) > 1000


def test_every_own_flag_is_in_help_and_a_binarys_flags_come_first():
  import experiments.run  # noqa: F401 (defines the flags)
  from experiments import common
  own = [f.name for f in common.FLAGS.get_flags_for_module(sys.modules[common.__name__])
         if not common._is_hparam_flag(f.name)]
  text = _binary("experiments.run", "--help").stdout
  for name in own:
    assert re.search(rf"^  --(\[no\])?{name}\b", text, re.M), name
  sweep = _binary("experiments.sweep", "--help")
  assert sweep.returncode == 0 and sweep.stdout.splitlines()[5] == "sweep:"
  assert "--seeds=1" in sweep.stdout and len(sweep.stdout.splitlines()) < 150


def test_no_flag_help_repeats_a_segment():
  """The shared --HP flags once joined each algorithm's help with ' | ' (``--accept_if_improves: A | A'``)."""
  import experiments.run  # noqa: F401 (defines the flags)
  from experiments import common
  flags = list(common.FLAGS.get_flags_for_module(sys.modules[common.__name__]))
  assert len(flags) > 500
  for f in flags:
    assert " | " not in f.help, (f.name, f.help)
    segments = [s.strip() for s in re.split(r"; |\(|\)|\[|\]", f.help) if len(s.strip()) > 12]
    assert len(segments) == len(set(segments)), (f.name, f.help)
  # A shared flag whose fields differ names whose help it shows and where the others' are.
  lr = common.FLAGS["lr"].help
  assert lr.startswith("client learning rate (eta) (fedavg") and "see --ALG_lr" in lr


def test_hparams_binary_prints_one_algorithms_table():
  proc = _binary("experiments.hparams", "fedzo")
  assert proc.returncode == 0, proc.stderr[-2000:]
  lines = proc.stdout.splitlines()
  assert lines[0].startswith("FedZOConfig: fedzo")
  assert lines[2].split() == ["field", "type", "default", "accepted", "source"]
  assert lines[3].split()[:4] == ["lr", "float", "0.001", ">"] and "Fang et al. 2022, §V-B" in lines[3]
  assert lines[4].strip() == "client learning rate (eta)"
  assert "fedzo runs with lr=0.01 instead of the default above" in proc.stdout   # RUN_DEFAULTS
  # --markdown: its HYPERPARAMETERS.md section, verbatim (one function writes both).
  md = _binary("experiments.hparams", "fedzo", "--markdown")
  with open(os.path.join(REPO, "HYPERPARAMETERS.md")) as f:
    assert md.stdout.startswith("## FedZOConfig") and md.stdout in f.read()


def test_hparams_binary_refuses_an_unknown_name_with_a_suggestion():
  line = _one_line(_binary("experiments.hparams", "fedzoo"))
  assert line.startswith("error: unknown algorithm 'fedzoo' (did you mean 'fedzo'?); accepted: fedavg")
  assert _one_line(_binary("experiments.hparams")).startswith("error: give one algorithm NAME")


# --- item 2: every error names where it came from ------------------------------------------

@pytest.mark.parametrize("args, want", [
    (["--algorithm=fedavg,fedzo:local_steps=0"], "error: --algorithm fedzo: local_steps must be >= 1; got 0"),
    (["--algorithm=fedavg,fedzo:lr=-1"], "error: --algorithm fedzo: lr must be > 0 and finite; got -1.0"),
    (["--algorithm=fedzo:direction=spher"],
     "error: --algorithm fedzo: direction: unknown 'spher' (did you mean 'sphere'?); accepted: sphere, "
     "gaussian, orthogonal"),
    (["--algorithm=fedzo:lrr=1"], "error: --algorithm fedzo: unknown hyperparameter 'lrr' (did you mean 'lr'?); "),
    (["--algorithm=fedzoo"], "error: --algorithm: unknown algorithm 'fedzoo' (did you mean 'fedzo'?)"),
    (["--seed=-1"], "error: --seed: must be >= 0; got -1"),
    (["--quantity_sigma=-1"], "error: --quantity_sigma: must be >= 0 and finite; got -1.0"),
    (["--quantity_law=lognorm"], "error: --quantity_law: unknown quantity_law 'lognorm' (did you mean 'lognormal'?)"),
    (["--task=mlp", "--hidden_width=0"], "error: --hidden_width: must be >= 1; got 0"),
    (["foo"], "error: unexpected argument 'foo': flags are --NAME=VALUE (--help lists them)"),
    (["--flagfile=nope.cfg"], "error: --flagfile: cannot read nope.cfg: No such file or directory"),
])
def test_bad_input_names_its_source_in_one_line(args, want, tmp_path):
  line = _one_line(_binary("experiments.run", *args, f"--output_dir={tmp_path / 'out'}"))
  assert line.startswith(want), line
  assert not (tmp_path / "out").exists()


def test_a_refused_directory_speaks_flags_on_the_command_line(tmp_path):
  (tmp_path / "config.json").write_text("{not json")
  line = _one_line(_binary("experiments.run", "--rounds=0", f"--output_dir={tmp_path}"))
  assert line.startswith(f"error: --output_dir: {tmp_path}/config.json is not readable JSON")
  assert line.endswith("pass --overwrite to replace the run, or use another --output_dir")


def test_rounds_0_writes_no_plot_and_no_warning(tmp_path):
  proc = _binary("experiments.run", "--algorithm=fedavg", "--num_clients=4", "--clients_per_round=2", "--rounds=0",
                 f"--output_dir={tmp_path}")
  assert proc.returncode == 0 and proc.stderr.strip() == "", proc.stderr[-2000:]
  assert "(no curves.png: no algorithm ran a round)" in proc.stdout
  assert (tmp_path / "config.json").exists() and not (tmp_path / "curves.png").exists()


def test_sweep_suggests_a_name_and_names_each_differing_flag_once(tmp_path):
  line = _one_line(_binary("experiments.sweep", "--sweep=lrr=0.1,0.2", f"--output_dir={tmp_path / 'a'}"))
  assert line.startswith("error: --sweep: cannot sweep 'lrr' (did you mean 'lr'?); accepted:")
  (tmp_path / "sweep_config.json").write_text(json.dumps({"rounds": 30}))
  line = _one_line(_binary("experiments.sweep", "--algorithm=fedavg", "--rounds=20", f"--output_dir={tmp_path}"))
  assert "--rounds: stored 30, given 20" in line and line.count("--rounds") == 1, line


def test_hparams_binary_is_quiet_when_the_reader_closes_the_pipe():
  # `python -m experiments.hparams fedzo | head -2`: the reader goes away before the table is written
  # (here at once, so the write always finds the pipe closed).
  proc = subprocess.Popen([sys.executable, "-m", "experiments.hparams", "fedzo"], cwd=REPO, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, env=dict(os.environ, JAX_PLATFORMS="cpu"))
  proc.stdout.close()
  err = proc.stderr.read()
  assert proc.wait(timeout=300) == 0 and "Traceback" not in err, err[-2000:]
