"""Test support code: not part of the installed package (``tests/`` is on pytest's path)."""
