"""Checkpoints that go when they are done: a finished run keeps its last checkpoint (what
``--resume`` of a longer horizon needs), every one, or none (``--keep-checkpoints``, not hashed);
``initmem clean NAME`` removes a sweep's leftover checkpoints, leases and report output, and
``--dry-run`` only says what and how much."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from initmem_cli.app import app
from initmem_core.config import FIELDS, RunConfig
from initmem_core.training.checkpoint_format import FORMAT
from initmem_core.training.checkpoint_store import CHECKPOINTS_FOLDER, CheckpointStore

runner = CliRunner(env={"COLUMNS": "200"})


def written(folder: Path, keep: str, epochs: int = 4) -> CheckpointStore:
    store = CheckpointStore(folder, keep)
    for epoch in range(1, epochs + 1):
        store.save(
            {
                "format": FORMAT,
                "config": {},
                "config_hash": "abc",
                "run_id": None,
                "epoch": epoch,
                "step": 0,
                "model": {"w": torch.full((2,), float(epoch))},
                "optimizer": {},
                "scheduler": {},
            }
        )
    store.finish()
    return store


def test_a_finished_run_keeps_its_last_checkpoint_by_default(tmp_path):
    store = written(tmp_path / "h", RunConfig().keep_checkpoints)
    assert [p.name for p in store.files()] == ["ckpt-e000004-s000000.pt"]
    assert store.previous == store.files()[0]  # what --resume of a longer horizon starts from


def test_keep_all_keeps_every_checkpoint_and_none_leaves_no_folder(tmp_path):
    assert len(written(tmp_path / "all", "all").files()) == 4
    store = written(tmp_path / "none", "none")
    assert not (tmp_path / "none").exists() and store.previous is None


def test_keep_none_leaves_another_runs_parked_checkpoint(tmp_path):
    parked = tmp_path / "h" / "run-abc"
    parked.mkdir(parents=True)
    (parked / "ckpt-e000001-s000000.pt").write_bytes(b"an unfinished run's")
    written(tmp_path / "h", "none")
    assert (parked / "ckpt-e000001-s000000.pt").exists()


def test_keep_checkpoints_is_not_in_the_config_hash():
    assert FIELDS["keep_checkpoints"].metadata["hashed"] is False
    assert RunConfig(keep_checkpoints="none").config_hash() == RunConfig().config_hash()


def test_keep_checkpoints_refuses_an_unknown_value_in_one_line():
    result = runner.invoke(app, ["run", "--keep-checkpoints", "some"])
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert "last" in result.output and "none" in result.output


@pytest.mark.slow  # a real 4-cell sweep on digits
def test_a_finished_sweep_keeps_one_checkpoint_per_cell_and_clean_removes_them(tmp_path, tracking_uri, monkeypatch):
    from filelock import FileLock

    from initmem_core.sweep.launch import run_sweep

    monkeypatch.chdir(tmp_path)  # the report's default folder, initmem-output/<name>, lands here
    spec = {
        "sigma": [0.5, 2.0],
        "opt": ["sgd", "adam"],
        "data": "digits",
        "epochs": 2,
        "train_size": 200,
        "batch_size": 50,
        "eval_batch_size": 512,
        "threads": 1,
    }
    result = run_sweep(spec, name="tidy", tracking_uri=tracking_uri)
    assert len(result.cells) == 4
    root = Path(tracking_uri[len("sqlite:///") :]).parent / CHECKPOINTS_FOLDER
    folders = [p for p in root.iterdir() if p.is_dir()]
    assert len(folders) == 4
    assert all(len(list(folder.glob("ckpt-*.pt"))) <= 1 for folder in folders)
    assert (tmp_path / "initmem-output" / "tidy").is_dir()

    dry = runner.invoke(app, ["clean", "tidy", "--dry-run", "--tracking-uri", tracking_uri])
    assert dry.exit_code == 0, dry.output
    assert dry.output.count("would remove checkpoints:") == 4 and "would remove report output:" not in dry.output
    assert "kept report output:" in dry.output and "--reports removes it" in dry.output
    assert "would remove lease:" in dry.output and " MB)" in dry.output
    assert len([p for p in root.iterdir() if p.is_dir()]) == 4 and (tmp_path / "initmem-output" / "tidy").is_dir()
    as_json = runner.invoke(app, ["clean", "tidy", "--dry-run", "--json", "--tracking-uri", tracking_uri])
    assert as_json.exit_code == 0, as_json.output
    answer = json.loads(as_json.stdout)  # one document: the lines for people went to stderr
    assert answer["sweep"] == "tidy" and answer["dry_run"] is True
    assert [item["what"] for item in answer["items"]].count("checkpoints") == 4
    assert [item["what"] for item in answer["kept"]] == ["report output"]
    assert answer["bytes"] == sum(item["bytes"] for item in answer["items"]) > 0

    held = FileLock(next((root.parent / "initmem-leases").glob("*.lock")), timeout=0)
    with held:  # a live sweep holds its cells' leases: nothing is removed
        refused = runner.invoke(app, ["clean", "tidy", "--tracking-uri", tracking_uri])
    assert refused.exit_code != 0 and "is running" in refused.output and "Traceback" not in refused.output
    assert len([p for p in root.iterdir() if p.is_dir()]) == 4

    done = runner.invoke(app, ["clean", "tidy", "--tracking-uri", tracking_uri])
    assert done.exit_code == 0, done.output
    assert "removed" in done.output
    assert not [p for p in root.iterdir() if p.is_dir()]
    assert (tmp_path / "initmem-output" / "tidy" / "report.md").exists()  # the report stays unless asked
    assert not list((root.parent / "initmem-leases").glob("*.lock"))
    again = runner.invoke(app, ["clean", "tidy", "--tracking-uri", tracking_uri])
    assert "nothing left to clean" in again.output
    reports = runner.invoke(app, ["clean", "tidy", "--reports", "--tracking-uri", tracking_uri])
    assert reports.exit_code == 0 and "removed report output:" in reports.output
    assert not (tmp_path / "initmem-output" / "tidy").exists()


def single_runs_store(tmp_path: Path, tracking_uri: str) -> dict[str, Path]:
    """A store with three single runs (one old, two new) and a sweep's cell, each with a checkpoint
    folder under the default root: run name -> folder."""
    import os
    import time

    from mlflow.tracking import MlflowClient

    from initmem_core.vocabulary import CONFIG_HASH_TAG, PARENT_TAG

    client = MlflowClient(tracking_uri)
    experiment = client.create_experiment("initmem")
    root = Path(tracking_uri[len("sqlite:///") :]).parent / CHECKPOINTS_FOLDER
    folders = {}
    for name, age_days, cell in (("old", 10, False), ("new", 0, False), ("other", 0, False), ("cell", 10, True)):
        tags = {CONFIG_HASH_TAG: f"hash-{name}"} | ({PARENT_TAG: "0" * 32} if cell else {})
        client.create_run(experiment, run_name=name, tags=tags)
        folder = root / f"hash-{name}"
        folder.mkdir(parents=True)
        checkpoint = folder / "ckpt-e000001-s000000.pt"
        checkpoint.write_bytes(b"x" * 1000)
        then = time.time() - age_days * 86400
        os.utime(checkpoint, (then, then))
        folders[name] = folder
    return folders


def test_clean_removes_single_runs_checkpoints_by_name_or_age_and_never_a_sweeps(tmp_path, tracking_uri):
    folders = single_runs_store(tmp_path, tracking_uri)
    dry = runner.invoke(app, ["clean", "--runs", "--older-than", "7d", "--dry-run", "--tracking-uri", tracking_uri])
    assert dry.exit_code == 0, dry.output
    assert "would remove checkpoints of run old:" in dry.output and "run new" not in dry.output
    assert "cell" not in dry.output and all(folder.exists() for folder in folders.values())  # a sweep's: kept
    as_json = runner.invoke(app, ["clean", "--runs", "--older-than", "7d", "--json", "--tracking-uri", tracking_uri])
    answer = json.loads(as_json.stdout)
    assert answer["runs"] == ["old"] and answer["bytes"] == 1000 and not answer["dry_run"]
    assert not folders["old"].exists() and folders["new"].exists() and folders["cell"].exists()
    named = runner.invoke(app, ["clean", "new", "--tracking-uri", tracking_uri])
    assert named.exit_code == 0 and "removed checkpoints of run new:" in named.output, named.output
    assert not folders["new"].exists() and folders["other"].exists() and folders["cell"].exists()


@pytest.mark.parametrize(
    "args, says",
    [
        (["clean"], "give a sweep's name, single runs' ids or names, or --runs"),
        (["clean", "--runs", "--older-than", "7days"], "--older-than '7days': give a number and a unit"),
        (["clean", "nosuch"], "no sweep or single run 'nosuch'"),
        (["clean", "new", "--runs"], "not both"),
    ],
)
def test_clean_refuses_what_it_cannot_read_in_one_line(args, says, tmp_path, tracking_uri):
    single_runs_store(tmp_path, tracking_uri)
    result = runner.invoke(app, [*args, "--tracking-uri", tracking_uri])
    assert result.exit_code == 2 and says in result.output and "Traceback" not in result.output, result.output
    assert len(result.stderr.strip().splitlines()) == 1
