"""A derandomized hypothesis search draws the same whatever the process imported before.

Hypothesis mixes into its draws the literals of the local modules imported so far; the
conftest empties that pool (``hypothesis_draws_ignore_what_the_process_imported``), or the
fixed searches of test_stateful_calls and test_seeded_bugs would depend on which test files
ran before them in the same xdist worker.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st


def fixed_draws() -> list[list[int]]:
    """What a derandomized search draws, in the range of test_stateful_calls's choices."""
    drawn: list[list[int]] = []

    @settings(max_examples=100, derandomize=True, database=None, phases=[Phase.generate])
    @given(st.lists(st.integers(0, 1023), min_size=10, max_size=10))
    def record(choices: list[int]) -> None:
        drawn.append(choices)

    record()
    return drawn


def test_a_local_module_imported_between_two_searches_changes_no_draw(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = fixed_draws()
    # a module of ours, not a test file, full of literals in the drawn range: hypothesis
    # would return them on some draws once it is imported
    source = tmp_path / "literals_beside.py"
    source.write_text(f"LITERALS = {tuple(range(1024))}\n")
    spec = importlib.util.spec_from_file_location("literals_beside", source)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setitem(sys.modules, "literals_beside", module)  # imported, until the end
    assert fixed_draws() == before
