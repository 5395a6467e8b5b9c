"""Tests of ``initmem_core.tracking``: the store, its locks and paths, the tracker, exports and the UI's view."""
