"""Effective rank of every layer, against its initialization: an initmem metric plugin."""

__version__ = "0.1.0"
