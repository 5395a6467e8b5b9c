"""Logging in to a tracking server: the login comes from MLflow's environment variables only
(never a command line), and a server's refusal of it becomes one line naming those variables."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from typing import Any

from initmem_core.errors import ConfigError

#: Where MLflow's client takes a login to a tracking server from (``mlflow server --app-name
#: basic-auth``: a user and password; a bearer token for other servers). Read from the environment
#: only, never from a command line, and handed on to Ray workers (``ray_executor.credentials_env``).
USERNAME_ENV, PASSWORD_ENV, TOKEN_ENV = "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN"
CREDENTIAL_ENV = (USERNAME_ENV, PASSWORD_ENV, TOKEN_ENV)


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
