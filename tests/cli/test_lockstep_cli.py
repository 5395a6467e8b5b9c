"""Lockstep from the command line: a sweep file's ``[execution]`` table sets ``--lockstep`` as
the flag does (the flag wins), and a fused sweep's child runs in the store carry every metric,
artifact, tag and summary its plain twin's do, to float tolerance."""

from __future__ import annotations

import subprocess
import warnings

import pytest
from typer.testing import CliRunner

from initmem_cli.app import app
from initmem_core.vocabulary import FINISHED, LOCKSTEP_TAG
from tests.support.cli_processes import children, initmem_command, mlflow_client

runner = CliRunner(env={"COLUMNS": "200"})

SWEEP_FILE = """
[base]
arch = "resnet20"
data = "digits"
epochs = 1
batch_size = 32
train_size = 64
eval_batch_size = 512
threads = 1
[grid]
sigma = [0.5, 1.0, 2.0, 3.0]
"""


def lockstep_lines(tmp_path, execution: str, *flags: str) -> list[str]:
    """What the dry run of the sweep file (with this ``[execution]`` table) says of which cells
    lockstep fuses (not its time estimate: measured)."""
    path = tmp_path / "sweep.toml"
    path.write_text(SWEEP_FILE + execution)
    result = runner.invoke(
        app, ["sweep", "--config", str(path), "--dry-run", "--tracking-uri", f"sqlite:///{tmp_path}/m.db", *flags]
    )
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("lockstep:")]
    return [line for line in lines if "estimated time" not in line]


@pytest.mark.slow
def test_lockstep_true_in_a_sweep_file_fuses_as_the_flag_does_and_the_flag_wins(tmp_path):
    by_flag = lockstep_lines(tmp_path, "", "--lockstep", "on")
    assert by_flag[0] == "lockstep: 4 cells fuse into 1 job(s) of 4"
    assert lockstep_lines(tmp_path, "[execution]\nlockstep = true\n") == by_flag
    assert lockstep_lines(tmp_path, '[execution]\nlockstep = "on"\n') == by_flag
    assert lockstep_lines(tmp_path, "[execution]\nlockstep = true\nlockstep_max = 2\n")[0] == (
        "lockstep: 4 cells fuse into 2 job(s) of 2, 2"
    )
    assert lockstep_lines(tmp_path, "[execution]\nlockstep = true\n", "--lockstep", "off") == []
    # auto is the default: it fuses these 8x8 digits cells at b = 32, where it was measured to pay,
    # and says nothing of lockstep where it fuses nothing (Muon's update is not element-wise)
    assert lockstep_lines(tmp_path, "") == by_flag
    assert lockstep_lines(tmp_path, "", "--opt", "muon") == []
    assert lockstep_lines(tmp_path, "", "--opt", "muon", "--lockstep", "on")[0] == "lockstep: no cells fuse"
    assert lockstep_lines(tmp_path, "[execution]\nlockstep_max = 2\n", "--lockstep", "on")[0].endswith("of 2, 2")


@pytest.mark.parametrize(
    ("execution", "message"),
    [
        (
            "[execution]\nlockstep = 3\n",
            '[execution] lockstep in {path} must be true, false, "auto", "on" or "off", got 3',
        ),
        ("[execution]\nlockstep_max = true\n", "[execution] lockstep_max in {path} must be a whole number"),
        ("[execution]\nworkerz = 2\n", "unknown key 'workerz' in [execution] of {path}; it takes lockstep"),
        ("execution = 1\n", "'execution' in {path} must be a table, [execution]"),
    ],
)
def test_a_bad_execution_table_is_one_line_and_exit_2(tmp_path, execution, message):
    path = tmp_path / "sweep.toml"
    path.write_text(execution + SWEEP_FILE if not execution.startswith("[") else SWEEP_FILE + execution)
    result = runner.invoke(app, ["sweep", "--config", str(path), "--tracking-uri", f"sqlite:///{tmp_path}/m.db"])
    assert result.exit_code == 2, result.output
    assert result.stderr.count("\n") == 1 and message.format(path=path) in result.stderr
    assert not (tmp_path / "m.db").exists()  # nothing tracked


def test_an_option_the_executor_does_not_take_is_left_out_with_a_warning(tmp_path):
    import types

    from cli.sweep_file import with_file_options
    from initmem_core import hookimpl
    from initmem_core.errors import RunWarning
    from initmem_core.plugin_system.loader import get_registry, load_registry

    path = tmp_path / "sweep.toml"
    path.write_text(SWEEP_FILE + "[execution]\nlockstep = true\nlockstep_max = 3\n")
    given = {"lockstep": None, "lockstep_max": 5}
    assert with_file_options(given, None, path, "local", get_registry()) == {"lockstep": True, "lockstep_max": 5}
    for remote in ("ray", "slurm"):  # every built-in executor fuses
        assert with_file_options({"address": None}, None, path, remote, get_registry()) == {
            "address": None,
            "lockstep": True,
            "lockstep_max": 3,
        }
    plain = types.ModuleType("plain_executor")  # an executor plugin that declares no options
    plain.initmem_register_executors = hookimpl(  # type: ignore[attr-defined]
        lambda register: register("plain", "plain_executor:Plain", "takes no options")
    )
    registry = load_registry(entry_points=False, extra_plugins=[("plain", plain)])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert with_file_options({}, None, path, "plain", registry) == {}
    assert [w.category for w in caught] == [RunWarning, RunWarning]
    assert "[execution] lockstep in" in str(caught[0].message) and "--executor plain does not take it" in str(
        caught[0].message
    )


# -- a whole fused sweep against the same sweep unfused -------------------------------------------

CELLS = [
    *("--data", "digits", "--arch", "resnet20", "--sigma", "0.5,2", "--seed", "0,1"),
    *("--epochs", "2", "--train-size", "64", "--batch-size", "32", "--eval-size", "64", "--eval-batch-size", "512"),
]
#: Tags that name the run, its parent or when it ran: a cell's own, whichever sweep ran it.
OWN_TAGS = ("mlflow.parentRunId", "mlflow.runName", "mlflow.source.name", "mlflow.user", "mlflow.source.type")


def sweep_children(tmp_path, name: str, lockstep: str) -> dict:
    """The child runs (by config hash) of the sweep ``name`` run as a process with ``--workers 2``."""
    folder = tmp_path / name
    folder.mkdir()
    uri = f"sqlite:///{folder}/m.db"
    command = initmem_command("sweep", *CELLS, "--name", name, "--workers", "2", "--lockstep", lockstep)
    done = subprocess.run([*command, "--tracking-uri", uri], cwd=folder, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return uri, {run.data.tags["config_hash"]: run for run in children(uri, name)}


def artifacts(client, run_id: str, path: str = "") -> set[str]:
    found = set()
    for item in client.list_artifacts(run_id, path):
        found |= artifacts(client, run_id, item.path) if item.is_dir else {item.path}
    return found


@pytest.mark.slow(seconds=45)
def test_a_fused_sweeps_child_runs_carry_what_the_plain_sweeps_do(tmp_path):
    import torch

    from initmem_core.plugin_system.loader import get_registry

    fused_uri, fused = sweep_children(tmp_path, "fused", "on")
    plain_uri, plain = sweep_children(tmp_path, "plain", "off")
    assert len(fused) == len(plain) == 4 and fused.keys() == plain.keys()
    fused_client, plain_client = mlflow_client(fused_uri), mlflow_client(plain_uri)
    spec, _ = get_registry().lookup("architecture", "resnet20")
    for config_hash, run in fused.items():
        twin = plain[config_hash]
        assert run.info.status == twin.info.status == FINISHED
        assert run.data.tags[LOCKSTEP_TAG] == "2" and LOCKSTEP_TAG not in twin.data.tags
        tags = {k: v for k, v in run.data.tags.items() if k not in (*OWN_TAGS, LOCKSTEP_TAG, "initmem.sweep")}
        twin_tags = {k: v for k, v in twin.data.tags.items() if k not in (*OWN_TAGS, "initmem.sweep")}
        assert tags.keys() == twin_tags.keys()
        assert {k: tags[k] for k in ("config_hash", "stop_reason")} == {
            k: twin_tags[k] for k in ("config_hash", "stop_reason")
        }
        assert run.data.params == twin.data.params
        # every metric (per epoch and summary), each logged at the same steps with the same values
        assert run.data.metrics.keys() == twin.data.metrics.keys()
        for key in twin.data.metrics:
            got = sorted((m.step, m.value) for m in fused_client.get_metric_history(run.info.run_id, key))
            expected = sorted((m.step, m.value) for m in plain_client.get_metric_history(twin.info.run_id, key))
            assert [step for step, _ in got] == [step for step, _ in expected], key
            assert [value for _, value in got] == pytest.approx([value for _, value in expected], rel=1e-3, abs=1e-4), (
                key
            )
        assert artifacts(fused_client, run.info.run_id) == artifacts(plain_client, twin.info.run_id)
        # the final weights: a plain ResNet-20's state dict, the plain cell's to float tolerance
        weights = [
            torch.load(
                client.download_artifacts(r.info.run_id, "final_weights.pt", str(tmp_path / r.info.run_id)),
                weights_only=True,
            )
            for client, r in ((fused_client, run), (plain_client, twin))
        ]
        model = spec.build(in_channels=1, num_classes=10, image_size=8)
        model.load_state_dict(weights[0])  # strict: every key, every shape
        assert weights[0].keys() == weights[1].keys()
        for name, tensor in weights[1].items():
            torch.testing.assert_close(weights[0][name], tensor, rtol=1e-3, atol=1e-4)
            assert (
                weights[0][name].untyped_storage().nbytes() == tensor.untyped_storage().nbytes()
            )  # its own, not the job's
