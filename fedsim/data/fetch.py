"""The data cache: ``python -m fedsim.data fetch NAME`` downloads a dataset's official files.

One cache folder holds every fetched dataset: ``$FEDSIM_DATA`` when set, else
``$XDG_CACHE_HOME/fedsim/data``, else ``~/.cache/fedsim/data``
(:func:`cache_root`). Each dataset gets its own subfolder ``<cache>/<name>``,
laid out as its loader reads it (:data:`REGISTRY`):

* ``mnist/``, ``fashion_mnist/``: the four official IDX files, kept gzipped
  (:func:`fedsim.data.mnist.load_mnist` reads ``.gz``);
* ``cifar10/cifar-10-batches-bin/``: the binary release, untarred (the archive
  is deleted once extracted; :func:`fedsim.data.cifar10.load_cifar10` takes the
  parent folder);
* ``covtype/covtype``: LIBSVM's multiclass Covertype, decompressed from its
  ``.bz2`` (the archive is deleted): ``--dataset=libsvm
  --data_dir=<cache>/covtype/covtype``.

:func:`fedsim.data.load_dataset` reads ``<cache>/<name>`` when ``data_dir`` is
None and never downloads: a dataset not in the cache is an error that names
the ``fetch`` command.

Downloads go through ``pooch`` (a registry of URL and SHA-256 per file; every
file with a published hash is checked, a mismatch is refused and the file
deleted) with :class:`RangeDownloader`, which resumes an interrupted download
from its ``.part`` file by an HTTP Range request.
"""

from __future__ import annotations

import dataclasses
import hashlib
import http.client
import os
import shutil
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from pathlib import Path

from fedsim.core.errors import DataError

ENV = "FEDSIM_DATA"


@dataclasses.dataclass(frozen=True)
class File:
  """One file of a dataset's download.

  Attributes:
    url: where the file is published.
    sha256: its published SHA-256 (hex), or None where no published value was
      found (the file is then not verified; ``fetch`` prints the hash it got).
    size: its size in bytes as published with the hash, or None if unknown.
    unpack: ``"untar"`` (a .tar.gz archive, extracted into the dataset's
      folder), ``"bunzip2"`` (a .bz2 file, decompressed to its name without
      ``.bz2``), or None (kept as downloaded). An unpacked archive is deleted.
  """

  url: str
  sha256: str | None
  size: int | None = None
  unpack: str | None = None

  @property
  def name(self) -> str:
    return self.url.rsplit("/", 1)[-1]


@dataclasses.dataclass(frozen=True)
class Entry:
  """A dataset of the cache.

  Attributes:
    description: one line: what the files are and whose they are.
    files: the downloads.
    holds: paths relative to ``<cache>/<name>`` that are there once it is
      fetched (and unpacked): the dataset counts as cached when all exist.
    data_path: the path relative to ``<cache>/<name>`` that the loader reads
      (``""``: the folder itself).
  """

  description: str
  files: tuple[File, ...]
  holds: tuple[str, ...]
  data_path: str = ""


_IDX = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
        "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
_MNIST = "https://ossci-datasets.s3.amazonaws.com/mnist/"
_FASHION = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"
_CIFAR_BIN = tuple(f"cifar-10-batches-bin/data_batch_{i}.bin" for i in range(1, 6)) + (
    "cifar-10-batches-bin/test_batch.bin",)

REGISTRY: dict[str, Entry] = {
    # MNIST (LeCun, Cortes & Burges) from the mirror torchvision downloads from
    # (torchvision/datasets/mnist.py, MNIST.mirrors; the same four file names).
    # SHA-256 and sizes: tensorflow/datasets, tensorflow_datasets/url_checksums/mnist.txt
    # (its URLs are the storage.googleapis.com/cvdf-datasets/mnist/ mirror of the same files).
    # The two t10k values were also checked here against ../shared/data/mnist's files, whose MD5s
    # (shared/data/README.md) are torchvision's MD5s for this mirror.
    "mnist": Entry(
        "MNIST handwritten digits, 60,000 + 10,000 28x28 images (LeCun, Cortes & Burges; IDX files)",
        (File(_MNIST + _IDX[0], "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609", 9912422),
         File(_MNIST + _IDX[1], "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c", 28881),
         File(_MNIST + _IDX[2], "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6", 1648877),
         File(_MNIST + _IDX[3], "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6", 4542)),
        holds=_IDX),
    # Fashion-MNIST (Xiao, Rasul & Vollgraf, 2017) from its official S3 bucket (the links of
    # github.com/zalandoresearch/fashion-mnist; torchvision's FashionMNIST.mirrors). SHA-256 and
    # sizes: tensorflow/datasets, tensorflow_datasets/url_checksums/fashion_mnist.txt (same URLs).
    "fashion_mnist": Entry(
        "Fashion-MNIST, 60,000 + 10,000 28x28 clothing images (Xiao, Rasul & Vollgraf, 2017; IDX files)",
        (File(_FASHION + _IDX[0], "3aede38d61863908ad78613f6a32ed271626dd12800ba2636569512369268a84", 26421880),
         File(_FASHION + _IDX[1], "a04f17134ac03560a47e3764e11b92fc97de4d1bfaf8ba1a3aa29af54cc90845", 29515),
         File(_FASHION + _IDX[2], "346e55b948d973a97e58d2351dde16a484bd415d4595297633bb08f03db6a073", 4422102),
         File(_FASHION + _IDX[3], "67da17c76eaffca5446c3361aaab5c3cd6d1c2608764d35dfb1850b086bf8dd5", 5148)),
        holds=_IDX),
    # CIFAR-10 binary release (Krizhevsky, 2009). SHA-256 and size: tensorflow/datasets,
    # tensorflow_datasets/url_checksums/cifar10.txt (same URL).
    "cifar10": Entry(
        "CIFAR-10, 50,000 + 10,000 32x32 colour images (Krizhevsky, 2009; binary release)",
        (File("https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz",
              "c4a38c50a1bc5f3a1c5537f2155ab9d68f9f25eb1ed8d9ddda3db29a59bca1dd", 170052171, unpack="untar"),),
        holds=_CIFAR_BIN),
    # Covertype (UCI; 581,012 samples, 54 features, 7 classes) as LIBSVM's multiclass file: FZooS's
    # metric task (experiments/reproduce/papers/fzoos.py). NO published SHA-256 was found (LIBSVM's page
    # gives none; tensorflow/datasets has no LIBSVM files): this download is NOT verified.
    "covtype": Entry(
        "Covertype, 581,012 samples, 54 features, 7 classes (UCI; LIBSVM multiclass file, unscaled)",
        (File("https://www.csie.ntu.edu.tw/~cjlin/libsvmtools/datasets/multiclass/covtype.bz2", None,
              unpack="bunzip2"),),
        holds=("covtype",), data_path="covtype"),
}


class FetchError(DataError):
  """A download failed (offline, HTTP error, SHA-256 mismatch) or the name is unknown.

  ``str(err)`` is one line, ``"PATH: MESSAGE"``: PATH is the file in the cache
  being written and MESSAGE names the URL.
  """


def cache_root() -> Path:
  """The cache folder: ``$FEDSIM_DATA``, else ``$XDG_CACHE_HOME/fedsim/data``, else ``~/.cache/fedsim/data``.

  Not created here. Relative values are taken from the current folder.
  """
  if os.environ.get(ENV):
    return Path(os.environ[ENV]).expanduser().absolute()
  base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
  return Path(base).absolute() / "fedsim" / "data"


def dataset_dir(name: str, root: str | os.PathLike | None = None) -> Path:
  """``<cache>/<name>``: the folder that holds dataset ``name`` (``root`` overrides the cache)."""
  return Path(root if root is not None else cache_root()) / name


def is_cached(name: str, root: str | os.PathLike | None = None,
              registry: Mapping[str, Entry] | None = None) -> bool:
  """Whether every path of ``registry[name].holds`` is a file under ``<cache>/<name>``."""
  entry = (REGISTRY if registry is None else registry)[name]
  folder = dataset_dir(name, root)
  return all((folder / p).is_file() for p in entry.holds)


class RangeDownloader:
  """A pooch downloader that resumes: it appends to ``part`` (``<file>.part``) by an HTTP Range request.

  pooch calls it as ``downloader(url, output_file, pooch)``. Bytes already in
  ``part`` (from an interrupted download) are asked for no more: the request
  carries ``Range: bytes=<len(part)>-``. A ``206 Partial Content`` reply
  starting there is appended; any other reply restarts the file; ``416 Range
  Not Satisfiable`` means ``part`` is already whole. The finished ``part`` is
  moved to ``output_file`` for pooch to check its hash (a mismatch deletes it).
  An error mid-way, or a body shorter than its Content-Length, keeps ``part``
  for the next try (and raises an OSError).
  """

  def __init__(self, part: str | os.PathLike, timeout: float = 60.0):
    self.part = Path(part)
    self.timeout = timeout

  def __call__(self, url: str, output_file: str, pooch=None) -> None:
    have = self.part.stat().st_size if self.part.is_file() else 0
    request = urllib.request.Request(url, headers={"Range": f"bytes={have}-"} if have else {})
    try:
      response = urllib.request.urlopen(request, timeout=self.timeout)  # noqa: S310 (http(s) URLs of the registry)
    except urllib.error.HTTPError as e:
      if not (e.code == 416 and have):
        raise
      e.close()
    else:
      with response:
        resumed = response.status == 206 and response.headers.get("Content-Range", "").startswith(f"bytes {have}-")
        with open(self.part, "ab" if resumed else "wb") as f:
          start = f.tell()
          shutil.copyfileobj(response, f, 1 << 20)
          got, length = f.tell() - start, response.headers.get("Content-Length")
        if length is not None and got < int(length):  # http.client returns a cut-off body without an error
          raise ConnectionError(f"the connection closed after {got} of {length} bytes")
    os.replace(self.part, output_file)


def _sha256(path: Path) -> str:
  h = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      h.update(block)
  return h.hexdigest()


def _one_line(e: BaseException) -> str:
  if isinstance(e, urllib.error.URLError) and not isinstance(e, urllib.error.HTTPError):
    e = e.reason if isinstance(e.reason, BaseException) else e
  return " ".join(str(e).split()) or type(e).__name__


def fetch(name: str, root: str | os.PathLike | None = None, registry: Mapping[str, Entry] | None = None,
          log=print) -> Path:
  """Downloads dataset ``name`` into ``<cache>/<name>`` unless it is cached already.

  Args:
    name: a key of ``registry``.
    root: the cache folder (default :func:`cache_root`).
    registry: the datasets (default :data:`REGISTRY`; tests give their own URLs and hashes).
    log: called with one line per file fetched (and with the SHA-256 of a file without a
      published hash).

  Returns:
    The path the loader reads: ``<cache>/<name>/<data_path>``.

  Raises:
    FetchError: (a DataError, one line) ``name`` is unknown, or a download failed: no
      network, an HTTP error, or a SHA-256 that differs from the registry's (the file is
      deleted); the message names the URL and the cache file. A partial download stays in
      ``<file>.part`` and the next call resumes it.
  """
  import pooch  # here: pooch (and requests) cost start-up time every other command would pay

  reg = REGISTRY if registry is None else registry
  folder = dataset_dir(name, root)
  if name not in reg:
    raise FetchError(str(folder), f"unknown dataset {name!r}; accepted: {', '.join(reg)}")
  entry = reg[name]
  if is_cached(name, root, reg):
    return folder / entry.data_path
  folder.mkdir(parents=True, exist_ok=True)
  logger = pooch.get_logger()   # its "Downloading data from ..." repeats the line logged below
  level = logger.level
  logger.setLevel("WARNING")
  try:
    for file in entry.files:
      _fetch_file(pooch, file, folder, log)
  finally:
    logger.setLevel(level)
  return folder / entry.data_path


def _fetch_file(pooch, file: File, folder: Path, log) -> None:
  """:func:`fetch` of one file of a dataset into ``folder``."""
  target = folder / file.name
  processor = {"untar": pooch.Untar(extract_dir="."),
               "bunzip2": pooch.Decompress(method="bzip2", name=file.name.removesuffix(".bz2")),
               None: None}[file.unpack]
  log(f"fetching {file.url} -> {target}")
  try:
    pooch.retrieve(file.url, known_hash=f"sha256:{file.sha256}" if file.sha256 else None, fname=file.name,
                   path=folder, processor=processor,
                   downloader=RangeDownloader(folder / (file.name + ".part")))
  except ValueError as e:  # pooch: the SHA-256 differs (the download is deleted)
    raise FetchError(str(target), f"{file.url}: {_one_line(e)}") from None
  except (OSError, http.client.HTTPException) as e:  # no network, HTTP error, disk
    part = folder / (file.name + ".part")
    kept = f"; the {part.stat().st_size} bytes in {part.name} resume next time" if part.is_file() else ""
    raise FetchError(str(target), f"cannot download {file.url}: {_one_line(e)}{kept}") from None
  if file.sha256 is None and target.is_file():
    log(f"  {file.name}: no published SHA-256 to check against; its SHA-256 is {_sha256(target)}")
  if file.unpack and target.is_file():
    target.unlink()


def listing(root: str | os.PathLike | None = None, registry: Mapping[str, Entry] | None = None) -> list[str]:
  """The lines ``python -m fedsim.data`` prints: the cache folder, then per dataset its name, the
  download size (MB, 10^6 bytes; ``?`` where a file's size is not published), whether it is cached,
  and what it is."""
  reg = REGISTRY if registry is None else registry
  where = Path(root) if root is not None else cache_root()
  how = f"${ENV}" if root is None and os.environ.get(ENV) else ("given" if root is not None else f"default; set ${ENV}")
  lines = [f"data cache: {where} ({how})", f"{'name':<14} {'download':>10}  {'cached':<6}  description"]
  for name, entry in reg.items():
    sizes = [f.size for f in entry.files]
    size = "?" if None in sizes else f"{sum(s for s in sizes if s is not None) / 1e6:.1f} MB"
    cached = "yes" if is_cached(name, where, reg) else "no"
    lines.append(f"{name:<14} {size:>10}  {cached:<6}  {entry.description}")
  return lines


def main(argv: Iterable[str] | None = None, registry: Mapping[str, Entry] | None = None) -> int:
  """``python -m fedsim.data [fetch [--list] [NAME ...]]``; returns the exit status.

  No arguments, ``list`` or ``fetch --list``: :func:`listing`. ``fetch NAME ...`` (or ``fetch all``):
  :func:`fetch` each. Errors: one line ``error: ...`` on stderr and status 2.
  """
  import argparse
  import sys

  reg = REGISTRY if registry is None else registry

  class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, status 2 (argparse prints its usage too)
      print(f"error: {message}; usage: python -m fedsim.data [fetch [--list] NAME ...]", file=sys.stderr)
      raise SystemExit(2)

  parser = Parser(prog="python -m fedsim.data", description="Download datasets into the fedsim data cache "
                  f"(${ENV}, default {cache_root()}).")
  sub = parser.add_subparsers(dest="command")
  sub.add_parser("list", help="list the datasets, their sizes and whether they are cached")
  fetch_parser = sub.add_parser("fetch", help="download datasets (their official files, SHA-256 checked)")
  fetch_parser.add_argument("--list", action="store_true", help="list instead of downloading")
  fetch_parser.add_argument("names", nargs="*", metavar="NAME", help=f"{', '.join(reg)} or all")
  try:
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
  except SystemExit as e:
    return int(e.code or 0)
  if args.command is None or args.command == "list" or args.list:
    print("\n".join(listing(registry=reg)))
    return 0
  names = list(reg) if args.names == ["all"] else args.names
  if not names:
    print(f"error: fetch needs a dataset name: {', '.join(reg)} or all (--list lists them)", file=sys.stderr)
    return 2
  unknown = [n for n in names if n not in reg]
  if unknown:
    print(f"error: unknown dataset {unknown[0]!r}; accepted: {', '.join(reg)}, all", file=sys.stderr)
    return 2
  for name in names:
    try:
      path = fetch(name, registry=reg)
    except FetchError as e:
      print(f"error: {e}", file=sys.stderr)
      return 2
    print(f"{name}: {path}")
  return 0
