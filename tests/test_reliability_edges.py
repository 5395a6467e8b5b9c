"""Reliability at the edges (issue 15): plugins that exit, signals while a run is being ended,
names that would become paths elsewhere, diverged cells, thread counts, a fresh store opened by
two commands at once, and a killed sweep's worker processes.

The bad-input cases of the issue are in test_bad_input.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from signal_progress import SignalAtStep  # noqa: E402  (tests/ is on sys.path)
from typer.testing import CliRunner

import initmem_core
from initmem_cli.app import app
from initmem_core import Stopped, hookimpl
from initmem_core.errors import ConfigError
from initmem_core.plugin_system.loader import load_registry, set_registry
from initmem_core.tracking.tracker import MemoryTracker
from initmem_core.training.stop_signals import StopSignals

runner = CliRunner()
TINY = dict(epochs=1, train_size=64, batch_size=32, threads=1, eval_batch_size=512)
TINY_ARGS = ["--epochs", "1", "--train-size", "64", "--batch-size", "32", "--eval-batch-size", "512"]


# -- plugins that exit -------------------------------------------------------------------------


# Plugin names are unique to this file: an imported module stays in sys.modules for later tests.
@pytest.mark.parametrize(
    "plugin, source, reason",
    [
        ("exitatimportplug", "import sys\nsys.exit(3)\n", "SystemExit: 3"),
        ("baseexcplug", "class Odd(BaseException):\n    pass\n\nraise Odd('odd')\n", "Odd: odd"),
        (
            "exitinhookplug",
            "import sys\nfrom initmem_core import hookimpl\n\n@hookimpl\n"
            "def initmem_register_optimizers(register):\n    sys.exit(4)\n",
            "SystemExit: 4",
        ),
    ],
)
def test_a_plugin_that_exits_is_skipped_with_one_line(install_fake_plugin, plugin, source, reason):
    install_fake_plugin(plugin, source)
    set_registry(None)
    listing = runner.invoke(app, ["plugins"])
    assert listing.exit_code == 0, listing.output
    warnings = [line for line in listing.stderr.splitlines() if plugin in line]
    assert len(warnings) == 1 and warnings[0].startswith("Warning:") and reason in warnings[0]
    assert "resnet20" in listing.stdout
    set_registry(None)
    bad = runner.invoke(app, ["run", "--sigma", "0", "--no-tracking"])  # the registry loads, then validation
    assert bad.exit_code == 2 and "--sigma must be greater than 0" in bad.stderr

    set_registry(None)
    strict = runner.invoke(app, ["--strict-plugins", "plugins"])
    assert strict.exit_code == 2 and reason in strict.stderr and len(strict.stderr.strip().splitlines()) == 1
    set_registry(None)


# -- signals while the run is being ended --------------------------------------------------------


class SignalOnCall(MemoryTracker):
    """A tracker that sends this process a signal when ``call`` is made: a signal arriving while
    the run is being ended (what was a kill with the default handler back in place)."""

    def __init__(self, call: str, signum: int = signal.SIGTERM):
        super().__init__()
        self.call, self.signum, self.sent = call, signum, 0

    def _maybe_signal(self, call: str) -> None:
        if call == self.call and not self.sent:
            self.sent += 1
            os.kill(os.getpid(), self.signum)

    def set_tags(self, tags):
        self._maybe_signal("set_tags")
        super().set_tags(tags)

    def log_artifact(self, local_path, artifact_path=None):
        self._maybe_signal("log_artifact")
        super().log_artifact(local_path, artifact_path)

    def end_run(self, status="FINISHED"):
        self._maybe_signal("end_run")
        super().end_run(status)


def test_a_second_signal_while_stopping_still_ends_the_run_killed(tmp_path):
    tracker = SignalOnCall("set_tags", signal.SIGINT)  # the stop tags the run: a Ctrl-C arrives then
    with pytest.raises(Stopped) as stopped:
        initmem_core.run(tracker=tracker, progress=SignalAtStep(1), checkpoint_dir=str(tmp_path), **TINY)
    assert tracker.sent == 1 and tracker.status == "KILLED" and stopped.value.status == "KILLED"
    assert tracker.tags["stopped_by"] == "SIGTERM"


@pytest.mark.parametrize("call", ["log_artifact", "end_run"])
def test_a_signal_while_a_trained_run_is_written_finishes_it_then_stops(call):
    tracker = SignalOnCall(call)
    with pytest.raises(Stopped) as stopped:
        initmem_core.run(tracker=tracker, **TINY)
    assert tracker.sent == 1 and tracker.status == "FINISHED"
    assert stopped.value.status == "FINISHED" and stopped.value.exit_code == 143
    assert "final_weights.pt" in tracker.files and any(key == "best_val_test_acc" for _, key, _ in tracker.metrics)


def test_handlers_are_back_once_the_run_is_ended():
    before = signal.getsignal(signal.SIGTERM)
    with StopSignals() as stop:
        stop.finishing = True
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)  # recorded, never raised: the run's last writes go on
        assert stop.requested and stop.signum == signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is before


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


# -- names that become paths ---------------------------------------------------------------------


@pytest.mark.parametrize("experiment", ["../../outside", "/tmp/initmem-outside-abs"])
def test_an_experiment_name_keeps_artifacts_beside_the_store(tracking_uri, tmp_path, experiment):
    result = initmem_core.run(tracking_uri=tracking_uri, experiment=experiment, checkpoint_every=0, **TINY)
    from mlflow.tracking import MlflowClient

    location = MlflowClient(tracking_uri).get_run(result.run_id).info.artifact_uri
    assert location.startswith((tmp_path / "mlartifacts").as_uri())
    assert (tmp_path / "mlartifacts").is_dir() and not Path("/tmp/initmem-outside-abs").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "initmem-leases",
        "mlartifacts",
        "mlflow.db",
        "mlflow.db.lock",
    ]


# -- diverged cells are final; threads do not depend on --workers --------------------------------


class NanAfterFirstStep:
    @hookimpl
    def initmem_register_optimizers(self, register):
        register("nan-sgd", build_nan_sgd, "SGD that writes a NaN into the weights after its first step")


def build_nan_sgd(model, config):
    import torch

    class NanSgd(torch.optim.SGD):
        def step(self, closure=None):
            super().step(closure)
            with torch.no_grad():
                next(p for p in model.parameters() if p.ndim == 4).view(-1)[0] = float("nan")

    return NanSgd(model.parameters(), lr=0.05)


def children(uri: str, sweep: str) -> list:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("initmem")
    if experiment is None:  # the sweep has not opened the store yet
        return []
    return [
        r
        for r in client.search_runs([experiment.experiment_id], f"tags.`initmem.sweep` = '{sweep}'")
        if "mlflow.parentRunId" in r.data.tags
    ]


@pytest.mark.slow
def test_a_diverged_cell_is_final_unless_retried(tracking_uri, tmp_path):
    registry = load_registry(entry_points=False, extra_plugins=[("nan", NanAfterFirstStep())])
    grid = {"opt": ["nan-sgd", "sgd"], **TINY}
    launch = dict(name="diverging", tracking_uri=tracking_uri, out=tmp_path / "out", registry=registry)
    first = initmem_core.run_sweep(grid, **launch)
    assert sorted(c.status for c in first.cells) == ["FAILED", "FINISHED"]
    assert len(children(tracking_uri, "diverging")) == 2

    again = initmem_core.run_sweep(grid, **launch)
    assert all(cell.skipped for cell in again.cells) and len(children(tracking_uri, "diverging")) == 2
    [diverged] = [c for c in again.cells if c.status == "FAILED"]
    assert "diverged" in diverged.error or "non-finite" in diverged.error

    retried = initmem_core.run_sweep(grid, retry_failed=True, **launch)
    assert [c.skipped for c in retried.cells if c.config.opt == "nan-sgd"] == [False]
    assert len(children(tracking_uri, "diverging")) == 3  # the diverged cell once more, nothing else


@pytest.mark.slow
def test_threads_are_pinned_recorded_and_never_mixed(tracking_uri, tmp_path):
    grid = {"sigma": [0.5], **{k: v for k, v in TINY.items() if k != "threads"}}
    launch = dict(name="pinned", tracking_uri=tracking_uri, out=tmp_path / "out")
    initmem_core.run_sweep(grid, **launch)
    [child] = children(tracking_uri, "pinned")
    assert child.data.params["threads"] == "1"  # not a share of the machine: the same for any --workers
    with pytest.raises(ConfigError, match=r"computed with --threads 1 in an earlier launch, this one would use 2"):
        initmem_core.run_sweep({**grid, "threads": 2}, **launch)
    from mlflow.tracking import MlflowClient

    parent = MlflowClient(tracking_uri).get_run(child.data.tags["mlflow.parentRunId"])
    assert parent.info.status == "FINISHED" and len(children(tracking_uri, "pinned")) == 1


SWEEP_CELLS = ["--sigma", "0.5,2", "--seed", "0,1"]


def sweep_command(uri: str, name: str, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "initmem_cli",
        "sweep",
        *TINY_ARGS,
        *SWEEP_CELLS,
        "--name",
        name,
        "--tracking-uri",
        uri,
        *extra,
    ]


def metric_histories(uri: str, sweep: str) -> dict:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    histories = {}
    for run in children(uri, sweep):
        for key in run.data.metrics:
            history = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, key))
            histories[(run.data.tags["config_hash"], key)] = history
    return histories


@pytest.mark.slow
def test_one_and_two_workers_give_the_same_bits(tracking_uri, tmp_path):
    for workers in ("1", "2"):
        done = subprocess.run(
            sweep_command(tracking_uri, f"w{workers}", "--workers", workers, "--out", str(tmp_path / workers)),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stdout + done.stderr
    one, two = metric_histories(tracking_uri, "w1"), metric_histories(tracking_uri, "w2")
    assert len(one) >= 4 * 14 and one == two


# -- a fresh store opened by two commands at once ------------------------------------------------


@pytest.mark.slow
def test_two_sweeps_started_together_on_an_empty_folder_both_finish(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    # Different cells: two sweeps on one cell would rightly leave it to whichever leased it first.
    processes = [
        subprocess.Popen(
            sweep_command(uri, f"together-{i}", "--sigma", str(i + 1), "--seed", "0", "--out", str(tmp_path / str(i))),
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    outputs = [process.communicate(timeout=600)[0] for process in processes]
    for process, output in zip(processes, outputs):
        assert process.returncode == 0 and "Traceback" not in output, output
    assert {run.info.status for i in range(2) for run in children(uri, f"together-{i}")} == {"FINISHED"}


# -- a killed sweep's workers die with it --------------------------------------------------------


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


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signals are Linux's")
def test_no_worker_outlives_a_killed_sweep_and_a_relaunch_runs_each_cell_once(tracking_uri, tmp_path):
    command = sweep_command(tracking_uri, "orphans", "--workers", "2", "--out", str(tmp_path / "out"))
    command[command.index("--epochs") + 1] = "30"  # long enough to be killed mid-cell
    process = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    while len(children(tracking_uri, "orphans")) < 2:  # both workers have a cell
        assert process.poll() is None and time.monotonic() < deadline
        time.sleep(0.5)
    below = descendants(process.pid)
    assert len(below) >= 3  # two workers and the queue's manager at least
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    deadline = time.monotonic() + 5
    while any(alive(pid) for pid in below) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in below if alive(pid)]

    again = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout + again.stderr
    runs = children(tracking_uri, "orphans")
    assert sorted(r.info.status for r in runs) == ["FINISHED"] * 4  # one child per cell, none left RUNNING

    # Bit-exact with the same sweep never interrupted, in a store of its own.
    (tmp_path / "reference").mkdir()
    reference_uri = f"sqlite:///{tmp_path / 'reference' / 'mlflow.db'}"
    reference = [reference_uri if part == tracking_uri else part for part in command]
    done = subprocess.run(reference, cwd=tmp_path / "reference", capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert metric_histories(tracking_uri, "orphans") == metric_histories(reference_uri, "orphans")


# -- unsynced files name their run and their copies: neither may point outside ---------------------


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
    from initmem_core.tracking.pending import read_unsynced

    with pytest.raises(ConfigError, match="which is not a run id; move it out of the way"):
        read_unsynced(write_unsynced(tmp_path / "initmem-unsynced", run_id))


def test_an_unsynced_artifact_outside_its_runs_copies_is_refused_and_left_alone(tmp_path):
    from initmem_core.tracking.pending import read_unsynced

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
