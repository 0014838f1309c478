"""The call timeline: one SVG with lanes, a time axis and a legend."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from turnfsm import Trace, TurnController, TurnPolicy
from turnfsm import events as ev
from turnfsm.effects import EFFECTS_BY_NAME
from turnfsm.tools.timeline import EFFECT_MARKERS, render_timeline

SVG = "{http://www.w3.org/2000/svg}"
LANES = ["FSM state", "User speech", "Agent speech", "Tool rounds", "Timers", "Effects"]


def _recorded_call() -> Trace:
    """An outbound call: a locked greeting with overlap, a tool round, a barge-in."""
    policy = TurnPolicy(
        direction="outbound",
        greeting="Hi, this is Ada from Acme.",
        greeting_lock="mute_input",
        idle_timeout=6.0,
        max_call_duration=300.0,
    )
    controller = TurnController(policy, strict=True)
    for event in (
        ev.CallRinging(at=100.0),
        ev.CallAnswered(at=102.0),
        ev.UserSpeechStarted(at=102.6),
        ev.UserSpeechEnded(at=103.1),
        ev.UserTurnCommitted(at=103.4, text="Hello?", item_id="u1"),
        ev.AgentSpeechCreated(at=103.5, speech_id="g", source="say"),
        ev.AgentSpeechStarted(at=103.7, speech_id="g"),
        ev.UserSpeechStarted(at=104.5),
        ev.UserSpeechEnded(at=105.0),
        ev.AgentSpeechEnded(at=106.2, speech_id="g", played_seconds=2.5),
        ev.UserTurnCommitted(at=108.6, text="What's my balance?", item_id="u2"),
        ev.AgentSpeechCreated(at=108.7, speech_id="r1"),
        ev.ToolStepStarted(at=109.0, speech_id="r1", calls=2),
        ev.ToolStepFinished(at=110.2, speech_id="r1", calls=2),
        ev.AgentSpeechStarted(at=110.5, speech_id="r1"),
        ev.UserSpeechStarted(at=112.0),
        ev.AgentSpeechEnded(at=112.3, speech_id="r1", interrupted=True, played_seconds=1.8),
        ev.AssistantMessageCommitted(at=112.3, speech_id="r1", text="Your", interrupted=True),
        ev.UserSpeechEnded(at=113.0),
        ev.CallEnded(at=115.5),
    ):
        controller.handle(event)
    assert controller.trace is not None
    return controller.trace


def _titles(root: ET.Element) -> list[str]:
    return [title.text or "" for title in root.iter(f"{SVG}title")]


def test_timeline_has_its_lanes_axis_and_legend() -> None:
    root = ET.fromstring(render_timeline(_recorded_call()))
    lanes = root.findall(f".//{SVG}g[@class='lane']")
    labels = [lane.find(f"{SVG}text[@class='lane-label']").text for lane in lanes]  # type: ignore[union-attr]
    assert labels == LANES
    assert root.get("data-duration") == "15.5"  # seconds since the first step

    axis = root.find(f".//{SVG}g[@class='axis']")
    assert axis is not None
    assert axis.get("data-start") == "0"
    assert float(axis.get("data-end", "0")) >= 15.5
    ticks = [
        float(tick.text or "") for tick in axis.iter(f"{SVG}text") if tick.get("class") == "tick"
    ]
    assert ticks[0] == 0
    assert ticks[-1] >= 15.5
    assert ticks == sorted(ticks)

    legend = root.find(f".//{SVG}g[@class='legend']")
    assert legend is not None
    entries = {text.text for text in legend.iter(f"{SVG}text")}
    assert {
        "locked greeting",
        "speech interrupted",
        "tool round",
        "mute input",
        "end call",
    } <= entries


def test_timeline_marks_speech_tools_and_effects() -> None:
    titles = _titles(ET.fromstring(render_timeline(_recorded_call())))
    assert "greeting (locked): 3.4–6.2 s" in titles
    assert "g (say) locked greeting, played: 3.7–6.2 s" in titles
    assert "r1 (reply) interrupted: 10.5–12.3 s" in titles
    assert "tool round, 2 calls: 9–10.2 s" in titles
    assert "user speaking: 2.6–3.1 s" in titles
    assert "committed turn at 3.4 s" in titles
    assert any(title.startswith("mute_input(hold_audio=True) at 3.4 s") for title in titles)
    assert any(title.startswith("end_call(reason='hangup') at 15.5 s") for title in titles)
    assert "start await_user timer, 8 s" in titles


def test_every_effect_has_a_marker() -> None:
    timers = {"start_timer", "cancel_timer"}  # drawn in the Timers lane
    assert set(EFFECTS_BY_NAME) - timers == set(EFFECT_MARKERS)


def test_timeline_is_deterministic_and_handles_an_empty_trace() -> None:
    trace = _recorded_call()
    assert render_timeline(trace) == render_timeline(trace)
    empty = ET.fromstring(render_timeline(Trace(policy=trace.policy)))
    assert len(empty.findall(f".//{SVG}g[@class='lane']")) == len(LANES)
