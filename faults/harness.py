"""The fault-injection harness's shared pieces: the fault schedule, the servers and processes it
starts and kills, a round of a sweep hit by faults, and the checks of a round's end state against
its uninterrupted twin. ``faults/chaos.py`` is the command (what it does: its docstring);
``faults/cluster.py`` its cluster mode, built on these pieces.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import fcntl
import hashlib
import os
import random
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

INITMEM = [sys.executable, "-m", "initmem_cli"]
KINDS = ("kill_worker", "kill_helper", "kill_sweep", "sigint_sweep", "kill_server", "fill_disk", "hold_lock")
EXPERIMENT = "initmem"
ARTIFACTS = ("config.json", "layer_norms.csv", "test_correct.json")
SERVER_START_S = 120  # a loaded 2-core machine starts an MLflow server in 20 s
STOP_AFTER_SIGINT_S = 60  # a Ctrl-C'd sweep that has not ended by then hangs (a finding)


# -- processes, from /proc ---------------------------------------------------------------------


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, parent pid, start time in ticks) of ``pid``, or None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return fields[0], int(fields[1]), int(fields[19])


def alive(pid: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[0] != "Z"


def all_pids() -> list[int]:
    return [int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()]


def children(pid: int) -> list[int]:
    return [child for child in all_pids() if (_stat(child) or ("", -1, 0))[1] == pid]


def descendants(pid: int) -> set[int]:
    tree: dict[int, list[int]] = {}
    for child in all_pids():
        stat = _stat(child)
        if stat:
            tree.setdefault(stat[1], []).append(child)
    found, todo = set(), [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def working_in(folder: Path) -> list[int]:
    """Live processes whose current folder is ``folder`` or below."""
    found = []
    for pid in all_pids():
        with contextlib.suppress(OSError):
            cwd = os.readlink(f"/proc/{pid}/cwd")
            if (cwd == str(folder) or cwd.startswith(str(folder) + "/")) and alive(pid):
                found.append(pid)
    return found


def sweep_helpers(sweep_pid: int) -> tuple[int | None, list[int]]:
    """(tracking helper, cell workers) of a sweep process: both are spawned processes
    (``spawn_main``); the helper, the queue's manager, is started before the worker pool."""
    spawned = [pid for pid in children(sweep_pid) if "spawn_main" in cmdline(pid) and alive(pid)]
    spawned.sort(key=lambda pid: (_stat(pid) or ("", 0, 0))[2])
    if not spawned:
        return None, []
    return spawned[0], spawned[1:]


def kill_tree(pid: int, sig: int = signal.SIGKILL) -> None:
    for member in [pid, *descendants(pid)]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(member, sig)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# -- the services ------------------------------------------------------------------------------


class Server:
    """``mlflow server`` on a SQLite database, 127.0.0.1, one worker; killed and restarted on the same port."""

    def __init__(self, folder: Path, backend: str = "", env: dict[str, str] | None = None):
        self.folder = folder
        self.database = folder / "mlflow.db"
        self.backend = backend or f"sqlite:///{self.database}"
        self.extra_env = env or {}
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None
        self.starts = 0

    def start(self, wait: bool = True) -> None:
        log = open(self.folder / f"server-{self.starts}.log", "wb")
        self.starts += 1
        env = dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false", **self.extra_env)
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mlflow",
                "server",
                "--backend-store-uri",
                self.backend,
                "--artifacts-destination",
                str(self.folder / "artifacts"),
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--workers",
                "1",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            cwd=self.folder,
        )
        log.close()
        if wait:
            self.wait_healthy()

    def wait_healthy(self) -> None:
        deadline = time.monotonic() + SERVER_START_S
        while True:
            with contextlib.suppress(OSError):
                if urllib.request.urlopen(f"{self.url}/health", timeout=2).status == 200:
                    return
            if self.process is None or self.process.poll() is not None or time.monotonic() > deadline:
                log = self.folder / f"server-{self.starts - 1}.log"
                raise RuntimeError(f"mlflow server did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)

    @property
    def up(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> int:
        assert self.process is not None
        pid = self.process.pid
        members = {pid, *descendants(pid)}
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        for member in members:
            with contextlib.suppress(ProcessLookupError):
                os.kill(member, signal.SIGKILL)
        self.process.wait()
        deadline = time.monotonic() + 10
        while any(alive(member) for member in members) and time.monotonic() < deadline:
            time.sleep(0.05)
        return pid


class Disk:
    """A tmpfs mounted on ``folder``: the sweep's checkpoints, spool, leases and report live on it."""

    def __init__(self, folder: Path, size: str):
        self.folder = folder
        folder.mkdir(parents=True)
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True, text=True
        )
        if done.returncode != 0:
            raise SystemExit(
                f"error: cannot mount a tmpfs on {folder} ({done.stderr.strip() or 'not root?'}); "
                "chaos.py fills the sweep's disk and needs root"
            )
        self.filler: Path | None = None

    def fill(self) -> int:
        """Write a filler file until the disk refuses more (ENOSPC); returns its size."""
        self.filler = self.folder / ".chaos-filler"
        chunk, written = b"\0" * (1 << 20), 0
        with open(self.filler, "wb", buffering=0) as out:
            while True:
                try:
                    written += out.write(chunk)
                except OSError as error:
                    if error.errno != errno.ENOSPC:
                        raise
                    if len(chunk) > 4096:
                        chunk = chunk[:4096]
                        continue
                    return written

    def free(self) -> None:
        if self.filler is not None:
            self.filler.unlink(missing_ok=True)
            self.filler = None

    def unmount(self) -> None:
        self.free()
        subprocess.run(["umount", "-l", str(self.folder)], capture_output=True)


class Lock:
    """An exclusive SQLite transaction on the server's database, held by this process."""

    def __init__(self, database: Path):
        self.database = database
        self.connection: sqlite3.Connection | None = None

    def hold(self) -> None:
        self.connection = sqlite3.connect(self.database, timeout=10, isolation_level=None)
        self.connection.execute("BEGIN EXCLUSIVE")

    def release(self) -> None:
        if self.connection is not None:
            with contextlib.suppress(sqlite3.Error):
                self.connection.execute("ROLLBACK")
            self.connection.close()
            self.connection = None


# -- the schedule ------------------------------------------------------------------------------


@dataclass
class Fault:
    delay: float  # seconds after the previous fault
    kind: str
    duration: float  # kill_server: down for; fill_disk, hold_lock: held for
    pick: float  # kill_worker: which worker, as a fraction of their number


def schedule(seed: int, mean_gap_s: float, kinds: tuple[str, ...] = KINDS) -> Iterator[Fault]:
    """The faults, from the seed alone: kinds in shuffled rounds of all of ``kinds`` (so every kind
    comes as often as the others), delays uniform around ``mean_gap_s``."""
    rng = random.Random(seed)
    while True:
        order = list(kinds)
        rng.shuffle(order)
        for kind in order:
            yield Fault(rng.uniform(0.2, 1.8) * mean_gap_s, kind, rng.uniform(1.0, 6.0), rng.random())


# -- the sweep -----------------------------------------------------------------------------------


@dataclass
class Grid:
    sigmas: str
    seeds: str
    epochs: int
    train_size: int

    def args(self) -> list[str]:
        return [
            "--sigma",
            self.sigmas,
            "--seed",
            self.seeds,
            "--epochs",
            str(self.epochs),
            "--train-size",
            str(self.train_size),
            "--batch-size",
            "32",
            "--eval-batch-size",
            "512",
            "--threads",
            "1",
            "--workers",
            "2",
        ]


@dataclass
class Round:
    name: str
    folder: Path  # the sweep's working folder, on the tmpfs
    logs: Path  # its launches' output, off the tmpfs (a full disk is for the sweep's files, not its terminal)
    launches: int = 0
    exits: list[int] = field(default_factory=list)
    seen: set[int] = field(default_factory=set)  # every sweep, helper and worker pid seen
    problems: list[str] = field(default_factory=list)  # the end state, or a hang: the round failed
    unclear: list[str] = field(default_factory=list)  # launches that did not end in one clear line
    stale: list[str] = field(default_factory=list)  # parent metric histories holding an earlier launch's report
    failed_attempts: int = 0


class Chaos:
    kinds = KINDS
    twin_args: tuple[str, ...] = ()

    def __init__(self, args: argparse.Namespace, work: Path):
        self.args = args
        self.work = work
        self.grid = Grid(args.sigma, args.seeds, args.epochs, args.train_size)
        self.start = time.monotonic()
        self.tmp = work / "tmp"  # the sweeps' TMPDIR: what they leave there is checked
        self.tmp.mkdir()
        (work / "server").mkdir()
        self.counts = {kind: 0 for kind in self.kinds}
        self.no_target = {kind: 0 for kind in self.kinds}
        self.setup()
        self.sweep: subprocess.Popen | None = None
        self.sweep_log: Any = None
        self.sweep_started = 0.0
        self.sigint_at: float | None = None
        self.server_back_at: float | None = None
        self.disk_free_at: float | None = None
        self.lock_free_at: float | None = None
        self.twin_seconds = 0.0

    def setup(self) -> None:
        """The services the sweep works with: a server on SQLite, a tmpfs as its disk."""
        self.server = Server(self.work / "server")
        self.disk = Disk(self.work / "disk", self.args.tmpfs_size)
        self.rounds_folder = self.disk.folder
        self.lock = Lock(self.server.database)

    def sweep_args(self, round_: Round) -> list[str]:
        return [*self.grid.args(), "--name", round_.name, "--tracking-uri", self.server.url]

    def spools(self, round_: Round) -> list[Path]:
        return [round_.folder]

    def say(self, text: str) -> None:
        print(f"{time.monotonic() - self.start:8.1f}s  {text}", flush=True)

    def env(self) -> dict[str, str]:
        return dict(
            os.environ,
            TMPDIR=str(self.tmp),
            PYTHONUNBUFFERED="1",
            COLUMNS="120",
            MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR="false",
        )

    # -- the twin --

    def run_twin(self) -> dict:
        folder = self.work / "twin"
        folder.mkdir()
        began = time.monotonic()
        uri = f"sqlite:///{folder / 'mlflow.db'}"
        with open(folder / "sweep.log", "wb") as log:
            code = subprocess.run(
                [*INITMEM, "sweep", *self.grid.args(), *self.twin_args, "--name", "twin", "--tracking-uri", uri],
                cwd=folder,
                env=self.env(),
                stdout=log,
                stderr=subprocess.STDOUT,
            ).returncode
        if code != 0:
            raise RuntimeError(f"the twin sweep failed (exit {code}):\n{(folder / 'sweep.log').read_text()[-3000:]}")
        self.twin_seconds = time.monotonic() - began
        self.say(f"twin sweep done in {self.twin_seconds:.0f} s")
        return end_state(uri, "twin")

    # -- a sweep launch --

    def launch(self, round_: Round) -> None:
        round_.launches += 1
        self.sweep_log = open(round_.logs / f"sweep-{round_.launches}.log", "wb")
        self.sweep = subprocess.Popen(
            [*INITMEM, "sweep", *self.sweep_args(round_)],
            cwd=round_.folder,
            env=self.env(),
            stdout=self.sweep_log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.sweep_started = time.monotonic()
        self.sigint_at = None
        round_.seen.add(self.sweep.pid)

    def sweep_ended(self, round_: Round) -> int | None:
        """The exit code if the sweep ended (and is then forgotten), else None; a sweep that
        hangs is killed and recorded as a problem."""
        assert self.sweep is not None
        helper, workers = sweep_helpers(self.sweep.pid)
        round_.seen.update(pid for pid in [helper, *workers] if pid)
        code = self.sweep.poll()
        now = time.monotonic()
        if code is None and self.sigint_at is not None and now - self.sigint_at > STOP_AFTER_SIGINT_S:
            round_.problems.append(
                f"launch {round_.launches}: still running {STOP_AFTER_SIGINT_S} s after Ctrl-C "
                f"(log {self.sweep_log.name})"
            )
            kill_tree(self.sweep.pid)
            code = self.sweep.wait()
        hang_s = max(300.0, 6 * self.twin_seconds)
        if code is None and now - self.sweep_started > hang_s:
            round_.problems.append(
                f"launch {round_.launches}: still running after {hang_s:.0f} s, hung (log {self.sweep_log.name})"
            )
            kill_tree(self.sweep.pid)
            code = self.sweep.wait()
        if code is None:
            return None
        self.sweep_log.close()
        self.sweep = None
        round_.exits.append(code)
        if code != -signal.SIGKILL:
            round_.unclear.extend(
                f"launch {round_.launches}: {said}"
                for said in unclear_ending(code, Path(self.sweep_log.name).read_text(errors="replace"))
            )
        return code

    # -- faults --

    def inject(self, fault: Fault, round_: Round) -> bool:
        """Apply ``fault``; False if its target is not there now (no sweep, no worker yet...)."""
        target = self.apply(fault)
        if target is None:
            return False
        self.counts[fault.kind] += 1
        self.say(f"{fault.kind:<13} {target}   [round {round_.name}]")
        return True

    def apply(self, fault: Fault) -> str | None:
        """Apply ``fault``; what it hit, or None if its target is not there now."""
        kind, sweep = fault.kind, self.sweep
        target = ""
        if kind in ("kill_worker", "kill_helper", "kill_sweep", "sigint_sweep"):
            if sweep is None or sweep.poll() is not None or self.sigint_at is not None:
                return None
            helper, workers = sweep_helpers(sweep.pid)
            if kind == "kill_worker":
                if not workers:
                    return None
                pid = workers[int(fault.pick * len(workers))]
                target = f"worker pid {pid} of sweep pid {sweep.pid}"
                os.kill(pid, signal.SIGKILL)
            elif kind == "kill_helper":
                if helper is None:
                    return None
                target = f"tracking helper pid {helper} of sweep pid {sweep.pid}"
                os.kill(helper, signal.SIGKILL)
            elif kind == "kill_sweep":
                target = f"sweep pid {sweep.pid} ({len(workers)} workers)"
                os.kill(sweep.pid, signal.SIGKILL)
            else:
                target = f"sweep pid {sweep.pid}'s process group"
                os.killpg(sweep.pid, signal.SIGINT)
                self.sigint_at = time.monotonic()
        elif kind == "kill_server":
            if not self.server.up:
                return None
            pid = self.server.kill()
            self.server_back_at = time.monotonic() + fault.duration
            target = f"server pid {pid}, back in {fault.duration:.1f} s"
        elif kind == "fill_disk":
            if self.disk.filler is not None:
                return None
            size = self.disk.fill()
            self.disk_free_at = time.monotonic() + fault.duration
            target = f"{self.disk.folder} full ({size >> 20} MiB filler) for {fault.duration:.1f} s"
        elif kind == "hold_lock":
            if self.lock.connection is not None or not self.server.database.exists():
                return None
            self.lock.hold()
            self.lock_free_at = time.monotonic() + fault.duration
            target = f"exclusive lock on {self.server.database.name} for {fault.duration:.1f} s"
        return target

    def lift_due(self, everything: bool = False) -> None:
        """End the faults whose time is up (all of them: ``everything``), the server last."""
        now = time.monotonic()
        if self.disk_free_at is not None and (everything or now >= self.disk_free_at):
            self.disk.free()
            self.disk_free_at = None
        if self.lock_free_at is not None and (everything or now >= self.lock_free_at):
            self.lock.release()
            self.lock_free_at = None
        if self.server_back_at is None and self.server.process is not None and not self.server.up:
            # MLflow's own start can fail (a database locked past SQLite's wait as it checks its
            # schema): what an operator's restart policy does, a second later
            self.say(f"server exited by itself (exit {self.server.process.returncode}); restart in 1 s")
            self.server_back_at = now + 1.0
        if self.server_back_at is not None and (everything or now >= self.server_back_at):
            self.server.start(wait=False)
            self.server_back_at = None
            self.say("server restarted")
        if everything:
            for attempt in range(3):
                try:
                    return self.server.wait_healthy()
                except RuntimeError:
                    if attempt == 2:
                        raise
                    self.server.start(wait=False)

    # -- a round --

    def run_round(self, number: int, faults: Iterator[Fault], deadline: float, fault_limit: int | None) -> Round:
        round_ = Round(
            f"chaos-{self.args.seed}-{number}",
            self.rounds_folder / f"round-{number}",
            self.work / "logs" / f"round-{number}",
        )
        round_.folder.mkdir()
        round_.logs.mkdir(parents=True)
        self.say(f"round {round_.name}: launch")
        self.launch(round_)
        fault = next(faults)
        due = time.monotonic() + fault.delay
        postponed = 0
        while time.monotonic() < deadline and (fault_limit is None or sum(self.counts.values()) < fault_limit):
            self.lift_due()
            code = self.sweep_ended(round_) if self.sweep is not None else None
            if code is not None:
                self.say(f"sweep exited {code}")
                if code == 0:
                    break
                self.launch(round_)
            if time.monotonic() >= due:
                if self.inject(fault, round_) or postponed >= 20:
                    if postponed >= 20:
                        self.no_target[fault.kind] += 1
                    fault, postponed = next(faults), 0
                    due = time.monotonic() + fault.delay
                else:  # no target now (between launches, before the workers): a second later
                    postponed += 1
                    due = time.monotonic() + 1.0
            time.sleep(0.2)
        self.say(f"round {round_.name}: faults lifted, relaunch until done")
        self.lift_due(everything=True)
        for _ in range(self.args.max_relaunches):
            if self.sweep is None:
                self.launch(round_)
            while (code := self.sweep_ended(round_)) is None:
                time.sleep(0.2)
            self.say(f"sweep exited {code}")
            if code == 0:
                break
        else:
            round_.problems.append(
                f"not done after {self.args.max_relaunches} relaunches without faults (exits {round_.exits})"
            )
        code = 0
        with open(round_.logs / "sync.log", "wb") as log:
            for folder in self.spools(round_):  # where cells keep what the store did not take
                done = subprocess.run(
                    [*INITMEM, "sync", "--tracking-uri", self.server.url],
                    cwd=folder,
                    env=self.env(),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
                code = code or done.returncode
        said = (round_.logs / "sync.log").read_text().strip()
        self.say(f"initmem sync: exit {code}: {said.splitlines()[-1] if said else ''}")
        if code != 0:
            round_.problems.append(f"initmem sync exited {code}: {said[-500:]}")
        if any(
            line.startswith("synced") for line in said.splitlines()
        ):  # the parent's report was written before these: a relaunch rewrites it
            self.launch(round_)
            while (code := self.sweep_ended(round_)) is None:
                time.sleep(0.2)
            if code != 0:
                round_.problems.append(f"the relaunch after initmem sync exited {code}")
        return round_

    def check(self, round_: Round, twin: dict) -> None:
        time.sleep(1.0)  # a process that is exiting
        left = sorted(pid for pid in round_.seen if alive(pid)) + working_in(round_.folder)
        if left:
            round_.problems.append("processes left: " + ", ".join(f"{pid} ({cmdline(pid)[:80]})" for pid in set(left)))
        state = end_state(self.server.url, round_.name)
        round_.failed_attempts = state["failed_attempts"]
        round_.problems.extend(compare(state, twin))
        round_.stale = parent_history_notes(state, twin)
        round_.problems.extend(files_left(round_.folder, self.tmp))

    def close(self) -> None:
        if self.sweep is not None:
            kill_tree(self.sweep.pid)
            self.sweep.wait()
        self.lock.release()
        if self.server.process is not None and self.server.up:
            self.server.kill()
        self.disk.unmount()


# -- the end state ----------------------------------------------------------------------------


def end_state(uri: str, name: str) -> dict:
    """What the store holds for sweep ``name``: per cell (config hash) its runs' statuses, the
    FINISHED run's metric histories and artifacts; the parent's metrics and report tables."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(EXPERIMENT)
    runs, token = [], None
    while True:
        page = client.search_runs(
            [experiment.experiment_id], f"tags.`initmem.sweep` = '{name}'", max_results=1000, page_token=token
        )
        runs.extend(page)
        token = page.token
        if not token:
            break
    parents = [run for run in runs if run.data.tags.get("initmem.role") == "parent"]
    cells: dict[str, dict] = {}
    failed_attempts = 0
    for run in runs:
        if run.data.tags.get("initmem.role") == "parent":
            continue
        cell = cells.setdefault(run.data.tags.get("config_hash", "?"), {"statuses": [], "histories": None})
        cell["statuses"].append(run.info.status)
        if run.info.status == "FAILED":
            failed_attempts += 1
        if run.info.status == "FINISHED":
            cell["name"] = run.info.run_name
            cell["histories"] = histories(client, run)
            cell["artifacts"] = artifact_digests(client, run.info.run_id, ARTIFACTS)
    state: dict[str, Any] = {
        "parents": [(p.info.status) for p in parents],
        "cells": cells,
        "failed_attempts": failed_attempts,
    }
    if len(parents) == 1:
        parent = parents[0]
        from initmem_core.tracking.sweep_runs import current_curves

        # The latest report's: an earlier launch's curves are in charts of their own (report-<n>/)
        tags = parent.data.tags
        state["parent_metrics"] = current_curves(histories(client, parent), tags)
        state["parent_latest"] = current_curves(
            {key: float(value).hex() for key, value in parent.data.metrics.items()}, tags
        )
        folder = Path(tempfile.mkdtemp(prefix="chaos-report-"))
        try:
            state["report"] = {}
            for table in ("report.csv", "report.md"):
                path = Path(client.download_artifacts(parent.info.run_id, f"report/{table}", str(folder)))
                lines = path.read_text().splitlines()
                state["report"][table] = lines[1:] if table == "report.md" else lines  # .md: title names the sweep
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    return state


def histories(client, run) -> dict[str, list[tuple[int, str]]]:
    """Every metric key's history, as sorted (step, float.hex(value)) pairs: duplicates show."""
    return {
        key: sorted((m.step, float(m.value).hex()) for m in client.get_metric_history(run.info.run_id, key))
        for key in sorted(run.data.metrics)
    }


def artifact_digests(client, run_id: str, names: tuple[str, ...]) -> dict[str, str]:
    folder = Path(tempfile.mkdtemp(prefix="chaos-artifacts-"))
    try:
        digests = {}
        for name in names:
            try:
                path = client.download_artifacts(run_id, name, str(folder))
            except Exception as error:  # absent: recorded as such, compared with the twin's
                digests[name] = f"missing ({type(error).__name__})"
                continue
            digests[name] = hashlib.sha256(Path(path).read_bytes()).hexdigest()
        return digests
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def compare(state: dict, twin: dict) -> list[str]:
    problems = []
    if state["parents"] != ["FINISHED"]:
        problems.append(f"parent runs: {state['parents']} (want one, FINISHED)")
    for key in sorted(set(state["cells"]) | set(twin["cells"])):
        cell, model = state["cells"].get(key), twin["cells"].get(key)
        if model is None:
            problems.append(f"cell {key}: runs {cell['statuses']} for a cell outside the grid")
            continue
        if cell is None:
            problems.append(f"cell {model['name']}: no run")
            continue
        label = model["name"]
        finished = cell["statuses"].count("FINISHED")
        strays = [status for status in cell["statuses"] if status not in ("FINISHED", "FAILED")]
        if finished != 1 or strays:
            problems.append(
                f"cell {label}: runs {cell['statuses']} (want exactly one FINISHED, none left "
                "RUNNING, SCHEDULED or KILLED)"
            )
        if cell["histories"] is None:
            continue
        for metric in sorted(set(cell["histories"]) | set(model["histories"])):
            got, want = cell["histories"].get(metric), model["histories"].get(metric)
            if got != want:
                problems.append(
                    f"cell {label}: metric {metric} differs from the twin's: "
                    f"{len(got or [])} values vs {len(want or [])}, first difference "
                    f"{first_difference(got or [], want or [])}"
                )
        if cell["artifacts"] != model["artifacts"]:
            problems.append(f"cell {label}: artifacts differ: {cell['artifacts']} vs the twin's {model['artifacts']}")
    if "parent_latest" in state:
        for metric in sorted(set(state["parent_latest"]) | set(twin["parent_latest"])):
            got, want = state["parent_latest"].get(metric), twin["parent_latest"].get(metric)
            if got != want:
                problems.append(f"parent metric {metric}: {got} vs the twin's {want}")
        for table, lines in twin["report"].items():
            if state["report"].get(table) != lines:
                problems.append(f"parent's report/{table} differs from the twin's")
    return problems


def unclear_ending(code: int, log: str) -> list[str]:
    """What is wrong with how a sweep that was not SIGKILLed ended: a traceback, a crash, an
    error that is not one line."""
    said = []
    if "Traceback" in log:
        said.append("printed a traceback")
    if "Aborted" in log:
        said.append("ended with click's 'Aborted', not a line that says why")
    if (
        code < 0 and code != -signal.SIGINT
    ):  # dying of the SIGINT it handled is Ctrl-C's convention (the shell says 130)
        said.append(f"died of signal {-code}")
    lines = [line for line in log.splitlines() if line.strip()]
    if code in (2, 130, -signal.SIGINT) and not (lines and lines[-1].startswith("Error: ")):
        said.append(f"exit {code} without an 'Error: ...' line (last: {lines[-1][:120] if lines else 'nothing'!r})")
    return said


def parent_history_notes(state: dict, twin: dict) -> list[str]:
    """Parent metrics whose history holds more than the twin's: an earlier launch's figures at step 0
    (MLflow's metrics are append-only; the UI charts a figure's latest value); the latest values are
    compared in ``compare``. An earlier launch's memory curves are in charts of their own, left out."""
    notes = []
    for metric in sorted(set(state.get("parent_metrics", {})) & set(twin["parent_metrics"])):
        got, want = state["parent_metrics"][metric], twin["parent_metrics"][metric]
        if got != want:
            notes.append(f"parent metric {metric}: {len(got)} values in its history, the twin's {len(want)}")
    return notes


def first_difference(got: list, want: list) -> Any:
    for a, b in zip(got, want):
        if a != b:
            return f"{a} vs {b}"
    return "(one is longer)"


def files_left(folder: Path, tmp: Path) -> list[str]:
    """Held leases, temporary files and spooled writes left in the round's folder or TMPDIR."""
    from initmem_plugins.commands.uploads import SYNC_LOCK

    problems = []
    spool = folder / "initmem-unsynced"
    # A lock file stays where it was taken (leases, sync's own lock in the spool): only a held one is left over.
    for lock in sorted((folder / "initmem-leases").glob("*.lock")) + sorted(spool.glob(SYNC_LOCK)):
        with open(lock, "a") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(handle, fcntl.LOCK_UN)
            except OSError:
                problems.append(f"{'lease' if lock.parent != spool else 'sync lock'} {lock.name} still held")
    waiting = sorted(p.name for p in spool.iterdir() if p.name != SYNC_LOCK) if spool.is_dir() else []
    if waiting:
        problems.append(f"initmem-unsynced holds {waiting} after initmem sync")
    for path in folder.rglob("*"):
        relative = path.relative_to(folder)
        name = path.name
        expected = relative.parts[0] in ("initmem-leases", "initmem-output", "initmem-unsynced") or (
            relative.parts[0] == "initmem-checkpoints"
            and (path.is_dir() or (name.startswith("ckpt-") and name.endswith(".pt")))
        )
        if not expected:
            problems.append(f"file left: {relative}")
    for path in tmp.iterdir():
        if not path.name.startswith("torchinductor_"):  # torch's compile cache, not initmem's
            problems.append(f"temporary file left in TMPDIR: {path.name}")
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
    return problems
