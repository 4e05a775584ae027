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
