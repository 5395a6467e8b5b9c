"""Writes the store did not take (tracking/pending.py; `initmem sync`, plugins/commands/uploads.py): unsynced
files whole or absent, naming only their run and its copies, a file whose run is gone, two syncs
at once, a run whose store and spool both fill up, and the run result and sweep that say so."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import initmem_core
from initmem_cli.app import app
from initmem_core.errors import ConfigError
from initmem_core.tracking.tracker import MemoryTracker
from tests.support.cli_processes import TINY, history, initmem_command, mlflow_client, only_run, runs_in
from tests.support.cli_processes import TINY_RUN_ARGS as TINY_ARGS

# -- unsynced files ---------------------------------------------------------------------------


def test_unsynced_files_are_whole_or_absent(tmp_path, monkeypatch):
    import errno

    from initmem_core.tracking import pending as pending_module
    from initmem_core.tracking.pending import PendingWrites, keep_copy, spill

    folder = tmp_path / "initmem-unsynced"
    spill(PendingWrites(metrics=[("loss", 1.0, 0, 0)]), folder, "run1", "sqlite:///x.db")
    before = (folder / "run1.jsonl").read_text()
    weights = tmp_path / "final_weights.pt"
    weights.write_bytes(b"w" * 100_000)

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pending_module.os, "fsync", full_disk)
    monkeypatch.setattr(pending_module.shutil, "copy2", full_disk)
    with pytest.raises(OSError):
        spill(PendingWrites(metrics=[("loss", 0.5, 0, 1)]), folder, "run1", "sqlite:///x.db")
    with pytest.raises(OSError):
        keep_copy(folder, "run1", weights)
    assert (folder / "run1.jsonl").read_text() == before  # the earlier writes, unchanged
    assert sorted(p.name for p in folder.rglob("*")) == ["run1.jsonl"]  # no .tmp, no half copy, no empty folder


def write_unsynced(folder: Path, run_id: str, artifact: str | None = None) -> Path:
    import json

    folder.mkdir(parents=True, exist_ok=True)
    lines = [
        {"kind": "run", "run_id": run_id, "tracking_uri": "sqlite:///mlflow.db"},
        {"kind": "metric", "key": "loss", "value": 1.0, "timestamp": 0, "step": 0},
    ]
    if artifact is not None:
        lines.append({"kind": "artifact", "path": artifact, "artifact_path": None})
    path = folder / "crafted.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


@pytest.mark.parametrize("run_id", ["../../elsewhere", "/tmp/x", "a/b", ""])
def test_an_unsynced_file_naming_no_run_id_is_refused(tmp_path, run_id):
    from initmem_plugins.commands.uploads import read_unsynced

    with pytest.raises(ConfigError, match="which is not a run id; move it out of the way"):
        read_unsynced(write_unsynced(tmp_path / "initmem-unsynced", run_id))


def test_an_unsynced_artifact_outside_its_runs_copies_is_refused_and_left_alone(tmp_path):
    from initmem_plugins.commands.uploads import read_unsynced

    victim = tmp_path / "victim.txt"
    victim.write_text("not initmem's")
    path = write_unsynced(tmp_path / "initmem-unsynced", "0123abcd", artifact="../victim.txt")
    with pytest.raises(ConfigError, match=r"points an artifact outside 0123abcd.files/"):
        read_unsynced(path)
    assert victim.read_text() == "not initmem's"
    (tmp_path / "initmem-unsynced" / "0123abcd.files" / "x").mkdir(parents=True)
    (tmp_path / "initmem-unsynced" / "0123abcd.files" / "x" / "kept.pt").write_text("a copy")
    inside = write_unsynced(tmp_path / "initmem-unsynced", "0123abcd", artifact="0123abcd.files/x/kept.pt")
    _, pending = read_unsynced(inside)
    assert [Path(copy).name for copy, _ in pending.files] == ["kept.pt"]


# -- initmem sync -----------------------------------------------------------------------------


def unsynced_run(uri: str, folder: Path, name: str, in_store: bool = True) -> str:
    """A run (in the store, or only named) whose three metric values wait in ``folder``."""
    from mlflow.tracking import MlflowClient

    from initmem_core.tracking.pending import PendingWrites, spill

    if in_store:
        client = MlflowClient(uri)
        experiment = client.get_experiment_by_name("Default").experiment_id
        run_id = client.create_run(experiment, run_name=name).info.run_id
    else:
        run_id = "0123456789abcdef0123456789abcdef"
    spill(
        PendingWrites(metrics=[("test_acc", 0.5 + step / 10, 0, step) for step in range(3)], status=("FINISHED", 0)),
        folder,
        run_id,
        uri,
    )
    return run_id


def stored_steps(uri: str, run_id: str) -> list[int]:
    return [step for step, _ in history(uri, run_id, "test_acc")]


def test_a_file_whose_run_is_not_in_the_store_is_named_and_the_others_are_synced(tmp_path, tracking_uri):

    folder = tmp_path / "initmem-unsynced"
    missing = unsynced_run(tracking_uri, folder, "gone", in_store=False)
    present = unsynced_run(tracking_uri, folder, "here")
    synced = CliRunner().invoke(app, ["sync", "--tracking-uri", tracking_uri])
    assert synced.exit_code == 1 and f"synced 1 run(s), 3 metric value(s): {present}" in synced.stdout
    assert synced.stderr.count("\n") == 1 and f"left {folder / missing}.jsonl: run {missing} is not in" in synced.stderr
    assert stored_steps(tracking_uri, present) == [0, 1, 2] and (folder / f"{missing}.jsonl").exists()


def test_sync_json_says_what_it_synced_and_what_it_left_in_one_document(tmp_path, tracking_uri):
    import json

    folder = tmp_path / "initmem-unsynced"
    missing = unsynced_run(tracking_uri, folder, "gone", in_store=False)
    present = unsynced_run(tracking_uri, folder, "here")
    synced = CliRunner().invoke(app, ["sync", "--tracking-uri", tracking_uri, "--json"])
    assert synced.exit_code == 1  # a file was left, as without --json
    answer = json.loads(synced.stdout)
    assert answer["synced_runs"] == [present] and answer["metric_values"] == 3
    assert list(answer["left"]) == [str(folder / f"{missing}.jsonl")]
    assert "synced 1 run(s)" in synced.stderr  # the people's lines go to stderr


@pytest.mark.slow
def test_two_syncs_at_once_upload_every_file_once_and_both_succeed(tmp_path, tracking_uri):
    folder = tmp_path / "initmem-unsynced"
    run_ids = [unsynced_run(tracking_uri, folder, f"run{i}") for i in range(4)]
    syncs = [
        subprocess.Popen(
            initmem_command("sync", "--tracking-uri", tracking_uri),
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [sync.communicate(timeout=120) for sync in syncs]
    assert [sync.returncode for sync in syncs] == [0, 0], outputs
    assert all(error == "" for _, error in outputs), outputs
    assert sum(int(out.split("synced ")[1].split()[0]) if "synced" in out else 0 for out, _ in outputs) == 4
    assert all(stored_steps(tracking_uri, run_id) == [0, 1, 2] for run_id in run_ids)
    assert not list(folder.glob("*.jsonl"))


# -- runs and sweeps whose writes wait --------------------------------------------------------


class UnsyncedTracker(MemoryTracker):
    uri = ""

    def end_run(self, status="FINISHED"):
        super().end_run(status)
        self.unsynced = "3 write(s), its end included, wait in x.jsonl: run `initmem sync`"


def test_the_result_says_when_the_store_lacks_the_runs_end():
    result = initmem_core.run(tracker=UnsyncedTracker(), **TINY)
    assert result.status == "FINISHED" and "initmem sync" in result.unsynced
    from initmem_cli.run import stored_as

    assert stored_as("FINISHED", result).startswith("the run ended FINISHED, but the store still shows it RUNNING")
    assert stored_as("KILLED", object()) == "the run is marked KILLED"


def new_file(path: Path) -> Path:
    """``path`` created empty. A tmpfs mounted a moment ago can refuse a new name with ENOSPC
    for a while on this machine's kernel (seen with 550k free, after an earlier full tmpfs):
    retried, so that the full disk a test makes is the one it means."""

    for attempt in range(100):
        try:
            path.touch()
            return path
        except OSError as error:
            if error.errno != 28 or attempt == 99:
                raise
            time.sleep(0.1)
    return path


def fill_up(filler, patience_s: float = 1.0) -> None:
    """Write into the unbuffered ``filler`` until its disk takes nothing more: a refusal (ENOSPC)
    must last ``patience_s``, since this kernel's tmpfs can refuse for a moment with room left."""
    import errno

    chunk, refused_since = b"x" * 65536, None
    while True:
        try:
            filler.write(chunk)
            refused_since = None
        except OSError as error:
            if error.errno != errno.ENOSPC:
                raise
            if len(chunk) > 4096:  # the last pages, one at a time
                chunk = chunk[:4096]
                continue
            now = time.monotonic()
            refused_since = refused_since or now
            if now - refused_since >= patience_s:
                return
            time.sleep(0.05)


@pytest.mark.slow(seconds=18)
def test_a_run_whose_store_and_spool_fill_up_names_the_command_that_records_everything(
    tmp_path, small_disk, store_in, _empty_store
):
    from initmem_plugins.commands.uploads import read_unsynced

    disk = small_disk(f"{_empty_store.stat().st_size // 1024 + 550}k")  # the store's folder, filled up below
    with open(new_file(disk / "filler"), "wb", buffering=0) as filler:
        uri = store_in(disk)
        args = [
            "--epochs",
            "6",
            "--train-size",
            "256",
            "--batch-size",
            "32",
            "--threads",
            "1",
            "--eval-batch-size",
            "512",
            "--tracking-uri",
            uri,
            "--checkpoint-dir",
            str(tmp_path / "checkpoints"),
        ]
        process = subprocess.Popen(
            initmem_command("run", *args), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        # the run exists, training starts
        assert process.stdout.readline().strip() == "resnet20-sgd-b32-ep6-n256-s1.0-seed0"
        fill_up(filler)  # while it trains
    output, error = process.communicate(timeout=120)
    assert process.returncode == 1 and "Traceback" not in error, error
    last = error.strip().splitlines()[-1]
    assert (
        last.startswith("Error: resnet20-sgd-b32-ep6-n256-s1.0-seed0 ended FINISHED, but tracking store")
        and "not recorded" in last
    )
    # The last two: the run's lease, and the packages list written with the run's start, before the disk filled.
    kept = ("mlflow.db", "mlflow.db.lock", "filler", "ac1c534c19fd9902.lock", "requirements.txt")
    # The disk may have had room for the spool's file but not the weights' copy: a whole file may then
    # be left (syncing it adds nothing once the run is recovered), never a temporary or partial one.
    for left in [p for p in disk.rglob("*") if p.is_file() and p.name not in kept]:
        assert left.parent.name == "initmem-unsynced" and left.suffix == ".jsonl", left
        read_unsynced(left)  # whole: it parses
    assert runs_in(uri) == [("resnet20-sgd-b32-ep6-n256-s1.0-seed0", "RUNNING")]

    command = last.split("once the store answers, `")[1].split("`")[0].split()
    assert command[0] == "initmem" and command[-1] == "--resume"
    (disk / "filler").unlink()
    disk.resize("8m")
    resumed = subprocess.run(initmem_command(*command[1:]), cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    run = only_run(uri)
    assert run.info.status == "FINISHED" and "best_val_test_acc" in run.data.metrics
    assert stored_steps(uri, run.info.run_id) == list(range(7))
    assert {"config.json", "final_weights.pt", "layer_norms.csv"} <= {
        a.path for a in mlflow_client(uri).list_artifacts(run.info.run_id)
    }


@pytest.mark.slow
def test_a_sweep_counts_the_cells_whose_writes_wait_and_names_initmem_sync(tracking_uri, tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    from initmem_core.tracking.pending import PendingWrites

    send, refused = PendingWrites.send, []

    def locked_for_one_cell(self, client, run_id):
        if not refused:
            refused.append(run_id)
        if run_id == refused[0]:
            raise RuntimeError("(sqlite3.OperationalError) database is locked")
        send(self, client, run_id)

    monkeypatch.setattr(PendingWrites, "send", locked_for_one_cell)
    swept = CliRunner(env={"COLUMNS": "250"}).invoke(
        app,
        [
            "sweep",
            *TINY_ARGS,
            "--epochs",
            "1",
            "--sigma",
            "0.5,2",
            "--name",
            "locked",
            "--tracking-uri",
            tracking_uri,
            "--out",
            str(tmp_path / "out"),
        ],
    )
    monkeypatch.undo()
    assert swept.exit_code == 0, swept.output
    said = " ".join(swept.stdout.split())  # as one line, however rich wrapped it
    assert "1 cell(s) (" in said and "seed 0) ended with writes the store did not take" in said
    assert f"run `initmem sync --tracking-uri {tracking_uri}`, then `initmem report locked" in said
    assert "Traceback" not in swept.output
    client = MlflowClient(tracking_uri)
    runs = client.search_runs([client.get_experiment_by_name("initmem").experiment_id])
    (parent,) = [run for run in runs if run.data.tags.get("initmem.role") == "parent"]
    assert parent.data.tags["initmem.cells_unsynced"] == "1"
    assert client.get_run(refused[0]).info.status == "RUNNING"
    synced = CliRunner().invoke(app, ["sync", "--tracking-uri", tracking_uri])
    assert synced.exit_code == 0 and client.get_run(refused[0]).info.status == "FINISHED", synced.output
    assert client.get_run(parent.info.run_id).data.tags["initmem.cells_unsynced"] == "0"  # the parent says so too
