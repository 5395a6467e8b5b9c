"""Checkpoint files: tensors packed into a few flat buffers, written off the training thread; a
disk that refuses one fails the run in one line, and --resume completes it."""

from __future__ import annotations

import math
import subprocess

import pytest
import torch

from initmem_core.training.checkpoint_format import (
    FORMAT,
    UnusableCheckpoint,
    history_columns,
    history_rows,
    read_checkpoint,
)
from initmem_core.training.checkpoint_store import CheckpointNotWritten, CheckpointStore
from initmem_core.training.tensor_packing import pack, unpack
from tests.support.cli_processes import TINY_RUN_ARGS as TINY_ARGS
from tests.support.cli_processes import history, initmem_command, only_run, runs_in


def nested_state():
    torch.manual_seed(0)
    return {
        "model": {
            "conv.weight": torch.randn(4, 3, 3, 3).contiguous(memory_format=torch.channels_last),
            "bn.num_batches_tracked": torch.tensor(7),
            "fc.weight": torch.randn(5, 4).t(),
        },
        "optimizer": {
            "state": {0: {"momentum_buffer": torch.randn(6), "step": torch.tensor(3.0)}},
            "param_groups": [{"lr": 0.1, "betas": (0.9, 0.99), "params": [0]}],
        },
        "flags": torch.tensor([True, False]),
        "half": torch.randn(3, dtype=torch.bfloat16),
        "bytes": torch.arange(10, dtype=torch.uint8),
        "empty": torch.zeros(0, 2),
        "epoch": 3,
        "note": None,
    }


def assert_same(restored, original):
    if isinstance(original, torch.Tensor):
        assert isinstance(restored, torch.Tensor) and restored.dtype == original.dtype
        assert restored.shape == original.shape and torch.equal(restored, original)
        return
    assert type(restored) is type(original)
    if isinstance(original, dict):
        assert restored.keys() == original.keys()
        for key in original:
            assert_same(restored[key], original[key])
    elif isinstance(original, (list, tuple)):
        assert len(restored) == len(original)
        for a, b in zip(restored, original):
            assert_same(a, b)
    else:
        assert restored == original


def test_packing_keeps_every_value_dtype_shape_and_structure_in_one_buffer_per_dtype(tmp_path):
    state = nested_state()
    packed = pack(state)
    assert sorted(packed["buffers"]) == ["bfloat16", "bool", "float32", "int64", "uint8"]
    torch.save(packed, tmp_path / "p.pt")
    restored = unpack(torch.load(tmp_path / "p.pt", weights_only=True))  # plain data: no unpickling of code
    assert_same(restored, state)
    assert restored["model"]["conv.weight"].is_contiguous(memory_format=torch.channels_last)
    assert restored["model"]["fc.weight"].is_contiguous()  # a transposed view comes back dense, same values
    # Each restored tensor owns its memory: training on it cannot write into a neighbour.
    restored["optimizer"]["state"][0]["momentum_buffer"].add_(1)
    assert torch.equal(restored["model"]["bn.num_batches_tracked"], torch.tensor(7))
    views = unpack(packed, copy=False)
    assert views["epoch"] == 3 and views["bytes"].data_ptr() != state["bytes"].data_ptr()


def test_a_checkpoint_file_is_a_few_packed_tensors_and_reads_back_whole(tmp_path):
    payload = {
        **nested_state(),
        "format": FORMAT,
        "config": {"sigma": 2.0},
        "config_hash": "abc",
        "run_id": "r1",
        "epoch": 2,
        "step": 0,
        "history": [{"epoch": 0, "val_acc": 0.5}],
        "scheduler": {"last_epoch": 4},
    }
    store = CheckpointStore(tmp_path / "run")
    path = store.save(payload)
    store.wait()
    assert path.name == "ckpt-e000002-s000000.pt" and path.exists()
    raw = torch.load(path, weights_only=True)
    assert (raw["run_id"], raw["epoch"], raw["config"]) == ("r1", 2, {"sigma": 2.0})  # the header reads as is
    assert sorted(raw["packed"]["buffers"]) == ["bfloat16", "bool", "float32", "float64", "int64", "uint8"]
    assert_same({k: v for k, v in read_checkpoint(path).items() if k in payload}, payload)
    assert read_checkpoint(path, mmap=True)["epoch"] == 2


def test_a_checkpoint_of_another_format_is_refused_in_a_few_words(tmp_path):
    old = {
        "format": "initmem-checkpoint/1",
        "config": {},
        "config_hash": "abc",
        "run_id": "r1",
        "epoch": 1,
        "step": 0,
        "model": {"w": torch.ones(2)},
        "optimizer": {},
        "scheduler": {},
    }
    torch.save(old, tmp_path / "ckpt-e000001-s000000.pt")
    with pytest.raises(UnusableCheckpoint, match="is not an initmem checkpoint of this version"):
        read_checkpoint(tmp_path / "ckpt-e000001-s000000.pt")


def test_the_state_is_captured_when_save_returns_not_when_the_file_is_written(tmp_path):
    weights = torch.zeros(3)
    payload = {
        "format": FORMAT,
        "config": {},
        "config_hash": "abc",
        "run_id": None,
        "epoch": 1,
        "step": 0,
        "model": {"w": weights},
        "optimizer": {},
        "scheduler": {},
    }
    store = CheckpointStore(tmp_path)
    path = store.save(payload)
    weights.add_(1)  # training goes on at once
    store.wait()
    assert torch.equal(read_checkpoint(path)["model"]["w"], torch.zeros(3))


def test_a_failed_background_write_is_raised_to_the_training_thread(tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the checkpoint folder should be")
    store = CheckpointStore(blocker / "run")
    store.save({"epoch": 1, "step": 0, "model": {"w": torch.ones(1)}})  # returns: the write happens later
    with pytest.raises(CheckpointNotWritten, match=f"checkpoint {blocker / 'run'}/ckpt-e000001-s000000.pt could not"):
        store.wait()
    store.wait()  # raised once; nothing is left in flight


def test_the_history_is_stored_as_one_table_and_comes_back_with_its_keys_and_types():
    rows = [
        {"epoch": 0, "val_acc": 0.1, "tau": math.inf},
        {"epoch": 1, "val_acc": 1 / 3, "extra": 2.5},
        {"epoch": 2, "val_acc": math.nan, "tau": 1},
    ]
    table = history_columns(rows)
    assert table["values"].shape == (3, 4) and table["values"].dtype == torch.float64
    back = history_rows(table)
    assert [row.keys() for row in back] == [row.keys() for row in rows]
    assert back[1] == rows[1] and back[0] == rows[0] and math.isnan(back[2]["val_acc"])
    assert [type(row["epoch"]) for row in back] == [int, int, int] and type(back[2]["tau"]) is float
    assert history_columns([{"note": "text"}]) == [{"note": "text"}]  # not numbers: kept as rows
    assert history_rows(history_columns([])) == [] and history_rows(history_columns([{}])) == [{}]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_device_tensors_are_packed_into_cpu_buffers():
    state = {"w": torch.randn(4, 3, device="cuda"), "step": torch.tensor(2.0)}  # Adam keeps `step` on the CPU
    packed = pack(state)
    assert all(buffer.device.type == "cpu" for buffer in packed["buffers"].values())
    restored = unpack(packed)
    assert torch.equal(restored["w"], state["w"].cpu()) and torch.equal(restored["step"], state["step"])


def test_the_last_two_checkpoints_are_kept_and_leftovers_go_at_the_first_write(tmp_path):
    (tmp_path / "ckpt-e000009-s000000.pt").write_bytes(b"an earlier run's")
    (tmp_path / ".ckpt-e000001-s000000.pt.123.tmp").write_bytes(b"a crash's half-written file")
    store = CheckpointStore(tmp_path)
    for epoch in range(1, 6):
        store.save(
            {
                "format": FORMAT,
                "config": {},
                "config_hash": "abc",
                "run_id": None,
                "epoch": epoch,
                "step": 0,
                "model": {"w": torch.full((2,), float(epoch))},
                "optimizer": {},
                "scheduler": {},
            }
        )
        store.wait()
        assert len(list(tmp_path.iterdir())) == min(epoch, 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-e000004-s000000.pt", "ckpt-e000005-s000000.pt"]
    assert torch.equal(read_checkpoint(tmp_path / "ckpt-e000004-s000000.pt")["model"]["w"], torch.full((2,), 4.0))


def test_a_growing_history_is_extended_row_by_row_to_the_same_table():
    rows = [{"epoch": 0, "val_acc": 0.1}]
    table = history_columns(rows)
    rows += [{"epoch": 1, "val_acc": 0.2, "tau": 3}, {"epoch": 2, "val_acc": 0.25, "tau": 2.5}]
    extended = history_columns(rows, table)
    whole = history_columns(rows)
    assert extended["keys"] == whole["keys"] == ["epoch", "val_acc", "tau"] and extended["rows"] == 3
    assert torch.equal(extended["values"], whole["values"]) and torch.equal(extended["present"], whole["present"])
    assert extended["integer"] == whole["integer"] == [True, False, False]
    assert history_rows(extended) == rows
    assert history_columns(rows[:1], extended)["rows"] == 1  # not a continuation: converted afresh


# -- a full checkpoint disk -------------------------------------------------------------------


def test_a_checkpoint_the_disk_refuses_names_its_path_and_leaves_no_temporary_file(tmp_path, monkeypatch):
    import errno

    import torch

    from initmem_core.training import checkpoint_store
    from initmem_core.training.checkpoint_format import FORMAT
    from initmem_core.training.checkpoint_store import CheckpointNotWritten, CheckpointStore

    def payload(epoch):
        return {
            "format": FORMAT,
            "config": {},
            "config_hash": "abc",
            "run_id": None,
            "epoch": epoch,
            "step": 0,
            "model": {"w": torch.ones(2)},
            "optimizer": {},
            "scheduler": {},
        }

    store = CheckpointStore(tmp_path)
    first = store.save(payload(1))
    store.wait()

    def full_disk(descriptor):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoint_store.os, "fsync", full_disk)
    store.save(payload(2))
    with pytest.raises(CheckpointNotWritten) as refused:
        store.wait()
    assert (
        str(refused.value)
        == f"checkpoint {tmp_path / 'ckpt-e000002-s000000.pt'} could not be written: No space left on device"
    )
    assert refused.value.last_good == first and f"--resume continues from {first}" in refused.value.how_to_continue()
    assert sorted(p.name for p in tmp_path.iterdir()) == [first.name]  # no .tmp, the good one kept


@pytest.mark.slow
def test_a_full_checkpoint_disk_fails_the_run_in_one_line_and_resume_completes_it(tmp_path, tracking_uri, small_disk):
    disk = small_disk("3m")  # two checkpoints of this model fit, not three
    command = initmem_command(
        "run", *TINY_ARGS, "--epochs", "4", "--tracking-uri", tracking_uri, "--checkpoint-dir", str(disk)
    )
    failed = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert failed.returncode == 1 and failed.stderr.count("\n") == 1, failed.stderr
    assert "could not be written: No space left on device" in failed.stderr and str(disk) in failed.stderr
    assert "the run is marked FAILED" in failed.stderr and "--resume continues from" in failed.stderr
    assert not list(disk.rglob("*.tmp"))
    assert runs_in(tracking_uri) == [("resnet20-sgd-b32-ep4-n128-s1.0-seed0", "FAILED")]

    disk.resize("8m")
    resumed = subprocess.run(command + ["--resume"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    run = only_run(tracking_uri)
    assert run.info.status == "FINISHED" and "best_val_test_acc" in run.data.metrics
    assert [step for step, _ in history(tracking_uri, run.info.run_id, "test_acc")] == [0, 1, 2, 3, 4]
