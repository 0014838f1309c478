"""Issue 23, point 1: the idle re-prompt and the tool-cap fallback are synthesized ahead,
as the greeting is (tests/integration/test_prerendered_greeting.py): the re-prompt after
it, one TTS request at a time, the fallback at the cap, while the model answers; each plays
from memory the moment the machine says it, or with the live TTS when its rendering
failed or is not done yet, and its ``Say`` outcome says which.

The TTS takes ``FIRST_BYTE`` (a hosted TTS's usual delay) to its first audio, or far
longer where a rendering must still be running when the text is said; a text that plays
pre-rendered reaches the output in the step that said it, one said live a first byte
later. Under LiveKit's default turn handling and the simulation's.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from turncalls import (
    GREETING,
    FailingOnceTTS,
    LookupAgent,
    TurnCall,
    run_scenarios,
    turn_call,
)

from turnfsm import TurnPolicy
from turnfsm import effects as fx
from turnfsm.adapters.livekit import TurnAgent
from turnfsm.adapters.livekit.prerender import PRERENDERED
from turnfsm.adapters.sim import LINES, CallScript, ScriptedLLM, ScriptedTTS, UserLine

FIRST_BYTE = 0.35
SETTINGS = ["livekit-defaults", "sim"]
EPS = 1e-6
"""Float sums on the virtual clock: a first byte of 0.35 s measures 0.35 - 1e-12."""
FROM_MEMORY = 0.005
"""A pre-rendered text's first frame leaves within this of the step that said it."""
NOT_READY = "audio: live TTS, pre-rendering not done in time"
FAILED = "audio: live TTS, pre-rendering failed"
FINAL = "I could not find anything."
MODEL_FIRST_TOKEN = 1.0
"""A hosted model's time to its first token."""


class TimedTTS(ScriptedTTS):
    """Records when each text was asked for (loop time), in order."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.asked: list[tuple[float, str]] = []

    def synthesize(self, text: str, **options: Any) -> Any:
        self.asked.append((asyncio.get_running_loop().time(), text))
        return super().synthesize(text, **options)


def _said(tc: TurnCall, reason: str) -> list[tuple[float, str]]:
    """Each ``Say`` of ``reason``: the call time of the step that emitted it, and its
    outcome's detail (the adapter reports one outcome per ``Say``, in order)."""
    steps = [s for s in tc.steps if any(getattr(e, "reason", None) == reason for e in s.effects)]
    outcomes = [s.event for s in tc.events("effect_outcome") if s.event.effect == "say"]
    assert len(outcomes) == len(steps), tc.describe()
    return [(tc.at(step), outcome.detail) for step, outcome in zip(steps, outcomes, strict=True)]


def _heard_whole(tc: TurnCall, index: int, text: str) -> float:
    """Playout segment ``index`` is ``text`` played whole: its start, in call time. (The
    live TTS gets a text sentence by sentence, the spaces between them dropped.)"""
    segment = tc.call.audio_output.segments[index]
    context = tc.describe()
    assert segment.interrupted is False, context
    assert segment.played == segment.pushed, context
    assert segment.pushed == pytest.approx(tc.call.tts.duration_of(text), abs=0.1), context
    return tc.segment_start(segment)


# -- the idle re-prompt ----------------------------------------------------------------------


def _silent_caller(idle: float, reprompts: int) -> TurnPolicy:
    return TurnPolicy(
        direction="inbound", first_speaker="user", idle_timeout=idle, idle_max_reprompts=reprompts
    )


async def _reprompt_not_ready_then_ready(settings: str) -> None:
    """A caller silent from the start; the TTS takes 3 s, so the first re-prompt (1 s in)
    comes before its rendering is done: said live; the second plays from memory."""
    policy = _silent_caller(1.0, reprompts=2)
    tts = ScriptedTTS(synthesis_delay=3.0)
    async with turn_call(policy, (), settings=settings, tts=tts) as tc:
        await tc.segment_played(1, timeout=12)
        context = tc.describe()
        (first, not_ready), (second, ready) = _said(tc, "reprompt")
        assert (not_ready, ready) == (NOT_READY, PRERENDERED), context
        assert _heard_whole(tc, 0, policy.idle_message) - first >= 3.0 - EPS, (
            context
        )  # the live TTS
        assert _heard_whole(tc, 1, policy.idle_message) - second < FROM_MEMORY, context
        # rendered once as the call started, and once more by the live TTS
        assert tts.texts == [policy.idle_message, policy.idle_message], context


async def _reprompt_rendering_fails(settings: str) -> None:
    policy = _silent_caller(1.0, reprompts=1)
    tts = FailingOnceTTS(policy.idle_message, synthesis_delay=FIRST_BYTE)
    async with turn_call(policy, (), settings=settings, tts=tts) as tc:
        await tc.segment_played(0, timeout=6)
        context = tc.describe()
        ((said, detail),) = _said(tc, "reprompt")
        assert detail == FAILED, context
        assert _heard_whole(tc, 0, policy.idle_message) - said >= FIRST_BYTE - EPS, context
        assert tts.texts == [policy.idle_message], context  # the live one (the failed raised)


async def _rendered_after_the_greeting(settings: str) -> None:
    """An outbound call whose callee does not speak yet: the greeting is rendered first,
    then the re-prompt, asked for once the greeting's is done: never two TTS requests at
    a time. The agent has tools; the fallback waits for the cap."""
    policy = TurnPolicy(direction="outbound", greeting=GREETING, idle_timeout=5.0)
    tts = TimedTTS(synthesis_delay=FIRST_BYTE)
    async with turn_call(policy, (), settings=settings, tts=tts, agent=LookupAgent()) as tc:
        await tc.call.wait_until(lambda: len(tts.asked) == 2, timeout=3)
        await tc.call.sleep_until(tc.now() + 1.0)
        context = tc.describe()
        texts = [text for _, text in tts.asked]
        assert texts == [GREETING, policy.idle_message], context
        times = [at for at, _ in tts.asked]
        assert times[1] - times[0] >= FIRST_BYTE - EPS, context


async def test_the_reprompt_plays_pre_rendered_or_live_and_says_which() -> None:
    await run_scenarios(
        {
            f"{name}/{settings}": scenario(settings)
            for settings in SETTINGS
            for name, scenario in {
                "not ready, then ready": _reprompt_not_ready_then_ready,
                "rendering fails": _reprompt_rendering_fails,
                "rendered after the greeting": _rendered_after_the_greeting,
            }.items()
        }
    )


# -- the tool-cap fallback -----------------------------------------------------------------


async def _fallback_call(
    settings: str, tts: ScriptedTTS, *, agent: TurnAgent | None = None, **llm_options: Any
) -> tuple[TurnCall, float, str]:
    """The question; a model that calls the tool in every round, ``tool_choice="none"``
    too, so the final reply plays nothing and the fallback is said. The model takes a
    hosted model's time to its first token (``MODEL_FIRST_TOKEN``) unless ``llm_options``
    say otherwise. Returns the call, the delay from the step that said the fallback to its
    first frame, and its outcome."""
    policy = TurnPolicy(direction="inbound", first_speaker="user", max_tool_steps=1)
    llm_options = {"time_to_first_token": MODEL_FIRST_TOKEN, **llm_options}
    llm = ScriptedLLM([FINAL], always_call_tool="lookup", ignore_tool_choice=True, **llm_options)
    script = CallScript([UserLine(0.3, "question")])
    agent = agent if agent is not None else LookupAgent()
    async with turn_call(policy, script, settings=settings, tts=tts, agent=agent, llm=llm) as tc:
        await tc.segment_played(0, timeout=LINES["question"].duration + 16)
        context = tc.describe()
        ((said, detail),) = _said(tc, "tool_fallback")
        assert len(tc.effects(fx.FinalReplyWithoutTools)) == 1, context
        assert len(tc.call.audio_output.segments) == 1, context
        return tc, _heard_whole(tc, 0, policy.tool_cap_fallback) - said, detail


async def _fallback_ready(settings: str) -> None:
    """Rendered as the machine asks for the final reply without tools, ready before that
    reply (a model round) has said nothing."""
    tts = TimedTTS(synthesis_delay=FIRST_BYTE)
    tc, delay, detail = await _fallback_call(settings, tts)
    context = tc.describe()
    assert (detail, delay < FROM_MEMORY) == (PRERENDERED, True), context
    ((asked, text),) = tts.asked  # once, ahead
    assert text == tc.controller.policy.tool_cap_fallback, context
    (capped,) = [
        s for s in tc.steps if any(isinstance(e, fx.FinalReplyWithoutTools) for e in s.effects)
    ]
    assert tc.call_time(asked) == pytest.approx(tc.at(capped), abs=0.001), context


async def _fallback_rendering_fails(settings: str) -> None:
    tts = FailingOnceTTS(TurnPolicy().tool_cap_fallback, synthesis_delay=FIRST_BYTE)
    tc, delay, detail = await _fallback_call(settings, tts)
    context = tc.describe()
    assert (detail, delay >= FIRST_BYTE - EPS) == (FAILED, True), context
    # only the live TTS's requests (the failed one raised), sentence by sentence
    assert " ".join(tts.texts) == tc.controller.policy.tool_cap_fallback, context


async def _fallback_not_ready(settings: str) -> None:
    """The TTS takes 5 s: the cap is reached and the fallback said (3.3 s into the call)
    before it rendered."""
    tts = ScriptedTTS(synthesis_delay=5.0)
    tc, delay, detail = await _fallback_call(settings, tts)
    context = tc.describe()
    assert (detail, delay >= 5.0 - EPS) == (NOT_READY, True), context
    fallback = tc.controller.policy.tool_cap_fallback
    # rendered whole at the cap, then said live, sentence by sentence
    assert tts.texts[0] == fallback, context
    assert " ".join(tts.texts[1:]) == fallback, context


async def test_the_tool_cap_fallback_plays_pre_rendered_or_live_and_says_which() -> None:
    await run_scenarios(
        {
            f"{name}/{settings}": scenario(settings)
            for settings in SETTINGS
            for name, scenario in {
                "ready": _fallback_ready,
                "rendering fails": _fallback_rendering_fails,
                "not ready": _fallback_not_ready,
            }.items()
        }
    )
