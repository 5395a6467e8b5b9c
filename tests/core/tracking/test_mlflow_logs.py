"""MLflow's error logs (tracking/mlflow_logs.py) become one line."""

from __future__ import annotations


def test_mlflow_error_logs_become_one_line(caplog):
    import logging

    from initmem_core.tracking.mlflow_logs import OneLineLogs

    one_line = OneLineLogs()
    try:
        raise ValueError("first line\nsecond line")
    except ValueError:
        import sys as system

        caught = system.exc_info()
    database = logging.LogRecord("mlflow.store.db.utils", logging.ERROR, "", 0, "SQLAlchemy error.\n%s", ("x",), caught)
    other = logging.LogRecord("mlflow.tracking", logging.ERROR, "", 0, "failed: %s", ("one\ntwo",), caught)
    assert one_line.filter(database) is False  # the caller reports it itself
    assert one_line.filter(other) is True and other.getMessage() == "failed: one" and other.exc_info is None
