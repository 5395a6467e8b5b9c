"""Tests of ``initmem_plugins.datasets``."""
