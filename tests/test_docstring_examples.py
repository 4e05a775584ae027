"""The ``>>>`` examples in public docstrings run and give what they show."""

from __future__ import annotations

import doctest
import importlib
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
MODULES = sorted(str(p.relative_to(ROOT).with_suffix("")).replace("/", ".")
                 for folder in ("fedsim", "experiments") for p in (ROOT / folder).rglob("*.py")
                 if ">>>" in p.read_text())


def test_some_modules_have_examples():
  assert "experiments.reproduce.engine" in MODULES


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
  result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
  assert result.failed == 0 and result.attempted > 0
