"""Tests of ``initmem_core.plugin_system``: the loader, API versions and optimizer options."""
