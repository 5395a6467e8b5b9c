"""The test suite, a package so that its helpers are imported by name: ``from tests.cli_processes import TINY``
(the repository root is on ``sys.path`` through pytest's ``pythonpath`` setting in pyproject.toml).

One file per module or feature, named for it. What several files share lives in one place each:
``conftest.py`` (fixtures: a fresh registry, stores, fake and pip-installed plugins, the leak check and
the longest-first order), ``builders.py`` (hand-made records and sweeps for the report and claims),
``cli_processes.py`` (the shared run settings and their CLI options, the CLI's command line, and what a
store holds after a run: ``stored_runs``, ``only_run``, ``history``, a sweep's ``children``) and
``local_services.py`` (servers started for a test)."""
