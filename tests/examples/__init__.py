"""Tests of the example plugin packages in ``examples/``, pip-installed and used through the CLI."""
