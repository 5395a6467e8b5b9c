"""Tests of ``initmem_plugins.executors``."""
