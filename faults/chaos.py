"""Random faults around a real sweep, checked against an uninterrupted twin.

    python -m faults.chaos --seed 1 --minutes 10 --json chaos-1.json

A seeded fault injector, in the manner of FoundationDB's simulation and Jepsen: a real
``initmem sweep`` (local executor, ``--workers 2``, tiny digits cells on one torch thread), tracked
in a real ``mlflow server`` this script starts on 127.0.0.1 (SQLite backend, in a temporary
folder), is hit at random moments, drawn from ``random.Random(seed)``, by these faults, several
of which may be in force at once:

- ``kill_worker``: SIGKILL one of the sweep's cell worker processes;
- ``kill_helper``: SIGKILL the sweep's tracking helper, the queue process (a multiprocessing
  manager) that carries its workers' tracker calls and progress to the sweep;
- ``kill_sweep``: SIGKILL the sweep process (its workers die with it), then relaunch it;
- ``sigint_sweep``: Ctrl-C (SIGINT to the sweep's process group, as a terminal sends it), then
  relaunch it once it has ended;
- ``kill_server``: SIGKILL the MLflow server (its whole process group), restart it after a delay;
- ``fill_disk``: fill the disk the sweep works on (a tmpfs holding its checkpoints, spool, leases
  and report folder) for a few seconds;
- ``hold_lock``: hold the store's lock, an exclusive SQLite transaction on the server's database,
  for a few seconds.

The sweep works in rounds: each round is one sweep name, launched, hit and relaunched (whenever it
exits, for whatever reason) until the fault phase is over or the sweep says it is done; then,
faults lifted, it is relaunched until it says it is done, ``initmem sync`` is run, and the end
state is checked against a twin sweep of the same grid run first, uninterrupted, in its own
SQLite store:

- every cell has exactly one FINISHED run; no run is left RUNNING, SCHEDULED or KILLED, no run
  belongs to a cell outside the grid (attempts a dead worker ended FAILED are allowed, counted);
- each cell's metric histories (every key, every step, every value, bit for bit: float.hex)
  equal the twin's, and so do its artifacts (config.json, layer_norms.csv, test_correct.json)
  byte for byte;
- the parent's report is the twin's: every parent metric (spread, debiased spread, the latest
  report's memory curves, with their steps) and the report's tables (report.csv, report.md but for
  its title);
- no process is left (none of those seen, none working in the round's folder), no lease is
  held, no temporary file is left (in the round's folder and in the sweep's TMPDIR), the spool
  (initmem-unsynced) is empty.

Each launch that was not SIGKILLed must also end in one clear line (no traceback, no click
"Aborted", exit 2 or 130 with an ``Error: ...`` line); those that do not are listed apart, since
they leave the end state alone. A sweep still running 60 s after a Ctrl-C fails its round.

It prints each fault (seconds since the start, kind, target) and each round's verdict; ``--json``
writes the figures. The fault schedule (kinds, delays, durations, which worker) is drawn from the
seed alone, so a failing seed replays the same schedule; where each fault lands in a sweep's life
still depends on the machine's speed. Needs root (``mount -t tmpfs``), Linux (/proc). Exit 0 when
every round matched its twin, 1 otherwise, 2 for bad input. ``--executor ray``: the cluster mode, on
Ray and PostgreSQL, with faults of its own (``faults/cluster.py``). Not installed: run it from a
clone of the repository. Its pieces live in ``faults/harness.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.machine_info import cpu_model
from faults import cluster
from faults.harness import Chaos, Round, schedule


def machine() -> str:
    return f"{os.cpu_count()} cores ({cpu_model()}), Linux {platform.release()}, Python {platform.python_version()}"


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0, help="draws the fault schedule (random.Random(seed))")
    parser.add_argument(
        "--minutes", type=float, default=5.0, help="how long faults are injected (then the last round ends)"
    )
    parser.add_argument("--faults", type=int, default=None, help="stop injecting after this many faults")
    parser.add_argument("--gap", type=float, default=8.0, help="mean seconds between faults")
    parser.add_argument(
        "--round-minutes",
        type=float,
        default=3.0,
        help="longest fault phase of one round (one sweep name), so that long runs check many end states",
    )
    parser.add_argument("--sigma", default="0.5,2", help="the grid's sigmas")
    parser.add_argument("--seeds", default="0,1", help="the grid's seeds")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--train-size", type=int, default=128)
    parser.add_argument("--tmpfs-size", default="48m", help="size of the sweep's disk")
    parser.add_argument("--max-relaunches", type=int, default=6, help="relaunches without faults before a round fails")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    mode = parser.add_argument_group("the cluster mode (faults/cluster.py)")
    mode.add_argument("--executor", choices=("local", "ray"), default="local", help="ray: the cluster mode")
    mode.add_argument("--server", choices=("sqlite", "postgresql"), default=None, help="the MLflow server's backend")
    mode.add_argument("--nodes", type=int, default=1, help="Ray nodes besides the head")
    mode.add_argument("--head-cpus", type=float, default=1, help="CPUs the Ray head offers cells")
    mode.add_argument("--node-cpus", type=float, default=1, help="CPUs each other Ray node offers cells")
    mode.add_argument("--cpus-per-cell", type=float, default=1)
    mode.add_argument("--writers", type=int, default=None, help="N cells writing while the servers restart")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs, stores)")
    args = parser.parse_args(argv)
    if args.minutes <= 0 or args.gap <= 0 or args.round_minutes <= 0 or (args.faults is not None and args.faults < 1):
        parser.exit(2, "error: --minutes, --round-minutes and --gap must be above 0 and --faults at least 1\n")
    args.server = args.server or ("postgresql" if args.executor == "ray" else "sqlite")
    if (args.executor == "ray") != (args.server == "postgresql") or (args.writers and args.executor != "ray"):
        parser.exit(2, "error: --executor ray goes with --server postgresql (and --writers), local with sqlite\n")
    if args.nodes < 1 or min(args.head_cpus, args.node_cpus, args.cpus_per_cell) <= 0 or (args.writers or 1) < 1:
        parser.exit(2, "error: --nodes, --writers at least 1; --head-cpus, --node-cpus, --cpus-per-cell above 0\n")
    return args


def writers_done(args: argparse.Namespace, figures: dict, work: Path) -> int:
    figures |= {"seed": args.seed, "machine": machine(), "load": os.getloadavg(), "passed": not figures["problems"]}
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures, indent=2), flush=True)
    if figures["passed"] and not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if figures["passed"] else 1


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = "false"  # this process reads artifacts back
    if args.executor == "ray" and os.environ.get(cluster.NETNS) != "1":
        return cluster.in_own_network(sys.argv[1:] if argv is None else argv)
    if not sys.platform.startswith("linux"):
        print("error: chaos.py reads /proc and mounts a tmpfs: Linux only", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="initmem-chaos-"))
    began = time.monotonic()
    print(f"chaos: seed {args.seed}, {args.minutes:g} min of faults, work folder {work}", flush=True)
    try:
        chaos = cluster.ClusterChaos(args, work) if args.executor == "ray" else Chaos(args, work)
    except SystemExit as refused:
        print(refused, file=sys.stderr)
        shutil.rmtree(work, ignore_errors=True)
        return 2
    rounds: list[Round] = []
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        chaos.server.start(wait=False)
        if args.writers:
            chaos.lift_due(everything=True)  # the cluster up
            figures = cluster.writers(chaos, args.writers)
            return writers_done(args, figures, work)
        twin = chaos.run_twin()
        chaos.lift_due(everything=True)  # the server (and the cluster) up
        deadline = time.monotonic() + args.minutes * 60
        faults = schedule(args.seed, args.gap, chaos.kinds)
        number = 0
        while time.monotonic() < deadline and (args.faults is None or sum(chaos.counts.values()) < args.faults):
            number += 1
            round_ = chaos.run_round(
                number, faults, min(deadline, time.monotonic() + args.round_minutes * 60), args.faults
            )
            chaos.check(round_, twin)
            rounds.append(round_)
            verdict = "matches the twin" if not round_.problems else "DIFFERS:\n    " + "\n    ".join(round_.problems)
            if round_.stale:
                verdict += f"\n  parent metrics whose history keeps an earlier launch's report: {len(round_.stale)}"
            if round_.unclear:
                verdict += "\n  launches that did not end in one clear line:\n    " + "\n    ".join(round_.unclear)
            chaos.say(
                f"round {round_.name}: {round_.launches} launches, exits {round_.exits}, "
                f"{round_.failed_attempts} failed attempts; {verdict}"
            )
            shutil.rmtree(round_.folder, ignore_errors=True)
    except KeyboardInterrupt:
        print("chaos: interrupted", file=sys.stderr)
    finally:
        chaos.close()
    passed = bool(rounds) and all(not r.problems for r in rounds)
    if args.keep or not passed or any(r.unclear for r in rounds):
        print(f"chaos: logs and stores kept in {work}", flush=True)
    else:
        shutil.rmtree(work, ignore_errors=True)
    figures = {
        "seed": args.seed,
        "minutes": round((time.monotonic() - began) / 60, 2),
        "machine": machine(),
        "grid": vars(chaos.grid),
        "injected": chaos.counts,
        "no_target": chaos.no_target,
        "rounds": [
            {
                "name": r.name,
                "launches": r.launches,
                "exits": r.exits,
                "failed_attempts": r.failed_attempts,
                "problems": r.problems,
                "unclear": r.unclear,
                "stale": r.stale,
            }
            for r in rounds
        ],
        "twin_seconds": round(chaos.twin_seconds, 1),
        "load": os.getloadavg(),
        "executor": args.executor,
        "passed": passed,
    }
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    total = sum(chaos.counts.values())
    print(
        f"chaos: seed {args.seed}: {total} faults ({', '.join(f'{k} {v}' for k, v in chaos.counts.items())}) in "
        f"{len(rounds)} rounds, {figures['minutes']:.1f} min: "
        + ("every round matched its twin" if passed else "FAILED: a round differs from its twin (above)"),
        flush=True,
    )
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
