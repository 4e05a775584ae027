"""Figures show what they claim (issue 36 item 8): markers on short series, a colour per series,
data in the axes. Each figure kind is drawn from small synthetic records and its Axes inspected."""

from __future__ import annotations

import math

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

from experiments.reproduce import report  # noqa: E402
from fedsim import runner  # noqa: E402


@pytest.fixture
def drawn(monkeypatch):
  """The figures the code under test saves (captured at savefig)."""
  from matplotlib.figure import Figure
  figs = []
  real = Figure.savefig

  def savefig(self, *args, **kwargs):
    figs.append(self)
    return real(self, *args, **kwargs)
  monkeypatch.setattr(Figure, "savefig", savefig)
  return figs


def _check(ax, series: int):
  lines = ax.get_lines()
  assert len(lines) == series
  for line in lines:
    if len(line.get_xdata()) <= runner.FEW_POINTS:
      assert line.get_marker() not in (None, "None", "", " "), line.get_label()
  colours = {matplotlib.colors.to_hex(line.get_color()) for line in lines}
  assert series == 1 or len(colours) == series, colours       # one colour per series
  lim = ax.dataLim
  assert all(math.isfinite(v) for v in (lim.x0, lim.x1, lim.y0, lim.y1))


def test_report_curves_one_point_per_series_and_many_non_method_series(tmp_path, drawn):
  # fedlrgd_s5_crossover: one eta, so one point per series (was an empty axes: lines of one point).
  report.plot_curves(str(tmp_path / "a.png"), {f"fedlrgd/fedave d={d} eps=0.1": [[(2.5, 0.3 * d)]] for d in (1, 2)},
                     "eta", "ratio", "t", logy=True)
  # fedlrgd_theorem1: six (d, eta) series, labels outside METHOD_ORDER (were one colour).
  report.plot_curves(str(tmp_path / "b.png"), {f"d={d}, eta={e}": [list(enumerate(np.geomspace(1, 1e-3, 8) * e, 1))]
                                               for d in (1, 2) for e in (0.5, 1.5, 2.5)}, "r", "tail", "t", logy=True)
  # Method curves over seeds, long enough for plain lines.
  report.plot_curves(str(tmp_path / "c.png"), {name: [[(x, s + x) for x in range(50)] for s in range(3)]
                                               for name in ("fzoos", "fedzo_fd", "fedzo_fd-lr=0.1")}, "round", "F", "t")
  assert len(drawn) == 3
  _check(drawn[0].axes[0], 2)
  _check(drawn[1].axes[0], 6)
  _check(drawn[2].axes[0], 3)
  assert all(line.get_marker() in (None, "None") for line in drawn[2].axes[0].get_lines())   # 50 points: lines


def test_run_curves_mark_sparse_evaluations(tmp_path, drawn):
  def hist(k, n):
    return [{"round": 10 * i, "queries": 100 * i, "objective": k + 1.0 / (i + 1), "test_accuracy": 0.1 * i}
            for i in range(n)]
  runner.plot_curves({"fedavg": hist(0, 4), "fedzo": hist(1, 4)}, str(tmp_path / "curves.png"), "t")
  axes = drawn[0].axes
  _check(axes[0], 2)
  _check(axes[2], 2)
  assert len(axes[1].get_lines()) == 2     # queries > 0 only: 3 points each


def _colours(lines) -> set[str]:
  return {matplotlib.colors.to_hex(line.get_color()) for line in lines}


def test_series_style_gives_each_of_many_series_its_own_colour():
  colours = {matplotlib.colors.to_hex(runner.series_style(i, 5)["color"]) for i in range(20)}
  assert len(colours) == 20
  assert runner.series_style(3, 5)["marker"] == "o" and runner.series_style(3, 21)["marker"] is None


def test_run_curves_keep_one_colour_per_algorithm_across_panels(tmp_path, drawn):
  # "fedavg" has no queries, so the queries panel draws fedzo only: still fedzo's colour.
  hist = [{"round": i, "queries": 0, "objective": 1.0 / (i + 1)} for i in range(30)]
  zo = [{**r, "queries": 10 * (r["round"] + 1)} for r in hist]
  runner.plot_curves({"fedavg": hist, "fedzo": zo}, str(tmp_path / "curves.png"))
  objective, queries = drawn[0].axes
  _check(objective, 2)
  _check(queries, 1)
  assert queries.get_lines()[0].get_color() == objective.get_lines()[1].get_color()


def test_sweep_summary_one_swept_value_and_several_series(tmp_path, drawn, monkeypatch):
  from types import SimpleNamespace

  from experiments import sweep as sweep_mod
  monkeypatch.setattr(sweep_mod, "FLAGS", SimpleNamespace(seeds=2))
  fake = SimpleNamespace(metric="objective", names=["dirichlet_alpha", "lr"],
                         header=lambda: ["algorithm", "dirichlet_alpha", "lr", "seed", "final_objective"])
  rows = [[alg, "0.1", lr, str(s), str(0.5 + s + float(lr))] for alg in ("fedavg", "fedzo") for lr in ("0.1", "1")
          for s in range(2)]
  sweep_mod.plot_summary(fake, rows, str(tmp_path / "summary.png"))   # one alpha: one point per series
  ax = drawn[0].axes[0]
  data = [c.lines[0] for c in ax.containers]                          # the errorbar series' data lines
  assert len(data) == 4 and all(len(line.get_xdata()) == 1 for line in data)
  assert all(line.get_marker() not in (None, "None", "") for line in data)
  assert len(_colours(data)) == 4
  assert all(math.isfinite(v) for v in (ax.dataLim.y0, ax.dataLim.y1)) and ax.dataLim.height > 0


def test_fedlrgd_suite_and_rank_study_figures(tmp_path, drawn, monkeypatch):
  from types import SimpleNamespace

  from experiments.fedlrgd import rank_study, suite
  monkeypatch.setattr(suite, "FLAGS", SimpleNamespace(output_dir=str(tmp_path)))
  # Convergence: two rounds recorded per method (a line without markers would be near-invisible).
  recs = {name: [{"round": t, "compute": 10.0 * t * (k + 1), "uploads": t, "gap": 10.0 ** -(t + k)} for t in range(3)]
          for k, name in enumerate(("fedlrgd r=2", "fedlrgd r=4", "fedave"))}
  suite._plot_convergence({100: recs}, [1.0, 100.0])
  for ax in drawn[0].axes:
    _check(ax, 3)
  gaps = np.geomspace(1, 1e-6, 2 * 3 * 12).reshape(2, 3, 12)
  errs = [{"r": r, "median_of_median_rel_err": 0.1 / r, "median_max_rel_err": 0.3 / r} for r in (2, 4, 8)]
  suite._plot_fidelity(errs, gaps, [2, 4, 8])
  _check(drawn[1].axes[1], 3)
  rows = [{"d": d, "eta": e, "rate": -2 * e / d, "slope": -2 * e / d,
           "tails": list(np.geomspace(1, 1e-4, 8) ** e)} for d in (1, 2) for e in (0.5, 1.5, 2.5)]
  rank_study.plot({"theorem1": rows}, str(tmp_path))
  ax = drawn[2].axes[0]
  solid = [line for line in ax.get_lines() if line.get_linestyle() == "-"]     # the dotted ones are the rates
  assert len(solid) == 6 and len(_colours(solid)) == 6
  assert all(line.get_marker() == "o" for line in solid)
