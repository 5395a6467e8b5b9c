"""Tests of ``initmem_plugins.regularizers``."""
