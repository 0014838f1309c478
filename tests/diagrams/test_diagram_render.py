"""The README's diagram reads at a page's width: drawn by Mermaid in headless Chromium.

GitHub shows a Mermaid diagram at most as wide as the page column (about 900 px) and
scales a wider one down, text included. Each diagram is rendered by Mermaid itself (the
pinned bundle, see ``mermaid_render``) in a 900 px column and its smallest label is
measured as shown. One browser, about 5 s.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from mermaid_render import render

from turnfsm.tools.cli import PRESETS, readme_diagram

DIAGRAMS = Path(__file__).resolve().parents[2] / "diagrams"

READABLE_PX = 11.0
"""The smallest text we call readable on a page."""


@pytest.mark.wall_clock  # drives a real Chromium process
async def test_readme_diagram_reads_at_900_px_and_the_full_ones_render(
    summary_line: Callable[[str], None],
) -> None:
    block = re.search(r"```mermaid\n(.*?)```", readme_diagram(), flags=re.S)
    assert block is not None
    full = [(DIAGRAMS / f"{name}.mmd").read_text(encoding="utf-8") for name in PRESETS]
    overview, detail, *_ = await render([block.group(1), *full], width=900)
    assert overview.errors == (), overview.errors  # Mermaid drew them all without an error
    assert overview.labels >= 20  # states and event names were measured
    assert overview.shown_width <= 900
    assert overview.smallest_text_px >= READABLE_PX, overview
    # the measure tells: the full detail (outbound) is too wide for a page, it lives in
    # diagrams/
    assert detail.labels > overview.labels
    assert detail.smallest_text_px < READABLE_PX
    summary_line(
        f"README diagram at 900 px: {overview.natural_width:.0f} px wide natural, smallest "
        f"text {overview.smallest_text_px:.1f} px (full outbound diagram: "
        f"{detail.smallest_text_px:.1f} px)"
    )
