"""Tests of ``initmem_core.testing``: the pytest plugin, the contract checks and the calibration of claims."""
