"""Shared fixtures: small tasks built from the embedded digits data."""

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
