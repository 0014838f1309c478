"""Mermaid text rendered by Mermaid itself, in a real headless Chromium, as GitHub shows it.

:func:`mermaid_js` gets Mermaid's browser bundle from the npm registry with ``npm pack``,
pinned to one version and checked against the registry's sha512, and keeps it in the
venv (``.venv/share/mermaid-<version>/``): no other network, nothing installed by hand.
:func:`render` draws a diagram in a page column of a given width, scaled down to fit as
GitHub does (the SVG is ``max-width: 100%``), and measures its text as it lands on screen.
"""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from report.browser import open_page

MERMAID_VERSION = "11.12.2"
MERMAID_SHA512 = (
    "sha512-n34QPDPEKmaeCG4WDMGy0OT6PSyxKCfy2pJgShP+Qow2KLrvWjclwbc3y"
    "XfSIf4BanqWEhQEpngWwNp/XhZt6w=="
)
"""The npm registry's ``dist.integrity`` of that version's tarball."""


def mermaid_js() -> Path:
    """The path of ``mermaid.min.js`` (fetched once per venv)."""
    folder = Path(sys.prefix) / "share" / f"mermaid-{MERMAID_VERSION}"
    bundle = folder / "mermaid.min.js"
    if bundle.exists():
        return bundle
    with tempfile.TemporaryDirectory() as scratch:
        result = subprocess.run(
            [
                "npm",
                "pack",
                f"mermaid@{MERMAID_VERSION}",
                "--silent",
                "--pack-destination",
                scratch,
            ],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if result.returncode != 0:
            pytest.fail(f"npm pack mermaid@{MERMAID_VERSION} failed:\n{result.stderr}")
        tarball = Path(scratch) / f"mermaid-{MERMAID_VERSION}.tgz"
        digest = base64.b64encode(hashlib.sha512(tarball.read_bytes()).digest()).decode()
        assert f"sha512-{digest}" == MERMAID_SHA512, "the mermaid tarball is not the pinned one"
        with tarfile.open(tarball) as archive:
            member = archive.extractfile("package/dist/mermaid.min.js")
            assert member is not None
            folder.mkdir(parents=True, exist_ok=True)
            partial = folder / "mermaid.min.js.partial"
            partial.write_bytes(member.read())
            partial.replace(bundle)  # never a half-written bundle, even if two tests race
    return bundle


@dataclass(frozen=True)
class Rendered:
    """A diagram as drawn on screen."""

    natural_width: float
    """The SVG's own width (its viewBox), before the page scales it down."""
    shown_width: float
    """Its width on screen."""
    smallest_text_px: float
    """The smallest font size of any label, as shown (font size times the scale)."""
    labels: int
    """How many text labels were measured."""
    errors: tuple[str, ...]
    """Console errors and exceptions of the page (all its diagrams); Mermaid's parse
    errors land here."""


PAGE = """<!doctype html><meta charset="utf-8">
<body style="margin:0"><div id="column" style="width:{width}px"></div>
<script src="{bundle}"></script>
<script>mermaid.initialize({{startOnLoad: false}});</script>
"""

MEASURE = """(async () => {
  const column = document.getElementById("column");
  const measured = [];
  for (const [index, text] of %s.entries()) {
    const {svg} = await mermaid.render(`diagram${index}`, text);
    column.innerHTML = svg;
    const element = column.querySelector("svg");
    const box = element.viewBox.baseVal;
    const shown = element.getBoundingClientRect().width;
    const sizes = [];
    for (const label of element.querySelectorAll("text, foreignObject span, foreignObject p")) {
      if (!label.textContent.trim()) continue;
      sizes.push(parseFloat(getComputedStyle(label).fontSize) * shown / box.width);
    }
    measured.push({natural: box.width, shown: shown, smallest: Math.min(...sizes),
                   labels: sizes.length});
  }
  return measured;
})()"""


async def render(texts: list[str], width: int = 900) -> list[Rendered]:
    """Render each Mermaid text in turn in a ``width`` px column and measure its labels
    (one browser for all of them)."""
    with tempfile.TemporaryDirectory() as scratch:
        page = Path(scratch) / "page.html"
        page.write_text(PAGE.format(width=width, bundle=mermaid_js().as_uri()), encoding="utf-8")
        shown = await open_page(page.as_uri(), MEASURE % json.dumps(texts))
    values = shown.value or [{} for _ in texts]
    return [
        Rendered(
            natural_width=float(value.get("natural", 0)),
            shown_width=float(value.get("shown", 0)),
            smallest_text_px=float(value.get("smallest", 0)),
            labels=int(value.get("labels", 0)),
            errors=tuple(shown.errors),
        )
        for value in values
    ]
