"""Issue 3, point 4: what an interrupted reply leaves in the chat context.

Interrupted by ``session.interrupt()`` or by the callee's barge-in (``stop``), with a
``TranscriptSynchronizer`` in the output chain, with a plain text output, and with no
text output: ``interrupted_text="spoken"`` keeps the spoken prefix (within one word of
what was played), ``"drop"`` keeps nothing of that reply, ``"keep"`` the full text; the
agent's ``chat_ctx`` and ``session.history`` always agree.

Plain LiveKit commits the full text without a synchronizer and the synchronized prefix
with one (see ``tests/sim/test_livekit_baselines.py``).
"""

from __future__ import annotations

import pytest
from turncalls import run_scenarios, turn_call, wait_segment

from turnfsm import TurnPolicy
from turnfsm.adapters.sim import LINES, CallScript, ScriptedLLM, UserLine

LONG_REPLY = (
    "Good morning, this is the clinic calling to confirm your appointment for Tuesday "
    "at ten, please let us know if that time still works for you."
)
AFTER_STOP = "Okay, I stopped."
CHAINS = {
    "synchronizer": {"transcript_sync": True},
    "text-output": {"text_output": True},
    "no-text-output": {},
}


def _words_heard(text: str, played: float, pushed: float) -> int:
    """Words of ``text`` whose every character was played: the scripted TTS renders
    characters at a constant rate, so the played share of the audio is that of the text."""
    heard_chars = len(text) * played / pushed
    count, end = 0, 0
    for word in text.split(" "):
        end += len(word)
        if end > heard_chars:
            break
        count += 1
        end += 1
    return count


def _assistant_texts(items: list) -> list[str]:
    return [
        m.text_content or ""
        for m in items
        if getattr(m, "type", None) == "message" and m.role == "assistant"
    ]


async def _interrupted_reply(trigger: str, chain: str, keep: str) -> None:
    policy = TurnPolicy(direction="inbound", first_speaker="user", interrupted_text=keep)
    llm = ScriptedLLM([LONG_REPLY, AFTER_STOP], chars_per_second=1000)
    script = CallScript([UserLine(0.3, "question")])
    async with turn_call(policy, script, llm=llm, **CHAINS[chain]) as tc:
        call = tc.call
        assert call.tts.chars_per_second * call.tts.duration_of(LONG_REPLY) == len(LONG_REPLY)
        segment = await wait_segment(call, 0, timeout=LINES["question"].duration + 3)
        reply_start = tc.segment_start(segment)
        if trigger == "interrupt":
            await call.sleep_until(reply_start + 1.5)
            await call.session.interrupt()
        else:
            await call.sleep_until(reply_start + 1.0)
            call.audio_input.say_now("stop")
        await call.wait_until(lambda: segment.finished, timeout=3)
        if trigger == "barge-in":  # the callee's "stop" is answered; wait for all of it
            await wait_segment(call, 1, timeout=LINES["stop"].duration + 4, finished=True)
        await call.wait_until(lambda: tc.controller.state == "listening", timeout=1)
        await call.sleep_until(call.now() + 0.3)  # chat context updates land
        context = tc.describe()

        assert segment.interrupted is True, context
        assert 1.0 <= segment.played <= 2.6, context
        assert segment.pushed > segment.played + 5.0, context
        expected_words = _words_heard(LONG_REPLY, segment.played, segment.pushed)
        assert expected_words >= 3, context

        history = _assistant_texts(call.session.history.items)
        agent_context = _assistant_texts(call.agent.chat_ctx.items)
        assert history == agent_context, context
        later = [AFTER_STOP] if trigger == "barge-in" else []
        if keep == "keep":
            assert history == [LONG_REPLY, *later], context
        elif keep == "drop":
            assert history == later, context
        else:
            committed = history[0]
            assert history == [committed, *later], context
            assert LONG_REPLY.startswith(committed), context
            assert LONG_REPLY[len(committed) : len(committed) + 1] in ("", " "), context
            words = len(committed.split())
            assert abs(words - expected_words) <= 1, (
                f"{committed!r}: {words} words, {expected_words} heard\n{context}"
            )
            (message,) = [m for m in call.messages("assistant") if m.text_content == committed]
            assert message.interrupted, context


@pytest.mark.parametrize("trigger", ["interrupt", "barge-in"])
async def test_interrupted_reply_keeps_what_the_policy_says(trigger: str) -> None:
    await run_scenarios(
        {
            f"{chain}/{keep}": _interrupted_reply(trigger, chain, keep)
            for chain in CHAINS
            for keep in ("spoken", "drop", "keep")
        }
    )
