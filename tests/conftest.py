"""Shared fixtures: a fresh plugin registry per test, the built-ins' registry per module, fake
installed plugin packages, real plugin packages pip-installed into a private folder, and a
pre-migrated MLflow store (creating the SQLite schema takes seconds; copying it takes none)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from initmem_core.plugin_system import loader as plugins

# One OpenMP thread per test process (set before anything imports torch; the processes tests start
# inherit it): the tensors here are tiny, and under `-n 2`, or beside other work, two threads per
# worker spin against each other, so a forward pass that takes 20 ms alone can take seconds.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# timm.optim.kron raises Dynamo's recompile limit to 1,000,000 for the process when imported: done
# here, so that it happens before every test, not inside whichever test imports timm's optimizers first.
import timm.optim  # noqa: E402, F401

# A suite started in the background by a non-interactive shell (`pytest &`) inherits SIGINT ignored,
# and every process it starts would too: the tests that send Ctrl-C need Python's own handler here,
# so that their processes start with the default one.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def expected_seconds(item: pytest.Item) -> float:
    """A test's own estimate: ``slow(seconds=N)``; 2 for another slow test, 0 for the rest."""
    marker = item.get_closest_marker("slow")
    return 0.0 if marker is None else float(marker.kwargs.get("seconds", 2))


#: Module-scoped fixtures cheap enough to build on each worker that runs a test of their module.
CHEAP_MODULE_FIXTURES = frozenset({"registry"})


def shares_a_module_fixture(item: pytest.Item) -> bool:
    fixtures = getattr(item, "_fixtureinfo", None)
    return fixtures is not None and any(
        definitions[-1].scope == "module" and name not in CHEAP_MODULE_FIXTURES
        for name, definitions in fixtures.name2fixturedefs.items()
    )


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Longest first, by unit: a test alone, or every test of a module whose tests share a
    module-scoped fixture (a sweep, a server, a pip install), kept together in the file's order and
    marked ``xdist_group`` so that one worker builds that fixture once. Under ``-n 2 --dist
    loadgroup`` (pyproject's addopts; CI, the README) a worker takes the next unit as it ends one,
    so the long ones start at once, side by side, and the session ends on short tests."""
    units: dict[str, list[pytest.Item]] = {}
    for item in items:
        if shares_a_module_fixture(item):
            # The file's path, unique across folders (xdist shows it after the test's id:
            # tests/e2e/test_x.py::test_y@tests/e2e/test_x.py).
            group = item.nodeid.split("::")[0]
            item.add_marker(pytest.mark.xdist_group(group))
        else:
            group = item.nodeid
        units.setdefault(group, []).append(item)
    ordered = sorted(units.values(), key=lambda unit: sum(map(expected_seconds, unit)), reverse=True)
    items[:] = [item for unit in ordered for item in unit]


def process_state() -> dict[str, object]:
    """What a test must leave as it found it for the next test on its worker: the environment and
    torch's process-wide settings (Dynamo's whole config included), where torch is imported."""
    state: dict[str, object] = {
        f"os.environ[{name!r}]": value
        for name, value in os.environ.items()
        if not name.startswith("_") and name not in SET_FOR_THE_PROCESS
    }
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "get_num_threads"):
        backends = torch.backends
        state |= {
            "torch.get_num_threads()": torch.get_num_threads(),
            "torch.get_default_dtype()": torch.get_default_dtype(),
            "torch.is_grad_enabled()": torch.is_grad_enabled(),
            "torch.are_deterministic_algorithms_enabled()": torch.are_deterministic_algorithms_enabled(),
            "torch.get_float32_matmul_precision()": torch.get_float32_matmul_precision(),
            "torch.backends.cudnn.benchmark": backends.cudnn.benchmark,
            "torch.backends.cudnn.deterministic": backends.cudnn.deterministic,
            "torch.backends.cudnn.allow_tf32": backends.cudnn.allow_tf32,
            "torch.backends.cuda.matmul.allow_tf32": backends.cuda.matmul.allow_tf32,
        }
    dynamo = sys.modules.get("torch._dynamo.config")
    if dynamo is not None:
        state |= {f"torch._dynamo.config.{k}": v for k, v in dynamo.get_config_copy().items() if not k.startswith("_")}
    return state


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    item.stash[_STATE_BEFORE] = process_state()
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    """Fail the test (an error at teardown) that left the process changed, once its fixtures have
    undone what they patched: which tests share a worker depends on scheduling, so a leak would
    otherwise break a later test on one machine and not on the next."""
    result = yield
    before = item.stash.get(_STATE_BEFORE, None)
    if before is not None:
        after = process_state()
        changed = sorted(
            f"{key}: {before.get(key, '<unset>')!r} -> {after.get(key, '<unset>')!r}"
            for key in before.keys() | after.keys()
            # torch or Dynamo imported by the test itself: only the environment counts as new
            if before.get(key, _MISSING) != after.get(key, _MISSING)
            and (key.startswith("os.environ") or (key in before and key in after))
        )
        if changed:
            raise AssertionError("the test left process-wide state changed:\n  " + "\n  ".join(changed))
    return result


_STATE_BEFORE = pytest.StashKey[dict[str, object]]()
#: Variables a library sets for its process when first imported or used, whichever test does that
#: first (private ones, named with a leading underscore, are skipped too): scikit-learn's OpenMP
#: settings, Ray's client mode and what ``ray.init`` sets for its driver (usage stats off, its
#: debugger hook), initmem's own quieting of MLflow's run links in a sweep, and pytest's own
#: PYTEST_CURRENT_TEST, which a pytest started inside a test inherits and then pops.
SET_FOR_THE_PROCESS = frozenset(
    {
        "KMP_DUPLICATE_LIB_OK",
        "KMP_INIT_AT_FORK",
        "RAY_CLIENT_MODE",
        "RAY_USAGE_STATS_ENABLED",
        "PYTHONBREAKPOINT",
        "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT",
        "PYTEST_CURRENT_TEST",
    }
)
_MISSING = object()


@pytest.fixture(autouse=True)
def fresh_registry(monkeypatch):
    """Each test loads plugins anew, from the environment it sets up."""
    for name in (plugins.LOAD_PLUGINS_ENV, plugins.STRICT_ENV):
        monkeypatch.setenv(name, "")  # recorded, so whatever a test sets is undone after it
        monkeypatch.delenv(name)
    plugins.set_registry(None)
    yield
    plugins.set_registry(None)


@pytest.fixture(autouse=True)
def quick_step_measurement(monkeypatch):
    """A dry run's cost estimate times each architecture's steps for up to half a second; here
    it times a few steps at the smallest batch and scales them (test_sweep_cost passes its own
    budgets to test the estimate itself). No test reads the figure a dry run prints."""
    from initmem_core.sweep import cost

    monkeypatch.setattr(cost, "MEASURE_BUDGET_S", 0.0)


@pytest.fixture
def install_fake_plugin(tmp_path, monkeypatch):
    """Make a package with an ``initmem`` entry point importable, as pip would install it.

    ``install_fake_plugin("myplug", "source code")`` writes ``myplug_mod.py`` holding the source
    and a ``myplug-1.0.dist-info`` whose entry point ``myplug`` points at it.
    """
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))

    def install(name: str, source: str, version: str = "1.0") -> str:
        module = f"{name.replace('-', '_')}_mod"
        (site / f"{module}.py").write_text(textwrap.dedent(source))
        sys.modules.pop(module, None)  # an earlier test may have imported another module of this name
        info = site / f"{name}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        (info / "entry_points.txt").write_text(f"[initmem]\n{name} = {module}\n")
        return module

    return install


@pytest.fixture(scope="session")
def pip_install_isolated(tmp_path_factory):
    """pip-install plugin packages where only subprocesses see them; return their environment.

    ``env = pip_install_isolated(folder, ...)`` installs into a fresh private folder with
    ``--no-deps --no-build-isolation --target``, so the test environment itself never changes,
    and returns ``os.environ`` with that folder on ``PYTHONPATH`` and no plugin allow-list.
    Each package is built from a private copy: without build isolation setuptools builds in the
    source folder, where two xdist workers installing one example would race on its ``build/``.
    """

    def install(*packages: Path) -> dict[str, str]:
        target = tmp_path_factory.mktemp("site")
        sources = tmp_path_factory.mktemp("sources")
        leftovers = shutil.ignore_patterns("build", "*.egg-info", "__pycache__")
        packages = tuple(shutil.copytree(p, sources / Path(p).name, ignore=leftovers) for p in packages)
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--no-deps",
                "--no-build-isolation",
                "--target",
                str(target),
                *map(str, packages),
            ],
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            pytest.fail(f"pip install {' '.join(map(str, packages))} failed:\n{result.stderr}")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(target), os.environ.get("PYTHONPATH")])))
        env.pop("INITMEM_LOAD_PLUGINS", None)
        return env

    return install


@pytest.fixture(scope="module")
def installed_example(request, pip_install_isolated) -> dict[str, str]:
    """The test module's ``EXAMPLE`` plugin package (a folder of examples/), pip-installed for
    subprocesses: their environment."""
    return pip_install_isolated(request.module.EXAMPLE)


@pytest.fixture
def kept_settings():
    """For a test that builds a setup itself (``build_setup`` sets threads, determinism and TF32
    for the process): those settings as they were after the test, as ``initmem_core.run`` does."""
    from initmem_core.training.setup import process_settings_kept

    with process_settings_kept():
        yield


@pytest.fixture(scope="session")
def initmem_subprocess():
    """``initmem_subprocess(env, "run", "--opt", ...)``: the real CLI in a fresh interpreter."""

    def invoke(env: dict[str, str], *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "initmem_cli", *args], env=env, cwd=cwd, capture_output=True, text=True
        )

    return invoke


@pytest.fixture(scope="session")
def package_tests_subprocess():
    """``package_tests_subprocess(env, tests_folder, ...)``: run a plugin package's own tests with pytest."""

    def run(env: dict[str, str], *folders: Path) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *map(str, folders)],
            env=env,
            cwd=folders[0],
            capture_output=True,
            text=True,
        )

    return run


@pytest.fixture(scope="session")
def _empty_store(tmp_path_factory) -> Path:
    # Every test that needs a store skips where MLflow is not installed (the GPU machine has none).
    pytest.importorskip("mlflow", reason="needs MLflow for its tracking store")
    from initmem_core.tracking.client import open_client

    folder = tmp_path_factory.mktemp("store-template")
    open_client(f"sqlite:///{folder / 'mlflow.db'}")
    return folder / "mlflow.db"


@pytest.fixture(scope="session")
def store_in(_empty_store):
    """``store_in(folder)``: a fresh SQLite MLflow store in ``folder`` (a copy of the migrated
    template); returns its URI. For module-scoped fixtures; tests take ``tracking_uri``."""

    def copy(folder: Path) -> str:
        shutil.copy(_empty_store, folder / "mlflow.db")
        return f"sqlite:///{folder / 'mlflow.db'}"

    return copy


@pytest.fixture
def tracking_uri(tmp_path, store_in) -> str:
    """A fresh SQLite MLflow store in this test's folder."""
    return store_in(tmp_path)


@pytest.fixture(scope="module")
def registry():
    """The built-in plugins' registry (no entry points), loaded once per test module."""
    return plugins.load_registry(entry_points=False)


@pytest.fixture
def small_disk(tmp_path):
    """``small_disk("3m")``: a folder on a tmpfs of that size (root only; skips elsewhere), with
    ``.resize(size)`` to free space; unmounted after the test."""
    mounted = []

    class Disk(type(tmp_path)):
        def resize(self, size: str) -> None:
            subprocess.run(["mount", "-o", f"remount,size={size}", str(self)], check=True)

    def make(size: str) -> Path:
        folder = Disk(tmp_path / f"disk{len(mounted)}")
        folder.mkdir()
        if (
            os.geteuid() != 0
            or subprocess.run(
                ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True
            ).returncode
            != 0
        ):
            pytest.skip("needs root and tmpfs to make a full disk")
        mounted.append(folder)
        return folder

    yield make
    for folder in mounted:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


@pytest.fixture
def short_tmp():
    """A new empty folder with a short path (for AF_UNIX sockets under it), removed afterwards."""
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="t-", dir="/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)
