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

    monkeypatch.setattr(sqlite_store, "_open_with_mlflow", no_migration)
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


# -- the template against MLflow's own migration ---------------------------------------------------

#: Columns that say when a store was made, not what it holds.
WHERE_MADE = {"experiments": {"creation_time", "last_update_time"}}


def store_contents(database) -> dict:
    """Everything a SQLite store holds but when it was made: every table, index and trigger, each
    column in its place (alembic's revision is a row of ``alembic_version``), and every row of every
    table. A definition is compared as the set of its lines: MLflow's own migration writes a table's
    constraints in a different order from one process to the next."""
    import contextlib
    import sqlite3

    with contextlib.closing(sqlite3.connect(database)) as connection:
        schema = sorted(
            (kind, name, table, sorted(line.strip().rstrip(",") for line in (sql or "").splitlines()))
            for kind, name, table, sql in connection.execute("select type, name, tbl_name, sql from sqlite_master")
        )
        schema += [
            (table, connection.execute(f'pragma table_info("{table}")').fetchall())
            for (table,) in connection.execute("select name from sqlite_master where type = 'table' order by name")
        ]
        rows = {}
        for (table,) in connection.execute("select name from sqlite_master where type = 'table'").fetchall():
            cursor = connection.execute(f'select * from "{table}"')
            names = [column[0] for column in cursor.description]
            kept = [i for i, name in enumerate(names) if name not in WHERE_MADE.get(table, set())]
            rows[table] = sorted((tuple(row[i] for i in kept) for row in cursor), key=repr)
    return {"schema": schema, "rows": rows}


@pytest.fixture
def in_a_folder_with_a_template(tmp_path, monkeypatch, _empty_store):
    """The working folder ``work`` (a store's Default experiment is placed by it), and a template
    made in another folder, as the cache holds it; returns (work, template)."""
    import shutil

    from initmem_core.tracking import sqlite_store

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    template = sqlite_store.store_template()
    template.parent.mkdir(parents=True)
    shutil.copy(_empty_store, template)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return work, template


def mlflow_migrated(folder):
    """A store MLflow creates itself, without initmem, in ``folder``."""
    from mlflow.tracking import MlflowClient

    MlflowClient(f"sqlite:///{folder / 'by-mlflow.db'}").search_experiments()
    return folder / "by-mlflow.db"


@pytest.mark.slow  # MLflow migrates a store (seconds)
def test_a_store_made_from_the_template_holds_what_mlflow_migrates_itself(in_a_folder_with_a_template):
    from initmem_core.tracking import sqlite_store

    work, _ = in_a_folder_with_a_template
    sqlite_store.create_sqlite_store(work / "mlflow.db")
    ours, theirs = store_contents(work / "mlflow.db"), store_contents(mlflow_migrated(work))
    assert ours["rows"]["alembic_version"] == theirs["rows"]["alembic_version"] != []
    assert ours["rows"]["experiments"] == theirs["rows"]["experiments"] != []  # the Default, placed here
    assert ours == theirs


def open_files_of_this_process() -> set[str]:
    import os

    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            found.add(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            pass
    return found


@pytest.mark.skipif(not __import__("os").path.isdir("/proc/self/fd"), reason="reads /proc (Linux)")
def test_creating_a_store_leaves_no_connection_to_it_open(in_a_folder_with_a_template):
    """``_let_go`` reaches into MLflow's client for its engine: if a release moves it, this fails."""
    from initmem_core.tracking import sqlite_store

    work, _ = in_a_folder_with_a_template
    sqlite_store.create_sqlite_store(work / "mlflow.db")
    assert not {path for path in open_files_of_this_process() if path.startswith(str(work))}


def refuse_private_name(monkeypatch):
    """This process's MLflow seen as a release without ``_SERVER_ARTIFACT_ROOT_ENV_VAR``: importing
    the name fails, while MLflow's own functions keep their module."""
    import sys
    import types

    name = "mlflow.tracking._tracking_service.utils"
    real = sys.modules[name]
    stand_in = types.ModuleType(name)
    stand_in.__dict__.update({k: v for k, v in vars(real).items() if k != "_SERVER_ARTIFACT_ROOT_ENV_VAR"})
    monkeypatch.setitem(sys.modules, name, stand_in)


def foreign_database(template):
    import contextlib
    import sqlite3

    template.unlink()
    with contextlib.closing(sqlite3.connect(template)) as other, other:
        other.execute("create table experiments (experiment_id integer, name text)")
        other.execute("insert into experiments values (0, 'Default')")


def another_revision(template):
    import contextlib
    import sqlite3

    with contextlib.closing(sqlite3.connect(template)) as store, store:
        store.execute("update alembic_version set version_num = '0a8213491aaa'")  # an older MLflow's


def a_run_in_it(template):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{template}")
    client.create_run("0")
    from initmem_core.tracking.sqlite_store import _let_go

    _let_go(client)


@pytest.mark.slow  # each falls back to MLflow's migration (seconds)
@pytest.mark.parametrize(
    "spoil", [refuse_private_name, foreign_database, another_revision, a_run_in_it], ids=lambda f: f.__name__
)
def test_a_template_that_cannot_serve_falls_back_to_mlflows_own_migration(
    spoil, in_a_folder_with_a_template, monkeypatch
):
    from initmem_core.tracking import sqlite_store

    work, template = in_a_folder_with_a_template
    spoil(monkeypatch) if spoil is refuse_private_name else spoil(template)
    migrated = []
    real = sqlite_store._open_with_mlflow
    monkeypatch.setattr(sqlite_store, "_open_with_mlflow", lambda path: migrated.append(real(path)))
    sqlite_store.create_sqlite_store(work / "mlflow.db")
    assert migrated, "the template was used"
    assert store_contents(work / "mlflow.db") == store_contents(mlflow_migrated(work))
    assert sorted(p.name for p in work.iterdir()) == ["by-mlflow.db", "mlflow.db"]  # no temporary left
    assert store_contents(template)["rows"]["runs"] == []  # the template is MLflow's empty store again
