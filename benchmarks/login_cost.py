"""What a login costs the tracking server: seconds per request to MLflow's basic-auth server.

The server checks the user's password hash on every request. werkzeug writes scrypt hashes by
default (what ``mlflow server --app-name basic-auth`` stores for a user made through its API);
the same requests are then timed with that user's hash replaced by one round of PBKDF2, which is
what the test suite gives its users (tests/local_services.py) and shows what the hash alone costs.
One client, one request at a time, on 127.0.0.1: what one server worker spends per request.

    python -m benchmarks.login_cost --requests 20 [--json login_cost.json]
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import sqlite3
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path

from benchmarks.basic_auth_setup import ADMIN, cheapen_password_hash, login_environment, users_database
from benchmarks.machine_info import describe
from benchmarks.server_load import mlflow_server

ADMIN_PASSWORD = "admin-" + os.urandom(8).hex()
USER, PASSWORD = "bench", "bench-" + os.urandom(8).hex()


def request(url: str, path: str, body: dict, user: str, password: str) -> float:
    """Seconds for one authenticated POST."""
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    call = urllib.request.Request(
        f"{url}{path}",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json", "Authorization": f"Basic {token}"},
    )
    start = time.perf_counter()
    with urllib.request.urlopen(call, timeout=60) as response:
        response.read()
    return time.perf_counter() - start


def timed(url: str, count: int, users: Path) -> dict[str, float | str]:
    """``count`` searches as ``USER``, with the hash method the server checks them against."""
    search = "/api/2.0/mlflow/experiments/search"
    seconds = [request(url, search, {"max_results": 1}, USER, PASSWORD) for _ in range(count)]
    with contextlib.closing(sqlite3.connect(users)) as connection:
        (stored,) = connection.execute("SELECT password_hash FROM users WHERE username = ?", (USER,)).fetchone()
    return {
        "median_s": statistics.median(seconds),
        "min_s": min(seconds),
        "max_s": max(seconds),
        "hash_method": stored.split("$")[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--json", type=Path)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="login-cost-") as name:
        folder = Path(name)
        env = dict(os.environ, **login_environment(folder, ADMIN_PASSWORD))
        for key in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):
            env.pop(key, None)
        with mlflow_server(f"sqlite:///{folder / 'mlflow.db'}", folder, env, app=("--app-name", "basic-auth")) as url:
            user = {"username": USER, "password": PASSWORD}
            request(url, "/api/2.0/mlflow/users/create", user, ADMIN, ADMIN_PASSWORD)
            users = users_database(folder)
            timed(url, 2, users)  # the server's first requests load what they need
            results = {"scrypt (werkzeug's default)": timed(url, options.requests, users)}
            cheapen_password_hash(users, USER, PASSWORD)
            timed(url, 2, users)
            results["one round of PBKDF2"] = timed(url, options.requests, users)
    print(f"Machine: {describe()}; {options.requests} requests each, one at a time\n")
    print("| user's password hash | seconds per request, median | min-max |\n| --- | ---: | --- |")
    for side, figures in results.items():
        print(f"| {side} | {figures['median_s']:.3f} | {figures['min_s']:.3f}-{figures['max_s']:.3f} |")
    if options.json:
        figures = {"machine": describe(), "requests": options.requests, "results": results}
        options.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
