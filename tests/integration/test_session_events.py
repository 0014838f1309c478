"""Issue 21, point 5: every event LiveKit's ``AgentSession`` emits is either subscribed to
by the adapter (translated into machine events) or named in
:data:`~turnfsm.adapters.livekit.translate.IGNORED_SESSION_EVENTS` with why.

LiveKit lists its events in ``livekit.agents.voice.events.EventTypes``; the adapter's
subscriptions are read off a real session as :func:`attach` makes them, so an event a
new LiveKit adds, or one the adapter stops handling, fails here until it is translated
or its reason is given. The other way round, every machine event has its row in the
translator's table, so the table says where each comes from.
"""

from __future__ import annotations

from typing import Any, get_args

import pytest
from livekit.agents.voice.events import EventTypes

from turnfsm import TurnController, TurnPolicy
from turnfsm.adapters.livekit import attach, translate
from turnfsm.adapters.livekit.translate import IGNORED_SESSION_EVENTS
from turnfsm.adapters.sim import SimulatedCall
from turnfsm.events import EVENT_TYPES, TimerExpired

LIVEKIT_EVENTS = frozenset(get_args(EventTypes))


def subscribed_events(monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """The session events ``attach`` subscribes to."""
    session = SimulatedCall().build_session()
    names: set[str] = set()
    subscribe = session.on

    def recording_on(event: str, callback: Any = None) -> Any:
        names.add(event)
        return subscribe(event, callback)

    monkeypatch.setattr(session, "on", recording_on)
    attach(session, TurnController(TurnPolicy(first_speaker="user")))
    return names


async def test_every_livekit_session_event_is_translated_or_ignored_with_a_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    subscribed = subscribed_events(monkeypatch)
    assert subscribed <= LIVEKIT_EVENTS, "subscribed to events LiveKit does not emit"
    assert set(IGNORED_SESSION_EVENTS) <= LIVEKIT_EVENTS, "ignores events LiveKit lacks"
    assert not subscribed & set(IGNORED_SESSION_EVENTS), "both subscribed and ignored"
    unseen = sorted(LIVEKIT_EVENTS - subscribed - set(IGNORED_SESSION_EVENTS))
    assert not unseen, f"LiveKit events neither translated nor ignored with a reason: {unseen}"
    assert all(reason.strip() for reason in IGNORED_SESSION_EVENTS.values())


def test_every_machine_event_has_its_row_in_the_translators_table() -> None:
    table = translate.__doc__ or ""
    assert "the timer's ``*TimerExpired``" in table  # one row for every timer's expiry
    missing = [
        event.__name__
        for event in EVENT_TYPES
        if f"``{event.__name__}``" not in table and not issubclass(event, TimerExpired)
    ]
    assert not missing, f"machine events without a row in translate's table: {missing}"
