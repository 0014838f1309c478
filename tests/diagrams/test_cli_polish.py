"""Issue 13, point 6: the CLI and README a new user meets first."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

from turnfsm import TurnPolicy
from turnfsm.adapters.sim.demo import SCENARIOS
from turnfsm.tools.cli import SUFFIX_FORMATS, main

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_version() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "turnfsm", "--version"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert re.fullmatch(r"turnfsm \d+\.\d+\.\d+\S*\n", result.stdout)


@pytest.mark.parametrize("name", ["machine.pdf", "machine.txt", "machine"])
def test_an_unknown_output_extension_is_refused(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / name
    assert main(["diagram", "-o", str(output)]) == 1
    err = capsys.readouterr().err
    assert f"cannot write a diagram as {output}" in err
    assert ".mmd" in err  # what to name it instead
    assert not output.exists()  # nothing written


def test_a_format_the_extension_contradicts_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "machine.mmd"
    assert main(["diagram", "--format", "dot", "-o", str(output)]) == 1
    assert "--format dot but" in capsys.readouterr().err
    assert not output.exists()


@pytest.mark.parametrize("suffix", [".mmd", ".dot"])
def test_known_extensions_still_write(suffix: str, tmp_path: Path) -> None:
    output = tmp_path / f"machine{suffix}"
    assert main(["diagram", "-o", str(output)]) == 0
    text = output.read_text(encoding="utf-8")
    assert (
        text.startswith("digraph") if SUFFIX_FORMATS[suffix] == "dot" else "stateDiagram" in text
    )


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("p.json", '{"direction": "outbound", "greting": "Hi"}', "did you mean 'greeting'?"),
        (
            "p.toml",
            'direction = "outbound"\ngreeting = "Hi"\nmax_tool_step = 2\n',
            "'max_tool_steps'",
        ),
        (
            "p.json",
            '{"direction": "outbound", "greeting": "Hi", "max_tool_steps": "3"}',
            "max_tool_steps must be an integer",
        ),
        ("p.json", '["outbound"]', "a policy is a table of TurnPolicy fields"),
        ("p.toml", "direction = ", "p.toml: "),
        ("p.json", '{"direction": "outbound"}', "greeting or greeting_instructions is required"),
    ],
)
@pytest.mark.parametrize("command", ["diagram", "check"])
def test_policy_files_are_checked_key_by_key(
    command: str,
    name: str,
    content: str,
    message: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    policy = tmp_path / name
    policy.write_text(content, encoding="utf-8")
    argv = ["diagram", "--policy", str(policy)] if command == "diagram" else ["check", str(policy)]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"turnfsm: error: {policy}: ")
    assert message in err
    assert "TypeError" not in err
    assert "Traceback" not in err


def test_a_toml_policy_draws(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policy = tmp_path / "mine.toml"
    policy.write_text('direction = "outbound"\ngreeting = "Hi"\nidle_timeout = 5.0\n')
    assert main(["diagram", "--policy", str(policy)]) == 0
    assert "stateDiagram-v2" in capsys.readouterr().out


def test_readme_documents_the_demo_scenarios() -> None:
    assert "make demo SCENARIO=NAME" in README
    named = re.search(r"`make demo SCENARIO=NAME` picks the call; (.*?)\n\n", README, re.S)
    assert named is not None
    assert set(re.findall(r"`(\w+)` \(", named.group(1))) == set(SCENARIOS)


def test_readme_policy_table_is_every_field_and_says_what_is_required() -> None:
    rows = dict(re.findall(r"^\| `(\w+)` \| ([^|]*) \|", README, flags=re.M))
    fields = [field.name for field in attrs.fields(TurnPolicy)]
    assert [name for name in rows if name in fields] == fields  # each field, in order
    required = [name for name in fields if "required" in rows[name]]
    assert required == ["greeting", "greeting_instructions"]
    with pytest.raises(ValueError, match="greeting or greeting_instructions is required"):
        TurnPolicy(direction="outbound")  # an outbound call needs one, as the table says
    # the table's defaults alone: inbound, the agent greets in its own words
    assert TurnPolicy().direction == "inbound"
    assert TurnPolicy().greets_in_own_words
