"""The README stays true: its first commands, its inline diagram, its option table and its
embedding steps."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

from turnfsm.tools.cli import option_table, readme_diagram

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


def test_readme_option_table_is_the_generated_one() -> None:
    """Written from the policy's fields (``make diagrams``): a new option is a new row."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"<!-- policy:options -->\n(.*?)<!-- /policy -->", readme, flags=re.S)
    assert block is not None, "README lacks the generated option table: run `make diagrams`"
    assert block.group(1) == option_table(), "README option table drifted: run `make diagrams`"


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


def _testing_section() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    return readme.split("## Testing your agent\n", 1)[1].split("\n## ", 1)[0]


def test_readme_testing_blocks_run_in_make_test() -> None:
    """The README's plugin line is the project's own, and each test it shows is one of
    examples/test_outbound_caller.py, word for word (so make test runs it)."""
    blocks = re.findall(r"```python\n(.*?)```", _testing_section(), flags=re.S)
    plugin, *tests = blocks
    conftest = (ROOT / "conftest.py").read_text(encoding="utf-8")
    assert plugin in conftest
    example = (ROOT / "examples" / "test_outbound_caller.py").read_text(encoding="utf-8")
    assert len(tests) == 2
    for block in tests:
        assert block in example


def test_readme_testing_names_exist() -> None:
    """Every ``call.expect`` check and ``call`` attribute the section names exists."""
    from turnfsm.adapters.sim import testing

    section = _testing_section()
    bullet = section.split("`call.expect` checks", 1)[1].split("\n- ", 1)[0]
    checks = set(re.findall(r"`(\w+)\(", bullet))
    assert checks >= {"greeting_played_whole", "committed_as_heard", "no_breach"}
    for name in checks:
        assert callable(getattr(testing.Expect, name)), name
    for name in set(re.findall(r"`call\.(\w+)", section)):
        assert hasattr(testing.SimulatedTurnCall, name), name
