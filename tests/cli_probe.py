"""Checks many command-line flag sets with ``experiments.common.validate`` in one subprocess.

One process (one JAX import) parses every set with the run binary's flags and
reports, per set, ``None`` (accepted) or ``[flag, message]`` of the
``ConfigError`` raised, so a test sees the same flag name and one-line message
the CLI prints, before anything is built.
"""

import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_PROBE = r"""
import json, sys
from experiments import run  # defines the flags
from experiments import common
from fedsim.core.errors import ConfigError
out = []
for args in json.loads(sys.argv[1]):
  common.FLAGS.unparse_flags()
  common.FLAGS(["run"] + args)
  try:
    common.validate()
    out.append(None)
  except ConfigError as e:
    out.append([e.flag, str(e)])
print(json.dumps(out))
"""


def validate_flag_sets(cases: list[list[str]]) -> list:
  """``[None or [flag, message]]``, one per flag set of ``cases`` (asserts the probe ran)."""
  proc = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(cases)], cwd=REPO, capture_output=True,
                        text=True, timeout=300, env=dict(os.environ, JAX_PLATFORMS="cpu"))
  assert proc.returncode == 0, proc.stderr[-3000:]
  return json.loads(proc.stdout.strip().splitlines()[-1])
