"""Dataset loaders and federated partitioners (host-side numpy)."""

from fedsim.data.cifar10 import load_cifar10, read_cifar10_batch
from fedsim.data.dataset import Dataset
from fedsim.data.digits import load_digits
from fedsim.data.federated import DATASETS, load_dataset, to_client_arrays
from fedsim.data.libsvm import load_libsvm, read_libsvm
from fedsim.data.mnist import load_fashion_mnist, load_mnist, read_idx
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
    "load_cifar10",
    "load_digits",
    "load_fashion_mnist",
    "load_libsvm",
    "load_mnist",
    "partition",
    "quantity",
    "read_cifar10_batch",
    "read_idx",
    "read_libsvm",
    "shards",
    "to_client_arrays",
]
