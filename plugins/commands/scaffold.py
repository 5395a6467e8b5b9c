"""Write a new plugin package from the templates in ``templates/`` (``initmem new-plugin``).

The package is complete and pip-installable: an ``initmem`` entry point, a hook implementation
that registers an import-string factory, a small working component of the chosen kind, a README
and tests built on ``initmem_core.testing``. Templates use ``string.Template`` placeholders
(``$name``), which nothing in Python, TOML or Markdown source collides with.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from initmem_core.errors import ConfigError
from initmem_core.kinds import BY_NAME, kind_named
from initmem_core.plugin_system.api_version import API_VERSION
from initmem_core.plugin_system.registry import Registry

NAME_PATTERN = re.compile(r"[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
NAME_RULE = "lowercase letters, digits and single dashes, starting with a letter (e.g. sign-sgd)"

#: Import names initmem itself installs; a plugin package must not shadow them.
RESERVED_PACKAGES = ("initmem_core", "initmem_plugins", "initmem_cli")


@dataclass(frozen=True)
class KindTemplate:
    """What differs between kinds besides the files in ``templates/<kind>/``."""

    factory: str  # the callable in ``<package>/<kind>.py`` that the hook registers
    description: str  # shown by ``initmem plugins``
    extra_options: str = ""  # what ``initmem run`` needs besides the kind's flag to use it
    try_it: str = ""  # the command that uses it, when it is not ``initmem run`` (a claim: a report)


KIND_TEMPLATES = {
    "architecture": KindTemplate("build_mlp", "Two-layer MLP on flattened pixels"),
    "optimizer": KindTemplate("build_sign_sgd", "Sign-SGD: W <- W - lr * sign(grad)"),
    "initializer": KindTemplate(
        "uniform_fan_in_init", "Kernels sigma * Z with Z ~ U(-sqrt(3/fan_in), sqrt(3/fan_in)), biases 0"
    ),
    "regularizer": KindTemplate("L1Penalty", "L1: lambda * sum |W|", " --l2 0.001"),
    "metric": KindTemplate("MeanAbsoluteChange", "Mean |W - W0| over all trainable parameters"),
    "dataset": KindTemplate("load_quadrants", "Generated 1x8x8 images, 4 classes: the class is the bright quadrant"),
    "claim": KindTemplate(
        "evaluate", "Low-rate SGD remembers sigma more than each adaptive optimizer", try_it="initmem report SWEEP"
    ),
}
#: The kinds ``initmem new-plugin`` writes a package for (a preset is a file, not a package).
SCAFFOLD_KINDS = tuple(KIND_TEMPLATES)


#: Kinds whose ``plugin.py`` registers more than a name and a factory (an optimizer declares its
#: default rate and its clock convention): ``templates/<kind>/plugin.py.tmpl``.
OWN_PLUGIN_MODULE = ("optimizer", "claim")
#: Kinds with their own README (``templates/<kind>/README.md.tmpl``): not used through ``initmem run``.
OWN_README = ("claim",)


def run_options(kind: str, name: str) -> str:
    """How ``initmem run`` selects the new component, e.g. ``--reg l1 --l2 0.001``."""
    return f"{BY_NAME[kind].flag} {name}{KIND_TEMPLATES[kind].extra_options}"


def try_it(kind: str, name: str) -> str:
    """The command that uses the new component: ``initmem run ... --epochs 1``, or a report for a claim."""
    return KIND_TEMPLATES[kind].try_it or f"initmem run {run_options(kind, name)} --epochs 1"


@dataclass(frozen=True)
class PluginNames:
    """Every name a new plugin package uses, derived from the component name."""

    name: str  # the component, as users type it: sign-sgd

    @property
    def package(self) -> str:
        return "initmem_" + self.name.replace("-", "_")

    @property
    def distribution(self) -> str:
        return "initmem-" + self.name


def check_name(kind: str, name: str, registry: Registry) -> PluginNames:
    """Reject names that are not component names, would shadow initmem, or are already taken."""
    if not NAME_PATTERN.fullmatch(name):
        raise ConfigError(f"'{name}' is not a valid component name: use {NAME_RULE}")
    names = PluginNames(name)
    if names.package in RESERVED_PACKAGES:
        raise ConfigError(f"'{name}' would make the package {names.package}, which is initmem's own; pick another name")
    if name in registry.components.get(kind, {}):
        provider = registry.components[kind][name].provider
        raise ConfigError(f"{kind} '{name}' already exists, from {provider}; pick another name")
    return names


def template_values(kind: str, names: PluginNames) -> dict[str, str]:
    template = KIND_TEMPLATES[kind]
    major = int(API_VERSION.split(".")[0])
    return {
        "kind": kind,
        "name": names.name,
        "package": names.package,
        "distribution": names.distribution,
        "hook": BY_NAME[kind].hook,
        "module": kind,
        "factory": template.factory,
        "description": template.description,
        "usage": run_options(kind, names.name),
        "try_it": try_it(kind, names.name),
        "metric_key": names.name.replace("-", "_"),
        "api_range": f">={API_VERSION},<{major + 1}",
    }


def planned_files(kind: str, names: PluginNames) -> dict[str, str]:
    """Path in the new package -> template file under ``templates/``."""
    source = f"src/{names.package}"
    return {
        "pyproject.toml": "common/pyproject.toml.tmpl",
        "README.md": f"{kind}/README.md.tmpl" if kind in OWN_README else "common/README.md.tmpl",
        f"{source}/__init__.py": "common/__init__.py.tmpl",
        f"{source}/plugin.py": f"{kind}/plugin.py.tmpl" if kind in OWN_PLUGIN_MODULE else "common/plugin.py.tmpl",
        f"{source}/{kind}.py": f"{kind}/component.py.tmpl",
        f"tests/test_{names.package}.py": f"{kind}/test.py.tmpl",
    }


def create_plugin(kind: str, name: str, directory: Path | None, registry: Registry) -> tuple[Path, list[Path]]:
    """Write the package for the ``kind`` component ``name`` into ``directory`` (default
    ``./initmem-<name>``), which must not exist yet. Returns the folder and the files written."""
    kind = kind_named(kind).name
    if kind not in KIND_TEMPLATES:
        raise ConfigError(f"new-plugin writes no {kind} package; kinds it writes: {', '.join(SCAFFOLD_KINDS)}")
    names = check_name(kind, name, registry)
    folder = Path(directory) if directory is not None else Path.cwd() / names.distribution
    if folder.exists():
        raise ConfigError(f"{folder} already exists; choose a new folder with --dir (nothing was overwritten)")
    values = template_values(kind, names)
    templates = resources.files(__package__) / "templates"
    written = []
    for relative, template in planned_files(kind, names).items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(string.Template((templates / template).read_text()).substitute(values))
        written.append(path)
    return folder, written
