"""Tests of ``initmem_plugins.architectures``."""
