r"""A grid over heterogeneity and hyperparameters, times seeds (BUILD.md, "Sweeps").

  python -m experiments.sweep --algorithm=fedzo --sweep=dirichlet_alpha=0.1,0.5,1.0 --seeds=5
  python -m experiments.sweep --flagfile=experiments/flagfiles/sweep_fedzo_alpha.cfg

Accepts every ``experiments.run`` flag, plus
  --sweep=NAME=V1,V2,...  (repeatable) NAME is any run flag (``dirichlet_alpha``,
                          ``heterogeneity``, ``homo_ratio``, ``clients_per_round``,
                          ...) or hyperparameter flag (``lr``, ``fedzo_lr``,
                          ``snr_db``, ...); the grid is the product of the lists;
  --seeds=K               seeds 0..K-1 (root key ``jax.random.key(seed)``; the
                          data partition uses the seed too, as ``run --seed``);
  --target=METRIC:VALUE   rounds and queries until METRIC first reaches VALUE
                          (>= for accuracies, <= for objective/loss/gap; force
                          with ``METRIC:>=VALUE`` or ``METRIC:<=VALUE``).

Each grid point is a ``fedsim.ExperimentConfig``: the flags' config
(``common.experiment_config``) with the point's swept values, task settings by
``dataclasses.replace`` and hyperparameters as ``hparams`` overrides (a shared name
such as ``lr`` for every algorithm of the run that has it, ``fedzo_lr`` for one);
the global flags are never rewritten.

Execution (fedsim/core/batched.py): the K seeds, and every value of a swept
numeric hyperparameter that traces (the builder accepts a traced scalar), run
as one vmapped compiled program; hyperparameters that do not trace (shapes,
Python control flow) and data-changing flags compile once per value (values
whose programs are identical share one compilation). The mode each swept name
gets is printed at start; the number of compilations is printed at the end and
stored in ``sweep_stats.json``.

Outputs under --output_dir (default runs/sweep): ``sweep_config.json`` (the
flags; a restart with different flags exits 2), ``results.csv`` (one row per
algorithm, configuration and seed, rewritten atomically after every group in a
fixed row order, so a killed sweep restarted with the same flags skips the
rows it has and ends with the same file; ``vmapped_members`` is how many runs
(seeds x traced values) shared the row's compiled program, ``group_wall_time_s``
that program's wall time), ``curves.csv`` (every member's per-round curve: one row per
algorithm, configuration, seed and evaluation with ``round``, ``queries``, ``bytes_up``,
``objective`` and the sweep's metric, e.g. ``test_accuracy``; kept and rewritten like
results.csv), ``curves.png`` (each metric against rounds: per algorithm and grid point
the mean over seeds with its 95% t-interval band), ``summary.csv`` (one row per algorithm
and grid point: n seeds, then mean, std and 95% t-interval of the final metric over the
seeds in columns named after it, e.g. ``final_test_accuracy_mean``,
``final_test_accuracy_ci95_low``), ``summary.png`` (final metric against the first swept
heterogeneity parameter, one line per algorithm (and value of the other swept names),
mean +- std over seeds), ``sweep_stats.json``. The log line of each group gives every vmapped value
apart (mean +- std over its seeds); the end of the log, the best value of each
swept hyperparameter per algorithm (and per value of the swept task settings)
with its 95% CI over the seeds.
Bad input exits 2 with one line before anything compiles.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import itertools
import json
import math
import os
import sys
import time

from absl import app, flags, logging

from experiments import common
from fedsim import api, run_folder
from fedsim.config import did_you_mean
from fedsim.core import compile_options
from fedsim.core.errors import ConfigError
from fedsim.files import atomic_open, atomic_write
from fedsim.runner import enable_compilation_cache, series_style, set_blas_threads

FLAGS = flags.FLAGS
common.define_flags()  # a no-op when experiments.run defined them in this process
flags.DEFINE_multi_string("sweep", [], "NAME=V1,V2,...: sweep the run flag or hyperparameter NAME "
                          "over the values (repeatable; the grid is the product)")
flags.DEFINE_integer("seeds", 1, "K: every configuration runs with seeds 0..K-1 (batched)")
flags.DEFINE_string("target", None, "METRIC:VALUE (or METRIC:>=VALUE / METRIC:<=VALUE): record "
                    "rounds and queries until METRIC first reaches VALUE")
flags.DEFINE_bool("batch_seeds", True, "vmap the seeds (and traced hyperparameter values) in one "
                  "program; false: one engine.simulate run after another (for comparison)")
FLAGS.set_default("output_dir", "runs/sweep")

# Flags a sweep cannot vary (the grid's own axes, or where the outputs go).
NOT_SWEEPABLE = ("algorithm", "seed", "output_dir", "num_devices", "x64", "save_learners",
                 "data_dir", "cache_dir", "flagfile")
# The x axis of summary.png: the first swept name in this list (else the first swept name).
HETEROGENEITY = ("dirichlet_alpha", "heterogeneity", "homo_ratio", "data_heterogeneity",
                 "quantity_sigma", "shards_per_client", "server_shift", "clients_per_round", "snr_db")
LOWER_IS_BETTER = ("objective", "loss", "gap", "error", "distortion")
SWEEP_FLAGS = ("sweep", "seeds", "target", "batch_seeds")


def _clock():
  if os.environ.get("FEDSIM_SWEEP_FIXED_CLOCK"):  # test hook: byte-identical results.csv
    return 0.0
  return time.perf_counter()


def _own_flags():
  return ({f.name for f in FLAGS.get_flags_for_module(sys.modules[common.__name__])}
          | set(SWEEP_FLAGS))


@dataclasses.dataclass(frozen=True)
class Target:
  metric: str
  value: float
  lower: bool  # reached when metric <= value

  def reached(self, x: float) -> bool:
    return x <= self.value if self.lower else x >= self.value


def parse_sweeps() -> list[tuple[str, list]]:
  """``--sweep`` entries as (name, parsed values), in command-line order.

  Raises:
    ConfigError: (flag ``sweep``) malformed entry, unknown or unsweepable name,
      repeated name or value, or a value the flag's parser rejects.
  """
  own = {f.name for f in FLAGS.get_flags_for_module(sys.modules[common.__name__])}
  sweepable = sorted(own - set(NOT_SWEEPABLE))
  out, seen = [], set()
  for entry in FLAGS.sweep:
    name, eq, values = entry.partition("=")
    name = name.strip()
    if not eq or not values.strip():
      raise ConfigError("sweep", f"{entry!r} is not NAME=V1,V2,...")
    if name not in own or name in NOT_SWEEPABLE:
      why = "use --seeds" if name == "seed" else (
          f"accepted: a run flag such as {', '.join(HETEROGENEITY[:4])}, lr, fedzo_lr "
          f"(any of {len(sweepable)} flags; not {', '.join(NOT_SWEEPABLE)})")
      hint = "" if name == "seed" else did_you_mean(name, sweepable)
      raise ConfigError("sweep", f"cannot sweep {name!r}{hint}; {why}")
    if name in seen:
      raise ConfigError("sweep", f"{name} is swept twice; give one --sweep={name}=... with all values")
    seen.add(name)
    parsed = []
    for v in values.split(","):
      try:
        parsed.append(FLAGS[name].parser.parse(v.strip()))
      except (ValueError, TypeError) as e:
        raise ConfigError("sweep", f"{name}={v.strip()!r}: {e}") from None
    if len(set(map(repr, parsed))) != len(parsed):
      raise ConfigError("sweep", f"{name}: a value is repeated in {values!r}")
    out.append((name, parsed))
  return out


def parse_target(keys: set[str] | None = None) -> Target | None:
  """``--target`` as a :class:`Target` (None when not given).

  Raises:
    ConfigError: (flag ``target``) malformed, or a metric the tasks do not report.
  """
  if not FLAGS.target:
    return None
  metric, colon, value = FLAGS.target.rpartition(":")
  if not colon or not metric:
    raise ConfigError("target", f"{FLAGS.target!r} is not METRIC:VALUE (e.g. test_accuracy:0.8)")
  lower = any(w in metric for w in LOWER_IS_BETTER)
  if value.startswith((">=", "<=")):
    lower, value = value.startswith("<="), value[2:]
  try:
    v = float(value)
  except ValueError:
    raise ConfigError("target", f"{value!r} is not a number (METRIC:VALUE)") from None
  if not math.isfinite(v):
    raise ConfigError("target", f"value must be finite; got {value}")
  if keys is not None and metric not in keys:
    raise ConfigError("target", f"unknown metric {metric!r}{did_you_mean(metric, keys)}; "
                      f"accepted: {', '.join(sorted(keys))}")
  return Target(metric, v, lower)


def _hp_target(name: str, alg: str) -> str | None:
  """The hyperparameter of ``alg`` that flag ``name`` sets, or None."""
  from fedsim import algorithms
  fields = algorithms.config_fields(alg)
  if name in common.HPARAMS and name in fields:
    return name
  if name.startswith(alg + "_") and name[len(alg) + 1:] in fields:
    return name[len(alg) + 1:]
  return None


def _is_hp_flag(name: str) -> bool:
  from fedsim import algorithms
  return name in common.HPARAMS or any(
      name.startswith(a + "_") and name[len(a) + 1:] in common.HPARAMS for a in algorithms.REGISTRY)


def curve_metrics(metric: str) -> list[str]:
  """curves.csv's value columns: the round, the cumulative ledgers, the objective and ``metric``.

  >>> curve_metrics("test_accuracy"), curve_metrics("objective")[-1]
  (['round', 'queries', 'bytes_up', 'objective', 'test_accuracy'], 'objective')
  """
  return ["round", "queries", "bytes_up", "objective", *([metric] if metric != "objective" else [])]


def _fmt(v) -> str:
  return repr(v) if isinstance(v, float) else str(v)


def _num(x) -> str:
  return "" if x is None else repr(float(x))


class Sweep:
  """The grid, its validation and its execution (see the module docstring)."""

  def __init__(self):
    from fedsim import algorithms
    self.sweeps = parse_sweeps()
    if FLAGS.seeds < 1:
      raise ConfigError("seeds", f"must be >= 1; got {FLAGS.seeds}")
    parse_target()  # syntax; the metric is checked against the tasks below
    self.names = [n for n, _ in self.sweeps]
    self.specs = list(FLAGS.algorithm)
    self.labels = [api.run_label(s) for s in self.specs]
    self.algs = {label: common.parse_spec(s)[0] for label, s in zip(self.labels, self.specs)}
    self.grid = [dict(zip(self.names, c)) for c in itertools.product(*[v for _, v in self.sweeps])]
    # Conflicts: a swept generic hyperparameter that a more specific flag or override shadows.
    for name in self.names:
      for spec in self.specs:
        alg, overrides = common.parse_spec(spec)
        hp = _hp_target(name, alg)
        if hp is None:
          continue
        if hp in overrides:
          raise ConfigError("sweep", f"{name} is also set by --algorithm={spec}; drop one")
        if name == hp and FLAGS[f"{alg}_{hp}"].present and hp not in common.CORE_HPARAMS:
          raise ConfigError("sweep", f"{name} is shadowed by --{alg}_{hp} for {alg}; drop one "
                            f"or sweep {alg}_{hp}")
        if name == hp and hp in common.CORE_HPARAMS and FLAGS[f"{alg}_{hp}"].present:
          raise ConfigError("sweep", f"{name} is shadowed by --{alg}_{hp} for {alg}; drop one")
    self.task_names = [n for n in self.names if not _is_hp_flag(n)]
    # Every grid point's config, before compiling anything: the first from the flags, the
    # others derived from it (every point sets every swept name).
    self.fields, self.base, self.points, self.resolved = common.config_fields(), None, {}, {}
    try:
      common.check_flags_reach_an_algorithm(given=self.names)
    except ConfigError as e:
      raise ConfigError("sweep", f"{_fmt_combo(self.grid[0])}: {e}") from None
    for combo in self.grid:
      self.point(combo)
    self.tasks = {}  # (task combo, seed) -> Task, for the current task combo only
    keys = set()
    for tcombo in self.task_combos():
      for seed in range(FLAGS.seeds):  # partitions can fail for some seeds only
        try:
          self.task(tcombo, seed)
        except ConfigError as e:
          where = f"{_fmt_combo(tcombo)}, " if tcombo else ""
          raise ConfigError("sweep", f"{where}seed {seed}: {e}") from None
      task = self.task(tcombo, 0)
      for combo in self.grid:
        if any(combo[n] != tcombo[n] for n in self.task_names):
          continue
        for label in self.labels:
          hp = self.hparams(label, combo)
          try:
            alg = algorithms.build(self.algs[label], self.run_task(label, task), **hp)
          except ConfigError:
            raise
          except ValueError as e:
            raise ConfigError("sweep", f"{label} at {_fmt_combo(combo)}: {e}") from None
          keys |= set(self.metric_keys(alg, self.run_task(label, task)))
    self.target = parse_target(keys)
    self.metric = self.target.metric if self.target else (
        "test_accuracy" if "test_accuracy" in keys else "objective")

  # --- the grid -------------------------------------------------------------
  def point(self, combo: dict):
    """The ``ExperimentConfig`` of grid point ``combo`` (seed of the flags), checked.

    Raises:
      ConfigError: (flag ``sweep``) the point's first bad setting, naming its flag.
    """
    key = tuple(_fmt(combo[n]) for n in self.names)
    if key not in self.points:
      changes = self.changes(combo)
      try:
        if self.base is None:
          self.base = self.points[key] = common.experiment_config(**changes)
        else:
          with common.cli_errors():
            self.points[key] = dataclasses.replace(self.base, **changes)
          common.check_config(self.points[key])
      except ConfigError as e:
        raise ConfigError("sweep", f"{_fmt_combo(combo)}: {e}") from None
    return self.points[key]

  def changes(self, combo: dict) -> dict:
    """The ExperimentConfig fields that differ from the flags' at ``combo``: a field of the
    swept name, a ``task_options`` entry (``common.TASK_OPTION_FLAGS``), or a hyperparameter
    in ``hparams[NAME]`` of each algorithm it reaches (``_hp_target``)."""
    out = {}
    options = dict(self.fields["task_options"])
    hparams = {k: dict(v) for k, v in self.fields["hparams"].items()}
    names = dict(self.fields["source_names"])
    for name, value in combo.items():
      if name in common.TASK_OPTION_FLAGS:
        options[common.TASK_OPTION_FLAGS[name]] = value
      elif name in self.fields:  # clients_per_round included
        out[name] = value
      else:
        for alg in dict.fromkeys(self.algs.values()):
          hp = _hp_target(name, alg)
          if hp is not None:
            hparams.setdefault(alg, {})[hp] = value
            names[f"hparams[{alg}].{hp}"] = f"--{name}"
    return dict(out, task_options=options, hparams=hparams, source_names=names)

  def task_combos(self):
    seen, out = set(), []
    for combo in self.grid:
      t = tuple((n, _fmt(combo[n])) for n in self.task_names)
      if t not in seen:
        seen.add(t)
        out.append({n: combo[n] for n in self.task_names})
    return out

  def task(self, tcombo: dict, seed: int):
    key = (tuple(_fmt(tcombo[n]) for n in self.task_names), seed)
    if key not in self.tasks:
      if self.tasks and next(iter(self.tasks))[0] != key[0]:
        self.tasks.clear()  # keep one task combination's K tasks in memory
      # A grid point with these task values (the grid is a product: the first values of the rest).
      point = self.point({**self.grid[0], **tcombo})
      self.tasks[key] = api.build_task(dataclasses.replace(point, seed=seed))
    return self.tasks[key]

  def hparams(self, label: str, combo: dict) -> dict:
    key = tuple(_fmt(combo[n]) for n in self.names)
    if key not in self.resolved:
      self.resolved[key] = self.point(combo).resolve()
    return dict(self.resolved[key][label].values)

  def run_task(self, label, task):
    if self.algs[label] in api.FFGB_FAMILY:  # scored on its value caches, as fedsim.run does
      from fedsim.tasks.functional import cache_view
      return cache_view(task)
    return task

  @staticmethod
  def metric_keys(alg, task):
    import jax

    from fedsim.core import rng

    def probe(key):
      s = alg.init(*rng.init_keys(key))
      out = dict(task.evaluate(alg.solution(s), task.data))
      if alg.metrics is not None:
        out.update(alg.metrics(s))
      return out
    return jax.eval_shape(probe, jax.random.key(0)).keys()

  def row_key(self, label, combo, seed):
    return (label, *(_fmt(combo[n]) for n in self.names), str(seed))

  def order(self):
    """Row keys in the fixed order of results.csv: algorithm, grid point, seed."""
    return [self.row_key(label, c, s) for label in self.labels for c in self.grid for s in range(FLAGS.seeds)]

  def header(self):
    cols = ["algorithm", *self.names, "seed", "final_objective", "best_objective"]
    if self.metric != "objective":
      cols += [f"final_{self.metric}", f"best_{self.metric}"]
    return cols + ["rounds_to_target", "queries_to_target", "rounds", "queries", "diverged",
                   "vmapped_members", "group_wall_time_s"]

  def curve_header(self):
    """curves.csv's columns: the row key of results.csv, then one evaluation's values."""
    return ["algorithm", *self.names, "seed", *curve_metrics(self.metric)]

  def curve_rows(self, label, combo, seed, hist) -> list[list[str]]:
    """curves.csv rows of one member: one per evaluation record (a metric a record lacks is empty)."""
    key = list(self.row_key(label, combo, seed))
    return [key + [str(rec[m]) if m in ("round", "queries", "bytes_up") else _num(rec.get(m))
                   for m in curve_metrics(self.metric)] for rec in hist]

  def modes(self, label, task):
    """Swept names of algorithm ``label`` -> (mode, reason); modes: ``vmap`` (traced,
    batched with the seeds), ``per_value`` (one program per value), ``data`` (task
    rebuilt per value), ``none`` (does not apply); plus whether seeds batch."""
    from fedsim import algorithms
    from fedsim.core.batched import hp_dtype, traceable
    alg = self.algs[label]
    def build(t, hp):
      return algorithms.build(alg, t, **hp)
    rt = self.run_task(label, task)
    base = self.hparams(label, self.grid[0])
    seeds_ok, why = traceable(build, rt, base, {})
    out = {}
    for name in self.names:
      hp = _hp_target(name, alg)
      if name in self.task_names:
        out[name] = ("data", "changes the task; programs shared where identical")
      elif hp is None:
        out[name] = ("none", f"not a hyperparameter of {alg}")
      elif not seeds_ok:
        out[name] = ("per_value", "the algorithm cannot take traced data")
      elif hp_dtype(base[hp]) is None:
        out[name] = ("per_value", f"{type(base[hp]).__name__} value")
      else:
        ok, reason = traceable(build, rt, {k: v for k, v in base.items() if k != hp}, {hp: base[hp]})
        out[name] = ("vmap", "traced scalar") if ok else ("per_value", reason)
    vm = [n for n, (m, _) in out.items() if m == "vmap"]
    if len(vm) > 1:  # jointly
      hps = {_hp_target(n, alg): base[_hp_target(n, alg)] for n in vm}
      ok, reason = traceable(build, rt, {k: v for k, v in base.items() if k not in hps}, hps)
      if not ok:
        out.update({n: ("per_value", "not jointly traceable: " + reason) for n in vm})
    return seeds_ok, why, out

  # --- execution --------------------------------------------------------------
  def run(self, out_dir: str, done: dict, stop_after: int | None, curves: dict | None = None):
    """Runs the groups not in ``done``; rewrites results.csv and curves.csv after each.

    Args:
      out_dir: the output folder.
      done: results.csv rows kept from an earlier start, by row key.
      stop_after: test hook: exit (like a kill) after this many groups.
      curves: curves.csv rows kept from an earlier start, by row key (completed in place).

    Returns:
      results.csv rows by row key.
    """
    import jax

    from fedsim import algorithms
    from fedsim.core import simulate
    from fedsim.core.batched import ProgramCache, simulate_batched
    from fedsim.core.errors import DivergenceError

    cache, serial_runs, K = ProgramCache(), 0, FLAGS.seeds
    header, order = self.header(), self.order()
    rows = dict(done)
    curves = curves if curves is not None else {}
    groups = []  # (tcombo, label, fixed values, [combos of the group])
    tcombos = self.task_combos()
    mode_cache = {}
    for tcombo in tcombos:
      for label in self.labels:
        if label not in mode_cache:
          mode_cache[label] = self.modes(label, self.task(tcombo, 0))
          seeds_ok, why, modes = mode_cache[label]
          how = ("vmapped in one program" if seeds_ok and FLAGS.batch_seeds else
                 "one simulate run each (--batch_seeds=false)" if seeds_ok else f"one simulate run each ({why})")
          print(f"[{label}] seeds: {how}", flush=True)
          for n, (m, reason) in modes.items():
            print(f"[{label}] {n}: {m} ({reason})", flush=True)
        _, _, modes = mode_cache[label]
        by_fixed = {}
        for combo in self.grid:
          if any(_fmt(combo[n]) != _fmt(tcombo[n]) for n in self.task_names):
            continue
          fixed = tuple((n, _fmt(combo[n])) for n in self.names if modes[n][0] != "vmap")
          by_fixed.setdefault(fixed, []).append(combo)
        groups += [(tcombo, label, combos) for combos in by_fixed.values()]

    t_start, n_run = _clock(), 0
    todo = [g for g in groups
            if not all(self.row_key(g[1], c, s) in done for c in g[2] for s in range(K))]
    print(f"sweep: {len(groups)} groups ({len(groups) - len(todo)} already in results.csv), "
          f"{len(self.grid)} configurations x {len(self.labels)} algorithms x {K} seeds", flush=True)
    for gi, (tcombo, label, combos) in enumerate(todo):
      alg_name = self.algs[label]
      seeds_ok, _, modes = mode_cache[label]
      vm_hps = [(n, _hp_target(n, alg_name)) for n in self.names if modes[n][0] == "vmap"]
      hp0 = self.hparams(label, combos[0])
      static = {k: v for k, v in hp0.items() if k not in {h for _, h in vm_hps}}
      traced = [{h: self.hparams(label, c)[h] for _, h in vm_hps} for c in combos] if vm_hps else []
      point = self.point(combos[0])  # rounds and eval_every are task names: the group's own
      rounds, eval_every = point.rounds_for(alg_name, hp0), point.eval_every
      tasks = [self.run_task(label, self.task(tcombo, s)) for s in range(K)]
      def build(t, hp, a=alg_name):
        return algorithms.build(a, t, **hp)
      t0 = _clock()
      results = {}  # (combo index, seed) -> (records, diverged, batch size)
      if seeds_ok and FLAGS.batch_seeds:
        from fedsim.core.batched import stack_padded
        batches = [list(range(K))] if stack_padded([t.data for t in tasks]) is not None else [[s] for s in range(K)]
        for b in batches:
          recs, div = simulate_batched(build, tasks[b[0]], [tasks[s].data for s in b], b, static,
                                       traced, rounds, eval_every, cache=cache, clock=_clock)
          for i, s in enumerate(b):
            for v in range(len(combos)):
              results[(v, s)] = (recs[i][v], div[i][v], len(b) * len(combos))
      else:
        for v, c in enumerate(combos):
          hp = self.hparams(label, c)
          for s in range(K):
            hist, diverged = [], False
            try:
              simulate(build(tasks[s], hp), tasks[s], rounds, eval_every, jax.random.key(s),
                       on_eval=hist.append)
              jax.block_until_ready(hist)
            except DivergenceError:
              diverged = True
            serial_runs += 1
            results[(v, s)] = (hist, diverged, 1)
      wall = _clock() - t0
      for v, c in enumerate(combos):
        for s in range(K):
          hist, diverged, bsize = results[(v, s)]
          rows[self.row_key(label, c, s)] = self.row(label, c, s, hist, diverged, bsize, wall)
          curves[self.row_key(label, c, s)] = self.curve_rows(label, c, s, hist)
      _write_csv(os.path.join(out_dir, "curves.csv"), self.curve_header(),
                 [row for k in order if k in curves for row in curves[k]])
      _write_csv(os.path.join(out_dir, "results.csv"), header,
                 [rows[k] for k in order if k in rows])
      n_run += 1
      el = _clock() - t_start
      eta = el / n_run * (len(todo) - n_run)
      desc = " ".join(f"{n}={_fmt(tcombo[n])}" for n in self.task_names)
      fixed = " ".join(f"{n}={_fmt(combos[0][n])}" for n in self.names
                       if n not in self.task_names and modes[n][0] != "vmap")
      vms = " x ".join(f"{n} in {len(set(_fmt(c[n]) for c in combos))}" for n, _ in vm_hps)
      per_value = []  # each vmapped value apart: mean +- std over its K seeds
      for v, c in enumerate(combos):
        finals = [_final(results[(v, s)][0], self.metric) for s in range(K)]
        name = " ".join(f"{n}={_fmt(c[n])}" for n, _ in vm_hps)
        per_value.append(f"{name + ' ' if name else ''}{_mean_std(finals)}")
      where = " ".join(w for w in (label, desc, fixed) if w)
      print(f"[{gi + 1}/{len(todo)}] {where} x {K} seeds{' x ' + vms if vms else ''}: "
            f"final {self.metric} (mean +- std over {K} seeds) {', '.join(per_value)} ({wall:.1f}s); "
            f"elapsed {el:.1f}s ETA {eta:.1f}s", flush=True)
      if stop_after is not None and n_run >= stop_after:
        print(f"test hook: stopping after {n_run} groups", flush=True)
        os._exit(3)  # like a kill: no clean-up
    stats = {"chunk_programs": cache.compiles.get("chunk", 0), "compilations": cache.compiles,
             "compilations_total": cache.total, "cache_hits": cache.hits,
             "compile_s": round(cache.seconds, 3), "serial_runs": serial_runs,
             "groups_run": n_run, "groups": len(groups), "wall_time_s": _clock() - t_start,
             "modes": {label: {n: m for n, (m, _) in mode_cache[label][2].items()} for label in mode_cache}}
    atomic_write(os.path.join(out_dir, "sweep_stats.json"), json.dumps(stats, indent=2, default=str))
    print(f"compiled programs: {stats['chunk_programs']} round-chunk programs "
          f"({cache.total} XLA compilations with init/eval: {cache.compiles}); "
          f"{serial_runs} unbatched runs", flush=True)
    return rows

  def row(self, label, combo, seed, hist, diverged, bsize, wall):
    """One results.csv row; ``bsize``: members of the vmapped program that ran it (seeds x traced
    values; 1 when run alone), ``wall``: that program's (the group's) wall seconds."""
    m = self.metric
    lower = any(w in m for w in LOWER_IS_BETTER) if not self.target else self.target.lower
    vals = [r.get(m) for r in hist if r.get(m) is not None and math.isfinite(r.get(m))]
    objs = [r["objective"] for r in hist if math.isfinite(r["objective"])]
    hit = next((r for r in hist if self.target and r.get(m) is not None
                and math.isfinite(r[m]) and self.target.reached(r[m])), None)
    last = hist[-1] if hist else {}
    out = {"algorithm": label, **{n: _fmt(combo[n]) for n in self.names}, "seed": str(seed),
           "final_objective": _num(last.get("objective")),
           "best_objective": _num(min(objs) if objs else None),
           "rounds_to_target": str(hit["round"]) if hit else "",
           "queries_to_target": str(hit["queries"]) if hit else "",
           "rounds": str(last.get("round", "")), "queries": str(last.get("queries", "")),
           "diverged": str(bool(diverged)), "vmapped_members": str(bsize), "group_wall_time_s": f"{wall:.3f}"}
    if m != "objective":
      out[f"final_{m}"] = _num(last.get(m))
      out[f"best_{m}"] = _num((min(vals) if lower else max(vals)) if vals else None)
    return [out[c] for c in self.header()]


def _final(hist, metric) -> float:
  """The last record's ``metric`` (NaN when missing or there is no record)."""
  v = hist[-1].get(metric) if hist else None
  return float("nan") if v is None else float(v)


def _mean_std(values) -> str:
  """``0.912 +- 0.011`` over the finite values (sample std; ``n/a`` for one value), with how many
  were not finite (diverged)."""
  import numpy as np
  ok = [v for v in values if math.isfinite(v)]
  bad = len(values) - len(ok)
  gone = f" ({bad} of {len(values)} not finite)" if bad else ""
  if not ok:
    return f"nan{gone}"
  std = f"{np.std(ok, ddof=1):.2g}" if len(ok) > 1 else "n/a"
  return f"{np.mean(ok):.4g} +- {std}{gone}"


SUMMARY_HEADER = ("n_seeds", "n_finite", "mean", "std", "ci95_low", "ci95_high")
# summary.csv names each statistic after its metric: mean -> final_test_accuracy_mean (issue 48).
SUMMARY_STATS = ("mean", "std", "ci95_low", "ci95_high")


def summary_columns(metric: str) -> list[str]:
  """summary.csv's statistic columns for ``metric``, in :data:`SUMMARY_HEADER`'s order.

  >>> summary_columns("test_accuracy")[:4]
  ['n_seeds', 'n_finite', 'final_test_accuracy_mean', 'final_test_accuracy_std']
  >>> summary_columns("objective")[4:]
  ['final_objective_ci95_low', 'final_objective_ci95_high']
  """
  return [f"final_{metric}_{c}" if c in SUMMARY_STATS else c for c in SUMMARY_HEADER]


def read_summary(path: str) -> list[dict]:
  """summary.csv's rows as dicts with :func:`summarize`'s keys (``mean``, ``ci95_low``, ...), from
  this version's files (``final_<metric>_mean``, ...) and from older ones (bare ``mean``, ...).
  The metric is added under ``metric`` (None for an old file, which does not name it)."""
  with open(path, newline="") as f:
    table = list(csv.DictReader(f))
  out = []
  for row in table:
    metric, entry = None, {}
    for col, value in row.items():
      stat = next((c for c in SUMMARY_STATS if col.startswith("final_") and col.endswith("_" + c)), None)
      if stat is not None:
        metric = col[len("final_"):-len(stat) - 1]
        col = stat
      entry[col] = value
    out.append({**entry, "metric": metric})
  return out


def summarize(sweep: Sweep, rows: list[list[str]]) -> list[dict]:
  """One entry per algorithm and grid point: its final metric over the seeds.

  Returns:
    Dicts with ``algorithm``, each swept name, ``n_seeds``, ``n_finite`` (seeds whose final
    value is finite), ``mean``, ``std`` (sample, ddof 1) and the 95% t-interval of the mean
    (``ci95_low``, ``ci95_high``: ``scipy.stats.t`` with n_finite - 1 degrees of freedom;
    NaN for fewer than 2 finite seeds), in results.csv's order.
  """
  import numpy as np
  from scipy import stats
  header = sweep.header()
  col = f"final_{sweep.metric}" if sweep.metric != "objective" else "final_objective"
  groups: dict[tuple, list[float]] = {}
  for r in rows:
    d = dict(zip(header, r))
    groups.setdefault((d["algorithm"], *(d[n] for n in sweep.names)), []).append(
        float(d[col]) if d[col] else float("nan"))
  out = []
  for key, vals in groups.items():
    ok = np.array([v for v in vals if math.isfinite(v)])
    n = len(ok)
    mean = float(ok.mean()) if n else float("nan")
    std = float(ok.std(ddof=1)) if n > 1 else float("nan")
    lo = hi = float("nan")
    if n > 1:
      lo, hi = (mean, mean) if std == 0 else stats.t.interval(0.95, n - 1, loc=mean, scale=std / math.sqrt(n))
    out.append({"algorithm": key[0], **dict(zip(sweep.names, key[1:])), "n_seeds": len(vals), "n_finite": n,
                "mean": mean, "std": std, "ci95_low": float(lo), "ci95_high": float(hi)})
  return out


def best_lines(sweep: Sweep, summary: list[dict]) -> list[str]:
  """For each algorithm and each combination of the swept non-hyperparameter names (e.g. each
  ``dirichlet_alpha``), the best value of the swept hyperparameters it has: the grid point
  with the best mean final metric among those whose every seed ended finite, with its 95% CI.
  No line when no hyperparameter of the algorithm is swept."""
  lower = sweep.target.lower if sweep.target else any(w in sweep.metric for w in LOWER_IS_BETTER)
  lines = []
  for label in sweep.labels:
    hps = [n for n in sweep.names if _is_hp_flag(n) and _hp_target(n, sweep.algs[label]) is not None]
    if not hps:
      continue
    conditions = [n for n in sweep.names if n not in hps]
    by_condition: dict[tuple, list[dict]] = {}
    for e in summary:
      if e["algorithm"] == label:
        by_condition.setdefault(tuple(e[n] for n in conditions), []).append(e)
    for cond, entries in by_condition.items():
      at = f" at {', '.join(f'{n}={v}' for n, v in zip(conditions, cond))}" if conditions else ""
      ok = [e for e in entries if e["n_finite"] == e["n_seeds"] and math.isfinite(e["mean"])]
      if not ok:
        lines.append(f"best {', '.join(hps)} for {label}{at}: none (every value had a non-finite final "
                     f"{sweep.metric})")
        continue
      b = (min if lower else max)(ok, key=lambda e: e["mean"])
      ci = (f"95% CI [{b['ci95_low']:.4g}, {b['ci95_high']:.4g}], t-interval over n={b['n_finite']} seeds"
            if b["n_finite"] > 1 else "no CI with n=1 seed (--seeds >= 2 gives one)")
      lines.append(f"best {', '.join(f'{n}={b[n]}' for n in hps)} for {label}{at}: final {sweep.metric} "
                   f"{b['mean']:.4g} ({ci}; {'lower' if lower else 'higher'} is better)")
  return lines


def write_summary(sweep: Sweep, summary: list[dict], path: str) -> None:
  """summary.csv: :func:`summarize`'s entries, one row per algorithm and grid point (atomically)."""
  cols = ["algorithm", *sweep.names, *SUMMARY_HEADER]
  _write_csv(path, ["algorithm", *sweep.names, *summary_columns(sweep.metric)],
             [[e[c] if c in ("algorithm", *sweep.names) or c.startswith("n_") else _num(e[c])
               for c in cols] for e in summary])


def _fmt_combo(combo):
  return ",".join(f"{n}={_fmt(v)}" for n, v in combo.items())


def _write_csv(path, header, rows):
  """Writes the whole table atomically (``fedsim.files.atomic_write``: temporary file, rename)."""
  buf = io.StringIO()
  w = csv.writer(buf, lineterminator="\n")
  w.writerow(header)
  w.writerows(rows)
  atomic_write(path, buf.getvalue())


# results.csv columns renamed by issue 36 (old name -> new): a sweep begun before resumes.
_RENAMED = {"batch_size": "vmapped_members", "wall_time_s": "group_wall_time_s"}


def _read_done(path, header, valid: set) -> dict:
  """Rows of an existing results.csv keyed like ``Sweep.row_key``; only keys of this grid."""
  if not os.path.exists(path):
    return {}
  with open(path, newline="") as f:
    table = list(csv.reader(f))
  if table:
    table[0] = [_RENAMED.get(c, c) for c in table[0]]
  if not table or table[0] != header:
    raise ConfigError("output_dir", f"{path} has other columns than this sweep; use a new --output_dir")
  n = header.index("seed") + 1
  return {tuple(r[:n]): r for r in table[1:] if tuple(r[:n]) in valid}


def _read_curves(path, header, valid: set) -> dict:
  """curves.csv rows of an earlier start, grouped by row key (this grid's keys only); none when the
  file is missing or has other columns (a sweep begun before curves were kept: those members' curves
  are missing, their results.csv rows are kept)."""
  if not os.path.exists(path):
    return {}
  with open(path, newline="") as f:
    table = list(csv.reader(f))
  if not table or table[0] != header:
    return {}
  n = header.index("seed") + 1
  out: dict[tuple, list] = {}
  for r in table[1:]:
    if tuple(r[:n]) in valid:
      out.setdefault(tuple(r[:n]), []).append(r)
  return out


def curve_bands(header: list[str], rows: list[list[str]], metric: str) -> dict[str, dict[int, tuple]]:
  """Mean and 95% t-interval over seeds of ``metric`` at each round, per algorithm and grid point.

  Args:
    header: curves.csv's columns (``algorithm``, the swept names, ``seed``, values).
    rows: curves.csv rows.
    metric: a value column (``objective``, ``test_accuracy``, ...).

  Returns:
    ``{"ALG[, NAME=VALUE...]": {round: (n finite, mean, low, high)}}`` in the rows' order, rounds
    ascending. ``low``/``high``: ``scipy.stats.t.interval(0.95, n - 1, mean, std / sqrt(n))``
    (sample std); both equal the mean for identical values, NaN for n < 2; a round with no
    finite value is left out.
  """
  import numpy as np
  from scipy import stats
  seed_at, col = header.index("seed"), header.index(metric)
  names = header[1:seed_at]
  values: dict[str, dict[int, list[float]]] = {}
  for r in rows:
    label = r[0] + "".join(f", {n}={v}" for n, v in zip(names, r[1:seed_at]))
    v = float(r[col]) if r[col] else float("nan")
    values.setdefault(label, {}).setdefault(int(r[header.index("round")]), []).append(v)
  out: dict[str, dict[int, tuple]] = {}
  for label, by_round in values.items():
    out[label] = {}
    for rnd in sorted(by_round):
      ok = np.array([v for v in by_round[rnd] if math.isfinite(v)])
      n = len(ok)
      if not n:
        continue
      mean = float(ok.mean())
      lo = hi = float("nan")
      if n > 1:
        std = float(ok.std(ddof=1))
        lo, hi = (mean, mean) if std == 0 else map(float, stats.t.interval(0.95, n - 1, loc=mean,
                                                                             scale=std / math.sqrt(n)))
      out[label][rnd] = (n, mean, lo, hi)
  return out


def plot_curves(header: list[str], rows: list[list[str]], metrics: list[str], path: str, seeds: int):
  """curves.png: one panel per metric against rounds; per algorithm and grid point the mean over
  seeds (:func:`curve_bands`) with its 95% t-interval as a band."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, axes = plt.subplots(1, len(metrics), figsize=(6 * len(metrics), 4), squeeze=False)
  for ax, metric in zip(axes[0], metrics):
    for i, (label, pts) in enumerate(curve_bands(header, rows, metric).items()):
      xs = sorted(pts)
      style = series_style(i, len(xs))
      ax.plot(xs, [pts[x][1] for x in xs], label=label, **style)
      band = [x for x in xs if math.isfinite(pts[x][2])]
      if band:
        ax.fill_between(band, [pts[x][2] for x in band], [pts[x][3] for x in band], color=style["color"],
                        alpha=0.2, linewidth=0)
    ax.set_xlabel("round")
    ax.set_ylabel(f"{metric.replace('_', ' ')} (mean, 95% t-interval over {seeds} seeds)")
    if metric == "optimality_gap":
      ax.set_yscale("log")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
      ax.legend(fontsize=8)
  fig.tight_layout()
  with atomic_open(path, "wb") as f:
    fig.savefig(f, format="png", dpi=120)
  plt.close(fig)


def plot_summary(sweep: Sweep, rows: list[list[str]], path: str):
  """summary.png: final metric against the first swept heterogeneity parameter."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  import numpy as np
  header = sweep.header()
  col = f"final_{sweep.metric}" if sweep.metric != "objective" else "final_objective"
  x_name = next((n for n in sweep.names if n in HETEROGENEITY), sweep.names[0] if sweep.names else None)
  others = [n for n in sweep.names if n != x_name]
  lines = {}
  for r in rows:
    d = dict(zip(header, r))
    key = d["algorithm"] + "".join(f", {n}={d[n]}" for n in others)
    x = d[x_name] if x_name else "-"
    y = float(d[col]) if d[col] else float("nan")
    lines.setdefault(key, {}).setdefault(x, []).append(y)
  fig, ax = plt.subplots(figsize=(6, 4))
  numeric = True
  try:
    [float(x) for pts in lines.values() for x in pts]
  except ValueError:
    numeric = False
  for i, (key, pts) in enumerate(lines.items()):
    xs = list(pts)
    pos = [float(x) for x in xs] if numeric else list(range(len(xs)))
    mean = [np.nanmean(pts[x]) for x in xs]
    std = [np.nanstd(pts[x], ddof=1) if len(pts[x]) > 1 else 0.0 for x in xs]
    style = series_style(i, len(xs))
    style["marker"] = style["marker"] or "."  # each point is a swept value: always marked
    ax.errorbar(pos, mean, yerr=std, capsize=3, label=key, **style)
    if not numeric:
      ax.set_xticks(pos, xs)
  xs_all = [float(x) for pts in lines.values() for x in pts] if numeric else []
  if xs_all and min(xs_all) > 0 and max(xs_all) >= 10 * min(xs_all):
    ax.set_xscale("log")
  ax.set_xlabel(x_name or "")
  ax.set_ylabel(f"final {sweep.metric} (mean \u00b1 std, {FLAGS.seeds} seeds)")
  ax.legend(fontsize=8)
  ax.grid(alpha=0.3)
  fig.tight_layout()
  with atomic_open(path, "wb") as f:
    fig.savefig(f, format="png", dpi=120)
  plt.close(fig)


def main(argv):
  del argv
  if not FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)
  out_dir = FLAGS.output_dir
  try:
    with common.cli_errors():  # the library's messages in flag form
      sweep = Sweep()  # validates the flags at every grid point
      api.check_output_dir(out_dir)
      if os.path.exists(os.path.join(out_dir, run_folder.CONFIG_FILE)):
        raise ConfigError("output_dir", f"{out_dir} holds a run ({run_folder.CONFIG_FILE}); use another --output_dir")
      lock = run_folder.FolderLock(out_dir, "sweep")  # one writer per folder, for the sweep's whole life
    config = {k: v for k, v in sorted(FLAGS.flag_values_dict().items())
              if k in _own_flags() and k != "output_dir"}
    config = json.loads(json.dumps(config, default=str))
    cfg_path = os.path.join(out_dir, "sweep_config.json")
    if FLAGS.overwrite:  # a fresh sweep: the old table goes (the flags are recorded anew)
      for name in ("sweep_config.json", "results.csv", "curves.csv"):
        if os.path.exists(os.path.join(out_dir, name)):
          os.remove(os.path.join(out_dir, name))
    config.pop("overwrite", None)
    if os.path.exists(cfg_path):
      with open(cfg_path) as f:
        old = json.load(f)
      old.pop("overwrite", None)
      diff = sorted(api.settings_diff(old, config))
      if diff:
        raise ConfigError("output_dir", f"{out_dir} holds a sweep with other flags "
                          f"({api.describe_diff([('--' + d, a, b) for d, a, b in diff])}); "
                          "use a new --output_dir, the same flags, or --overwrite")
    elif os.path.exists(os.path.join(out_dir, "results.csv")):
      raise ConfigError("output_dir", f"{out_dir}/results.csv exists without sweep_config.json; "
                        "use a new --output_dir")
    valid = set(sweep.order())
    done = _read_done(os.path.join(out_dir, "results.csv"), sweep.header(), valid)
    curves = _read_curves(os.path.join(out_dir, "curves.csv"), sweep.curve_header(), valid)
  except ConfigError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
  os.makedirs(out_dir, exist_ok=True)
  if not os.path.exists(cfg_path):
    atomic_write(cfg_path, json.dumps(config, indent=2, sort_keys=True))
  enable_compilation_cache(sweep.base.compilation_cache)
  compile_options.set_cpu_emitters(sweep.base.xla_cpu_emitters)
  set_blas_threads(sweep.base.blas_threads)
  stop = os.environ.get("FEDSIM_SWEEP_STOP_AFTER")  # test hook: simulate a kill
  rows = sweep.run(out_dir, done, int(stop) if stop else None, curves)
  ordered = [rows[k] for k in sweep.order() if k in rows]
  curve_rows = [row for k in sweep.order() if k in curves for row in curves[k]]
  plot_curves(sweep.curve_header(), curve_rows, curve_metrics(sweep.metric)[3:], os.path.join(out_dir, "curves.png"),
              FLAGS.seeds)
  summary = summarize(sweep, ordered)
  write_summary(sweep, summary, os.path.join(out_dir, "summary.csv"))
  plot_summary(sweep, ordered, os.path.join(out_dir, "summary.png"))
  for line in best_lines(sweep, summary):
    print(line, flush=True)
  print(f"wrote {out_dir}/results.csv ({len(ordered)} rows), curves.csv ({len(curve_rows)} rows), curves.png, "
        f"summary.csv ({len(summary)} rows), summary.png, sweep_stats.json", flush=True)
  lock.release()


if __name__ == "__main__":
  app.run(main, flags_parser=common.parse_flags_or_exit)
