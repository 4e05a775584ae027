"""Replaces the project's internal paper names ("seed 000" ... "seed 004") by the citation keys of
``fedsim.papers`` in the files given (a developers' tool, like sed).

  seed 000 -> Shu et al. 2023       (FZooS)
  seed 001 -> Fang et al. 2022      (FedZO)
  seed 002 -> Shen et al. 2022      (FFGB)
  seed 003 -> Li et al. 2025        (HiSo)
  seed 004 -> Jadbabaie et al. 2023 (FedLRGD)

A section, equation, figure... reference that followed the seed gets a comma ("seed 001 §V" ->
"Fang et al. 2022, §V"); "seed 000 code" becomes "the code of Shu et al. 2023". JSON files whose "§" is
escaped (\\u00a7) are handled too. Issue numbers are not touched (their sentences need a person).

Usage (from the repository root)::

  python tools/cite_keys.py FILE...          # rewrite in place, print the files changed
  python tools/cite_keys.py --check FILE...  # exit 1 if a file still has a "seed 00N"
"""

from __future__ import annotations

import argparse
import re
import sys

KEYS = {"000": "Shu et al. 2023", "001": "Fang et al. 2022", "002": "Shen et al. 2022",
        "003": "Li et al. 2025", "004": "Jadbabaie et al. 2023"}

_LOCATORS = (r"Figs?\.|Fig\b|Apps?\.|Algs?\.|Algorithms?\b|eqs?\.|Eqs?\.|Thms?\.?|Theorems?\b|Corollary|"
             r"Corollaries|Tables?\b|Lemmas?\b|Definitions?\b|Assumptions?\b|Propositions?\b|Props?\.|Remarks?\b|"
             r"footnotes?\b|Sections?\b|Sec\.|§|\\u00a7|\[")
_SEED = re.compile(r"\b[Ss]eed (00[0-4])( (?=" + _LOCATORS + r"))?")
_CODE = re.compile(r"\b[Ss]eed (00[0-4]) code\b")
_ALL = re.compile(r"\b[Ss]eeds 000-004\b")


def convert(text: str) -> str:
  """``text`` with every ``seed 00N`` replaced by its citation key (see the module docstring)."""
  text = _ALL.sub("the five papers", text)
  text = _CODE.sub(lambda m: f"the code of {KEYS[m.group(1)]}", text)
  return _SEED.sub(lambda m: KEYS[m.group(1)] + (", " if m.group(2) else ""), text)


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--check", action="store_true")
  parser.add_argument("files", nargs="+")
  args = parser.parse_args(argv)
  bad = []
  for name in args.files:
    with open(name, encoding="utf-8") as f:
      text = f.read()
    new = convert(text)
    if new != text:
      bad.append(name)
      if not args.check:
        with open(name, "w", encoding="utf-8") as f:
          f.write(new)
  if bad:
    print("\n".join(bad))
  return 1 if (bad and args.check) else 0


if __name__ == "__main__":
  sys.exit(main())
