"""Sampling, statistics and summary logic of tools/mutation.py (no mutation run)."""

import importlib.util
import math
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[2] / "tools" / "mutation.py"
_spec = importlib.util.spec_from_file_location("fedsim_mutation_driver", _PATH)
M = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(M)


def _wilson_by_hand(k, n, z=1.96):
  # Wilson (1927): (p + z^2/2n -/+ z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n)
  p = k / n
  c = (p + z * z / (2 * n)) / (1 + z * z / n)
  h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
  return c - h, c + h


@pytest.mark.parametrize("k,n,expected", [(8, 10, (0.4902, 0.9433)), (0, 10, (0.0, 0.2775)),
                                          (10, 10, (0.7225, 1.0)), (30, 40, (0.5981, 0.8581))])
def test_wilson_interval_matches_published_values(k, n, expected):
  lo, hi = M.wilson(k, n)
  assert (round(lo, 4), round(hi, 4)) == expected
  hlo, hhi = _wilson_by_hand(k, n)
  assert lo == pytest.approx(max(hlo, 0.0), abs=1e-12) and hi == pytest.approx(min(hhi, 1.0), abs=1e-12)
  assert math.isnan(M.wilson(0, 0)[0])


def test_sample_is_reproducible_order_free_and_sized():
  ids = [f"{i:04x}" for i in range(200)]
  a = M.sample_ids(ids, 30, seed=0, package="fedsim/core")
  b = M.sample_ids(list(reversed(ids)), 30, seed=0, package="fedsim/core")
  assert a == b and len(a) == 30 and len(set(a)) == 30 and set(a) <= set(ids)
  assert M.sample_ids(ids, 30, seed=1, package="fedsim/core") != a
  assert M.sample_ids(ids, 30, seed=0, package="fedsim/data") != a
  assert M.sample_ids(ids, 0, seed=0, package="p") == sorted(ids)
  assert M.sample_ids(ids[:5], 30, seed=0, package="p") == sorted(ids[:5])


def test_summary_counts_equivalents_and_score():
  outcomes = ["killed"] * 6 + ["survived"] * 3 + ["timeout", "error", None]
  mutants = [{"id": f"m{i}", "outcome": o} for i, o in enumerate(outcomes)]
  # m6 survived and is marked equivalent; m0 is marked but was killed (a wrong mark).
  s = M.summarize(mutants, {"m6": "same value", "m0": "wrong"})
  assert (s["killed"], s["survived"], s["timeout"], s["equivalent"], s["error"], s["pending"]) == (6, 2, 1, 1, 1, 1)
  assert s["total"] == 10                      # killed + survived + timeout, before equivalents
  assert s["score"] == pytest.approx(6 / 9)    # killed / (total - equivalent)
  assert s["score_timeouts_killed"] == pytest.approx(7 / 9)
  assert s["ci95"] == pytest.approx(list(M.wilson(6, 9)))
  assert s["wrong_equivalent_marks"] == ["m0"]


def test_classify_pytest_exit_codes():
  assert M.classify(0, False) == "survived"
  assert M.classify(1, False) == "killed" and M.classify(2, False) == "killed"
  assert M.classify(-9, False) == "killed"
  assert M.classify(5, False) == "error" and M.classify(4, False) == "error"
  assert M.classify(None, True) == "timeout"


def test_equivalents_file_needs_a_reason(tmp_path):
  f = tmp_path / "eq.txt"
  f.write_text("# comment\n\nabc123 x*1.0 == x in float32\n")
  assert M.load_equivalents(f) == {"abc123": "x*1.0 == x in float32"}
  f.write_text("abc123\n")
  with pytest.raises(ValueError, match="reason"):
    M.load_equivalents(f)


def test_markdown_table_row():
  rep = {"packages": {"fedsim/x": {"population": 50, "sampled": 4, "s_per_mutant": 12.0, "mutants": [
      {"id": "a", "module": "fedsim/x/m.py", "line": 3, "operator": "core/NumberReplacer", "outcome": "survived",
       "before": "y = 2", "after": "y = 3"}],
      "summary": M.summarize([{"id": "a", "outcome": "survived"}] + [{"id": f"k{i}", "outcome": "killed"}
                                                                  for i in range(3)], {})}}}
  md = M.markdown_table(rep)
  assert "| fedsim/x | 50 | 4 | 3 | 1 | 0 | 0 | 0 | 75% |" in md
  assert "fedsim/x/m.py:3 core/NumberReplacer [survived]" in md


def test_enumeration_skips_messages_and_annotations(tmp_path):
  pytest.importorskip("cosmic_ray")
  mod = tmp_path / "fedsim" / "m.py"
  mod.parent.mkdir()
  mod.write_text("def f(x: int | None, n: int = 2) -> float:\n"
                 "  if x > 1:\n"
                 "    raise ValueError(f'x must be <= {1 + 1}')\n"
                 "  return sum(x) + jnp.argmax(x) - max(x, 0)\n")
  ops = M.make_operators(["core/ReplaceBinaryOperator_Add_Sub", "core/ReplaceBinaryOperator_BitOr_BitAnd",
                          "core/NumberReplacer", "fedsim/SwapCallee"])
  muts, skipped = M.enumerate_module(tmp_path, "fedsim/m.py", ops)
  src = mod.read_text()
  changed = sorted(M.describe(src, M.mutate_source(src, dict(ops)[m["operator"]], m["occurrence"]))[1]
                   for m in muts)
  # `1 + 1` in the error message and `int | None` are not generated; bare sum() has no builtin swap.
  assert skipped["f-string"] == 5 and skipped["type annotation"] == 1, skipped
  assert changed == sorted([
      "def f(x: int | None, n: int = 3) -> float:", "def f(x: int | None, n: int = 1) -> float:",
      "if x > 2:", "if x > 0:",
      "return sum(x) - jnp.argmax(x) - max(x, 0)",
      "return sum(x) + jnp.argmin(x) - max(x, 0)", "return sum(x) + jnp.argmax(x) - min(x, 0)",
      "return sum(x) + jnp.argmax(x) - max(x, 1)", "return sum(x) + jnp.argmax(x) - max(x, -1)"])
  assert len({m["id"] for m in muts}) == len(muts)
