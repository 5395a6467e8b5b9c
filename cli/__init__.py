"""The initmem command line: a thin layer over initmem_core."""
