"""Tests of ``initmem_plugins.figures``."""
