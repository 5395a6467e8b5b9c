"""Bad input: one line on stderr saying what is wrong, exit code 2, no traceback, no run tracked.

Unknown names, a batch larger than the training set, a negative sigma, a NaN learning rate and
a plugin clashing with a built-in name are covered in tests/e2e/test_run.py and tests/cli/test_plugins.py.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from initmem_cli.app import app
from initmem_core.config import from_mapping
from initmem_core.plugin_system.loader import get_registry
from initmem_core.training.plan import plan_run
from tests.support.cli_processes import runs_in

runner = CliRunner()
SMALL = ["--epochs", "1", "--train-size", "64", "--threads", "1"]


def assert_one_line_error(result, message: str) -> None:
    assert result.exit_code == 2, result.output
    assert message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.output


@pytest.mark.parametrize(
    "args, message",
    [
        (["--sigma", "nan"], "--sigma must be a finite number, got nan"),
        (["--data-dir", "."], "--data-dir: dataset digits reads no files (it is generated or bundled)"),
        (["--sigma", "inf"], "--sigma must be a finite number, got inf"),
        (["--sigma", "0"], "--sigma must be greater than 0, got 0.0"),
        (["--lr", "inf"], "--lr must be a finite number, got inf"),
        (["--lr", "-0.1"], "--lr must be 0 or greater, got -0.1"),  # 0 means the optimizer's default
        (["--l2", "nan"], "--l2 must be a finite number, got nan"),
        (["--l2", "-inf"], "--l2 must be a finite number, got -inf"),
        (["--l2", "-0.01"], "--l2 must be 0 or greater, got -0.01"),
        (["--batch-size", "0"], "--batch-size must be 1 or greater, got 0"),
        (["--epochs", "0"], "--epochs must be 1 or greater, got 0"),
        (["--sigma", "big"], "--sigma: expected a number, got 'big'"),
        (["--epochs", "2.5"], "--epochs: expected a whole number, got '2.5'"),
        (["--lr-match-sigma", "-1"], "--lr-match-sigma must be 0 or greater, got -1.0"),
        (["--lr-match-sigma", "1", "--opt", "adam"], "--lr-match-sigma is for SGD-family optimizers"),
        (["--lr-match-sigma", "1", "--opt", "timm:lion"], "and timm:lion builds Lion; use --opt sgd"),
        (["--opt", "timm:sgd"], "timm optimizer 'sgd' refused its settings: Nesterov momentum requires"),
    ],
)
def test_bad_value(tracking_uri, args, message):
    assert_one_line_error(runner.invoke(app, ["run", *SMALL, *args, "--tracking-uri", tracking_uri]), message)
    assert runs_in(tracking_uri) == []


@pytest.mark.parametrize(
    "toml, message",
    [
        ("sigmaa = 2.0\n", "unknown key 'sigmaa' in"),
        ('lr = "fast"\n', "--lr: expected a number, got 'fast'"),
    ],
)
def test_bad_toml(tracking_uri, tmp_path, toml, message):
    config = tmp_path / "run.toml"
    config.write_text(toml)
    result = runner.invoke(app, ["run", "--config", str(config), "--tracking-uri", tracking_uri])
    assert_one_line_error(result, message)
    assert runs_in(tracking_uri) == []


def test_dataset_missing_offline(tracking_uri, tmp_path):
    result = runner.invoke(
        app, ["run", *SMALL, "--data", "cifar10", "--data-dir", str(tmp_path / "empty"), "--tracking-uri", tracking_uri]
    )
    assert_one_line_error(result, f"cifar10 not found in {tmp_path / 'empty'}: put cifar-10-batches-py there")
    assert runs_in(tracking_uri) == []


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


@pytest.mark.parametrize(
    "write, message",
    [
        (lambda path: torch.save({"conv1.weight": torch.zeros(3)}, path), "is not an initmem checkpoint"),
        (lambda path: path.write_bytes(b"\x00garbage" * 100), "cannot be read"),
    ],
    ids=["a-plain-state-dict", "garbage-bytes"],
)
def test_checkpoint_not_ours_or_corrupt(tracking_uri, tmp_path, write, message):
    # The hash of the config as run: its plan resolves lr to sgd's declared default.
    config = plan_run(from_mapping({"epochs": 1, "train_size": 64}), get_registry()).config
    folder = tmp_path / "initmem-checkpoints" / config.config_hash()
    folder.mkdir(parents=True)
    write(folder / "ckpt-e000001-s000000.pt")
    result = runner.invoke(app, ["run", *SMALL, "--tracking-uri", tracking_uri, "--resume"])
    assert_one_line_error(result, f"no usable checkpoint in {folder}: ckpt-e000001-s000000.pt {message}")
    assert runs_in(tracking_uri) == []


def test_nothing_to_resume(tracking_uri, tmp_path):
    result = runner.invoke(app, ["run", *SMALL, "--tracking-uri", tracking_uri, "--resume"])
    assert_one_line_error(result, "nothing to resume: no checkpoint in")
    assert runs_in(tracking_uri) == []


# Plugin names are unique to this file: an imported module stays in sys.modules for later tests.
@pytest.mark.parametrize(
    "plugin, source, message",
    [
        ("importfailplug", "import no_such_dependency\n", "No module named 'no_such_dependency'"),
        (
            "badhookplug",
            "from initmem_core import hookimpl\n\n@hookimpl\n"
            "def initmem_register_optimizers(register, extra):\n    pass\n",
            "initmem_register_optimizers",
        ),
    ],
)
def test_broken_plugin_under_strict_loading(install_fake_plugin, tracking_uri, plugin, source, message):
    install_fake_plugin(plugin, source)
    result = runner.invoke(app, ["--strict-plugins", "run", *SMALL, "--tracking-uri", tracking_uri])
    assert_one_line_error(result, message)
    assert plugin in result.stderr and "strict plugin loading is on" in result.stderr
    assert runs_in(tracking_uri) == []


def test_two_plugins_registering_one_name(install_fake_plugin, tracking_uri):
    source = (
        "from initmem_core import hookimpl\n\n@hookimpl\ndef initmem_register_optimizers(register):\n"
        "    register('lion', 'torch.optim:SGD', 'a lion')\n"
    )
    install_fake_plugin("firstlionplug", source)
    install_fake_plugin("secondlionplug", source)
    result = runner.invoke(app, ["run", *SMALL, "--opt", "lion", "--tracking-uri", tracking_uri])
    assert_one_line_error(result, "optimizer 'lion' is registered twice")
    assert "firstlionplug" in result.stderr and "secondlionplug" in result.stderr
    assert runs_in(tracking_uri) == []


@pytest.mark.parametrize(
    "args, message",
    [
        (["report", "some-sweep", "--format", "xml"], "'xml' is not one of 'table', 'markdown', 'csv', 'json'"),
        (["report"], "give a sweep name or parent run id (read from the tracking store), a run id"),
        (["runn"], "No such command 'runn'"),
    ],
)
def test_choices_and_usage_errors_are_one_line(args, message):
    result = runner.invoke(app, args)
    assert_one_line_error(result, message)
    assert "--help`" in result.stderr


def test_an_unknown_executor_is_one_line_with_the_registered_ones():
    result = runner.invoke(app, ["sweep", "--executor", "locl", "--dry-run"])
    assert_one_line_error(
        result, "no executor named 'locl' is registered (did you mean 'local'?); valid executors: local, ray, slurm"
    )


# -- bad input that once reached a traceback or a wasted run ------------------------------------

UNWRITABLE = "/proc/initmem-nope"  # not even root can create a folder in /proc
linux_only = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--seed", str(2**64)], f"--seed must be at most {2**64 - 1}, got {2**64}"),
        (["--data-seed", str(2**64)], f"--data-seed must be at most {2**64 - 1}"),
        (["--batch-size", str(2**63)], f"--batch-size must be at most {2**63 - 1}"),
        (["--sigma", "1e300"], "--sigma must be at most 1000, got 1e+300"),
        (["--lr", "1e9"], "--lr must be at most 1000"),
        (["--epochs", str(2**62)], f"--epochs must be at most 999999, got {2**62}"),
        (["--experiment", ""], "--experiment must not be empty"),
        (["--experiment", "  "], "--experiment must not be empty"),
    ],
)
def test_values_beyond_their_bounds(tracking_uri, args, message):
    assert_one_line_error(runner.invoke(app, ["run", *SMALL, "--tracking-uri", tracking_uri, *args]), message)
    assert runs_in(tracking_uri) == []


@pytest.mark.parametrize(
    "uri, message",
    [
        ("foo://bar", "--tracking-uri foo://bar: unsupported scheme 'foo'"),
        ("plain-folder", "--tracking-uri plain-folder is a path, not a tracking store; for a SQLite database"),
        ("/tmp/initmem-some/file.db", "is a path, not a tracking store"),
        ("file:///tmp/initmem-store", "is a path, not a tracking store"),
        ("http://", "--tracking-uri http:// names no host"),
    ],
)
def test_tracking_uri_that_is_no_store(tmp_path, monkeypatch, uri, message):
    monkeypatch.chdir(tmp_path)
    assert_one_line_error(runner.invoke(app, ["run", *SMALL, "--tracking-uri", uri]), message)
    assert list(tmp_path.iterdir()) == []


@linux_only
def test_unwritable_checkpoint_dir_fails_before_training(tracking_uri):
    result = runner.invoke(app, ["run", *SMALL, "--tracking-uri", tracking_uri, "--checkpoint-dir", UNWRITABLE])
    assert_one_line_error(result, f"--checkpoint-dir {UNWRITABLE} cannot be written")
    assert runs_in(tracking_uri) == []


@linux_only
@pytest.mark.parametrize(
    "args, message",
    [
        (["--out", UNWRITABLE], f"--out {UNWRITABLE} cannot be written"),
        (["--checkpoint-dir", UNWRITABLE], f"--checkpoint-dir {UNWRITABLE} cannot be written"),
        (["--name", ""], "sweep name ''"),
        (["--name", "../../x"], "with no . or .. between slashes"),
        (["--name", "/abs/x"], "no leading /"),
    ],
)
def test_sweep_input_fails_before_any_cell(tracking_uri, tmp_path, args, message):
    result = runner.invoke(
        app,
        [
            "sweep",
            *SMALL,
            "--sigma",
            "0.5,1",
            "--tracking-uri",
            tracking_uri,
            *(["--out", str(tmp_path / "out")] if "--out" not in args else []),
            *args,
        ],
    )
    assert_one_line_error(result, message)
    assert runs_in(tracking_uri) == []


@pytest.mark.parametrize(
    "write, message",
    [
        (lambda path: path.write_bytes(b"\x00\xff\xfe binary"), "is not valid TOML: it is not UTF-8 text"),
        (lambda path: path.mkdir(), "is a folder; --config takes a TOML file"),
    ],
    ids=["binary-file", "folder"],
)
def test_config_that_is_not_a_toml_file(tracking_uri, tmp_path, write, message):
    config = tmp_path / "run.toml"
    write(config)
    for command in ("run", "sweep"):
        result = runner.invoke(app, [command, "--config", str(config), "--tracking-uri", tracking_uri])
        assert_one_line_error(result, message)
    assert runs_in(tracking_uri) == []


def test_a_boolean_in_a_numeric_grid_is_not_a_repeated_number(tracking_uri, tmp_path):
    config = tmp_path / "sweep.toml"
    config.write_text("[grid]\nsigma = [1.0, true]\n")
    result = runner.invoke(app, ["sweep", "--config", str(config), "--tracking-uri", tracking_uri])
    assert_one_line_error(result, "--sigma: expected a number, got True")


@linux_only
def test_new_plugin_where_nothing_can_be_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["new-plugin", "optimizer", "sign-sgd", "--dir", f"{UNWRITABLE}/plugin"])
    assert_one_line_error(result, UNWRITABLE)
    assert list(tmp_path.iterdir()) == []


def fake_sweep(uri: str, name: str) -> str:
    """A parent run with one finished child, written straight into the store (what a shared
    tracking server lets anyone write); returns the parent's id."""
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    from initmem_core.config import RunConfig
    from initmem_core.training.plan import config_params
    from initmem_core.vocabulary import PARENT_TAG, ROLE_TAG, SWEEP_TAG

    client = MlflowClient(uri)
    experiment = client.create_experiment("initmem")
    parent = client.create_run(experiment, tags={SWEEP_TAG: name, ROLE_TAG: "parent"}).info.run_id
    child = client.create_run(experiment, tags={PARENT_TAG: parent, "config_hash": RunConfig().config_hash()})
    params = [Param(key, str(value)) for key, value in config_params(RunConfig(), RunConfig().config_hash()).items()]
    client.log_batch(
        child.info.run_id,
        params=params[:100],
        metrics=[Metric("best_val_test_acc", 0.5, 0, 1), Metric("weight_norm", 3.0, 0, 1)],
    )
    client.set_terminated(child.info.run_id, "FINISHED")
    return parent


@pytest.mark.parametrize("crafted", ["../../escaped", "/tmp/initmem-escaped", "a/../../escaped"])
def test_report_refuses_a_crafted_sweep_tag(tracking_uri, tmp_path, monkeypatch, crafted):
    work = tmp_path / "work" / "deeper"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    parent = fake_sweep(tracking_uri, crafted)
    result = runner.invoke(app, ["report", parent, "--tracking-uri", tracking_uri])
    assert_one_line_error(result, f"run {parent} carries an unsafe sweep name in its tag initmem.sweep")
    assert [p.name for p in work.parent.iterdir()] == ["deeper"] and not Path("/tmp/initmem-escaped").exists()
    assert list(work.iterdir()) == []


@linux_only
def test_report_into_an_unwritable_folder(tracking_uri, tmp_path):
    fake_sweep(tracking_uri, "fine")
    result = runner.invoke(app, ["report", "fine", "--tracking-uri", tracking_uri, "--out", f"{UNWRITABLE}/report"])
    assert_one_line_error(result, UNWRITABLE)


def test_experiment_names_never_lead_artifacts_out_of_mlartifacts(tmp_path):
    from initmem_core.tracking.paths import path_under, safe_file_name
    from initmem_core.tracking.uris import artifact_root_for

    root = tmp_path / "mlartifacts"
    for name in ("../../x", "/etc", "a/../..", "..", "", "x\\..\\y", "ok name"):
        location = Path(artifact_root_for(f"sqlite:///{tmp_path / 'mlflow.db'}", name).removeprefix("file://"))
        assert location.parent == root and location.name == safe_file_name(name), name
        assert path_under(root, name).resolve().is_relative_to(root)


def test_a_too_long_experiment_name_is_reported_as_what_it_is(tracking_uri):
    from typer.testing import CliRunner

    from initmem_cli.app import app

    result = CliRunner().invoke(app, ["run", "--experiment", "x" * 600, "--tracking-uri", tracking_uri])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert "--experiment is 600 characters long; MLflow takes names of at most 500" in result.stderr


def test_a_dry_run_with_an_unknown_timm_model_prints_one_line_and_no_plan(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = ["sweep", "--dry-run", "--arch", "timm:resnet10tt", "--sigma", "0.3,1", "--data", "digits", "--epochs", "1"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.stdout == "" and len(result.stderr.strip().splitlines()) == 1, result.output
    assert "unknown timm model 'resnet10tt'" in result.stderr and "timm:resnet10t" in result.stderr
