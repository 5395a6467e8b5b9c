"""Benchmarks and checks, a package: run each from the repository root as ``python -m benchmarks.NAME``, so
that they import their shared helpers by name (``from benchmarks.timing import BareLoop``). Tests run
them as commands and import nothing of them, nor they of the tests."""
