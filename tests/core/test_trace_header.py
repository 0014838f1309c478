"""Issue 22: a trace's header says which call it is: its id, when it started, the agent
that took it and the turnfsm version that wrote it (format 2); a format-1 trace, written
before, still reads."""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path

import pytest
from test_trace_format import CALL, POLICY

from turnfsm import Trace, TraceFormatError, TraceWriter, TurnController, replay
from turnfsm.tools.metrics import call_metrics
from turnfsm.trace import FORMAT_VERSION, CallInfo

FORMAT_1 = Path(__file__).parent / "traces" / "format-1.jsonl"
"""A trace written by turnfsm before the header named the call (format 1), kept as
written."""

FORMAT_3 = Path(__file__).parent / "traces" / "format-3.jsonl"
"""A trace written by turnfsm before drops were measured in their outcome (format 3, text
kept): its speech end and drop hold ``played_text``, a transcript synchronizer's text."""

FORMAT_4 = Path(__file__).parent / "traces" / "format-4.jsonl"
"""The same call written by turnfsm before the drop lost ``played_seconds`` (format 4, text
kept)."""

CALL_INFO = CallInfo(
    call_id="call-_+15550100_Xk2p", started_at="2025-06-02T09:30:12.5Z", agent_name="caller"
)


def _recorded(path: Path, call: CallInfo | None = CALL_INFO) -> TurnController:
    with TraceWriter(path) as writer:
        controller = TurnController(POLICY, call=call, trace_sink=writer)
        for event in CALL:
            controller.handle(event)
    return controller


def test_the_header_names_the_call_and_the_turnfsm_that_wrote_it(tmp_path: Path) -> None:
    path = tmp_path / "call.jsonl"
    controller = _recorded(path)
    header = json.loads(path.read_text(encoding="utf-8").splitlines()[0])
    assert header["turnfsm_trace"] == FORMAT_VERSION == 5
    assert header["call"] == {
        "call_id": "call-_+15550100_Xk2p",
        "started_at": "2025-06-02T09:30:12.5Z",
        "agent_name": "caller",
    }
    assert header["turnfsm_version"] == importlib.metadata.version("turnfsm")
    read = Trace.read(path)
    assert read.call == CALL_INFO
    assert read.turnfsm_version == importlib.metadata.version("turnfsm")
    assert read == controller.trace
    assert Trace.parse(controller.trace.to_jsonl().splitlines()) == read  # type: ignore[union-attr]


def test_a_call_without_its_details_says_they_are_unknown(tmp_path: Path) -> None:
    path = tmp_path / "call.jsonl"
    _recorded(path, call=None)
    header = json.loads(path.read_text(encoding="utf-8").splitlines()[0])
    assert header["call"] == {"call_id": None, "started_at": None, "agent_name": None}
    assert Trace.read(path).call == CallInfo()


def test_a_format_1_trace_still_reads_and_replays() -> None:
    assert json.loads(FORMAT_1.read_text(encoding="utf-8").splitlines()[0])["turnfsm_trace"] == 1
    trace = Trace.read(FORMAT_1)
    assert trace.call == CallInfo()
    assert trace.turnfsm_version is None
    assert trace.policy.direction == "outbound"
    assert [step.event.name for step in trace] == [event.name for event in CALL]
    assert list(replay(trace).steps) == list(trace.steps)


def test_a_format_3_trace_reads_without_the_synchronizers_text() -> None:
    """Its ``played_text`` never was the cut (the synchronizer keeps words nobody heard):
    it is read without it, and its drop counts as unmeasured, not as the cut it was not."""
    raw = FORMAT_3.read_text(encoding="utf-8")
    assert json.loads(raw.splitlines()[0])["turnfsm_trace"] == 3
    assert raw.count('"played_text": "Your balance"') == 2  # the speech's end and its drop
    trace = Trace.read(FORMAT_3)
    assert trace.call == CALL_INFO
    ended = [s for s in trace if s.event.name == "agent_speech_ended"]
    assert [s.event.played_seconds for s in ended] == [1.6, 0.8]
    drops = [e for s in ended for e in s.effects if e.name == "drop_unspoken_text"]
    assert [(d.speech_id, d.keep) for d in drops] == [("s2", "spoken")]
    assert list(replay(trace, keep_text=True).steps) == list(trace.steps)
    metrics = call_metrics(trace)
    assert (metrics.drops, metrics.dropped_chars, metrics.unmeasured_drops) == (1, 0, 1)
    # format 4 has no such field: the same lines under its header are refused
    lines = raw.splitlines()
    lines[0] = lines[0].replace('"turnfsm_trace": 3', '"turnfsm_trace": 4')
    with pytest.raises(TraceFormatError, match="unknown fields \\['played_text'\\]"):
        Trace.parse(lines)


def test_a_format_4_trace_reads_its_drop_without_played_seconds() -> None:
    """Format 4's drop held the seconds played, which nothing read: read without them."""
    raw = FORMAT_4.read_text(encoding="utf-8")
    assert json.loads(raw.splitlines()[0])["turnfsm_trace"] == 4
    assert raw.count('"drop_unspoken_text", "played_seconds": 0.8') == 1
    trace = Trace.read(FORMAT_4)
    assert [step.event for step in trace] == [step.event for step in Trace.read(FORMAT_3)]
    drops = [e for s in trace for e in s.effects if e.name == "drop_unspoken_text"]
    assert [(d.speech_id, d.keep) for d in drops] == [("s2", "spoken")]
    assert list(replay(trace, keep_text=True).steps) == list(trace.steps)
    # format 5 has no such field: the same lines under its header are refused
    lines = raw.splitlines()
    lines[0] = lines[0].replace('"turnfsm_trace": 4', '"turnfsm_trace": 5')
    with pytest.raises(TraceFormatError, match="unknown fields \\['played_seconds'\\]"):
        Trace.parse(lines)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("started_at", "yesterday", "CallInfo.started_at must be an ISO 8601 time"),
        ("started_at", "2025-06-02 09:30", "CallInfo.started_at must be an ISO 8601 time"),
        ("call_id", "room\ud800", "CallInfo.call_id must be text"),
        ("agent_name", "a" * 1001, "CallInfo.agent_name must be at most 1000 characters"),
        ("agent_name", 7, "CallInfo.agent_name must be a string"),
    ],
)
def test_call_details_are_checked_at_the_door(field: str, value: object, message: str) -> None:
    with pytest.raises((TypeError, ValueError), match=f"^{message}"):
        CallInfo(**{field: value})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"turnfsm_trace": 6}, "header: turnfsm_trace must be 1 or 2 or 3 or 4 or 5, got 6"),
        ({"call": "room-1"}, "header: call must be an object"),
        ({"call": {"call_id": "x", "room": "y"}}, "header: call has unknown keys ['room']"),
        ({"call": {"started_at": "noon"}}, "CallInfo.started_at must be an ISO 8601 time"),
        ({"turnfsm_version": 2}, "header: turnfsm_version must be a string"),
        ({"turnfsm_trace": 1}, "header: unknown keys ['call', 'turnfsm_version']"),
    ],
)
def test_a_bad_call_in_a_header_is_line_one(
    tmp_path: Path, change: dict[str, object], message: str
) -> None:
    path = tmp_path / "call.jsonl"
    _recorded(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    header = {**json.loads(lines[0]), **change}
    with pytest.raises(TraceFormatError, match=r"^line 1: ") as error:
        Trace.parse([json.dumps(header), *lines[1:]])
    assert message in str(error.value)
