"""The committed reports re-judge to themselves from their stored evidence (issue 34 item 5).

``python -m experiments.reproduce --paper=all --from_evidence=docs/reproduction`` runs no experiment: it
judges every claim again from ``docs/reproduction/<paper>/evidence/`` and must write exactly the
committed ``claims.json`` files (a claim whose evidence is not stored keeps its committed record): every
word (verdict, reason, form) exactly, every number to 1e-9 relative (a statistic's last bits follow the
CPU's BLAS kernels: a least-squares slope differed by 1 ulp between an AVX-512 Xeon and an AVX2 EPYC). A
criterion or statistic changed without re-judging the committed reports fails here.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

from experiments.reproduce import claims as C
from experiments.reproduce import papers
from experiments.reproduce.claims import REPO

DOCS = os.path.join(REPO, "docs", "reproduction")


def _same(a, b) -> bool:
  """a == b, floats to 1e-9 relative (1e-300 absolute); every other value (words, ints, bools) exactly."""
  if isinstance(a, float) and isinstance(b, float):
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-300) or (math.isnan(a) and math.isnan(b))
  if isinstance(a, dict) and isinstance(b, dict):
    return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
  if isinstance(a, list) and isinstance(b, list):
    return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
  return type(a) is type(b) and a == b


def test_same_is_exact_on_words_and_tolerant_on_round_off_only():
  assert _same({"v": "reproduced", "x": [0.5077736118699951, 3]}, {"v": "reproduced", "x": [0.5077736118699954, 3]})
  assert not _same({"v": "reproduced"}, {"v": "not reproduced"})
  assert not _same([0.5077736118699951], [0.5077736128699951])     # 2e-9 relative: not round-off
  assert not _same([0.5], [0.5000001]) and not _same([3], [3.0]) and not _same([1, 2], [1, 2, 3])


def test_committed_claims_rejudge_to_themselves_from_their_evidence(tmp_path):
  proc = subprocess.run([sys.executable, "-m", "experiments.reproduce", "--paper=all",
                         f"--from_evidence={DOCS}", f"--output_dir={tmp_path}"],
                        cwd=REPO, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  assert "$ python" not in proc.stdout  # nothing ran
  rejudged = 0
  for paper in papers.PAPERS:
    with open(os.path.join(DOCS, paper, "claims.json")) as f:
      committed = json.load(f)
    with open(tmp_path / paper / "claims.json") as f:
      again = json.load(f)
    for old, new in zip(committed["claims"], again["claims"], strict=True):
      assert _same(new, old), f"{old['id']} re-judges differently from its stored evidence:\n{new}\n{old}"
    rejudged += sum(bool(r.get("evidence")) for r in committed["claims"])
    assert [r["id"] for r in committed["claims"]] == [r["id"] for r in again["claims"]]
  assert rejudged >= 1
  assert proc.stdout.count("(re-judged from stored evidence)") == rejudged


def test_every_record_has_its_claims_kind():
  for paper in papers.PAPERS:
    with open(os.path.join(DOCS, paper, "claims.json")) as f:
      records = json.load(f)["claims"]
    kinds = {c.id: c.kind for c in papers.PAPERS[paper]}
    for r in records:
      assert r["kind"] == kinds[r["id"]], r["id"]


def test_every_declared_paper_record_has_its_form_deviations_effect_unit_and_per_seed_values():
  from experiments.reproduce import engine
  for paper in papers.PAPERS:
    with open(os.path.join(DOCS, paper, "claims.json")) as f:
      records = json.load(f)["claims"]
    declared = engine.load(paper) if os.path.exists(os.path.join(engine.FOLDER, f"{paper}.toml")) else {}
    for r in records:
      if r["id"] not in declared or (r["kind"] in ("check", "diagnostic") and "digest" not in r):
        continue  # (a check kept from before its declaration: its tests' evidence was not stored)
      assert r["digest"] == declared[r["id"]].digest, f"{r['id']}: judged under another declaration"
      if r["kind"] == "not evaluated":
        assert r["verdict"] == "not evaluated" and r["needs"], r["id"]
      elif r["kind"] == "paper":
        assert r["form"] and "deviations" in r and r["verdict"] in C.VERDICTS, r["id"]
        assert r["results"] and r["effect"]["unit"], r["id"]
        for c in r["results"]:
          assert c["per_seed"] and c["unit"] == r["effect"]["unit"], r["id"]
