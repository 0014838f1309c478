"""Issue 3, point 4: what an interrupted reply leaves in the chat context.

Interrupted by ``session.interrupt()`` or by the callee's barge-in (``stop``), with a
``TranscriptSynchronizer`` in the output chain, with a plain text output, and with no
text output: ``interrupted_text="spoken"`` keeps the spoken prefix (within one word of
what was played), ``"drop"`` keeps nothing of that reply, ``"keep"`` the full text; the
agent's ``chat_ctx`` and ``session.history`` always agree, and the drop's outcome tells
the cut it made in lengths (``text_chars``, ``heard_chars``), which the call metrics
read (``dropped_chars``).

Plain LiveKit commits the full text without a synchronizer (see
``tests/sim/test_livekit_baselines.py``) and the synchronized prefix with one. A slow TTS
(audio not all pushed when the reply is cut) must not make the spoken prefix longer.
"""

from __future__ import annotations

import pytest
from turncalls import SETTING_ROWS, run_scenarios, turn_call, wait_segment

from turnfsm import TurnPolicy
from turnfsm.adapters.sim import LINES, CallScript, ScriptedLLM, ScriptedTTS, UserLine
from turnfsm.tools.metrics import metrics_of

LONG_REPLY = (
    "Good morning, this is the clinic calling to confirm your appointment for Tuesday "
    "at ten, please let us know if that time still works for you."
)
SENTENCES = (
    "Good morning, this is the clinic. We are calling about your visit on Tuesday. "
    "Please call us back when you can."
)
"""Three sentences: LiveKit synthesizes them one by one (a non-streaming TTS behind its
sentence tokenizer). With a slow TTS (0.5 s to first audio, then audio at 1.3 times real
time) the reply is cut while the audio of its first sentence is still coming; so is
the one-sentence reply."""
AFTER_STOP = "Okay, I stopped."
QUESTION = LINES["question"].text
CHAINS = {
    "synchronizer": {"transcript_sync": True},
    "text-output": {"text_output": True, "transcript_sync": False},
    "no-text-output": {"transcript_sync": False},
}


def _words_heard(text: str, played: float, chars_per_second: float) -> int:
    """Words of ``text`` whose every character was played: the scripted TTS renders
    ``chars_per_second`` characters a second (sentences one after the other)."""
    heard_chars = played * chars_per_second
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


async def _interrupted_reply(
    trigger: str,
    chain: str,
    keep: str,
    settings: str,
    *,
    reply: str = LONG_REPLY,
    slow_tts: bool = False,
) -> None:
    policy = TurnPolicy(direction="inbound", first_speaker="user", interrupted_text=keep)
    llm = ScriptedLLM(
        lambda request: reply if request.last_user_text == QUESTION else AFTER_STOP,
        chars_per_second=1000,
    )
    tts = ScriptedTTS(synthesis_delay=0.5, stream_pace=1.3) if slow_tts else ScriptedTTS()
    script = CallScript([UserLine(0.3, "question")])
    options = CHAINS[chain]
    async with turn_call(policy, script, llm=llm, tts=tts, settings=settings, **options) as tc:
        call = tc.call
        segment = await wait_segment(call, 0, timeout=LINES["question"].duration + 4)
        reply_start = tc.segment_start(segment)
        if trigger == "interrupt":
            await call.sleep_until(reply_start + 1.5)
            pushed_at_interrupt = segment.pushed
            await call.session.interrupt()
        else:
            await call.sleep_until(reply_start + 1.0)
            call.audio_input.say_now("stop")
        await call.wait_until(lambda: segment.finished, timeout=4)
        if trigger == "barge-in":  # the callee's "stop" is answered; wait for all of it
            await call.wait_until(
                lambda: AFTER_STOP in _assistant_texts(call.session.history.items),
                timeout=LINES["stop"].duration + 5,
            )
        await call.wait_until(lambda: tc.controller.state == "listening", timeout=2)
        await call.sleep_until(call.now() + 0.3)  # chat context updates land
        context = tc.describe()

        assert segment.interrupted is True, context
        assert 0.6 <= segment.played <= 3.0, context  # cut mid-reply (a late TTS underruns)
        if slow_tts:  # the reply's audio was not all there when it was cut
            assert pushed_at_interrupt < tts.duration_of(reply) - 1.0, context
        assert segment.played < tts.duration_of(reply) - 4.0, context  # most of it unsaid
        expected_words = _words_heard(reply, segment.played, tts.chars_per_second)
        assert expected_words >= 2, context

        history = _assistant_texts(call.session.history.items)
        agent_context = _assistant_texts(call.agent.chat_ctx.items)
        assert history == agent_context, context
        # what is left of the interrupted reply (the answers to "stop" aside)
        left = [text for text in history if not AFTER_STOP.startswith(text)]
        if keep == "keep":
            assert left == [reply], context
        elif keep == "drop":
            assert left == [], context
        else:
            assert len(left) == 1, context
            committed = left[0]
            assert reply.startswith(committed), context
            assert reply[len(committed) : len(committed) + 1] in ("", " "), context
            words = len(committed.split())
            assert abs(words - expected_words) <= 1, (
                f"{committed!r}: {words} words, {expected_words} heard\n{context}"
            )
            (message,) = [m for m in call.messages("assistant") if m.text_content == committed]
            assert message.interrupted, context
        if keep != "keep":  # the lever's outcome measured the cut it made, lengths only
            kept = left[0] if left else ""
            (cut,) = [
                s.event
                for s in tc.events("effect_outcome")
                if s.event.effect == "drop_unspoken_text" and s.event.outcome == "done"
            ]
            assert (cut.text_chars, cut.heard_chars) == (len(reply), len(kept)), context
            assert tc.controller.trace is not None
            metrics = metrics_of(policy, tc.controller.trace.steps)
            assert (metrics.dropped_chars, metrics.unmeasured_drops) == (
                len(reply) - len(kept),
                0,
            ), context


@pytest.mark.parametrize("settings", SETTING_ROWS)
@pytest.mark.parametrize("trigger", ["interrupt", "barge-in"])
async def test_interrupted_reply_keeps_what_the_policy_says(trigger: str, settings: str) -> None:
    scenarios = {
        f"{chain}/{keep}": _interrupted_reply(trigger, chain, keep, settings)
        for chain in CHAINS
        for keep in ("spoken", "drop", "keep")
    }
    if trigger == "interrupt" and settings == "sim":  # the TTS's pace is no LiveKit setting
        scenarios.update(
            {
                f"slow-tts/{name}/{chain}/spoken": _interrupted_reply(
                    trigger, chain, "spoken", settings, reply=reply, slow_tts=True
                )
                for name, reply in (("sentences", SENTENCES), ("one-sentence", LONG_REPLY))
                for chain in CHAINS
            }
        )
    await run_scenarios(scenarios)
