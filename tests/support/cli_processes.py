"""What the tests that run `initmem` (in a process of its own or in theirs) share: tiny settings, the
command line, the runs a store holds and what MLflow logged on them (``stored_runs``, ``only_run``,
``history``), the processes below a pid, a sweep's children and their metric histories, and the
files a folder holds."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

#: `initmem run` options for a run of seconds; the sweeps' (``sweep_command``), and ``initmem_core.run``'s
TINY_RUN_ARGS = [
    *("--epochs", "2", "--train-size", "128", "--batch-size", "32"),
    *("--threads", "1", "--eval-batch-size", "512"),
]
TINY_SWEEP_ARGS = ["--epochs", "1", "--train-size", "64", "--batch-size", "32", "--eval-batch-size", "512"]
TINY = dict(epochs=1, train_size=64, batch_size=32, threads=1, eval_batch_size=512)
#: ``initmem_core.run``'s keywords for a run of a few seconds in the test's own process.
SMALL = dict(epochs=3, train_size=128, batch_size=32, threads=1, eval_batch_size=512)
#: The same on synthetic 8x8 images, without checkpoints (add its batch size and epochs).
SYNTHETIC = dict(data="synthetic:1x8x8-c4-n64", arch="resnet20", threads=1, checkpoint_every=0)
#: A small cell, data and architecture named: what the executor and login suites send through
#: real servers and workers (positions matter: those suites slice it to swap --epochs).
SMALL_CELL_ARGS = [
    *("--data", "digits", "--arch", "resnet20", "--epochs", "2", "--train-size", "128"),
    *("--batch-size", "32", "--eval-batch-size", "512", "--threads", "1"),
]


def cli_args(settings: Mapping[str, object]) -> list[str]:
    """``initmem_core.run``'s keywords as the CLI's options: ``{"train_size": 64}`` -> ``--train-size 64``."""
    return [part for key, value in settings.items() for part in (f"--{key.replace('_', '-')}", str(value))]


def initmem_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "initmem_cli", *args]


def runs_in(uri: str) -> list[tuple[str, str]]:
    """(name, status) of every run in a SQLite store, read without MLflow."""
    import sqlite3

    with sqlite3.connect(uri[len("sqlite:///") :]) as database:
        return database.execute("select name, status from runs").fetchall()


def mlflow_client(uri: str):
    from mlflow.tracking import MlflowClient

    return MlflowClient(uri)


def stored_runs(uri: str, filter_string: str = "") -> list:
    """Every run in every experiment of the store at ``uri`` (MLflow's ``Run`` objects)."""
    client = mlflow_client(uri)
    return [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id], filter_string)]


def only_run(uri: str):
    """The one run in the store at ``uri``; fails where there is none or more than one."""
    (run,) = stored_runs(uri)
    return run


def history(uri: str, run_id: str, key: str) -> list[tuple[int, float]]:
    """(step, value) of every value of metric ``key`` logged on the run, by step."""
    return sorted((m.step, m.value) for m in mlflow_client(uri).get_metric_history(run_id, key))


def folder_state(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``folder`` with its size and modification time."""
    return {
        str(path.relative_to(folder)): (path.stat().st_size, path.stat().st_mtime_ns)
        for path in folder.rglob("*")
        if path.is_file()
    }


def descendants(pid: int) -> set[int]:
    """Every process below ``pid``, from /proc (no psutil needed)."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has exited; only its entry waits for its parent


def children(uri: str, sweep: str) -> list:
    client = mlflow_client(uri)
    experiment = client.get_experiment_by_name("initmem")
    if experiment is None:  # the sweep has not opened the store yet
        return []
    return [
        r
        for r in client.search_runs([experiment.experiment_id], f"tags.`initmem.sweep` = '{sweep}'")
        if "mlflow.parentRunId" in r.data.tags
    ]


SWEEP_CELLS = ["--sigma", "0.5,2", "--seed", "0,1"]


def sweep_command(uri: str, name: str, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "initmem_cli",
        "sweep",
        *TINY_SWEEP_ARGS,
        *SWEEP_CELLS,
        "--name",
        name,
        "--tracking-uri",
        uri,
        *extra,
    ]


def metric_histories(uri: str, sweep: str) -> dict:
    return {
        (run.data.tags["config_hash"], key): history(uri, run.info.run_id, key)
        for run in children(uri, sweep)
        for key in run.data.metrics
    }
