"""``--download`` against a local fake of the download, no network: an http.server on
127.0.0.1 serves files in the exact release formats (CIFAR's pickled batches in a .tar.gz, MNIST's
gzipped IDX files), torchvision's mirror URLs point at it and its checksums are those of the
files served, so torchvision's own downloader, progress bar and md5 checks do the work."""

from __future__ import annotations

import functools
import gzip
import hashlib
import http.server
import tarfile
import threading
from pathlib import Path

import pytest
import torch

from initmem_core.config import FIELDS, RunConfig
from initmem_core.errors import ConfigError
from initmem_core.plugin_system.loader import get_registry
from tests.support.dataset_files import write_cifar10, write_idx


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # no request lines on the test's stderr
        pass


@pytest.fixture
def server(tmp_path, monkeypatch):
    """A folder served on 127.0.0.1 (yields the folder and its base URL)."""
    for proxy in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(proxy, raising=False)
    served = tmp_path / "served"
    served.mkdir()
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(served)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield served, f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()
    httpd.server_close()


def md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def fake_cifar10_release(served: Path, url: str, monkeypatch) -> dict:
    """The CIFAR-10 archive in its official layout, and torchvision's URL and checksums set to it."""
    from torchvision.datasets import CIFAR10

    build = served / "build"
    arrays = write_cifar10(build)
    folder = build / CIFAR10.base_folder
    archive = served / CIFAR10.filename
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(folder, arcname=CIFAR10.base_folder)
    monkeypatch.setattr(CIFAR10, "url", url + CIFAR10.filename)
    monkeypatch.setattr(CIFAR10, "tgz_md5", md5(archive))
    monkeypatch.setattr(CIFAR10, "train_list", [[name, md5(folder / name)] for name, _ in CIFAR10.train_list])
    monkeypatch.setattr(CIFAR10, "test_list", [[name, md5(folder / name)] for name, _ in CIFAR10.test_list])
    monkeypatch.setattr(CIFAR10, "meta", {**CIFAR10.meta, "md5": md5(folder / CIFAR10.meta["filename"])})
    return arrays


def fake_idx_release(name: str, served: Path, url: str, monkeypatch) -> dict:
    from torchvision import datasets

    dataset_class = getattr(datasets, {"mnist": "MNIST", "fashion-mnist": "FashionMNIST"}[name])
    data = write_idx(served, gzipped=True)
    monkeypatch.setattr(dataset_class, "mirrors", [url])
    monkeypatch.setattr(dataset_class, "resources", [(f"{file}.gz", md5(served / f"{file}.gz")) for file in data])
    return data


def load(name: str, folder: Path, download: bool = True):
    return get_registry().build("dataset", name, config=RunConfig(data=name, data_dir=str(folder), download=download))


def test_download_is_off_by_default_and_not_hashed():
    assert RunConfig().download is False and FIELDS["download"].metadata["hashed"] is False


@pytest.mark.slow  # builds, serves and reads a CIFAR archive (~5 s)
def test_cifar10_downloads_with_torchvisions_progress_and_checksums(server, tmp_path, monkeypatch, capfd):
    served, url = server
    arrays = fake_cifar10_release(served, url, monkeypatch)
    with pytest.raises(ConfigError, match="or pass --download"):  # off: where to put the files
        load("cifar10", tmp_path / "data", download=False)
    bundle = load("cifar10", tmp_path / "data")
    assert (tmp_path / "data" / "cifar-10-python.tar.gz").is_file()
    assert len(bundle.train_y) + len(bundle.val_y) == len(arrays["train_y"])
    assert bundle.test_y.tolist() == arrays["test_y"]
    assert "100%" in capfd.readouterr().err  # torchvision's progress bar
    (served / "cifar-10-python.tar.gz").unlink()  # a second load reads the files, nothing is fetched
    assert torch.equal(load("cifar10", tmp_path / "data").test_x, bundle.test_x)


def test_a_download_failing_its_checksum_is_one_line(server, tmp_path, monkeypatch):
    from torchvision.datasets import CIFAR10

    served, url = server
    fake_cifar10_release(served, url, monkeypatch)
    monkeypatch.setattr(CIFAR10, "tgz_md5", "0" * 32)  # not what is served
    with pytest.raises(ConfigError) as error:
        load("cifar10", tmp_path / "data")
    message = str(error.value)
    assert "download into" in message and "failed" in message and "\n" not in message


def test_a_download_with_no_server_is_one_line(tmp_path, monkeypatch):
    from torchvision.datasets import MNIST

    monkeypatch.setattr(MNIST, "mirrors", ["http://127.0.0.1:9/"])  # the discard port: nothing listens
    with pytest.raises(ConfigError, match=r"mnist: the download into .* failed .*--data-dir"):
        load("mnist", tmp_path / "data")


@pytest.mark.parametrize("name", ["mnist", "fashion-mnist"])
def test_idx_datasets_download_into_torchvisions_layout(name, server, tmp_path, monkeypatch):
    served, url = server
    data = fake_idx_release(name, served, url, monkeypatch)
    bundle = load(name, tmp_path / "data")
    assert torch.equal(bundle.test_x[:, 0], data["t10k-images-idx3-ubyte"].to(torch.uint8))
    assert len(bundle.train_y) + len(bundle.val_y) == len(data["train-labels-idx1-ubyte"])
    raw = tmp_path / "data" / {"mnist": "MNIST", "fashion-mnist": "FashionMNIST"}[name] / "raw"
    assert {p.name for p in raw.iterdir()} >= {f"{file}.gz" for file in data}
    assert gzip.decompress((raw / "t10k-labels-idx1-ubyte.gz").read_bytes())[8:] == bytes(
        data["t10k-labels-idx1-ubyte"].to(torch.uint8).tolist()
    )
