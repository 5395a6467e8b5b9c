"""The test suite, a package so that its helpers are imported by name: ``from tests.cli_processes import TINY``
(the repository root is on ``sys.path`` through pytest's ``pythonpath`` setting in pyproject.toml)."""
