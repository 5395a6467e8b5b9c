"""`initmem`'s output into a closed pipe (initmem_cli/output.py): a stream whose reader left, a
run piped into `head`, a run with stdout closed. The whole-process cases are in the slow suite."""

from __future__ import annotations

import io
import os
import subprocess

import pytest

from initmem_cli.output import BROKEN_PIPE_EXIT, PipeSafeStream
from tests.cli_processes import TINY_RUN_ARGS as TINY_ARGS
from tests.cli_processes import initmem_command, runs_in


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
    process = subprocess.Popen(
        initmem_command("run", *TINY_ARGS, "--tracking-uri", uri),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    first = process.stdout.readline()  # what `| head -1` reads, then it leaves
    process.stdout.close()
    error = process.stderr.read()
    assert process.wait(timeout=120) in (0, BROKEN_PIPE_EXIT)
    assert first.strip() == "resnet20-sgd-s1.0-seed0" and error == "", error
    assert runs_in(uri) == [("resnet20-sgd-s1.0-seed0", "FINISHED")]


@pytest.mark.slow
def test_a_run_with_stdout_closed_lands_without_a_traceback(tmp_path, tracking_uri):
    uri = tracking_uri
    done = subprocess.run(
        initmem_command("run", *TINY_ARGS, "--tracking-uri", uri),
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: os.close(1),
        timeout=120,
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert runs_in(uri) == [("resnet20-sgd-s1.0-seed0", "FINISHED")]
