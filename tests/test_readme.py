"""The README stays true: its first commands and its inline diagram."""

from __future__ import annotations

import re
from pathlib import Path

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
    block = re.search(
        r"<!-- diagram:outbound -->\n```mermaid\n(.*?)```\n<!-- /diagram -->", readme, flags=re.S
    )
    assert block is not None, "README lacks the generated diagram: run `make diagrams`"
    generated = (ROOT / "diagrams" / "outbound.mmd").read_text(encoding="utf-8")
    assert block.group(1) == generated, "README diagram drifted: run `make diagrams`"


def test_ci_runs_make_test_only() -> None:
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    commands = [
        line for line in script.splitlines() if line and not line.startswith(("#", "set ", "cd "))
    ]
    assert commands == ["make test"]
