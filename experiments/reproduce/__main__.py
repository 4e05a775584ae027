r"""Regenerates the evidence for the papers' claims: one report per paper, with verdicts.

  python -m experiments.reproduce --paper=all --scale=smoke --output_dir=runs/reproduce

For each claim of the chosen papers (:mod:`experiments.reproduce.papers`) it runs the claim's commands, judges
the numbers by the claim's declared criterion and writes ``DIR/<paper>/report.md``, ``DIR/<paper>/claims.json``,
the figures under ``DIR/<paper>/fig/`` and ``DIR/report.md`` (the index). A rerun resumes: claims already in
``claims.json`` at the same scale are kept, and finished runs are not run again. ``--scale=smoke`` runs fewer
rounds and seeds (verdicts marked ``smoke``); ``--scale=paper`` the papers' settings.
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
  flags.DEFINE_string("output_dir", claims_lib.DEFAULT_OUTPUT, "where the reports, figures and runs go")
  flags.DEFINE_list("claims", [], "only these claim ids (default: all of the chosen papers)")
  flags.DEFINE_integer("jobs", 2, "papers evaluated at the same time (each runs its commands one after "
                       "another; compilation is mostly single-threaded, so 2 jobs use 2 cores)", lower_bound=1)
  flags.DEFINE_integer("run_jobs", 1, "runs of one claim (its seeds, its settings) executed at the same time, each "
                       "its own process: 1 on this 2-core machine; more on many cores or a GPU (processes then "
                       "allocate GPU memory as they need it, XLA_PYTHON_CLIENT_PREALLOCATE=false)", lower_bound=1)
  flags.DEFINE_bool("rerun", False, "re-evaluate claims already in claims.json (finished runs are still "
                    "reused)")
  flags.DEFINE_string("from_evidence", None, "run nothing: re-judge every claim of the chosen papers from the "
                      "evidence stored under FOLDER/<paper>/evidence/ (the committed reports: docs/reproduction), "
                      "writing claims.json, report.md and figures to --output_dir; a claim whose evidence is not "
                      "stored keeps its record from FOLDER/<paper>/claims.json. Takes seconds, not hours.")
  flags.DEFINE_string("data_dir", None, "a folder with the papers' own data sets: cifar-10-batches-bin/ (the "
                      "CIFAR-10 binary release), fashion-mnist/ (its IDX files), covtype/ (LIBSVM's Covertype); "
                      "at --scale=paper the claims that otherwise run on offline substitutes (digits, MNIST-10k) "
                      "run on these, and each claim's Data line says which it used")

def _load(path: str) -> dict:
  if not os.path.exists(path):
    return {}
  with open(path) as f:
    return {r["id"]: r for r in json.load(f)["claims"]}


def reproduce(paper: str, scale: str, root: str, only=(), rerun: bool = False, run_jobs: int = 1,
              data_dir: str | None = None, from_evidence: str | None = None) -> list[dict]:
  """Evaluates ``paper``'s claims (resuming) and writes its report.

  ``run_jobs``: runs of one claim executed side by side (:meth:`claims.Context.runs`);
  ``data_dir``: the papers' own data sets (:meth:`claims.Context.resolve`);
  ``from_evidence``: a folder of reports (``docs/reproduction``): every claim with a record in its
  ``<paper>/claims.json`` is judged again from ``<paper>/evidence/`` at the record's scale, running nothing
  (:class:`claims.MissingEvidence`: the record is kept as it is), and the report is written under ``root``;
  ``scale``, ``rerun`` and ``data_dir`` are then not used.

  A claim whose command fails is reported and skipped (it stays unevaluated, so the next run tries it again);
  the others go on.

  Returns:
    The records of every claim of the paper that has one (kept ones included).

  Raises:
    ClaimsFailed: after the report is written, naming the claims whose command failed.
  """
  folder = os.path.join(root, paper)
  os.makedirs(folder, exist_ok=True)
  if from_evidence is not None:
    return _from_evidence(paper, folder, os.path.join(from_evidence, paper), only)
  done = _load(os.path.join(folder, "claims.json"))
  todo = [c for c in papers.PAPERS[paper] if (not only or c.id in only) and not c.missing(scale, data_dir)]
  # Claims this scale and --data_dir cannot evaluate, with why; one evaluated earlier (on data
  # --data_dir no longer names) keeps its record and is not listed.
  skipped = {c.id: why for c in papers.PAPERS[paper] if (why := c.missing(scale, data_dir))
             and not (c.needs and c.id in done)}
  for cid in sorted(set(only) & skipped.keys()):  # asked for by --claims, but not evaluable here
    print(f"[{paper}] {cid}: not evaluated: {skipped[cid]}", flush=True)
  pending = [c for c in todo if rerun or c.id not in done or done[c.id]["scale"] != scale]
  batch = tuple(dict.fromkeys(n for c in pending for n in c.tests))
  new: dict[str, dict] = {}
  failed = []

  def records() -> list[dict]:  # every claim with a record, in the paper's order
    return [new.get(c.id) or _kept(c, done[c.id]) for c in papers.PAPERS[paper] if c.id in new or c.id in done]

  for i, claim in enumerate(todo, 1):
    old = done.get(claim.id)
    if claim not in pending and old is not None:
      print(f"[{paper} {i}/{len(todo)}] {claim.id}: {old['verdict']} (kept from claims.json)", flush=True)
      continue
    print(f"[{paper} {i}/{len(todo)}] {claim.id} ...", flush=True)
    ctx = claims_lib.Context(folder, scale, batch_tests=batch, run_jobs=run_jobs, data_dir=data_dir,
                             substitutes=papers.SUBSTITUTES.get(paper, {}))
    t0 = time.perf_counter()
    try:
      ev = claim.evaluate(ctx)
    except RuntimeError as e:  # a command failed: report it, go on with the other claims
      print(f"[{paper} {i}/{len(todo)}] {claim.id}: FAILED ({str(e).splitlines()[0]})", flush=True)
      print("\n".join("    " + line for line in str(e).splitlines()[1:]), flush=True)
      failed.append(claim.id)
      continue
    ev.commands = list(dict.fromkeys(ctx.commands))
    rec = report.claim_record(claim, ev, scale, time.perf_counter() - t0, sum(ctx.run_seconds.values()), ctx.data)
    rec = _with_history(rec, old)
    rec["evidence"] = True
    print(f"[{paper} {i}/{len(todo)}] {claim.id}: {rec['verdict']} ({rec['seconds']} s)", flush=True)
    new[claim.id] = rec
    report.write_paper(folder, paper, papers.TITLES[paper], records(), _pending(paper, skipped))
  report.write_paper(folder, paper, papers.TITLES[paper], records(), _pending(paper, skipped))
  if failed:
    raise ClaimsFailed(f"{paper}: the commands of {', '.join(failed)} failed (not evaluated; rerun to retry)")
  return records()


def _kept(claim: claims_lib.Claim, rec: dict) -> dict:
  """A record kept from ``claims.json``, with the claim's current ``kind``, ``headline``, statement and source
  (properties of the declaration, not of the runs: its criterion and verdict stay as judged)."""
  head = {"headline": True} if claim.headline else {}
  return {"id": rec["id"], "kind": claim.kind, **head,
          **{k: v for k, v in rec.items() if k not in ("id", "kind", "headline")},
          "statement": claim.statement, "source": claim.source}


def _with_history(rec: dict, old: dict | None) -> dict:
  """``rec`` carrying ``old``'s history, plus ``old``'s verdict and criterion when either changed
  (a criterion is fixed before its runs; a later change keeps the old verdict)."""
  history = list(old.get("history", [])) if old else []
  changed = old and old.get("digest") is not None and rec.get("digest") is not None and old["digest"] != rec["digest"]
  if old and (old["verdict"] != rec["verdict"] or old["criterion"] != rec["criterion"] or changed):
    if "digest" in rec and "digest" not in old:
      reason = "judged by the verdict protocol"  # the claim became a declaration (VERDICTS.md)
    elif old["criterion"] != rec["criterion"] or changed:
      reason = "criterion changed"
    else:
      reason = "new runs"
    history.append({"verdict": old["verdict"], "criterion": old["criterion"], "scale": old["scale"],
                    "replaced": rec.get("declared") or time.strftime("%Y-%m-%d"), "reason": reason})
  if history:
    rec["history"] = history
  return rec


def _from_evidence(paper: str, folder: str, stored: str, only=()) -> list[dict]:
  """:func:`reproduce` with ``from_evidence``: judges again every claim recorded in
  ``stored/claims.json`` from ``stored/evidence`` (or ``evidence-smoke``), writing to ``folder``."""
  path = os.path.join(stored, "claims.json")
  if not os.path.exists(path):
    print(f"[{paper}] no {path}; nothing to judge", flush=True)
    return []
  with open(path) as f:
    committed = json.load(f)
  done = {r["id"]: r for r in committed["claims"]}
  by_id = {c.id: c for c in papers.PAPERS[paper]}
  # Records of claims no longer defined, or not asked for: kept as they are.
  out: list[dict] = [old if cid not in by_id else _kept(by_id[cid], old) for cid, old in done.items()
                     if cid not in by_id or (only and cid not in only)]
  batch = tuple(dict.fromkeys(n for c in papers.PAPERS[paper] if c.id in done and c.tests for n in c.tests))
  for claim in papers.PAPERS[paper]:  # with a committed record, or none but its evidence may be stored
    old = done.get(claim.id)
    if (only and claim.id not in only) or (old is None and claim.missing("paper", None)):
      continue
    if claim.kind == "not evaluated":  # as declared: nothing to judge, no evidence
      out.append(report.claim_record(claim, claim.evaluate(None), "paper", 0.0))
      continue
    scale = old["scale"] if old else "paper"
    ctx = claims_lib.Context(folder, scale, log=lambda _: None, batch_tests=batch if old else (),
                             substitutes=papers.SUBSTITUTES.get(paper, {}),
                             evidence_dir=os.path.join(stored, "evidence" if scale == "paper" else "evidence-smoke"),
                             from_evidence=True, command_root=os.path.join(claims_lib.DEFAULT_OUTPUT, paper))
    try:
      ev = claim.evaluate(ctx)
    except claims_lib.MissingEvidence as e:
      rec = _from_record(claim, old) if old else None
      if old is None:
        print(f"[{paper}] {claim.id}: not judged ({e})", flush=True)
      elif rec is None:
        print(f"[{paper}] {claim.id}: kept ({e})", flush=True)
        out.append(_kept(claim, old))
      else:
        print(f"[{paper}] {claim.id}: {rec['verdict']} (re-judged from the numbers of its record)", flush=True)
        out.append(rec)
      continue
    ev.commands = list(dict.fromkeys(ctx.commands))
    rec = report.claim_record(claim, ev, scale, old.get("seconds", 0.0) if old else 0.0,
                              sum(ctx.run_seconds.values()), ctx.data)
    if old:  # the evaluation's wall time when it was made
      rec["seconds"] = old.get("seconds", rec["seconds"])
    rec = _with_history(rec, old)
    rec["evidence"] = True
    print(f"[{paper}] {claim.id}: {rec['verdict']} (re-judged from stored evidence)", flush=True)
    out.append(rec)
  order = {c.id: i for i, c in enumerate(papers.PAPERS[paper])}
  out.sort(key=lambda r: order.get(r["id"], len(order)))
  report.write_paper(folder, paper, papers.TITLES[paper], out, committed.get("pending", []))
  return out


def _from_record(claim: claims_lib.Claim, old: dict) -> dict | None:
  """The record of ``claim`` judged by its ``from_record`` from ``old``'s numbers (its runs' metrics were not
  stored), keeping ``old``'s commands, figures and times; None when the claim has no ``from_record`` or the
  record lacks a number it needs."""
  if claim.from_record is None:
    return None
  try:
    ev = claim.from_record(old)
  except KeyError:
    return None
  ev.commands, ev.figures = list(old.get("commands", [])), list(old.get("figures", []))
  rec = report.claim_record(claim, ev, old["scale"], old.get("seconds", 0.0), old.get("run_seconds", 0.0),
                            old.get("data"))
  rec = _with_history(rec, old)
  rec["evidence"] = False
  return rec


def _pending(paper: str, skipped: dict[str, str]) -> list[str]:
  """The paper's pending items and the claims not evaluated here, each with why
  (:meth:`claims.Claim.missing`)."""
  return [*papers.PENDING[paper], *(f"{c}: {why}" for c, why in skipped.items())]


class ClaimsFailed(RuntimeError):
  """Some claims could not be evaluated because one of their commands failed."""


def _run_papers_in_parallel(chosen: list[str], jobs: int) -> list[str]:
  """Runs this binary once per paper, ``jobs`` at a time, each line prefixed with its paper.

  Returns:
    The papers whose process failed.
  """
  import subprocess
  import threading
  from concurrent.futures import ThreadPoolExecutor
  lock = threading.Lock()

  def one(paper: str) -> bool:
    argv = [sys.executable, "-m", "experiments.reproduce", f"--paper={paper}", f"--scale={FLAGS.scale}",
            f"--output_dir={FLAGS.output_dir}", "--jobs=1", f"--rerun={FLAGS.rerun}", f"--run_jobs={FLAGS.run_jobs}"]
    if FLAGS.data_dir:
      argv.append(f"--data_dir={FLAGS.data_dir}")
    if FLAGS.claims:
      mine = [c for c in FLAGS.claims if c.startswith(paper + ".")]
      if not mine:
        return True
      argv.append(f"--claims={','.join(mine)}")
    proc = subprocess.Popen(argv, cwd=claims_lib.REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
      with lock:
        print(line.rstrip("\n") if line.startswith(f"[{paper}") else f"[{paper}] {line.rstrip()}", flush=True)
    return proc.wait() == 0

  order = sorted(chosen, key=lambda p: COST_ORDER.index(p) if p in COST_ORDER else len(COST_ORDER))
  with ThreadPoolExecutor(max_workers=jobs) as pool:  # the most expensive papers first
    ok = list(pool.map(one, order))
  return [p for p, good in zip(order, ok, strict=True) if not good]


# The papers by their measured smoke cost (BUILD.md), most expensive first: started first, they
# overlap the cheap ones instead of running alone at the end.
COST_ORDER = ("ffgb", "fzoos", "fedzo", "hiso", "fedlrgd")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
  chosen = list(papers.PAPERS) if FLAGS.paper == "all" else [FLAGS.paper]
  known = {c.id for p in chosen for c in papers.PAPERS[p]}
  unknown = [c for c in FLAGS.claims if c not in known]
  if unknown:
    print(f"claims: unknown {', '.join(unknown)}; accepted: {', '.join(sorted(known))}", file=sys.stderr)
    sys.exit(2)
  if FLAGS.data_dir is not None:
    if not os.path.isdir(FLAGS.data_dir):
      print(f"data_dir: {FLAGS.data_dir!r} is not a folder; accepted: a folder holding "
            f"{', '.join(f'{folder}/' for folder, _ in claims_lib.PAPER_DATA.values())}", file=sys.stderr)
      sys.exit(2)
    found = [d for d in claims_lib.PAPER_DATA if claims_lib.find_paper_data(FLAGS.data_dir, d)]
    have = ", ".join(found) or "none of the papers' own data sets"
    print(f"data_dir {FLAGS.data_dir}: {have} (at --scale=paper the claims that can use them do)", flush=True)
  os.makedirs(FLAGS.output_dir, exist_ok=True)
  only = set(FLAGS.claims)
  if FLAGS.jobs > 1 and len(chosen) > 1 and FLAGS.from_evidence is None:
    failed = _run_papers_in_parallel(chosen, FLAGS.jobs)
  else:
    failed = []
    for paper in chosen:
      try:
        reproduce(paper, FLAGS.scale, FLAGS.output_dir, only, FLAGS.rerun, FLAGS.run_jobs, FLAGS.data_dir,
                  FLAGS.from_evidence)
      except ClaimsFailed as e:
        print(f"error: {e}", flush=True)
        failed.append(paper)
  report.write_index(FLAGS.output_dir, papers.TITLES)
  print(f"wrote {os.path.join(FLAGS.output_dir, 'report.md')}", flush=True)
  if failed:
    print(f"error: claims of {', '.join(failed)} could not be evaluated (see above); rerun to retry",
          file=sys.stderr)
    sys.exit(1)


if __name__ == "__main__":
  define_flags()
  app.run(main)
