"""fedsim.results: reading metrics.jsonl / config.json back, on small files written here."""

import json
import os

import pytest

from fedsim import results


def _write(path, text):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w") as f:
    f.write(text)


def _jsonl(*records):
  return "".join(json.dumps(r) + "\n" for r in records)


def test_read_metrics_parses_values_and_skips_blank_lines(tmp_path):
  path = tmp_path / "fzoos" / "metrics.jsonl"
  _write(str(path), '{"round": 0, "queries": 0, "objective": 3.5}\n\n  \n'
                    '{"round": 1, "queries": 107, "objective": 1.25, "test_accuracy": null}\n')
  expected = [{"round": 0, "queries": 0, "objective": 3.5},
              {"round": 1, "queries": 107, "objective": 1.25, "test_accuracy": None}]
  assert results.read_metrics(path) == expected
  assert results.read_metrics(str(tmp_path / "fzoos")) == expected   # the algorithm folder


def test_read_metrics_drops_a_truncated_last_line(tmp_path):
  path = str(tmp_path / "metrics.jsonl")
  _write(path, '{"round": 0, "objective": 2.0}\n{"round": 5, "objective": 1.0}\n{"round": 10, "obj')
  assert results.read_metrics(path) == [{"round": 0, "objective": 2.0}, {"round": 5, "objective": 1.0}]
  _write(path, '{"round": 0, "objective": 2.0}\n{"round": 5, "obj\n\n')   # then blank lines
  assert results.read_metrics(path) == [{"round": 0, "objective": 2.0}]
  _write(path, "")
  assert results.read_metrics(path) == []


def test_read_metrics_rejects_a_bad_line_before_the_last(tmp_path):
  path = str(tmp_path / "metrics.jsonl")
  _write(path, '{"round": 0}\n{"round": 1\n{"round": 2}\n')
  with pytest.raises(ValueError, match=r"metrics.jsonl:2: not valid JSON"):
    results.read_metrics(path)
  _write(path, '[1, 2]\n{"round": 2}\n')
  with pytest.raises(ValueError, match=r"metrics.jsonl:1: expected a JSON object, got list"):
    results.read_metrics(path)
  with pytest.raises(FileNotFoundError):
    results.read_metrics(str(tmp_path / "missing.jsonl"))


def _study(root):
  _write(os.path.join(root, "C5_s0", "fzoos", "metrics.jsonl"),
         _jsonl({"round": 0, "objective": 3.0}, {"round": 1, "objective": 1.5}))
  _write(os.path.join(root, "C5_s0", "fedzo_fd", "metrics.jsonl"),
         _jsonl({"round": 0, "objective": 3.0}, {"round": 1, "objective": float("nan")}))
  _write(os.path.join(root, "C50_s1", "fzoos", "metrics.jsonl"),
         _jsonl({"round": 0, "objective": None, "grad_cosine": 0.5}))
  _write(os.path.join(root, "C5_s0", "config.json"), json.dumps({"task": {"name": "quadratic"}}))


def test_load_runs_flat_rows_with_run_and_algorithm_columns(tmp_path):
  root = str(tmp_path)
  _study(root)
  rows = results.load_runs(root)
  assert [(r["run"], r["algorithm"], r["round"]) for r in rows] == [
      ("C50_s1", "fzoos", 0), ("C5_s0", "fedzo_fd", 0), ("C5_s0", "fedzo_fd", 1),
      ("C5_s0", "fzoos", 0), ("C5_s0", "fzoos", 1)]
  assert rows[4] == {"round": 1, "objective": 1.5, "run": "C5_s0",
                     "run_dir": os.path.join(root, "C5_s0"), "algorithm": "fzoos"}
  assert set(results.COLUMNS) == {"run", "run_dir", "algorithm"}
  # Every row has the same columns where the records do (a DataFrame-ready table).
  assert all(set(results.COLUMNS) <= set(r) for r in rows)
  assert results.read_config(rows[4]["run_dir"]) == {"task": {"name": "quadratic"}}


def test_load_runs_metric_filter_pattern_and_nesting(tmp_path):
  root = str(tmp_path)
  _study(root)
  rows = results.load_runs(root, "C5_*/*/metrics.jsonl", metric="objective")
  # NaN and missing/None values dropped; the C50 folder is outside the pattern.
  assert [(r["algorithm"], r["round"], r["objective"]) for r in rows] == [
      ("fedzo_fd", 0, 3.0), ("fzoos", 0, 3.0), ("fzoos", 1, 1.5)]
  nested = results.group(rows, "run", "algorithm")
  assert list(nested) == ["C5_s0"] and list(nested["C5_s0"]) == ["fedzo_fd", "fzoos"]
  assert [r["round"] for r in nested["C5_s0"]["fzoos"]] == [0, 1]
  assert results.load_runs(root, metric="grad_cosine")[0]["run"] == "C50_s1"
  assert results.load_runs(str(tmp_path / "nothing")) == []
  with pytest.raises(ValueError):
    results.group(rows)


def test_load_runs_on_one_run_folder_and_nested_runs(tmp_path):
  run = tmp_path / "out"
  _write(str(run / "hiso-lr=0.1" / "metrics.jsonl"), _jsonl({"round": 0, "optimality_gap": 1.0}))
  _write(str(run / "config.json"), "{}")
  (row,) = results.load_runs(str(run), "*/metrics.jsonl")
  assert (row["run"], row["run_dir"], row["algorithm"]) == (".", str(run), "hiso-lr=0.1")
  assert results.read_config(str(run / "hiso-lr=0.1")) == {}   # from the algorithm folder
  _write(str(tmp_path / "a" / "b" / "fedavg" / "metrics.jsonl"), _jsonl({"round": 3}))
  deep = [r for r in results.load_runs(str(tmp_path)) if r["algorithm"] == "fedavg"]
  assert [(r["run"], r["round"]) for r in deep] == [("a/b", 3)]
  with pytest.raises(FileNotFoundError, match="config.json"):
    results.read_config(str(tmp_path / "a" / "b" / "fedavg"))
