"""Tests of ``initmem_core.report``: memory, intervals, claims, regimes, verdicts and the report's files."""
