"""Tests of ``initmem_core.sweep``: grids, presets, a sweep's identity and what a dry run estimates."""
