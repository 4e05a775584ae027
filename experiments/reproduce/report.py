"""Writes a paper's ``report.md`` / ``claims.json``, the index, and the curve figures.

Colours follow :data:`METHOD_ORDER`: one hue per base algorithm in every paper's figures; variants of one
algorithm (``fedzo-local_steps=5``, ...) share its hue, from dark to light in label order, in other line styles.
"""

from __future__ import annotations

import dataclasses
import json
import os

from experiments.reproduce.claims import SUBSTITUTE_NOTE, TEST_CRITERION, Claim, Evidence, Stat, natural
from fedsim import papers as fedsim_papers
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
    logy, logx: log-scale y, x.
    show_n: append each curve's number of seeds to its label (off for curves that are already statistics over
      seeds: the title then says over how many).
    bounds: (low, high) of a bounded metric (a success rate: (0, 1)); the std band is clipped to it.

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


def claim_record(claim: Claim, ev: Evidence, scale: str, seconds: float, run_seconds: float = 0.0,
                 data: dict[str, str] | None = None) -> dict:
  """The JSON record of one claim (``claims.json``'s entries).

  ``seconds``: wall time of this evaluation (near 0 when every run was cached); ``run_seconds``: the summed wall
  time of the claim's runs when they ran, read from their completion markers (a run the claim shares with another
  counts in both); ``data``: for a claim whose runs could use the paper's own data set, ``{data set: what they ran
  on}`` (:attr:`experiments.reproduce.claims.Context.data`); absent otherwise.
  """
  rec = {"id": claim.id, "kind": claim.kind, **({"headline": True} if claim.headline else {}),
         "statement": claim.statement, "source": claim.source, "criterion": claim.criterion, "verdict": ev.verdict,
         "scale": scale, "why": ev.why,
         "numbers": {k: dataclasses.asdict(v) if isinstance(v, Stat) else v for k, v in ev.numbers.items()},
         "figures": list(ev.figures), "commands": list(ev.commands), "seconds": round(seconds, 1),
         "run_seconds": round(run_seconds, 1)}
  decl = claim.declaration
  if decl is not None:  # a declared claim (experiments.reproduce.engine): the declaration's data travel with it
    rec.update(form=decl.form or None, quote=decl.quote or None, deviations=list(decl.deviations),
               declared=decl.declared or None, after_data=decl.after_data, digest=decl.digest)
    if decl.finding:
      rec["finding"] = decl.finding
    if decl.kind == "not evaluated":
      rec["needs"] = decl.needs
    rec = {k: v for k, v in rec.items() if v is not None}
  if ev.results:
    rec.update(effect=ev.effect, results=ev.results)
  if data:
    rec["data"] = dict(sorted(data.items()))
  return rec


def on_substitutes(records: list[dict]) -> list[str]:
  """The ids of the claims whose runs used an offline substitute of the paper's data."""
  return [r["id"] for r in records if any(SUBSTITUTE_NOTE in v for v in r.get("data", {}).values())]


def _timing(r: dict) -> str:
  """``"12 s"`` (the evaluation's wall time), or ``"runs 812 s"`` when the claim's runs took longer (the
  evaluation then read cached runs); claims.json keeps both to 0.1 s."""
  runs = r.get("run_seconds")  # absent from records written before it existed
  return f"{r['seconds']:.0f} s" if runs is None or runs <= r["seconds"] else f"runs {runs:.0f} s"


def _scale(r: dict, records: list[dict]) -> str:
  """``"smoke scale, "`` for a record at a scale not all of the report's records share (the summary says the one
  they share); empty otherwise."""
  return "" if all(x["scale"] == r["scale"] for x in records) else f"{r['scale']} scale, "


def _earlier(r: dict) -> str:
  """``"; earlier: not reproduced (2026-11-28, criterion changed)"``: the verdicts a record replaced, with when
  and why (their criteria are in claims.json's ``history``); empty for a record without history."""
  return "; earlier: " + ", ".join(f"{h['verdict']} ({h['replaced']}, {h['reason']})" for h in r["history"]) \
      if r.get("history") else ""


def _fmt(value) -> str:
  if isinstance(value, dict) and "mean" in value:
    return f"{value['mean']:.4g} ± {value['std']:.2g} (n={value['n']})"
  return f"{value:.4g}" if isinstance(value, float) else str(value)


SMOKE_NOTE = ("Smoke runs check the machinery (every claim's commands run and are judged), not the papers: "
              "their verdicts are not evidence.")


def _num(x) -> str:
  """``x`` to 3 significant digits; a word (``"never"``) as it is, None as ``"nan"``."""
  return x if isinstance(x, str) else "nan" if x is None else f"{x:.3g}"


def _first_sentence(text: str, limit: int = 170) -> str:
  head = text.split(". ")[0].rstrip(".")
  return head if len(head) <= limit else head[:limit - 1].rsplit(" ", 1)[0].rstrip(",;:") + "…"  # at a word


VERDICT_RANK = {"not reproduced": 0, "inconclusive": 1, "mixed": 2, "partly reproduced": 3, "reproduced": 4}
"""The order in which a post-data criterion change moves a verdict up or down (the index counts them)."""


def moves(records: list[dict]) -> tuple[int, int, int]:
  """(post-data criteria, moved up, moved down) over the paper claims: a record declared after its runs counts
  once; its last history entry, if any, gives the direction its verdict moved."""
  post = up = down = 0
  for r in records:
    if r.get("kind", "paper") != "paper" or not r.get("after_data"):
      continue
    post += 1
    if r.get("history"):
      a, b = VERDICT_RANK.get(r["history"][-1]["verdict"]), VERDICT_RANK.get(r["verdict"])
      if a is not None and b is not None:
        up, down = up + (b > a), down + (b < a)
  return post, up, down


def one_minute(records: list[dict], info: dict) -> list[str]:
  """The one-minute summary of VERDICTS.md §9 for a paper with declared claims: what ran and what did not,
  one row per headline claim (its key number in units, verdict and one-clause reason), the mechanism
  findings, and the deviations that could flip a verdict (``info``: the declarations' ``[paper]`` table)."""
  papers_ = [r for r in records if r.get("kind", "paper") in ("paper", "not evaluated")]
  lines = ["**Summary.** " + info.get("ran", "").strip()
           + (f" Not run here: {info['not_run'].strip()}" if info.get("not_run") else ""), ""]
  lines += ["| headline claim | key number | verdict | reason |", "|---|---|---|---|"]
  for r in (r for r in papers_ if r.get("headline")):
    reason = r.get("finding") or _first_sentence(r.get("needs") if r["verdict"] == "not evaluated" else r["why"], 160)
    lines.append(f"| [{r['id']}](#{anchor(r['id'])}): {_first_sentence(r['statement'], 120)} ({r['source']}) | "
                 f"{key_number(r) if r.get('effect') else '-'} | **{r['verdict']}** | {reason} |")
  lines.append("")
  if info.get("mechanisms"):
    lines += ["Mechanisms:", *(f"- {m}" for m in info["mechanisms"]), ""]
  if info.get("flips"):
    lines += ["Deviations that could flip a verdict:", *(f"- {m}" for m in info["flips"]), ""]
  counts = {v: sum(r["verdict"] == v for r in papers_) for v in (*VERDICT_RANK, "not evaluated")}
  post, up, down = moves(records)
  lines.append(f"{len(papers_)} paper claims: " + ", ".join(f"{n} {v}" for v, n in counts.items() if n)
               + f"; {len(records) - len(papers_)} checks and diagnostics counted apart; {post} criteria fixed after "
               f"their runs ({up} moved the verdict up, {down} down).")
  return lines


def _command_groups(commands: list[str]) -> list[str]:
  """The commands, compact: runs that differ only in ``--seed=S`` (or ``--attack_target=S``) and an output folder
  ending in ``S`` become one ``for s in ...`` loop; the rest are written as they are.

  >>> _command_groups(["python -m m --a=1 --seed=0 --output_dir=r/x_s0",
  ...                  "python -m m --a=1 --seed=1 --output_dir=r/x_s1"])
  ['for s in 0 1; do python -m m --a=1 --seed=$s --output_dir=r/x_s$s; done']
  """
  import re
  groups: dict[str, list[str]] = {}
  order: list[str] = []
  for c in commands:
    # The one integer flag (--seed, --attack_target, ...) whose value ends the output folder's name.
    out_dir = re.search(r" --output_dir=(\S*?)(\d+)$", c)
    flag = out_dir and next((f for f in re.finditer(r" --(seed|attack_target)=(\d+)(?= |$)", c[:out_dir.start()])
                             if f.group(2) == out_dir.group(2)), None)
    if out_dir and flag:
      key = (f"{c[:flag.start()]} --{flag.group(1)}=$s{c[flag.end():out_dir.start()]} "
             f"--output_dir={out_dir.group(1)}$s")
      if key not in groups:
        order.append(key)
      groups.setdefault(key, []).append(out_dir.group(2))
    else:
      order.append(c)
  out = []
  for key in order:
    seeds = groups.get(key)
    if seeds is None:
      out.append(key)
    elif len(seeds) == 1:
      out.append(key.replace("$s", seeds[0]))
    else:
      out.append(f"for s in {' '.join(seeds)}; do {key}; done")
  return _shared_output(_shared_flags(out))


def _shared_output(lines: list[str]) -> list[str]:
  """Writes the folder every ``--output_dir=FOLDER/name`` of two lines or more shares once, as ``O=FOLDER``
  before them and ``--output_dir=$O/name`` in each.

  >>> _shared_output(["python -m a --output_dir=runs/x/runs/a1", "python -m a --output_dir=runs/x/runs/a2"])
  ['O=runs/x/runs', 'python -m a --output_dir=$O/a1', 'python -m a --output_dir=$O/a2']
  """
  import re
  folders = {m.group(1) for line in lines if (m := re.search(r" --output_dir=(\S+)/[^/\s]+(?= |;|$)", line))}
  if len(folders) != 1 or sum(" --output_dir=" in line for line in lines) < 2:
    return lines
  folder = folders.pop()
  return [f"O={folder}", *(line.replace(f" --output_dir={folder}/", " --output_dir=$O/") for line in lines)]


SHARED_FLAGS_MIN = 60  # characters: flags every command shares are written once (as $F) when longer than this


def _shared_flags(lines: list[str]) -> list[str]:
  """Writes the ``--flag=value`` tokens that every ``python -m experiments.run`` line shares once, as
  ``F="..."`` before them and ``$F`` in each, when there are two lines or more and the
  shared flags are longer than :data:`SHARED_FLAGS_MIN`; only plain tokens (no quote, space or ``$``).

  >>> for line in _shared_flags(["python -m experiments.run --flagfile=experiments/flagfiles/a.cfg --rounds=50 "
  ...                              "--dim=300 --seed=0 --eval_every=1", "python -m experiments.run --flagfile="
  ...                              "experiments/flagfiles/a.cfg --rounds=50 --dim=300 --seed=1 --eval_every=1"]):
  ...   print(line)
  F="--flagfile=experiments/flagfiles/a.cfg --rounds=50 --dim=300 --eval_every=1"
  python -m experiments.run $F --seed=0
  python -m experiments.run $F --seed=1
  """
  import re
  head = "python -m experiments.run "
  runs = [i for i, line in enumerate(lines) if head in line]
  if len(runs) < 2:
    return lines
  tokens = [lines[i].split(head, 1)[1].split(";", 1)[0].split() for i in runs]
  shared = [t for t in tokens[0] if re.fullmatch(r"--[\w.]+=[^\s'\"$;]+", t) and all(t in ts for ts in tokens[1:])]
  if len(" ".join(shared)) <= SHARED_FLAGS_MIN:
    return lines
  out = list(lines)
  for i, ts in zip(runs, tokens):
    kept = [t for t in ts if t not in shared]
    before, after = lines[i].split(head, 1)
    rest = after.split(";", 1)[1] if ";" in after else None
    out[i] = before + head + " ".join(["$F", *kept]) + (f";{rest}" if rest is not None else "")
  return [f'F="{" ".join(shared)}"', *out]


def write_paper(folder: str, paper: str, title: str, records: list[dict], pending: list[str]) -> None:
  """Writes ``folder/claims.json`` and ``folder/report.md`` (``pending``: claims with no evaluation yet).

  The report opens with :func:`one_minute`; then the claims by kind (paper claims, then checks, then
  diagnostics), each with its sentence, criterion, verdict (a declared claim's key number and comparisons by
  the protocol), numbers, figures and its commands grouped (:func:`_command_groups`).
  A claim whose runs and numbers repeat an earlier claim's points to it instead of repeating them.
  """
  with open(os.path.join(folder, "claims.json.tmp"), "w") as f:
    json.dump({"paper": paper, "title": title, "claims": records, "pending": pending}, f, indent=1)
  os.replace(os.path.join(folder, "claims.json.tmp"), os.path.join(folder, "claims.json"))
  smoke = bool(records) and all(r["scale"] == "smoke" for r in records)
  lines = [f"# {title}", ""]
  key = fedsim_papers.BY_NAME.get(paper)
  if key is not None:  # the paper in full (fedsim.papers), for readers outside the project
    lines += [fedsim_papers.reference(fedsim_papers.PAPERS[key])[2:], ""]
  if smoke:
    lines += [f"**{SMOKE_NOTE}**", ""]
  from experiments.reproduce import engine
  lines += [*one_minute(records, engine.paper_info(paper)), ""]
  kinds = (("paper", "Paper claims"), ("not evaluated", "Not evaluated here (paper claims that cannot run here)"),
           ("check", "Checks (implementation properties, not paper results)"),
           ("diagnostic", "Diagnostics (our hypotheses about a paper result)"))
  for kind, heading in kinds:
    mine = [r for r in records if r.get("kind", "paper") == kind]
    if not mine:
      continue
    links = [f"[{r['id']}](#{anchor(r['id'])}) {r['verdict']}"
             + (" (smoke)" if r["scale"] == "smoke" else "") for r in mine]
    if kind == "paper":  # each claim's section gives its source
      lines += [f"| {heading} | verdict |", "|---|---|", *(f"| {x.replace(') ', ') | ', 1)} |" for x in links), ""]
    else:
      lines += [f"**{heading}**: " + "; ".join(links) + ".", ""]
  if pending:
    lines += ["Not evaluated yet (no verdict): " + "; ".join(pending) + ".", ""]
  subs = on_substitutes(records)
  if subs:
    lines += ["Ran on offline substitutes of the paper's data (each claim's Data line says which): "
              + ", ".join(subs) + ".", ""]
  seen_commands: dict[tuple, str] = {}
  seen_numbers: dict[str, str] = {}
  seen_figures: dict[tuple, str] = {}
  for kind, _ in kinds:
    for r in (r for r in records if r.get("kind", "paper") == kind):
      if r["criterion"] == TEST_CRITERION and not r.get("history"):  # a batch of unit tests: one paragraph
        lines += [f"## {r['id']}", "", f"**Claim** ({r['source']}): {r['statement']} **Verdict**: {r['verdict']} "
                  f"({r['why']}{'; ' + _scale(r, records).rstrip(', ') if _scale(r, records) else ''}).", ""]
        lines += _commands(r, seen_commands)
        continue
      if "digest" in r:  # a declared claim: judged by the protocol (experiments.reproduce.engine)
        lines += _declared_section(r, records)
      else:  # a record kept from before its claim was declared
        lines += [f"## {r['id']}", "", f"**Claim** ({r['source']}): {r['statement']}", "",
                  f"**Criterion**: {r['criterion']}", "",
                  f"**Verdict**: {r['verdict']} ({_scale(r, records)}{_timing(r)}{_earlier(r)}). {r['why']}", ""]
        if r.get("data"):
          lines += ["**Data**: " + "; ".join(r["data"].values()), ""]
        if r["numbers"] and set(r["numbers"]) != TEST_NUMBERS:  # (a test claim's verdict counts its tests)
          key = json.dumps(r["numbers"], sort_keys=True)
          if key in seen_numbers:
            lines += [f"Numbers: as [{seen_numbers[key]}](#{anchor(seen_numbers[key])}).", ""]
          else:
            seen_numbers[key] = r["id"]
            items = list(r["numbers"].items())
            lines += ["| number | value |", "|---|---|", *(f"| {k} | {_fmt(v)} |" for k, v in items[:MAX_NUMBERS])]
            if len(items) > MAX_NUMBERS:
              lines.append(f"| ... {len(items) - MAX_NUMBERS} more in claims.json | |")
            lines.append("")
      fkey = tuple(r["figures"])
      if fkey and fkey in seen_figures:  # (a claim without figures says nothing of them)
        lines += [f"Figures: as [{seen_figures[fkey]}](#{anchor(seen_figures[fkey])}).", ""]
      else:
        seen_figures.setdefault(fkey, r["id"])
        lines += [*(f"![figure]({p})" for p in r["figures"]), ""]
      lines += _commands(r, seen_commands)
  with open(os.path.join(folder, "report.md"), "w") as f:
    f.write("\n".join(lines).rstrip("\n") + "\n")


def anchor(cid: str) -> str:
  """The report.md anchor of claim ``cid``'s section (its heading ``## cid``, as GitHub and MyST slug it)."""
  return cid.replace(".", "").lower()


def unit_number(x, unit: str) -> str:
  """``x`` with its unit (``"8 rounds"``, ``"never"``)."""
  return x if isinstance(x, str) else f"{_num(x)} {unit}".rstrip()


def key_number(r: dict) -> str:
  """A declared record's headline effect in units, with the ratio to the baseline where there is one
  (VERDICTS.md §6): ``"8 rounds fewer (0.6x the baseline), median of the comparisons that hold"``."""
  e = r.get("effect") or {}
  if not isinstance(e, dict) or "value" not in e:
    return "-"
  words = {"never": "the other side never reaches the target", "-never": "never reaches the target"}  # censored
  text = words.get(e["value"]) or unit_number(e["value"], e.get("unit", "")) + " in the claim's favour"
  if "measured" in e:  # a value or a bound: the measure itself, then its distance from the target
    text = f"median {unit_number(e['measured'], e.get('unit', ''))} ({text.replace(' in', ' beyond the target, in')})"
  if "ratio" in e:
    text += f" ({_num(e['ratio'])}x the baseline)"
  return text + f", median over {e.get('over', 'the comparisons')}"


def _seeds(values: list) -> str:
  """Per-seed values, listed (n <= 10) or summarised by their median and range."""
  if len(values) <= 10:
    return ", ".join(v if isinstance(v, str) else f"{v:.3g}" for v in values)
  nums = sorted(v for v in values if not isinstance(v, str))
  words = [v for v in values if isinstance(v, str)]  # "never" and the like
  said = f"; {len(words)} {', '.join(sorted(set(words)))}" if words else ""
  if not nums:
    return f"all {len(values)} {', '.join(sorted(set(words)))}"
  return f"median {nums[len(nums) // 2]:.3g}, range [{nums[0]:.3g}, {nums[-1]:.3g}]{said} (n = {len(values)})"


def _declared_section(r: dict, records: list[dict]) -> list[str]:
  """A declared claim's section: the claim and its quote, the form and when it was fixed, the verdict
  with its key number, the deviations, and one row per comparison with its per-seed values."""
  quote = f" \"{r['quote']}\"" if r.get("quote") else ""
  when = (f"declared {r['declared']}" if r.get("declared") else "declared") + (
      " after its runs (a post-data criterion)" if r.get("after_data") else " before its runs")
  lines = [f"## {r['id']}", "", f"**Claim** ({r['source']}): {r['statement']}{quote}", ""]
  if r["verdict"] == "not evaluated":
    return [*lines, f"**Not evaluated** here: {r.get('needs', r['why'])}", ""]
  lines += [f"**Form**: {r.get('form') or 'rule of its own'} — {r['criterion']} ({when}; declaration "
            f"{r['digest']}).", "",
            f"**Verdict**: {r['verdict']}" + (f" ({r['why']})" if r["why"] else "")
            + (f"; key number: {key_number(r)}" if r.get("effect") else "")
            + f" ({_scale(r, records)}{_timing(r)}{_earlier(r)}).", ""]
  if r.get("finding"):
    lines += [f"**Finding**: {r['finding']}", ""]
  if r.get("deviations"):
    lines += ["**Deviations**: " + "; ".join(r["deviations"]) + ".", ""]
  if r.get("data"):
    lines += ["**Data**: " + "; ".join(r["data"].values()), ""]
  if r.get("results"):
    lines += ["| comparison | effect [interval] | per seed | p (Holm) | outcome |", "|---|---|---|---|---|"]
    for c in r["results"]:
      lo, hi = c["interval"]
      p = "-" if isinstance(c["p"], str) else f"{c['p']:.2g}"
      ph = "" if isinstance(c["p_holm"], str) else f" ({c['p_holm']:.2g})"
      lines.append(f"| {c['setting']} | {unit_number(c['effect'], c['unit'])} [{_num(lo)}, {_num(hi)}] | "
                   f"{_seeds(c['per_seed'])} | {p}{ph} | {c['outcome']}" + (f": {c['note']}" if c["note"] else "")
                   + " |")
    lines.append("")
  return lines


TEST_NUMBERS = {"test cases passed", "test cases"}  # a test claim's numbers (its verdict line says them)
MAX_NUMBERS = 6  # rows of a claim's numbers table in report.md; claims.json keeps them all

def _commands(r: dict, seen: dict[tuple, str]) -> list[str]:
  """A claim's command block (:func:`_command_groups`), or "as [earlier claim]" when an earlier claim ran the
  same commands (``seen``: commands -> the first claim that ran them, updated here)."""
  key = tuple(r["commands"])
  if key in seen:
    return [f"Commands: as [{seen[key]}](#{seen[key].replace('.', '').lower()}).", ""]
  if not r["commands"]:
    return []
  seen[key] = r["id"]
  return ["Commands:", "", "```", *_command_groups(r["commands"]), "```", ""]


def write_index(root: str, papers: dict[str, str]) -> None:
  """Writes ``root/report.md``: each paper's *paper* claims by verdict (checks and diagnostics counted apart),
  its ``not evaluated`` claims, the criteria fixed after their runs with the direction each moved the verdict
  (:func:`moves`), the claims on offline substitutes of its data (:func:`on_substitutes`), those judged from
  record numbers, and a total; at smoke scale the verdicts are not counted (:data:`SMOKE_NOTE`)."""
  verdicts = ("reproduced", "partly reproduced", "mixed", "not reproduced", "inconclusive")
  rows, total, smoke_only = [], [0] * 10, True
  for paper, title in papers.items():
    path = os.path.join(root, paper, "claims.json")
    if not os.path.exists(path):
      continue
    with open(path) as f:
      data = json.load(f)
    recs = data["claims"]
    mine = [r for r in recs if r.get("kind", "paper") == "paper"]
    missing = sum(r.get("kind") == "not evaluated" for r in recs) + len(data.get("pending", []))
    smoke_only &= all(r["scale"] == "smoke" for r in recs)
    post, up, down = moves(recs)
    cells = [*(sum(r["verdict"] == v for r in mine) for v in verdicts), len(mine), missing, post, up, down]
    total = [t + c for t, c in zip(total, cells)]
    others = sum(r.get("kind") in ("check", "diagnostic") for r in recs)
    scales = ", ".join(f"{s} {sum(r['scale'] == s for r in recs)}" for s in sorted({r["scale"] for r in recs})) or "-"
    judged_from_record = sum(r.get("evidence") is False for r in mine)
    rows.append((title, paper, scales, cells, others, len(on_substitutes(mine)), judged_from_record))
  lines = ["# fedsim reproduction report", ""]
  if smoke_only and rows:
    lines += [f"**{SMOKE_NOTE}**", "", "| paper | claims per scale | paper claims | checks and diagnostics | "
              "not evaluated |", "|---|---|---|---|---|"]
    lines += [f"| [{t}]({p}/report.md) | {s} | {c[5]} | {o} | {c[6]} |" for t, p, s, c, o, *_ in rows]
  else:
    lines += ["Paper claims only (a figure, table or theorem of the paper), judged by one protocol "
              "([VERDICTS](README.md)); checks and diagnostics are counted apart. *Post-data* counts the criteria "
              "fixed after the runs they judge, and how many of them moved the verdict up or down; *from record "
              "numbers* the paper claims judged from the per-seed numbers their record kept (their runs' metrics "
              "were not stored, so a referee cannot recompute them from the evidence).", "",
              "| paper | claims per scale | reproduced | partly | mixed | not reproduced | inconclusive | paper claims "
              "| not evaluated | post-data (up / down) | checks and diagnostics | on offline substitutes | from record "
              "numbers |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| [{t}]({p}/report.md) | {s} | " + " | ".join(map(str, c[:7])) + f" | {c[7]} ({c[8]} / {c[9]}) | "
              f"{o} | {sub} | {rec} |" for t, p, s, c, o, sub, rec in rows]
    lines.append("| **total** | | " + " | ".join(map(str, total[:7])) + f" | {total[7]} ({total[8]} / {total[9]}) "
                 f"| | | {sum(row[-1] for row in rows)} |")
  with open(os.path.join(root, "report.md"), "w") as f:
    f.write("\n".join(lines) + "\n")
