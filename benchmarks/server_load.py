"""How many cells one MLflow tracking server takes: N cells writing at once through initmem's own
tracking, into a SQLite-backed ``mlflow server`` and into a PostgreSQL-backed one.

Nothing trains during the load. The write pattern is a real run's: one tiny run (digits,
ResNet-20, 2 epochs, ~10 s) is trained first into a recording tracker, and what it logged (its
params, tags, texts, per-epoch metric batch, summary and its one artifact) is what every cell
replays, through the classes a Ray or Slurm cell uses:

- as the sweep does, one after another: the parent run, then per cell the child run, its
  SCHEDULED status and its config params (``ChildRunWriter``);
- then all N cells at once, each in a thread of one of ``--processes`` worker processes, as a
  remote worker does: ``ServerCellWriter`` (which reads the run and its metric history),
  ``begin_attempt``, ``start_run``, the dataset, the texts, ``--epochs`` per-epoch metric
  batches, the summary, the artifact (``final_weights.pt``, ~1 MB for ResNet-20, uploaded
  through the server as ``--serve-artifacts`` has it), the end of the run.

Every epoch's batch is written at once (``flush_every_s = 0``) and the next follows without a
pause (``--epoch-s 0``): each cell writes as fast as the server answers. A real cell writes at
most once per ``FLUSH_EVERY_S`` (5 s), so this is the load of a much larger sweep.

Reported per backend and N: write requests per second over the concurrent phase, metric values
per second, the median and slowest write, failed requests, and what the store lacks afterwards
(counted run by run against what was written): values left in ``initmem-unsynced/`` for
``initmem sync`` ("spooled") and values in neither ("lost").

The servers are ``mlflow server`` as docs/distributed.md starts it (4 workers, artifacts
served), on 127.0.0.1; PostgreSQL is Debian's ``postgresql`` (``apt-get install postgresql``),
a cluster made and started here in a temporary folder on 127.0.0.1 with a random password
(from the environment, never a command line) and removed at the end. Clients and server share
this machine's cores.

    python -m benchmarks.server_load --cells 8,32,128 --json docs/server_load.json
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import multiprocessing
import os
import platform
import pwd
import secrets
import shutil
import signal
import statistics
import subprocess
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.machine_info import cpu_model
from tests.local_services import free_port, serve

ROOT = Path(__file__).resolve().parents[1]

BACKENDS = ("sqlite", "postgresql")
STARTUP_S = 300.0
#: Client calls that write (the others read).
WRITES = frozenset(
    {
        "create_run",
        "update_run",
        "log_batch",
        "set_terminated",
        "log_text",
        "log_artifact",
        "log_inputs",
        "set_tag",
        "delete_tag",
        "create_experiment",
    }
)
EXPERIMENT = "server-load"


# -- the pattern a real run writes ----------------------------------------------------------------


def record_pattern(work: Path) -> dict[str, Any]:
    """Train one tiny run into a recording tracker; return what it logged, in order."""
    from initmem_core.tracking.tracker import MemoryTracker
    from initmem_core.training.runner import run

    calls: list[tuple[str, Any]] = []

    class Recorder(MemoryTracker):
        def start_run(self, name, params, tags):
            calls.append(("start_run", (name, {k: str(v) for k, v in params.items()}, dict(tags))))
            return super().start_run(name, params, tags)

        def log_metrics(self, metrics, step):
            calls.append(("log_metrics", ({k: float(v) for k, v in metrics.items()}, int(step))))
            super().log_metrics(metrics, step)

        def set_tags(self, tags):
            calls.append(("set_tags", ({k: str(v) for k, v in tags.items()},)))
            super().set_tags(tags)

        def log_text(self, text, artifact_file):
            calls.append(("log_text", (text, artifact_file)))

        def log_artifact(self, local_path, artifact_path=None):
            path = Path(local_path)  # a temporary file: its bytes are kept
            calls.append(("log_artifact", (path.name, path.read_bytes(), artifact_path)))

        def log_dataset(self, name, digest, profile, context="training"):
            calls.append(("log_dataset", (name, digest, dict(profile), context)))

    cwd = os.getcwd()
    os.chdir(work)
    try:
        run(
            {
                "data": "digits",
                "arch": "resnet20",
                "epochs": 2,
                "train_size": 128,
                "batch_size": 32,
                "eval_batch_size": 512,
                "threads": 1,
            },
            tracker=Recorder(),
        )
    finally:
        os.chdir(cwd)
    epochs = [args for call, args in calls if call == "log_metrics"]
    per_epoch = max(epochs, key=lambda args: len(args[0]))[0]  # the batch an epoch logs
    summary = epochs[-1][0] if epochs[-1][0].keys() != per_epoch.keys() else {}
    return {
        "start": next(args for call, args in calls if call == "start_run"),
        "dataset": next((args for call, args in calls if call == "log_dataset"), None),
        "texts": [args for call, args in calls if call == "log_text"],
        "tags": [args[0] for call, args in calls if call == "set_tags"],
        "per_epoch": per_epoch,
        "summary": summary,
        "artifacts": [args for call, args in calls if call == "log_artifact"],
    }


# -- timing every request a tracker makes ---------------------------------------------------------


class TimedClient:
    """An ``MlflowClient`` whose every call is clocked into ``log``: (call, start, seconds, error)."""

    def __init__(self, client: Any, log: list):
        self._client, self._log = client, log

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._client, name)
        if not callable(attribute) or name.startswith("_"):
            return attribute

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                result = attribute(*args, **kwargs)
            except Exception as error:
                self._log.append((name, started, time.perf_counter() - started, type(error).__name__))
                raise
            self._log.append((name, started, time.perf_counter() - started, ""))
            return result

        return timed


def timed_store(log: list) -> None:
    """Every tracker opened in this process from now on clocks its requests into ``log``."""
    import initmem_core.tracking.tracker as tracker_module

    real = tracker_module.open_client
    tracker_module.open_client = lambda *args, **kwargs: TimedClient(real(*args, **kwargs), log)


# -- one cell, as a remote worker writes it ------------------------------------------------------


def replay_cell(
    uri: str, run_id: str, index: int, pattern: dict[str, Any], epochs: int, epoch_s: float, folder: Path
) -> None:
    from initmem_core.tracking.cells import ServerCellWriter

    writer = ServerCellWriter(uri, EXPERIMENT, run_id)
    writer.flush_every_s = 0.0  # each epoch's batch goes at once, as for epochs longer than 5 s
    writer.begin_attempt()
    name, params, tags = pattern["start"]
    writer.start_run(f"cell-{index}", params, tags)
    if pattern["dataset"]:
        writer.log_dataset(*pattern["dataset"])
    for text, artifact_file in pattern["texts"]:
        writer.log_text(text, artifact_file)
    for step in range(epochs + 1):
        writer.log_metrics({key: value + 1e-3 * step for key, value in pattern["per_epoch"].items()}, step)
        if epoch_s:
            time.sleep(epoch_s)
    if pattern["summary"]:
        writer.log_metrics(pattern["summary"], epochs)
    for tags in pattern["tags"]:
        writer.set_tags(tags)
    for file_name, data, artifact_path in pattern["artifacts"]:
        path = folder / str(index) / file_name
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(data)
        writer.log_artifact(path, artifact_path)
        path.unlink()
    writer.end_run("FINISHED")


def worker(
    uri: str,
    cells: list[tuple[int, str]],
    pattern: dict[str, Any],
    epochs: int,
    epoch_s: float,
    folder: str,
    ready: Any,
    start_at: Any,
    results: Any,
    parent: int,
) -> None:
    """One worker process: its cells in threads, all started at ``start_at``; puts its requests."""
    from initmem_core.errors import RunWarning
    from initmem_core.sweep.executors.local import die_with_parent
    from initmem_core.tracking.cells import quiet_run_links

    die_with_parent(parent)  # however the benchmark ends, no client is left behind

    os.chdir(folder)  # initmem-unsynced/ of a server store is the current folder
    quiet_run_links()
    warnings.simplefilter("ignore", RunWarning)  # failures are counted from the requests instead
    import mlflow.tracking  # noqa: F401  (imported before the clock starts)

    log: list = []
    timed_store(log)
    ready.put(os.getpid())
    while start_at.value == 0.0:
        time.sleep(0.01)
    time.sleep(max(0.0, start_at.value - time.time()))
    failures: list[str] = []
    completed: list[str] = []

    def cell(index: int, run_id: str) -> None:
        try:
            replay_cell(uri, run_id, index, pattern, epochs, epoch_s, Path(folder))
        except Exception as error:  # raised where a real cell would (opening its run): the cell FAILED
            failures.append(f"cell {index}: {type(error).__name__}: {str(error).splitlines()[0][:200]}")
        else:
            completed.append(run_id)

    threads = [threading.Thread(target=cell, args=(index, run_id)) for index, run_id in cells]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    results.put({"requests": log, "failures": failures, "completed": completed})


# -- servers ------------------------------------------------------------------------------------


@contextlib.contextmanager
def mlflow_server(backend_uri: str, folder: Path, env: dict[str, str], app: tuple[str, ...] = ()) -> Iterator[str]:
    """``mlflow server`` as docs/distributed.md starts it, on 127.0.0.1; yields its URL. ``app``:
    ``("--app-name", "basic-auth")`` for the server with a login."""
    options = [*app, "--backend-store-uri", backend_uri, "--artifacts-destination", str(folder / "artifacts")]
    with serve([*options, "--serve-artifacts"], folder / "mlflow-server.log", env, startup_s=STARTUP_S) as url:
        yield url


def postgres_bin() -> Path:
    """The folder of Debian's PostgreSQL programs (not on PATH there), newest version first."""
    on_path = shutil.which("pg_ctl")
    if on_path:
        return Path(os.path.realpath(on_path)).parent
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(p.split("/")[4]))
    if not found:
        raise SystemExit("PostgreSQL is not installed: apt-get install postgresql (or pass --backends sqlite)")
    return Path(found[-1]).parent


@contextlib.contextmanager
def postgres(folder: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """A PostgreSQL cluster of its own in ``folder``, on 127.0.0.1 and a free port; yields the
    backend URI (no password in it) and the environment that holds the password (PGPASSWORD)."""
    binaries, port, password = postgres_bin(), free_port(), secrets.token_hex(16)
    as_owner: list[str] = []
    data, sockets, logs = folder / "pgdata", folder / "pgsock", folder / "pglog"
    for made in (data, sockets, logs):
        made.mkdir()
    password_file = folder / "pgpass"
    password_file.write_text(password)
    password_file.chmod(0o600)
    if os.geteuid() == 0:  # PostgreSQL will not run as root: as the postgres user Debian's package makes
        owner = pwd.getpwnam("postgres")
        folder.chmod(0o711)
        for path in (data, sockets, logs, password_file):
            os.chown(path, owner.pw_uid, owner.pw_gid)
        as_owner = ["runuser", "-u", "postgres", "--"]
    env = {**os.environ, "PGPASSWORD": password}
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE, "text": True, "env": env}

    def check(command: list[str]) -> None:
        done = subprocess.run([*as_owner, *command], **quiet)
        if done.returncode:
            raise RuntimeError(f"{' '.join(command[:2])} failed: {done.stderr.strip()[-2000:]}")

    check(
        [
            str(binaries / "initdb"),
            "-D",
            str(data),
            "-U",
            "initmem",
            "--auth=scram-sha-256",
            f"--pwfile={password_file}",
            "-E",
            "UTF8",
            "--locale=C",
        ]
    )
    password_file.unlink()
    options = f"-c listen_addresses=127.0.0.1 -p {port} -k {sockets} -c max_connections=300 -c fsync=on"
    check(
        [
            str(binaries / "pg_ctl"),
            "-D",
            str(data),
            "-l",
            str(logs / "postgres.log"),
            "-w",
            "-t",
            "120",
            "-o",
            options,
            "start",
        ]
    )
    try:
        check([str(binaries / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "initmem", "mlflow"])
        yield f"postgresql+psycopg2://initmem@127.0.0.1:{port}/mlflow", {"PGPASSWORD": password}
    finally:
        subprocess.run([*as_owner, str(binaries / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"], **quiet)


@contextlib.contextmanager
def backend(name: str, folder: Path) -> Iterator[str]:
    """A fresh tracking server of backend ``name`` in ``folder``; yields its URL."""
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    for key in ("MLFLOW_TRACKING_URI", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):
        env.pop(key, None)
    if name == "sqlite":
        with mlflow_server(f"sqlite:///{folder / 'mlflow.db'}", folder, env) as url:
            yield url
    else:
        with postgres(folder) as (uri, secret), mlflow_server(uri, folder, {**env, **secret}) as url:
            yield url


# -- one load ------------------------------------------------------------------------------------


def prepare_cells(uri: str, cells: int, pattern: dict[str, Any]) -> tuple[list[str], float]:
    """What the sweep writes before handing cells out: the parent, then each child with its
    SCHEDULED status and config params. Returns the run ids and the seconds it took."""
    from initmem_core.tracking.cells import ChildRunWriter, quiet_run_links
    from initmem_core.tracking.client import ensure_experiment, open_client
    from initmem_core.vocabulary import PARENT_TAG, ROLE_TAG, SWEEP_TAG

    quiet_run_links()
    started = time.perf_counter()
    client = open_client(uri)
    experiment_id = ensure_experiment(client, uri, EXPERIMENT)
    sweep = f"load-{cells}"
    parent = client.create_run(experiment_id, run_name=sweep, tags={SWEEP_TAG: sweep, ROLE_TAG: "parent"})
    _, params, _ = pattern["start"]
    run_ids = []
    for index in range(cells):
        run_id = client.create_run(
            experiment_id,
            run_name=f"cell-{index}",
            tags={PARENT_TAG: parent.info.run_id, SWEEP_TAG: sweep, "config_hash": f"{index:016x}"},
        ).info.run_id
        client.update_run(run_id, status="SCHEDULED")
        ChildRunWriter(uri, EXPERIMENT, run_id).start_run(f"cell-{index}", params, {})
        run_ids.append(run_id)
    return run_ids, time.perf_counter() - started


def count_lacking(uri: str, run_ids: list[str], pattern: dict[str, Any], epochs: int, folder: Path) -> dict[str, int]:
    """What the store lacks of what the cells wrote, run by run: values waiting in the spool
    (initmem-unsynced/) and values in neither place."""
    from initmem_core.tracking.client import open_client
    from initmem_core.tracking.pending import read_unsynced, unsynced_folder

    client = open_client(uri)
    spool = unsynced_folder(folder)
    expected_keys = {key: set(range(epochs + 1)) for key in pattern["per_epoch"]}
    for key in pattern["summary"]:
        expected_keys.setdefault(key, set()).add(epochs)
    counts = {"runs_not_finished": 0, "metric_values_expected": 0, "metric_values_stored": 0, "spooled": 0, "lost": 0}
    for run_id in run_ids:
        run = client.get_run(run_id)
        spooled = spool / f"{run_id}.jsonl"
        waiting = read_unsynced(spooled)[1] if spooled.exists() else None
        in_spool = {(key, step) for key, _, _, step in waiting.metrics} if waiting else set()
        counts["runs_not_finished"] += run.info.status != "FINISHED"
        for key, steps in expected_keys.items():
            stored = {m.step for m in client.get_metric_history(run_id, key)} if key in run.data.metrics else set()
            counts["metric_values_expected"] += len(steps)
            counts["metric_values_stored"] += len(steps & stored)
            counts["spooled"] += len({s for s in steps - stored if (key, s) in in_spool})
            counts["lost"] += len({s for s in steps - stored if (key, s) not in in_spool})
        held = set(run.data.tags)
        for tags in pattern["tags"]:
            counts["lost"] += len(set(tags) - held - (set(waiting.tags) if waiting else set()))
        for file_name, _, artifact_path in pattern["artifacts"]:
            listed = {Path(f.path).name for f in client.list_artifacts(run_id, artifact_path)}
            kept = {Path(copy).name for copy, _ in waiting.files} if waiting else set()
            if file_name not in listed:
                counts["spooled" if file_name in kept else "lost"] += 1
        if waiting and waiting.status:
            counts["spooled"] += 1  # its end
    return counts


def load(
    backend_name: str,
    cells: int,
    pattern: dict[str, Any],
    epochs: int,
    epoch_s: float,
    processes: int,
    timeout_s: float,
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"initmem-load-{backend_name}-") as temp:
        folder = Path(temp)
        (folder / "clients").mkdir()
        with backend(backend_name, folder) as url:
            run_ids, prepare_s = prepare_cells(url, cells, pattern)
            context = multiprocessing.get_context("spawn")
            ready, results = context.Queue(), context.Queue()
            start_at = context.Value("d", 0.0)
            shares = [[(i, run_ids[i]) for i in range(p, cells, processes)] for p in range(min(processes, cells))]
            workers = [
                context.Process(
                    target=worker,
                    args=(
                        url,
                        share,
                        pattern,
                        epochs,
                        epoch_s,
                        str(folder / "clients"),
                        ready,
                        start_at,
                        results,
                        os.getpid(),
                    ),
                )
                for share in shares
            ]
            for process in workers:
                process.start()
            try:
                for _ in workers:
                    ready.get(timeout=STARTUP_S)
                start_at.value = time.time() + 0.5
                outcome = [results.get(timeout=timeout_s) for _ in workers]
            finally:
                for process in workers:
                    process.join(timeout=30)
                    if process.is_alive():
                        process.kill()
            # What the cells that ran to their end wrote: a cell that raised failed, as it would in a
            # sweep (its reason is in cells_failed), and what it never wrote is not counted as lost.
            completed = [run_id for part in outcome for run_id in part["completed"]]
            counts = count_lacking(url, completed, pattern, epochs, folder / "clients")
    requests = [request for part in outcome for request in part["requests"]]
    failures = [failure for part in outcome for failure in part["failures"]]
    writes = [r for r in requests if r[0] in WRITES]
    begin = min(r[1] for r in requests)
    end = max(r[1] + r[2] for r in requests)
    seconds = [r[2] for r in writes if not r[3]]
    metric_values = counts["metric_values_stored"]
    return {
        "backend": backend_name,
        "cells": cells,
        "epochs": epochs,
        "processes": len(workers),
        "load_average_1min": round(os.getloadavg()[0], 1),  # this machine's other work, at the end of the load
        "prepare_s": round(prepare_s, 2),
        "load_s": round(end - begin, 2),
        "requests": len(requests),
        "writes": len(writes),
        "writes_per_s": round(len(writes) / (end - begin), 1),
        "metric_values_per_s": round(metric_values / (end - begin), 1),
        "write_median_s": round(statistics.median(seconds), 4) if seconds else None,
        "write_p99_s": round(sorted(seconds)[int(0.99 * (len(seconds) - 1))], 4) if seconds else None,
        "write_slowest_s": round(max(seconds), 3) if seconds else None,
        "failed_requests": sum(1 for r in requests if r[3]),
        "errors": sorted({r[3] for r in requests if r[3]}),
        "cells_completed": len(completed),
        "cells_failed": failures,
        **counts,
    }


def machine() -> dict[str, Any]:
    import mlflow

    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "mlflow": mlflow.__version__,
        "load_average": os.getloadavg()[0],
    }


def stop_on_signal(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)  # through the context managers: servers and cluster stopped


def main() -> None:
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, stop_on_signal)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", default="8,32,128", help="how many cells write at once (a list)")
    parser.add_argument("--backends", default=",".join(BACKENDS), help="sqlite, postgresql or both")
    parser.add_argument("--epochs", type=int, default=20, help="per-epoch metric batches per cell")
    parser.add_argument("--epoch-s", type=float, default=0.0, help="pause between a cell's epochs (0: none)")
    parser.add_argument("--processes", type=int, default=8, help="client processes the cells share")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds one load may take at most")
    parser.add_argument("--json", type=Path, help="write the results here too")
    args = parser.parse_args()
    cells = [int(n) for n in args.cells.split(",")]
    backends = [b for b in args.backends.split(",") if b]
    unknown = set(backends) - set(BACKENDS)
    if unknown or not cells or min(cells) < 1 or max(cells) > 1024 or args.epochs < 1 or args.processes < 1:
        parser.error("--backends takes sqlite and postgresql; --cells 1 to 1024; --epochs and --processes 1 or more")
    with tempfile.TemporaryDirectory(prefix="initmem-load-pattern-") as work:
        pattern = record_pattern(Path(work))
    print(
        f"pattern: {len(pattern['start'][1])} params, {len(pattern['per_epoch'])} metrics per epoch, "
        f"{len(pattern['summary'])} summary metrics, {len(pattern['texts'])} texts, "
        f"{len(pattern['artifacts'])} artifact(s) of {sum(len(a[1]) for a in pattern['artifacts'])} bytes",
        flush=True,
    )
    results = {"machine": machine(), "epochs": args.epochs, "epoch_s": args.epoch_s, "loads": []}
    for name in backends:
        for n in cells:
            result = load(name, n, pattern, args.epochs, args.epoch_s, args.processes, args.timeout)
            results["loads"].append(result)
            print(
                f"{name:>10} N={n:<4} {result['writes_per_s']:>7} writes/s  {result['metric_values_per_s']:>8} "
                f"values/s  write median {result['write_median_s']} s, slowest {result['write_slowest_s']} s  "
                f"failed requests {result['failed_requests']}  cells failed {len(result['cells_failed'])}  "
                f"spooled {result['spooled']}  lost {result['lost']}",
                flush=True,
            )
            if args.json:  # after each load: a long measurement stopped half-way keeps what it has
                args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
