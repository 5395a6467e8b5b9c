"""Checkpoints that go when they are done (issue 39): a finished run keeps its last checkpoint (what
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
    assert dry.output.count("would remove checkpoints:") == 4 and "would remove report output:" in dry.output
    assert "would remove lease:" in dry.output and " KB)" in dry.output
    assert len([p for p in root.iterdir() if p.is_dir()]) == 4 and (tmp_path / "initmem-output" / "tidy").is_dir()
    as_json = runner.invoke(app, ["clean", "tidy", "--dry-run", "--json", "--tracking-uri", tracking_uri])
    assert as_json.exit_code == 0, as_json.output
    answer = json.loads(as_json.stdout)  # one document: the lines for people went to stderr
    assert answer["sweep"] == "tidy" and answer["dry_run"] is True
    assert [item["what"] for item in answer["items"]].count("checkpoints") == 4
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
    assert not (tmp_path / "initmem-output" / "tidy").exists()
    assert not list((root.parent / "initmem-leases").glob("*.lock"))
    again = runner.invoke(app, ["clean", "tidy", "--tracking-uri", tracking_uri])
    assert "nothing left to clean" in again.output
