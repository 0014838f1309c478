"""Issue 23, point 1: the greeting's audio is synthesized while the call rings and plays
the moment the callee's turn commits; when it cannot be (not ready, failed, the agent's
own ``tts_node``), the live TTS says it, and the greeting's outcome says which.

Each call: answered at once, "Hello?" at ``HELLO_AT``, the locked greeting, under LiveKit's
default turn handling and the simulation's. The TTS takes ``FIRST_BYTE`` to its first
audio, a hosted TTS's usual delay.
"""

from __future__ import annotations

from collections.abc import AsyncIterable
from typing import Any

import pytest
from livekit.agents.voice.agent_session import SessionConnectOptions
from turncalls import (
    GREETING,
    FailingOnceTTS,
    ProviderFailingTTS,
    run_scenarios,
    turn_call,
    wait_segment,
)

from turnfsm import TurnPolicy
from turnfsm.adapters.livekit import TurnAgent
from turnfsm.adapters.livekit.prerender import PRERENDERED
from turnfsm.adapters.sim import CallScript, ScriptedTTS, UserLine

HELLO_AT = 2.0
FIRST_BYTE = 0.35
SETTINGS = ["livekit-defaults", "sim"]


class OwnVoiceAgent(TurnAgent):
    """An agent whose own ``tts_node`` shapes the audio: nothing may bypass it."""

    def tts_node(self, text: AsyncIterable[str], model_settings: Any) -> Any:
        return super().tts_node(text, model_settings)


def _greeting_outcome(tc: Any) -> Any:
    (outcome,) = [
        step.event for step in tc.events("effect_outcome") if step.event.effect == "start_greeting"
    ]
    return outcome


async def _greeted(
    settings: str,
    *,
    hello_at: float = HELLO_AT,
    tts: ScriptedTTS | None = None,
    agent: Any = None,
    **call_options: Any,
) -> tuple[Any, Any, float]:
    """Run the call until the greeting played whole: the call, its first segment, and the
    time from the callee's turn commit to the greeting's first frame. ``call_options``:
    further :func:`turn_call` arguments."""
    policy = TurnPolicy(direction="outbound", greeting=GREETING)
    tts = tts or ScriptedTTS(synthesis_delay=FIRST_BYTE)
    script = CallScript([UserLine(hello_at, "hello")])
    async with turn_call(
        policy, script, settings=settings, tts=tts, agent=agent, **call_options
    ) as tc:
        greeting = await wait_segment(tc.call, 0, timeout=hello_at + 12, finished=True)
        context = tc.describe()
        # the step that took the callee's first words (their final transcript)
        (committed,) = [step for step in tc.steps if step.before != step.after == "greeting"]
        assert greeting.interrupted is False, context
        assert greeting.played == greeting.pushed, context
        assert greeting.pushed == pytest.approx(tts.duration_of(GREETING), abs=0.05), context
        assert tc.texts("user") == ["Hello?"], context
        assert tc.texts("assistant") == [GREETING], context
        return tc, _greeting_outcome(tc), tc.segment_start(greeting) - tc.at(committed)


async def _ready_before_hello(settings: str) -> None:
    tc, outcome, delay = await _greeted(settings)
    context = tc.describe()
    assert (outcome.outcome, outcome.detail) == ("done", PRERENDERED), context
    assert delay <= 0.03, f"first greeting frame {delay * 1000:.0f} ms after the commit\n{context}"
    assert tc.call.tts.texts == [GREETING], context  # synthesized once, while it rang


async def _hello_before_it_is_ready(settings: str) -> None:
    slow = ScriptedTTS(synthesis_delay=3.0)  # the callee answers faster than it renders
    tc, outcome, delay = await _greeted(settings, hello_at=0.3, tts=slow)
    context = tc.describe()
    assert outcome.detail == "audio: live TTS, pre-rendering not done in time", context
    assert delay >= 3.0, context  # the live TTS's own first byte
    assert tc.call.tts.texts == [GREETING, GREETING], context


async def _pre_rendering_fails(settings: str) -> None:
    tc, outcome, delay = await _greeted(settings, tts=FailingOnceTTS(synthesis_delay=FIRST_BYTE))
    context = tc.describe()
    assert outcome.detail == "audio: live TTS, pre-rendering failed", context
    assert delay >= FIRST_BYTE, context


async def _provider_error_is_not_the_sessions(settings: str) -> None:
    """The provider fails the rendering's request. LiveKit would retry it and report each
    failure on the TTS, where the session counts it against ``max_unrecoverable_errors``
    (none allowed here: one would close the call). A rendering tries once and keeps its
    failure to itself: the session sees no error, and the live TTS says the greeting."""
    errors: list[Any] = []
    tc, outcome, delay = await _greeted(
        settings,
        tts=ProviderFailingTTS(GREETING, synthesis_delay=FIRST_BYTE),
        before_start=lambda session: session.on("error", errors.append),
        session_options={"conn_options": SessionConnectOptions(max_unrecoverable_errors=0)},
    )
    context = tc.describe()
    assert outcome.detail == "audio: live TTS, pre-rendering failed", context
    assert delay >= FIRST_BYTE, context
    assert errors == [], context
    assert tc.call.tts.texts == [GREETING, GREETING], context  # the rendering, the live one


async def _own_tts_node(settings: str) -> None:
    agent = OwnVoiceAgent(instructions="You are on a call.")
    tc, outcome, delay = await _greeted(settings, agent=agent)
    context = tc.describe()
    assert outcome.detail == "audio: live TTS, not pre-rendered", context
    assert delay >= FIRST_BYTE, context
    assert tc.call.tts.texts == [GREETING], context  # nothing rendered ahead


async def test_the_greeting_plays_pre_rendered_or_live_and_says_which() -> None:
    await run_scenarios(
        {
            f"{name}/{settings}": scenario(settings)
            for settings in SETTINGS
            for name, scenario in {
                "ready before hello": _ready_before_hello,
                "hello before it is ready": _hello_before_it_is_ready,
                "pre-rendering fails": _pre_rendering_fails,
                "a provider error is not the session's": _provider_error_is_not_the_sessions,
                "own tts_node": _own_tts_node,
            }.items()
        }
    )
