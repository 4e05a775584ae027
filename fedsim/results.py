"""Reading run outputs back: one loader for every analysis script.

``experiments.run`` (and :func:`fedsim.run`) write, under an output folder
``RUN``: ``RUN/config.json`` and, per algorithm label, ``RUN/<label>/metrics.jsonl``
(one JSON object per evaluation, appended as the run goes). Studies lay several
such folders under one root (``ROOT/C5_s0/fzoos/metrics.jsonl``, ...).

* :func:`read_metrics`: the records of one ``metrics.jsonl``.
* :func:`load_runs`: every record under a root as flat rows with the run folder
  and the algorithm label as columns, so ``pandas.DataFrame(load_runs(root))``
  is a tidy table (pandas is not needed here).
* :func:`group`: the same rows nested by columns, for scripts without pandas.
* :func:`read_config`: a run's ``config.json``.

Example::

  rows = load_runs("runs/fig1", "C*_s*/*/metrics.jsonl", metric="objective")
  final = {(run, alg): recs[-1]["objective"]
           for run, algs in group(rows, "run", "algorithm").items() for alg, recs in algs.items()}
"""

from __future__ import annotations

import glob
import gzip
import json
import math
import os
from typing import Any

from fedsim.files import restore_record

METRICS_FILE = "metrics.jsonl"
CONFIG_FILE = "config.json"
# The exit status of ``experiments.run`` when it finished but an algorithm stopped on a non-finite
# objective (its metrics up to there are on disk): distinct from 1 (a crash) and 2 (bad input).
EXIT_DIVERGED = 3
# The exit status of a run that made no progress for ``--watchdog_s`` seconds (``ExperimentConfig.watchdog_s``,
# :mod:`fedsim.core.watchdog`): it printed one line summarising its threads' stacks and ended itself.
EXIT_HUNG = 4
COLUMNS = ("run", "run_dir", "algorithm")  # the columns load_runs adds to every record


def read_metrics(path: str | os.PathLike) -> list[dict[str, Any]]:
  """The evaluation records of one ``metrics.jsonl``, in file order.

  Blank lines are skipped. A last line that is not valid JSON (a run killed
  while writing it) is dropped; an invalid line before it is an error. The file
  is strict JSON (``fedsim.files.strict_record``): a NaN/inf value is written as
  ``null`` and named in the record's ``nonfinite`` field; here it is a float
  again (``nan``, ``inf``, ``-inf``) and ``nonfinite`` is dropped, as in the
  run's own history. Files of older versions with bare ``NaN`` read the same.

  Args:
    path: a ``metrics.jsonl`` file (or its gzip, ``metrics.jsonl.gz``, as stored
      reproduction evidence keeps it), or a folder holding one (an algorithm's
      output folder).

  Returns:
    One dict per record (``round``, ``queries``, ``objective``, ... as the run
    wrote them).

  Raises:
    FileNotFoundError: no such file.
    ValueError: a line other than the last is not a JSON object (the message
      names the file and line number).
  """
  path = os.fspath(path)
  if os.path.isdir(path):
    path = os.path.join(path, METRICS_FILE)
  if not os.path.exists(path) and os.path.exists(path + ".gz"):  # stored evidence keeps it gzipped
    path += ".gz"
  with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
    lines = [(i, line) for i, line in enumerate(f, 1) if line.strip()]
  records = []
  for pos, (lineno, line) in enumerate(lines):
    try:
      rec = json.loads(line)
    except json.JSONDecodeError as e:
      if pos == len(lines) - 1:
        break  # truncated by a killed run
      raise ValueError(f"{path}:{lineno}: not valid JSON ({e.msg})") from None
    if not isinstance(rec, dict):
      raise ValueError(f"{path}:{lineno}: expected a JSON object, got {type(rec).__name__}")
    records.append(restore_record(rec))
  return records


def _finite(value) -> bool:
  return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def load_runs(root: str | os.PathLike, pattern: str = f"**/{METRICS_FILE}",
              metric: str | None = None) -> list[dict[str, Any]]:
  """Every evaluation record of the ``metrics.jsonl`` files under ``root``, as flat rows.

  A file ``ROOT/<run>/<label>/metrics.jsonl`` gives one row per record: the
  record's own keys plus the columns of :data:`COLUMNS` (they take precedence
  over record keys of the same name):

  * ``run``: the run folder (the one above the algorithm folder) relative to
    ``root``, with ``/`` separators; ``"."`` when that folder is ``root``.
  * ``run_dir``: the run folder as a path (``root`` joined with ``run``), for
    :func:`read_config`.
  * ``algorithm``: the algorithm label (the name of the folder holding the file).

  Args:
    root: the folder searched.
    pattern: a glob relative to ``root`` matching the ``metrics.jsonl`` files
      (``**`` matches any depth); e.g. ``"*/metrics.jsonl"`` for one run folder,
      ``"C*_s*/*/metrics.jsonl"`` for a study's run folders.
    metric: if given, keep only the records whose ``metric`` is a finite number
      (files with none contribute no rows).

  Returns:
    Rows ordered by file path, then by record order within a file; empty if
    nothing matches.

  Raises:
    ValueError: a file with an invalid line before its last (:func:`read_metrics`).
  """
  root = os.fspath(root)
  rows = []
  for path in sorted(glob.glob(os.path.join(glob.escape(root), pattern), recursive=True)):
    alg_dir = os.path.dirname(path)
    run_dir = os.path.dirname(alg_dir)
    run = os.path.relpath(run_dir, root).replace(os.sep, "/")
    cols = {"run": run, "run_dir": os.path.join(root, run) if run != "." else root,
            "algorithm": os.path.basename(alg_dir)}
    for rec in read_metrics(path):
      if metric is None or _finite(rec.get(metric)):
        rows.append({**rec, **cols})
  return rows


def group(rows: list[dict[str, Any]], *keys: str) -> dict:
  """Nests ``rows`` by the values of ``keys``, keeping their order.

  Example: ``group(rows, "run", "algorithm")`` -> ``{run: {algorithm: [row, ...]}}``.

  Args:
    rows: dicts that all have every key of ``keys``.
    keys: one or more column names, outermost first.

  Returns:
    Nested dicts ``len(keys)`` deep whose leaves are lists of rows (in input order).

  Raises:
    KeyError: a row without one of ``keys``.
    ValueError: no keys.
  """
  if not keys:
    raise ValueError("group needs at least one key")
  out: dict = {}
  for row in rows:
    node = out
    for k in keys[:-1]:
      node = node.setdefault(row[k], {})
    node.setdefault(row[keys[-1]], []).append(row)
  return out


def read_config(run_dir: str | os.PathLike) -> dict[str, Any]:
  """The ``config.json`` of a run folder (task, algorithms and their hyperparameters, versions, flags).

  Args:
    run_dir: the run's output folder, or one of its algorithm folders (then
      the parent's ``config.json`` is read).

  Returns:
    The parsed JSON object.

  Raises:
    FileNotFoundError: neither ``run_dir`` nor its parent has a ``config.json``.
  """
  run_dir = os.fspath(run_dir)
  for d in (run_dir, os.path.dirname(os.path.abspath(run_dir))):
    path = os.path.join(d, CONFIG_FILE)
    if os.path.exists(path):
      with open(path) as f:
        return json.load(f)
  raise FileNotFoundError(f"no {CONFIG_FILE} in {run_dir} or its parent")


def provenance(run_dir: str | os.PathLike) -> dict[str, Any] | None:
  """The code that made a run (``config.json["provenance"]``, :mod:`fedsim.provenance`).

  Args:
    run_dir: the run's output folder, or one of its algorithm folders.

  Returns:
    ``{"version", "git": {"commit", "dirty"} or None, "fingerprint", "files", "external"}``, or
    None for a run written before fedsim recorded its code.

  Raises:
    FileNotFoundError: no ``config.json`` (:func:`read_config`).

  Example::

    fedsim.results.provenance("runs/main")["git"]   # {"commit": "40caaac...", "dirty": False}
  """
  return read_config(run_dir).get("provenance")
