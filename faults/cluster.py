"""The fault-injection harness's cluster mode (``faults/chaos.py --executor ray``): the sweep on a
local Ray cluster, tracked in an MLflow server on PostgreSQL, hit by what a cluster does. Docs:
docs/RELIABILITY.md, docs/distributed.md.

    python -m faults.chaos --executor ray --server postgresql --seed 1 --minutes 3
    python -m faults.chaos --executor ray --writers 128 --json writers.json

All of it runs in a network namespace whose only interface is loopback (``unshare --net``: Ray's
servers listen on every interface, and Ray trades 127.0.0.1 for the machine's address): PostgreSQL
(Debian's package, a cluster of its own), ``mlflow server`` on it, and a Ray head with ``--nodes``
more nodes (each ``ray start --block``, one process tree to kill). The faults, shuffled rounds of:

- ``kill_ray_worker``: SIGKILL a Ray worker running a cell (Ray retries the task);
- ``kill_node``: SIGKILL a non-head node's tree (raylet and workers); back after 1-6 s;
- ``restart_head``: SIGKILL the head's tree (and the other nodes'), restart them at once;
- ``restart_db_fast``/``restart_db_slow``: ``pg_ctl stop -m fast``, start at once / 5-30 s later;
- ``kill_server``: SIGKILL the MLflow server, restart it 1-6 s later;
- ``reset_connections``: reset every TCP connection to MLflow and PostgreSQL (``ss -K``);
- ``kill_sweep``: SIGKILL the launching process (``initmem sweep``, the Ray driver); relaunch.

A node whose process ends by itself is restarted a second later, as a supervisor would. The end
state is checked as chaos.py checks it (the twin: the grid on the local executor, on the CPU), and
no Ray task or actor may be left. ``--writers N``: N tiny cells while the MLflow and PostgreSQL
servers restart; PostgreSQL's metric table is sampled twice a second (values stored per second, the
longest time none was), and every cell must hold one FINISHED run with each epoch's values once.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import pwd
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from faults.harness import (
    Chaos,
    Fault,
    Round,
    Server,
    alive,
    cmdline,
    descendants,
    end_state,
    free_port,
    kill_tree,
    schedule,
)

KINDS = (
    "kill_ray_worker",
    "kill_node",
    "restart_head",
    "restart_db_fast",
    "restart_db_slow",
    "kill_server",
    "reset_connections",
    "kill_sweep",
)
RAY = [sys.executable, "-c", "from ray.scripts.scripts import main; main()"]
NETNS = "INITMEM_CHAOS_NETNS"
AGENTS = ("ray::IDLE", "ray::DashboardAgent", "ray::RuntimeEnvAgent")
START_S = 300  # a loaded 2-core machine starts a Ray node in 20-60 s


def in_own_network(argv: list[str]) -> int:
    """Run the harness again in a network namespace whose only interface is loopback; its exit code."""
    if os.geteuid() != 0 or not Path("/usr/bin/unshare").exists():
        print("error: the cluster mode runs in a network namespace of its own: needs root and unshare", file=sys.stderr)
        return 2
    command = ["unshare", "--net", "--", "sh", "-c", 'ip link set lo up && exec "$@"', "sh"]
    command += [sys.executable, "-m", "faults.chaos", *argv]
    child = subprocess.Popen(command, env={**os.environ, NETNS: "1"})
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C reaches the child too; it cleans up
    signal.signal(signal.SIGTERM, lambda *_: child.send_signal(signal.SIGTERM))
    return child.wait()


class Postgres:
    """A PostgreSQL cluster of its own in ``folder`` (trust on 127.0.0.1 only, in the namespace)."""

    def __init__(self, folder: Path):
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(p.split("/")[4]))
        if not found:
            raise SystemExit("error: PostgreSQL is not installed: apt-get install postgresql")
        if importlib.util.find_spec("psycopg2") is None:  # the MLflow server's driver, and the probe's
            raise SystemExit("error: the PostgreSQL mode needs psycopg2: pip install psycopg2-binary")
        self.bin, self.folder, self.port = Path(found[-1]).parent, folder, free_port()
        self.data, self.as_owner = folder / "pgdata", []
        folder.mkdir()
        if os.geteuid() == 0:  # PostgreSQL will not run as root: as the user Debian's package makes
            owner = pwd.getpwnam("postgres")
            os.chown(folder, owner.pw_uid, owner.pw_gid)
            self.as_owner = ["runuser", "-u", "postgres", "--"]
        self.run("initdb", "-D", self.data, "-U", "initmem", "--auth=trust", "-E", "UTF8", "--locale=C")
        self.start()
        self.run("createdb", "-h", "127.0.0.1", "-p", self.port, "-U", "initmem", "mlflow")
        self.uri = f"postgresql+psycopg2://initmem@127.0.0.1:{self.port}/mlflow"

    def run(self, program: str, *args: object, check: bool = True) -> None:
        done = subprocess.run(
            [*self.as_owner, str(self.bin / program), *map(str, args)], capture_output=True, text=True, timeout=START_S
        )
        if check and done.returncode:
            raise RuntimeError(f"{program} failed: {done.stderr.strip()[-2000:]}")

    def start(self) -> None:
        options = f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.folder} -c max_connections=300"
        log = self.folder / "postgres.log"
        self.run("pg_ctl", "-D", self.data, "-l", log, "-w", "-t", START_S, "-o", options, "start")

    def stop(self, mode: str = "fast") -> None:
        self.run("pg_ctl", "-D", self.data, "-m", mode, "-w", "-t", "60", "stop", check=False)

    def pid(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def close(self) -> None:
        self.stop("immediate")
        if (pid := self.pid()) and alive(pid):
            kill_tree(pid)


def ray_environment() -> dict[str, str]:
    """The environment of the harness's Ray head, its nodes and the sweep that drives them: token
    authentication with a token of the cluster's own, given to every one of them. Ray 2.60 turns
    token authentication on for a head that finds ``~/.ray/auth_token`` (left by an earlier
    ``ray get-auth-token --generate`` or cluster) and a node that joins without that token is
    refused; with the mode and the token set here, nothing in the home folder decides either."""
    env = {name: value for name, value in os.environ.items() if name != "RAY_AUTH_TOKEN_PATH"}
    return env | {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}


class RayCluster:
    """A head and ``nodes`` more node processes on 127.0.0.1, each ``ray start --block`` in a session of its own."""

    def __init__(self, folder: Path, nodes: int, head_cpus: float, node_cpus: float):
        self.folder, self.port = folder, free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.cpus = [head_cpus] + [node_cpus] * nodes
        self.processes: list[subprocess.Popen | None] = [None] * (nodes + 1)  # [0]: the head
        self.logs: list[Path] = [folder] * (nodes + 1)
        self.starts = 0
        self.env = ray_environment()
        folder.mkdir()

    def start(self, index: int) -> None:
        where = ["--head", "--port", str(self.port), "--include-dashboard", "false"]
        where += ["--temp-dir", str(self.folder / "t")]
        log = self.folder / f"node{index}-{self.starts}.log"
        self.starts += 1
        with open(log, "wb") as out:
            self.processes[index] = subprocess.Popen(
                [*RAY, "start", *(where if index == 0 else ["--address", self.address])]
                + ["--num-cpus", str(self.cpus[index]), "--disable-usage-stats", "--block"],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=self.folder,
                env=self.env,
            )
        self.logs[index] = log

    def kill(self, index: int) -> int:
        process = self.processes[index]
        assert process is not None
        kill_tree(process.pid)
        with_tree = process.wait()
        self.processes[index] = None
        return with_tree

    def up(self, index: int) -> bool:
        process = self.processes[index]
        return process is not None and process.poll() is None and "Ray runtime started" in self.logs[index].read_text()

    def exited(self) -> list[int]:
        """Nodes whose process ended by itself (not killed here)."""
        return [i for i, p in enumerate(self.processes) if p is not None and p.poll() is not None]

    def wait_up(self) -> None:
        deadline = time.monotonic() + START_S
        while not all(self.up(i) for i in range(len(self.processes))):
            for index in self.exited():  # e.g. a node that tried to join before the head was up
                self.start(index)
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Ray cluster did not start: {self.logs[0].read_text()[-2000:]}")
            time.sleep(0.5)

    def pids(self) -> set[int]:
        return {pid for p in self.processes if p is not None for pid in (p.pid, *descendants(p.pid))}

    def tasks(self) -> list[int]:
        """Ray worker processes running a cell or an actor (not idle ones, nor Ray's agents)."""
        return sorted(
            pid for pid in self.pids() if cmdline(pid).startswith("ray::") and not cmdline(pid).startswith(AGENTS)
        )

    def close(self) -> None:
        for index, process in enumerate(self.processes):
            if process is not None:
                self.kill(index)


class ClusterChaos(Chaos):
    kinds = KINDS
    twin_args = ("--device", "cpu")  # what the Ray executor makes of a cell that asks for no GPU

    def setup(self) -> None:
        self.work.chmod(0o711)  # PostgreSQL's user reaches its folder
        self.db = Postgres(self.work / "pg")
        self.server = Server(self.work / "server", self.db.uri)
        self.cluster = RayCluster(self.work / "ray", self.args.nodes, self.args.head_cpus, self.args.node_cpus)
        self.rounds_folder = self.work / "rounds"
        self.rounds_folder.mkdir()
        self.db_back_at: float | None = None
        self.back_at: dict[int, float] = {}  # Ray node (0: the head) -> when it is restarted
        for index in range(len(self.cluster.processes)):
            self.cluster.start(index)

    def env(self) -> dict[str, str]:
        """The sweep's environment: the cluster's token, as the Ray driver must present it."""
        ray = {name: self.cluster.env[name] for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")}
        return {name: value for name, value in super().env().items() if name != "RAY_AUTH_TOKEN_PATH"} | ray

    def sweep_args(self, round_: Round) -> list[str]:
        return [
            *self.grid.args()[:-2],  # not --workers: Ray's cells ask for CPUs
            *("--executor", "ray", "--ray-address", self.cluster.address),
            *("--cpus-per-cell", str(self.args.cpus_per_cell)),
            *("--name", round_.name, "--tracking-uri", self.server.url),
        ]

    def spools(self, round_: Round) -> list[Path]:
        return [round_.folder, self.cluster.folder]  # the Ray workers' folder: their checkpoints, spool

    def apply(self, fault: Fault) -> str | None:
        kind, now, cluster = fault.kind, time.monotonic(), self.cluster
        if kind == "kill_ray_worker":
            tasks = [pid for pid in cluster.tasks() if cmdline(pid).startswith("ray::initmem")]
            if not tasks:
                return None
            pid = tasks[int(fault.pick * len(tasks))]
            what = cmdline(pid)[:60]
            os.kill(pid, signal.SIGKILL)
            return f"Ray worker pid {pid} ({what})"
        if kind == "restart_head":  # the other nodes too: they die without their head, and while
            # one of them runs, `ray start --head` finds its GCS address in use on this machine
            if self.back_at or not cluster.up(0):
                return None
            for index in range(len(cluster.processes)):
                cluster.kill(index)
                self.back_at[index] = now + (0.5 if index == 0 else 2.0)
            return "Ray head (and every node) killed, restarted at once"
        if kind == "kill_node":
            index = 1 + int(fault.pick * (len(cluster.processes) - 1))
            if cluster.processes[index] is None or index in self.back_at:
                return None
            cluster.kill(index)
            self.back_at[index] = now + fault.duration
            return f"Ray node {index} killed, back in {fault.duration:.1f} s"
        if kind in ("restart_db_fast", "restart_db_slow"):
            if self.db_back_at is not None:
                return None
            self.db.stop("fast")
            self.db_back_at = now + (0.0 if kind == "restart_db_fast" else 5 * fault.duration)
            return f"PostgreSQL stopped (pg_ctl -m fast), back in {self.db_back_at - now:.1f} s"
        if kind == "reset_connections":
            ports = " or ".join(f"sport = :{p} or dport = :{p}" for p in (self.server.port, self.db.port))
            command = ["ss", "-K", "-tn", "state", "established", f"( {ports} )"]
            done = subprocess.run(command, capture_output=True, text=True)
            return f"{max(0, len(done.stdout.splitlines()) - 1)} TCP connections reset (ss -K)"
        return super().apply(fault)

    def lift_due(self, everything: bool = False) -> None:
        now = time.monotonic()
        if self.db_back_at is not None and (everything or now >= self.db_back_at):
            self.db.start()
            self.db_back_at = None
            self.say("PostgreSQL restarted")
        for index in self.cluster.exited():  # ended by itself: a supervisor restarts it a second later
            self.cluster.processes[index] = None
            self.back_at.setdefault(index, now + 1.0)
            self.say(f"Ray {'head' if index == 0 else f'node {index}'} exited by itself; restart in 1 s")
        for index, at in sorted(self.back_at.items()):
            if everything or now >= at:
                self.cluster.start(index)
                del self.back_at[index]
                self.say(f"Ray {'head' if index == 0 else f'node {index}'} restarted")
        super().lift_due(everything)
        if everything:
            self.cluster.wait_up()

    def sweep_ended(self, round_: Round) -> int | None:
        round_.seen.update(self.cluster.tasks())  # a cell's Ray worker, checked like a local worker
        return super().sweep_ended(round_)

    def check(self, round_: Round, twin: dict) -> None:
        round_.seen -= {pid for pid in round_.seen if cmdline(pid).startswith("ray::IDLE")}  # a reused worker
        super().check(round_, twin)
        left = [f"{pid} ({cmdline(pid)[:60]})" for pid in self.cluster.tasks()]
        if left:
            round_.problems.append("Ray tasks or actors still running: " + ", ".join(left))

    def close(self) -> None:
        if self.sweep is not None:
            kill_tree(self.sweep.pid)
            self.sweep.wait()
        self.cluster.close()
        if self.server.process is not None and self.server.up:
            self.server.kill()
        self.db.close()
        self.disk_free_at = self.lock_free_at = None


def sample_metrics(db: Postgres) -> int | None:
    """How many metric values PostgreSQL holds, or None while it does not answer."""
    import psycopg2

    try:
        with psycopg2.connect(host="127.0.0.1", port=db.port, user="initmem", dbname="mlflow", connect_timeout=2) as c:
            with c.cursor() as cursor:
                cursor.execute("SELECT count(*) FROM metrics")
                return cursor.fetchone()[0]
    except psycopg2.Error:
        return None


def writers(chaos: ClusterChaos, cells: int) -> dict:
    """``cells`` tiny cells through the cluster, a round of chaos.py with the servers' restarts
    for faults, PostgreSQL's metric table sampled twice a second meanwhile; the figures."""
    chaos.grid.seeds = ",".join(map(str, range(cells // len(chaos.grid.sigmas.split(",")))))
    chaos.twin_seconds = chaos.args.minutes * 10  # chaos.py calls a launch hung after 6 twins' time
    samples: list[tuple[float, int | None]] = []
    stop, began = threading.Event(), time.monotonic()

    def sample() -> None:
        while not stop.wait(0.5):
            samples.append((time.monotonic() - began, sample_metrics(chaos.db)))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        faults = schedule(chaos.args.seed, chaos.args.gap, ("kill_server", "restart_db_fast"))
        round_ = chaos.run_round(1, faults, began + chaos.args.minutes * 60, None)
    finally:
        stop.set()
        sampler.join()
    problems = round_.problems + lost(end_state(chaos.server.url, round_.name), cells)
    figures = {"cells": cells, "seconds": round(time.monotonic() - began, 1), "exits": round_.exits}
    return figures | {"injected": chaos.counts} | writer_figures(samples) | {"problems": problems}


def writer_figures(samples: list[tuple[float, int | None]]) -> dict:
    """From (seconds, metric values stored) samples (None: the database did not answer), between
    the first and the last value stored: values stored per second, and the longest time in which
    none was."""
    counts = [(t, n) for t, n in samples if n is not None]
    growth = [later for earlier, later in zip(counts, counts[1:]) if later[1] > earlier[1]]
    if len(growth) < 2:
        return {"values_per_s": 0.0, "longest_stall_s": None, "metric_values": counts[-1][1] if counts else 0}
    stall = max(later[0] - earlier[0] for earlier, later in zip(growth, growth[1:]))
    return {
        "values_per_s": round((growth[-1][1] - growth[0][1]) / (growth[-1][0] - growth[0][0]), 1),
        "longest_stall_s": round(stall, 1),
        "metric_values": growth[-1][1],
    }


def lost(state: dict, cells: int) -> list[str]:
    """What the store lacks or holds twice: every cell one FINISHED run, every metric key's steps
    once each and the same as the other cells' (all cells train the same epochs)."""
    problems = [] if state["parents"] == ["FINISHED"] else [f"parent runs: {state['parents']}"]
    if len(state["cells"]) != cells:
        problems.append(f"{len(state['cells'])} cells in the store, want {cells}")
    shapes = Counter()
    for key, cell in state["cells"].items():
        if cell["statuses"].count("FINISHED") != 1 or set(cell["statuses"]) - {"FINISHED", "FAILED"}:
            problems.append(f"cell {key}: runs {cell['statuses']} (want exactly one FINISHED)")
        steps = {metric: tuple(step for step, _ in values) for metric, values in (cell["histories"] or {}).items()}
        if any(len(set(s)) != len(s) for s in steps.values()):
            problems.append(f"cell {key}: a step recorded twice")
        shapes[tuple(sorted(steps.items()))] += 1
    if len(shapes) > 1:
        problems.append(f"cells differ in the steps they hold: {sorted(shapes.values())} cells per shape")
    return problems
