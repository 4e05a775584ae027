"""The output folder's policy: one run per folder, one writer at a time, records tied to their code.

:func:`fedsim.run` hands its output folder to a :class:`RunFolder` before anything is built:

* **Another run** (other record settings, :func:`record_settings`) is refused unless
  ``overwrite`` (:func:`check_record`).
* **This run**, finished and made by the same code (:mod:`fedsim.provenance`), is returned as
  stored; made by other code, it is refused naming what changed; unfinished, it is refused unless
  ``resume`` or ``overwrite`` (:func:`check_rerun`).
* **One writer**: the folder is locked (``fcntl.flock`` on :data:`LOCK_FILE`) for the run's whole
  life; a second process is refused naming the live one's process id; the lock of a killed
  process is released by the kernel, so it never blocks a later ``resume``. ``experiments.sweep``
  takes the same lock, and a run is refused in a sweep's folder and the reverse.

Messages speak Python (``overwrite=True``) from the library and flags (``--overwrite``) on the
command line (:class:`fedsim.config.FieldError` ``cli``).
"""

from __future__ import annotations

import datetime
import errno
import functools
import json
import logging
import math
import os
import shutil
import socket
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from fedsim.config import FieldError

if TYPE_CHECKING:
  from fedsim.api import ExperimentConfig

CONFIG_FILE = "config.json"
LOCK_FILE = ".fedsim.lock"       # holds {"pid", "host", "kind", "started"} of the live writer
SWEEP_FILE = "sweep_config.json"  # what marks a sweep's folder (experiments.sweep)

_PYTHON_WORDS = {"overwrite": "overwrite=True", "resume": "resume=True", "output_dir": "output_dir",
                 "checkpoint_every": "checkpoint_every=K"}
_FLAG_WORDS = {"overwrite": "--overwrite", "resume": "--resume", "output_dir": "--output_dir",
               "checkpoint_every": "--checkpoint_every=K"}


def refusal(field: str, message: Callable[[dict], str]) -> FieldError:
  """FieldError of ``field`` whose message speaks Python (``message(_PYTHON_WORDS)``) and whose
  command-line text (``cli``) speaks flags (``message(_FLAG_WORDS)``)."""
  return FieldError(field, message(_PYTHON_WORDS), cli=f"--{field}: {message(_FLAG_WORDS)}")


# --- which settings make a run's records ----------------------------------------------------

# ExperimentConfig fields that do not change a run's records: a resume may change them
# (``rounds``/``comm_budget`` extend or shorten it; a hyperparameter they set, FZooS's
# ``rounds``, is compared with the algorithms'). ``hparams``/``algorithms`` are compared
# as each label's resolved hyperparameters.
RECORD_EXEMPT = ("rounds", "comm_budget", "checkpoint_every", "resume", "overwrite", "save_learners",
                 "num_devices", "blas_threads", "compilation_cache", "xla_cpu_emitters", "watchdog_s", "profile_dir",
                 "output_dir", "progress", "checkpoint_interval_s",
                 "flags", "source_names", "hparams", "algorithms")
_TASK_OPTIONS_EXEMPT = ("cache_dir",)


def record_settings(experiment: Mapping, algorithms: Mapping) -> dict:
  """The settings that decide a run's records, from config.json's ``experiment`` and
  ``algorithms`` (or :meth:`ExperimentConfig.to_json` and the resolved hyperparameters):
  every field but :data:`RECORD_EXEMPT`, ``task_options`` without ``cache_dir``, and
  ``{label: {"algorithm": NAME, HP: VALUE}}``; JSON-normalised (non-finite floats as text)."""
  from fedsim.files import strict_json
  from fedsim.tasks import resolve_options
  out = {k: v for k, v in experiment.items() if k not in RECORD_EXEMPT}
  # Every option against the task's own defaults, whichever front end (or fedsim version) wrote them.
  out["task_options"] = {k: v for k, v in resolve_options(dict(out.get("task_options") or {})).items()
                         if k not in _TASK_OPTIONS_EXEMPT}
  out["algorithms"] = {label: dict(hp) for label, hp in algorithms.items()}
  return json.loads(json.dumps(strict_json(out), default=str))


def settings_diff(stored: Mapping, given: Mapping, prefix: str = "") -> list[tuple[str, Any, Any]]:
  """``[(name, stored value, given value)]`` for every key whose value differs; nested dicts
  are compared key by key (named ``outer.inner``); a missing key's value is None."""
  out = []
  for k in list(dict.fromkeys([*stored, *given])):
    a, b = stored.get(k), given.get(k)
    if isinstance(a, Mapping) and isinstance(b, Mapping):
      out += settings_diff(a, b, f"{prefix}{k}.")
    elif a != b:
      out.append((f"{prefix}{k}", a, b))
  return out


def describe_diff(diff: list[tuple[str, Any, Any]]) -> str:
  """``"lr (fedzo): stored 0.01, given 0.5; ..."`` (``algorithms.LABEL.HP`` named ``HP (LABEL)``,
  ``task_options.KEY`` named ``KEY``)."""
  parts = []
  for name, a, b in diff:
    head, _, rest = name.partition(".")
    if head == "algorithms" and "." in rest:
      label, _, hp = rest.partition(".")
      name = f"{hp} ({label})"
    elif head == "algorithms" and rest:
      name = f"algorithm {rest}"
    elif head == "task_options" and rest:
      name = rest
    parts.append(f"{name}: stored {a!r}, given {b!r}")
  return "; ".join(parts)


def diverged(histories: dict[str, list[dict]]) -> list[str]:
  """Labels of the algorithms whose last objective is NaN or inf (they stopped there)."""
  return [label for label, h in histories.items() if h and not math.isfinite(h[-1]["objective"])]


# --- the checks before a run ----------------------------------------------------------------

def check_output_dir(path: str) -> None:
  """Checks that run outputs can be written under ``path`` (created later if missing).

  Raises:
    ConfigError: (field ``output_dir``) ``path`` is a file, lies under a file, or
      its nearest existing folder is not writable.
  """
  import tempfile
  full = os.path.abspath(path)
  if os.path.lexists(full) and not os.path.isdir(full):
    raise FieldError("output_dir", f"{path} exists and is not a folder")
  folder = full
  while not os.path.lexists(folder):
    folder = os.path.dirname(folder)
  if not os.path.isdir(folder):
    raise FieldError("output_dir", f"{path} is under {folder}, which is not a folder")
  try:
    with tempfile.TemporaryFile(dir=folder):
      pass
  except OSError as e:
    where = "" if folder == full else f" (in {folder})"
    raise FieldError("output_dir", f"{path} is not writable{where}: {e.strerror or e}") from None


def _stored_run(out_dir: str):
  """(config.json's dict or None, its path); a config.json that is not JSON is refused."""
  path = os.path.join(out_dir, CONFIG_FILE)
  if not os.path.exists(path):
    return None, path
  try:
    with open(path) as f:
      stored = json.load(f)
  except (OSError, ValueError) as e:
    why = str(e)
    raise refusal("output_dir", lambda w: f"{path} is not readable JSON ({why}); pass {w['overwrite']} to "
                  f"replace the run, or use another {w['output_dir']}") from None
  return (stored if isinstance(stored, dict) else {}), path


def check_record(config: ExperimentConfig, out_dir: str, hps: Mapping[str, tuple[str, dict]]) -> list[str]:
  """Checks that running ``config`` in ``out_dir`` keeps the directory a true record of one run.

  A directory holding a run (``config.json``) with other record settings
  (:func:`record_settings`), or, for a new run, another ``rounds`` / ``comm_budget``,
  is refused unless ``overwrite``; ``resume`` is refused unless the record settings
  are equal (it may change the rounds). A directory holding a sweep is refused.

  Returns:
    The labels of the stored run (their folders are replaced unless resuming).

  Raises:
    ConfigError: ``resume`` or ``output_dir``, naming each differing setting with the
      stored and the given value.
  """
  if os.path.exists(os.path.join(out_dir, SWEEP_FILE)):
    raise refusal("output_dir", lambda w: f"{out_dir} holds a sweep ({SWEEP_FILE}); use another {w['output_dir']}")
  stored, path = _stored_run(out_dir)
  if stored is None:
    return []
  old = record_settings(stored.get("experiment") or {}, stored.get("algorithms") or {})
  new = record_settings(config.to_json(), {label: {"algorithm": name, **hp} for label, (name, hp) in hps.items()})
  diff = settings_diff(old, new)
  if not config.resume:  # a new run's length is part of the record (a resume may extend it)
    experiment = stored.get("experiment") or {}
    diff += settings_diff({k: experiment.get(k) for k in ("rounds", "comm_budget")},
                          {"rounds": config.rounds, "comm_budget": config.comm_budget})
  if diff and config.resume:
    raise refusal("resume", lambda w: f"{out_dir} holds a run with other settings ({describe_diff(diff)}); "
                  f"resume with its settings, or start anew with {w['overwrite']} or another {w['output_dir']}")
  if diff and not config.overwrite:
    raise refusal("output_dir", lambda w: f"{out_dir} holds another run ({describe_diff(diff)}); pass "
                  f"{w['overwrite']} to replace it, {w['resume']} with its settings to continue it, or "
                  f"use another {w['output_dir']}")
  return list((stored.get("algorithms") or {}).keys())


def _recompute_corrupt(why: str, w: dict) -> str:
  return f"{why}; {w['overwrite']} to recompute the run"


class _Stored(NamedTuple):
  """One label of the run an output directory holds: its records, its rounds, its newest checkpoint."""

  history: list
  target: int
  checkpoint: int | None

  @property
  def complete(self) -> bool:
    """Its last record is at (or past) its rounds, or stopped it on a non-finite objective."""
    last = self.history[-1] if self.history else None
    return last is not None and (last["round"] >= self.target or not math.isfinite(last["objective"]))

  @property
  def progress(self) -> bool:
    """It has records past round 0 (work a new run would redo)."""
    return bool(self.history) and self.history[-1]["round"] > 0

  def describe(self, label: str) -> str:
    if self.complete:
      return f"{label} complete"
    if not self.history:
      return f"{label} not started"
    ckpt = f"checkpoint at round {self.checkpoint}" if self.checkpoint is not None else "no checkpoint"
    return f"{label} at round {self.history[-1]['round']} of {self.target}, {ckpt}"


def check_code(config: ExperimentConfig, out_dir: str, current: Mapping[str, Any]) -> None:
  """Refuses to return or continue the run in ``out_dir`` when other code made it.

  Args:
    current: :func:`fedsim.provenance.provenance` of the code that runs now.

  Raises:
    ConfigError: (``output_dir``, or ``resume`` when resuming) naming what changed
      (:func:`fedsim.provenance.changes`) and ``overwrite``.
  """
  from fedsim import provenance
  stored, _ = _stored_run(out_dir)
  if stored is None or config.overwrite:
    return
  changed = provenance.changes(stored.get("provenance"), current)
  if changed:
    field = "resume" if config.resume else "output_dir"
    what = "; ".join(changed)
    raise refusal(field, lambda w: f"{out_dir} holds this run made by other code ({what}); pass {w['overwrite']} "
                  f"to recompute it with this code, or use another {w['output_dir']}")


def check_rerun(config: ExperimentConfig, out_dir: str, hps: Mapping[str, tuple[str, dict]]) -> dict[str, list]:
  """What running ``config`` again in ``out_dir`` does, when that directory holds a run with the
  same record settings (:func:`check_record` passed) made by the same code (:func:`check_code`
  passed): a rerun never recomputes or drops records silently.

  * A finished run (every label's ``metrics.jsonl`` reaches its rounds, or stopped on a
    non-finite objective): its records are returned and nothing is run or written.
  * An unfinished run is refused unless ``resume`` (it continues from each label's newest
    checkpoint; finished labels are kept) or ``overwrite`` (it is recomputed); a run that
    recorded nothing past round 0 starts anew.
  * ``resume`` is refused when there is nothing to resume from: no run in ``out_dir``, or a
    label with records past round 0 and no checkpoint, or no checkpoint and no finished label.

  Returns:
    {label: stored records} of the finished labels (all of them: the run is complete).

  Raises:
    ConfigError: (``output_dir``, or ``resume`` when resuming) one line naming each label's
      state and the settings that would work (``resume``, ``overwrite``, ``checkpoint_every``).
  """
  from fedsim.results import read_metrics
  if not os.path.exists(os.path.join(out_dir, CONFIG_FILE)):
    if config.resume:
      raise refusal("resume", lambda w: f"nothing to resume: {out_dir} holds no run; start it without {w['resume']}")
    return {}
  if config.overwrite:
    return {}
  runs = {}
  for label, (name, hp) in hps.items():
    path = os.path.join(out_dir, label, "metrics.jsonl")
    try:
      history = read_metrics(path) if os.path.exists(path) else []
    except ValueError as e:
      raise refusal("output_dir", functools.partial(_recompute_corrupt, str(e))) from None
    runs[label] = _Stored(history, config.rounds_for(name, hp),
                          latest_checkpoint(os.path.join(out_dir, label, "checkpoints")))
  done = {label: r.history for label, r in runs.items() if r.complete}
  if len(done) == len(runs):
    return done
  where = "; ".join(r.describe(label) for label, r in runs.items())
  lost = [label for label, r in runs.items() if not r.complete and r.progress and r.checkpoint is None]

  def recompute(w):
    return (f"{w['overwrite']} recomputes it (add {w['checkpoint_every']} so that {w['resume']} can continue it "
            "after an interruption)")
  if config.resume:
    if lost or not (done or any(r.checkpoint is not None for r in runs.values())):
      raise refusal("resume", lambda w: f"no checkpoint to resume from in {out_dir} ({where}); {recompute(w)}")
    return done
  if not any(r.progress for r in runs.values()):
    return {}  # nothing past round 0 recorded: nothing to lose
  if lost:
    raise refusal("output_dir", lambda w: f"{out_dir} holds this run unfinished, without checkpoints ({where}); "
                  f"{recompute(w)}")
  raise refusal("output_dir", lambda w: f"{out_dir} holds this run unfinished ({where}); {w['resume']} "
                f"to continue it, or {w['overwrite']} to recompute it")


def complete_line(config: ExperimentConfig, out_dir: str, histories: Mapping[str, list]) -> str:
  """``complete: 200 rounds in DIR; --overwrite to recompute`` (per label when their rounds differ;
  labels stopped on a non-finite objective named)."""
  last = {label: h[-1]["round"] for label, h in histories.items()}
  rounds = (f"{next(iter(last.values()))}" if len(set(last.values())) == 1
            else ", ".join(f"{label} {r}" for label, r in last.items()))
  gone = diverged(dict(histories))
  stopped = f" ({', '.join(gone)} stopped on a non-finite objective)" if gone else ""
  words = _FLAG_WORDS if config.flags is not None else _PYTHON_WORDS
  return f"complete: {rounds} rounds in {out_dir}{stopped}; {words['overwrite']} to recompute"


# --- one writer per folder ------------------------------------------------------------------

class FolderLock:
  """An exclusive ``fcntl.flock`` on ``FOLDER/.fedsim.lock`` for a run's or a sweep's whole life.

  The file keeps the holder's process id, host, kind and start time, so that a refused process
  names the live one. The kernel drops the lock when its process dies (``kill -9`` included):
  a stale file never blocks a later run.

  Raises:
    ConfigError: (``output_dir``) another live process holds the folder.
  """

  def __init__(self, folder: str, kind: str, record: bool = True):
    import fcntl
    os.makedirs(folder, exist_ok=True)
    self.path = os.path.join(folder, LOCK_FILE)
    fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
      holder = _read_holder(fd)
      os.close(fd)
      if e.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
        raise FieldError("output_dir", f"cannot lock {self.path}: {e.strerror or e}") from None
      who = (f"{holder.get('kind', 'run')} of process {holder.get('pid', '?')} on {holder.get('host', '?')}, "
             f"started {holder.get('started', '?')}") if holder else "another process"
      raise refusal("output_dir", lambda w: f"{folder} is in use by a live {who}; wait for it to end, or use "
                    f"another {w['output_dir']}") from None
    self._fd: int | None = fd
    self.kind = kind
    if record:
      self.record()

  def record(self) -> None:
    """Writes the holder's process id, host, kind and start time into the lock file (what a
    refused process names). Deferred while a run only checks its folder, so that a refused
    or finished rerun leaves every file as it was."""
    if self._fd is not None:
      os.ftruncate(self._fd, 0)
      os.pwrite(self._fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "kind": self.kind,
                                      "started": datetime.datetime.now().isoformat(timespec="seconds")}).encode(), 0)

  def release(self) -> None:
    """Drops the lock (the file stays: removing it would race with a process that opened it)."""
    if self._fd is not None:
      os.close(self._fd)  # closing the descriptor releases the flock
      self._fd = None

  def __enter__(self) -> FolderLock:
    return self

  def __exit__(self, *exc) -> None:
    self.release()


def _read_holder(fd: int) -> dict:
  try:
    os.lseek(fd, 0, os.SEEK_SET)
    data = json.loads(os.read(fd, 4096).decode() or "{}")
    return data if isinstance(data, dict) else {}
  except (OSError, ValueError):
    return {}


# --- the folder of one run --------------------------------------------------------------------

class RunFolder:
  """The output folder of one :func:`fedsim.run` (a null object when there is none).

  ``RunFolder.claim`` checks the folder before anything is built (another run, another
  code, a finished or an unfinished one; :func:`check_record`, :func:`check_code`,
  :func:`check_rerun`) and locks it (:class:`FolderLock`) unless the run is finished.

  Attributes:
    path: the folder, or None (nothing is written).
    finished: ``{label: records}`` of every label when the folder holds this run finished
      (returned as stored), else None.
    done: ``{label: records}`` of the labels a resumed run keeps.
    provenance: :func:`fedsim.provenance.provenance` of the code that runs.
  """

  def __init__(self, path: str | None, provenance: dict, finished=None, done=None, stale=(), lock=None):
    self.path, self.provenance = path, provenance
    self.finished, self.done, self.stale, self._lock = finished, dict(done or {}), list(stale), lock

  @classmethod
  def claim(cls, config: ExperimentConfig, path: str | None, hps: Mapping[str, tuple[str, dict]],
            main: bool = True) -> RunFolder:
    """The checked (and, for a run to make, locked by process ``main``) folder ``path``.

    Raises:
      ConfigError: see :func:`check_record`, :func:`check_code`, :func:`check_rerun`,
        :func:`check_output_dir`, :class:`FolderLock`.
    """
    from fedsim import provenance
    code = provenance.provenance({label: name for label, (name, _) in hps.items()})
    if path is None:
      return cls(None, code)
    path = os.fspath(path)
    # A live writer is named before anything else is said about the folder (its run is unfinished).
    lock = FolderLock(path, "run", record=False) if main and os.path.isdir(path) and os.access(path, os.W_OK) \
        else None
    try:
      stale = check_record(config, path, hps)
      check_code(config, path, code)
      done = check_rerun(config, path, hps)
      if len(done) == len(hps):
        if lock is not None:
          lock.release()
        return cls(path, code, finished={label: done[label] for label in hps})
      check_output_dir(path)
      if lock is None and main:
        lock = FolderLock(path, "run")
      elif lock is not None:
        lock.record()
    except BaseException:
      if lock is not None:
        lock.release()
      raise
    return cls(path, code, done=done, stale=stale, lock=lock)

  def start(self, record: dict, resume: bool, main: bool) -> None:
    """Writes ``config.json`` (``record`` with ``provenance``); a new run first removes the
    stored run's algorithm folders (``stale``) and ``curves.png``.

    Raises:
      OutputError: a file cannot be written.
    """
    if self.path is None:
      return
    from fedsim.core.errors import OutputError
    from fedsim.files import atomic_write, strict_json
    try:
      os.makedirs(self.path, exist_ok=True)  # every process (checkpoints need it)
      if not main:
        return
      if not resume:  # a new run (or overwrite): the old one's folders (and curves) go
        if os.path.exists(os.path.join(self.path, "curves.png")):
          os.remove(os.path.join(self.path, "curves.png"))
        for label in dict.fromkeys([*self.stale, *record["algorithms"]]):
          if os.path.isdir(os.path.join(self.path, label)):
            shutil.rmtree(os.path.join(self.path, label))
      atomic_write(os.path.join(self.path, CONFIG_FILE),
                   json.dumps(strict_json({**record, "provenance": self.provenance}), indent=2, default=str,
                              allow_nan=False) + "\n")
    except OSError as e:
      raise OutputError(f"cannot write {self.path}: {e.strerror or e}") from None

  def label_dir(self, label: str) -> str | None:
    """``FOLDER/LABEL`` (created), or None without a folder."""
    if self.path is None:
      return None
    os.makedirs(os.path.join(self.path, label), exist_ok=True)
    return os.path.join(self.path, label)

  def release(self) -> None:
    if self._lock is not None:
      self._lock.release()
      self._lock = None

  def __enter__(self) -> RunFolder:
    return self

  def __exit__(self, *exc) -> None:
    self.release()


class Histories(dict):
  """``{label: [record, ...]}`` as :func:`fedsim.run` returns it.

  Attributes:
    stored: True when the records were read from the output folder (the run was finished
      there, by the same code), not computed now.
    output_dir: the folder (or None).
    provenance: the code that made the records (``config.json["provenance"]``).
  """

  def __init__(self, items=(), stored: bool = False, output_dir: str | None = None, provenance=None):
    super().__init__(items)
    self.stored, self.output_dir, self.provenance = stored, output_dir, provenance


def stored_histories(config: ExperimentConfig, folder: RunFolder, echo: bool) -> Histories:
  """The finished run's records (``folder.finished``), said on stdout with ``echo`` and through
  :mod:`logging` (logger ``fedsim``: a warning without ``echo``)."""
  line = complete_line(config, folder.path or "", folder.finished or {})
  if echo:
    print(line, flush=True)
  # Said whatever ``progress`` is: a warning when nothing was printed.
  logging.getLogger("fedsim").log(logging.INFO if echo else logging.WARNING, "returning stored records: %s", line)
  stored, _ = _stored_run(folder.path or "")
  return Histories(folder.finished or {}, stored=True, output_dir=folder.path,
                   provenance=(stored or {}).get("provenance"))


def latest_checkpoint(ckpt_dir: str) -> int | None:
  """The newest checkpoint's round in ``ckpt_dir`` (None: none), as
  :func:`fedsim.core.checkpoint.latest_round`; orbax is imported only when that folder exists,
  so a run without checkpoints never pays for the import (about 0.2 s)."""
  if not os.path.isdir(ckpt_dir):
    return None
  from fedsim.core import checkpoint
  return checkpoint.latest_round(ckpt_dir)
