"""`initmem export` / `initmem report --from`: a sweep as one file that gives back every record
field by field, that reads with no MLflow, and that refuses what it cannot read in one line."""

from __future__ import annotations

import dataclasses
import gzip
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from typer.testing import CliRunner

from initmem_cli.app import app
from initmem_core.config import RunConfig
from initmem_core.errors import ConfigError
from initmem_core.report.assessment import build_assessed_report
from initmem_core.report.memory import build_report
from initmem_core.report.render import to_json, to_markdown
from initmem_core.tracking.export import VERSION, SweepExport, read_export, to_json_text, write_export
from initmem_core.tracking.records import FIT_LOGGED, CellRecord
from tests.support.builders import clocks, record

runner = CliRunner()


def full_record(seed: int) -> CellRecord:
    """A record with every field away from its default (a new field of CellRecord must be set here)."""
    values = {
        "config": RunConfig(opt="adam", sigma=0.5 * (seed + 1), seed=seed, opt_arg=("betas=0.9,0.99",), data="digits"),
        "status": "FINISHED",
        "metrics": {
            "best_val_test_acc": 0.8 + 0.01 * seed,
            "weight_norm": 12.5,
            "nan_metric": float("nan"),
            **clocks(0.1, 0.0, 2.0),
        },
        "weight_norms": [(0, 10.0), (1, 12.5)],
        "histories": {
            "test_acc": [(0, 0.1), (1, 0.8 + 0.01 * seed)],
            "weight_norm": [(0, 10.0), (1, 12.5)],
            "val_loss": [(0, 2.3), (1, 0.4 - 0.01 * seed)],
            "val_acc": [(0, 0.1), (1, 0.85)],
        },
        "error": "a note",
        "diverged": False,
        "run_id": f"{seed:032x}",
        "test_correct": np.arange(1000) % (seed + 2) == 0,
        "num_classes": 10,
        "clock_convention": "adaptive",
        "stop_reason": "patience",
    }
    assert set(values) == {f.name for f in dataclasses.fields(CellRecord)}, "set every field of CellRecord here"
    return CellRecord(**values)


def default_of(f: dataclasses.Field):
    return f.default_factory() if callable(f.default_factory) else f.default


def same_record(a: CellRecord, b: CellRecord) -> None:
    for f in dataclasses.fields(CellRecord):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            assert isinstance(y, np.ndarray) and x.dtype == y.dtype and np.array_equal(x, y), f.name
        elif f.name == "metrics":
            assert json.dumps(x) == json.dumps(y), f.name  # nan == nan as text
        else:
            assert x == y and type(x) is type(y), f.name
    assert [type(p) for p in b.weight_norms] == [tuple] * len(b.weight_norms)


def test_every_field_of_every_record_comes_back(tmp_path):
    records = [full_record(seed) for seed in range(3)] + [
        record(RunConfig(seed=9), status="FAILED", error="diverged", diverged=True, test_correct=None)
    ]
    for f in dataclasses.fields(CellRecord):  # a field dropped on the way would be noticed
        differs = [isinstance(v, np.ndarray) or v != default_of(f) for v in (getattr(r, f.name) for r in records)]
        assert f.name == "config" or any(differs), f.name
    path = tmp_path / "sweep.json.gz"
    size = write_export(SweepExport("mine", records, parent_run_id="p" * 32, experiment="initmem"), path)
    assert size == path.stat().st_size and gzip.decompress(path.read_bytes())  # gzip, as said
    back = read_export(path)
    assert (back.name, back.parent_run_id, back.experiment) == ("mine", "p" * 32, "initmem")
    assert len(back.records) == len(records)
    for a, b in zip(records, back.records):
        same_record(a, b)
    # The same export gives the same bytes (no timestamp in the gzip header): a committed file
    # changes only when its sweep does.
    write_export(back, tmp_path / "again.json.gz")
    assert (tmp_path / "again.json.gz").read_bytes() == path.read_bytes()


def test_the_report_from_the_file_is_the_report_from_the_records(tmp_path):
    records = [full_record(seed) for seed in range(4)]
    write_export(SweepExport("mine", records), tmp_path / "s.json.gz")
    back = read_export(tmp_path / "s.json.gz").records
    assert to_markdown(build_report(back)) == to_markdown(build_report(records))
    assert to_json(build_report(back)) == to_json(build_report(records))


@pytest.mark.slow  # a fresh interpreter
def test_the_reader_needs_no_mlflow(tmp_path):
    path = tmp_path / "s.json.gz"
    write_export(SweepExport("mine", [full_record(seed) for seed in range(3)]), path)
    code = textwrap.dedent(
        f"""
        import sys

        class Blocked:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("mlflow", "torch"):
                    raise ImportError(f"{{name}} is blocked in this test")

        sys.meta_path.insert(0, Blocked())
        from initmem_core.report.memory import build_report
        from initmem_core.report.render import to_markdown
        from initmem_core.tracking.export import read_export

        export = read_export({str(path)!r})
        print(len(export.records), to_markdown(build_report(export.records)).splitlines()[0])
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[0] == "3" and "# Initialization memory" in done.stdout


def bad_inputs(tmp_path):
    plain = tmp_path / "notes.txt"
    plain.write_text("just some notes\n")
    other_json = tmp_path / "other.json.gz"
    other_json.write_bytes(gzip.compress(json.dumps({"hello": 1}).encode()))
    newer = tmp_path / "newer.json.gz"
    body = json.loads(to_json_text(SweepExport("mine", [full_record(0)])))
    newer.write_bytes(gzip.compress(json.dumps({**body, "version": VERSION + 1}).encode()))
    damaged = tmp_path / "damaged.json.gz"
    damaged.write_bytes(gzip.compress(json.dumps({**body, "cells": [{"config": {"no_such_knob": 1}}]}).encode()))
    truncated = tmp_path / "truncated.json.gz"
    truncated.write_bytes(gzip.compress(to_json_text(SweepExport("mine", [full_record(0)])).encode())[:50])
    return {
        tmp_path / "missing.json.gz": "no such file",
        plain: "is not an initmem export",
        other_json: "is not an initmem export",
        newer: f"version {VERSION + 1}",
        damaged: "unknown key 'no_such_knob'",
        truncated: "damaged gzip",
    }


def test_bad_files_are_refused_in_one_line(tmp_path):
    for path, said in bad_inputs(tmp_path).items():
        with pytest.raises(ConfigError, match=said):
            read_export(path)
        result = runner.invoke(app, ["report", "--from", str(path), "--format", "json", "--out", str(tmp_path / "o")])
        assert result.exit_code == 2, (path, result.output)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and said in lines[0] and "Traceback" not in result.output, (path, result.stderr)
        assert result.stdout == ""


def test_report_takes_a_sweep_or_a_file_not_both(tmp_path):
    for args, says in (
        (["report"], "give a sweep name or parent run id"),  # neither: what to give, not "not both"
        (["report", "x", "--from", str(tmp_path / "f.json.gz")], "not both"),
    ):
        result = runner.invoke(app, args)
        assert result.exit_code == 2 and says in result.stderr and "Traceback" not in result.output


@pytest.mark.slow  # draws the report's plots
def test_report_from_a_file_prints_the_report_and_writes_its_files(tmp_path):
    records = [full_record(seed) for seed in range(3)]
    write_export(SweepExport("mine", records), tmp_path / "s.json.gz")
    result = runner.invoke(
        app, ["report", "--from", str(tmp_path / "s.json.gz"), "-f", "markdown", "--out", str(tmp_path / "o")]
    )
    assert result.exit_code == 0, result.output
    # the report as `initmem report` builds it: with the claims evaluated on it
    assert result.stdout == to_markdown(build_assessed_report(records), "Initialization memory: sweep mine")
    assert (tmp_path / "o" / "report.md").exists() and "MLflow UI" not in result.stderr


SMALL_SWEEP = [
    *("--data", "digits", "--arch", "resnet20", "--epochs", "2", "--train-size", "128"),
    *("--batch-size", "32", "--eval-batch-size", "512", "--threads", "1"),
    *("--sigma", "0.5,2", "--opt", "sgd", "--seed", "0,1"),
]


@pytest.mark.slow(seconds=40)  # a real sweep
def test_a_real_sweep_reports_the_same_from_its_export_with_the_store_gone(tmp_path, store_in):
    import shutil
    import subprocess

    store = tmp_path / "store"
    store.mkdir()
    uri = store_in(store)
    swept = runner.invoke(
        app, ["sweep", *SMALL_SWEEP, "--name", "tiny", "--tracking-uri", uri, "--out", str(store / "out")]
    )
    assert swept.exit_code == 0, swept.output
    from_store = {}
    for form in ("markdown", "json"):
        done = runner.invoke(app, ["report", "tiny", "-f", form, "--tracking-uri", uri, "--out", str(store / "r")])
        assert done.exit_code == 0, done.output
        from_store[form] = done.stdout
    path = tmp_path / "tiny.json.gz"
    exported = runner.invoke(app, ["export", "tiny", "--out", str(path), "--tracking-uri", uri])
    assert exported.exit_code == 0 and "4 cells" in exported.stdout, exported.output
    export = read_export(path)
    assert export.name == "tiny" and export.parent_run_id and export.wall_seconds and export.wall_seconds > 0
    assert all(r.trained and r.histories and r.test_correct is not None for r in export.records)
    # the training-accuracy history and whether each run fit travel with the file
    assert all("train_acc" in r.histories and r.fit_source == FIT_LOGGED for r in export.records)
    # what convergence is judged from: the validation figures by epoch, and where and why each run stopped
    for r in export.records:
        assert [epoch for epoch, _ in r.histories["val_loss"]] == [epoch for epoch, _ in r.histories["val_acc"]]
        assert r.histories["val_loss"][-1][0] == r.metrics["stop_epoch"] == r.config.epochs
        assert r.stop_reason == "epochs"
    # which code made it: the commit of the repository the sweep ran in (a confirmatory export's proof)
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
    if head.returncode == 0:
        assert export.parent_tags["mlflow.source.git.commit"] == head.stdout.strip()
    shutil.rmtree(store)  # the database, its artifacts, the report's folders: no store left
    for form in ("markdown", "json"):
        done = runner.invoke(app, ["report", "--from", str(path), "-f", form, "--out", str(tmp_path / "again")])
        assert done.exit_code == 0, done.output
        assert done.stdout == from_store[form], form
    assert not store.exists()


def test_exporting_a_sweep_the_store_lacks_is_one_line_and_writes_nothing(tracking_uri, tmp_path):
    out = tmp_path / "nosuch.json.gz"
    result = runner.invoke(app, ["export", "nosuch", "--out", str(out), "--tracking-uri", tracking_uri])
    assert result.exit_code == 2 and "Traceback" not in result.output
    (line,) = result.stderr.strip().splitlines()
    assert "no sweep 'nosuch'" in line or "experiment 'initmem' does not exist" in line
    assert list(tmp_path.glob("*.json.gz*")) == []
    folder = runner.invoke(app, ["export", "nosuch", "--out", str(tmp_path), "--tracking-uri", tracking_uri])
    assert folder.exit_code == 2 and "is a folder" in folder.stderr


def test_report_from_a_file_marks_a_sigma_at_chance_as_not_trained(tmp_path, monkeypatch):
    """Adam at sigma 2.5 predicts one class (10% of 10 classes): the group trained (91% at 0.1), its
    spread rests on a sigma that did not, and the Markdown and JSON say so; SGD's sigmas trained."""
    from tests.support.builders import two_optimizers

    monkeypatch.setenv("INITMEM_LOAD_PLUGINS", "claims")  # tables alone: no figures drawn
    records = [dataclasses.replace(r, num_classes=10) for r in two_optimizers(seeds=3, adam=(0.91, 0.10))]
    write_export(SweepExport("mine", records), tmp_path / "s.json.gz")
    done = {
        form: runner.invoke(
            app, ["report", "--from", str(tmp_path / "s.json.gz"), "-f", form, "--out", str(tmp_path / form)]
        )
        for form in ("json", "markdown")
    }
    assert all(result.exit_code == 0 for result in done.values()), {f: r.output for f, r in done.items()}
    data = json.loads(done["json"].stdout)
    untrained = {(row["group"].split("opt=")[1].split(",")[0], row["sigma"]): row["untrained"] for row in data["rows"]}
    assert untrained == {("adam", 0.1): "", ("adam", 2.5): "at chance", ("sgd", 0.1): "", ("sgd", 2.5): ""}
    by_opt = {g["group"].split("opt=")[1].split(",")[0]: g for g in data["groups"]}
    assert by_opt["adam"]["untrained_sigmas"] == [2.5] and by_opt["sgd"]["untrained_sigmas"] == []
    assert not by_opt["adam"]["did_not_train"] and by_opt["adam"]["spread"] > 80
    markdown = done["markdown"].stdout
    assert "(rests on σ 2.5, which did not train)" in markdown
    per_sigma = markdown.split("## Per sigma")[1].splitlines()
    [adam_row] = [line for line in per_sigma if line.startswith("| adam") and "| 2.5 |" in line]
    assert "| at chance |" in adam_row
    assert markdown.count("which did not train)") == 1  # SGD's spread rests on trained sigmas
