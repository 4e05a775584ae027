"""Shared fixtures: small tasks built from the embedded digits data; the session's data cache."""

import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest

from fedsim import data as fdata
from fedsim.tasks.classification import make_classification_task


def digits_task(num_clients=10, partition="dirichlet", seed=0, name="softmax"):
  ds = fdata.load_digits()
  parts = fdata.partition(ds.y_train, num_clients, partition, seed, dirichlet_alpha=0.5)
  return make_classification_task(name, ds, fdata.to_client_arrays(ds.x_train, ds.y_train, parts))


@pytest.fixture(scope="session")
def digits10():
  """Digits softmax, 10 clients, Dirichlet(0.5) label skew."""
  return digits_task(10)


def assert_close(a, b, rtol=1e-6, atol=1e-7):
  np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol)


# The data cache of the test session (fedsim.data.fetch): the flagfiles read MNIST and the others from
# $FEDSIM_DATA, so when ../shared/data (CI's real files, beside the checkout) is there, FEDSIM_DATA is
# a temporary cache whose folders link to it, laid out as `python -m fedsim.data fetch` lays it out.
# Without ../shared the user's own FEDSIM_DATA (or ~/.cache/fedsim/data) is used as it is.
SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
SHARED_LAYOUT = {"mnist": "mnist", "fashion_mnist": "fashion_mnist", "fashion-mnist": "fashion_mnist",
                 "cifar10": "cifar10", "cifar-10-batches-bin": "cifar10/cifar-10-batches-bin", "covtype": "covtype"}


def fill_cache_from_shared(cache, shared=SHARED_DATA):
  """Links each data folder of ``shared`` (a ../shared/data) to its place in the cache folder ``cache``."""
  for src, dst in SHARED_LAYOUT.items():
    target = Path(cache) / dst
    if (Path(shared) / src).is_dir() and not os.path.lexists(target):
      target.parent.mkdir(parents=True, exist_ok=True)
      target.symlink_to(Path(shared) / src, target_is_directory=True)


def pytest_configure(config):
  if SHARED_DATA.is_dir():
    cache = tempfile.mkdtemp(prefix="fedsim-data-")
    fill_cache_from_shared(cache)
    config.fedsim_data_cache = cache
    os.environ["FEDSIM_DATA"] = cache


def pytest_unconfigure(config):
  cache = getattr(config, "fedsim_data_cache", None)
  if cache:
    shutil.rmtree(cache, ignore_errors=True)   # the links only, not what they point at
