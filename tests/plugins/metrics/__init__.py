"""Tests of ``initmem_plugins.metrics``."""
