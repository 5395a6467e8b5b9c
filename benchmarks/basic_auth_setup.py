"""What MLflow's login server (``mlflow server --app-name basic-auth``) needs in a folder, for the
benchmarks and the tests that start one: its settings file, its environment, and users whose
password hash is cheap to check.

    login = login_environment(folder, admin_password)  # the server's environment, added to os.environ
    cheapen_password_hash(users_database(folder), "admin", admin_password)
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path

ADMIN = "admin"


def users_database(folder: Path) -> Path:
    """Where the login server in ``folder`` keeps its users and permissions."""
    return folder / "basic_auth.db"


def login_environment(folder: Path, admin_password: str) -> dict[str, str]:
    """Write ``folder/basic_auth.ini`` (every user may read, none may write what another made: MLflow's
    default; the admin is ``ADMIN``) and return the variables the server reads it and its secrets from."""
    config = folder / "basic_auth.ini"
    config.write_text(
        "[mlflow]\ndefault_permission = READ\n"
        f"database_uri = sqlite:///{users_database(folder)}\nadmin_username = {ADMIN}\n"
        "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
    )
    return {
        "MLFLOW_AUTH_CONFIG_PATH": str(config),
        "MLFLOW_AUTH_ADMIN_PASSWORD": admin_password,
        "MLFLOW_FLASK_SERVER_SECRET_KEY": os.urandom(16).hex(),
    }


def cheapen_password_hash(users: Path, user: str, password: str) -> None:
    """Store ``user``'s password hash with one round of PBKDF2 in place of werkzeug's scrypt. The
    server checks the hash on every request, and scrypt costs about 0.4 s of server CPU each time
    on a 2-core machine (benchmarks/login_cost.py): a tracked run's hundreds of requests would take
    minutes. Which login is accepted does not depend on the hash's cost."""
    from werkzeug.security import generate_password_hash

    cheap = generate_password_hash(password, method="pbkdf2:sha256:1")
    with contextlib.closing(sqlite3.connect(users)) as connection, connection:
        changed = connection.execute("UPDATE users SET password_hash = ? WHERE username = ?", (cheap, user)).rowcount
    if changed != 1:
        raise ValueError(f"no user {user!r} in {users}")
