"""The README stays true: its first commands, its inline diagram and its embedding steps."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

from turnfsm.cli import readme_diagram

from support.readme import readme_embed_block

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


def _calls(source: str) -> list[str]:
    """The names of the embedding's calls in ``source``, in source order."""
    wanted = {"TurnController", "trace_writer", "attach", "hang_up_room", "start"}
    wanted.add("place_sip_call")
    calls = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in wanted:
                calls.append((node.lineno, node.col_offset, name))
    return [name for *_, name in sorted(calls)]


def test_readme_embed_imports_exist() -> None:
    for node in ast.walk(ast.parse(readme_embed_block())):
        if isinstance(node, ast.ImportFrom) and node.module:
            module = importlib.import_module(node.module)
            for alias in node.names:
                assert hasattr(module, alias.name), f"{node.module}.{alias.name}"


def test_readme_embed_steps_are_the_outbound_examples_in_its_order() -> None:
    example = (ROOT / "examples" / "outbound_caller.py").read_text(encoding="utf-8")
    expected = ["TurnController", "trace_writer", "attach", "hang_up_room", "start"]
    expected.append("place_sip_call")
    assert _calls(readme_embed_block()) == expected
    assert _calls(example) == expected
