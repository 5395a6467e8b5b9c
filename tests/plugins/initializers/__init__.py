"""Tests of ``initmem_plugins.initializers``."""
