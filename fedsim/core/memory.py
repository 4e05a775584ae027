"""The round chunk's memory: XLA's measured estimate against the memory available.

:func:`fedsim.core.engine.simulate` compiles its chunk program ahead of time
(``jax.jit(chunk).lower(...).compile()``, before the initial state is allocated
where it can) and asks :func:`estimate` for the compiled program's own sizes
(``compiled.memory_analysis()``: arguments, outputs, the outputs' bytes that
reuse donated arguments, temporaries, generated code; per device) and for the
memory :func:`available_bytes` reports (an accelerator's ``bytes_limit`` less
``bytes_in_use`` from ``device.memory_stats()``; on the CPU the host's
``MemAvailable`` from /proc/meminfo, else ``os.sysconf``). :meth:`MemoryEstimate.check`
refuses a run whose program needs more than is available with a
:class:`~fedsim.core.errors.ConfigError` naming the algorithm's settings that
shrink it (:data:`SHRINKING`), before the run allocates its state or runs a round.

Example::

  compiled = engine.make_chunk(alg).lower(state, task.data, key, np.int32(0), 5, np.int32(5)).compile()
  est = memory.estimate(compiled, (state, task.data, key, np.int32(0), np.int32(5)))
  print(est.line())   # memory: round chunk ... (MemoryEstimate.line)
  est.check(alg)      # ConfigError when est.needed > est.available
"""

from __future__ import annotations

import dataclasses
import os

import jax

from fedsim.core.errors import ConfigError

# The algorithm settings that shrink the round chunk's memory, with what each does
# (the config fields of fedsim/algorithms that carry them: FedAvg/FedOpt and FedZO
# ``client_block``, FZooS ``rff_cache`` and ``history_size``).
SHRINKING = {
    "client_block": "client_block=B runs the sampled clients B at a time (a smaller B holds fewer "
                    "clients' work at once)",
    "rff_cache": "rff_cache=0 drops the per-client RFF feature cache (N x rff_window x (num_rff + "
                 "rff_window) reals) from the state",
    "history_size": "history_size=H > 0 keeps each client's last H queries instead of the whole run's",
}


def available_bytes(device: jax.Device | None = None) -> tuple[int, str]:
  """Memory free for a program on ``device`` now, in bytes, and where the number comes from.

  Args:
    device: a JAX device (default: ``jax.local_devices()[0]``).

  Returns:
    ``(bytes, source)``: on a device whose ``memory_stats()`` has ``bytes_limit`` (GPU, TPU)
    ``bytes_limit - bytes_in_use`` and ``"<device kind> memory"``; otherwise (the CPU) the
    host's ``MemAvailable`` (/proc/meminfo), else ``SC_AVPHYS_PAGES x SC_PAGE_SIZE``, and
    ``"host MemAvailable"`` / ``"host free pages"``.
  """
  device = device or jax.local_devices()[0]
  stats = None
  if device.platform != "cpu":
    try:
      stats = device.memory_stats()
    except Exception:  # pylint: disable=broad-except  # a backend without memory statistics
      stats = None
  if stats and "bytes_limit" in stats:
    return int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0)), f"{device.device_kind} memory"
  try:
    with open("/proc/meminfo") as f:
      for line in f:
        if line.startswith("MemAvailable:"):
          return int(line.split()[1]) * 1024, "host MemAvailable"
  except OSError:
    pass
  return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "host free pages"


def _gb(n: float) -> str:
  """``n`` bytes in GB (1e9), MB or kB with 3 significant digits, or bytes below 1 kB.

  >>> _gb(4.3e9), _gb(12_500_000), _gb(2_600), _gb(0)
  ('4.3 GB', '12.5 MB', '2.6 kB', '0 B')
  """
  for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
    if abs(n) >= size:
      return f"{n / size:.3g} {unit}"
  return f"{int(n)} B"


@dataclasses.dataclass(frozen=True)
class MemoryEstimate:
  """A compiled program's memory (bytes, per device; XLA's ``memory_analysis()``) and what is available.

  Attributes:
    argument, output, alias, temp, code: ``argument_size_in_bytes``, ``output_size_in_bytes``,
      ``alias_size_in_bytes`` (outputs written into donated arguments), ``temp_size_in_bytes``,
      ``generated_code_size_in_bytes`` of the compiled program.
    resident: argument bytes already in memory when the estimate was made (the task's data;
      the state too when it exists), per device.
    devices: the devices the program runs on that share ``available`` (the local CPU devices
      share the host's memory; an accelerator counts its own).
    available: bytes free (:func:`available_bytes`); source: where that number comes from.
  """
  argument: int
  output: int
  alias: int
  temp: int
  code: int
  resident: int
  devices: int
  available: int
  source: str

  @property
  def total(self) -> int:
    """Bytes the program holds while it runs, per device: arguments + outputs - aliased + temporaries + code."""
    return self.argument + self.output - self.alias + self.temp + self.code

  @property
  def needed(self) -> int:
    """Bytes it still needs beyond what is in memory, over the devices sharing ``available``."""
    return max(0, self.total - self.resident) * self.devices

  def line(self) -> str:
    """One line: the program's memory and what is available. FZooS's defaults on the default task
    (digits softmax, N = 100, 300 rounds; measured on the 2-core host)::

      memory: round chunk 11.5 GB (arguments 10.5 GB, outputs 10.5 GB of which 10.5 GB in donated
      arguments, temporaries 1.03 GB, code 0 B); needs 11.5 GB beyond the 1.17 MB already in memory,
      22.4 GB available (host MemAvailable)
    """
    per = " per device" if self.devices > 1 else ""
    return (f"memory: round chunk {_gb(self.total)} (arguments {_gb(self.argument)}, outputs {_gb(self.output)} "
            f"of which {_gb(self.alias)} in donated arguments, temporaries {_gb(self.temp)}, code {_gb(self.code)})"
            f"{per}; needs {_gb(self.needed)} beyond the {_gb(self.resident * self.devices)} already in memory, "
            f"{_gb(self.available)} available ({self.source})")

  def check(self, algorithm) -> None:
    """Refuses a program that needs more memory than is available.

    Args:
      algorithm: the ``FederatedAlgorithm`` (its ``name`` and ``hparams`` name the settings).

    Raises:
      ConfigError: ``needed > available``; ``flag`` is the first of the algorithm's
        :data:`SHRINKING` settings as its CLI flag (``fzoos_rff_cache``), or ``num_clients``
        when it has none; the message gives the sizes and every such setting with its value.
    """
    if self.needed <= self.available:
      return
    name = getattr(algorithm, "name", "algorithm")
    fields = {f.name for f in dataclasses.fields(algorithm.hparams)} if dataclasses.is_dataclass(
        algorithm.hparams) else set()
    have = [k for k in SHRINKING if k in fields]
    hints = "; ".join(f"{SHRINKING[k]} (now {getattr(algorithm.hparams, k)})" for k in have)
    fix = (f"settings of {name} that shrink it: {hints}" if have else
           f"{name} has no memory setting ({', '.join(SHRINKING)}); fewer clients (num_clients) or a smaller "
           "model shrink its state")
    raise ConfigError(f"{name}_{have[0]}" if have else "num_clients",
                      f"{name}'s round chunk needs {_gb(self.needed)} more memory than the "
                      f"{_gb(self.available)} available ({self.source}; compiled program: {_gb(self.total)}"
                      f"{' per device' if self.devices > 1 else ''}, temporaries {_gb(self.temp)}); {fix}")


def estimate(compiled, args) -> MemoryEstimate:
  """:class:`MemoryEstimate` of ``compiled`` (a ``jax.stages.Compiled``) called on ``args``.

  Args:
    compiled: the compiled program.
    args: its (non-static) arguments, as a tuple; concrete ``jax.Array`` leaves count as
      already in memory (one device's shard each), abstract ones (``jax.ShapeDtypeStruct``) not.

  Returns:
    The estimate, with :func:`available_bytes` of the program's first device.
  """
  ma = compiled.memory_analysis()
  shardings = compiled.input_shardings[0]
  resident, devices = [0], set[jax.Device]()

  def visit(s, a):
    if s is None:      # an argument the program does not use (pruned)
      return
    devices.update(d for d in s.device_set if d.process_index == jax.process_index())
    if isinstance(a, jax.Array) and not a.is_deleted():
      resident[0] += a.addressable_shards[0].data.nbytes
  jax.tree_util.tree_map(visit, shardings, args, is_leaf=lambda x: x is None)
  ordered = sorted(devices, key=lambda d: d.id) or jax.local_devices()[:1]
  first = ordered[0]
  available, source = available_bytes(first)
  return MemoryEstimate(
      argument=int(ma.argument_size_in_bytes), output=int(ma.output_size_in_bytes),
      alias=int(ma.alias_size_in_bytes), temp=int(ma.temp_size_in_bytes),
      code=int(ma.generated_code_size_in_bytes), resident=int(resident[0]),
      devices=len(ordered) if first.platform == "cpu" else 1, available=available, source=source)
