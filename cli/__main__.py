"""``python -m initmem_cli`` is the ``initmem`` command."""

from .app import main

main()
