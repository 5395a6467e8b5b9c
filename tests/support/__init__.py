"""What several test files share, one module each: the run settings and the CLI's command line
(``cli_processes``), hand-made records and sweeps (``builders``), servers started for a test
(``local_services``), long commands and nested pytests (``long_commands``), dataset files in their
official formats (``dataset_files``), and the small plugins, progress objects and import blocks the
tests load. ``ROOT`` is the repository's root, for the tests that read its files."""

from __future__ import annotations

from pathlib import Path

#: The repository's root (this checkout's, whichever initmem is installed).
ROOT = Path(__file__).resolve().parents[2]
