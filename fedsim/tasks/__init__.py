"""Objectives: supervised classification (softmax, mlp) and synthetic functions (quadratic).

``make_task`` builds a task from experiment settings; every task is a
:class:`fedsim.core.types.Task` and never knows which algorithm runs it.
"""

from __future__ import annotations

from fedsim.core.errors import ConfigError
from fedsim.tasks.classification import make_classification_task
from fedsim.tasks.quadratic import make_quadratic_task

TASKS = ("softmax", "mlp", "quadratic", "attack_cw")
SUPERVISED = ("softmax", "mlp")


def make_task(name: str, *, num_clients: int, seed: int = 0, dataset: str = "digits",
              data_dir: str | None = None, partition: str = "dirichlet", dirichlet_alpha: float = 0.5,
              shards_per_client: int = 2, quantity_law: str = "lognormal", quantity_sigma: float = 1.0,
              hidden_width: int = 64, dim: int = 300, heterogeneity: float = 5.0,
              target_class: int = 4, attack_c: float = 1.0, classifier: str = "mlp",
              cache_dir: str | None = None):
  """Builds task ``name``.

  Supervised tasks load ``dataset`` (fedsim.data.load_dataset), split its
  training set over ``num_clients`` clients with ``partition`` (seeded by
  ``seed``), and pad client arrays to the largest client. ``quadratic`` uses
  ``dim``, ``num_clients`` and ``heterogeneity`` (C). ``attack_cw`` (FedZO eq. 21)
  trains (or loads from ``cache_dir``) a ``classifier`` on ``dataset`` and splits
  its correctly classified ``target_class`` training images over the clients
  with quantity skew (``quantity_law``, ``quantity_sigma``); ``attack_c`` is the
  distortion weight c.

  Raises:
    ConfigError: unknown task, or a dataset / partition error (naming the flag
      or file).
  """
  if name == "quadratic":
    if dim < 1:
      raise ConfigError("dim", f"must be >= 1; got {dim}")
    if heterogeneity < 0:
      raise ConfigError("heterogeneity", f"must be >= 0; got {heterogeneity}")
    return make_quadratic_task(dim, num_clients, heterogeneity, seed=seed)
  if name not in TASKS:
    raise ConfigError("task", f"unknown {name!r}; accepted: {', '.join(TASKS)}")
  from fedsim import data as fdata
  ds = fdata.load_dataset(dataset, data_dir, seed=0)
  if name == "attack_cw":
    from fedsim.tasks.attack_cw import make_attack_cw_task
    return make_attack_cw_task(ds, num_clients, seed=seed, target_class=target_class, c=attack_c,
                               classifier=classifier, cache_dir=cache_dir, quantity_law=quantity_law,
                               quantity_sigma=quantity_sigma, dirichlet_alpha=dirichlet_alpha)
  parts = fdata.partition(ds.y_train, num_clients, partition, seed, dirichlet_alpha=dirichlet_alpha,
                          shards_per_client=shards_per_client, quantity_law=quantity_law,
                          quantity_sigma=quantity_sigma)
  clients = fdata.to_client_arrays(ds.x_train, ds.y_train, parts)
  info = {"dataset": ds.name, "dataset_info": ds.info, "partition": partition,
          "label_skew": float(fdata.label_skew(ds.y_train, parts, ds.num_classes))}
  return make_classification_task(name, ds, clients, hidden_width=hidden_width, info=info)
