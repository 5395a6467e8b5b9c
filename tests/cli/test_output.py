"""`initmem`'s output into a closed pipe (initmem_cli/output.py): a stream whose reader left, a
run piped into `head`, a run with stdout closed; and onto a full disk (/dev/full: every write
refused with ENOSPC): a command's output, a sweep's, a sweep's report files. The whole-process
cases are in the slow suite."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest

from initmem_cli.output import BROKEN_PIPE_EXIT, PipeSafeStream
from tests.support.cli_processes import TINY_RUN_ARGS as TINY_ARGS
from tests.support.cli_processes import TINY_SWEEP_ARGS, initmem_command, runs_in


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
    assert first.strip() == "resnet20-sgd-b32-ep2-n128-s1.0-seed0" and error == "", error
    assert runs_in(uri) == [("resnet20-sgd-b32-ep2-n128-s1.0-seed0", "FINISHED")]


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
    assert runs_in(uri) == [("resnet20-sgd-b32-ep2-n128-s1.0-seed0", "FINISHED")]


def test_output_on_a_full_disk_is_dropped_and_the_command_ends_in_one_line(tmp_path):
    with open("/dev/full", "w") as full:  # every write: ENOSPC, as a file on a full disk
        done = subprocess.run(
            initmem_command("presets"), cwd=tmp_path, stdout=full, stderr=subprocess.PIPE, text=True, timeout=120
        )
    # was: the OSError as Typer's rich traceback, exit 1
    assert done.returncode == 1, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith("Error: standard output (/dev/full) could not be written: No space left on device"), line
    assert "free space on that disk or send the output elsewhere" in line


@pytest.mark.slow
def test_a_sweep_whose_output_file_is_on_a_full_disk_runs_and_ends_in_one_line(tmp_path, tracking_uri):
    command = initmem_command(
        "sweep", *TINY_SWEEP_ARGS, "--sigma", "1", "--name", "full", "--tracking-uri", tracking_uri
    )
    with open("/dev/full", "w") as full:
        done = subprocess.run(command, cwd=tmp_path, stdout=full, stderr=subprocess.PIPE, text=True, timeout=300)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.splitlines()[-1].startswith("Error: standard output"), done.stderr
    assert sorted(runs_in(tracking_uri)) == [("full", "FINISHED"), ("resnet20-sgd-s1.0-seed0", "FINISHED")]


#: ``initmem sweep`` whose report files meet a full disk (``write_text`` raises ENOSPC naming no path).
REPORT_ON_A_FULL_DISK = """
import errno, os, sys
from initmem_core.sweep import launch

def full(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

launch.write_report_files = full
from initmem_cli.entry import main
sys.argv = ["initmem", *sys.argv[1:]]
main()
"""


@pytest.mark.slow
def test_a_report_file_on_a_full_disk_ends_the_sweep_in_one_line(tmp_path, tracking_uri):
    command = [sys.executable, "-c", REPORT_ON_A_FULL_DISK, "sweep", *TINY_SWEEP_ARGS, "--sigma", "1"]
    done = subprocess.run(
        [*command, "--tracking-uri", tracking_uri], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    # was: the OSError, which user_errors re-raised (it names no path): a traceback, exit 1
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    line = done.stderr.splitlines()[-1]
    assert line.startswith("Error: a file could not be written: No space left on device"), done.stderr
    assert "free space on that disk" in line
