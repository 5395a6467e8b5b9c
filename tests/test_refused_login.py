"""What a tracking server's refusal of the login becomes (``store.refusal``), and which login
variables a Ray task is handed (``credentials_env``, set in the task by ``logged_in``): the
quick half of test_tracking_login.py, without a server."""

from __future__ import annotations

import pytest

from initmem_core.errors import ConfigError
from initmem_core.tracking.login import CREDENTIAL_ENV, credentials_env, login_must_be_taken, refusal

URI = "http://head-node:5000"


class ServerError(Exception):
    """What MLflow's client raises for an error response: its message and the ``error_code`` name
    MLflow gives the HTTP status (401 UNAUTHENTICATED, 403 PERMISSION_DENIED). A stand-in, so the
    quick loop does not import MLflow; test_tracking_login.py meets the real ones."""

    def __init__(self, message: str, error_code: str):
        super().__init__(message)
        self.error_code = error_code


CODES = {401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 500: "INTERNAL_ERROR"}


def mlflow_error(status: int, body: str) -> ServerError:
    return ServerError(
        f"API request to endpoint /api/2.0/mlflow/runs/create failed with error code {status} "
        f"!= 200. Response body: '{body}'",
        CODES[status],
    )


@pytest.fixture
def login(monkeypatch):
    def set_login(user=None, password=None, token=None):
        for key, value in zip(CREDENTIAL_ENV, (user, password, token)):
            if value is None:
                monkeypatch.delenv(key, raising=False)
            else:
                monkeypatch.setenv(key, value)

    set_login()
    return set_login


def test_a_refused_password_names_the_user_and_both_variables_but_never_the_password(login):
    login("bob", "s3cret-pw")
    line = refusal(URI, mlflow_error(401, "You are not authenticated."))
    assert line.startswith(f"tracking server {URI} refused the credentials (user 'bob'")
    assert "MLFLOW_TRACKING_USERNAME" in line and "MLFLOW_TRACKING_PASSWORD" in line
    assert "s3cret-pw" not in line and "\n" not in line


def test_no_login_at_all_says_the_variables_are_not_set(login):
    line = refusal(URI, mlflow_error(401, "You are not authenticated."))
    assert "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD are not set" in line


def test_a_user_without_permission_is_told_so_and_which_request(login):
    login("bob", "pw")
    line = refusal(URI, mlflow_error(403, "Permission denied"))
    assert "refused user 'bob' permission" in line and "/api/2.0/mlflow/runs/create" in line
    assert "MLFLOW_TRACKING_USERNAME" in line and "--experiment" in line


def test_an_artifact_upload_refused_by_http_status_is_a_refused_login_too(login):
    """Uploads through the server's artifact proxy raise requests' HTTPError, with no MLflow code."""

    class Response:
        status_code = 401

    class HTTPError(Exception):
        response = Response()

    login("bob", "pw")
    error = HTTPError(f"401 Client Error: Unauthorized for url: {URI}/api/2.0/mlflow-artifacts/artifacts/1/x.pt")
    assert refusal(URI, error).startswith(f"tracking server {URI} refused the credentials (user 'bob'")
    Response.status_code = 403
    assert "/api/2.0/mlflow-artifacts/artifacts/1/x.pt" in refusal(URI, error)
    Response.status_code = 404
    assert refusal(URI, error) == ""


def test_other_errors_are_not_a_refused_login(login):
    login("bob", "pw")
    assert refusal(URI, mlflow_error(403, "Invalid Host header - possible DNS rebinding attack detected")) == ""
    assert refusal(URI, mlflow_error(500, "boom")) == ""
    assert refusal(URI, ConnectionError("refused")) == ""


def test_login_must_be_taken_turns_only_a_refusal_into_one_config_error(login):
    with pytest.raises(ConfigError, match="refused the credentials"):
        with login_must_be_taken(URI):
            raise mlflow_error(401, "You are not authenticated.")
    with pytest.raises(ValueError):
        with login_must_be_taken(URI):
            raise ValueError("not about the login")


def test_only_the_login_variables_that_are_set_go_to_a_worker_and_only_while_it_runs(login, monkeypatch):
    from initmem_core.tracking.login import logged_in

    assert credentials_env() == {}
    login("bob", "pw")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", URI)  # not a login variable: the task names its store itself
    handed = credentials_env()
    assert handed == {"MLFLOW_TRACKING_USERNAME": "bob", "MLFLOW_TRACKING_PASSWORD": "pw"}
    login(password="other")  # the worker's own environment, e.g. a head's
    with logged_in(handed):
        assert credentials_env() == handed
    assert credentials_env() == {"MLFLOW_TRACKING_PASSWORD": "other"}
    login(token="t0ken")
    assert credentials_env() == {"MLFLOW_TRACKING_TOKEN": "t0ken"}
