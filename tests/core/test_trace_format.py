"""Traces: JSONL round trip, replay, line-numbered format errors, transcript redaction."""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest

from turnfsm import Trace, TraceFormatError, TurnController, TurnPolicy, replay
from turnfsm import effects as fx
from turnfsm import events as ev
from turnfsm.tools.metrics import call_metrics
from turnfsm.trace import FORMAT_VERSION, REDACTED, redact

POLICY = TurnPolicy(
    direction="outbound", greeting="Hi, this is Ada.", max_tool_steps=1, max_call_duration=300
)
SAID = "My account number is 1234"
HEARD = "Your balance"
REPLY = "Your balance is forty two dollars"

CALL: list[ev.Event] = [
    ev.CallRinging(at=0.0),
    ev.CallAnswered(at=1.0),
    ev.UserSpeechStarted(at=1.5),
    ev.UserTranscript(at=1.8, text="Hello?", is_final=True),
    ev.UserSpeechEnded(at=2.0),
    ev.UserTurnCommitted(at=2.1, text="Hello?", item_id="u1"),
    ev.AgentSpeechCreated(at=2.2, speech_id="g1", source="say"),
    ev.AgentSpeechStarted(at=2.4, speech_id="g1"),
    ev.AgentSpeechEnded(at=4.0, speech_id="g1", played_seconds=1.6),
    ev.UserTranscript(at=5.0, text=SAID, is_final=True),
    ev.UserTurnCommitted(at=5.5, text=SAID, item_id="u2"),
    ev.AgentSpeechCreated(at=5.6, speech_id="s1"),
    ev.ToolStepStarted(at=5.7, speech_id="s1", calls=2),
    ev.ToolStepFinished(at=6.0, speech_id="s1", calls=2),
    ev.AgentSpeechCreated(at=6.1, speech_id="s2", source="tool_reply"),
    ev.AgentSpeechEnded(at=7.0, speech_id="s2", interrupted=True, played_seconds=0.8),
    ev.AssistantMessageCommitted(
        at=7.1, item_id="a1", speech_id="s2", text=REPLY, interrupted=True
    ),
    ev.SessionError(at=8.0, message="tts hiccup"),
    ev.CallEnded(at=9.0, reason="hangup"),
]


def record(**options: object) -> tuple[Trace, list[tuple[fx.Effect, ...]]]:
    controller = TurnController(POLICY, strict=True, **options)  # type: ignore[arg-type]
    effects = [controller.handle(event) for event in CALL]
    assert controller.trace is not None
    return controller.trace, effects


def test_a_recorded_call_has_one_step_per_event() -> None:
    trace, effects = record(keep_text=True)
    assert len(trace) == len(CALL)
    assert [step.event for step in trace] == CALL
    assert [step.effects for step in trace] == effects
    assert [(step.before, step.after) for step in trace][:2] == [
        ("ringing", "ringing"),
        ("ringing", "awaiting_user"),
    ]
    assert trace.steps[-1].after == "ended"
    assert fx.FinalReplyWithoutTools(fallback_text=POLICY.tool_cap_fallback) in effects[13]


def test_record_false_keeps_no_trace() -> None:
    assert TurnController(POLICY, record=False).trace is None


@pytest.mark.parametrize("keep_text", [False, True])
def test_jsonl_round_trip(tmp_path: Path, keep_text: bool) -> None:
    trace, _ = record(keep_text=keep_text)
    path = tmp_path / "call.jsonl"
    trace.write(path)
    assert Trace.read(path) == trace
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 1 + len(CALL)
    policy = POLICY if keep_text else redact(POLICY)  # the greeting is text too
    header = json.loads(lines[0])
    assert header["turnfsm_trace"] == FORMAT_VERSION
    assert header["policy"] == policy.to_dict()


def test_replay_reproduces_every_step() -> None:
    trace, _ = record(keep_text=True)
    assert replay(trace, keep_text=True).steps == trace.steps
    assert replay(Trace.parse(trace.to_jsonl().splitlines()), keep_text=True) == trace


def test_replay_of_a_redacted_trace_reproduces_it() -> None:
    trace, _ = record()
    replayed = replay(trace, keep_text=True)  # its events are redacted already
    assert replayed.steps == trace.steps


def test_replay_with_default_options_reproduces_a_redacted_trace() -> None:
    trace, _ = record()
    assert replay(trace).steps == trace.steps


def test_replay_of_a_changed_trace_differs() -> None:
    """The comparison can fail: replaying under another policy gives other steps."""
    trace, _ = record()
    other = Trace(policy=TurnPolicy(direction="outbound", greeting="Hi"), steps=trace.steps)
    assert replay(other).steps != trace.steps


def test_transcripts_are_redacted_by_default() -> None:
    trace, effects = record()
    text = trace.to_jsonl()
    for secret in (SAID, REPLY, "Hello?", POLICY.tool_cap_fallback):
        assert secret not in text
    committed = trace.steps[10].event
    assert isinstance(committed, ev.UserTurnCommitted)
    assert committed.text == REDACTED  # not even the length shows
    assert committed.item_id == "u2"  # ids are not transcript text
    message = trace.steps[16].event
    assert isinstance(message, ev.AssistantMessageCommitted)
    assert message.text == REDACTED
    capped = trace.steps[13]
    (final,) = (e for e in capped.effects if isinstance(e, fx.FinalReplyWithoutTools))
    assert final.fallback_text == REDACTED
    # the effects the adapter executes are never redacted
    assert fx.FinalReplyWithoutTools(fallback_text=POLICY.tool_cap_fallback) in effects[13]


def test_text_is_kept_on_request() -> None:
    trace, _ = record(keep_text=True)
    text = trace.to_jsonl()
    for secret in (SAID, REPLY, POLICY.tool_cap_fallback):
        assert secret in text
    assert "redacted" not in text


def test_a_drops_measured_cut_survives_redaction_and_the_file() -> None:
    """The drop's lever reports the cut it made in lengths (issue 21): no text, so a
    redacted trace keeps them, and the call metrics read the cut from them."""
    controller = TurnController(POLICY)  # text redacted
    for event in CALL[:-2]:
        controller.handle(event)
    controller.handle(
        ev.EffectOutcome(
            at=7.2,
            effect="drop_unspoken_text",
            outcome="done",
            speech_id="s2",
            text_chars=len(REPLY),
            heard_chars=len(HEARD),
        )
    )
    assert controller.trace is not None
    read = Trace.parse(controller.trace.to_jsonl().splitlines())
    outcome = read.steps[-1].event
    assert isinstance(outcome, ev.EffectOutcome)
    assert (outcome.text_chars, outcome.heard_chars) == (len(REPLY), len(HEARD))
    metrics = call_metrics(read)
    assert (metrics.drops, metrics.dropped_chars, metrics.unmeasured_drops) == (
        1,
        len(REPLY) - len(HEARD),
        0,
    )


# -- malformed traces ----------------------------------------------------------------------


def good_lines() -> list[str]:
    trace, _ = record()
    return trace.to_jsonl().splitlines()


def step_line(**changes: object) -> str:
    step = json.loads(good_lines()[3])
    for key, value in changes.items():
        if key.startswith("event."):
            step["event"][key.removeprefix("event.")] = value
        elif value is None:
            del step[key]
        else:
            step[key] = value
    return json.dumps(step)


MALFORMED = {
    "not json": ("{not json", "line 3: "),
    "not an object": ("[1, 2]", "line 3: a line must be a JSON object"),
    "unknown event": (step_line(**{"event.name": "user_sneezed"}), "unknown event 'user_sneezed'"),
    "unknown field": (step_line(**{"event.volume": 11}), "has unknown fields ['volume']"),
    "bad field value": (step_line(**{"event.at": -1}), "at must be >= 0"),
    "bad enum value": (
        step_line(event={"name": "agent_speech_created", "at": 1.0, "source": "shout"}),
        "source",
    ),
    "time not a number": (step_line(at="soon"), "line 3: at must be the event's time"),
    "missing key": (step_line(before=None), "step is missing ['before']"),
    "effects not a list": (step_line(effects={}), "effects must be a list"),
    "state not a string": (step_line(after=3), "after must be a state id string"),
    "unknown effect": (step_line(effects=[{"name": "explode"}]), "unknown effect 'explode'"),
    "effect missing field": (step_line(effects=[{"name": "lock_speech"}]), "line 3: "),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_step_names_its_line(case: str) -> None:
    bad, message = MALFORMED[case]
    lines = good_lines()
    lines[2] = bad
    with pytest.raises(TraceFormatError, match=r"^line 3: ") as error:
        Trace.parse(lines)
    assert message in str(error.value)


def test_line_numbers_count_blank_lines() -> None:
    lines = good_lines()
    lines[1:1] = ["", "   "]
    lines[5] = "oops"
    with pytest.raises(TraceFormatError, match=r"^line 6: "):
        Trace.parse(lines)
    lines[5] = good_lines()[3]
    assert len(Trace.parse(lines)) == len(CALL)  # blank lines are skipped


def header(**changes: object) -> str:
    record = json.loads(good_lines()[0])
    record.update(changes)
    return json.dumps(record)


@pytest.mark.parametrize(
    ("first", "message"),
    [
        (None, "line 1: header: turnfsm_trace must be 1 or 2 or 3 or 4 or 5, got None"),  # a step
        (
            header(turnfsm_trace=6),
            "line 1: header: turnfsm_trace must be 1 or 2 or 3 or 4 or 5, got 6",
        ),
        (
            header(turnfsm_trace="1"),
            "line 1: header: turnfsm_trace must be 1 or 2 or 3 or 4 or 5, got '1'",
        ),
        (header(policy="outbound"), "line 1: header: policy must be an object"),
        (
            header(policy={**POLICY.to_dict(), "direction": "sideways"}),
            "line 1: direction must be one of",
        ),
        (header(policy={**POLICY.to_dict(), "tempo": 3}), "line 1: "),
    ],
)
def test_a_bad_header_is_line_one(first: str | None, message: str) -> None:
    lines = good_lines()
    lines = lines[1:] if first is None else [first, *lines[1:]]
    with pytest.raises(TraceFormatError) as error:
        Trace.parse(lines)
    assert str(error.value).startswith(message)


def test_an_empty_trace_has_no_header() -> None:
    with pytest.raises(TraceFormatError, match="^line 1: empty trace"):
        Trace.parse(["", "  "])


def test_read_reports_the_line_of_a_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join([*good_lines()[:4], "garbage"]) + "\n", encoding="utf-8")
    with pytest.raises(TraceFormatError, match="^line 5: "):
        Trace.read(path)
    assert issubclass(TraceFormatError, ValueError)


@pytest.mark.parametrize(
    "item",
    [
        ev.UserTranscript(at=1.0, text=SAID, is_final=False),
        ev.UserTurnCommitted(at=2.0, text=SAID, item_id="u1"),
        ev.AssistantMessageCommitted(at=3.0, speech_id="s1", text=REPLY, interrupted=True),
        fx.Say(text=REPLY, reason="reprompt"),
        fx.StartGreeting(text=REPLY, instructions=SAID, in_reply_to="u1"),
        fx.FinalReplyWithoutTools(fallback_text=HEARD),
    ],
)
def test_redaction_copies_an_event_or_effect_as_rebuilding_it_would(item: object) -> None:
    """An event's or effect's redaction is a copy with its texts replaced (not rebuilt:
    that cost more than the rest of a step): equal to the item built again with them."""
    redacted = redact(item)
    names = [name for name in ("text", "instructions", "fallback_text") if hasattr(item, name)]
    rebuilt = type(item)(**{**_fields(item), **dict.fromkeys(names, REDACTED)})
    assert redacted == rebuilt
    assert repr(redacted) == repr(rebuilt)
    assert hash(redacted) == hash(rebuilt)
    assert _fields(redact(item, keep_text=True)) == _fields(item)


def _fields(item: object) -> dict[str, object]:
    return attrs.asdict(item, recurse=False)  # type: ignore[arg-type]
