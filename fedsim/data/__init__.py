"""Dataset loaders and federated partitioners (host-side numpy)."""

from fedsim.data.dataset import Dataset
from fedsim.data.digits import load_digits
from fedsim.data.federated import DATASETS, load_dataset, to_client_arrays
from fedsim.data.libsvm import load_libsvm, read_libsvm
from fedsim.data.mnist import load_mnist, read_idx
from fedsim.data.partitions import (
    METHODS,
    dirichlet,
    iid,
    label_skew,
    partition,
    quantity,
    shards,
)

__all__ = [
    "DATASETS",
    "Dataset",
    "METHODS",
    "dirichlet",
    "iid",
    "label_skew",
    "load_dataset",
    "load_digits",
    "load_libsvm",
    "load_mnist",
    "partition",
    "quantity",
    "read_idx",
    "read_libsvm",
    "shards",
    "to_client_arrays",
]
