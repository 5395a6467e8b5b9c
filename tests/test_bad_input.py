"""Bad input: one line on stderr saying what is wrong, exit code 2, no traceback, no run tracked.

Unknown names, a batch larger than the training set, a negative sigma, a NaN learning rate and
a plugin clashing with a built-in name are covered in test_run_e2e.py and test_cli_plugins.py.
"""

from __future__ import annotations

import os
import socket
import time

import pytest
import torch
from typer.testing import CliRunner

from initmem_cli.app import app
from initmem_core.config import from_mapping

runner = CliRunner()
SMALL = ["--epochs", "1", "--train-size", "64", "--threads", "1"]


def stored_runs(uri: str) -> list:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    return [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])]


def assert_one_line_error(result, message: str) -> None:
    assert result.exit_code == 2, result.output
    assert message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.output


@pytest.mark.parametrize("args, message", [
    (["--sigma", "nan"], "--sigma must be a finite number, got nan"),
    (["--sigma", "inf"], "--sigma must be a finite number, got inf"),
    (["--sigma", "0"], "--sigma must be greater than 0, got 0.0"),
    (["--lr", "inf"], "--lr must be a finite number, got inf"),
    (["--lr", "0"], "--lr must be greater than 0, got 0.0"),
    (["--lr", "-0.1"], "--lr must be greater than 0, got -0.1"),
    (["--l2", "nan"], "--l2 must be a finite number, got nan"),
    (["--l2", "-inf"], "--l2 must be a finite number, got -inf"),
    (["--l2", "-0.01"], "--l2 must be 0 or greater, got -0.01"),
    (["--batch-size", "0"], "--batch-size must be 1 or greater, got 0"),
    (["--epochs", "0"], "--epochs must be 1 or greater, got 0"),
    (["--sigma", "big"], "--sigma: expected a number, got 'big'"),
    (["--epochs", "2.5"], "--epochs: expected a whole number, got '2.5'"),
])
def test_bad_value(tracking_uri, args, message):
    assert_one_line_error(runner.invoke(app, ["run", *SMALL, *args, "--tracking-uri", tracking_uri]), message)
    assert stored_runs(tracking_uri) == []


@pytest.mark.parametrize("toml, message", [
    ("sigmaa = 2.0\n", "unknown key 'sigmaa' in"),
    ('lr = "fast"\n', "--lr: expected a number, got 'fast'"),
])
def test_bad_toml(tracking_uri, tmp_path, toml, message):
    config = tmp_path / "run.toml"
    config.write_text(toml)
    result = runner.invoke(app, ["run", "--config", str(config), "--tracking-uri", tracking_uri])
    assert_one_line_error(result, message)
    assert stored_runs(tracking_uri) == []


def test_dataset_missing_offline(tracking_uri, tmp_path):
    result = runner.invoke(app, ["run", *SMALL, "--data", "cifar10", "--data-dir", str(tmp_path / "empty"),
                                 "--tracking-uri", tracking_uri])
    assert_one_line_error(result, f"cifar10 not found in {tmp_path / 'empty'}: put cifar-10-batches-py there")
    assert stored_runs(tracking_uri) == []


def test_tracking_store_in_a_missing_folder(tmp_path):
    result = runner.invoke(app, ["run", *SMALL, "--tracking-uri", f"sqlite:///{tmp_path / 'nope' / 'mlflow.db'}"])
    assert_one_line_error(result, "cannot be written")
    assert not (tmp_path / "nope").exists()


@pytest.mark.skipif(os.name == "posix" and os.geteuid() == 0, reason="root writes into read-only folders")
def test_tracking_store_in_a_read_only_folder(tmp_path):
    folder = tmp_path / "locked"
    folder.mkdir(mode=0o555)
    result = runner.invoke(app, ["run", *SMALL, "--tracking-uri", f"sqlite:///{folder / 'mlflow.db'}"])
    assert_one_line_error(result, f"{folder} is missing or read-only")
    assert list(folder.iterdir()) == []


def test_tracking_server_that_does_not_answer_fails_fast():
    with socket.socket() as probe:  # a port nobody listens on once this closes
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.monotonic()
    result = runner.invoke(app, ["run", *SMALL, "--tracking-uri", f"http://127.0.0.1:{port}"])
    assert_one_line_error(result, f"tracking store http://127.0.0.1:{port} cannot be reached")
    assert time.monotonic() - started < 15  # MLflow alone would retry for minutes


@pytest.mark.parametrize("write, message", [
    (lambda path: torch.save({"conv1.weight": torch.zeros(3)}, path), "is not an initmem checkpoint"),
    (lambda path: path.write_bytes(b"\x00garbage" * 100), "cannot be read"),
], ids=["a-plain-state-dict", "garbage-bytes"])
def test_checkpoint_not_ours_or_corrupt(tracking_uri, tmp_path, write, message):
    folder = tmp_path / "initmem-checkpoints" / from_mapping({"epochs": 1, "train_size": 64}).config_hash()
    folder.mkdir(parents=True)
    write(folder / "ckpt-e000001-s000000.pt")
    result = runner.invoke(app, ["run", *SMALL, "--tracking-uri", tracking_uri, "--resume"])
    assert_one_line_error(result, f"no usable checkpoint in {folder}: ckpt-e000001-s000000.pt {message}")
    assert stored_runs(tracking_uri) == []


def test_nothing_to_resume(tracking_uri, tmp_path):
    result = runner.invoke(app, ["run", *SMALL, "--tracking-uri", tracking_uri, "--resume"])
    assert_one_line_error(result, "nothing to resume: no checkpoint in")
    assert stored_runs(tracking_uri) == []


# Plugin names are unique to this file: an imported module stays in sys.modules for later tests.
@pytest.mark.parametrize("plugin, source, message", [
    ("importfailplug", "import no_such_dependency\n", "No module named 'no_such_dependency'"),
    ("badhookplug", "from initmem_core import hookimpl\n\n@hookimpl\n"
                    "def initmem_register_optimizers(register, extra):\n    pass\n", "initmem_register_optimizers"),
])
def test_broken_plugin_under_strict_loading(install_fake_plugin, tracking_uri, plugin, source, message):
    install_fake_plugin(plugin, source)
    result = runner.invoke(app, ["--strict-plugins", "run", *SMALL, "--tracking-uri", tracking_uri])
    assert_one_line_error(result, message)
    assert plugin in result.stderr and "strict plugin loading is on" in result.stderr
    assert stored_runs(tracking_uri) == []


def test_two_plugins_registering_one_name(install_fake_plugin, tracking_uri):
    source = ("from initmem_core import hookimpl\n\n@hookimpl\ndef initmem_register_optimizers(register):\n"
              "    register('lion', 'torch.optim:SGD', 'a lion')\n")
    install_fake_plugin("firstlionplug", source)
    install_fake_plugin("secondlionplug", source)
    result = runner.invoke(app, ["run", *SMALL, "--opt", "lion", "--tracking-uri", tracking_uri])
    assert_one_line_error(result, "optimizer 'lion' is registered twice")
    assert "firstlionplug" in result.stderr and "secondlionplug" in result.stderr
    assert stored_runs(tracking_uri) == []


@pytest.mark.parametrize("args, message", [
    (["report", "some-sweep", "--format", "xml"], "'xml' is not one of 'table', 'markdown', 'csv', 'json'"),
    (["sweep", "--executor", "dask", "--dry-run"], "'dask' is not one of 'local', 'ray', 'slurm'"),
    (["report"], "Missing argument 'sweep'"),
    (["runn"], "No such command 'runn'"),
])
def test_choices_and_usage_errors_are_one_line(args, message):
    result = runner.invoke(app, args)
    assert_one_line_error(result, message)
    assert "--help`" in result.stderr
