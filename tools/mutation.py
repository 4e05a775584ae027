#!/usr/bin/env python
"""Sampled mutation testing of fedsim, one package at a time.

A thin driver over cosmic-ray (``pip install cosmic-ray``): cosmic-ray's
operators find the mutation points and write each mutant into the module
(``cosmic_ray.mutating.MutationVisitor``, ``cosmic_ray.util.restore_contents``);
this driver adds what a small shared machine needs:

* scope: each module's mutants run only that module's own tests, listed in
  ``tools/mutation_map.toml`` (globs, so new ``test_<family>*.py`` files are
  picked up);
* a random sample of mutants per package with a fixed seed, and a Wilson 95%
  interval on the score, since it is a sample;
* a per-mutant timeout: ``max(timeout_factor x unmutated time of its tests,
  timeout_floor_s)``;
* mutants in f-strings, ``raise`` statements (error messages), assert messages,
  logging/print/warnings calls and type annotations are not generated (counted
  per reason), nor the removal of ``jit`` decorators (equivalent by construction);
* a list of mutants a person judged equivalent (``tools/mutation_equivalents.txt``:
  one ``<id> <reason>`` a line), left out of the score's denominator.

The score of a package is killed / (total - equivalent), where total counts the
sampled mutants that ran (a mutant whose run ended in a pytest usage error is
an ``error`` and is left out); a timeout is not counted as killed there, and
``score_timeouts_killed`` is the score that counts it.

The mutants are written into the files of ``--root`` in place (and restored):
run it on a clean checkout that nobody edits, e.g. a ``git worktree``.

Usage::

  nice -n 19 python tools/mutation.py --root /path/to/checkout \
      --package fedsim/channels --sample 40 --seed 0 --out /tmp/channels.json

``--list`` prints the population per module without running anything;
``--show ID`` prints a mutant's diff; ``--resume`` keeps the results already in
``--out`` for the same sample.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import datetime
import difflib
import fcntl
import glob
import hashlib
import json
import math
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_MAP = HERE / "mutation_map.toml"
DEFAULT_EQUIVALENTS = HERE / "mutation_equivalents.txt"
OUTCOMES = ("killed", "survived", "timeout", "error")

# --------------------------------------------------------------------------- #
# Pure helpers (no cosmic-ray, no subprocess): sampling, statistics, summaries.
# --------------------------------------------------------------------------- #


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
  """Wilson score interval for k successes out of n (95% for z = 1.96).

  Returns (nan, nan) when n == 0.
  """
  if n <= 0:
    return (float("nan"), float("nan"))
  p = k / n
  denom = 1.0 + z * z / n
  centre = (p + z * z / (2 * n)) / denom
  half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
  return (max(0.0, centre - half), min(1.0, centre + half))


def sample_ids(ids, k: int, seed: int, package: str) -> list[str]:
  """A reproducible sample of k ids (all of them if k <= 0 or k >= len(ids)).

  The sample depends only on the set of ids, the seed and the package name,
  not on the order in which the ids were found.
  """
  population = sorted(set(ids))
  if k <= 0 or k >= len(population):
    return population
  rng = random.Random(f"{seed}/{package}")
  return sorted(rng.sample(population, k))


def load_equivalents(path) -> dict[str, str]:
  """Reads ``<id> <reason>`` lines ('#' starts a comment); a reason is required."""
  marks = {}
  path = Path(path)
  if not path.exists():
    return marks
  for num, raw in enumerate(path.read_text().splitlines(), 1):
    line = raw.split("#", 1)[0].strip() if raw.lstrip().startswith("#") else raw.strip()
    if not line:
      continue
    parts = line.split(None, 1)
    if len(parts) < 2 or not parts[1].strip():
      raise ValueError(f"{path}:{num}: an equivalent mutant needs a reason: '<id> <reason>'")
    marks[parts[0]] = parts[1].strip()
  return marks


def summarize(mutants: list[dict], equivalents: dict[str, str]) -> dict:
  """Counts outcomes and computes the score with its Wilson 95% interval.

  ``mutants``: dicts with ``id`` and ``outcome`` (one of OUTCOMES, or None if
  not run yet). A mutant marked equivalent counts as ``equivalent`` only if it
  was not killed (a killed one is not equivalent: the mark is reported as wrong).
  """
  counts = collections.Counter()
  wrong_marks = []
  for m in mutants:
    outcome = m.get("outcome")
    if outcome is None:
      counts["pending"] += 1
      continue
    counts[outcome] += 1
    if m["id"] in equivalents:
      if outcome in ("killed", "timeout"):
        wrong_marks.append(m["id"])
      else:
        counts["equivalent"] += 1
  total = counts["killed"] + counts["survived"] + counts["timeout"]
  n = total - counts["equivalent"]
  k = counts["killed"]
  lo, hi = wilson(k, n)
  return {
      "killed": k,
      "survived": counts["survived"] - counts["equivalent"],
      "timeout": counts["timeout"],
      "equivalent": counts["equivalent"],
      "error": counts["error"],
      "pending": counts["pending"],
      "total": total,
      "score": k / n if n else float("nan"),
      "ci95": [lo, hi],
      "score_timeouts_killed": (k + counts["timeout"]) / n if n else float("nan"),
      "wrong_equivalent_marks": wrong_marks,
  }


def classify(returncode: int | None, timed_out: bool) -> str:
  """Maps a pytest exit status to an outcome.

  0: survived; 1 (tests failed), 2 (interrupted: collection/import error), 3
  (internal error) or a signal: killed; 4 (usage error) or 5 (no tests
  collected): error (a configuration problem, not a measurement).
  """
  if timed_out:
    return "timeout"
  if returncode == 0:
    return "survived"
  if returncode in (4, 5):
    return "error"
  return "killed"


def fmt_pct(x: float) -> str:
  return "n/a" if x != x else f"{100 * x:.0f}%"


def markdown_table(report: dict) -> str:
  """The per-package summary table (and each package's survivors) as markdown."""
  rows = ["| package | population | sampled | killed | survived | timeout | equivalent | error | score | 95% CI (Wilson) | s/mutant |",
          "|---|---|---|---|---|---|---|---|---|---|---|"]
  for pkg, res in report["packages"].items():
    s = res["summary"]
    lo, hi = s["ci95"]
    rows.append(f"| {pkg} | {res['population']} | {res['sampled']} | {s['killed']} | {s['survived']} | "
                f"{s['timeout']} | {s['equivalent']} | {s['error']} | {fmt_pct(s['score'])} | "
                f"{fmt_pct(lo)}-{fmt_pct(hi)} | {res.get('s_per_mutant', float('nan')):.1f} |")
  out = ["\n".join(rows), ""]
  for pkg, res in report["packages"].items():
    surv = [m for m in res["mutants"] if m.get("outcome") in ("survived", "timeout")]
    if not surv:
      continue
    out.append(f"### {pkg}: survivors and timeouts\n")
    for m in surv:
      eq = " (marked equivalent)" if m.get("equivalent") else ""
      out.append(f"- `{m['id']}` {m['module']}:{m['line']} {m['operator']} [{m['outcome']}]{eq}: "
                 f"`{m.get('before', '').strip()}` -> `{m.get('after', '').strip()}`")
    out.append("")
  return "\n".join(out)


# --------------------------------------------------------------------------- #
# Mutant enumeration (cosmic-ray operators on parso trees).
# --------------------------------------------------------------------------- #

LOG_CALLS = {"print", "logging", "log", "logger", "warnings", "absl_logging"}
BARE_SWAPS = {"max", "min", "any", "all"}


def _custom_operators():
  """Operators cosmic-ray lacks: swap a called/attribute name with its opposite."""
  import parso.python.tree as pt
  from cosmic_ray.operators.operator import Example, Operator

  swaps = {"argmax": "argmin", "argmin": "argmax", "max": "min", "min": "max", "maximum": "minimum",
           "minimum": "maximum", "nanmax": "nanmin", "nanmin": "nanmax", "sum": "mean", "mean": "sum",
           "floor": "ceil", "ceil": "floor", "any": "all", "all": "any"}

  class SwapCallee(Operator):
    """jnp.argmax(...) -> jnp.argmin(...), max(...) -> min(...), x.sum() -> x.mean(), ..."""

    def mutation_positions(self, node):
      if isinstance(node, pt.Name) and node.value in swaps:
        nxt = node.get_next_sibling()
        prev = node.get_previous_sibling()
        parent = node.parent
        # name(...) directly (only where the swapped name is a builtin too: max/min/any/all),
        # or .name as an attribute trailer followed by (...)
        called = (nxt is not None and nxt.type == "trailer" and nxt.children[0].value == "("
                  and node.value in BARE_SWAPS)
        if parent is not None and parent.type == "trailer" and prev is not None and prev.value == ".":
          after = parent.get_next_sibling()
          called = after is not None and after.type == "trailer" and after.children[0].value == "("
        if called:
          yield (node.start_pos, node.end_pos)

    def mutate(self, node, index):
      assert index == 0
      node.value = swaps[node.value]
      return node

    @classmethod
    def examples(cls):
      return (Example("jnp.argmax(x)", "jnp.argmin(x)"), Example("max(a, b)", "min(a, b)"))

  return {"fedsim/SwapCallee": SwapCallee}


def make_operators(names):
  """[(name, operator instance)] for the configured operator names."""
  import cosmic_ray.plugins
  custom = _custom_operators()
  known = set(cosmic_ray.plugins.operator_names())
  ops = []
  for name in names:
    if name in custom:
      ops.append((name, custom[name]()))
    elif name in known:
      ops.append((name, cosmic_ray.plugins.get_operator(name)()))
    else:
      raise SystemExit(f"unknown mutation operator {name!r} in the map")
  return ops


def _in_annotation(node) -> bool:
  child, parent = node, node.parent
  while parent is not None:
    if parent.type == "param" and getattr(parent, "annotation", None) is child:
      return True
    if parent.type == "tfpdef" and len(parent.children) > 2 and parent.children[2] is child:
      return True
    if parent.type in ("funcdef", "async_funcdef") and getattr(parent, "annotation", None) is child:
      return True
    if parent.type == "annassign" and len(parent.children) > 1 and parent.children[1] is child:
      return True
    child, parent = parent, parent.parent
  return False


def skip_reason(node, operator_name: str) -> str | None:
  """Why a mutation point is not generated (None: it is)."""
  if operator_name.endswith("RemoveDecorator") and "jit" in node.get_code():
    return "jit decorator removal (equivalent)"
  if _in_annotation(node):
    return "type annotation"
  child, parent = node, node.parent
  while parent is not None:
    ptype = parent.type
    if ptype == "fstring" or child.type == "fstring":
      return "f-string"
    if ptype == "raise_stmt":
      return "raise statement (error message)"
    if ptype == "assert_stmt" and child in parent.children[3:]:
      return "assert message"
    if ptype in ("atom_expr", "power") and parent.children and parent.children[0].type == "name" \
        and parent.children[0].value in LOG_CALLS:
      return "logging/print/warnings call"
    if ptype == "term" and child.type == "operator" and child.value == "%":
      prev = child.get_previous_sibling()
      if prev is not None and prev.type in ("string", "strings"):
        return "string formatting"
    child, parent = parent, parent.parent
  if node.type == "operator" and node.value == "%":
    prev = node.get_previous_sibling()
    if prev is not None and prev.type in ("string", "strings"):
      return "string formatting"
  return None


def enumerate_module(root: Path, module: str, operators) -> tuple[list[dict], collections.Counter]:
  """All mutation points of one module: (mutants, not-generated counts by reason).

  Each mutant has a stable ``id`` (a hash of the module, the operator, the
  enclosing definition, the source line's text and the column in it, so it
  survives edits elsewhere in the file), and ``operator``/``occurrence`` for
  cosmic-ray's MutationVisitor.
  """
  import parso
  from cosmic_ray.ast import ast_nodes
  from cosmic_ray.ast.ast_query import ASTQuery

  source = (root / module).read_text()
  lines = source.splitlines()
  tree = parso.parse(source)
  nodes = list(ast_nodes(tree))
  mutants, skipped = [], collections.Counter()
  seen = collections.Counter()
  for op_name, op in operators:
    occurrence = 0
    for node in nodes:
      for sub, (start, end) in enumerate(op.mutation_positions(node)):
        reason = skip_reason(node, op_name)
        if reason is not None:
          skipped[reason] += 1
          occurrence += 1
          continue
        line_text = lines[start[0] - 1] if start[0] - 1 < len(lines) else ""
        indent = len(line_text) - len(line_text.lstrip())
        try:
          definition = ASTQuery(node).get_definition_name()
        except Exception:  # noqa: BLE001 - the name only feeds the id
          definition = None
        key = f"{module}|{op_name}|{definition}|{line_text.strip()}|{start[1] - indent}|{sub}"
        seen[key] += 1
        key = f"{key}|{seen[key]}"
        mutants.append({
            "id": hashlib.sha1(key.encode()).hexdigest()[:10],
            "module": module,
            "operator": op_name,
            "occurrence": occurrence,
            "line": start[0],
            "col": start[1],
            "definition": definition,
        })
        occurrence += 1
  return mutants, skipped


def mutate_source(source: str, operator, occurrence: int) -> str | None:
  from cosmic_ray.mutating import MutationVisitor
  return MutationVisitor.mutate_code(source, operator, occurrence)


def describe(source: str, mutated: str) -> tuple[str, str, str]:
  """(first changed original line, its mutated version, unified diff)."""
  a, b = source.splitlines(), mutated.splitlines()
  diff = "\n".join(difflib.unified_diff(a, b, lineterm="", n=1))
  sm = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
  for tag, i1, i2, j1, j2 in sm.get_opcodes():
    if tag != "equal":
      return (" ".join(x.strip() for x in a[i1:i2]), " ".join(x.strip() for x in b[j1:j2]) or "(removed)", diff)
  return ("", "", diff)


# --------------------------------------------------------------------------- #
# Configuration and running.
# --------------------------------------------------------------------------- #


def load_map(path) -> dict:
  try:
    import tomllib
  except ImportError:  # Python 3.10
    import tomli as tomllib
  with open(path, "rb") as f:
    return tomllib.load(f)


def package_modules(root: Path, package: str, cfg: dict) -> list[str]:
  exclude = cfg.get("exclude_modules", [])
  mods = []
  # A package may be a glob of files ("fedsim/*.py": the top-level modules without the subpackages).
  paths = root.glob(package) if any(c in package for c in "*?[") else (root / package).rglob("*.py")
  for p in sorted(paths):
    rel = p.relative_to(root).as_posix()
    if any(glob_match(rel, pat) for pat in exclude):
      continue
    mods.append(rel)
  return mods


def glob_match(path: str, pattern: str) -> bool:
  import fnmatch
  return fnmatch.fnmatch(path, pattern)


def tests_for(root: Path, module: str, cfg: dict) -> list[str]:
  """The test files of a module: its entry in [tests], else its package's default."""
  patterns = cfg.get("tests", {}).get(module)
  if patterns is None:
    for pkg, pcfg in cfg.get("packages", {}).items():
      if module.startswith(pkg.rstrip("/") + "/") or (glob_match(module, pkg) and module.count("/") == pkg.count("/")):
        patterns = pcfg.get("default_tests", [])
  files = set()
  for pat in patterns or []:
    for f in glob.glob(str(root / pat)):
      files.add(Path(f).relative_to(root).as_posix())
  return sorted(files)


class Runner:
  """Runs a module's tests in a subprocess against ``root``."""

  def __init__(self, root: Path, cfg: dict, jax_cache: str | None):
    self.root = root
    self.pytest_args = cfg.get("pytest_args", ["-x", "-q", "-p", "no:cacheprovider"])
    env = dict(os.environ)
    env["PYTHONPATH"] = str(root) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if jax_cache:
      env["JAX_COMPILATION_CACHE_DIR"] = jax_cache
      env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
      env["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "0"
    self.env = env
    self._baselines = {}

  def check_import(self, package: str):
    if any(c in package for c in "*?["):   # a glob of modules ("fedsim/*.py"): check the folder's package
      package = package.rsplit("/", 1)[0]
    out = subprocess.run([sys.executable, "-c", f"import {package.replace('/', '.')} as m; print(m.__file__)"],
                         cwd=self.root, env=self.env, capture_output=True, text=True)
    where = out.stdout.strip()
    if out.returncode != 0 or not Path(where).resolve().is_relative_to(self.root.resolve()):
      raise SystemExit(f"{package} imports from {where or out.stderr.strip()!r}, not from {self.root}")

  def baseline(self, tests: list[str]) -> dict:
    """The unmutated run of a test set (once per set: modules may share their tests)."""
    key = tuple(tests)
    if key not in self._baselines:
      self._baselines[key] = self.run(tests, None)
    return self._baselines[key]

  def run(self, tests: list[str], timeout: float | None) -> dict:
    cmd = [sys.executable, "-m", "pytest", *self.pytest_args, *tests]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=self.root, env=self.env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    timed_out = False
    try:
      out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
      timed_out = True
      with contextlib.suppress(OSError):
        os.killpg(os.getpgid(proc.pid), signal.SIGKILL)
      out, _ = proc.communicate()
    except BaseException:
      with contextlib.suppress(OSError):
        os.killpg(os.getpgid(proc.pid), signal.SIGKILL)
      raise
    text = out.decode("utf-8", "replace")
    failing = re.findall(r"^(?:FAILED|ERROR) (\S+)", text, flags=re.M)
    return {"returncode": proc.returncode, "timed_out": timed_out, "seconds": time.monotonic() - t0,
            "failing": failing[0] if failing else None, "tail": text[-1500:]}


def _purge_pyc(root: Path, module: str | None = None):
  """Removes cached bytecode so a mutant of the same size and mtime is never stale."""
  base = root / "fedsim"
  pattern = f"{Path(module).stem}.*.pyc" if module else "*.pyc"
  for pyc in base.rglob(f"__pycache__/{pattern}"):
    with contextlib.suppress(OSError):
      pyc.unlink()


def _journal_path(root: Path) -> Path:
  h = hashlib.sha1(str(root.resolve()).encode()).hexdigest()[:12]
  return Path("/tmp") / f"fedsim_mutation_inflight_{h}.json"


def recover(root: Path):
  """Puts back a module that a killed run left mutated."""
  j = _journal_path(root)
  if j.exists():
    rec = json.loads(j.read_text())
    Path(rec["path"]).write_text(rec["original"])
    j.unlink()
    print(f"[mutation] restored {rec['path']} left mutated by an interrupted run", file=sys.stderr)


@contextlib.contextmanager
def mutated_file(root: Path, path: Path, mutated: str):
  """Writes a mutant into ``path`` for the block, journaled so a crash can be undone."""
  from cosmic_ray.util import restore_contents
  j = _journal_path(root)
  try:
    with restore_contents(path) as original:
      j.write_text(json.dumps({"path": str(path), "original": original.decode("utf-8")}))
      path.write_text(mutated)
      _purge_pyc(root, path.as_posix())
      yield
  finally:
    _purge_pyc(root, path.as_posix())
    j.unlink(missing_ok=True)


def git_commit(root: Path) -> str | None:
  out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True)
  return out.stdout.strip() or None


def git_dirty(root: Path, package: str) -> list[str]:
  out = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", package], capture_output=True,
                       text=True)
  return [l for l in out.stdout.splitlines() if l.strip()]


def write_report(report: dict, out: Path, md: Path | None):
  out.parent.mkdir(parents=True, exist_ok=True)
  tmp = out.with_suffix(out.suffix + ".tmp")
  tmp.write_text(json.dumps(report, indent=1))
  tmp.replace(out)
  if md is not None:
    head = (f"Mutation testing of `{report['root']}` at {report.get('commit')}, seed {report['seed']}, "
            f"samples per package as in the table (cosmic-ray {report['cosmic_ray']}; "
            f"tools/mutation.py). Score = killed / (total - equivalent); timeouts are not counted as killed.\n\n")
    md.write_text(head + markdown_table(report))


def run_package(package: str, args, cfg, runner: Runner, equivalents, report, out, md):
  root = args.root
  ops = make_operators(cfg["operators"])
  population, skipped = [], collections.Counter()
  for mod in package_modules(root, package, cfg):
    muts, sk = enumerate_module(root, mod, ops)
    population += muts
    skipped.update(sk)
  by_id = {m["id"]: m for m in population}
  chosen = args.only or sample_ids(by_id, args.sample, args.seed, package)
  chosen = [i for i in chosen if i in by_id]
  previous = {}
  old = report["packages"].get(package)
  if args.resume and old and old.get("sample_arg") == args.sample:
    previous = {m["id"]: m for m in old["mutants"] if m.get("outcome")}
  mutants = [dict(by_id[i]) for i in chosen]
  mutants.sort(key=lambda m: (m["module"], m["line"], m["col"], m["operator"]))
  res = {
      "sample_arg": args.sample,
      "seed": args.seed,
      "population": len(population),
      "population_by_module": dict(collections.Counter(m["module"] for m in population)),
      "not_generated": dict(skipped),
      "sampled": len(mutants),
      "modules": {},
      "mutants": mutants,
  }
  report["packages"][package] = res
  sources = {}
  t_start = time.monotonic()
  ran = 0
  for m in mutants:
    mod = m["module"]
    if mod not in sources:
      sources[mod] = (root / mod).read_text()
    op = dict(ops)[m["operator"]]
    mutated = mutate_source(sources[mod], op, m["occurrence"])
    if mutated is None:
      m["outcome"], m["note"] = "error", "cosmic-ray produced no mutant"
      continue
    m["before"], m["after"], m["diff"] = describe(sources[mod], mutated)
    if m["id"] in equivalents:
      m["equivalent"] = equivalents[m["id"]]
    if m["id"] in previous and previous[m["id"]].get("after") == m["after"]:
      for key in ("outcome", "seconds", "failing", "returncode", "note"):
        if key in previous[m["id"]]:
          m[key] = previous[m["id"]][key]
      continue
    if mod not in res["modules"]:
      tests = tests_for(root, mod, cfg)
      info = {"tests": tests}
      if tests:
        base = runner.baseline(tests)
        info["baseline_s"] = round(base["seconds"], 1)
        info["baseline_rc"] = base["returncode"]
        info["timeout_s"] = round(max(args.timeout_factor * base["seconds"], args.timeout_floor), 1)
        if base["returncode"] != 0:
          info["baseline_tail"] = base["tail"]
          print(f"[mutation] {mod}: its tests fail unmutated (rc {base['returncode']}); its mutants are skipped",
                file=sys.stderr)
      res["modules"][mod] = info
      print(f"[mutation] {mod}: {len(tests)} test files, baseline {info.get('baseline_s')} s, "
            f"timeout {info.get('timeout_s')} s", file=sys.stderr, flush=True)
    info = res["modules"][mod]
    if not info["tests"]:
      m["outcome"], m["note"] = "survived", "no tests mapped to this module"
    elif info["baseline_rc"] != 0:
      m["outcome"], m["note"] = "error", "baseline tests fail"
    else:
      with mutated_file(root, root / mod, mutated):
        r = runner.run(info["tests"], info["timeout_s"])
      m["outcome"] = classify(r["returncode"], r["timed_out"])
      m["seconds"] = round(r["seconds"], 1)
      m["returncode"] = r["returncode"]
      m["failing"] = r["failing"]
      if m["outcome"] == "error":
        m["note"] = r["tail"][-400:]
      ran += 1
    print(f"[mutation] {m['id']} {mod}:{m['line']} {m['operator']}: {m['outcome']} "
          f"({m.get('seconds', 0)} s) `{m['before'][:60]}` -> `{m['after'][:60]}`", file=sys.stderr, flush=True)
    res["summary"] = summarize(mutants, equivalents)
    write_report(report, out, md)
  res["wall_s"] = round(time.monotonic() - t_start, 1)
  res["s_per_mutant"] = round(res["wall_s"] / ran, 1) if ran else float("nan")
  res["summary"] = summarize(mutants, equivalents)
  write_report(report, out, md)


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                               formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--root", type=Path, required=True, help="checkout to mutate (in place; use a worktree)")
  ap.add_argument("--package", action="append", default=[], help="e.g. fedsim/channels (repeatable)")
  ap.add_argument("--all", action="store_true", help="every package listed in the map")
  ap.add_argument("--sample", type=int, default=40, help="mutants per package (0 = all)")
  ap.add_argument("--seed", type=int, default=0)
  ap.add_argument("--out", type=Path, help="JSON report (written after every mutant)")
  ap.add_argument("--md", type=Path, help="markdown report (default: --out with .md)")
  ap.add_argument("--map", type=Path, default=DEFAULT_MAP)
  ap.add_argument("--equivalents", type=Path, default=DEFAULT_EQUIVALENTS)
  ap.add_argument("--timeout-factor", type=float, default=None)
  ap.add_argument("--timeout-floor", type=float, default=None, help="seconds")
  ap.add_argument("--jax-cache", default=None, help="JAX persistent compilation cache dir ('' = none)")
  ap.add_argument("--only", nargs="*", help="run these mutant ids instead of a sample")
  ap.add_argument("--resume", action="store_true", help="keep finished results found in --out")
  ap.add_argument("--list", action="store_true", help="print the population per module and exit")
  ap.add_argument("--show", nargs="*", help="print these mutants' diffs and exit")
  ap.add_argument("--allow-dirty", action="store_true", help="run on uncommitted package files")
  ap.add_argument("--summarize", action="store_true",
                  help="recompute the summaries in --out with the current equivalents file; run nothing")
  args = ap.parse_args(argv)

  cfg = load_map(args.map)
  args.root = args.root.resolve()
  packages = list(cfg.get("packages", {})) if args.all else args.package
  if not packages and not args.summarize:
    ap.error("give --package or --all")
  if args.timeout_factor is None:
    args.timeout_factor = float(cfg.get("timeout_factor", 3.0))
  if args.timeout_floor is None:
    args.timeout_floor = float(cfg.get("timeout_floor_s", 20.0))
  equivalents = load_equivalents(args.equivalents)

  if args.list or args.show is not None:
    ops = make_operators(cfg["operators"])
    for pkg in packages:
      total = collections.Counter()
      for mod in package_modules(args.root, pkg, cfg):
        muts, sk = enumerate_module(args.root, mod, ops)
        total.update(sk)
        if args.list:
          print(f"{mod}: {len(muts)} mutants; tests: {' '.join(tests_for(args.root, mod, cfg)) or 'NONE'}")
        for m in muts:
          if args.show and m["id"] in args.show:
            src = (args.root / mod).read_text()
            mutated = mutate_source(src, dict(ops)[m["operator"]], m["occurrence"])
            print(f"== {m['id']} {mod}:{m['line']} {m['operator']}\n{describe(src, mutated)[2]}")
      if args.list:
        print(f"{pkg}: not generated: {dict(total)}")
    return 0

  if args.out is None:
    ap.error("--out is required to run")
  md = args.md or args.out.with_suffix(".md")
  if args.summarize:
    report = json.loads(args.out.read_text())
    for res in report["packages"].values():
      for m in res["mutants"]:
        m.pop("equivalent", None)
        if m["id"] in equivalents:
          m["equivalent"] = equivalents[m["id"]]
      res["summary"] = summarize(res["mutants"], equivalents)
    write_report(report, args.out, md)
    print(markdown_table(report))
    return 0
  for pkg in packages:
    dirty = git_dirty(args.root, pkg)
    if dirty and not args.allow_dirty:
      raise SystemExit(f"{args.root} has uncommitted changes under {pkg} ({len(dirty)} files): mutants are "
                       "written in place, so run on a clean checkout (git worktree add) or pass --allow-dirty")

  lock = open(_journal_path(args.root).with_suffix(".lock"), "w")
  try:
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
  except OSError:
    raise SystemExit(f"another mutation run is using {args.root}")
  recover(args.root)

  def _term(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")
  signal.signal(signal.SIGTERM, _term)

  import cosmic_ray
  try:
    from importlib.metadata import version
    cr_version = version("cosmic-ray")
  except Exception:  # noqa: BLE001
    cr_version = getattr(cosmic_ray, "__version__", "?")
  report = {"root": str(args.root), "commit": git_commit(args.root), "seed": args.seed, "sample": args.sample,
            "cosmic_ray": cr_version, "operators": cfg["operators"], "timeout_factor": args.timeout_factor,
            "timeout_floor_s": args.timeout_floor, "started": datetime.datetime.now().isoformat(timespec="seconds"),
            "packages": {}}
  if args.resume and args.out.exists():
    old = json.loads(args.out.read_text())
    if (old.get("seed"), old.get("commit")) == (args.seed, report["commit"]):
      report["packages"] = old.get("packages", {})
      report["started"] = old.get("started", report["started"])
  jax_cache = args.jax_cache if args.jax_cache is not None else cfg.get("jax_cache_dir", "")
  if jax_cache:
    jax_cache = jax_cache.replace("{root_hash}", _journal_path(args.root).stem.rsplit("_", 1)[-1])
  runner = Runner(args.root, cfg, jax_cache or None)
  _purge_pyc(args.root)
  t0 = time.monotonic()
  for pkg in packages:
    runner.check_import(pkg)
    run_package(pkg, args, cfg, runner, equivalents, report, args.out, md)
  report["wall_s"] = round(time.monotonic() - t0, 1)
  write_report(report, args.out, md)
  print(markdown_table(report))
  return 0


if __name__ == "__main__":
  sys.exit(main())
