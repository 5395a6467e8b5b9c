"""Tests of ``initmem_plugins.commands``."""
