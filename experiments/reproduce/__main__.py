r"""Regenerates the evidence for the papers' claims: one report per paper, with verdicts.

  python -m experiments.reproduce --paper=all --scale=smoke --output_dir=runs/reproduce

For each claim of the chosen papers (:mod:`experiments.reproduce.papers`) it runs
the claim's commands, judges the numbers by the claim's fixed criterion and
writes ``DIR/<paper>/report.md``, ``DIR/<paper>/claims.json``, the figures under
``DIR/<paper>/fig/`` and ``DIR/report.md`` (the index). A rerun resumes: claims
already in ``claims.json`` at the same scale are kept, and finished runs are not
run again. ``--scale=smoke`` runs fewer rounds and seeds (verdicts marked
``smoke``); ``--scale=paper`` the papers' settings.
"""

from __future__ import annotations

import json
import os
import sys
import time

from absl import app, flags

from experiments.reproduce import claims as claims_lib
from experiments.reproduce import papers, report

FLAGS = flags.FLAGS


def define_flags():
  """Defines this binary's flags (only when run as a program, so importing it defines none)."""
  flags.DEFINE_enum("paper", "all", [*papers.PAPERS, "all"], "which paper's claims to reproduce")
  flags.DEFINE_enum("scale", "smoke", list(claims_lib.SCALES), "smoke: fewer rounds and seeds; paper: "
                    "the papers' settings")
  flags.DEFINE_string("output_dir", "runs/reproduce", "where the reports, figures and runs go")
  flags.DEFINE_list("claims", [], "only these claim ids (default: all of the chosen papers)")
  flags.DEFINE_bool("rerun", False, "re-evaluate claims already in claims.json (finished runs are still "
                    "reused)")

def _load(path: str) -> dict:
  if not os.path.exists(path):
    return {}
  with open(path) as f:
    return {r["id"]: r for r in json.load(f)["claims"]}


def reproduce(paper: str, scale: str, root: str, only=(), rerun: bool = False) -> list[dict]:
  """Evaluates ``paper``'s claims (resuming) and writes its report; returns the records."""
  folder = os.path.join(root, paper)
  os.makedirs(folder, exist_ok=True)
  done = _load(os.path.join(folder, "claims.json"))
  todo = [c for c in papers.PAPERS[paper] if not only or c.id in only]
  pending = [c for c in todo if rerun or c.id not in done or done[c.id]["scale"] != scale]
  batch = tuple(dict.fromkeys(n for c in pending for n in c.tests))
  records = []
  for i, claim in enumerate(todo, 1):
    old = done.get(claim.id)
    if old is not None and old["scale"] == scale and not rerun:
      print(f"[{paper} {i}/{len(todo)}] {claim.id}: {old['verdict']} (kept from claims.json)", flush=True)
      records.append(old)
      continue
    print(f"[{paper} {i}/{len(todo)}] {claim.id} ...", flush=True)
    ctx = claims_lib.Context(folder, scale, batch_tests=batch)
    t0 = time.perf_counter()
    ev = claim.evaluate(ctx)
    ev.commands = list(dict.fromkeys(ctx.commands))
    rec = report.claim_record(claim, ev, scale, time.perf_counter() - t0)
    print(f"[{paper} {i}/{len(todo)}] {claim.id}: {rec['verdict']} ({rec['seconds']} s)", flush=True)
    records.append(rec)
    kept = [done[c.id] for c in papers.PAPERS[paper] if c.id in done and c.id not in {r["id"] for r in records}]
    report.write_paper(folder, paper, papers.TITLES[paper], records + kept, papers.PENDING[paper])
  report.write_paper(folder, paper, papers.TITLES[paper], records, papers.PENDING[paper])
  return records


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
  chosen = list(papers.PAPERS) if FLAGS.paper == "all" else [FLAGS.paper]
  known = {c.id for p in chosen for c in papers.PAPERS[p]}
  unknown = [c for c in FLAGS.claims if c not in known]
  if unknown:
    print(f"claims: unknown {', '.join(unknown)}; accepted: {', '.join(sorted(known))}", file=sys.stderr)
    sys.exit(2)
  os.makedirs(FLAGS.output_dir, exist_ok=True)
  for paper in chosen:
    reproduce(paper, FLAGS.scale, FLAGS.output_dir, set(FLAGS.claims), FLAGS.rerun)
  report.write_index(FLAGS.output_dir, papers.TITLES)
  print(f"wrote {os.path.join(FLAGS.output_dir, 'report.md')}", flush=True)


if __name__ == "__main__":
  define_flags()
  app.run(main)
