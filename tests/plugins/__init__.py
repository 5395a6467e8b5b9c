"""Tests of the built-in plugins (``plugins/``, installed as ``initmem_plugins``), one folder per kind."""
