"""MLflow's own log lines kept quiet: its INFO lines (database migrations, run links) would break
the progress display, and its error logs come as one line each."""

from __future__ import annotations

import logging


def quiet_mlflow() -> None:
    for name in ("mlflow", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)
    for handler in logging.getLogger("mlflow").handlers:
        if not any(isinstance(f, OneLineLogs) for f in handler.filters):
            handler.addFilter(OneLineLogs())


class OneLineLogs(logging.Filter):
    """MLflow's own error logs as one line each. A database error it logs with its traceback
    (60 lines) before raising it is dropped: whoever catches it says it, in one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == "mlflow.store.db.utils" and record.exc_info:
            return False
        text = record.getMessage().strip()
        if record.exc_info or "\n" in text:
            record.msg, record.args = (text.splitlines() or [""])[0][:300], ()
            record.exc_info, record.exc_text, record.stack_info = None, None, None
        return True
