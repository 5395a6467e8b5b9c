"""Which code made a run: MLflow's standard source tags and the installed packages.

MLflow's fluent ``mlflow.start_run`` tags a run with its source (``mlflow.source.name``,
``mlflow.source.type``), its user and the git commit of the code; initmem creates runs with
``MlflowClient``, which adds none of them, so they are added here, from MLflow's own helpers
(``DefaultRunContext`` for the user and source type, ``mlflow.utils.git_utils`` for git).

The commit is that of the git repository the command runs in (its working folder), as MLflow
Projects records a project's: the user's experiment code, not initmem's (initmem's own version
is the ``initmem.version`` tag beside it). No repository there: no git tags.

The source name is the command (``initmem run``, ``initmem sweep``) or, from Python, the script
as MLflow records it (``sys.argv[0]``). It is worked out in the process the user started
(``command_source``): a helper process that writes the run (``tracker_process``) has its own
``sys.argv``. Everything here is derived once per process: a sweep writes many runs.
"""

from __future__ import annotations

import functools
import importlib.metadata as metadata
import sys
from pathlib import Path

from initmem_core.vocabulary import INITMEM_VERSION_TAG

#: The artifact listing every installed distribution and its version (``pip freeze``'s format).
REQUIREMENTS_ARTIFACT = "environment/requirements.txt"


def command_source(argv: list[str] | None = None) -> str:
    """What started this process: ``initmem <command>`` for the CLI (``initmem`` or
    ``python -m initmem_cli``), else the script (``sys.argv[0]``, as MLflow's fluent API tags it)
    or ``<console>`` when there is none."""
    argv = sys.argv if argv is None else argv
    main = argv[0] if argv else ""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    run_as_module = argv is sys.argv and spec is not None and spec.name.startswith("initmem_cli")
    if Path(main).name == "initmem" or run_as_module:
        command = next((argument for argument in argv[1:] if not argument.startswith("-")), "")
        return f"initmem {command}".strip()
    return main or "<console>"


@functools.lru_cache(maxsize=8)
def _git_tags(folder: str) -> tuple[tuple[str, str], ...]:
    from mlflow.utils import git_utils  # lazy: only processes that write to the store import MLflow
    from mlflow.utils.mlflow_tags import MLFLOW_GIT_BRANCH, MLFLOW_GIT_COMMIT, MLFLOW_GIT_REPO_URL

    commit = git_utils.get_git_commit(folder)
    if commit is None:  # not in a repository (or in an ignored folder of one): nothing to say
        return ()
    found = {
        MLFLOW_GIT_COMMIT: commit,
        MLFLOW_GIT_BRANCH: git_utils.get_git_branch(folder),
        MLFLOW_GIT_REPO_URL: git_utils.get_git_repo_url(folder),  # credentials stripped by MLflow
    }
    return tuple((key, value) for key, value in found.items() if value)


@functools.lru_cache(maxsize=8)
def _source_tags(source_name: str, folder: str) -> tuple[tuple[str, str], ...]:
    from mlflow.tracking.context.default_context import DefaultRunContext
    from mlflow.utils.mlflow_tags import MLFLOW_SOURCE_NAME

    tags = {key: str(value) for key, value in DefaultRunContext().tags().items()}  # user, source type
    tags[MLFLOW_SOURCE_NAME] = source_name
    tags.update(_git_tags(folder))
    tags[INITMEM_VERSION_TAG] = installed_version("initmem")
    return tuple(tags.items())


def source_tags(source_name: str | None = None, folder: str | Path | None = None) -> dict[str, str]:
    """MLflow's source tags for a run started by ``source_name`` (default: this process's
    ``command_source``) in ``folder`` (default: the working folder), and initmem's version."""
    return dict(_source_tags(source_name or command_source(), str(Path(folder or Path.cwd()).resolve())))


def installed_version(distribution: str, missing: str = "unknown") -> str:
    """The installed version of ``distribution``, or ``missing`` when it is not installed."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return missing


@functools.cache
def requirements_text() -> str:
    """Every distribution this interpreter can import, ``name==version`` a line, sorted: the one
    found first on ``sys.path`` where two share a name, as an import would find it."""
    found: dict[str, tuple[str, str]] = {}  # lower-case name -> (name, version)
    for distribution in metadata.distributions():
        name = distribution.metadata["Name"]
        if name:
            found.setdefault(name.lower(), (name, distribution.version))
    return "".join(f"{name}=={version}\n" for _, (name, version) in sorted(found.items()))
