"""HYPERPARAMETERS.md is what tools/hparams_doc.py writes from the config dataclasses."""

import dataclasses
import importlib.util
from pathlib import Path

from fedsim import algorithms
from fedsim.config import hparam

_PATH = Path(__file__).resolve().parents[2] / "tools" / "hparams_doc.py"
_spec = importlib.util.spec_from_file_location("fedsim_hparams_doc", _PATH)
D = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(D)


def test_committed_document_is_current():
  assert D.OUTPUT.read_text() == D.markdown(), "run: python tools/hparams_doc.py"
  assert D.main(["--check"]) == 0


def test_rows_carry_the_metadata():
  text = D.markdown()
  # FedAvg's lr: default 0.1, range "> 0 and finite" (fedsim.config.range_text of low=0, low_open, finite).
  assert "| `lr` | float | 0.1 | > 0 and finite | client learning rate (eta) |" in text
  # A choices field lists its values; a registry preset is shown beside its name.
  assert "| `weighting` | str | 'uniform' | `uniform`, `size` |" in text
  assert "`fedadam` (server_lr=0.01, server_optimizer='adam')" in text
  # One row per hparam field of every config class in the registry.
  classes = {cls for cls, _, _ in algorithms.REGISTRY.values()}
  fields = sum(len([f for f in dataclasses.fields(c) if "help" in f.metadata]) for c in classes)
  assert text.count("\n| `") == fields


def test_a_changed_field_makes_it_stale(monkeypatch):
  @dataclasses.dataclass(frozen=True)
  class Changed:
    lr: float = hparam(0.2, help="client learning rate (eta)", low=0)
  monkeypatch.setitem(algorithms.REGISTRY, "fedavg", (Changed, {}, None))
  assert D.main(["--check"]) == 1
  assert "| `lr` | float | 0.2 | >= 0 |" in D.markdown()
