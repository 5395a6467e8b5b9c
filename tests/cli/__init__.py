"""Tests of the command line (``cli/``, installed as ``initmem_cli``)."""
