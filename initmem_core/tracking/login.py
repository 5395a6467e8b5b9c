"""Logging in to a tracking server: the login comes from MLflow's environment variables only
(never a command line), is handed on to workers that do not inherit them, and a server's refusal
of it becomes one line naming those variables."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from typing import Any

from initmem_core.errors import ConfigError

#: Where MLflow's client takes a login to a tracking server from (``mlflow server --app-name
#: basic-auth``: a user and password; a bearer token for other servers). Read from the environment
#: only, never from a command line, and handed on to remote workers (``credentials_env``).
USERNAME_ENV, PASSWORD_ENV, TOKEN_ENV = "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN"
CREDENTIAL_ENV = (USERNAME_ENV, PASSWORD_ENV, TOKEN_ENV)


def credentials_env() -> dict[str, str]:
    """The login variables that are set here (``CREDENTIAL_ENV``), for a worker that does not
    inherit this process's environment (a Ray task). Never to be logged or printed."""
    return {key: os.environ[key] for key in CREDENTIAL_ENV if os.environ.get(key)}


@contextlib.contextmanager
def logged_in(login: dict[str, str]) -> Iterator[None]:
    """Requests to the tracking server log in with ``login`` (``credentials_env`` of the process
    that launched this work) while inside; the variables are as they were afterwards."""
    before = {key: os.environ.get(key) for key in login}
    os.environ.update(login)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def refusal(uri: str, error: BaseException) -> str:
    """One line for a tracking server that refused this login (HTTP 401) or this user (HTTP 403),
    naming the variables the login comes from; empty for any other error. A 403 that is MLflow's
    Host-header check is not about the login and is left to the caller."""
    code = getattr(error, "error_code", None)
    status: Any = getattr(getattr(error, "response", None), "status_code", None)  # an artifact upload's HTTPError
    code = {401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED"}.get(status, code) if code is None else code
    text = str(error)
    if code not in ("UNAUTHENTICATED", "PERMISSION_DENIED") or "Invalid Host header" in text:
        return ""
    user = os.environ.get(USERNAME_ENV)
    if code == "UNAUTHENTICATED":
        given = (
            f"user {user!r} from {USERNAME_ENV}, password from {PASSWORD_ENV}"
            if user and os.environ.get(PASSWORD_ENV)
            else f"user {user!r} from {USERNAME_ENV}, no {PASSWORD_ENV}"
            if user
            else f"none given: {USERNAME_ENV} and {PASSWORD_ENV} are not set"
        )
        return (
            f"tracking server {uri} refused the credentials ({given}); set both to a user the server "
            "knows (see docs/distributed.md)"
        )
    endpoint = re.search(r"(?:endpoint|for url:) (?:https?://[^/\s]+)?(\S+)", text)
    what = f" ({endpoint.group(1)})" if endpoint else ""
    return (
        f"tracking server {uri} refused user {user or '(none)'!r} permission for this request{what}; ask "
        f"its admin for EDIT on the experiment, or use an --experiment of your own; the user comes from "
        f"{USERNAME_ENV} / {PASSWORD_ENV}"
    )


@contextlib.contextmanager
def login_must_be_taken(uri: str) -> Iterator[None]:
    """A refused login inside (``refusal``) becomes one ``ConfigError`` line; other errors pass."""
    try:
        yield
    except Exception as error:
        refused = refusal(uri, error)
        if refused:
            raise ConfigError(refused) from None
        raise
