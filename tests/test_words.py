"""What a reader outside the project reads names papers by citation key, never by the project's internal
names ("seed 000" ... "seed 004") or issue numbers, and the reference lists match ``fedsim.papers``.

Checked: README.md, HYPERPARAMETERS.md, docs/site/**, the claims reports (docs/reproduction/**/*.md),
every config field's ``help`` and ``source`` (what ``--help``, ``python -m experiments.hparams`` and
HYPERPARAMETERS.md print), the help of every absl flag in experiments/, and the docstrings of fedsim/
and experiments/ (the API reference). Comments, which only developers read, are not checked.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import fedsim
from fedsim import algorithms, papers

REPO = Path(__file__).resolve().parent.parent
# An internal paper name, or a project issue: "issue 3", "issues 17, 37", "Issue 14's", "(#12)".
INTERNAL = re.compile(r"\b[Ss]eeds? 00[0-9]|\b[Ii]ssues? #?[0-9]|\(#[0-9]+\)")
EXCLUDED_DOCSTRINGS: set[str] = set()


def _hits(text: str) -> list[str]:
  return [text[max(0, m.start() - 40):m.end() + 40].replace("\n", " ") for m in INTERNAL.finditer(text)]


def _user_files() -> list[Path]:
  files = [REPO / "README.md", REPO / "HYPERPARAMETERS.md"]
  files += sorted(p for p in (REPO / "docs" / "site").rglob("*") if p.is_file() and p.suffix in (".md", ".py", ".rst")
                  and "_build" not in p.parts and "jupyter_execute" not in p.parts)
  files += sorted((REPO / "docs" / "reproduction").rglob("*.md"))
  return files


def test_the_pattern_finds_what_it_must():
  """The checks below would fail on the forms these files used to have, and pass on paper citations."""
  for bad in ("seed 001 §V", "(Fang et al., seed 001)", "Seed 004 App. D", "measured (issue 3)", "issues 17, 37",
              "Issue 14's claims", "issue 36 item 7", "fixed in (#12)"):
    assert INTERNAL.search(bad), bad
  for good in ("Fang et al. 2022, Alg. 1", "--seed=0", "seed 0", "seeds 0-4", "the issue is", "tissue 3"):
    assert not INTERNAL.search(good), good


@pytest.mark.parametrize("path", _user_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_user_facing_files_cite_papers_by_key(path):
  assert not _hits(path.read_text(encoding="utf-8")), f"{path.relative_to(REPO)}: {_hits(path.read_text())}"


def _config_classes() -> set[type]:
  classes = {cls for cls, _, _ in algorithms.REGISTRY.values()} | {fedsim.ExperimentConfig}
  for mod in pkgutil.walk_packages(fedsim.__path__, "fedsim."):
    if mod.name.endswith("__main__"):
      continue
    module = importlib.import_module(mod.name)
    for obj in vars(module).values():
      if isinstance(obj, type) and dataclasses.is_dataclass(obj) and obj.__module__ == mod.name:
        classes.add(obj)
  return classes


def test_every_config_field_help_and_source_cite_papers_by_key():
  bad = []
  fields = 0
  for cls in _config_classes():
    for f in dataclasses.fields(cls):
      for what in ("help", "source"):
        text = f.metadata.get(what)
        fields += what == "help" and text is not None
        if isinstance(text, str) and INTERNAL.search(text):
          bad.append(f"{cls.__name__}.{f.name} {what}: {text!r}")
  assert fields > 100  # the registry's configs were found
  assert not bad, "\n".join(bad)


def _python_files() -> list[Path]:
  return sorted([*(REPO / "fedsim").rglob("*.py"), *(REPO / "experiments").rglob("*.py")])


def test_docstrings_cite_papers_by_key():
  bad = []
  for path in _python_files():
    rel = str(path.relative_to(REPO))
    if rel in EXCLUDED_DOCSTRINGS:
      continue
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
      if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
        doc = ast.get_docstring(node, clean=False) or ""
        bad += [f"{rel}:{getattr(node, 'lineno', 1)}: {h}" for h in _hits(doc)]
  assert not bad, "\n".join(bad)


def test_flag_help_cites_papers_by_key():
  """Every string given to an absl ``flags.DEFINE_*`` call in experiments/ (its help)."""
  bad = []
  calls = 0
  for path in sorted((REPO / "experiments").rglob("*.py")):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
      if isinstance(node, ast.Call) and getattr(node.func, "attr", "").startswith("DEFINE_"):
        calls += 1
        for sub in ast.walk(node):
          if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            bad += [f"{path.relative_to(REPO)}:{node.lineno}: {h}" for h in _hits(sub.value)]
  assert calls > 50
  assert not bad, "\n".join(bad)


@pytest.mark.parametrize("name", ["README.md", "docs/site/references.md"])
def test_reference_lists_are_generated_from_fedsim_papers(name):
  """README.md and the site's references page embed :func:`fedsim.papers.references_markdown` verbatim
  (``python -m fedsim.papers`` rewrites them)."""
  text = (REPO / name).read_text(encoding="utf-8")
  assert papers.embedded(text) == papers.references_markdown(), f"{name} is stale: run python -m fedsim.papers"
  assert papers.with_references(text) == text


def test_with_references_rewrites_a_stale_block_and_refuses_a_missing_one():
  stale = f"intro\n{papers.MARK_START}\n- old entry\n{papers.MARK_END}\nafter\n"
  new = papers.with_references(stale)
  assert new == f"intro\n{papers.MARK_START}\n{papers.references_markdown()}{papers.MARK_END}\nafter\n"
  assert papers.embedded(new) == papers.references_markdown()
  with pytest.raises(ValueError, match="references: start"):
    papers.with_references("no block here\n")


def test_papers_are_well_formed():
  assert len(papers.PAPERS) == 5
  for key, p in papers.PAPERS.items():
    assert key == p.key and key.endswith(str(p.year)) and " et al. " in key
    assert re.fullmatch(r"\d{4}\.\d{4,5}", p.arxiv), p.arxiv
    assert p.algorithms and set(p.algorithms) <= set(algorithms.REGISTRY), p.algorithms
    line = papers.reference(p)
    assert line.startswith(f"- **{key}**: ") and p.title in line and f"arxiv.org/abs/{p.arxiv}" in line
  assert set(papers.BY_NAME.values()) == set(papers.PAPERS)


def test_every_reproduction_report_names_its_paper():
  from experiments.reproduce import papers as claims_papers

  assert set(papers.BY_NAME) == set(claims_papers.PAPERS)
  for name, key in papers.BY_NAME.items():
    report = (REPO / "docs" / "reproduction" / name / "report.md").read_text(encoding="utf-8")
    assert papers.reference(papers.PAPERS[key])[2:] in report.split("\n**Summary**")[0], name
    assert key in claims_papers.TITLES[name]
