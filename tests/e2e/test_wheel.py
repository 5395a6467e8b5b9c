"""The built wheel, installed in a new virtual environment, works without the source tree: its
package data (presets, templates, py.typed, gpu_check's figures when present) travel with it, and
no command reads a file through a path into the repository."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.support import ROOT

#: What the wheel is built from: the project's own files, copied so the build writes nothing here.
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "initmem_core", "plugins", "cli")


def _is_initmem_own(name: str) -> bool:
    """initmem's editable install in this environment: its finder, its .pth and its dist-info."""
    lowered = name.lower()
    return lowered.startswith(("__editable__", "initmem-", "initmem_")) or lowered == "initmem"


def _dependencies_without_initmem(folder: Path) -> Path:
    """A folder of links to everything this environment has installed but initmem itself, so the
    new environment imports the wheel's initmem and this one's torch, MLflow, ... (no download)."""
    folder.mkdir()
    site_packages = Path(sysconfig.get_paths()["purelib"])
    for entry in site_packages.iterdir():
        if not _is_initmem_own(entry.name) and entry.suffix != ".pth":
            (folder / entry.name).symlink_to(entry)
    return folder


@pytest.mark.slow(seconds=45)  # builds a wheel, makes a venv, a dry run in it (13 s alone on 2 cores)
def test_the_wheel_installed_in_a_new_venv_runs_a_dry_run_without_the_source_tree(tmp_path):
    source = tmp_path / "source"
    source.mkdir()
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(path, source / name)
    wheels = tmp_path / "wheels"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    # No build isolation: this environment's setuptools (>= 77, the test extra) builds it, offline.
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels), str(source)],
        check=True,
        capture_output=True,
        cwd=tmp_path,
    )
    [wheel] = wheels.glob("initmem-*.whl")

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run([*pip, "--python", str(python), "install", "--no-deps", "-q", str(wheel)], check=True)
    new_site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    links = _dependencies_without_initmem(tmp_path / "dependencies")
    (new_site / "initmem-test-dependencies.pth").write_text(f"{links}\n")

    elsewhere = tmp_path / "elsewhere"  # a folder outside the source tree, no repository around it
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MLFLOW_TRACKING_URI", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    where = subprocess.run(
        [
            str(python),
            "-c",
            "import importlib.resources as r, json, initmem_core, initmem_cli, importlib.metadata as m; "
            "print(json.dumps([initmem_core.__file__, initmem_cli.__file__, "
            "(r.files('initmem_core') / 'py.typed').is_file(), m.version('initmem'), "
            "m.metadata('initmem')['License-Expression']]))",
        ],
        check=True,
        capture_output=True,
        text=True,
        cwd=elsewhere,
        env=env,
    )
    core_file, cli_file, typed, version, license_expression = json.loads(where.stdout)
    assert Path(core_file).is_relative_to(new_site) and Path(cli_file).is_relative_to(new_site), where.stdout
    assert typed, "py.typed is not in the installed package"
    assert license_expression == "MIT" and version

    def initmem(*args: str, timeout: float) -> subprocess.CompletedProcess:
        """The wheel's `initmem`, run from outside the source tree."""
        command = [str(venv / "bin" / "initmem"), *args]
        return subprocess.run(command, capture_output=True, text=True, cwd=elsewhere, env=env, timeout=timeout)

    dry = initmem("sweep", "--preset", "paper-resnet9", "--dry-run", "--json", timeout=300)
    assert dry.returncode == 0, dry.stderr[-2000:]
    answer = json.loads(dry.stdout)
    assert answer["sweep"] == "paper-resnet9" and len(answer["cells"]) == 7 * 5 * 6
    assert answer["estimate"]["seconds_here"] > 0 and "gpu_check" in answer["estimate"]["gpu_source"]
    assert not (elsewhere / "mlflow.db").exists()  # a dry run writes nothing

    # the templates travel with the built-in plugin `commands`: new-plugin writes a package from them
    scaffold = initmem("new-plugin", "metric", "wheel-check", "--dir", "pkg", timeout=120)
    assert scaffold.returncode == 0, scaffold.stderr[-2000:]
    assert (elsewhere / "pkg" / "src" / "initmem_wheel_check" / "metric.py").is_file()
