"""A tracking store that stops answering mid-run: training goes on and nothing is lost."""

from __future__ import annotations

import sqlite3

import pytest
from typer.testing import CliRunner

import initmem_core
from initmem_cli.app import app
from initmem_core.errors import RunWarning
from initmem_core.tracking.tracker import MlflowTracker
from tests.support.cli_processes import SMALL, history, mlflow_client

runner = CliRunner()
WRITES = ("log_batch", "log_text", "log_artifact", "set_terminated")


class Outage:
    """Makes a client's write methods raise while ``down`` (training starts, then ends it)."""

    def __init__(self, client, until_epoch: int | None):
        self.down, self.failures, self.until_epoch = False, 0, until_epoch
        for name in WRITES:
            setattr(client, name, self._failing(getattr(client, name)))

    def _failing(self, write):
        def call(*args, **kwargs):
            if self.down:
                self.failures += 1
                raise ConnectionError("store unreachable")
            return write(*args, **kwargs)

        return call

    # The training Progress protocol: the outage starts with training.
    def start(self, epochs, steps_per_epoch):
        self.down = True

    def advance(self, steps):
        pass

    def epoch_done(self, epoch, metrics):
        if epoch == self.until_epoch:
            self.down = False


def logged(uri: str, run_id: str, result) -> dict[str, list[tuple[int, float]]]:
    keys = list(dict.fromkeys(key for row in result.history for key in row if key != "epoch")) + list(result.summary)
    return {key: history(uri, run_id, key) for key in keys}


def expected(result) -> dict[str, list[tuple[int, float]]]:
    # Not every key is in every row: train_*_batch starts at epoch 1 (no batches at epoch 0).
    keys = dict.fromkeys(key for row in result.history for key in row if key != "epoch")
    rows = {key: [(row["epoch"], row[key]) for row in result.history if key in row] for key in keys}
    return {**rows, **{key: [(result.config.epochs, value)] for key, value in result.summary.items()}}


def status(uri: str, run_id: str) -> str:
    return mlflow_client(uri).get_run(run_id).info.status


def test_writes_wait_for_the_store_and_land_once_it_answers(tracking_uri, tmp_path):
    tracker = MlflowTracker(tracking_uri, flush_every_s=0)  # write at every logging point
    outage = Outage(tracker.client, until_epoch=1)
    with pytest.warns(RunWarning, match="is not answering") as warned:
        result = initmem_core.run(tracker=tracker, progress=outage, **SMALL)
    assert outage.failures >= 1 and sum("not answering" in str(w.message) for w in warned) == 1
    assert logged(tracking_uri, result.run_id, result) == expected(result)  # every step, once
    assert status(tracking_uri, result.run_id) == "FINISHED"
    assert not (tmp_path / "initmem-unsynced").exists()


def test_writes_the_store_never_took_are_kept_for_initmem_sync_which_uploads_them_once(tracking_uri, tmp_path):
    tracker = MlflowTracker(tracking_uri)
    outage = Outage(tracker.client, until_epoch=None)
    with pytest.warns(RunWarning) as warned:
        result = initmem_core.run(tracker=tracker, progress=outage, **SMALL)
    first, last = (str(w.message) for w in warned)  # one line when it fails, one when the run ends
    assert "is not answering" in first
    assert (
        f"kept in {tmp_path / 'initmem-unsynced'}" in last
        and f"run `initmem sync --tracking-uri {tracking_uri}`" in last
    )
    unsynced = tmp_path / "initmem-unsynced" / f"{result.run_id}.jsonl"
    saved = unsynced.read_text()
    assert status(tracking_uri, result.run_id) == "RUNNING"
    assert all(values == [] for values in logged(tracking_uri, result.run_id, result).values())

    other = tmp_path / "initmem-unsynced" / "elsewhere.jsonl"
    other.write_text('{"kind": "run", "run_id": "x", "tracking_uri": "http://127.0.0.1:5000"}\n')
    count = sum(len(values) for values in expected(result).values())
    synced = runner.invoke(app, ["sync", "--tracking-uri", tracking_uri])
    assert synced.exit_code == 0, synced.output
    assert f"synced 1 run(s), {count} metric value(s)" in synced.stdout and "left" in synced.stdout
    assert logged(tracking_uri, result.run_id, result) == expected(result)
    assert status(tracking_uri, result.run_id) == "FINISHED"
    artifacts = {a.path for a in mlflow_client(tracking_uri).list_artifacts(result.run_id)}
    assert {"final_weights.pt", "layer_norms.csv"} <= artifacts
    assert not unsynced.exists() and other.exists()

    unsynced.write_text(saved)  # as if a sync had been killed before deleting the file
    again = runner.invoke(app, ["sync", "--tracking-uri", tracking_uri])
    assert "synced 1 run(s), 0 metric value(s)" in again.stdout, again.output
    assert logged(tracking_uri, result.run_id, result) == expected(result)  # no duplicate steps
    assert "nothing to sync for this store" in runner.invoke(app, ["sync", "--tracking-uri", tracking_uri]).stdout


class LockForFirstLog:
    """Progress that holds an exclusive lock on the SQLite file from the start of training until
    epoch 0 has been (not) logged; MLflow waits 20 s for a lock before it gives up."""

    def __init__(self, database: str):
        self.connection = sqlite3.connect(database, isolation_level=None)

    def start(self, epochs, steps_per_epoch):
        self.connection.execute("BEGIN EXCLUSIVE")

    def advance(self, steps):
        pass

    def epoch_done(self, epoch, metrics):
        if epoch == 0:
            self.connection.execute("ROLLBACK")


@pytest.mark.slow(seconds=12)  # holds the database lock for seconds
def test_a_locked_sqlite_store_does_not_stop_training(tracking_uri):
    lock = LockForFirstLog(tracking_uri[len("sqlite:///") :])
    with pytest.warns(RunWarning, match="database is locked"):
        result = initmem_core.run(tracker=MlflowTracker(tracking_uri, flush_every_s=0), progress=lock, **SMALL)
    assert result.status == "FINISHED" and [row["epoch"] for row in result.history] == [0, 1, 2, 3]
    assert logged(tracking_uri, result.run_id, result) == expected(result)
    assert status(tracking_uri, result.run_id) == "FINISHED"
