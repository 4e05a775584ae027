"""Writes a paper's ``report.md`` / ``claims.json``, the index, and the curve figures.

Colours follow :data:`METHOD_ORDER`: one hue per base algorithm in every paper's
figures; variants of one algorithm (``fedzo-local_steps=5``, ...) share its hue,
from dark to light in label order, with different line styles.
"""

from __future__ import annotations

import dataclasses
import json
import os

from experiments.reproduce.claims import SUBSTITUTE_NOTE, Claim, Evidence, Stat, natural
from fedsim.runner import marker

METHOD_ORDER = ("fedavg", "fedzo", "dzopa", "zone_s", "hiso", "decomfl", "fzoos", "fedzo_fd",
                "fedprox_zo", "scaffold_zo1", "scaffold_zo2", "fedavg_true_grad", "ffgb",
                "ffgb_nores", "ffgb_c", "ffgb_l", "fedlrgd", "fedave", "gd")
_STYLES = ("-", "--", "-.", ":")


def _base(label: str) -> str:
  return label.split("-", 1)[0]


def method_key(label: str) -> tuple:
  """Sort key: the base algorithm's place in :data:`METHOD_ORDER`, then the label."""
  base = _base(label)
  return (METHOD_ORDER.index(base) if base in METHOD_ORDER else len(METHOD_ORDER), natural(label))


def band(y, bounds: tuple[float, float] | None = None):
  """(mean, mean - std, mean + std) over the seeds (rows) of ``y`` (seeds, points): the sample std
  (ddof = 1; 0 for one seed), the band clipped to ``bounds`` when given.

  >>> band([[0.0, 1.0], [1.0, 1.0]], bounds=(0.0, 1.0))[2].tolist()
  [1.0, 1.0]
  """
  import numpy as np
  y = np.asarray(y, float)
  mean = y.mean(0)
  std = y.std(0, ddof=1) if y.shape[0] > 1 else np.zeros_like(mean)
  low, high = mean - std, mean + std
  if bounds is not None:
    low, high = np.clip(low, *bounds), np.clip(high, *bounds)
  return mean, low, high


def plot_curves(path: str, curves: dict[str, list[list[tuple[float, float]]]], xlabel: str,
                ylabel: str, title: str, logy: bool = False, logx: bool = False, show_n: bool = True,
                bounds: tuple[float, float] | None = None) -> str:
  """One figure of mean +- std curves over seeds (the sample std, ddof = 1, as :class:`claims.Stat`).

  Args:
    path: the PNG to write.
    curves: ``{label: [[(x, y), ...] per seed]}`` (seeds share their x values).
    xlabel, ylabel, title: axis labels and title.
    logy: log-scale y.
    logx: log-scale x.
    show_n: append each curve's number of seeds to its label (off for curves that are already
      statistics over seeds: the title then says over how many).
    bounds: (low, high) of a bounded metric (a success rate: (0, 1)); the std band is clipped
      to it.

  Returns:
    ``path``.
  """
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  import numpy as np
  fig, ax = plt.subplots(figsize=(5.2, 3.4), dpi=90)
  cmap = plt.get_cmap("tab20")
  seen: dict[str, int] = {}
  variants: dict[str, int] = {}
  for label in curves:
    variants[_base(label)] = variants.get(_base(label), 0) + 1
  # Bases outside METHOD_ORDER (e.g. "d=1, eta=0.5") each get a hue of their own, in order.
  others = [b for b in dict.fromkeys(_base(label) for label in sorted(curves, key=method_key))
            if b not in METHOD_ORDER]
  for label in sorted(curves, key=method_key):
    runs = curves[label]
    n = min(len(r) for r in runs)
    x = np.array([p[0] for p in runs[0][:n]])
    y = np.array([[p[1] for p in r[:n]] for r in runs])
    base = _base(label)
    k = seen.setdefault(base, 0)
    seen[base] += 1
    idx = METHOD_ORDER.index(base) if base in METHOD_ORDER else len(METHOD_ORDER) + others.index(base)
    hue = np.array(cmap(2 * idx if idx < 10 else (2 * (idx - 10) + 1) % 20)[:3])  # dark shades first
    # The k-th of a base's variants: its hue mixed with up to 55% white, so variants differ in shade too.
    color = tuple(hue + (1 - hue) * 0.55 * k / max(variants[base] - 1, 1))
    mean, low, high = band(y, bounds)
    shown = f"{label} (n={len(runs)})" if show_n else label
    ax.plot(x, mean, _STYLES[k % len(_STYLES)], color=color, lw=1.4, label=shown, marker=marker(len(x)), ms=3)
    if len(runs) > 1:
      ax.fill_between(x, low, high, color=color, alpha=0.15, lw=0)
  ax.set_xlabel(xlabel)
  ax.set_ylabel(ylabel)
  ax.set_title(title, fontsize=9)
  if logy:
    ax.set_yscale("log")
  if logx:
    ax.set_xscale("log")
  ax.legend(fontsize=6)
  fig.tight_layout()
  os.makedirs(os.path.dirname(path), exist_ok=True)
  fig.savefig(path)
  plt.close(fig)
  return path


def _number(value) -> dict | float:
  return dataclasses.asdict(value) if isinstance(value, Stat) else value


def claim_record(claim: Claim, ev: Evidence, scale: str, seconds: float, run_seconds: float = 0.0,
                 data: dict[str, str] | None = None) -> dict:
  """The JSON record of one claim (``claims.json``'s entries).

  ``seconds``: wall time of this evaluation (near 0 when every run was cached);
  ``run_seconds``: the summed wall time of the claim's runs when they ran, read
  from their completion markers (a run the claim shares with another counts in both);
  ``data``: for a claim whose runs could use the paper's own data set, ``{data set: what
  they ran on}`` (:attr:`experiments.reproduce.claims.Context.data`); absent otherwise.
  """
  rec = {"id": claim.id, "statement": claim.statement, "source": claim.source,
         "criterion": claim.criterion, "verdict": ev.verdict, "scale": scale, "why": ev.why,
         "numbers": {k: _number(v) for k, v in ev.numbers.items()}, "figures": list(ev.figures),
         "commands": list(ev.commands), "seconds": round(seconds, 1), "run_seconds": round(run_seconds, 1)}
  if data:
    rec["data"] = dict(sorted(data.items()))
  return rec


def on_substitutes(records: list[dict]) -> list[str]:
  """The ids of the claims whose runs used an offline substitute of the paper's data."""
  return [r["id"] for r in records if any(SUBSTITUTE_NOTE in v for v in r.get("data", {}).values())]


def _timing(r: dict) -> str:
  """``"12.3 s"``, or ``"0.4 s to evaluate; its runs took 812.0 s"`` when the runs were cached."""
  runs = r.get("run_seconds")  # absent from records written before it existed
  if runs is None or runs <= r["seconds"]:
    return f"{r['seconds']} s"
  return f"{r['seconds']} s to evaluate; its runs took {runs} s"


def _fmt(value) -> str:
  if isinstance(value, dict) and "mean" in value:
    return f"{value['mean']:.4g} ± {value['std']:.2g} (n={value['n']})"
  return f"{value:.4g}" if isinstance(value, float) else str(value)


def write_paper(folder: str, paper: str, title: str, records: list[dict], pending: list[str]) -> None:
  """Writes ``folder/claims.json`` and ``folder/report.md`` (``pending``: claims with no evaluation yet)."""
  with open(os.path.join(folder, "claims.json.tmp"), "w") as f:
    json.dump({"paper": paper, "title": title, "claims": records, "pending": pending}, f, indent=1)
  os.replace(os.path.join(folder, "claims.json.tmp"), os.path.join(folder, "claims.json"))
  lines = [f"# {title}", "", "| claim | source | verdict |", "|---|---|---|"]
  lines += [f"| [{r['id']}](#{r['id'].replace('.', '')}) | {r['source']} | {r['verdict']}"
            f"{' (smoke)' if r['scale'] == 'smoke' else ''} |" for r in records]
  if pending:
    lines += ["", "Not evaluated yet (no verdict): " + "; ".join(pending) + "."]
  subs = on_substitutes(records)
  if subs:
    lines += ["", "Ran on offline substitutes of the paper's data (each claim's Data line says which): "
              + ", ".join(subs) + "."]
  for r in records:
    lines += ["", f"## {r['id']}", "", f"**Claim** ({r['source']}): {r['statement']}", "",
              f"**Criterion**: {r['criterion']}", "",
              f"**Verdict**: {r['verdict']} (scale {r['scale']}, {_timing(r)}). {r['why']}", ""]
    if r.get("data"):
      lines += ["**Data**: " + "; ".join(r["data"].values()), ""]
    if r.get("note"):  # e.g. the criterion changed after this record was evaluated
      lines += [f"**Note**: {r['note']}", ""]
    if r["numbers"]:
      lines += ["| number | value |", "|---|---|"]
      lines += [f"| {k} | {_fmt(v)} |" for k, v in r["numbers"].items()]
      lines.append("")
    lines += [f"![{r['id']}]({p})" for p in r["figures"]]
    lines += ["", "Commands:", "", "```"] + r["commands"] + ["```"]
  with open(os.path.join(folder, "report.md"), "w") as f:
    f.write("\n".join(lines) + "\n")


def write_index(root: str, papers: dict[str, str]) -> None:
  """Writes ``root/report.md``: each paper's claims per scale, verdict counts and the claims that ran on
  offline substitutes of its data (:func:`on_substitutes`), linking its report."""
  lines = ["# fedsim reproduction report", "",
           "| paper | claims per scale | reproduced | partly | not reproduced | claims | pending "
           "| on offline substitutes |",
           "|---|---|---|---|---|---|---|---|"]
  for paper, title in papers.items():
    path = os.path.join(root, paper, "claims.json")
    if not os.path.exists(path):
      continue
    with open(path) as f:
      data = json.load(f)
    recs = data["claims"]
    counts = [sum(r["verdict"] == v for r in recs)
              for v in ("reproduced", "partly reproduced", "not reproduced")]
    scales = ", ".join(f"{s} {sum(r['scale'] == s for r in recs)}" for s in sorted({r["scale"] for r in recs})) or "-"
    lines.append(f"| [{title}]({paper}/report.md) | {scales} | {counts[0]} | {counts[1]} | {counts[2]} | "
                 f"{len(recs)} | {len(data.get('pending', []))} | {len(on_substitutes(recs))} |")
  with open(os.path.join(root, "report.md"), "w") as f:
    f.write("\n".join(lines) + "\n")
