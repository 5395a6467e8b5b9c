"""Benchmarks and checks, a package: run each from the repository root as ``python -m benchmarks.NAME``, so
that they import their shared helpers and the test helpers by name (``from benchmarks.machine_info import
describe``, ``from tests.cli_processes import alive``)."""
