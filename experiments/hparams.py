"""Prints one algorithm's hyperparameters: name, type, default, accepted values or range, source.

  python -m experiments.hparams fedzo
  python -m experiments.hparams fedzo --markdown   # its HYPERPARAMETERS.md section, verbatim

The table is that algorithm's section of HYPERPARAMETERS.md, made by the same
function from its config dataclass (``fedsim.config.table_rows``); the lines
under it name the values the run uses instead of the dataclass's default (the
registry preset, ``fedsim.api.RUN_DEFAULTS``) and how to set each field from the
command line. An unknown NAME exits 2 with one line (and a suggestion).
"""

from __future__ import annotations

import sys
import textwrap

USAGE = "usage: python -m experiments.hparams NAME [--markdown]"


def algorithm_table(name: str, markdown: bool = False) -> str:
  """The text ``python -m experiments.hparams NAME`` prints.

  Raises:
    ConfigError: ``name`` is not in ``fedsim.algorithms.REGISTRY`` (with a suggestion).
  """
  from fedsim import algorithms, api, config
  if name not in algorithms.REGISTRY:
    accepted = list(algorithms.REGISTRY)
    raise config.FieldError("algorithm", f"unknown algorithm {name!r}{config.did_you_mean(name, accepted)}; "
                            f"accepted: {', '.join(accepted)}")
  cls = algorithms.REGISTRY[name][0]
  entries = [(n, ov) for n, (c, ov, _) in algorithms.REGISTRY.items() if c is cls]
  if markdown:
    return config.markdown_section(cls, entries).lstrip("\n")
  rows = [tuple(c.replace("`", "") for c in row) for row in config.table_rows(cls)]
  cols = [0, 1, 2, 3, 5]  # help goes on its own line under the row
  heads = [config.TABLE_COLUMNS[i] for i in cols]
  widths = [max(len(h), *(len(r[i]) for r in rows)) for h, i in zip(heads, cols[:-1])]
  lines = [config.table_title(cls, entries).replace("`", "") + f"  (module {cls.__module__})", ""]
  lines.append("  ".join(h.ljust(w) for h, w in zip(heads, widths)) + "  " + heads[-1])
  for row in rows:
    lines.append("  ".join(row[i].ljust(w) for i, w in zip(cols, widths)) + "  " + row[5])
    lines += textwrap.wrap(row[4], width=116, initial_indent="    ", subsequent_indent="    ")
  preset = {**algorithms.REGISTRY[name][1], **api.RUN_DEFAULTS.get(name, {})}
  if preset:
    lines += ["", f"{name} runs with " + ", ".join(f"{k}={v!r}" for k, v in preset.items())
              + " instead of the default above (registry preset, fedsim.api.RUN_DEFAULTS)"]
  lines += ["", f"Set a field F: --{name}_F=V (this algorithm), --F=V (every algorithm of the run that has F) "
            f"or an --algorithm={name}:F=V entry;", f"from Python: fedsim.ExperimentConfig(hparams="
            f"{{{name!r}: {{'F': V}}}}). Fields marked (no flag) are set by the registry or the run."]
  return "\n".join(lines)


def main(argv: list[str]) -> int:
  args = argv[1:]
  if any(a in ("-h", "--help", "-help", "--helpshort") for a in args):
    print(__doc__.split("\n\n")[0] + "\n\n" + USAGE)
    return 0
  markdown = "--markdown" in args
  names = [a for a in args if a != "--markdown"]
  bad = [a for a in names if a.startswith("-")]
  if bad or len(names) != 1:
    why = f"unknown flag {bad[0]}" if bad else ("give one algorithm NAME" if not names
                                                  else f"one NAME only; got {' '.join(names)}")
    print(f"error: {why} ({USAGE})", file=sys.stderr)
    return 2
  from fedsim.core.errors import ConfigError
  try:
    print(algorithm_table(names[0], markdown))
  except ConfigError as e:
    print(f"error: {getattr(e, 'message', e)}", file=sys.stderr)
    return 2
  return 0


def _run() -> int:
  """``main``, quiet when a pager or ``head`` closes the pipe early (the Python docs' recipe: stdout pointed
  at devnull so the interpreter's final flush does not raise again)."""
  try:
    code = main(sys.argv)
    sys.stdout.flush()
    return code
  except BrokenPipeError:
    import os
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


if __name__ == "__main__":
  sys.exit(_run())
