r"""The checkpoint suite's job worker: one ``experiments.run`` job, its checkpoint cadences timed side by side.

  python -m experiments.bench.checkpoint_job SPEC_JSON

``SPEC_JSON``: ``{"flags": [experiments.run flags, e.g. "--flagfile=...", "--rounds=3000"],
"variants": [[name, checkpoint_every, checkpoint_interval_s or null], ...], "repeats": R}``.
A process of its own, because the run's flags (``experiments.common``) and the benchmark's share
names. The flags make the ``fedsim.ExperimentConfig`` exactly as ``python -m experiments.run``
does; each variant replaces ``checkpoint_every`` / ``checkpoint_interval_s``. Each variant gets
one untimed call (compilation), then ``R`` timed calls of :func:`fedsim.run` into a fresh
output folder, the variants in alternation (``time_interleaved``); ``saves`` counts
``fedsim.core.checkpoint.save`` calls per run. Prints one JSON line: ``{name: {"seconds": [...],
"cpu_seconds": [...], "cpu_per_wall", "saves", "records_equal_to_first"}}``.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
import tempfile


def main(argv: list[str]) -> None:
  spec = json.loads(argv[1])
  from experiments import common
  common.define_flags()
  common.parse_flags_or_exit([argv[0], *spec["flags"]])
  import fedsim
  from experiments.bench.util import time_interleaved
  from fedsim.core import checkpoint

  base = common.experiment_config()
  base = dataclasses.replace(base, progress=False)
  saves = [0]
  real_save = checkpoint.save

  def counting_save(*args, **kwargs):
    saves[0] += 1
    return real_save(*args, **kwargs)
  checkpoint.save = counting_save   # the engine calls checkpoint.save: every save is counted
  work = tempfile.mkdtemp(prefix="fedsim-bench-checkpoint-job-")
  out: dict = {}
  records: dict = {}

  def variant(name, every, interval):
    cfg = dataclasses.replace(base, checkpoint_every=every, **({} if interval is None else
                                                                {"checkpoint_interval_s": interval}))

    def call():
      d = tempfile.mkdtemp(dir=work)
      saves[0] = 0
      h = fedsim.run(cfg, output_dir=d)
      out.setdefault(name, {"saves": []})["saves"].append(saves[0])
      records[name] = {k: [{n: v for n, v in r.items() if n != "wall_time_s"} for r in recs] for k, recs in h.items()}
      shutil.rmtree(d)
    return call

  try:
    t = time_interleaved({name: (variant(name, every, interval), True) for name, every, interval in spec["variants"]},
                         spec["repeats"], 0.0)
  finally:
    shutil.rmtree(work, ignore_errors=True)
  first = spec["variants"][0][0]
  result = {name: {"seconds": t[name]["seconds"], "cpu_seconds": t[name]["cpu_seconds"],
                   "cpu_per_wall": t[name]["cpu_per_wall"], "saves": out[name]["saves"][1:],   # timed calls only
                   "records_equal_to_first": records[name] == records[first]}
            for name, _, _ in spec["variants"]}
  print(json.dumps(result), flush=True)


if __name__ == "__main__":
  main(sys.argv)
