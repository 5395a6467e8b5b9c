"""initmem's own commands beside the run, sweep and report, as a plugin: ``new-plugin`` (a plugin
package from ``templates/``), ``clean`` (what sweeps and runs left on disk) and ``sync`` (what runs
could not write to the store, uploaded once it answers).

Loaded like any plugin (the ``commands`` entry point); ``INITMEM_LOAD_PLUGINS`` without
``commands`` leaves them out. Registered by import string: listing them imports no mlflow.
"""

from __future__ import annotations

from initmem_core import hookimpl


@hookimpl
def initmem_register_commands(register):
    register(
        "new-plugin",
        "initmem_plugins.commands.new_plugin:new_plugin_command",
        "Create a pip-installable plugin package with a working component and its tests",
    )
    register(
        "clean",
        "initmem_plugins.commands.clean:clean_command",
        "Remove the checkpoints and leases a sweep or single runs left (the store's runs stay)",
    )
    register(
        "sync",
        "initmem_plugins.commands.sync:sync_command",
        "Upload the metrics, tags and artifacts runs left in initmem-unsynced/, then delete them",
    )
