"""``python -m initmem_cli`` is the ``initmem`` command."""

from .entry import main

main()
