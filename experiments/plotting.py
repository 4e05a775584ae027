"""curves.png: algorithms side by side against rounds and against queries."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402


def plot_curves(histories: dict[str, list[dict]], path: str, title: str = ""):
  """Writes ``path``: objective vs rounds, objective vs queries, and test accuracy
  (or the optimality gap) vs rounds when the records have it.

  Args:
    histories: algorithm name -> list of metrics records (``round``,
      ``queries``, ``objective``, optional ``test_accuracy``).
  """
  extra = next((k for k in ("test_accuracy", "attack_accuracy", "optimality_gap")
                if any(k in r for h in histories.values() for r in h)), None)
  ncol = 3 if extra else 2
  fig, axes = plt.subplots(1, ncol, figsize=(5 * ncol, 4))
  for name, hist in histories.items():
    if not hist:
      continue
    rounds = [r["round"] for r in hist]
    axes[0].plot(rounds, [r["objective"] for r in hist], label=name)
    q = [(r["queries"], r["objective"]) for r in hist if r["queries"] > 0]
    if q:
      axes[1].plot(*zip(*q), label=name)
    if extra:
      axes[2].plot(rounds, [r.get(extra, float("nan")) for r in hist], label=name)
  axes[0].set_xlabel("round")
  axes[0].set_ylabel("objective")
  axes[1].set_xlabel("queries (summed over clients)")
  axes[1].set_ylabel("objective")
  axes[1].set_xscale("log")
  axes[1].xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())  # no overlapping labels
  if extra:
    axes[2].set_xlabel("round")
    axes[2].set_ylabel(extra.replace("_", " "))
    if extra == "optimality_gap":
      axes[2].set_yscale("log")
  for ax in axes:
    ax.grid(alpha=0.3)
    ax.legend()
  if title:
    fig.suptitle(title)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)
