"""The `turnfsm` command: outputs, and one-line errors with a non-zero status."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from turnfsm import TurnController, TurnPolicy
from turnfsm import events as ev
from turnfsm.tools.cli import MISSING_DOT, main

from support.debian import debian_program


@pytest.fixture
def call_file(tmp_path: Path) -> Path:
    controller = TurnController(TurnPolicy(direction="outbound", greeting="Hi"))
    controller.handle(ev.CallAnswered(at=1.0))
    controller.handle(ev.UserTurnCommitted(at=2.0, text="Hello?", item_id="u1"))
    controller.handle(ev.CallEnded(at=3.0))
    assert controller.trace is not None
    path = tmp_path / "call.jsonl"
    controller.trace.write(path)
    return path


@pytest.fixture
def no_dot(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("turnfsm.tools.cli.shutil.which", lambda _name: None)


def test_diagram_prints_mermaid_by_default(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagram", "--policy", "inbound"]) == 0
    assert capsys.readouterr().out.splitlines()[4] == "stateDiagram-v2"


def test_output_suffix_picks_the_format(tmp_path: Path) -> None:
    assert main(["diagram", "-o", str(tmp_path / "machine.dot")]) == 0
    assert (tmp_path / "machine.dot").read_text().startswith("digraph TurnMachine {")


def test_trace_overlay_uses_the_traces_policy(
    call_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["diagram", "--trace", str(call_file)]) == 0
    out = capsys.readouterr().out
    assert "ringing --> awaiting_user : call_answered ×1\n" in out
    assert "outbound call, user speaks first, trace of 3 steps" in out


@pytest.mark.usefixtures("no_dot")
@pytest.mark.parametrize("fmt", ["svg", "png"])
def test_missing_dot_is_one_clear_line(fmt: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagram", "--format", fmt]) == 1
    assert capsys.readouterr().err == f"turnfsm: error: {MISSING_DOT}\n"


def test_missing_dot_from_the_shell(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "turnfsm", "diagram", "--format", "svg"],
        capture_output=True,
        text=True,
        env={"PATH": str(tmp_path)},
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert "Graphviz 'dot' program not found on PATH" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("command", ["diagram", "timeline"])
def test_bad_trace_line_is_named(
    command: str, call_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = call_file.read_text().splitlines()
    lines[1] = lines[1].replace('"call_answered"', '"call_teleported"')
    call_file.write_text("\n".join(lines) + "\n")
    args = (
        ["diagram", "--trace", str(call_file)]
        if command == "diagram"
        else [command, str(call_file)]
    )
    assert main(args) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"turnfsm: error: {call_file}: line 2: unknown event 'call_teleported'")
    assert "Traceback" not in err


def test_missing_trace_and_bad_policy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["timeline", str(tmp_path / "nope.jsonl")]) == 1
    assert "cannot read" in capsys.readouterr().err
    assert main(["diagram", "--policy", "sideways"]) == 1
    assert "--policy must be one of ['inbound', 'outbound'] or a .json or .toml file" in (
        capsys.readouterr().err
    )
    policy = tmp_path / "policy.json"
    policy.write_text('{"direction": "outbound", "greeting": "Hi", "max_tool_steps": 0}')
    assert main(["diagram", "--policy", str(policy)]) == 1
    assert "max_tool_steps must be an integer from 1 to 1000000, got 0" in capsys.readouterr().err


def test_timeline_writes_svg_only(call_file: Path, tmp_path: Path) -> None:
    assert main(["timeline", str(call_file), "-o", str(tmp_path / "call.svg")]) == 0
    assert (tmp_path / "call.svg").read_text().startswith("<svg")
    assert main(["timeline", str(call_file), "-o", str(tmp_path / "call.png")]) == 1


@pytest.mark.usefixtures("no_dot")
def test_diagrams_writes_text_without_dot_and_check_detects_edits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["diagrams", "--out", str(tmp_path)]) == 0
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "inbound.dot",
        "inbound.mmd",
        "outbound.dot",
        "outbound.mmd",
        "overview.mmd",
    ]
    assert "skipped the svg files" in capsys.readouterr().err
    assert main(["diagrams", "--out", str(tmp_path), "--check"]) == 0
    (tmp_path / "outbound.mmd").write_text("stateDiagram-v2\n")
    assert main(["diagrams", "--out", str(tmp_path), "--check"]) == 1
    assert "outbound.mmd differs from the machine: run `make diagrams`" in capsys.readouterr().err


def test_svg_with_dot(tmp_path: Path) -> None:
    debian_program("dot", "graphviz")
    assert main(["diagram", "--policy", "outbound", "-o", str(tmp_path / "machine.svg")]) == 0
    assert "<svg" in (tmp_path / "machine.svg").read_text()
