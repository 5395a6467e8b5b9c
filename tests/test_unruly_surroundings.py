"""Nothing lost when the disk, a lock or the terminal misbehaves (issue 23): output into a closed
pipe, a full checkpoint disk, signals at every moment of a run, concurrent or blocked syncs, and
a store and spool that both refuse writes.

The whole-process cases start the real CLI (``python -m initmem_cli``) and are in the slow suite.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from initmem_cli.output import BROKEN_PIPE_EXIT, PipeSafeStream

TINY_ARGS = ["--epochs", "2", "--train-size", "128", "--batch-size", "32", "--threads", "1",
             "--eval-batch-size", "512"]


def initmem_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "initmem_cli", *args]


def runs_in(uri: str) -> list[tuple[str, str]]:
    """(name, status) of every run in a SQLite store, read without MLflow."""
    import sqlite3

    with sqlite3.connect(uri[len("sqlite:///"):]) as database:
        return database.execute("select name, status from runs").fetchall()


# -- F: output into a closed pipe ----------------------------------------------------------------

class ClosedPipe(io.StringIO):
    def write(self, text):
        raise BrokenPipeError(32, "Broken pipe")

    flush = write


def test_a_stream_whose_reader_left_drops_the_rest_and_remembers_it():
    stream = PipeSafeStream(ClosedPipe())
    assert stream.write("a line\n") == len("a line\n") and stream.broken
    stream.write("more")  # never raises again
    stream.flush()
    assert PipeSafeStream(io.StringIO()).broken is False


@pytest.mark.slow
def test_a_run_piped_into_head_lands_and_exits_like_a_unix_tool(tmp_path, tracking_uri):
    uri = tracking_uri
    process = subprocess.Popen(initmem_command("run", *TINY_ARGS, "--tracking-uri", uri), cwd=tmp_path,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = process.stdout.readline()  # what `| head -1` reads, then it leaves
    process.stdout.close()
    error = process.stderr.read()
    assert process.wait(timeout=120) in (0, BROKEN_PIPE_EXIT)
    assert first.strip() == "resnet20-sgd-s1.0-seed0" and error == "", error
    assert runs_in(uri) == [("resnet20-sgd-s1.0-seed0", "FINISHED")]


@pytest.mark.slow
def test_a_run_with_stdout_closed_lands_without_a_traceback(tmp_path, tracking_uri):
    uri = tracking_uri
    done = subprocess.run(initmem_command("run", *TINY_ARGS, "--tracking-uri", uri), cwd=tmp_path,
                          stderr=subprocess.PIPE, text=True, preexec_fn=lambda: os.close(1), timeout=120)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert runs_in(uri) == [("resnet20-sgd-s1.0-seed0", "FINISHED")]
