"""initmem: how much does training remember its initialization scale?

The Python API the CLI is a thin layer over. Importing this package is cheap: torch and mlflow
load only when a run, sweep or report needs them.
"""

from __future__ import annotations

from .config import RunConfig
from .errors import InitmemError
from .hookspecs import hookimpl
from .plugins import get_registry, load_registry

#: The plugin API version. Plugins may declare the range they support (see docs/plugins.md).
API_VERSION = "1.0"

__all__ = ["API_VERSION", "InitmemError", "RunConfig", "get_registry", "hookimpl", "load_registry"]
