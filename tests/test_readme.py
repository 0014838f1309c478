"""The README stays true: its first commands and its inline diagram."""

from __future__ import annotations

import re
from pathlib import Path

from turnfsm.cli import readme_diagram

ROOT = Path(__file__).resolve().parents[1]


def test_readme_starts_with_the_two_commands() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    title, first_block = readme.split("\n\n", 2)[:2]
    assert title.startswith("# ")
    assert first_block.startswith("```sh\n"), "the two commands come first"
    first_block = re.search(r"```sh\n(.*?)```", readme, flags=re.S)
    assert first_block is not None
    commands = [line.split("#")[0].strip() for line in first_block.group(1).splitlines()]
    assert commands == ["make demo", "make test"]


def test_readme_diagram_is_the_generated_one() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"<!-- diagram:overview -->\n(.*?)<!-- /diagram -->", readme, flags=re.S)
    assert block is not None, "README lacks the generated diagram: run `make diagrams`"
    assert block.group(1) == readme_diagram(), "README diagram drifted: run `make diagrams`"
    overview = (ROOT / "diagrams" / "overview.mmd").read_text(encoding="utf-8")
    assert f"```mermaid\n{overview}```\n" in block.group(1)
