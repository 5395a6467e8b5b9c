"""The layout docs/ARCHITECTURE.md describes: a small top level, no import cycles, and a core
that never reaches into the built-in plugins."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import initmem_core
from tests.support import ROOT

CORE = Path(initmem_core.__file__).parent


@functools.cache
def _tree(path: Path) -> ast.Module:
    """A source file's syntax tree, parsed once for all the tests here (they only read it)."""
    return ast.parse(path.read_text())


def teardown_module() -> None:
    _tree.cache_clear()  # ~190,000 nodes: kept past this file, every later full collection would walk them


def _module_name(path: Path) -> str:
    parts = ["initmem_core", *path.relative_to(CORE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(tree: ast.AST, module: str, is_package: bool, top_level_only: bool) -> set[str]:
    """Modules of initmem_core (and initmem_plugins) that ``module`` imports."""
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".") if is_package else module.split(".")[:-1]
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            found |= {base} | {f"{base}.{alias.name}" for alias in node.names}
    return {name for name in found if name.startswith(("initmem_core", "initmem_plugins"))}


def _graph(top_level_only: bool) -> dict[str, set[str]]:
    modules = {_module_name(path): path for path in CORE.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        imported = _imports(_tree(path), name, path.name == "__init__.py", top_level_only)
        graph[name] = {m for m in imported if m in modules and m != name}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [node, nxt] if nxt in path else [node, nxt]
            if nxt not in state and (found := visit(nxt, path + [node])):
                return found
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node, [])):
            return found
    return None


def test_no_import_cycles_between_core_modules():
    for top_level_only in (True, False):
        # A package imports its own modules' names through __init__ only when it re-exports them.
        graph = {m: {i for i in imports if not m.startswith(i + ".")} for m, imports in _graph(top_level_only).items()}
        assert _cycle(graph) is None, f"import cycle: {' -> '.join(_cycle(graph))}"


#: The core's layers, lowest first: a module imports only from its own layer or below, counting the
#: imports inside functions. The top-level modules but the package's own __init__ are the bottom.
LAYERS = (
    {"vocabulary", "errors", "kinds", "config", "contracts", "kernels", "hookspecs", "groups"},
    {"plugin_system"},
    {"tracking"},
    {"training"},
    {"report"},
    {"sweep"},
    {"", "testing"},  # "": initmem_core itself, the Python API
)


def _layer(module: str) -> int:
    part = module.split(".")[1] if "." in module else ""
    return next(i for i, names in enumerate(LAYERS) if part in names)


def _imported_modules(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, modules: set[str]) -> set[str]:
    """The core's modules one import statement imports: ``from initmem_core import hookspecs``
    imports the module ``hookspecs``, ``from initmem_core import run`` the package itself."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            package = module.split(".") if is_package else module.split(".")[:-1]
            base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
        names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
    found = set()
    for name in names:
        while name and name not in modules:  # ``import a.b.c`` of a name inside a module
            name = name.rpartition(".")[0]
        if name:
            found.add(name)
    return found


def test_every_import_points_down_the_layers():
    """No package imports one above it, even inside a function (a lazy import is for start-up
    speed, never to hide an arrow that runs back)."""
    modules = {_module_name(path): path for path in CORE.rglob("*.py")}
    assert {m.split(".")[1] for m in modules if "." in m} <= set().union(*LAYERS), "a module in no layer"
    wrong = []
    for name, path in sorted(modules.items()):
        for node in ast.walk(_tree(path)):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for imported in _imported_modules(node, name, path.name == "__init__.py", set(modules)):
                    if _layer(imported) > _layer(name):
                        wrong.append(f"{path.relative_to(CORE.parent)}:{node.lineno} {name} imports {imported}")
    assert not wrong, "\n".join(wrong)


#: This checkout's own sources (the installed ``initmem_cli`` may be another clone's).
SOURCES = ROOT
FIRST_PARTY = ("initmem_core", "initmem_plugins", "initmem_cli")


def _imports_inside_functions(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement inside a function (at any depth, a class in it included)."""
    found: list[ast.Import | ast.ImportFrom] = []
    for function in ast.walk(tree):
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found += [n for n in ast.walk(function) if isinstance(n, (ast.Import, ast.ImportFrom))]
    unique = {id(n): n for n in found}.values()  # a nested function's imports are walked twice
    return sorted(unique, key=lambda n: n.lineno)


def _imports_initmem(node: ast.Import | ast.ImportFrom) -> bool:
    if isinstance(node, ast.ImportFrom):
        return node.level > 0 or (node.module or "").split(".")[0] in FIRST_PARTY
    return any(alias.name.split(".")[0] in FIRST_PARTY for alias in node.names)


def test_every_lazy_import_of_initmem_says_why():
    """An import of initmem's own modules inside a function (in the core or the CLI) is there for
    start-up speed only, and says so: ``# lazy: <why>`` on its (first) line. An import cycle is no
    reason: the layers above forbid one. Third-party imports inside functions are lazy by nature."""
    silent = []
    for folder in ("initmem_core", "cli"):
        for path in sorted((SOURCES / folder).rglob("*.py")):
            source = path.read_text()
            lines = source.splitlines()
            for node in _imports_inside_functions(_tree(path)):
                if _imports_initmem(node) and "# lazy:" not in lines[node.lineno - 1]:
                    silent.append(f"{path.relative_to(SOURCES)}:{node.lineno} {lines[node.lineno - 1].strip()}")
    assert not silent, "import at the top, or say why it stays lazy (# lazy: ...):\n" + "\n".join(silent)


def test_the_core_never_imports_the_builtin_plugins():
    for path in CORE.rglob("*.py"):
        name = _module_name(path)
        imported = _imports(_tree(path), name, path.name == "__init__.py", top_level_only=False)
        assert not {m for m in imported if m.startswith("initmem_plugins")}, f"{name} imports initmem_plugins"


def test_a_small_top_level_and_a_one_line_purpose_for_every_subpackage():
    top_modules = sorted(p.name for p in CORE.glob("*.py"))
    assert len(top_modules) <= 9, top_modules
    for package in (p for p in CORE.rglob("__init__.py") if p.parent != CORE):
        doc = ast.get_docstring(_tree(package))
        assert doc and doc.strip(), f"{package.parent.name}/__init__.py says nothing of what it is for"


def _second_spellings(spellings: set[str], allowed: dict[str, set[str]] | None = None) -> list[str]:
    """Where one of ``spellings`` is a whole string literal in the core, the CLI or the built-in
    plugins, outside ``initmem_core/vocabulary.py`` (and ``allowed``: file -> literals it may spell)."""
    import initmem_cli
    import initmem_plugins

    folders = [CORE, Path(initmem_cli.__file__).parent, Path(initmem_plugins.__file__).parent]
    found = []
    for folder, path in ((f, p) for f in folders for p in f.rglob("*.py")):
        if path == CORE / "vocabulary.py":
            continue
        where = f"{folder.name}/{path.relative_to(folder).as_posix()}"
        mine = (allowed or {}).get(where, set())
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.Constant) and node.value in spellings - mine:
                found.append(f"{where}:{node.lineno} {node.value!r}")
    return found


def test_clock_names_are_spelled_only_in_the_vocabulary():
    """A clock's metric name or symbol as a whole string literal anywhere in the core, the CLI or
    the built-in plugins, but ``initmem_core/vocabulary.py``, is a second spelling of it."""
    from initmem_core.vocabulary import CLOCK_SYMBOLS

    found = _second_spellings(set(CLOCK_SYMBOLS) | set(CLOCK_SYMBOLS.values()))
    assert not found, found


def test_metric_names_are_spelled_only_in_the_vocabulary():
    """A metric a run logs (``test_acc``, ``best_val_test_acc``, ``tau_interp``...) as a whole string
    literal outside the vocabulary is a second spelling (``lr``, a config field too, aside)."""
    from initmem_core import vocabulary as v

    metrics = {*v.PER_EPOCH_METRICS, *v.SELECTION_METRICS, v.TAU_INTERP, v.REPAIR_GAP, v.FIT, v.STOP_EPOCH} - {v.LR}
    # A checkpoint's selection state, and the report table's rows, have fields of the same names.
    allowed = {"initmem_core/training/selection.py": {v.VAL_LOSS}, "initmem_core/report/render.py": {v.TEST_ACC, v.FIT}}
    found = _second_spellings(metrics | {v.BEST_VAL_TEST_ACC_CAPPED}, allowed)
    assert not found, found


def test_run_statuses_and_tag_keys_are_spelled_only_in_the_vocabulary():
    """A run status (``FINISHED``...) or the key of a tag initmem writes or reads (``config_hash``,
    ``initmem.group``...) as a whole string literal outside the vocabulary is a second spelling."""
    from initmem_core.vocabulary import CONFIG_HASH_TAG, STATUSES, TAG_KEYS

    # A checkpoint file's header has a field of the same name: the file's format, not the tag.
    allowed = {
        path: {CONFIG_HASH_TAG}
        for path in ("initmem_core/training/checkpoint_format.py", "initmem_core/training/resume.py")
    }
    found = _second_spellings(set(STATUSES) | set(TAG_KEYS), allowed)
    assert not found, found


def test_the_sweep_package_reaches_mlflow_only_through_the_tracking_layer():
    """``sweep/`` works with the store through ``tracking`` (``sweep_runs.SweepRuns``, the cell
    writers): no import of mlflow, even inside a function, no ``MlflowClient`` named and none
    opened (``tracking.client.open_client``)."""
    found = []
    for path in sorted((CORE / "sweep").rglob("*.py")):
        where, source = path.relative_to(CORE), path.read_text()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            found += [f"{where}:{node.lineno} imports {name}" for name in names if name.split(".")[0] == "mlflow"]
        found += [f"{where} names {word}" for word in ("MlflowClient", "open_client") if word in source]
    assert not found, found


#: The folders outside the core, by the name each is imported as: the CLI, each plugin kind, the
#: fault-injection harness and the benchmarks (templates/ are rendered files, not modules).
FOLDERS = {"cli": "initmem_cli", "plugins": "initmem_plugins", "faults": "faults", "benchmarks": "benchmarks"}


def _folder_modules() -> dict[str, Path]:
    """Every module of ``FOLDERS`` by its import name."""
    modules = {}
    for folder, package in FOLDERS.items():
        root = SOURCES / folder
        for path in root.rglob("*.py"):
            if "templates" in path.relative_to(root).parts:
                continue
            parts = [package, *path.relative_to(root).with_suffix("").parts]
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _folder_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Who imports whom among ``modules``, counting the imports inside functions; a package's
    ``__init__`` is not counted as importing the modules below it (importing them loads it first)."""
    graph = {}
    for name, path in modules.items():
        tree = _tree(path)
        found = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                found |= _imported_modules(node, name, path.name == "__init__.py", set(modules))
        graph[name] = {m for m in found if m in modules and m != name and not name.startswith(m + ".")}
    return graph


def test_no_import_cycle_in_the_cli_the_plugins_the_harness_or_the_benchmarks():
    modules = _folder_modules()
    assert {"initmem_cli.app", "initmem_cli.sweep", "initmem_cli.entry", "initmem_plugins.claims.paper"} <= set(modules)
    graph = _folder_graph(modules)
    assert "initmem_cli.early_signals" in graph["initmem_cli.sweep"]  # lazy and top-level imports both counted
    cycle = _cycle(graph)
    assert cycle is None, f"import cycle: {' -> '.join(cycle)}"
    # The check finds a circle when there is one.
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) is not None
