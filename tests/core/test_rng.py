"""fedsim.core.rng's host-side keys against jax.random's."""

import zlib

import jax
import numpy as np
import pytest

from fedsim.core import rng


def _same(a, b):
  assert a.dtype == b.dtype and a.shape == b.shape and a.committed == b.committed and a.sharding == b.sharding
  assert np.array_equal(jax.random.key_data(a), jax.random.key_data(b))


@pytest.mark.parametrize("seed", [0, 1, 7, 12345, 2 ** 31 - 1])
def test_root_key_and_streams_are_jax_randoms(seed):
  root = rng.root_key(seed)
  _same(root, jax.random.key(seed))
  for name in rng.STREAMS:
    _same(rng.stream(root, name), jax.random.fold_in(jax.random.key(seed), zlib.crc32(name.encode()) & 0x7FFFFFFF))


def test_host_threefry_is_jax_threefry_on_random_words():
  # threefry_2x32(key, (0, data)) = fold_in(key, data) for arbitrary key words and data < 2^31.
  words = np.random.default_rng(0).integers(0, 2 ** 32, size=(64, 3), dtype=np.uint64)
  for k0, k1, d in words:
    d = int(d) & 0x7FFFFFFF
    key = jax.random.wrap_key_data(np.array([k0, k1], np.uint32))
    want = np.asarray(jax.random.key_data(jax.random.fold_in(key, d)))
    assert rng._threefry2x32(int(k0), int(k1), 0, d) == tuple(int(w) for w in want)


def test_traced_committed_and_other_seeds_fall_back():
  for seed in (-1, 2 ** 31, 2 ** 40):  # outside the host path: jax.random.key's own rules
    try:
      want = jax.random.key(seed)
    except OverflowError:
      with pytest.raises(OverflowError):
        rng.root_key(seed)
      continue
    _same(rng.root_key(seed), want)
  committed = jax.device_put(jax.random.key(3), jax.devices()[0])
  _same(rng.stream(committed, "rounds"), jax.random.fold_in(committed, zlib.crc32(b"rounds") & 0x7FFFFFFF))
  traced = jax.jit(lambda k: jax.random.key_data(rng.stream(k, "init")))(jax.random.key(5))
  assert np.array_equal(traced, jax.random.key_data(rng.stream(jax.random.key(5), "init")))


def test_no_program_for_the_run_keys():
  compiled = []
  jax.monitoring.register_event_duration_secs_listener(
      lambda event, secs, **kw: compiled.append(kw.get("fun_name")) if event.endswith("backend_compile_duration")
      else None)
  root = rng.root_key(11)
  rng.init_keys(root), rng.stream(root, "rounds")
  assert compiled == []
