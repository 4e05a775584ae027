"""The data cache (fedsim.data.fetch): downloads from a local HTTP server, SHA-256 checks, resume,
offline failure, the CLI, and runs reading the cache when data_dir is None."""

from __future__ import annotations

import bz2
import gzip
import hashlib
import http.server
import io
import os
import re
import socket
import subprocess
import sys
import tarfile
import threading
from pathlib import Path

import numpy as np
import pytest

from fedsim.config import FieldError
from fedsim.core.errors import DataError
from fedsim.data import fetch, load_dataset, load_libsvm, load_mnist

REPO = Path(__file__).resolve().parents[2]
SHARED_MNIST = REPO.parent / "shared" / "data" / "mnist"


class _Server(http.server.ThreadingHTTPServer):
  files: dict[str, bytes]
  requests: list[tuple[str, str | None]]   # (path, Range header)
  cut_after: int | None                    # send only this many bytes of a full reply, then close


class _Handler(http.server.BaseHTTPRequestHandler):
  """Serves ``server.files`` by path; honours ``Range: bytes=N-`` with 206 (416 past the end)."""

  def do_GET(self):  # noqa: N802 (http.server's name)
    srv = self.server
    rng = self.headers.get("Range")
    srv.requests.append((self.path, rng))
    body = srv.files.get(self.path)
    if body is None:
      self.send_error(404)
      return
    start = int(re.fullmatch(r"bytes=(\d+)-", rng).group(1)) if rng else 0
    if start >= len(body) and rng:
      self.send_response(416)
      self.send_header("Content-Range", f"bytes */{len(body)}")
      self.send_header("Content-Length", "0")
      self.end_headers()
      return
    self.send_response(206 if rng else 200)
    if rng:
      self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
    self.send_header("Content-Length", str(len(body) - start))
    self.end_headers()
    part = body[start:]
    if srv.cut_after is not None and not rng:
      part = part[:srv.cut_after]   # the connection drops mid-way
    self.wfile.write(part)

  def log_message(self, *args):
    pass


@pytest.fixture
def server():
  srv = _Server(("127.0.0.1", 0), _Handler)
  srv.files, srv.requests, srv.cut_after = {}, [], None
  thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
  thread.start()
  srv.base = f"http://127.0.0.1:{srv.server_address[1]}"
  yield srv
  srv.shutdown()
  srv.server_close()


def _sha(b: bytes) -> str:
  return hashlib.sha256(b).hexdigest()


def _serve(srv, name: str, body: bytes, sha: str | None = "right", unpack=None) -> fetch.File:
  srv.files["/" + name] = body
  return fetch.File(f"{srv.base}/{name}", _sha(body) if sha == "right" else sha, len(body), unpack)


def _closed_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def test_fetch_downloads_checks_and_then_reuses(server, tmp_path):
  body = os.urandom(5000)
  reg = {"blob": fetch.Entry("a blob", (_serve(server, "blob.bin", body),), holds=("blob.bin",))}
  logged = []
  path = fetch.fetch("blob", tmp_path, reg, log=logged.append)
  assert path == tmp_path / "blob" and (path / "blob.bin").read_bytes() == body
  assert not list(path.glob("*.part")) and not list(path.glob("tmp*"))
  assert fetch.is_cached("blob", tmp_path, reg)
  assert len(server.requests) == 1
  fetch.fetch("blob", tmp_path, reg)                 # cached: nothing asked of the server
  assert len(server.requests) == 1


def test_sha256_mismatch_is_refused_and_the_file_deleted(server, tmp_path):
  body = b"not what was published" * 100
  url_file = _serve(server, "x.gz", body, sha="0" * 64)
  reg = {"x": fetch.Entry("x", (url_file,), holds=("x.gz",))}
  with pytest.raises(fetch.FetchError) as e:
    fetch.fetch("x", tmp_path, reg)
  msg = str(e.value)
  assert "\n" not in msg and url_file.url in msg and str(tmp_path / "x" / "x.gz") in msg
  assert "0" * 64 in msg and _sha(body) in msg        # pooch's words: expected ... but got ...
  assert isinstance(e.value, DataError)
  assert sorted(p.name for p in (tmp_path / "x").iterdir()) == []   # no file, no .part, no temporary
  assert not fetch.is_cached("x", tmp_path, reg)


def test_an_interrupted_download_resumes_from_its_part_file(server, tmp_path):
  body = os.urandom(300_000)
  reg = {"big": fetch.Entry("big", (_serve(server, "big.bin", body),), holds=("big.bin",))}
  server.cut_after = 120_000
  with pytest.raises(fetch.FetchError, match=r"cannot download .*big\.bin: .*120000 bytes in big\.bin\.part resume"):
    fetch.fetch("big", tmp_path, reg)
  part = tmp_path / "big" / "big.bin.part"
  assert part.read_bytes() == body[:120_000]
  server.cut_after = None
  fetch.fetch("big", tmp_path, reg)
  assert (tmp_path / "big" / "big.bin").read_bytes() == body and not part.exists()
  assert server.requests[-1] == ("/big.bin", "bytes=120000-")   # only the rest was asked for


def test_a_whole_part_file_is_finished_by_a_416_and_a_stale_one_restarts(server, tmp_path):
  body = os.urandom(4000)
  reg = {"w": fetch.Entry("w", (_serve(server, "w.bin", body),), holds=("w.bin",))}
  (tmp_path / "w").mkdir()
  (tmp_path / "w" / "w.bin.part").write_bytes(body)            # complete already
  fetch.fetch("w", tmp_path, reg)
  assert (tmp_path / "w" / "w.bin").read_bytes() == body and server.requests[-1][1] == "bytes=4000-"
  # A part file from other bytes: the resumed file fails its SHA-256 and is deleted, and the retry is clean.
  (tmp_path / "w" / "w.bin").unlink()
  (tmp_path / "w" / "w.bin.part").write_bytes(b"\0" * 1000)
  with pytest.raises(fetch.FetchError, match="SHA256"):
    fetch.fetch("w", tmp_path, reg)
  fetch.fetch("w", tmp_path, reg)
  assert (tmp_path / "w" / "w.bin").read_bytes() == body


def test_offline_fails_in_one_line_naming_the_url_and_the_cache(tmp_path, monkeypatch, capsys):
  url = f"http://127.0.0.1:{_closed_port()}/mnist/t10k-labels-idx1-ubyte.gz"
  reg = {"mnist": fetch.Entry("m", (fetch.File(url, "0" * 64, 10),), holds=("t10k-labels-idx1-ubyte.gz",))}
  with pytest.raises(fetch.FetchError) as e:
    fetch.fetch("mnist", tmp_path, reg)
  target = tmp_path / "mnist" / "t10k-labels-idx1-ubyte.gz"
  message = str(e.value)
  assert message.startswith(f"{target}: cannot download {url}: ") and "Connection refused" in message
  assert "\n" not in message and not (target.parent / (target.name + ".part")).exists()
  # The CLI: exit status 2, the same one line on stderr.
  monkeypatch.setenv("FEDSIM_DATA", str(tmp_path))
  assert fetch.main(["fetch", "mnist"], registry=reg) == 2
  assert capsys.readouterr().err.strip().splitlines() == [f"error: {message}"]


def test_untar_and_bunzip2_lay_the_files_out_for_the_loaders(server, tmp_path):
  rng = np.random.default_rng(0)
  lines = "".join(f"{1 + i % 3} 1:{rng.random():.3f} 2:{rng.random():.3f}\n" for i in range(20))
  tar = io.BytesIO()
  with tarfile.open(fileobj=tar, mode="w:gz") as t:
    for name in ("d/a.txt", "d/b.txt"):
      info = tarfile.TarInfo(name)
      info.size = 3
      t.addfile(info, io.BytesIO(b"abc"))
  reg = {"lib": fetch.Entry("l", (_serve(server, "lib.bz2", bz2.compress(lines.encode()), unpack="bunzip2"),),
                            holds=("lib",), data_path="lib"),
         "arc": fetch.Entry("a", (_serve(server, "arc.tar.gz", tar.getvalue(), unpack="untar"),),
                            holds=("d/a.txt", "d/b.txt"))}
  path = fetch.fetch("lib", tmp_path, reg)
  assert path == tmp_path / "lib" / "lib" and sorted(os.listdir(tmp_path / "lib")) == ["lib"]   # .bz2 deleted
  ds = load_libsvm(path)
  assert ds.num_classes == 3 and ds.y_train.size + ds.y_test.size == 20
  fetch.fetch("arc", tmp_path, reg)
  assert sorted(os.listdir(tmp_path / "arc")) == ["d"] and (tmp_path / "arc" / "d" / "b.txt").read_bytes() == b"abc"
  assert fetch.is_cached("arc", tmp_path, reg)


def test_cli_lists_names_sizes_and_whether_cached(server, tmp_path, monkeypatch, capsys):
  monkeypatch.setenv("FEDSIM_DATA", str(tmp_path))
  reg = {"one": fetch.Entry("the first", (_serve(server, "1.bin", b"x" * 2_500_000),), holds=("1.bin",)),
         "two": fetch.Entry("the second", (fetch.File(f"{server.base}/2.bin", None),), holds=("2.bin",))}
  for argv in ([], ["list"], ["fetch", "--list"]):
    assert fetch.main(argv, registry=reg) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"data cache: {tmp_path} ($FEDSIM_DATA)"
    assert re.fullmatch(r"one +2\.5 MB +no +the first", out[2]) and re.fullmatch(r"two +\? +no +the second", out[3])
  assert fetch.main(["fetch", "one"], registry=reg) == 0
  assert capsys.readouterr().out.splitlines()[-1] == f"one: {tmp_path / 'one'}"
  fetch.main([], registry=reg)
  assert re.fullmatch(r"one +2\.5 MB +yes +the first", capsys.readouterr().out.splitlines()[2])
  for argv, message in ((["fetch"], "error: fetch needs a dataset name: one, two or all (--list lists them)"),
                        (["fetch", "three"], "error: unknown dataset 'three'; accepted: one, two, all")):
    assert fetch.main(argv, registry=reg) == 2
    assert capsys.readouterr().err.strip() == message


def test_cli_is_python_m_fedsim_data(tmp_path):
  env = dict(os.environ, FEDSIM_DATA=str(tmp_path))
  proc = subprocess.run([sys.executable, "-m", "fedsim.data", "fetch", "mnits"], cwd=REPO, env=env,
                        capture_output=True, text=True, timeout=60)
  assert proc.returncode == 2
  assert proc.stderr.strip() == "error: unknown dataset 'mnits'; accepted: mnist, fashion_mnist, cifar10, covtype, all"


def test_cache_root_follows_fedsim_data_then_xdg_then_home(monkeypatch, tmp_path):
  monkeypatch.setenv("FEDSIM_DATA", str(tmp_path / "c"))
  assert fetch.cache_root() == tmp_path / "c"
  monkeypatch.delenv("FEDSIM_DATA")
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
  assert fetch.cache_root() == tmp_path / "x" / "fedsim" / "data"
  monkeypatch.delenv("XDG_CACHE_HOME")
  monkeypatch.setenv("HOME", str(tmp_path / "h"))
  assert fetch.cache_root() == tmp_path / "h" / ".cache" / "fedsim" / "data"


def test_registry_hashes_are_sha256_and_its_files_are_named_as_the_loaders_read_them():
  from fedsim.data import cifar10, mnist
  for name, entry in fetch.REGISTRY.items():
    for f in entry.files:
      assert f.sha256 is None or re.fullmatch(r"[0-9a-f]{64}", f.sha256), name
      assert f.url.startswith(("https://", "http://fashion-mnist.s3-website")), f.url
    assert all(f.sha256 for f in entry.files) or name == "covtype"   # the one without a published hash
  idx = {b + ".gz" for b in (mnist.TRAIN_IMAGES, mnist.TRAIN_LABELS, mnist.TEST_IMAGES, mnist.TEST_LABELS)}
  assert {f.name for f in fetch.REGISTRY["mnist"].files} == set(fetch.REGISTRY["mnist"].holds) == idx
  assert {f.name for f in fetch.REGISTRY["fashion_mnist"].files} == idx
  assert set(fetch.REGISTRY["cifar10"].holds) == {f"{cifar10.FOLDER}/{n}" for n in (*cifar10.TRAIN_FILES,
                                                                                     cifar10.TEST_FILE)}


def _mnist_t10k_only(server) -> dict[str, fetch.Entry]:
  """The registry's own mnist entry (its URLs' names, its SHA-256s), t10k files only, served locally."""
  real = fetch.REGISTRY["mnist"]
  files = tuple(fetch.File(f"{server.base}/mnist/{f.name}", f.sha256, f.size) for f in real.files if "t10k" in f.name)
  for f in files:
    server.files[f"/mnist/{f.name}"] = (SHARED_MNIST / f.name).read_bytes()
  return {"mnist": fetch.Entry(real.description, files, holds=tuple(f.name for f in files))}


@pytest.mark.skipif(not SHARED_MNIST.is_dir(), reason="../shared/data/mnist is not beside the checkout")
def test_fetching_the_real_mnist_files_passes_the_registrys_sha256_and_loads(server, tmp_path, monkeypatch):
  monkeypatch.setenv("FEDSIM_DATA", str(tmp_path))
  path = fetch.fetch("mnist", registry=_mnist_t10k_only(server))
  assert path == tmp_path / "mnist"
  ds = load_dataset("mnist", None, seed=0)              # data_dir None: the cache
  assert ds.info["data_dir"] == str(path) and (ds.y_train.size, ds.y_test.size) == (8000, 2000)
  ref = load_mnist(SHARED_MNIST, seed=0)
  np.testing.assert_array_equal(ds.x_train, ref.x_train)
  with gzip.open(path / "t10k-labels-idx1-ubyte.gz") as f:
    assert f.read(4) == b"\0\0\x08\x01"


def test_data_dir_none_reads_the_cache_and_never_downloads(tmp_path, monkeypatch):
  monkeypatch.setenv("FEDSIM_DATA", str(tmp_path))
  with pytest.raises(FieldError) as e:
    load_dataset("fashion_mnist")
  assert str(e.value) == (f"data_dir: dataset='fashion_mnist' is not in the data cache ({tmp_path / 'fashion_mnist'}); "
                          "run `python -m fedsim.data fetch fashion_mnist` or give data_dir (a folder with the "
                          "Fashion-MNIST IDX files, named as MNIST's)")
  assert not (tmp_path / "fashion_mnist").exists()      # nothing made, nothing downloaded
  (tmp_path / "mnist").mkdir()                           # a folder without the files (a failed fetch)
  with pytest.raises(DataError, match=r"^data_dir: .*mnist: missing MNIST file\(s\) .*; `python -m fedsim.data "
                     r"fetch mnist` fetches it into the data cache$"):
    load_dataset("mnist")
  with pytest.raises(FieldError, match=r"^data_dir: dataset='libsvm' needs data_dir"):   # no default LIBSVM file
    load_dataset("libsvm")


def test_run_without_the_data_names_the_fetch_command(tmp_path):
  env = dict(os.environ, FEDSIM_DATA=str(tmp_path / "cache"), JAX_PLATFORMS="cpu")
  proc = subprocess.run([sys.executable, "-m", "experiments.run", "--dataset=cifar10",
                         f"--output_dir={tmp_path / 'out'}"], cwd=REPO, env=env, capture_output=True, text=True,
                        timeout=300)
  assert proc.returncode == 2
  assert proc.stderr.strip().splitlines() == [
      f"error: --data_dir: --dataset=cifar10 is not in the data cache ({tmp_path / 'cache' / 'cifar10'}); run "
      "`python -m fedsim.data fetch cifar10` or give --data_dir (the cifar-10-batches-bin folder of the CIFAR-10 "
      "binary release, or its parent)"]


def test_no_flagfile_readme_or_docs_page_names_the_shared_folder():
  """A user has the repository only: no flagfile, README or docs page may point at ../shared (the stored
  evidence of past runs, docs/reproduction/*/evidence/, records the paths those runs used and is not a page)."""
  files = [REPO / "README.md", *sorted((REPO / "experiments" / "flagfiles").glob("*.cfg")),
           *(p for p in sorted((REPO / "docs").rglob("*")) if p.is_file() and "evidence" not in p.parts
             and "_build" not in p.parts and p.suffix in (".md", ".rst", ".json", ".py", ".txt", ".cfg"))]
  assert len(files) > 50
  offenders = [f"{p.relative_to(REPO)}:{i}" for p in files
               for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if "../shared" in line]
  assert offenders == []
  # The flagfiles read the cache: none sets --data_dir.
  assert [p.name for p in files if p.suffix == ".cfg" and re.search(r"^--data_dir=", p.read_text(), re.M)] == []
