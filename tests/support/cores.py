"""How many processes a test may spread CPU-bound work over."""

from __future__ import annotations

import os


def cores_for_one_test() -> int:
    """The machine's cores shared among pytest-xdist's workers, each running one test at a
    time: a test that took every core would slow a real-time session on another worker."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    return max(1, (os.cpu_count() or 1) // workers)
