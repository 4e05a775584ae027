"""``experiments.reproduce --data_dir``: the papers' own data sets (issue 14 item 5), on tiny
CIFAR-10 and Fashion-MNIST files written here."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from experiments.reproduce import claims as C
from experiments.reproduce import papers, report
from tests.data.test_cifar10 import make_cifar_dir
from tests.data.test_mnist import make_mnist_dir

SUBS = {"attack.cfg": C.Substitute("cifar10", "digits"),
        "softmax.cfg": C.Substitute("fashion_mnist", "MNIST-10k", flagfile="softmax_fashion.cfg")}


def test_find_paper_data_needs_every_file_the_loader_reads(tmp_path):
  assert C.find_paper_data(None, "cifar10") is None
  assert C.find_paper_data(str(tmp_path), "cifar10") is None
  make_cifar_dir(tmp_path / "cifar-10-batches-bin")
  assert C.find_paper_data(str(tmp_path), "cifar10") == str(tmp_path / "cifar-10-batches-bin")
  (tmp_path / "cifar-10-batches-bin" / "data_batch_3.bin").unlink()  # one batch missing: not the data set
  assert C.find_paper_data(str(tmp_path), "cifar10") is None
  make_mnist_dir(tmp_path / "fashion-mnist", None, 20, gz=True)  # t10k only, gzipped: the loader takes it
  assert C.find_paper_data(str(tmp_path), "fashion_mnist") == str(tmp_path / "fashion-mnist")
  with pytest.raises(ValueError, match="accepted: cifar10, fashion_mnist, covtype"):
    C.find_paper_data(str(tmp_path), "mnist")
  # Covertype: one LIBSVM file (its path: the loader splits it), or LIBSVM's own train / test pair.
  cov = tmp_path / "covtype"
  cov.mkdir()
  (cov / "covtype.scale").write_text("1 1:0.5\n2 2:0.5\n")
  assert C.find_paper_data(str(tmp_path), "covtype") == str(cov / "covtype.scale")
  (cov / "covtype.scale.t").write_text("1 1:0.5\n")
  assert C.find_paper_data(str(tmp_path), "covtype") == str(cov)
  (cov / "notes.txt").write_text("x")
  assert C.find_paper_data(str(tmp_path), "covtype") is None


def test_resolve_moves_a_substituted_run_onto_the_papers_data_at_paper_scale_only(tmp_path):
  data = tmp_path / "data"
  make_cifar_dir(data / "cifar-10-batches-bin")
  make_mnist_dir(data / "fashion-mnist", None, 20, gz=False)
  cifar, fashion = str(data / "cifar-10-batches-bin"), str(data / "fashion-mnist")

  smoke = C.Context(str(tmp_path), "smoke", data_dir=str(data), substitutes=SUBS)
  assert smoke.resolve("r_s0", "attack.cfg", {"seed": 0}) == ("r_s0", "attack.cfg", {"seed": 0})
  assert smoke.data["cifar10"].startswith("digits, the offline substitute for the paper's cifar10")

  ctx = C.Context(str(tmp_path), "paper", data_dir=str(data), substitutes=SUBS)
  assert ctx.resolve("r_s0", "attack.cfg", {"seed": 0}) == (
      "r_s0_cifar10", "attack.cfg", {"seed": 0, "dataset": "cifar10", "data_dir": cifar})
  assert ctx.resolve("f_s0", "softmax.cfg", {}) == (
      "f_s0_fashion_mnist", "softmax_fashion.cfg", {"dataset": "fashion_mnist", "data_dir": fashion})
  assert ctx.resolve("q_s0", "quadratic.cfg", {"seed": 1}) == ("q_s0", "quadratic.cfg", {"seed": 1})
  assert ctx.data == {"cifar10": f"cifar10, the paper's data, from {cifar}",
                      "fashion_mnist": f"fashion_mnist, the paper's data, from {fashion}"}
  # A claim reading a run's settings by its usual name reads the run it got.
  run = tmp_path / "runs" / "r_s0_cifar10"
  run.mkdir(parents=True)
  (run / "config.json").write_text(json.dumps({"algorithms": {"fedzo": {"lr": 0.001}}}))
  assert ctx.run_dir("r_s0") == str(run)
  # No data set under --data_dir: the substitute runs, and the record says so.
  bare = C.Context(str(tmp_path), "paper", data_dir=str(tmp_path / "empty"), substitutes=SUBS)
  assert bare.resolve("r_s0", "attack.cfg", {})[0] == "r_s0"
  assert "`--data_dir=DIR` with `DIR/cifar-10-batches-bin/`" in bare.data["cifar10"]


def test_a_script_on_a_substituted_flagfile_moves_onto_the_papers_data(tmp_path, monkeypatch):
  data = tmp_path / "data"
  make_cifar_dir(data / "cifar-10-batches-bin")
  launched = []
  monkeypatch.setattr(C.Context, "_launch", lambda self, argv, marker, command: launched.append(command))
  ctx = C.Context(str(tmp_path), "paper", data_dir=str(data), substitutes=SUBS)
  out = ctx.script("v", "experiments.fedzo.variance_cost", flagfile=C.FLAGFILES + "attack.cfg", ms=(5, 50))
  assert out == str(tmp_path / "runs" / "v_cifar10")
  assert launched == [f"python -m experiments.fedzo.variance_cost --flagfile=experiments/flagfiles/attack.cfg "
                      f"--ms=5,50 --dataset=cifar10 --data_dir={data / 'cifar-10-batches-bin'} --output_dir={out}"]
  # Without the data, or for a flagfile that is no substitute: as given.
  bare = C.Context(str(tmp_path), "paper", substitutes=SUBS)
  assert bare.script("v", "m", flagfile=C.FLAGFILES + "attack.cfg") == str(tmp_path / "runs" / "v")
  assert bare.script("w", "m", flagfile="other/x.cfg", k=1) == str(tmp_path / "runs" / "w")
  assert launched[1:] == [f"python -m m --flagfile=experiments/flagfiles/attack.cfg --output_dir={tmp_path}/runs/v",
                          f"python -m m --flagfile=other/x.cfg --k=1 --output_dir={tmp_path}/runs/w"]


def test_the_report_says_which_claims_ran_on_substitutes(tmp_path):
  claim = C.Claim("p.a", "A.", "Fig. 1", "reproduced: always", lambda ctx: None)
  ev = C.Evidence("reproduced", "it holds")
  sub_note = C.Substitute("cifar10", "digits").note(None)  # "digits, the offline substitute for ..."
  on_sub = report.claim_record(claim, ev, "paper", 1.0, data={"cifar10": sub_note})
  own = report.claim_record(C.Claim("p.b", "B.", "Fig. 2", "x", lambda ctx: None), ev, "paper", 1.0,
                            data={"cifar10": "cifar10, the paper's data, from /d"})
  plain = report.claim_record(C.Claim("p.c", "C.", "Eq. 3", "x", lambda ctx: None), ev, "paper", 1.0)
  assert "data" not in plain and report.on_substitutes([on_sub, own, plain]) == ["p.a"]
  report.write_paper(str(tmp_path), "p", "P", [on_sub, own, plain], [])
  text = (tmp_path / "report.md").read_text()
  assert "Ran on offline substitutes of the paper's data (each claim's Data line says which): p.a." in text
  assert f"**Data**: {sub_note}" in text
  assert "**Data**: cifar10, the paper's data, from /d" in text


def test_fedzo_substitutes_name_its_flagfiles_and_their_data():
  subs = papers.SUBSTITUTES["fedzo"]
  assert {f: s.dataset for f, s in subs.items()} == {
      "fedzo_fig1a_attack_H.cfg": "cifar10", "fedzo_fig1b_attack_M.cfg": "cifar10",
      "fedzo_fig1c_attack_aircomp.cfg": "cifar10", "fedzo_fig3_softmax_H.cfg": "fashion_mnist",
      "fedzo_fig4_softmax_M.cfg": "fashion_mnist", "fedzo_fig5_softmax_aircomp.cfg": "fashion_mnist"}
  assert not papers.PENDING["fedzo"]
  # A renamed flagfile would silently stop being substituted: every paper's keys must exist.
  flagfiles = os.path.join(C.REPO, "experiments", "flagfiles")
  assert all(os.path.isfile(os.path.join(flagfiles, f)) for subs in papers.SUBSTITUTES.values() for f in subs)


def test_fzoos_metric_moves_to_covertype_and_ffgb_stays_on_digits(tmp_path):
  data = tmp_path / "data"
  (data / "covtype").mkdir(parents=True)
  (data / "covtype" / "covtype").write_text("1 1:0.5\n")
  make_cifar_dir(data / "cifar-10-batches-bin")
  fz = C.Context(str(tmp_path), "paper", data_dir=str(data), substitutes=papers.SUBSTITUTES["fzoos"])
  assert fz.resolve("metric_s0", "fzoos_metric_digits.cfg", {"seed": 0})[2] == {
      "seed": 0, "dataset": "libsvm", "data_dir": str(data / "covtype" / "covtype")}
  ffgb = C.Context(str(tmp_path), "paper", data_dir=str(data), substitutes=papers.SUBSTITUTES["ffgb"])
  assert ffgb.resolve("d_s0", "ffgb_digits_s01.cfg", {}) == ("d_s0", "ffgb_digits_s01.cfg", {})
  assert ffgb.data == {"cifar10": "digits (MLP weak learner), the offline substitute for the paper's cifar10 "
                                  "(ffgb.fig1_cifar10, ffgb.fig2a_cifar10, ffgb.fig2b_cifar10 run the paper's "
                                  "settings on it (`--data_dir=DIR` with `DIR/cifar-10-batches-bin/`))"}
  # No such claims yet: the note says so.
  assert "(no flagfile runs the paper's settings on it yet)" in C.Substitute("cifar10", "x", movable=False).note(None)


def test_a_claim_on_the_papers_own_data_runs_only_with_it(tmp_path, monkeypatch, capsys):
  from experiments.reproduce import __main__ as main_mod
  calls = []

  def ev(ctx):
    calls.append(ctx.scale)
    return C.Evidence("reproduced", "fine", numbers={"x": 1.0})

  claim = C.Claim("toy.cifar", "c", "Fig. 1", "rule", ev).on_paper_data("cifar10")
  assert claim.scales == ("paper",) and claim.needs == "cifar10"
  with pytest.raises(ValueError, match="accepted: cifar10, fashion_mnist, covtype"):
    C.Claim("toy.x", "c", "Fig. 1", "rule", ev).on_paper_data("imagenet")
  monkeypatch.setitem(papers.PAPERS, "toy", [claim])
  monkeypatch.setitem(papers.TITLES, "toy", "Toy paper")
  monkeypatch.setitem(papers.PENDING, "toy", [])
  data = tmp_path / "data"
  make_cifar_dir(data / "cifar-10-batches-bin")
  out = tmp_path / "out"

  def pending():
    return json.loads((out / "toy" / "claims.json").read_text())["pending"]

  main_mod.reproduce("toy", "paper", str(out), only={"toy.cifar"})  # no --data_dir: listed with how to run it
  assert "toy.cifar: not evaluated: runs on the paper's cifar10 only" in capsys.readouterr().out
  assert calls == [] and pending() == ["toy.cifar: runs on the paper's cifar10 only: `--data_dir=DIR` with "
                                       "`DIR/cifar-10-batches-bin/` evaluates it (at --scale=paper)"]
  main_mod.reproduce("toy", "smoke", str(out), data_dir=str(data))  # never at smoke
  assert calls == [] and pending()[0].startswith("toy.cifar: evaluated at --scale=paper only")
  main_mod.reproduce("toy", "paper", str(out), data_dir=str(data))
  assert calls == ["paper"] and pending() == []
  # Its record is kept, and not listed as missing, when a later run has no --data_dir.
  main_mod.reproduce("toy", "paper", str(out))
  saved = json.loads((out / "toy" / "claims.json").read_text())
  assert calls == ["paper"] and saved["pending"] == [] and [r["id"] for r in saved["claims"]] == ["toy.cifar"]


@pytest.mark.slow  # several CNN runs end to end: minutes on 2 cores
def test_ffgb_fig1_cifar10_on_cifar_files(tmp_path, monkeypatch):
  # ffgb.fig1_cifar10's measure end to end on tiny CIFAR-10 files (the claim is declared not evaluated here):
  # its flagfiles, the lenet task (FedAvg trains FFGB's CNN learner) and the measure. Scaled down: 3 clients,
  # 2 seeds, 2 Adam steps, budget 26 (FFGB N K = 12 / 9 models a round at s = 0.1 / 0.3: ceil(24 / 12) = 2
  # and ceil(24 / 9) = 3 rounds).
  data = tmp_path / "data"
  make_cifar_dir(data / "cifar-10-batches-bin")
  small = dict(num_clients=3, clients_per_round=3, oracle_steps=2, comm_budget=26, fedavg_batch_size=2,
               eval_every=1)
  runs = C.Context.runs
  monkeypatch.setattr(C.Context, "runs", lambda self, specs: runs(
      self, [(n, f, {**fl, **small}) for n, f, fl in specs if n.endswith(("seed0", "seed1"))]))
  from experiments.reproduce.papers import ffgb
  assert next(c for c in papers.PAPERS["ffgb"] if c.id == "ffgb.fig1_cifar10").kind == "not evaluated"
  ctx = C.Context(str(tmp_path / "out"), "paper", log=lambda _: None, data_dir=str(data), run_jobs=2,
                  substitutes=papers.SUBSTITUTES["ffgb"])
  settings, numbers, figures = ffgb.versus_numbers(ctx, "cifar10")  # the measure Fig. 1 would be judged by
  assert sorted(settings) == ["s=0.1", "s=0.3"]
  for s, ffgb_rounds in ((1, 2), (3, 3)):
    assert len(numbers[f"s=0.{s} final test accuracy ffgb"]) == 2
    assert f"s=0.{s} fedavg test accuracy at FFGB's last round ({ffgb_rounds})" in numbers
  assert set(k.split(" ")[-1] for k in numbers if "final test accuracy" in k) == {"ffgb", "ffgb_nores", "fedavg"}
  assert len(figures) == 4
  cifar = str(data / "cifar-10-batches-bin")
  assert all("ffgb_cifar10_s0" in c and f"--data_dir={cifar}" in c for c in ctx.commands)
  assert ctx.data == {"cifar10": f"cifar10, the paper's data, from {cifar}"}
  with pytest.raises(ValueError, match="does not hold cifar10"):
    C.Context(str(tmp_path), "paper", data_dir=str(tmp_path / "none")).paper_data("cifar10")


@pytest.mark.slow  # a full experiments.run process on the swapped data
def test_a_fedzo_softmax_run_on_fashion_mnist_files(tmp_path):
  # The swapped flags reach experiments.run and its loader: Fig. 3's flagfile on 400 tiny
  # Fashion-MNIST test images (t10k only: the loader's 320/80 split), one round.
  data = tmp_path / "data"
  data.mkdir()
  make_mnist_dir(data / "fashion-mnist", None, 400, gz=False)
  ctx = C.Context(str(tmp_path / "out"), "paper", log=lambda _: None, data_dir=str(data),
                  substitutes=papers.SUBSTITUTES["fedzo"])
  (runs,) = ctx.runs([("fedzo_fig3_s0", "fedzo_fig3_softmax_H.cfg", dict(rounds=1, eval_every=1, num_clients=10,
                                                                       clients_per_round=5))])
  assert set(runs) == {"fedavg-local_steps=5", "fedzo-local_steps=20", "fedzo-local_steps=5"}
  with open(os.path.join(ctx.run_dir("fedzo_fig3_s0"), "config.json")) as f:
    assert json.load(f)["flags"]["dataset"] == "fashion_mnist"
  assert "--dataset=fashion_mnist" in ctx.commands[0] and "fedzo_fig3_s0_fashion_mnist" in ctx.commands[0]


def test_cli_rejects_a_data_dir_that_is_not_a_folder(tmp_path):
  proc = subprocess.run([sys.executable, "-m", "experiments.reproduce", f"--data_dir={tmp_path}/nope",
                         f"--output_dir={tmp_path}"], capture_output=True, text=True)
  assert proc.returncode == 2
  assert proc.stderr.strip().splitlines()[-1].startswith("data_dir: ")
  assert "cifar-10-batches-bin/, fashion-mnist/, covtype/" in proc.stderr
