"""The tests that touch MLflow, run against the newest MLflow release: will an upgrade trip initmem?

initmem reaches into a few of MLflow's internals (tracking/sqlite_store.py's store template, the
UI's view state in tracking/ui_view.py, the client's engine); pinning nothing, it meets every new
release. This makes a side environment, ``python -m venv --system-site-packages`` (so it sees this
environment's packages, initmem's editable install among them) with ``pip install -U mlflow``
into it, and runs the MLflow-touching test files there with pytest-xdist. The result goes into
docs/RELIABILITY.md between its markers ("Against the newest MLflow").

    python -m benchmarks.mlflow_latest                 # the quick tests of those files, and every store test
    python -m benchmarks.mlflow_latest --slow          # their slow tests too (tens of minutes on 2 cores)
    python -m benchmarks.mlflow_latest --venv DIR      # keep (or reuse) the side environment in DIR
"""

from __future__ import annotations

import argparse
import datetime
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "RELIABILITY.md"
BEGIN, END = "<!-- mlflow_latest: begin -->", "<!-- mlflow_latest: end -->"
#: The test files that open a tracking store, a tracking server or MLflow's UI (under tests/).
MLFLOW_TESTS = (
    "core/tracking/test_store_creation.py",
    "core/tracking/test_locks.py",
    "core/tracking/test_mlflow_logs.py",
    "core/tracking/test_tracker.py",
    "core/tracking/test_tracking_faults.py",
    "core/tracking/test_login.py",
    "core/tracking/test_paths.py",
    "core/tracking/test_tracker_process.py",
    "core/tracking/test_pending.py",
    "core/tracking/test_ui_view.py",
    "cli/test_ui.py",
    "e2e/test_mlflow_ui.py",
    "core/training/test_resume.py",
    "e2e/test_sweep_resume.py",
)


def run(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(argv, text=True, capture_output=True, **kwargs)


def side_environment(folder: Path) -> tuple[Path, str]:
    """The side environment's Python, with the newest MLflow (and what it asks for) installed, and
    a note ("" when the index held all of it). When the index lists an MLflow whose own
    requirements it lacks (a child package not published yet), the newest ``mlflow`` and
    ``mlflow-skinny`` go in over the older child (``pip install --no-deps``): the store, server and
    UI code initmem touches is theirs, and the note says which child stayed behind."""
    python = folder / "bin" / "python"
    if not python.is_file():
        made = run([sys.executable, "-m", "venv", "--system-site-packages", str(folder)])
        if made.returncode:
            sys.exit(f"python -m venv failed: {made.stderr.strip()[-500:]}")
    installed = run([str(python), "-m", "pip", "install", "-q", "-U", "mlflow"])
    if installed.returncode:
        sys.exit(f"pip install -U mlflow failed: {installed.stderr.strip()[-1000:]}")
    listed = newest_listed(python)
    if listed in (mlflow_version(python), "unknown"):
        return python, ""
    skinny = run([str(python), "-m", "pip", "install", "-q", f"mlflow-skinny=={listed}"])
    forced = run([str(python), "-m", "pip", "install", "-q", "--no-deps", f"mlflow=={listed}"])
    if skinny.returncode or forced.returncode:
        return python, f"The index lists MLflow {listed}, which could not be installed here."
    kept = children_behind(run([str(python), "-m", "pip", "check"]).stdout)
    return python, f"MLflow {listed} installed over an older child package: {kept}." if kept else ""


def children_behind(pip_check: str) -> str:
    """The MLflow packages ``pip check`` says are older than the installed MLflow requires."""
    behind = re.findall(r"requirement (\S*mlflow\S*==\S+), but you have (\S+ [^\s.]+(?:\.[^\s.]+)*)", pip_check)
    return "; ".join(f"{have} kept (the index lacks {wanted})" for wanted, have in behind)


def mlflow_version(python: Path | str) -> str:
    return run([str(python), "-c", "import mlflow; print(mlflow.__version__)"]).stdout.strip()


def newest_listed(python: Path) -> str:
    """The newest MLflow the package index lists (``pip index versions``), installable or not."""
    listed = run([str(python), "-m", "pip", "index", "versions", "mlflow"]).stdout
    found = re.search(r"^mlflow \(([^)]+)\)", listed, flags=re.M)
    return found.group(1) if found else "unknown"


def summary_line(output: str) -> str:
    """pytest's last line: "12 passed, 1 failed in 30.1s"."""
    lines = [line.strip("= ") for line in output.strip().splitlines() if " in " in line and "passed" in line]
    return lines[-1] if lines else output.strip().splitlines()[-1] if output.strip() else "(no output)"


def write_section(page: Path, body: str) -> None:
    text = page.read_text()
    if BEGIN in text:
        text = text[: text.index(BEGIN) + len(BEGIN)] + "\n" + body + "\n" + text[text.index(END) :]
    else:
        text = text.rstrip() + f"\n\n## Against the newest MLflow\n\n{BEGIN}\n{body}\n{END}\n"
    page.write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--venv", type=Path, help="the side environment's folder (default: a temporary one)")
    parser.add_argument("--slow", action="store_true", help="run the files' slow tests too")
    parser.add_argument("--workers", default="2", help="pytest-xdist's -n (default 2)")
    parser.add_argument("--docs", type=Path, default=DOCS, help="the page to write the result into")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="mlflow-latest-") as scratch:
        python, note = side_environment(args.venv or Path(scratch) / "venv")
        ours, newest = mlflow_version(sys.executable), mlflow_version(python)
        print(f"MLflow {newest} in the side environment (this one has {ours}). {note}", flush=True)
        files = [str(ROOT / "tests" / name) for name in MLFLOW_TESTS]
        # The quick tests of every file, and all of the store's tests (the template is what an
        # upgrade is most likely to trip): -k matches markers and file names.
        selection = [] if args.slow else ["-k", "not slow or test_store_creation"]
        started = time.monotonic()
        done = run(
            [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", args.workers, *selection, *files],
            cwd=ROOT,
        )
        minutes = (time.monotonic() - started) / 60
    print(done.stdout[-6000:], done.stderr[-2000:], sep="\n")
    failed = sorted(set(re.findall(r"^FAILED (\S+)", done.stdout, flags=re.M)))
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    scope = "every test of those files" if args.slow else "their quick tests and every test of test_store_creation.py"
    body = "\n".join(
        [
            f"`python -m benchmarks.mlflow_latest{' --slow' if args.slow else ''}`, {date}: MLflow **{newest}** "
            f"(this environment: {ours}), {scope}, in {minutes:.1f} min: **{summary_line(done.stdout)}**.",
            *([note] if note else []),
            *(["", "Failed:", *(f"- `{name}`" for name in failed)] if failed else []),
        ]
    )
    write_section(args.docs, body)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
