"""Run outputs: the start-up and progress lines, the ``metrics.jsonl`` writer, ``curves.png``, BLAS threads.

The pieces :func:`fedsim.run` (``fedsim/api.py``) puts around
:func:`fedsim.core.engine.simulate`; the experiment binaries reuse them.
matplotlib, threadpoolctl and JAX are imported only when used.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable

# Task metrics shown on the progress line, with their short names.
HEADLINE = (("test_accuracy", "acc"), ("attack_accuracy", "attack_acc"), ("optimality_gap", "gap"))


def progress_line(alg: str, rec: dict, total_rounds: int, since: tuple[int, float] | None = None) -> str:
  """The one-line progress report of a record: round, objective, headline metrics, queries, ETA.

  Args:
    alg: the algorithm's label (shown in brackets).
    rec: an evaluation record (``round``, ``objective``, ``queries``, ``wall_time_s``, ...).
    total_rounds: the run's T.
    since: ``(round, wall_time_s)`` of a record after the first compiled chunk: the ETA is
      linear in rounds at the speed measured since then, so compile time is not in it;
      None (or no round since): ETA ``-``.
  """
  r, el = rec["round"], rec["wall_time_s"]
  eta = "-"
  if since is not None and r > since[0]:
    eta = duration((el - since[1]) / (r - since[0]) * (total_rounds - r))
  extra = "".join(f" {short} {rec[key]:.4g}" for key, short in HEADLINE if key in rec)
  return (f"[{alg}] round {r}/{total_rounds} objective {rec['objective']:.5g}{extra} "
          f"queries {rec['queries']:.3e} elapsed {el:.1f}s ETA {eta}")


def duration(seconds: float) -> str:
  """A time span for a person: seconds under a minute, then minutes and seconds, then hours and minutes.

  >>> duration(8.04), duration(125), duration(7384)
  ('8.0s', '2m05s', '2h03m')
  """
  if seconds < 60:
    return f"{seconds:.1f}s"
  s = int(round(seconds))
  return f"{s // 60}m{s % 60:02d}s" if s < 3600 else f"{s // 3600}h{s % 3600 // 60:02d}m"


def provenance_line(label: str, values: dict, sources: dict) -> str:
  """The start-up line of an algorithm: its values that are not its config's defaults, each
  with its source (``fedsim.ExperimentConfig.resolve``), e.g.
  ``[fedzo] lr=0.01 (binary default), clients_per_round=10 (--clients_per_round)``."""
  given = [f"{k}={v} ({sources[k]})" for k, v in values.items() if sources[k] != "default"]
  return f"[{label}] {', '.join(given) if given else 'all defaults'}"


class ProgressWriter:
  """Collects an algorithm's records; appends them to ``metrics.jsonl``; shows progress.

  The file is strict JSON, one record a line (:func:`fedsim.files.strict_record`:
  a NaN/inf value is ``null`` and listed under ``nonfinite``), each appended whole
  (:class:`fedsim.files.LineAppender`). Progress: where stderr is a terminal, one
  line on stderr redrawn in place (a bar, round, objective, ETA); otherwise one
  line per evaluation on stdout. The ETA (:func:`progress_line`) is the rounds left
  times the measured time per round of the chunks after compilation: after the
  first chunk, that chunk's run time from the moment its program was compiled
  (:meth:`compiled`, the engine's ``on_compile``; without it no ETA yet); from
  the second chunk on, the time since the first record after the first chunk.

  Attributes:
    history: the records so far (kept ones from a resumed file first), with
      their non-finite floats.
  """

  def __init__(self, alg: str, path: str | None, total_rounds: int, keep_until: int | None = None,
               write: bool = True, echo: bool = True,
               callbacks: tuple[Callable[[str, dict], None], ...] = ()):
    """Makes ``path`` hold the kept records (atomically; a new file when not resuming).

    Args:
      alg: the algorithm's label (progress lines, callbacks).
      path: the metrics.jsonl file; None writes no file.
      total_rounds: the run's T (progress line).
      keep_until: resuming from that round: earlier records of ``path`` are kept
        (and re-plotted), later ones dropped; None starts a new file.
      write: False on the processes other than 0 of a multi-host run (nothing
        written or printed; callbacks still run).
      echo: show progress when ``write``.
      callbacks: each is called as ``callback(alg, record)`` for every new record.

    Raises:
      OutputError: ``path`` cannot be written.
    """
    from fedsim.files import restore_record
    self.alg, self.total, self.write, self.echo = alg, total_rounds, write, echo
    self.callbacks = tuple(callbacks)
    self.history = []
    self.path = path
    if keep_until is not None and path is not None and os.path.exists(path):
      with open(path) as f:
        self.history = [restore_record(rec) for rec in map(json.loads, filter(str.strip, f))
                        if rec["round"] <= keep_until]
    self._start = keep_until or 0          # records after this round and one chunk: ETA reference
    self._since: tuple[int, float] | None = None
    self._compiled: tuple[int, float] | None = None   # (round, wall_time_s) when the first chunk starts
    self.tty = bool(write and echo and sys.stderr.isatty())
    self._drawn = False
    self.f = None
    if write and path is not None:
      from fedsim.files import LineAppender
      try:
        self.f = LineAppender(path, [_dumps(rec) for rec in self.history])
      except OSError as e:
        raise self._error(e) from None

  def _error(self, e: OSError):
    from fedsim.core.errors import OutputError
    kept = f"records up to round {self.history[-1]['round']} are kept" if self.history else "nothing kept"
    return OutputError(f"cannot write {self.path}: {e.strerror or e}; {kept}")

  def __call__(self, rec: dict):
    if self.write:
      if self.f is not None:
        try:
          self.f.append(_dumps(rec))
        except OSError as e:
          raise self._error(e) from None
      if self.echo:
        line = progress_line(self.alg, rec, self.total, self._since or self._compiled)
        if self.tty:
          done = min(1.0, rec["round"] / self.total) if self.total else 1.0
          bar = "#" * int(20 * done) + "." * (20 - int(20 * done))
          sys.stderr.write(f"\r|{bar}| {line}\x1b[K")
          sys.stderr.flush()
          self._drawn = True
        else:
          print(line, flush=True)
    if self._since is None and rec["round"] > self._start:
      self._since = (rec["round"], rec["wall_time_s"])
    self.history.append(rec)
    for callback in self.callbacks:
      callback(self.alg, rec)

  def compiled(self, report: dict):
    """The engine's ``on_compile`` (``fedsim.core.engine.simulate``): prints the round chunk's
    memory against the memory available and its compile time (with progress on), and starts
    the first chunk's ETA clock at ``report["wall_time_s"]``.

    Args:
      report: ``{"memory": fedsim.core.memory.MemoryEstimate, "compile_s": float,
        "round": int, "wall_time_s": float}``.
    """
    self._compiled = (report["round"], report["wall_time_s"])
    if self.write and self.echo:
      self._end_line()
      print(f"[{self.alg}] {report['memory'].line()}; compiled in {report['compile_s']:.1f}s", flush=True)

  def _end_line(self):
    if self._drawn:
      sys.stderr.write("\n")
      sys.stderr.flush()
      self._drawn = False

  def close(self):
    """Closes the file; ends the terminal's progress line."""
    self._end_line()
    if self.f is not None:
      self.f.close()
      self.f = None


def _dumps(rec: dict) -> str:
  """One strict-JSON line of a record (:func:`fedsim.files.strict_record`)."""
  from fedsim.files import strict_record
  return json.dumps(strict_record(rec), allow_nan=False)


FEW_POINTS = 20


def marker(num_points: int) -> str | None:
  """The marker of a plotted series of ``num_points`` points: ``"o"`` for at most
  :data:`FEW_POINTS` (a lone point is visible; sparse evaluations read as samples, not a
  continuous curve), None (a plain line) for more. Used by every fedsim figure.

  >>> marker(1), marker(500)
  ('o', None)
  """
  return "o" if num_points <= FEW_POINTS else None


def series_style(index: int, num_points: int) -> dict:
  """Keyword arguments for ``ax.plot`` of the ``index``-th series of a figure, of ``num_points``
  points: a colour of its own (matplotlib's ten-colour cycle ``C0``..``C9``, then the light
  shades of ``tab20``), and :func:`marker`'s marker. Used by every fedsim figure that draws
  several series, so that no two series share a colour and a short series stays visible.

  >>> series_style(0, 3)
  {'color': 'C0', 'marker': 'o', 'ms': 3}
  >>> series_style(1, 500)['marker'] is None
  True
  """
  if index < 10:
    color: object = f"C{index}"
  else:
    import matplotlib
    color = matplotlib.colormaps["tab20"]((2 * (index - 10) + 1) % 20)
  return {"color": color, "marker": marker(num_points), "ms": 3}


def plot_curves(histories: dict[str, list[dict]], path: str, title: str = ""):
  """Writes ``path``: objective vs rounds, objective vs queries, and test accuracy
  (or the attack accuracy, or the optimality gap) vs rounds when the records have it.

  Args:
    histories: algorithm label -> list of metrics records (``round``,
      ``queries``, ``objective``, optional ``test_accuracy``).
    path: the PNG file.
    title: the figure's title.
  """
  import matplotlib.ticker
  from matplotlib.figure import Figure  # no pyplot: the caller's backend is left alone

  extra = next((k for k in ("test_accuracy", "attack_accuracy", "optimality_gap")
                if any(k in r for h in histories.values() for r in h)), None)
  ncol = 3 if extra else 2
  fig = Figure(figsize=(5 * ncol, 4))
  axes = fig.subplots(1, ncol)
  for i, (name, hist) in enumerate(histories.items()):
    if not hist:
      continue
    rounds = [r["round"] for r in hist]
    # One colour per algorithm on every panel, even where a panel skips a series.
    axes[0].plot(rounds, [r["objective"] for r in hist], **series_style(i, len(hist)), label=name)
    q = [(r["queries"], r["objective"]) for r in hist if r["queries"] > 0]
    if q:
      axes[1].plot(*zip(*q), **series_style(i, len(q)), label=name)
    if extra:
      axes[2].plot(rounds, [r.get(extra, float("nan")) for r in hist], **series_style(i, len(hist)), label=name)
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
    if ax.get_legend_handles_labels()[0]:  # an empty panel (no queries yet) gets no legend (no warning)
      ax.legend()
  if title:
    fig.suptitle(title)
  fig.tight_layout()
  from fedsim.files import atomic_open
  with atomic_open(path, "wb") as f:
    fig.savefig(f, format="png", dpi=120)


DEFAULT_CACHE_DIR = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
                                 "fedsim", "jax")


def enable_compilation_cache(setting: str) -> str | None:
  """Turns on JAX's persistent compilation cache (process-wide), so a second run of the
  same programs loads them instead of compiling them again.

  Compiled programs are stored by a hash of the program, the backend, the device
  kind and the JAX/XLA versions, so a cached program is the same executable a
  fresh compilation gives: results do not change (tests/test_compilation_cache.py).
  Every program is stored, the smallest too (a cached run then compiles nothing).

  Args:
    setting: ``"auto"``: :data:`DEFAULT_CACHE_DIR` (``$XDG_CACHE_HOME/fedsim/jax``,
      else ``~/.cache/fedsim/jax``); ``""``: off (the JAX default is kept); any
      other string: that folder (created if missing).

  Returns:
    The folder in use, or None when off (also when ``"auto"``'s folder cannot be
    created, e.g. a read-only home: a warning says so and the run goes on uncached).

  Raises:
    ConfigError: (``compilation_cache``) a folder given explicitly cannot be created.
  """
  if not setting:
    return None
  import jax
  folder = DEFAULT_CACHE_DIR if setting == "auto" else os.path.expanduser(setting)
  try:
    os.makedirs(folder, exist_ok=True)
  except OSError as e:
    if setting != "auto":
      from fedsim.core.errors import ConfigError
      raise ConfigError("compilation_cache", f"cannot create {folder}: {e.strerror or e}") from None
    import warnings
    warnings.warn(f"compilation cache off: cannot create {folder} ({e.strerror or e})", stacklevel=2)
    return None
  jax.config.update("jax_compilation_cache_dir", folder)
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
  jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
  return folder


def set_blas_threads(n: int, load: bool = False) -> list:
  """Limits the BLAS/LAPACK libraries to ``n`` threads (0: leave the default), process-wide.

  The libraries loaded now are limited with threadpoolctl (a scikit-learn dependency);
  OpenBLAS libraries loaded later (jaxlib's LAPACK loads SciPy's OpenBLAS when a program
  first uses a factorisation) start with ``n`` threads from ``OPENBLAS_NUM_THREADS``, set
  here, so a run that never factorises never loads them (about 0.4 s of start-up). XLA's
  own CPU matmuls do not use these libraries and are unaffected.

  Args:
    n: threads (>= 0).
    load: load jaxlib's LAPACK first (one tiny Cholesky), so the result lists it.

  Returns:
    [[library path, threads]] of the loaded BLAS libraries after the change.
  """
  from threadpoolctl import threadpool_info, threadpool_limits
  if n > 0:
    os.environ["OPENBLAS_NUM_THREADS"] = str(n)
  if load:
    import jax
    import jax.numpy as jnp
    jax.block_until_ready(jax.jit(lambda: jnp.linalg.cholesky(jnp.eye(2)))())  # one program, not one per eager op
  if n > 0:
    threadpool_limits(limits=n, user_api="blas")
  return [[i["filepath"], i["num_threads"]] for i in threadpool_info() if i.get("user_api") == "blas"]


def results_table(histories: dict[str, list[dict]], total_s: float | None = None) -> str:
  """The end-of-run table: one row per algorithm with its last record's round, objective, task
  metrics (:data:`HEADLINE`: test accuracy, attack accuracy, optimality gap, where recorded),
  cumulative queries and bytes uploaded, and wall time; then the total time.

  Args:
    histories: algorithm label -> its records (``fedsim.run``'s return value); an algorithm
      with no record gets a row of ``-``.
    total_s: the whole run's seconds (set-up and every algorithm); None: no total line.

  Returns:
    The table as aligned text lines (no trailing newline); ``python -m experiments.run --rounds=30
    --eval_every=10`` (FedAvg and FedZO on the default task, measured on the 2-core host) ends with::

      algorithm  rounds  objective  test_accuracy  queries  bytes_up  wall_time
      fedavg         30    0.94634         0.8778   30,000    780 kB       1.3s
      fedzo          30     2.0379         0.8472  787,500    780 kB       4.5s
      total time 11.2s
  """
  metrics = [k for k, _ in HEADLINE if any(k in r for h in histories.values() for r in h)]
  header = ["algorithm", "rounds", "objective", *metrics, "queries", "bytes_up", "wall_time"]
  rows = []
  for label, hist in histories.items():
    if not hist:
      rows.append([label] + ["-"] * (len(header) - 1))
      continue
    last = hist[-1]

    def num(key, fmt, rec=last):
      v = rec.get(key)
      return "-" if v is None else format(v, fmt)
    rows.append([label, str(last["round"]), num("objective", ".5g"), *(num(k, ".4g") for k in metrics),
                 _count(last.get("queries")), _bytes(last.get("bytes_up")), duration(last.get("wall_time_s", 0.0))])
  widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
  lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()
           for r in [header, *rows]]
  if total_s is not None:
    lines.append(f"total time {duration(total_s)}")
  return "\n".join(lines)


def _count(n) -> str:
  """A count with thousands separators (``1,800,000``); a non-integer in 4 significant digits; ``-`` for None."""
  if n is None:
    return "-"
  return f"{int(n):,}" if float(n).is_integer() else f"{n:.4g}"


def _bytes(n) -> str:
  """Bytes with a decimal unit: ``_bytes(3_200_000) == '3.2 MB'``; ``-`` for None."""
  if n is None:
    return "-"
  for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
    if n >= size:
      return f"{n / size:.3g} {unit}"
  return f"{int(n)} B"
