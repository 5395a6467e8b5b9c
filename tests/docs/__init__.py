"""Tests of README.md and docs/: links, the scripts behind each figure, the results pages, the pre-registration and
the plugin guide."""
