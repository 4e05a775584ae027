"""experiments.reproduce: statistics, verdict criteria, test-claim bookkeeping, reports and resume."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

from experiments.reproduce import __main__ as main_mod
from experiments.reproduce import claims as C
from experiments.reproduce import papers, report


def test_stat_is_mean_and_sample_std():
  s = C.Stat.of([1.0, 2.0, 6.0])
  assert s.mean == 3.0 and s.n == 3
  assert s.std == pytest.approx(((4 + 1 + 9) / 2) ** 0.5)  # ddof = 1
  assert C.Stat.of([5.0]).std == 0.0
  with pytest.raises(ValueError):
    C.Stat.of([])


def test_final_skips_missing_values():
  hist = [{"round": 0, "objective": 3.0}, {"round": 5, "objective": 2.0}, {"round": 6, "objective": None}]
  assert C.final(hist, "objective") == 2.0
  with pytest.raises(KeyError):
    C.final(hist, "test_accuracy")


def test_junit_results_and_node_matching(tmp_path):
  xml = tmp_path / "r.xml"
  xml.write_text(
      '<testsuites><testsuite>'
      '<testcase classname="tests.algorithms.test_x" name="test_a[lu]"/>'
      '<testcase classname="tests.algorithms.test_x" name="test_a[qr]"><failure message="boom"/></testcase>'
      '<testcase classname="tests.algorithms.test_x" name="test_ab"/>'
      '</testsuite></testsuites>')
  res = C.junit_results(str(xml))
  assert res == {"tests.algorithms.test_x::test_a[lu]": True, "tests.algorithms.test_x::test_a[qr]": False,
                 "tests.algorithms.test_x::test_ab": True}
  node = "tests/algorithms/test_x.py::test_a"
  assert [c for c in res if C._covers(node, c)] == ["tests.algorithms.test_x::test_a[lu]",
                                                     "tests.algorithms.test_x::test_a[qr]"]
  assert C.junit_results(str(tmp_path / "missing.xml")) == {}


class FakeContext:
  """A Context whose runs and tests are given, not executed."""

  def __init__(self, root, runs=None, tests=None):
    self.root, self.scale, self.batch_tests, self.commands = str(root), "smoke", (), []
    self._runs, self._tests = runs or {}, tests or {}

  def pick(self, smoke, paper):
    return smoke

  def run(self, name, flagfile=None, **flags):
    self.commands.append(f"run {name}")
    return self._runs[name]

  def runs(self, specs):
    return [self.run(name, flagfile, **flags) for name, flagfile, flags in specs]

  def pytest(self, *node_ids):
    self.commands.append("pytest " + " ".join(node_ids))
    return self._tests

  def run_dir(self, name):
    return os.path.join(self.root, "runs", name)

  def resolve(self, name, flagfile, flags):
    """No substitutes: every run as given (Context.resolve is tested on its own)."""
    return name, flagfile, flags


def _fake_launch_factory(active, peak, lock):
  import time as time_mod

  def fake_launch(self, argv, marker, command, accept=None):
    out = os.path.dirname(marker)
    seed = int(next(a for a in argv if a.startswith("--seed=")).split("=")[1])
    with lock:
      active[0] += 1
      peak[0] = max(peak[0], active[0])
    time_mod.sleep(0.15 * (3 - seed))
    if seed == 1 and "--fail=1" in argv:
      with lock:
        active[0] -= 1
      raise RuntimeError(f"command failed (exit 1): {command}")
    os.makedirs(os.path.join(out, "alg"), exist_ok=True)
    with open(os.path.join(out, "alg", "metrics.jsonl"), "w") as f:
      f.write(json.dumps({"round": 0, "objective": float(seed)}) + "\n")
    with open(os.path.join(out, "config.json"), "w") as f:
      json.dump({"algorithms": {"alg": {"lr": 0.5}}}, f)
    open(marker, "w").close()
    with lock:
      active[0] -= 1
    return command
  return fake_launch


@pytest.mark.parametrize("run_jobs", [1, 3])
def test_context_runs_keeps_the_order_of_its_specs_with_any_run_jobs(tmp_path, monkeypatch, run_jobs):
  # The runs finish in reverse order (seed 0 sleeps longest); the results and the recorded
  # commands still follow the specs, and with run_jobs = 3 the three runs overlap.
  import threading
  active, peak = [0], [0]
  monkeypatch.setattr(C.Context, "_launch", _fake_launch_factory(active, peak, threading.Lock()))
  ctx = C.Context(str(tmp_path), "smoke", log=lambda _: None, run_jobs=run_jobs)
  res = ctx.runs([(f"r{s}", "toy.cfg", dict(seed=s, algorithm=["a", "b"])) for s in range(3)])
  assert [r["alg"][0]["objective"] for r in res] == [0.0, 1.0, 2.0]
  assert [c.split("--seed=")[1].split()[0] for c in ctx.commands] == ["0", "1", "2"]
  assert ctx.commands[0] == ("python -m experiments.run --flagfile=experiments/flagfiles/toy.cfg --seed=0 "
                             f"--algorithm=a,b --output_dir={tmp_path}/runs/r0")
  assert peak[0] == min(run_jobs, 3)
  # A failed run raises: one after another, at once; side by side, after the runs in flight finished.
  ctx2 = C.Context(str(tmp_path), "smoke", log=lambda _: None, run_jobs=run_jobs)
  with pytest.raises(RuntimeError, match="exit 1"):
    ctx2.runs([(f"f{s}", None, dict(seed=s, fail=1)) for s in range(3)])
  assert (tmp_path / "runs" / "f0" / ".complete").exists()
  assert (tmp_path / "runs" / "f2" / ".complete").exists() == (run_jobs > 1)
  with pytest.raises(ValueError, match="run_jobs"):
    C.Context(str(tmp_path), "smoke", run_jobs=0)


def test_test_claim_verdicts(tmp_path):
  claim = C.test_claim("p.c", "s", "src", "tests/t.py::test_a", "tests/t.py::test_b")
  ok = {"tests.t::test_a": True, "tests.t::test_b[1]": True, "tests.t::test_other": False}
  ev = claim.evaluate(FakeContext(tmp_path, tests=ok))
  assert ev.verdict == "reproduced" and ev.numbers == {"test cases passed": 2.0, "test cases": 2.0}
  ev = claim.evaluate(FakeContext(tmp_path, tests={**ok, "tests.t::test_b[2]": False}))
  assert ev.verdict == "not reproduced" and "tests.t::test_b[2]" in ev.why
  ev = claim.evaluate(FakeContext(tmp_path, tests={"tests.t::test_a": True}))
  assert ev.verdict == "not reproduced" and "tests/t.py::test_b" in ev.why  # not collected


def test_every_claim_is_well_formed():
  ids = [c.id for claims in papers.PAPERS.values() for c in claims]
  assert len(ids) == len(set(ids))
  for paper, claims in papers.PAPERS.items():
    assert paper in papers.TITLES and paper in papers.PENDING
    for c in claims:
      assert c.id.startswith(paper + ".") and c.statement and c.source and c.criterion
      for node in c.tests:  # a cited test exists
        path, _, name = node.partition("::")
        assert f"def {name.split('[')[0]}(" in open(path).read(), node  # parametrized: name[param]


def test_reports_and_resume(tmp_path, monkeypatch):
  calls = []

  def good(ctx):
    calls.append("good")
    return C.Evidence("reproduced", "fine", numbers={"x": C.Stat.of([1.0, 3.0])})

  def bad(ctx):
    calls.append("bad")
    return C.Evidence("not reproduced", "because", numbers={"y": 2.0})

  toy = [C.Claim("toy.good", "g", "Fig. 1", "rule g", good), C.Claim("toy.bad", "b", "Thm 2", "rule b", bad)]
  monkeypatch.setitem(papers.PAPERS, "toy", toy)
  monkeypatch.setitem(papers.TITLES, "toy", "Toy paper")
  monkeypatch.setitem(papers.PENDING, "toy", ["Fig. 9"])
  main_mod.reproduce("toy", "smoke", str(tmp_path))
  assert calls == ["good", "bad"]
  data = json.loads((tmp_path / "toy" / "claims.json").read_text())
  assert [r["verdict"] for r in data["claims"]] == ["reproduced", "not reproduced"]
  assert data["claims"][0]["numbers"]["x"] == {"mean": 2.0, "std": 2 ** 0.5, "n": 2, "values": [1.0, 3.0]}
  assert data["pending"] == ["Fig. 9"]
  text = (tmp_path / "toy" / "report.md").read_text()
  assert "| x | 2 ± 1.4 (n=2) |" in text and "Not evaluated yet (no verdict): Fig. 9." in text
  main_mod.reproduce("toy", "smoke", str(tmp_path))  # resumes: nothing re-evaluated
  assert calls == ["good", "bad"]
  main_mod.reproduce("toy", "paper", str(tmp_path))  # another scale is evaluated again
  assert calls == ["good", "bad", "good", "bad"]
  report.write_index(str(tmp_path), {"toy": "Toy paper"})
  # reproduced, partly, mixed, not reproduced, inconclusive, paper claims, not evaluated (the pending item),
  # post-data (up / down), checks and diagnostics, substitutes, judged from record numbers
  index = (tmp_path / "report.md").read_text()
  assert "| [Toy paper](toy/report.md) | paper 2 | 1 | 0 | 0 | 1 | 0 | 2 | 1 | 0 (0 / 0) | 0 | 0 | 0 |" in index
  data = json.loads((tmp_path / "toy" / "claims.json").read_text())
  data["claims"][0]["scale"], data["claims"][1]["scale"] = "paper", "smoke"  # the index counts each scale
  data["claims"][0]["evidence"] = False  # judged from its record's numbers (its runs' metrics not stored)
  (tmp_path / "toy" / "claims.json").write_text(json.dumps(data))
  report.write_index(str(tmp_path), {"toy": "Toy paper"})
  assert "| [Toy paper](toy/report.md) | paper 1, smoke 1 | 1 | 0 | 0 | 1 | 0 | 2 | 1 | 0 (0 / 0) | 0 | 0 | 1 |" in (
      tmp_path / "report.md").read_text()


def test_a_reevaluated_claim_still_reports_what_its_runs_took(tmp_path, monkeypatch):
  # The run's wall time is written into its completion marker; re-evaluating the claim from the
  # cached run reads it back, so the record does not claim the evidence cost nothing.
  def slow(ctx):
    ctx._execute([sys.executable, "-c", "import time; time.sleep(0.5)"], str(tmp_path / "r" / ".complete"))
    return C.Evidence("reproduced", "fine")

  monkeypatch.setitem(papers.PAPERS, "toy", [C.Claim("toy.slow", "s", "Fig. 1", "rule", slow)])
  monkeypatch.setitem(papers.TITLES, "toy", "Toy paper")
  monkeypatch.setitem(papers.PENDING, "toy", [])
  main_mod.reproduce("toy", "smoke", str(tmp_path))
  first = json.loads((tmp_path / "toy" / "claims.json").read_text())["claims"][0]
  assert first["run_seconds"] >= 0.5 and first["seconds"] >= first["run_seconds"]
  assert (tmp_path / "r" / ".complete").read_text().splitlines()[0] == f"{first['run_seconds']:.1f} s"
  main_mod.reproduce("toy", "smoke", str(tmp_path), rerun=True)
  again = json.loads((tmp_path / "toy" / "claims.json").read_text())["claims"][0]
  assert again["run_seconds"] == first["run_seconds"] and again["seconds"] < 0.5
  assert f"(runs {first['run_seconds']:.0f} s)" in (tmp_path / "toy" / "report.md").read_text()


def test_a_record_without_evidence_is_judged_from_its_per_target_numbers(tmp_path, monkeypatch):
  # A record made before runs' metrics were stored keeps per-target numbers; a claim with ``from_record``
  # is judged from them by --from_evidence (the same function its runs would use), keeps its commands and
  # figures, records the old verdict in its history, and is a fixed point of a second re-judgment.
  from experiments.reproduce import engine, protocol

  def judge(numbers):
    r = protocol.better("x", numbers["a"]["values"], numbers["b"]["values"], lower_is_better=True, unit="F")
    return engine.evidence([r], "F", numbers)

  def needs_runs(ctx):
    raise C.MissingEvidence("no runs")

  claim = C.Claim("toy.old", "s", "Fig. 1", "paired rule", needs_runs, from_record=lambda rec: judge(rec["numbers"]))
  monkeypatch.setitem(papers.PAPERS, "toy", [claim, C.Claim("toy.kept", "s", "Fig. 2", "rule", needs_runs)])
  monkeypatch.setitem(papers.TITLES, "toy", "Toy paper")
  monkeypatch.setitem(papers.PENDING, "toy", [])
  old = {"id": "toy.old", "kind": "paper", "statement": "s", "source": "Fig. 1", "criterion": "unpaired rule",
         "verdict": "partly reproduced", "scale": "paper", "why": "old", "figures": ["fig/a.png"],
         "commands": ["python -m x"], "seconds": 1.0, "run_seconds": 99.0,
         "numbers": {"a": {"mean": 1.0, "std": 0.0, "n": 5, "values": [1, 2, 3, 4, 5]},
                     "b": {"mean": 4.0, "std": 0.0, "n": 5, "values": [2, 4, 6, 8, 10]}}}
  kept = {**old, "id": "toy.kept", "criterion": "rule", "numbers": {}}
  stored = tmp_path / "docs" / "toy"
  stored.mkdir(parents=True)
  (stored / "claims.json").write_text(json.dumps({"claims": [old, kept], "pending": []}))
  out = main_mod.reproduce("toy", "paper", str(tmp_path / "out"), from_evidence=str(tmp_path / "docs"))
  rec, same = out
  assert rec["verdict"] == "reproduced" and rec["evidence"] is False and rec["results"][0]["p"] == pytest.approx(1 / 32)
  assert rec["commands"] == ["python -m x"] and rec["figures"] == ["fig/a.png"] and rec["run_seconds"] == 99.0
  assert rec["history"][0]["verdict"] == "partly reproduced" and rec["history"][0]["reason"] == "criterion changed"
  assert same["verdict"] == "partly reproduced" and "results" not in same   # no from_record: kept as it was
  (stored / "claims.json").write_text((tmp_path / "out" / "toy" / "claims.json").read_text())
  again = main_mod.reproduce("toy", "paper", str(tmp_path / "again"), from_evidence=str(tmp_path / "docs"))
  assert again == out


def test_a_finished_run_is_reused_only_for_the_same_command(tmp_path, monkeypatch):
  # A run is cached by its folder; its marker records the command (root-relative), so changed
  # settings under the same name run again instead of passing the old evidence off as new.
  count = tmp_path / "count"

  def go(ctx, value):
    out = os.path.join(ctx.root, "runs", "r")
    code = f"open({str(count)!r}, 'a').write('x'); import os; os.makedirs({out!r}, exist_ok=True)"
    ctx._execute([sys.executable, "-c", code, f"--value={value}", f"--output_dir={out}"],
                 os.path.join(out, ".complete"))

  root = tmp_path / "paper"
  go(C.Context(str(root), "smoke", log=lambda _: None), 1)
  go(C.Context(str(root), "smoke", log=lambda _: None), 1)
  assert count.read_text() == "x"                                     # the same command: reused
  monkeypatch.chdir(tmp_path)
  go(C.Context("paper", "smoke", log=lambda _: None), 1)             # the same run through a relative root
  assert count.read_text() == "x"
  go(C.Context(str(root), "smoke", log=lambda _: None), 2)             # other settings: run again
  assert count.read_text() == "xx"
  assert "--value=2 --output_dir=<root>/runs/r" in (root / "runs" / "r" / ".complete").read_text()
  (root / "runs" / "r" / ".complete").write_text("1.0 s\n")          # an old marker, no command: trusted
  go(C.Context(str(root), "smoke", log=lambda _: None), 3)
  assert count.read_text() == "xx"


def test_run_dir_is_the_runs_folder(tmp_path):
  ctx = C.Context(str(tmp_path), "smoke", log=lambda _: None)
  assert ctx.run_dir("r_s0") == str(tmp_path / "runs" / "r_s0")


def test_cli_rejects_an_unknown_claim(tmp_path):
  proc = subprocess.run([sys.executable, "-m", "experiments.reproduce", "--claims=fedzo.nope",
                         f"--output_dir={tmp_path}"], capture_output=True, text=True)
  assert proc.returncode == 2
  assert proc.stderr.strip().splitlines()[-1].startswith("claims: unknown fedzo.nope; accepted:")


@pytest.mark.slow
def test_smoke_scale_gives_every_claim_a_verdict_command_and_numbers(tmp_path):
  proc = subprocess.run([sys.executable, "-m", "experiments.reproduce", "--paper=all", "--scale=smoke",
                         f"--output_dir={tmp_path}"], capture_output=True, text=True)
  assert proc.returncode == 0, proc.stderr[-3000:]
  for paper, claims in papers.PAPERS.items():
    data = json.loads((tmp_path / paper / "claims.json").read_text())
    assert [r["id"] for r in data["claims"]] == [c.id for c in claims if "smoke" in c.scales]
    assert all(any(p.startswith(c.id + ":") for p in data["pending"]) for c in claims if "smoke" not in c.scales)
    for r in data["claims"]:
      assert r["verdict"] in C.VERDICTS and r["scale"] == "smoke"
      if r["verdict"] == "not evaluated":  # declared as such: it says what it needs, and nothing ran
        assert r["needs"] and not r["commands"], r["id"]
        continue
      assert r["commands"] and r["numbers"], r["id"]
      for fig in r["figures"]:
        assert (tmp_path / paper / fig).exists()
  assert (tmp_path / "report.md").exists()


def test_a_failing_command_skips_its_claim_and_keeps_the_others(tmp_path, monkeypatch):
  def good(ctx):
    return C.Evidence("reproduced", "fine", numbers={"x": 1.0})

  def broken(ctx):
    raise RuntimeError("command failed (exit 2): python -m experiments.run ...\nerror: bad flag")

  toy = [C.Claim("toy.a", "a", "Fig. 1", "rule", good), C.Claim("toy.b", "b", "Fig. 2", "rule", broken),
         C.Claim("toy.c", "c", "Fig. 3", "rule", good)]
  monkeypatch.setitem(papers.PAPERS, "toy", toy)
  monkeypatch.setitem(papers.TITLES, "toy", "Toy paper")
  monkeypatch.setitem(papers.PENDING, "toy", [])
  with pytest.raises(main_mod.ClaimsFailed, match="toy.b"):
    main_mod.reproduce("toy", "smoke", str(tmp_path))
  data = json.loads((tmp_path / "toy" / "claims.json").read_text())
  assert [r["id"] for r in data["claims"]] == ["toy.a", "toy.c"]  # b stays unevaluated: retried next time
  # Re-evaluating one claim keeps the others' records in claims.json and the report.
  main_mod.reproduce("toy", "smoke", str(tmp_path), only={"toy.c"}, rerun=True)
  data = json.loads((tmp_path / "toy" / "claims.json").read_text())
  assert [r["id"] for r in data["claims"]] == ["toy.a", "toy.c"]


def test_paper_only_claims_are_listed_at_smoke_and_evaluated_at_paper_scale(tmp_path, monkeypatch):
  calls = []

  def ev(ctx):
    calls.append(ctx.scale)
    return C.Evidence("reproduced", "fine", numbers={"x": 1.0})

  monkeypatch.setitem(papers.PAPERS, "toy", [C.Claim("toy.big", "b", "Fig. 1", "rule", ev).paper_only()])
  monkeypatch.setitem(papers.TITLES, "toy", "Toy paper")
  monkeypatch.setitem(papers.PENDING, "toy", [])
  main_mod.reproduce("toy", "smoke", str(tmp_path))
  data = json.loads((tmp_path / "toy" / "claims.json").read_text())
  assert calls == [] and data["claims"] == [] and data["pending"][0].startswith("toy.big: evaluated at --scale=paper")
  main_mod.reproduce("toy", "paper", str(tmp_path))
  assert calls == ["paper"]


def test_figure_band_is_the_sample_std_clipped_to_a_bounded_metric():
  # Success of 3 targets at one round: 0, 1, 1 -> mean 2/3, sample std sqrt(1/3) = 0.577 (the
  # population std would be 0.471): the band runs from 0.089 to 1.244, clipped to 1 for a rate.
  mean, low, high = report.band([[0.0], [1.0], [1.0]])
  assert mean[0] == pytest.approx(2 / 3) and high[0] - mean[0] == pytest.approx(math.sqrt(1 / 3))
  _, low, high = report.band([[0.0], [1.0], [1.0]], bounds=(0.0, 1.0))
  assert low[0] == pytest.approx(2 / 3 - math.sqrt(1 / 3)) and high[0] == 1.0
  assert report.band([[2.0, 3.0]])[1].tolist() == [2.0, 3.0]  # one seed: no band


def test_a_run_whose_grid_diverges_in_part_is_finished_evidence(tmp_path):
  # experiments.run exits 3 when an algorithm stopped on a NaN objective (lr 1e38 here); the other
  # entries finished. That run is evidence (an lr grid's large end), kept and marked complete; a
  # command that fails otherwise still raises.
  ctx = C.Context(str(tmp_path), "paper", log=lambda _: None)
  (runs,) = ctx.runs([("grid", None, dict(algorithm="fedavg:lr=1e38,fedavg:lr=0.1", rounds=3, eval_every=1,
                                          num_clients=4, clients_per_round=4))])
  assert set(runs) == {"fedavg-lr=1e38", "fedavg-lr=0.1"} and runs["fedavg-lr=0.1"][-1]["round"] == 3
  assert not math.isfinite(runs["fedavg-lr=1e38"][-1]["objective"])
  assert C.stopped_on_divergence(str(tmp_path / "runs" / "grid"))
  assert (tmp_path / "runs" / "grid" / ".complete").exists()
  ok = tmp_path / "runs" / "ok"
  ctx.runs([("ok", None, dict(algorithm="fedavg:lr=0.1", rounds=1, eval_every=1, num_clients=4, clients_per_round=4))])
  assert not C.stopped_on_divergence(str(ok))                       # nothing diverged
  (ok / "fedavg-lr=0.1" / "metrics.jsonl").unlink()
  assert not C.stopped_on_divergence(str(ok))                       # an algorithm without metrics
  with pytest.raises(RuntimeError, match=r"exit 2"):
    ctx.runs([("bad", None, dict(algorithm="fedavg:lr=-1"))])


def test_from_evidence_rejudges_the_stored_runs_and_runs_nothing(tmp_path, monkeypatch):
  # Run mode stores each run's config.json, gzipped metrics and command under <paper>/evidence/; the
  # re-judgment reads only them (the runs folder is deleted), writes the same claims.json, and a claim
  # whose evidence is missing keeps its committed record.
  import shutil
  import threading
  monkeypatch.chdir(tmp_path)  # the runs are made under the default root, as the committed reports are
  fake = _fake_launch_factory([0], [0], threading.Lock())
  monkeypatch.setattr(C.Context, "_launch", fake)
  seen = []

  def paired(ctx):
    runs = ctx.runs([(f"r{s}", "toy.cfg", dict(seed=s)) for s in range(3)])
    seen.append([r["alg"][0]["objective"] for r in runs])
    verdict = "reproduced" if sum(seen[-1]) == 3.0 else "not reproduced"
    return C.Evidence(verdict, "sum of the seeds", numbers={"sum": C.Stat.of(seen[-1])})

  monkeypatch.setitem(papers.PAPERS, "toy", [C.Claim("toy.paired", "p", "Fig. 1", "rule", paired)])
  monkeypatch.setitem(papers.TITLES, "toy", "Toy paper")
  monkeypatch.setitem(papers.PENDING, "toy", [])
  monkeypatch.setitem(papers.SUBSTITUTES, "toy", {})
  made = C.DEFAULT_OUTPUT
  main_mod.reproduce("toy", "paper", made)
  stored = tmp_path / made / "toy" / "evidence" / "r1"
  assert sorted(os.listdir(stored)) == ["alg", "command.txt", "config.json"]
  assert os.listdir(stored / "alg") == ["metrics.jsonl.gz"]
  assert (stored / "command.txt").read_text().splitlines()[1].endswith("--seed=1 --output_dir=<root>/runs/r1")
  committed = json.loads((tmp_path / made / "toy" / "claims.json").read_text())
  assert committed["claims"][0]["kind"] == "paper" and committed["claims"][0]["evidence"] is True
  shutil.rmtree(tmp_path / made / "toy" / "runs")
  monkeypatch.setattr(C.Context, "_launch", _real_launch)  # from evidence: a real launch would fail here
  main_mod.reproduce("toy", "paper", "rejudged", from_evidence=made)
  assert len(seen) == 2 and seen[-1] == [0.0, 1.0, 2.0]
  assert json.loads((tmp_path / "rejudged" / "toy" / "claims.json").read_text()) == committed
  # One run's evidence lost: the claim keeps its committed record.
  shutil.rmtree(stored.parent / "r2")
  main_mod.reproduce("toy", "paper", "rejudged2", from_evidence=made)
  assert len(seen) == 2 and json.loads((tmp_path / "rejudged2" / "toy" / "claims.json").read_text()) == committed


_real_launch = C.Context._launch


def test_a_flagfile_edited_after_its_run_makes_the_run_start_again(tmp_path, monkeypatch):
  """The command of a run names its flagfile, not the flagfile's contents: an edit after the run finished
  removes the completion marker, so the run is made again instead of its old evidence being read."""
  from experiments.reproduce import claims as claims_mod
  repo = tmp_path / "repo"
  (repo / claims_mod.FLAGFILES).mkdir(parents=True)
  cfg = repo / claims_mod.FLAGFILES / "x.cfg"
  cfg.write_text("--rounds=2\n")
  monkeypatch.setattr(claims_mod, "REPO", str(repo))
  ctx = claims_mod.Context(str(tmp_path / "root"), "smoke", log=lambda s: None)
  out, _, marker, _ = ctx._plan("r", "experiments.run", "x.cfg", {"seed": 0})
  os.makedirs(out)
  with open(marker, "w") as f:
    f.write("1.0 s\ncommand\n")
  os.utime(cfg, (1, 1))  # the flagfile older than the marker: the finished run stands
  assert ctx._plan("r", "experiments.run", "x.cfg", {"seed": 0})[2] == marker and os.path.exists(marker)
  os.utime(cfg, None)
  os.utime(marker, (1, 1))  # edited after the run: the marker and the half-kept folder go
  ctx._plan("r", "experiments.run", "x.cfg", {"seed": 0})
  assert not os.path.exists(marker) and not os.path.exists(out)


def test_from_evidence_with_only_rejudges_the_named_claims_and_keeps_every_other(tmp_path, monkeypatch):
  """--only with --from_evidence: the claims not named keep their committed records, in order, and a
  named claim that comes after them is still re-judged (the loop goes on past a kept claim)."""
  import threading
  monkeypatch.chdir(tmp_path)
  monkeypatch.setattr(C.Context, "_launch", _fake_launch_factory([0], [0], threading.Lock()))
  seen = []

  def judged(name):
    def evaluate(ctx):
      runs = ctx.runs([(f"{name}{s}", "toy.cfg", dict(seed=s)) for s in range(2)])
      seen.append(name)
      return C.Evidence("reproduced", name, numbers={"n": C.Stat.of([r["alg"][0]["objective"] for r in runs])})
    return evaluate

  monkeypatch.setitem(papers.PAPERS, "toy", [C.Claim("toy.first", "p", "Fig. 1", "rule", judged("a")),
                                             C.Claim("toy.second", "q", "Fig. 2", "rule", judged("b"))])
  monkeypatch.setitem(papers.TITLES, "toy", "Toy paper")
  monkeypatch.setitem(papers.PENDING, "toy", [])
  monkeypatch.setitem(papers.SUBSTITUTES, "toy", {})
  made = C.DEFAULT_OUTPUT
  main_mod.reproduce("toy", "paper", made)
  assert seen == ["a", "b"]
  monkeypatch.setattr(C.Context, "_launch", _real_launch)
  main_mod.reproduce("toy", "paper", "rejudged", from_evidence=made, only={"toy.second"})
  assert seen == ["a", "b", "b"]
  committed = json.loads((tmp_path / made / "toy" / "claims.json").read_text())
  again = json.loads((tmp_path / "rejudged" / "toy" / "claims.json").read_text())
  assert [c["id"] for c in again["claims"]] == ["toy.first", "toy.second"]
  assert again["claims"][0] == committed["claims"][0]


def test_a_final_value_that_is_missing_or_not_finite_falls_back_to_the_last_finite_one():
  """engine._last_finite: the last record's metric when finite; else (NaN, inf, or the key missing) the last
  finite value before it; None when there is none."""
  from experiments.reproduce import engine
  h = [{"f": 3.0}, {"f": 2.0}]
  assert engine._last_finite(h, "f") == 2.0
  assert engine._last_finite(h + [{"f": float("nan")}], "f") == 2.0
  assert engine._last_finite(h + [{"f": float("inf")}], "f") == 2.0
  assert engine._last_finite(h + [{"g": 1.0}], "f") == 2.0
  assert engine._last_finite([{"f": float("nan")}], "f") is None and engine._last_finite([], "f") is None


