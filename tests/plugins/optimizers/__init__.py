"""Tests of ``initmem_plugins.optimizers``."""
