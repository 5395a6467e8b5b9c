"""Tests of ``initmem_core``: its top-level modules here, each subpackage in the folder of its name."""
