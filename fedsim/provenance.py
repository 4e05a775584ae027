"""Which code made a run: the package version, the git commit, and a fingerprint of the sources.

``config.json`` keeps :func:`provenance`'s record under ``"provenance"``; a finished run is
returned as current only while :func:`changes` finds nothing (``fedsim.run_folder``), so records
made by other code never come back as if the code that runs now had made them.

Example::

  from fedsim import provenance
  record = provenance.provenance({"fedavg": "fedavg"})
  record["fingerprint"]          # sha256 of the fedsim sources and the algorithms' own code
  provenance.changes(record, provenance.provenance({"fedavg": "fedavg"}))   # [] (nothing changed)
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import marshal
import os
import subprocess
from collections.abc import Mapping
from typing import Any

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def version() -> str:
  """The installed fedsim distribution's version ("unknown" when it is not installed)."""
  from importlib import metadata
  try:
    return metadata.version("fedsim")
  except metadata.PackageNotFoundError:
    return "unknown"


def _digest(data: bytes) -> str:
  return hashlib.sha256(data).hexdigest()


@functools.lru_cache(maxsize=1)
def _package_files() -> tuple[tuple[str, str], ...]:
  """(path relative to the package's parent, sha256) of every ``.py`` file of fedsim, sorted.

  Read once per process: the code a process runs is the code it imported at start."""
  root = os.path.dirname(PACKAGE_DIR)
  out = []
  for folder, dirs, files in os.walk(PACKAGE_DIR):
    dirs[:] = sorted(d for d in dirs if d != "__pycache__")
    for name in sorted(files):
      if name.endswith(".py"):
        path = os.path.join(folder, name)
        with open(path, "rb") as f:
          out.append((os.path.relpath(path, root).replace(os.sep, "/"), _digest(f.read())))
  return tuple(out)


def code_digest(obj: Any) -> str:
  """sha256 of ``obj``'s source (its module's whole source where it has one), else of its
  compiled code (a function typed at a prompt has no source file)."""
  module = inspect.getmodule(obj)
  for target in (module, obj):
    try:
      return _digest(inspect.getsource(target).encode())  # type: ignore[arg-type]
    except (TypeError, OSError):
      continue
  code = getattr(obj, "__code__", None) or getattr(getattr(obj, "__init__", None), "__code__", None)
  return _digest(marshal.dumps(code)) if code is not None else _digest(repr(obj).encode())


def _outside(obj: Any) -> bool:
  """Whether ``obj`` is defined outside the fedsim package (a user's registered algorithm)."""
  module = getattr(obj, "__module__", "") or ""
  return not (module == "fedsim" or module.startswith("fedsim."))


def external_code(algorithms: Mapping[str, str]) -> dict[str, dict[str, str]]:
  """``{label: {"module": M, "sha256": S}}`` for every algorithm whose builder or config class is
  defined outside fedsim (registered by the user into ``fedsim.algorithms.REGISTRY``).

  Args:
    algorithms: ``{label: registered name}``.
  """
  from fedsim.algorithms import REGISTRY
  out = {}
  for label, name in algorithms.items():
    if name not in REGISTRY:
      continue
    cls, _, maker = REGISTRY[name]
    parts = [p for p in (maker, cls) if _outside(p)]
    if parts:
      out[label] = {"module": ", ".join(sorted({p.__module__ for p in parts})),
                    "sha256": _digest("".join(code_digest(p) for p in parts).encode())}
  return out


def _git(*args: str) -> str | None:
  try:
    done = subprocess.run(["git", "-C", os.path.dirname(PACKAGE_DIR), *args], capture_output=True, text=True,
                          timeout=10, check=False)
  except (OSError, subprocess.SubprocessError):
    return None
  return done.stdout.strip() if done.returncode == 0 else None


@functools.lru_cache(maxsize=1)
def git_state() -> dict[str, Any] | None:
  """``{"commit": SHA, "dirty": bool}`` of the repository fedsim's sources sit in (dirty: a
  tracked file has uncommitted changes), or None when they are not in a git checkout."""
  commit = _git("rev-parse", "HEAD")
  if not commit:
    return None
  status = _git("status", "--porcelain", "--untracked-files=no")
  return {"commit": commit, "dirty": bool(status)}


def provenance(algorithms: Mapping[str, str]) -> dict[str, Any]:
  """The record of the code that runs ``algorithms`` (``{label: registered name}``).

  Returns:
    ``{"version", "git" (or None), "fingerprint", "files", "external"}``: ``fingerprint`` is the
    sha256 over every fedsim source file's sha256 (``files``: ``{path: first 12 hex digits}``)
    and the external algorithms' code (:func:`external_code`).
  """
  files = _package_files()
  external = external_code(algorithms)
  whole = hashlib.sha256()
  for path, digest in files:
    whole.update(f"{path}\0{digest}\n".encode())
  for label in sorted(external):
    whole.update(f"{label}\0{external[label]['sha256']}\n".encode())
  return {"version": version(), "git": git_state(), "fingerprint": whole.hexdigest(),
          "files": {path: digest[:12] for path, digest in files}, "external": external}


def changes(stored: Mapping[str, Any] | None, current: Mapping[str, Any]) -> list[str]:
  """What differs between the code that made a stored run and the code that runs now.

  Args:
    stored: the stored run's ``config.json["provenance"]`` (None: written before fedsim
      recorded its code).
    current: :func:`provenance` now.

  Returns:
    Short phrases (``"fedsim/algorithms/fedavg.py changed"``, ``"algorithm mine's code (module
    my_algos) changed"``); empty when the fingerprints are equal.
  """
  if not stored or "fingerprint" not in stored:
    return ["the stored run records no code fingerprint (made by an older fedsim)"]
  if stored["fingerprint"] == current["fingerprint"]:
    return []
  out = []
  old, new = dict(stored.get("files") or {}), dict(current["files"])
  changed = [p for p in sorted({*old, *new}) if old.get(p) != new.get(p)]
  if changed:
    shown = ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
    out.append(f"{shown} changed")
  old_ext, new_ext = dict(stored.get("external") or {}), dict(current["external"])
  for label in sorted({*old_ext, *new_ext}):
    if old_ext.get(label) != new_ext.get(label):
      module = (new_ext.get(label) or old_ext.get(label) or {}).get("module", "?")
      out.append(f"algorithm {label}'s code (module {module}) changed")
  return out or ["the code fingerprint changed"]
