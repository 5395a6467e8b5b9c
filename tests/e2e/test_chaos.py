"""The fault-injection harness (faults/chaos.py, faults/harness.py, faults/cluster.py): its schedule
is the seed's, its checks catch what they claim, its Ray cluster brings a token of its own, and a
short seeded run around a real sweep and server ends matching its twin (slow)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.support.long_commands import run_command


def load_chaos():
    """The harness's pieces (``faults.harness``) and its command's (``faults.chaos``), as one namespace."""
    from types import SimpleNamespace

    from faults import chaos, harness

    return SimpleNamespace(**vars(harness), parse=chaos.parse)


def test_the_fault_schedule_is_the_seeds_and_brings_every_kind_as_often():
    chaos = load_chaos()

    def first(seed, count=28):
        faults = chaos.schedule(seed, mean_gap_s=8.0)
        return [next(faults) for _ in range(count)]

    assert first(7) == first(7)  # a failing seed replays the same faults
    assert first(7) != first(8)
    faults = first(7)
    for start in range(0, 28, 7):  # every block of seven holds each kind once
        assert sorted(f.kind for f in faults[start : start + 7]) == sorted(chaos.KINDS)
    assert all(0.2 * 8 <= f.delay <= 1.8 * 8 and 1.0 <= f.duration <= 6.0 and 0 <= f.pick < 1 for f in faults)


def twin_state():
    history = {"test_acc": [(0, (0.25).hex()), (1, (0.5).hex())], "train_loss": [(1, (1.5).hex())]}
    cell = {
        "statuses": ["FINISHED"],
        "histories": history,
        "name": "resnet20-sgd-s0.5-seed0",
        "artifacts": {"config.json": "abc"},
    }
    return {
        "parents": ["FINISHED"],
        "cells": {"h1": cell},
        "failed_attempts": 0,
        "parent_metrics": {"spread_x": [(0, (27.5).hex())]},
        "parent_latest": {"spread_x": (27.5).hex()},
        "report": {"report.csv": ["a,b", "1,2"]},
    }


def test_the_end_state_check_passes_the_twin_and_names_each_difference():
    import copy

    chaos = load_chaos()
    twin = twin_state()
    assert chaos.compare(copy.deepcopy(twin), twin) == []

    def changed(edit):
        state = copy.deepcopy(twin)
        edit(state)
        return chaos.compare(state, twin)

    one_bit = (0.5).hex().replace("0p-1", "1p-1")  # 0.5 + 2**-53: the next float up
    assert float.fromhex(one_bit) != 0.5
    said = changed(lambda s: s["cells"]["h1"]["histories"].__setitem__("test_acc", [(0, (0.25).hex()), (1, one_bit)]))
    assert len(said) == 1 and "metric test_acc differs" in said[0]
    said = changed(lambda s: s["cells"]["h1"]["histories"]["test_acc"].append((1, (0.5).hex())))  # a step written twice
    assert len(said) == 1 and "3 values vs 2" in said[0]
    said = changed(lambda s: s["cells"]["h1"]["statuses"].append("FINISHED"))
    assert "want exactly one FINISHED" in said[0]
    said = changed(lambda s: s["cells"]["h1"]["statuses"].append("RUNNING"))
    assert "want exactly one FINISHED" in said[0]
    assert changed(lambda s: s["cells"]["h1"]["statuses"].insert(0, "FAILED")) == []  # a dead worker's attempt
    said = changed(lambda s: s["cells"].__setitem__("h2", {"statuses": ["FINISHED"], "histories": None}))
    assert "outside the grid" in said[0]
    said = changed(lambda s: s["cells"].pop("h1"))
    assert "no run" in said[0]
    said = changed(lambda s: s["cells"]["h1"]["artifacts"].__setitem__("config.json", "abd"))
    assert "artifacts differ" in said[0]
    said = changed(lambda s: s["parent_latest"].__setitem__("spread_x", (27.0).hex()))
    assert "parent metric spread_x" in said[0]
    earlier = copy.deepcopy(twin)  # a relaunch's report is the latest; an earlier one stays in the history
    earlier["parent_metrics"]["spread_x"].insert(0, (0, (30.5).hex()))
    assert chaos.compare(earlier, twin) == []
    assert chaos.parent_history_notes(earlier, twin) == [
        "parent metric spread_x: 2 values in its history, the twin's 1"
    ]
    said = changed(lambda s: s["report"].__setitem__("report.csv", ["a,b", "1,3"]))
    assert "report/report.csv differs" in said[0]
    assert "parent runs" in changed(lambda s: s.__setitem__("parents", ["FINISHED", "RUNNING"]))[0]


def test_an_ending_that_is_not_one_clear_line_is_named():
    chaos = load_chaos()
    assert chaos.unclear_ending(2, "sweep x\nError: the store cannot be reached\n") == []
    assert chaos.unclear_ending(130, "sweep x\nError: interrupted; launch it again\n") == []
    assert chaos.unclear_ending(0, "4 cells: 4 ran\n") == []
    assert "printed a traceback" in chaos.unclear_ending(130, "Traceback (most recent call last):\nError: interrupted")
    assert any("Aborted" in said for said in chaos.unclear_ending(1, "sweep x\n\nAborted.\n"))
    assert any("without an 'Error: ...' line" in said for said in chaos.unclear_ending(2, "sweep x\n4 cells\n"))
    assert "died of signal 6" in chaos.unclear_ending(-6, "")
    assert chaos.unclear_ending(-2, "sweep x\nError: interrupted; launch it again\n") == []
    assert any("without an 'Error: ...' line" in said for said in chaos.unclear_ending(-2, "sweep x\n"))


def test_files_a_killed_sweep_may_leave_are_found(tmp_path):
    import fcntl

    chaos = load_chaos()
    folder, tmp = tmp_path / "round", tmp_path / "tmp"
    (folder / "initmem-leases").mkdir(parents=True)
    (folder / "initmem-checkpoints" / "abc").mkdir(parents=True)
    (folder / "initmem-checkpoints" / "abc" / "ckpt-e000001-s000000.pt").write_bytes(b"x")
    tmp.mkdir()
    (tmp / "torchinductor_root").mkdir()
    (folder / "initmem-unsynced").mkdir()
    (folder / "initmem-unsynced" / ".sync.lock").write_text("")  # initmem sync's lock, free: not a write
    assert chaos.files_left(folder, tmp) == []

    (folder / "initmem-checkpoints" / "abc" / "ckpt-e000002-s000000.pt.tmp").write_bytes(b"x")
    (tmp / "initmem-sweep-abc").mkdir()
    (folder / "initmem-unsynced" / "run.jsonl").write_text("{}\n")
    lease = folder / "initmem-leases" / "abc.lock"
    with open(lease, "w") as held, open(folder / "initmem-unsynced" / ".sync.lock", "w") as syncing:
        fcntl.flock(held, fcntl.LOCK_EX)
        fcntl.flock(syncing, fcntl.LOCK_EX)
        said = chaos.files_left(folder, tmp)
    assert sorted(said) == sorted(
        [
            "lease abc.lock still held",
            "sync lock .sync.lock still held",
            "initmem-unsynced holds ['run.jsonl'] after initmem sync",
            "file left: initmem-checkpoints/abc/ckpt-e000002-s000000.pt.tmp",
            "temporary file left in TMPDIR: initmem-sweep-abc",
        ]
    )


def short_chaos_run(folder: Path) -> list[str]:
    """Seven faults (one of each kind, in the seed's order) around a two-cell sweep."""
    faults = ["--seed", "3", "--faults", "7", "--gap", "3", "--minutes", "3"]
    grid = ["--sigma", "0.5,2", "--seeds", "0", "--epochs", "2"]
    return [sys.executable, "-m", "faults.chaos", *faults, *grid, "--json", str(folder / "chaos.json")]


@pytest.mark.slow(seconds=120)
@pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.geteuid() != 0,
    reason="chaos.py mounts a tmpfs (root) and reads /proc (Linux)",
)
def test_a_short_seeded_chaos_run_matches_its_twin(short_tmp):
    """The short run's end state is checked against the twin. About a minute and a half on a 2-core machine."""
    done, out = run_command(short_chaos_run(short_tmp), short_tmp), short_tmp / "chaos.json"
    figures = json.loads(out.read_text())
    assert done.returncode == 0 and figures["passed"], done.stdout[-6000:] + done.stderr[-3000:]
    assert sum(figures["injected"].values()) == 7 and figures["rounds"]
    assert all(not r["problems"] for r in figures["rounds"])
    assert "every round matched its twin" in done.stdout


# -- the cluster mode (faults/cluster.py) -----------------------------------------------------------


def test_the_cluster_schedule_brings_each_of_its_kinds_as_often():
    chaos = load_chaos()
    from faults import cluster

    faults = chaos.schedule(5, 10.0, cluster.KINDS)
    drawn = [next(faults) for _ in range(24)]
    for start in range(0, 24, 8):
        assert sorted(f.kind for f in drawn[start : start + 8]) == sorted(cluster.KINDS)


def test_the_writers_figures_count_between_the_first_and_last_value_stored():
    from faults.cluster import writer_figures

    # Nothing stored while the cells start (0-4 s), then 10 values a second, a restart (12-20 s:
    # the database unreachable, then answering with nothing new), and the sweep's end (no growth).
    samples = [(t, 0) for t in range(5)]
    samples += [(t, 10 * (t - 4)) for t in range(5, 13)]
    samples += [(t, None) for t in range(13, 17)] + [(t, 80) for t in range(17, 20)]
    samples += [(t, 80 + 10 * (t - 19)) for t in range(20, 25)] + [(t, 130) for t in range(25, 40)]
    # (130 - 10) values from the first growth (5 s) to the last (24 s); nothing new from 12 s to 20 s
    assert writer_figures(samples) == {"values_per_s": 6.3, "longest_stall_s": 8.0, "metric_values": 130}
    assert writer_figures([(0, 0), (1, None)])["longest_stall_s"] is None


def test_the_writers_check_names_a_lost_value_a_step_twice_and_a_second_finished_run():
    import copy

    from faults.cluster import lost

    cell = {"statuses": ["FINISHED"], "histories": {"loss": [(1, "a"), (2, "b")], "acc": [(2, "c")]}}
    state = {"parents": ["FINISHED"], "cells": {f"h{i}": copy.deepcopy(cell) for i in range(3)}}
    assert lost(state, 3) == []
    assert lost(state, 4) == ["3 cells in the store, want 4"]
    state["cells"]["h0"]["histories"]["loss"].pop()  # a value lost
    assert lost(state, 3) == ["cells differ in the steps they hold: [1, 2] cells per shape"]
    state["cells"]["h0"]["histories"]["loss"] += [(2, "b"), (2, "b")]  # written twice
    assert "cell h0: a step recorded twice" in lost(state, 3)
    state["cells"]["h1"]["statuses"].append("FINISHED")
    assert "cell h1: runs ['FINISHED', 'FINISHED'] (want exactly one FINISHED)" in lost(state, 3)


def test_the_cluster_mode_refuses_a_sqlite_server_in_one_line(capsys):
    chaos = load_chaos()
    with pytest.raises(SystemExit) as ended:
        chaos.parse(["--executor", "ray", "--server", "sqlite"])
    assert ended.value.code == 2
    assert capsys.readouterr().err.strip() == (
        "error: --executor ray goes with --server postgresql (and --writers), local with sqlite"
    )


def test_the_cluster_brings_its_own_ray_token_whatever_the_home_folder_holds(tmp_path, monkeypatch):
    from faults import cluster

    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "someone-elses-token"))
    ray = cluster.RayCluster(tmp_path / "ray", 1, 1, 1)
    assert ray.env["RAY_AUTH_MODE"] == "token" and len(ray.env["RAY_AUTH_TOKEN"]) == 64
    assert "RAY_AUTH_TOKEN_PATH" not in ray.env  # nor a path given, nor ~/.ray/auth_token: the token set here
    assert cluster.RayCluster(tmp_path / "other", 1, 1, 1).env["RAY_AUTH_TOKEN"] != ray.env["RAY_AUTH_TOKEN"]
    # The sweep, Ray's driver, presents the same token.
    harness = object.__new__(cluster.ClusterChaos)
    harness.tmp, harness.cluster = tmp_path, ray
    driver = harness.env()
    assert driver["RAY_AUTH_TOKEN"] == ray.env["RAY_AUTH_TOKEN"] and driver["RAY_AUTH_MODE"] == "token"
    assert "RAY_AUTH_TOKEN_PATH" not in driver and driver["TMPDIR"] == str(tmp_path)
