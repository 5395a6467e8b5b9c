"""The plugin API version, and the check of the range a plugin declares it supports.

A plugin module may set ``INITMEM_API = ">=1.0,<2"`` (a PEP 440 version specifier, read with
``packaging``). The loader skips a plugin whose range excludes ``API_VERSION`` and reports why,
instead of letting it fail later in the middle of a run.
"""

from __future__ import annotations

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from initmem_core.errors import InitmemError

#: The plugin API version. The major number changes when a plugin written for the previous one
#: may break; the minor number when something is added. See docs/plugins.md.
API_VERSION = "1.3"  # 1.1: metric factories take the run config, register(default=); 1.2: commands; 1.3: claim_api

#: The module attribute in which a plugin declares the API range it supports.
API_ATTRIBUTE = "INITMEM_API"

RANGE_HELP = "expected comma-separated comparisons such as '>=1.0,<2'"


class IncompatiblePluginError(InitmemError):
    """A plugin declares an API range that excludes this initmem's ``API_VERSION``."""


def supports(required: object, version: str = API_VERSION) -> bool:
    """Whether the range ``required`` (e.g. ``">=1.0,<2"``) includes ``version``.

    Raises ``ValueError`` for a range that is not written as comma-separated comparisons.
    """
    # "", ">=1.0," and non-text
    if not isinstance(required, str) or not all(clause.strip() for clause in required.split(",")):
        raise ValueError(f"{required!r}: {RANGE_HELP}")
    try:
        return SpecifierSet(required).contains(version, prereleases=True)
    except InvalidSpecifier:
        raise ValueError(f"{required!r}: {RANGE_HELP}") from None


def check_plugin_api(plugin: object) -> None:
    """Raise ``IncompatiblePluginError`` unless ``plugin`` supports ``API_VERSION`` (or declares nothing)."""
    required = getattr(plugin, API_ATTRIBUTE, None)
    if required is None:
        return
    try:
        compatible = supports(required)
    except ValueError as error:
        raise IncompatiblePluginError(f"invalid {API_ATTRIBUTE} {error}") from None
    if not compatible:
        raise IncompatiblePluginError(
            f"needs initmem plugin API {required} but this initmem provides API {API_VERSION}; "
            "install a release of the plugin made for this API, or an initmem that provides its API"
        )
