"""Every input error of the task's data names its setting (issue 35 item 4): ``data_dir`` and
``cache_dir``, as a ConfigError field from Python and as the flag from the CLI (exit 2, one line)."""

import os
import subprocess
import sys

import pytest

import fedsim
from fedsim.config import DataFieldError, FieldError
from fedsim.core.errors import ConfigError, DataError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _cases(tmp):
  """(dataset, data_dir, message after "PATH: ") for a data_dir of each kind of fault."""
  (tmp / "empty").mkdir()
  (tmp / "one.libsvm").write_text("1 1:0.5\n")
  (tmp / "bad.libsvm").write_text("garbage\n")
  return [
      ("mnist", "/nonexistent/dir", "not a directory; expected a folder with t10k-images-idx3-ubyte"),
      ("fashion_mnist", str(tmp / "one.libsvm"), "not a directory; expected"),
      ("mnist", str(tmp / "empty"), "missing MNIST file(s) t10k-images-idx3-ubyte"),
      ("cifar10", "/nonexistent/dir", "not a directory; --data_dir must be the folder holding data_batch_1.bin"),
      ("cifar10", str(tmp / "empty"), "missing CIFAR-10 file(s) data_batch_1.bin"),
      ("libsvm", "/nonexistent/x", "no such LIBSVM file or folder"),
      ("libsvm", str(tmp / "empty"), "expected exactly one LIBSVM train/test pair"),
      ("libsvm", str(tmp / "one.libsvm"), "1 example(s); need at least 2"),
  ]


def test_python_data_dir_errors_are_field_errors(tmp_path):
  cases = _cases(tmp_path)
  cases.append(("libsvm", str(tmp_path / "bad.libsvm"), "line 1: bad label 'garbage'"))
  for dataset, data_dir, message in cases:
    with pytest.raises(DataFieldError) as e:
      fedsim.api.build_task(fedsim.ExperimentConfig(dataset=dataset, data_dir=data_dir, num_clients=4,
                                                    clients_per_round=2))
    err = e.value
    assert isinstance(err, FieldError) and isinstance(err, DataError) and isinstance(err, ConfigError)
    assert err.field == err.flag == "data_dir" and err.path.startswith(data_dir)
    assert str(err).startswith(f"data_dir: {data_dir}") and message in str(err), str(err)
    assert err.cli == f"--data_dir {err.message}" and err.message.startswith(data_dir)


def test_python_missing_data_dir_names_it(tmp_path, monkeypatch):
  monkeypatch.setenv("FEDSIM_DATA", str(tmp_path))   # an empty data cache
  with pytest.raises(FieldError) as e:
    fedsim.api.build_task(fedsim.ExperimentConfig(dataset="mnist"))
  assert e.value.field == "data_dir"
  assert str(e.value) == (f"data_dir: dataset='mnist' is not in the data cache ({tmp_path / 'mnist'}); run "
                          "`python -m fedsim.data fetch mnist` or give data_dir (a folder with the MNIST IDX files)")
  assert e.value.cli == (f"--data_dir: --dataset=mnist is not in the data cache ({tmp_path / 'mnist'}); run "
                         "`python -m fedsim.data fetch mnist` or give --data_dir (a folder with the MNIST IDX files)")


def test_python_cache_dir_in_the_way(tmp_path):
  (tmp_path / "afile").write_text("")
  cfg = fedsim.ExperimentConfig(task="attack_cw", task_options={"cache_dir": str(tmp_path / "afile")},
                                algorithms="fedzo", num_clients=4, clients_per_round=2)
  with pytest.raises(FieldError, match=r"^cache_dir: cannot create .*afile: File exists$") as e:
    fedsim.api.build_task(cfg)
  assert e.value.field == "cache_dir"


def _cli(*args):
  return subprocess.run([sys.executable, "-m", "experiments.run", *args], cwd=REPO, capture_output=True, text=True,
                        timeout=300, env=dict(os.environ, JAX_PLATFORMS="cpu"))


@pytest.mark.parametrize("case", range(8))
def test_cli_data_dir_errors_name_the_flag(case, tmp_path):
  dataset, data_dir, message = _cases(tmp_path)[case]
  proc = _cli(f"--dataset={dataset}", f"--data_dir={data_dir}", f"--output_dir={tmp_path / 'out'}")
  assert proc.returncode == 2, proc.stderr[-2000:]
  lines = proc.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith(f"error: --data_dir {data_dir}"), proc.stderr
  assert message in lines[0]
  assert not (tmp_path / "out" / "config.json").exists()


def test_cli_missing_data_dir_and_cache_dir(tmp_path):
  proc = _cli("--dataset=libsvm", f"--output_dir={tmp_path / 'out'}")
  assert proc.returncode == 2 and proc.stderr.strip() == (
      "error: --data_dir: --dataset=libsvm needs --data_dir (a LIBSVM file or a folder with <name> and <name>.t)")
  (tmp_path / "afile").write_text("")
  proc = _cli("--task=attack_cw", "--algorithm=fedzo", f"--cache_dir={tmp_path / 'afile'}",
              f"--output_dir={tmp_path / 'out'}")
  assert proc.returncode == 2, proc.stderr[-2000:]
  assert proc.stderr.strip() == f"error: --cache_dir: cannot create {tmp_path / 'afile'}: File exists"
