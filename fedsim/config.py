"""Hyperparameter fields that carry their own help, accepted values and source.

Each algorithm's config dataclass is the single source of truth for its
hyperparameters: every field is declared with :func:`hparam`, whose metadata
holds the help text, the accepted values or range and the paper source. The
dataclass calls :func:`validate` from its ``__post_init__``, so a bad value
raises :class:`FieldError` (a :class:`~fedsim.core.errors.ConfigError`) naming
the field, what is accepted and the value given, from Python and from the CLI
alike; :func:`check_keys` rejects unknown names with a "did you mean"
suggestion. ``experiments/common.py`` generates the command-line flags and
their help from the same metadata (:func:`describe`, :func:`field_type`);
``fedsim.ExperimentConfig`` runs the checks when a config is made, for the CLI
and Python alike.

Example::

  @chex.dataclass(frozen=True)
  class MyConfig:
    lr: float = hparam(0.1, help="client learning rate (eta)", low=0, low_open=True,
                       finite=True, source="McMahan et al. 2017 §3")

    def __post_init__(self):
      validate(self)
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import numbers
import os
import sys
import typing
from collections.abc import Iterable
from typing import Any

from fedsim.core.errors import ConfigError, DataError


class FieldError(ConfigError):
  """A config field (or key) is invalid; the message is worded without ``--``.

  ``str(err)`` is ``"FIELD: MESSAGE"``. Attributes: ``flag`` and ``field`` (the
  field name) and ``message`` (the text after ``FIELD:`` and a space), so the CLI can
  print the same message under its own flag name; ``cli``: the whole line the
  CLI prints instead when the message names other settings (``--overwrite``
  where Python says ``overwrite=True``), else None.
  """

  def __init__(self, field: str, message: str, cli: str | None = None):
    ValueError.__init__(self, f"{field}: {message}")
    self.flag = field
    self.field = field
    self.message = message
    self.cli = cli


class FieldTypeError(FieldError, TypeError):
  """A setting given a value of the wrong type, or a setting that does not exist (a FieldError and a
  ``TypeError``, as Python's own for a bad argument).

  ``str(err)`` is ``"FIELD: expected TYPE, got TYPE: ..."`` (:func:`check_type`) or ``"KEY: unknown
  setting of OWNER; ..."`` (:func:`check_keys`).
  """


class DataFieldError(FieldError, DataError):
  """A :class:`~fedsim.core.errors.DataError` of the data a setting names (``data_dir``).

  ``str(err)`` is ``"FIELD: PATH: MESSAGE"``; ``field`` and ``flag`` are the setting,
  ``path`` the folder or file at fault, ``message`` ``"PATH: MESSAGE"``, and ``cli`` the
  line the CLI prints, ``"--FIELD PATH: MESSAGE"``.
  """

  def __init__(self, field: str, error: DataError):
    message = str(error)
    FieldError.__init__(self, field, message, cli=f"--{field} {message}")
    self.path = error.path


def hparam(default: Any, *, help: str, choices: Iterable | None = None,  # noqa: A002 (help)
           low: float | None = None, high: float | None = None, low_open: bool = False,
           high_open: bool = False, finite: bool = False, source: str | None = None,
           cli: bool = True) -> Any:
  """A dataclass field whose metadata describes the hyperparameter.

  Args:
    default: the default value (a scalar; ``None`` means "the algorithm or the
      task chooses" and is always accepted).
    help: one-line help text (the flag help and the README table).
    choices: the accepted values of a string (or enumerated) field.
    low, high: the accepted range of a numeric field (None: unbounded).
    low_open, high_open: exclude ``low`` / ``high`` themselves.
    finite: reject +-inf (NaN is always rejected).
    source: where the value or the rule comes from (paper section, code file).
    cli: False for fields that the registry entry or the run sets (e.g. a
      variant's ``server_optimizer``, FZooS's ``rounds``): no command-line flag.

  Returns:
    A ``dataclasses.field`` with ``default`` and the metadata above.
  """
  meta = {"help": help, "choices": tuple(choices) if choices is not None else None,
          "low": low, "high": high, "low_open": low_open, "high_open": high_open,
          "finite": finite, "source": source, "cli": cli}
  return dataclasses.field(default=default, metadata=meta)


@functools.cache
def _type_hints(cls) -> dict:
  return typing.get_type_hints(cls)


def field_type(cls, name: str) -> type:
  """The scalar type of field ``name`` of ``cls`` (``int | None`` -> ``int``)."""
  hint = _type_hints(cls)[name]
  args = [a for a in typing.get_args(hint) if a is not type(None)]
  return args[0] if args else hint


def range_text(meta) -> str | None:
  """``meta``'s accepted range in words ("> 0", "in [0, 1)", ">= 1 and finite"), or None."""
  lo, hi = meta.get("low"), meta.get("high")
  if lo is None and hi is None:
    text = "a number"
  elif hi is None:
    text = f"{'>' if meta['low_open'] else '>='} {lo:g}"
  elif lo is None:
    text = f"{'<' if meta['high_open'] else '<='} {hi:g}"
  else:
    text = f"in {'(' if meta['low_open'] else '['}{lo:g}, {hi:g}{')' if meta['high_open'] else ']'}"
  if lo == -math.inf and meta["low_open"] and hi is None:
    text = "a number or +inf (not -inf)"
  if meta.get("finite"):
    text += " and finite"
  return None if text == "a number" else text


def describe(f: dataclasses.Field) -> str:
  """Help text of a field with its accepted values and source, for flag help and docs."""
  meta = f.metadata
  extra = []
  rng = range_text(meta)
  if meta.get("choices"):
    extra.append(f"one of {', '.join(map(str, meta['choices']))}")
  elif rng:
    extra.append(rng)
  if meta.get("source"):
    extra.append(meta["source"])
  return meta["help"] + (f" [{'; '.join(extra)}]" if extra else "")


def did_you_mean(key: Any, accepted: Iterable) -> str:
  """``" (did you mean 'X'?)"`` for the accepted string closest to ``key`` (difflib), else ``""``."""
  if not isinstance(key, str):
    return ""
  close = difflib.get_close_matches(key, [a for a in accepted if isinstance(a, str)], n=1)
  return f" (did you mean {close[0]!r}?)" if close else ""


_TYPE_WORDS = {bool: "a bool", int: "an integer", float: "a number", str: "a string"}


def check_type(name: str, value: Any, typ: type, optional: bool = False) -> None:
  """Checks that ``value`` is of the scalar type ``typ`` of setting ``name``.

  ``bool`` accepts True/False (and 0/1), ``int`` integers but bools, ``float`` real numbers but
  bools, ``str`` strings (and ``os.PathLike`` paths where ``optional``); None passes where
  ``optional``. Other types are not checked.

  Raises:
    FieldTypeError: ``"NAME: expected int, got str: '5' is not an integer"``.
  """
  if typ not in _TYPE_WORDS or (value is None and optional):
    return
  if typ is bool:
    ok = isinstance(value, (bool, numbers.Integral)) and value in (0, 1)
  elif typ is int:
    ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
  elif typ is float:
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
  else:
    ok = isinstance(value, (str, os.PathLike) if optional else str)
  if not ok:
    got = "None" if value is None else f"{type(value).__name__}: {value!r} is not {_TYPE_WORDS[typ]}"
    raise FieldTypeError(name, f"expected {typ.__name__}{' or None' if optional else ''}, got {got}")


def check_value(name: str, value: Any, meta, typ: type | None = None, optional: bool = False) -> None:
  """Checks one value against a field's metadata.

  Values that are neither None, strings nor real numbers (tracers, arrays a
  pytree operation rebuilt the dataclass with) are not checked.

  Raises:
    FieldError: naming ``name``, the accepted values or range and ``value``.
  """
  if value is None:
    if optional:
      return
    raise FieldError(name, "must be given; got None")
  choices = meta.get("choices")
  if choices is not None:
    if isinstance(value, (str, numbers.Number)) and value not in choices:
      raise FieldError(name, f"unknown {value!r}{did_you_mean(value, choices)}; "
                       f"accepted: {', '.join(map(str, choices))}")
    return
  numeric = typ in (int, float)
  if isinstance(value, str):
    if numeric:
      raise FieldError(name, f"must be a{'n integer' if typ is int else ' number'}; got {value!r}")
    return
  if not isinstance(value, numbers.Real) or isinstance(value, bool) or not numeric:
    return
  if typ is int and not float(value).is_integer():
    raise FieldError(name, f"must be an integer; got {value}")
  lo, hi = meta.get("low"), meta.get("high")
  ok = not math.isnan(value)
  ok = ok and not (meta.get("finite") and math.isinf(value))
  if lo is not None:
    ok = ok and (value > lo if meta["low_open"] else value >= lo)
  if hi is not None:
    ok = ok and (value < hi if meta["high_open"] else value <= hi)
  if not ok:
    raise FieldError(name, f"must be {range_text(meta) or 'a number'}; got {value}")


def hparam_fields(cls) -> list:
  """The fields of dataclass ``cls`` declared with :func:`hparam`."""
  return [f for f in dataclasses.fields(cls) if "help" in f.metadata]


def validate(cfg) -> None:
  """Checks every :func:`hparam` field of dataclass instance ``cfg`` against its metadata.

  Called from ``__post_init__``: chex rebuilds a dataclass pytree without
  ``__init__`` and then calls ``__post_init__`` with whatever leaves a JAX tree
  operation produced (tracers, sentinels); that call is not checked.

  Raises:
    FieldError: (a ConfigError) naming the first bad field, its accepted values
      or range and the value given.
  """
  caller = sys._getframe(1)
  if caller.f_code.co_name == "__post_init__" and caller.f_back is not None and \
      caller.f_back.f_code.co_name == "_dataclass_unflatten":
    return
  cls = type(cfg)
  for f in hparam_fields(cls):
    check_value(f.name, getattr(cfg, f.name), f.metadata, field_type(cls, f.name),
                optional=f.default is None)


def check_keys(config_cls, keys: Iterable[str], owner: str | None = None) -> None:
  """Raises FieldError for the first key that is not a field of ``config_cls``.

  Args:
    config_cls: a config dataclass.
    keys: the names given.
    owner: what the keys configure, for the message (default: the class name).

  Raises:
    FieldTypeError: (a FieldError and a TypeError) naming the unknown key, with a "did
      you mean X?" suggestion (difflib) when a field name is close, else the accepted names.
  """
  names = [f.name for f in dataclasses.fields(config_cls)]
  for key in keys:
    if key in names:
      continue
    owner = owner or config_cls.__name__
    close = difflib.get_close_matches(key, names, n=1)
    hint = f"did you mean {close[0]}?" if close else f"accepted: {', '.join(names)}"
    raise FieldTypeError(key, f"unknown setting of {owner}; {hint}")


# --- the hyperparameter table (HYPERPARAMETERS.md and ``python -m experiments.hparams NAME``) ---

TABLE_COLUMNS = ("field", "type", "default", "accepted", "help", "source")


def accepted_text(f: dataclasses.Field) -> str:
  """A field's accepted values in words: its choices, its range (``None`` noted when allowed)."""
  meta = f.metadata
  if meta.get("choices"):
    return ", ".join(f"`{c}`" for c in meta["choices"])
  text = range_text(meta) or ""
  if f.default is None:
    text = f"{text} or None" if text else "any or None"
  return text


def table_rows(cls) -> list[tuple[str, str, str, str, str, str]]:
  """One row per :func:`hparam` field of config class ``cls`` (:data:`TABLE_COLUMNS`): name
  (`` (no flag)`` when ``cli=False``), type, default (repr), accepted values, help, source.

  The one source of the hyperparameter tables: ``tools/hparams_doc.py`` writes them as
  HYPERPARAMETERS.md, ``experiments.hparams`` prints one to the terminal.
  """
  rows = []
  for f in hparam_fields(cls):
    typ = field_type(cls, f.name)
    rows.append((f.name + ("" if f.metadata.get("cli", True) else " (no flag)"),
                 getattr(typ, "__name__", str(typ)), repr(f.default), accepted_text(f),
                 f.metadata["help"], f.metadata.get("source") or ""))
  return rows


def table_title(cls, entries: Iterable[tuple[str, dict]]) -> str:
  """``"FedZOConfig: `fedzo`, `fedzo_x` (k='v')"``: the class and the registry names that use it,
  each with its registry overrides (``entries``: ``(NAME, overrides)``)."""
  parts = []
  for name, overrides in entries:
    extra = ", ".join(f"{k}={v!r}" for k, v in sorted(overrides.items()))
    parts.append(f"`{name}`" + (f" ({extra})" if extra else ""))
  return f"{cls.__name__}: {', '.join(parts)}"


def markdown_section(cls, entries: Iterable[tuple[str, dict]]) -> str:
  """HYPERPARAMETERS.md's section of config class ``cls`` (:func:`table_title`, :func:`table_rows`)."""
  def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
  head = "| " + " | ".join(TABLE_COLUMNS) + " |\n|" + "---|" * len(TABLE_COLUMNS) + "\n"
  def first(name: str) -> str:  # the field name in backticks, " (no flag)" after it
    field, _, rest = name.partition(" ")
    return f"`{field}`" + (f" {rest}" if rest else "")
  body = "".join("| " + " | ".join([first(name), *(cell(c) for c in row)]) + " |\n"
                 for name, *row in table_rows(cls))
  return f"\n## {table_title(cls, entries)}\n\nModule `{cls.__module__}`.\n\n{head}{body}"
