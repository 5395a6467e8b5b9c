"""Tests of ``initmem_plugins.claims``."""
