"""The plugin API version, and the check of the range a plugin declares it supports.

A plugin module may set ``INITMEM_API = ">=1.0,<2"``. The loader skips a plugin whose range
excludes ``API_VERSION`` and reports why, instead of letting it fail later in the middle of a
run. API versions are plain ``MAJOR.MINOR`` numbers, so a few comparison operators cover every
useful range; no PEP 440 machinery is needed (or depended on).
"""

from __future__ import annotations

import operator
import re

from initmem_core.errors import InitmemError

#: The plugin API version. The major number changes when a plugin written for the previous one
#: may break; the minor number when something is added. See docs/plugins.md.
API_VERSION = "1.0"

#: The module attribute in which a plugin declares the API range it supports.
API_ATTRIBUTE = "INITMEM_API"

_CLAUSE = re.compile(r"\s*(~=|==|!=|>=|<=|>|<)\s*([0-9]+(?:\.[0-9]+)*)\s*")
_COMPARE = {"==": operator.eq, "!=": operator.ne, ">=": operator.ge, "<=": operator.le,
            ">": operator.gt, "<": operator.lt}
RANGE_HELP = "expected comma-separated comparisons such as '>=1.0,<2'"


class IncompatiblePluginError(InitmemError):
    """A plugin declares an API range that excludes this initmem's ``API_VERSION``."""


def _numbers(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def _padded(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Compare 1 and 1.0 as equal, the way version numbers are meant."""
    width = max(len(a), len(b))
    return a + (0,) * (width - len(a)), b + (0,) * (width - len(b))


def _satisfies(version: tuple[int, ...], op: str, bound: tuple[int, ...]) -> bool:
    if op == "~=":  # compatible release: ~=1.2 means >=1.2 and ==1.*
        prefix = bound[:-1] if len(bound) > 1 else bound
        return _satisfies(version, ">=", bound) and version[:len(prefix)] == prefix
    return _COMPARE[op](*_padded(version, bound))


def supports(required: object, version: str = API_VERSION) -> bool:
    """Whether the range ``required`` (e.g. ``">=1.0,<2"``) includes ``version``.

    Raises ``ValueError`` for a range that is not written as comma-separated comparisons.
    """
    if not isinstance(required, str) or not required.strip():
        raise ValueError(f"{required!r}: {RANGE_HELP}")
    clauses = []
    for text in required.split(","):
        match = _CLAUSE.fullmatch(text)
        if match is None:
            raise ValueError(f"{required!r}: {RANGE_HELP}")
        clauses.append((match[1], _numbers(match[2])))
    current = _numbers(version)
    return all(_satisfies(current, op, bound) for op, bound in clauses)


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
