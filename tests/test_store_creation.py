"""Creating the tracking store (tracking/client.py ``open_client``): on a full disk, or over one an
older version's interrupted migration left half-made."""

from __future__ import annotations

import pytest

from initmem_core.errors import ConfigError


@pytest.mark.slow
def test_a_store_that_cannot_be_created_leaves_nothing_and_is_created_once_there_is_space(small_disk, _empty_store):
    from initmem_core.tracking.client import open_client

    disk = small_disk(f"{_empty_store.stat().st_size // 2048}k")  # half what a migrated store takes
    uri = f"sqlite:///{disk / 'mlflow.db'}"
    with pytest.raises(ConfigError, match=r"cannot be reached: .*(full|space)") as refused:
        open_client(uri)
    assert "\n" not in str(refused.value)
    assert sorted(p.name for p in disk.iterdir()) == ["mlflow.db.lock"]  # no half-migrated store, no temporary file
    disk.resize("4m")
    assert open_client(uri).search_experiments()[0].name == "Default"


@pytest.mark.slow
def test_a_store_an_interrupted_migration_left_is_made_afresh_when_it_holds_no_run(tmp_path, store_in):
    import sqlite3

    from initmem_core.tracking.client import open_client

    uri = store_in(tmp_path)
    with sqlite3.connect(tmp_path / "mlflow.db") as database:  # what alembic leaves when cut short
        database.execute("create table _alembic_tmp_experiments (experiment_id integer)")
    assert open_client(uri).search_experiments()[0].name == "Default"
    with sqlite3.connect(tmp_path / "mlflow.db") as database:
        tables = {row[0] for row in database.execute("select name from sqlite_master where type = 'table'")}
    assert "_alembic_tmp_experiments" not in tables and "runs" in tables

    from mlflow.tracking import MlflowClient

    MlflowClient(uri).create_run("0")
    with sqlite3.connect(tmp_path / "mlflow.db") as database:
        database.execute("create table _alembic_tmp_experiments (experiment_id integer)")
    with pytest.raises(ConfigError, match="left half-migrated by an interrupted command and holds 1 run"):
        open_client(uri)


def test_a_new_store_is_the_kept_template_with_the_default_experiment_written_for_its_folder(
    tmp_path, monkeypatch, _empty_store
):
    import shutil
    import sqlite3
    import time

    from mlflow.tracking import MlflowClient

    from initmem_core.tracking import sqlite_store
    from initmem_core.tracking.client import open_client

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    template = sqlite_store.store_template()
    template.parent.mkdir(parents=True)
    shutil.copy(_empty_store, template)  # migrated in another folder, as a template is

    def no_migration(temporary):
        raise AssertionError("migrated although a template was there")

    monkeypatch.setattr(sqlite_store, "_migrate_new", no_migration)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    started = int(time.time() * 1000)
    uri = f"sqlite:///{work / 'mlflow.db'}"
    default = open_client(uri).get_experiment("0")
    assert default.artifact_location == str(work / "mlruns" / "0")  # as MLflow writes it for a store made here
    assert default.creation_time >= started
    run = MlflowClient(uri).create_run("0")
    MlflowClient(uri).log_metric(run.info.run_id, "loss", 1.0)
    with sqlite3.connect(work / "mlflow.db") as database:
        assert database.execute("select count(*) from metrics").fetchone()[0] == 1
    assert sorted(p.name for p in work.iterdir()) == ["mlflow.db", "mlflow.db.lock"]  # no temporary left


@pytest.mark.slow
def test_a_damaged_template_is_passed_over_and_replaced_by_the_store_mlflow_migrates(tmp_path, monkeypatch):
    import sqlite3

    from initmem_core.tracking import sqlite_store
    from initmem_core.tracking.client import open_client

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    template = sqlite_store.store_template()
    template.parent.mkdir(parents=True)
    template.write_bytes(b"not a database" * 100)
    assert open_client(f"sqlite:///{tmp_path / 'mlflow.db'}").search_experiments()[0].name == "Default"
    with sqlite3.connect(template) as kept:
        assert kept.execute("select count(*) from alembic_version").fetchone()[0] == 1
        assert kept.execute("select count(*) from runs").fetchone()[0] == 0
    assert [p.name for p in template.parent.iterdir()] == [template.name]  # no partial copy left
