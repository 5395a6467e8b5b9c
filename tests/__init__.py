"""The test suite, a package so that its helpers are imported by name: ``from tests.support.cli_processes
import TINY`` (the repository root is on ``sys.path`` through pytest's ``pythonpath`` setting in
pyproject.toml).

Laid out like the code: ``core/`` (``initmem_core``, a folder per subpackage), ``plugins/<kind>/``,
``cli/``, ``examples/`` and ``benchmarks/``; ``e2e/`` for whole ``initmem`` processes across
packages and ``docs/`` for README.md and docs/. One file per module or feature, named for it. What
several files share lives in one place each: ``conftest.py`` (fixtures: a fresh registry, stores,
fake and pip-installed plugins, the leak check and the longest-first order) and ``support/``
(hand-made records and sweeps, the shared run settings and the CLI's command line, servers started
for a test, long commands, dataset files, the repository's root)."""
