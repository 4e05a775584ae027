"""Claims, their evidence and the runs behind them: the machinery of ``experiments.reproduce``.

A :class:`Claim` is one statement of a paper (its declaration: :mod:`experiments.reproduce.engine`). Its
``evaluate`` runs the experiments through :class:`Context` (each run an exact ``python -m experiments.run``
or ``python -m pytest`` command, recorded with the evidence) and returns an :class:`Evidence`. Runs are cached
by command, so claims that share runs share them, and a finished run is not run again on resuming.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

from fedsim import results

VERDICTS = ("reproduced", "partly reproduced", "mixed", "not reproduced", "inconclusive", "not evaluated")
KINDS = ("paper", "check", "diagnostic", "not evaluated")
"""A claim's kind: ``paper``, a figure, table or theorem of the paper; ``check``, an
implementation property (ledgers, bytes, identities, batches of unit tests), which cannot fail as a paper
result; ``diagnostic``, a hypothesis of ours that explains a paper result. Only ``paper`` claims are
counted in the index."""
SCALES = ("smoke", "paper")
DEFAULT_OUTPUT = "runs/reproduce"  # --output_dir's default: the root the committed reports' commands name
FLAGFILES = "experiments/flagfiles/"  # the flagfiles' folder, relative to the repository
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@dataclasses.dataclass(frozen=True)
class Stat:
  """Mean and spread of one number over seeds: ``std`` the sample standard deviation (ddof = 1; 0 when n = 1)."""
  mean: float
  std: float
  n: int                      # seeds
  values: tuple[float, ...]   # the per-seed numbers

  @classmethod
  def of(cls, values) -> Stat:
    v = [float(x) for x in values]
    if not v:
      raise ValueError("Stat of no values")
    mean = sum(v) / len(v)
    std = math.sqrt(sum((x - mean) ** 2 for x in v) / (len(v) - 1)) if len(v) > 1 else 0.0
    return cls(mean, std, len(v), tuple(v))


def plain_number(v: float) -> float | str:
  """A number for claims.json (strict JSON): ``"never"`` for ``inf`` (a censored time), ``"-never"`` for
  ``-inf``, ``"nan"`` for NaN."""
  if isinstance(v, float) and math.isinf(v):
    return "never" if v > 0 else "-never"
  if isinstance(v, float) and math.isnan(v):
    return "nan"
  return v


def values_of(number) -> list[float]:
  """The per-seed (per-target) values of a number: a :class:`Stat` (a claim's evaluation of its runs), its
  JSON form in a record (``claims.json``), or a list."""
  return list(number.values if isinstance(number, Stat) else number["values"] if isinstance(number, dict) else number)


@dataclasses.dataclass
class Evidence:
  """What a claim's evaluation measured.

  Attributes:
    verdict: one of :data:`VERDICTS`.
    why: for anything but ``reproduced``, what the diagnostic or ablation shows; otherwise one sentence on what
      the numbers show. For ``inconclusive`` it starts with the reason.
    numbers: ``{name: Stat or float}``; names say the metric, method and setting.
    figures: paths of the figures (relative to the paper's report folder).
    commands: filled by :class:`Context` with every command the claim ran.
    results: a declared claim's comparisons by the protocol (:func:`experiments.reproduce.engine.judge`:
      :class:`~experiments.reproduce.protocol.Result` rows as dicts, Holm-corrected and gated).
    effect: a declared claim's headline effect (``value``, ``unit``, ``ratio``, ``over``).
  """
  verdict: str
  why: str
  numbers: dict = dataclasses.field(default_factory=dict)
  figures: list = dataclasses.field(default_factory=list)
  commands: list = dataclasses.field(default_factory=list)
  results: list = dataclasses.field(default_factory=list)
  effect: dict = dataclasses.field(default_factory=dict)

  def __post_init__(self):
    if self.verdict not in VERDICTS:
      raise ValueError(f"verdict {self.verdict!r}; accepted: {', '.join(VERDICTS)}")


@dataclasses.dataclass(frozen=True)
class Claim:
  """One claim of a paper.

  Attributes:
    id: ``<paper>.<name>``, unique.
    statement: the claim in one sentence.
    source: where the paper makes it (figure, table, theorem, equation).
    criterion: the rule that gives the verdict, fixed before any run.
    evaluate: ``Context -> Evidence``.
    tests: the test node ids of a :func:`test_claim` (run in one batch per paper).
    scales: the scales it is evaluated at; a claim whose smoke run does not fit the smoke budget has
      ``("paper",)`` and is listed as "paper scale only" at smoke.
    needs: a key of :data:`PAPER_DATA` (``cifar10``, ...) for a claim that runs only on the paper's own data set
      (no offline substitute): evaluated at paper scale when ``--data_dir`` holds it, listed as needing it
      otherwise (:meth:`on_paper_data`).
    kind: one of :data:`KINDS`.
    headline: one of the paper's headline claims (its abstract, its main figures): the report's summary lists it.
    declaration: the claim's :class:`~experiments.reproduce.engine.Declaration` (None for a claim not yet
      declared as data).
    from_record: ``record -> Evidence`` for a claim whose earlier runs' metrics were not stored but whose
      record keeps the per-seed (per-target) numbers its test needs: ``--from_evidence`` then judges it
      from those numbers with the same function as ``evaluate`` (instead of keeping the record's verdict).
  """
  id: str
  statement: str
  source: str
  criterion: str
  evaluate: Callable[[Context], Evidence]
  tests: tuple[str, ...] = ()
  scales: tuple[str, ...] = SCALES
  needs: str | None = None
  kind: str = "paper"
  headline: bool = False
  from_record: Callable[[dict], Evidence] | None = None
  declaration: object = None

  def __post_init__(self):
    if self.kind not in KINDS:
      raise ValueError(f"{self.id}: kind {self.kind!r}; accepted: {', '.join(KINDS)}")

  def paper_only(self) -> Claim:
    """This claim, evaluated at ``--scale=paper`` only."""
    return dataclasses.replace(self, scales=("paper",))

  def on_paper_data(self, dataset: str) -> Claim:
    """This claim, evaluated at ``--scale=paper`` only and only where ``--data_dir`` holds
    ``dataset`` (a key of :data:`PAPER_DATA`).

    Raises:
      ValueError: ``dataset`` is not a key of :data:`PAPER_DATA`.
    """
    if dataset not in PAPER_DATA:
      raise ValueError(f"dataset {dataset!r}; accepted: {', '.join(PAPER_DATA)}")
    return dataclasses.replace(self, scales=("paper",), needs=dataset)

  def missing(self, scale: str, data_dir: str | None) -> str | None:
    """Why this claim is not evaluated at ``scale`` with ``data_dir`` (None: it is), in words."""
    if scale not in self.scales:
      return "evaluated at --scale=paper only (its runs exceed the smoke budget)"
    if self.needs and not find_paper_data(data_dir, self.needs):
      return (f"runs on the paper's {self.needs} only: `--data_dir=DIR` with "
              f"`DIR/{PAPER_DATA[self.needs][0]}/` evaluates it (at --scale=paper)")
    return None


@dataclasses.dataclass(frozen=True)
class Substitute:
  """A flagfile that runs on an offline substitute of the paper's own data set.

  Attributes:
    dataset: the paper's data set, a key of :data:`PAPER_DATA` (``cifar10``, ``fashion_mnist``, ``covtype``).
    instead: what the flagfile runs on without it, in words (``"digits"``).
    flagfile: the flagfile that runs the paper's settings on ``dataset`` (None: the same flagfile, its
      ``--dataset`` and ``--data_dir`` replaced).
    movable: False where the run stays on the substitute even with the data (its record says so): the paper's
      settings on ``dataset`` differ from the substitute's beyond the data set.
    elsewhere: for an unmovable substitute, the claims that run the paper's settings on ``dataset`` instead
      (:meth:`Claim.on_paper_data`), in words; empty: none yet.
  """
  dataset: str
  instead: str
  flagfile: str | None = None
  movable: bool = True
  elsewhere: str = ""

  def note(self, path: str | None) -> str:
    """What a run of this flagfile used, in words: the paper's data at ``path``, or (None) the substitute
    (a note that contains :data:`SUBSTITUTE_NOTE`)."""
    if path:
      return f"{self.dataset}, the paper's data, from {path}"
    with_data = f"`--data_dir=DIR` with `DIR/{PAPER_DATA[self.dataset][0]}/`"
    how = (f"{with_data} runs it at paper scale" if self.movable else
           f"{self.elsewhere} run the paper's settings on it ({with_data})" if self.elsewhere else
           "no flagfile runs the paper's settings on it yet")
    return f"{self.instead}, {SUBSTITUTE_NOTE} {self.dataset} ({how})"


# The words by which a record's Data note says its runs used a substitute (report.on_substitutes).
SUBSTITUTE_NOTE = "the offline substitute for the paper's"


# The papers' own data sets a ``--data_dir`` folder may hold: name -> (its folder under
# ``--data_dir``, the ``--dataset`` that reads it). The CIFAR-10 binary release (FedZO's attack,
# FFGB, FedLRGD), Fashion-MNIST's IDX files (FedZO's softmax figures), and LIBSVM's Covertype
# (FZooS's metric task: one LIBSVM file, or a ``<name>`` / ``<name>.t`` pair).
PAPER_DATA = {"cifar10": ("cifar-10-batches-bin", "cifar10"), "fashion_mnist": ("fashion-mnist", "fashion_mnist"),
              "covtype": ("covtype", "libsvm")}


def find_paper_data(data_dir: str | None, dataset: str) -> str | None:
  """The ``--data_dir`` value that reads ``dataset`` from ``data_dir`` (:data:`PAPER_DATA`), or
  None when ``data_dir`` does not hold its files.

  CIFAR-10 needs its six ``.bin`` files (fedsim.data.cifar10); Fashion-MNIST at least its two ``t10k`` IDX files,
  optionally ``.gz`` (fedsim.data.mnist: the four give the official split); Covertype one file (its path is returned)
  or one ``<name>`` / ``<name>.t`` pair (the folder) in ``covtype/`` (fedsim.data.libsvm).

  Raises:
    ValueError: ``dataset`` is not one of :data:`PAPER_DATA`.
  """
  if dataset not in PAPER_DATA:
    raise ValueError(f"dataset {dataset!r}; accepted: {', '.join(PAPER_DATA)}")
  if not data_dir:
    return None
  folder = os.path.abspath(os.path.join(data_dir, PAPER_DATA[dataset][0]))
  if not os.path.isdir(folder):
    return None
  if dataset == "cifar10":
    from fedsim.data import cifar10
    return folder if all(os.path.isfile(os.path.join(folder, n))
                         for n in (*cifar10.TRAIN_FILES, cifar10.TEST_FILE)) else None
  if dataset == "fashion_mnist":
    from fedsim.data import mnist
    return folder if all(any(os.path.isfile(os.path.join(folder, n + gz)) for gz in ("", ".gz"))
                         for n in (mnist.TEST_IMAGES, mnist.TEST_LABELS)) else None
  files = sorted(f for f in os.listdir(folder) if os.path.isfile(os.path.join(folder, f)))
  if len(files) == 1:
    return os.path.join(folder, files[0])
  return folder if len(files) == 2 and files[1] == files[0] + ".t" else None


class Context:
  """Runs a claim's commands in ``root`` (a paper's report folder) at one scale.

  Args:
    root: the paper's output folder; runs go under ``root/runs/``.
    scale: ``smoke`` or ``paper``.
    log: a ``print``-like function for progress lines.
    run_jobs: how many of the runs given to one :meth:`runs` call execute at the same time (1: one after
      another). Each run is its own process, so on many cores, or a GPU, independent seeds run side by side.
    data_dir: a folder that may hold the papers' own data sets (:data:`PAPER_DATA`); at paper scale, a run of a
      flagfile in ``substitutes`` whose data set is there runs on it (:meth:`resolve`).
    substitutes: ``{flagfile: Substitute}``, the paper's flagfiles that run on an offline substitute of its data.
    evidence_dir: where each finished run's evidence is kept (:meth:`store`): its ``config.json``, each label's
      ``metrics.jsonl.gz``, the small files a script wrote, and ``command.txt`` (the run's wall seconds and
      command). Default ``root/evidence`` at paper scale, ``root/evidence-smoke`` at smoke scale.
    from_evidence: run nothing: every run, script and test batch is read from ``evidence_dir``; one it does not
      hold raises :class:`MissingEvidence`.
    command_root: the output root the recorded commands name (default ``root``); with ``from_evidence`` the root
      the evidence was made under, so the commands re-judged from it are the commands that made it.

  Attributes:
    data: ``{what ran: on which data}``, one entry per substitutable flagfile the claim ran, e.g.
      ``{"cifar10": "digits (offline substitute; ...)"}`` (the report's Data line).

  Raises:
    ValueError: an unknown ``scale`` or ``run_jobs`` < 1.
  """

  def __init__(self, root: str, scale: str, log: Callable[[str], None] = print,
               batch_tests: tuple[str, ...] = (), run_jobs: int = 1, data_dir: str | None = None,
               substitutes: dict[str, Substitute] | None = None, evidence_dir: str | None = None,
               from_evidence: bool = False, command_root: str | None = None):
    if scale not in SCALES:
      raise ValueError(f"scale {scale!r}; accepted: {', '.join(SCALES)}")
    if run_jobs < 1:
      raise ValueError(f"run_jobs {run_jobs}; accepted: an integer >= 1")
    self.root, self.scale, self.log, self.run_jobs = root, scale, log, run_jobs
    self.evidence_dir = evidence_dir or os.path.join(root, "evidence" if scale == "paper" else "evidence-smoke")
    self.from_evidence, self.command_root = from_evidence, command_root or root
    self.data_dir, self.substitutes = data_dir, dict(substitutes or {})
    self.data: dict[str, str] = {}
    self._renamed: dict[str, str] = {}  # a run's name -> its folder's name on the paper's own data
    self.batch_tests = batch_tests  # every test of the paper's pending test claims, run together
    self.commands: list[str] = []
    # Wall seconds of each run this claim read ({completion marker: s}), from the marker when the run finished
    # earlier, so a resumed or re-evaluated claim still reports what its runs cost.
    self.run_seconds: dict[str, float] = {}

  def pick(self, smoke, paper):
    """``smoke`` or ``paper`` by the scale."""
    return smoke if self.scale == "smoke" else paper

  def _execute(self, argv: list[str], marker: str) -> str:
    command = shlex.join(["python", *argv[1:]] if argv[0] == sys.executable else argv)
    self.commands.append(command)
    return self._launch(argv, marker, command)

  def _launch(self, argv: list[str], marker: str, command: str,
              accept: Callable[[int], bool] | None = None) -> str:
    """Runs ``argv`` unless ``marker`` records the same command; writes ``marker`` when it ends
    with status 0, or with a status ``accept`` takes (``experiments.run``'s divergence exit).
    With ``from_evidence`` it runs nothing: ``marker`` is the evidence's ``command.txt``, which
    must record the same command (:class:`MissingEvidence` otherwise)."""
    key = self._command_key(command)
    if self.from_evidence:
      if not os.path.exists(marker) or _marker_command(marker) != key:
        raise MissingEvidence(f"no stored evidence for: {command}")
      self.run_seconds[marker] = _marker_seconds(marker)
      return command
    if os.path.exists(marker):
      stored = _marker_command(marker)
      if stored is None or stored == key:  # a marker from before commands were recorded is trusted
        self.run_seconds[marker] = _marker_seconds(marker)
        return command
      # Same name, other settings: what the folder holds is not this command's evidence.
      self.log(f"  settings changed since {os.path.dirname(marker)} ran; running it again")
      if os.path.basename(marker) == ".complete":
        shutil.rmtree(os.path.dirname(marker))
      else:
        os.remove(marker)
    self.log(f"  $ {command}")
    t0 = time.perf_counter()
    env = None
    if self.run_jobs > 1 and "XLA_PYTHON_CLIENT_PREALLOCATE" not in os.environ:
      # Side by side on one GPU, each process must not reserve 75% of its memory up front.
      env = {**os.environ, "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, env=env)
    if proc.returncode != 0 and accept is not None and accept(proc.returncode):
      self.log(f"  finished; some algorithms stopped on divergence (exit {proc.returncode}): {command}")
    elif proc.returncode != 0:
      tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
      raise RuntimeError(f"command failed (exit {proc.returncode}): {command}\n{tail}")
    os.makedirs(os.path.dirname(marker), exist_ok=True)
    seconds = round(time.perf_counter() - t0, 1)
    with open(marker, "w") as f:
      f.write(f"{seconds:.1f} s\n{key}\n")
    self.run_seconds[marker] = seconds
    return command

  def _command_key(self, command: str) -> str:
    """``command`` with this context's root written ``<root>``, so the same run reached through a
    relative or an absolute ``--output_dir`` has one key."""
    for root in (os.path.abspath(self.command_root), os.path.normpath(self.command_root)):
      command = command.replace(root + os.sep, "<root>" + os.sep)
    return command

  def runs(self, specs: Sequence[tuple[str, str | None, dict]]) -> list[dict[str, list[dict]]]:
    """Runs ``python -m experiments.run`` once per ``(name, flagfile, flags)`` (unless finished earlier),
    ``run_jobs`` at a time, and reads their metrics.

    ``name`` is the run's folder under ``root/runs`` (unique per settings), ``flagfile`` a file of
    ``experiments/flagfiles/`` (name only) or None, ``flags`` further ``--KEY=VALUE`` (lists joined with
    commas). The claim's commands are recorded in the order of ``specs`` whatever order the runs finish in,
    and the results come back in that order, so a claim reads the same evidence with any ``run_jobs``.

    Returns:
      Per spec, ``{algorithm label: [metrics records]}`` (:func:`fedsim.results.read_metrics`).

    Raises:
      RuntimeError: a command failed, its last lines in the message (one after another: at once; side by
        side: the first failure in ``specs`` order, once the runs in flight have finished).
    """
    plans = [self._plan(name, "experiments.run", flagfile, flags) for name, flagfile, flags in specs]
    self.commands += [command for *_, command in plans]

    def go(plan):
      out, argv, marker, command = plan
      self._launch(argv, marker, command,
                   accept=lambda rc, out=out: rc == results.EXIT_DIVERGED and stopped_on_divergence(out))
      self.store(out, marker, command)
      return self._read_run(out)

    if self.run_jobs <= 1 or len(plans) <= 1:
      return [go(p) for p in plans]
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(max_workers=self.run_jobs) as pool:
      futures = [pool.submit(go, p) for p in plans]
    return [f.result() for f in futures]

  @staticmethod
  def _read_run(out: str) -> dict[str, list[dict]]:
    labels = sorted((d for d in os.listdir(out) if any(os.path.exists(os.path.join(out, d, results.METRICS_FILE + gz))
                                                       for gz in ("", ".gz"))), key=natural)
    return {label: results.read_metrics(os.path.join(out, label)) for label in labels}

  def store(self, out: str, marker: str, command: str) -> None:
    """Keeps the evidence of the finished run in ``out`` (its completion ``marker``, its ``command``)
    under ``evidence_dir/<run name>/``, replacing what was there: ``config.json``, each label's
    ``metrics.jsonl`` gzipped (no timestamp in the gzip header, so equal runs store equal bytes), every
    other file under :data:`EVIDENCE_MAX_BYTES` that is not a figure, a checkpoint or a marker, and
    ``command.txt`` (the marker's seconds and command). Nothing with ``from_evidence``."""
    if self.from_evidence or not os.path.isdir(out):
      return
    dest = os.path.join(self.evidence_dir, os.path.basename(os.path.normpath(out)))
    if os.path.isdir(dest):
      shutil.rmtree(dest)
    for folder, subdirs, files in os.walk(out):
      subdirs[:] = sorted(d for d in subdirs if d != "checkpoints" and not d.startswith("."))
      for name in sorted(files):
        src = os.path.join(folder, name)
        rel = os.path.relpath(src, out)
        if name.startswith(".") or name.endswith((".png", ".pdf")):
          continue
        if os.path.getsize(src) > EVIDENCE_MAX_BYTES:
          self.log(f"  evidence: {rel} of {out} is over {EVIDENCE_MAX_BYTES} bytes; not stored")
          continue
        os.makedirs(os.path.join(dest, os.path.dirname(rel)), exist_ok=True)
        if name == results.METRICS_FILE:
          with open(src, "rb") as f, open(os.path.join(dest, rel + ".gz"), "wb") as raw, \
              gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
            shutil.copyfileobj(f, gz)
        else:
          shutil.copyfile(src, os.path.join(dest, rel))
    os.makedirs(dest, exist_ok=True)
    with open(os.path.join(dest, "command.txt"), "w") as f:
      seconds = _marker_seconds(marker) if os.path.exists(marker) else 0.0
      f.write(f"{seconds:.1f} s\n{self._command_key(command)}\n")

  def run_dir(self, name: str) -> str:
    """The folder of run ``name`` (``root/runs/<name>``, or the name :meth:`resolve` gave it on the
    paper's own data), for a diagnostic script that rebuilds a run's task from its ``config.json``; with
    ``from_evidence`` the folder the commands name (the script's own evidence is read, not the run)."""
    return os.path.join(self.command_root, "runs", self._renamed.get(name, name))

  def script(self, name: str, module: str, **flags) -> str:
    """Runs ``python -m module --KEY=VALUE ... --output_dir=root/runs/name`` once (unless finished).

    For the analysis binaries that are not ``experiments.run`` (diagnostics, the FedLRGD suite, table scripts); the
    claim parses what the script wrote. A ``flagfile`` under :data:`FLAGFILES` is resolved like a run's
    (:meth:`resolve`: onto the paper's own data where ``data_dir`` has it).

    Args:
      name: the run's folder under ``root/runs`` (unique per settings).
      module: the module to run, e.g. ``experiments.fedlrgd.suite``.
      **flags: its flags (lists are joined with commas).

    Returns:
      The output folder.

    Raises:
      RuntimeError: the command failed (its last lines in the message).
    """
    flagfile = flags.get("flagfile")
    if isinstance(flagfile, str) and flagfile.startswith(FLAGFILES):
      flags = {k: v for k, v in flags.items() if k != "flagfile"}
      return self._run_module(name, module, flagfile[len(FLAGFILES):], flags)
    return self._run_module(name, module, None, flags)

  def _run_module(self, name: str, module: str, flagfile: str | None, flags: dict) -> str:
    """``python -m module [--flagfile=...] --KEY=VALUE ... --output_dir=root/runs/name``, once.

    A folder left by an interrupted run (no ``.complete`` marker) is removed
    first, so the run starts clean rather than into a half-written record.
    """
    out, argv, marker, command = self._plan(name, module, flagfile, flags)
    self.commands.append(command)
    self._launch(argv, marker, command)
    self.store(out, marker, command)
    return out

  def resolve(self, name: str, flagfile: str | None, flags: dict) -> tuple[str, str | None, dict]:
    """``(name, flagfile, flags)`` of a run, moved onto the paper's own data set where it can be.

    When ``flagfile`` runs on an offline substitute (``substitutes``) and, at paper scale, ``data_dir`` holds the
    paper's data set (:func:`find_paper_data`), the run uses it: the substitute's own flagfile if it names one,
    ``--dataset`` and ``--data_dir`` set, and ``_<dataset>`` appended to its name (so the substitute's runs are never
    read for it). Either way :attr:`data` records what the run used.
    """
    sub = self.substitutes.get(flagfile or "")
    if sub is None:
      return name, flagfile, flags
    path = find_paper_data(self.data_dir, sub.dataset) if self.scale == "paper" and sub.movable else None
    self.data[sub.dataset] = sub.note(path)
    if path is None:
      return name, flagfile, flags
    self._renamed[name] = f"{name}_{sub.dataset}"
    return self._renamed[name], sub.flagfile or flagfile, {**flags, "dataset": PAPER_DATA[sub.dataset][1],
                                                           "data_dir": path}

  def paper_data(self, dataset: str) -> dict[str, str]:
    """The flags that read ``dataset`` (a key of :data:`PAPER_DATA`) from ``data_dir``, for the runs
    of a claim made by :meth:`Claim.on_paper_data`; :attr:`data` records it.

    Raises:
      ValueError: ``data_dir`` does not hold ``dataset`` (:func:`find_paper_data`).
    """
    path = find_paper_data(self.data_dir, dataset)
    if path is None:
      raise ValueError(f"data_dir {self.data_dir!r} does not hold {dataset} ({PAPER_DATA[dataset][0]}/)")
    self.data[dataset] = f"{dataset}, the paper's data, from {path}"
    return {"dataset": PAPER_DATA[dataset][1], "data_dir": path}

  def _plan(self, name: str, module: str, flagfile: str | None, flags: dict) -> tuple[str, list[str], str, str]:
    """(output folder, argv, completion marker, command) of one run; clears an interrupted run's folder."""
    name, flagfile, flags = self.resolve(name, flagfile, flags)
    out = os.path.join(self.command_root, "runs", name)
    argv = [sys.executable, "-m", module]
    if flagfile:
      argv.append(f"--flagfile={FLAGFILES}{flagfile}")
    for key, value in flags.items():
      value = ",".join(map(str, value)) if isinstance(value, (list, tuple)) else value
      argv.append(f"--{key}={value}")
    argv.append(f"--output_dir={out}")
    command = shlex.join(["python", *argv[1:]])
    if self.from_evidence:
      out = os.path.join(self.evidence_dir, name)
      return out, argv, os.path.join(out, "command.txt"), command
    marker = os.path.join(out, ".complete")
    # A flagfile edited after the run finished: the command is the same, its settings are not; run it again.
    path = os.path.join(REPO, FLAGFILES, flagfile) if flagfile else None
    if path and os.path.exists(marker) and os.path.exists(path) and os.path.getmtime(path) > os.path.getmtime(marker):
      self.log(f"  {flagfile} changed since {out} ran; running it again")
      os.remove(marker)
    if not os.path.exists(marker) and os.path.isdir(out):
      shutil.rmtree(out)
    return out, argv, marker, command

  def pytest(self, *node_ids: str) -> dict[str, bool]:
    """Runs the tests ``node_ids`` (``path::name``, slow ones included) in one pytest process.

    Results are kept in ``root/runs/tests/`` (JUnit XML), so a resumed or
    repeated call does not run them again.

    Returns:
      ``{test case id: passed}`` for every case collected (parametrized tests
      give one entry per parameter); empty when nothing was collected.
    """
    key = hashlib.sha1(" ".join(sorted(node_ids)).encode()).hexdigest()[:12]
    xml = os.path.join(self.command_root, "runs", "tests", key + ".xml")
    argv = [sys.executable, "-m", "pytest", "-q", "-n", "0", "-m", "", "-p", "no:cacheprovider",
            f"--junitxml={xml}", *node_ids]
    stored = os.path.join(self.evidence_dir, "tests", key + ".xml")
    if self.from_evidence:
      self._execute(argv, stored + ".done")
      return junit_results(stored)
    try:
      self._execute(argv, xml + ".done")
    except RuntimeError as e:  # failures are read from the XML below
      self.log(f"  a test failed: {str(e).splitlines()[0]}")
    if os.path.exists(xml):
      os.makedirs(os.path.dirname(stored), exist_ok=True)
      shutil.copyfile(xml, stored)
      with open(xml + ".done") as src, open(stored + ".done", "w") as dst:
        dst.write(src.read())
    return junit_results(xml)


EVIDENCE_MAX_BYTES = 2_000_000
"""A run's file larger than this is not kept as evidence (the log says so)."""


class MissingEvidence(RuntimeError):
  """``--from_evidence``: a claim needs a run, script or test batch whose evidence is not stored."""


def _marker_seconds(marker: str) -> float:
  """The wall seconds a completion marker records (its first line, ``"797.7 s"``); 0 for a marker without them."""
  with open(marker) as f:
    text = f.read().split()
  try:
    return float(text[0])
  except (IndexError, ValueError):
    return 0.0


def stopped_on_divergence(out: str) -> bool:
  """Whether the ``experiments.run`` output ``out`` is finished with some algorithms stopped on
  divergence (its exit status :data:`fedsim.results.EXIT_DIVERGED`): every algorithm of its
  config.json has its metrics, and at least one ends on a non-finite objective
  (:func:`fedsim.api.diverged`). A lr grid is expected to diverge at its large end; those runs are
  evidence, not failures."""
  try:
    with open(os.path.join(out, "config.json")) as f:
      labels = list(json.load(f)["algorithms"])
  except (OSError, ValueError, KeyError):
    return False
  paths = [os.path.join(out, label, "metrics.jsonl") for label in labels]
  if not labels or not all(os.path.exists(p) for p in paths):
    return False
  from fedsim.api import diverged
  return bool(diverged({label: results.read_metrics(p) for label, p in zip(labels, paths)}))


def _marker_command(marker: str) -> str | None:
  """The command key a completion marker records (its second line); None for a marker written before that."""
  with open(marker) as f:
    lines = f.read().splitlines()
  return lines[1] if len(lines) > 1 else None


def junit_results(path: str) -> dict[str, bool]:
  """``{classname::name: passed}`` of a pytest JUnit XML file (missing file: ``{}``)."""
  import xml.etree.ElementTree as ET
  if not os.path.exists(path):
    return {}
  return {f"{case.get('classname')}::{case.get('name')}": not any(child.tag in ("failure", "error") for child in case)
          for case in ET.parse(path).iter("testcase")}


def _covers(node_id: str, case: str) -> bool:
  """Whether JUnit case ``module.path::name[param]`` belongs to node id ``path.py::name``."""
  path, _, name = node_id.partition("::")
  module = path.removesuffix(".py").replace("/", ".")
  cls, _, test = case.partition("::")
  return cls == module and (test == name or test.startswith(name + "["))


TEST_CRITERION = "reproduced when every cited test passes"  # the criterion of every test_claim


def test_claim(id: str, statement: str, source: str, *node_ids: str) -> Claim:  # noqa: A002
  """A claim that an exact property holds, with the tests that pin it as its evidence.

  The runner collects the tests of all such claims of a paper into one pytest
  run (:meth:`Context.pytest`); this claim reads its own cases from it.
  """
  def evaluate(ctx: Context) -> Evidence:
    results = ctx.pytest(*(ctx.batch_tests or node_ids))
    mine = {case: ok for case, ok in results.items() if any(_covers(n, case) for n in node_ids)}
    missing = [n for n in node_ids if not any(_covers(n, c) for c in mine)]
    passed = sum(mine.values())
    numbers = {"test cases passed": float(passed), "test cases": float(len(mine))}
    if missing or passed < len(mine):
      failed = [c for c, ok in mine.items() if not ok]
      return Evidence("not reproduced", f"failed: {', '.join(failed) or '-'}; not collected: "
                      f"{', '.join(missing) or '-'}", numbers=numbers)
    return Evidence("reproduced", f"all {passed} test cases pass", numbers=numbers)
  return Claim(id, statement, source, TEST_CRITERION, evaluate,
               tests=tuple(node_ids), kind="check")


def natural(label: str) -> list:
  """Sort key that orders ``fedzo-local_steps=5`` before ``fedzo-local_steps=10``."""
  return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", label)]


def final(history: list[dict], metric: str) -> float:
  """``metric`` at the last record that has it (a diverged run's last finite value)."""
  values = [r[metric] for r in history if r.get(metric) is not None]
  if not values:
    raise KeyError(f"no {metric!r} in the records")
  return float(values[-1])


def curves(runs: list[dict[str, list[dict]]], metric: str, x: str = "round") -> dict:
  """``{label: [[(x, metric), ...] per seed]}`` from the runs of one setting (for :func:`plot_curves`)."""
  return {label: [[(r[x], r[metric]) for r in run[label] if r.get(metric) is not None] for run in runs]
          for label in runs[0]}
