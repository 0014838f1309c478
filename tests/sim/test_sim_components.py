"""The simulated-call components driving a real LiveKit AgentSession (no turnfsm)."""

from __future__ import annotations

from turnfsm.adapters.sim import LINES, CallScript, ScriptedLLM, SimulatedCall, UserLine


def _user_states(call: SimulatedCall) -> list[tuple[float, str]]:
    return [(ev.at, ev.event.new_state) for ev in call.events_named("user_state_changed")]


async def test_silero_vad_detects_recorded_hello() -> None:
    hello = LINES["hello"]
    async with SimulatedCall(CallScript([UserLine(0.3, "hello")])) as call:
        speaking = await call.wait_for_event(
            "user_state_changed", lambda ev: ev.new_state == "speaking", timeout=3
        )
        listening = await call.wait_for_event(
            "user_state_changed",
            lambda ev: ev.new_state == "listening",
            timeout=3,
            after=speaking.at,
        )

    assert 0.3 <= speaking.at <= 0.3 + hello.duration
    # silero ends speech after 0.55 s of silence (its default min_silence_duration)
    line_end = 0.3 + hello.duration
    assert line_end + 0.4 <= listening.at <= line_end + 1.2


async def test_plain_session_answers_the_question_and_plays_the_reply() -> None:
    question = LINES["question"]
    reply = "We open at nine."
    llm_ = ScriptedLLM([reply])
    script = CallScript([UserLine(0.2, "question")])
    async with SimulatedCall(script, llm=llm_, text_output=True) as call:
        played = await call.wait_for_event(
            "agent_state_changed",
            lambda ev: ev.old_state == "speaking" and ev.new_state == "listening",
            timeout=8,
        )
        user_messages = call.messages("user")
        agent_messages = call.messages("assistant")
        segments = list(call.audio_output.segments)

    assert [m.text_content for m in user_messages] == [question.text]
    assert [m.text_content for m in agent_messages] == [reply]
    assert not agent_messages[0].interrupted
    assert [r.last_user_text for r in llm_.requests] == [question.text]
    assert call.text_output is not None
    assert call.text_output.segments == [reply]
    # the reply was played in real time, completely, and after the question ended
    assert len(segments) == 1
    segment = segments[0]
    assert segment.interrupted is False
    assert segment.played == segment.pushed
    assert abs(segment.pushed - call.tts.duration_of(reply)) < 0.05
    assert segment.started_at is not None
    assert segment.finished_at is not None
    assert segment.finished_at - segment.started_at >= segment.pushed - 0.02
    assert played.at > 0.2 + question.duration


async def test_detached_input_drops_the_callee_speech() -> None:
    question = LINES["question"]
    async with SimulatedCall(CallScript([UserLine(0.2, "question")])) as call:
        call.session.input.set_audio_enabled(False)
        await call.sleep_until(0.2 + question.duration + 0.6)

        (utterance,) = call.ledger.utterances_of("question")
        assert utterance.delivered_seconds == 0
        assert abs(utterance.dropped_seconds - question.duration) < 1e-6
        assert call.stt.transcripts == []
        assert call.events_named("user_input_transcribed") == []
        assert "speaking" not in [state for _, state in _user_states(call)]
        assert call.messages("user") == []
        assert call.llm.requests == []

        # attached again, the same input is heard
        call.session.input.set_audio_enabled(True)
        call.audio_input.say_now("hello")
        transcribed = await call.wait_for_event(
            "user_input_transcribed", lambda ev: ev.is_final, timeout=3
        )
    assert transcribed.event.transcript == LINES["hello"].text


async def test_stt_transcribes_only_the_tail_it_heard() -> None:
    line = LINES["who_is_this"]
    attach_at = 2.0  # seconds into the line: "... who is this? I was | not expecting ..."
    async with SimulatedCall(CallScript([UserLine(0.2, "who_is_this")])) as call:
        call.session.input.set_audio_enabled(False)
        await call.sleep_until(0.2 + attach_at)
        call.session.input.set_audio_enabled(True)
        committed = await call.wait_for_event(
            "conversation_item_added",
            lambda ev: ev.item.type == "message" and ev.item.role == "user",
            timeout=4,
        )

    (utterance,) = call.ledger.utterances_of("who_is_this")
    heard_from = utterance.delivered[0][0]
    assert abs(heard_from - attach_at) < 0.05
    expected = " ".join(w.text for w in line.word_timings if w.midpoint >= heard_from)
    assert [t.text for t in call.stt.transcripts] == [expected]
    assert expected == "not expecting a call today."
    # the fragment becomes an ordinary user turn
    assert committed.event.item.text_content == expected


async def test_barge_in_interrupts_playback() -> None:
    long_reply = (
        "Thank you for picking up. I am calling from the dental practice about your "
        "appointment next week, and I wanted to check a few details with you."
    )
    llm_ = ScriptedLLM([long_reply, "Sure, I will stop."], chars_per_second=400)
    async with SimulatedCall(llm=llm_) as call:
        call.session.generate_reply(instructions="greet")
        speaking = await call.wait_for_event(
            "agent_state_changed", lambda ev: ev.new_state == "speaking", timeout=3
        )
        await call.sleep_until(speaking.at + 0.5)
        call.audio_input.say_now("stop")
        await call.wait_until(
            lambda: bool(call.audio_output.segments) and call.audio_output.segments[0].finished,
            timeout=5,
        )
        first = call.audio_output.segments[0]

    assert first.interrupted is True
    assert 0.5 <= first.played < first.pushed - 2.0
    # the barge-in paused the output first (resume_false_interruption, pause capability)
    assert first.pauses >= 1


async def test_late_final_transcript_still_commits_the_turn() -> None:
    hello = LINES["hello"]
    async with SimulatedCall(CallScript([UserLine(0.3, "hello")]), final_lag=0.9) as call:
        final = await call.wait_for_event(
            "user_input_transcribed", lambda ev: ev.is_final, timeout=3
        )
        committed = await call.wait_for_event(
            "conversation_item_added",
            lambda ev: ev.item.type == "message" and ev.item.role == "user",
            timeout=2,
        )
        vad_end = await call.wait_for_event(
            "user_state_changed", lambda ev: ev.new_state == "listening", timeout=1
        )

    line_end = 0.3 + hello.duration
    assert 0.8 <= final.at - line_end <= 1.05
    # the VAD ended the speech first; the turn waited for the transcript
    assert vad_end.at < final.at <= committed.at
    assert committed.event.item.text_content == hello.text
