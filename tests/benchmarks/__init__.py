"""Tests of the scripts in ``benchmarks/`` that the suite runs as commands."""
