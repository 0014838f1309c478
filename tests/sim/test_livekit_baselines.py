"""Plain LiveKit 1.8.9 behaviour that turnfsm exists to fix, reproduced with the sim fakes.

Each ``test_baseline_*`` asserts what LiveKit does today, not what we want: if one starts
failing after a LiveKit upgrade, the problem it documents may be gone.
"""

from __future__ import annotations

from livekit.agents import Agent, function_tool, llm

from turnfsm.adapters.sim import LINES, CallScript, ScriptedLLM, SimulatedCall, UserLine


async def test_baseline_interrupt_commits_the_full_unspoken_text() -> None:
    """Without a TranscriptSynchronizer an interrupted reply is committed in full."""
    long_reply = (
        "Good morning, this is the clinic calling to confirm your appointment for Tuesday "
        "at ten, please let us know if that time still works for you."
    )
    llm_ = ScriptedLLM([long_reply], chars_per_second=2000)
    async with SimulatedCall(llm=llm_) as call:
        handle = call.session.generate_reply(instructions="greet")
        speaking = await call.wait_for_event(
            "agent_state_changed", lambda ev: ev.new_state == "speaking", timeout=3
        )
        await call.sleep_until(speaking.at + 1.0)
        await call.session.interrupt()
        await handle
        (message,) = call.messages("assistant")
        segment = call.audio_output.segments[0]

    assert handle.interrupted
    assert segment.interrupted is True
    assert segment.played < 1.5 < segment.pushed - 5.0
    assert message.interrupted is True
    assert message.text_content == long_reply  # although about 1 s of ~9 s was played


class _LookupAgent(Agent):
    def __init__(self) -> None:
        super().__init__(instructions="Look things up.")

    @function_tool
    async def lookup(self) -> str:
        """Look up the customer's appointment."""
        return "no appointment found"


async def test_baseline_max_tool_steps_allows_more_tool_rounds() -> None:
    """``max_tool_steps=1`` with a model that always calls a tool: 2 tool rounds, then
    one forced ``tool_choice="none"`` call."""
    llm_ = ScriptedLLM(["I could not find anything."], always_call_tool="lookup")
    async with SimulatedCall(
        agent=_LookupAgent(), llm=llm_, session_options={"max_tool_steps": 1}
    ) as call:
        handle = call.session.generate_reply(user_input="When is my appointment?")
        await handle
        await call.wait_until(lambda: bool(call.messages("assistant")), timeout=3)
        executed = call.events_named("function_tools_executed")

    tool_rounds = [r for r in llm_.requests if r.reply.tool_calls]
    assert len(tool_rounds) > 1
    assert [r.tool_choice for r in llm_.requests] == [None, "auto", "none"]
    assert len(executed) == 2
    assert [m.text_content for m in call.messages("assistant")] == ["I could not find anything."]


class _TurnRecordingAgent(Agent):
    def __init__(self) -> None:
        super().__init__(instructions="Greet.")
        self.completed_turns: list[str | None] = []

    async def on_user_turn_completed(
        self, turn_ctx: llm.ChatContext, new_message: llm.ChatMessage
    ) -> None:
        self.completed_turns.append(new_message.text_content)


async def test_baseline_turn_completed_during_locked_speech_is_dropped() -> None:
    """A turn that completes while uninterruptible speech plays is transcribed, then
    dropped: no user message, no ``on_user_turn_completed``, and its transcript is not
    carried into the next turn."""
    agent = _TurnRecordingAgent()
    script = CallScript([UserLine(0.2, "question")])
    turn_handling = {"interruption": {"discard_audio_if_uninterruptible": False}}
    async with SimulatedCall(script, agent=agent, turn_handling=turn_handling) as call:
        locked = call.session.say("x" * 60, allow_interruptions=False)  # 4 s of audio
        question_end = 0.2 + LINES["question"].duration
        await call.wait_for_event(
            "user_input_transcribed", lambda ev: ev.is_final, timeout=question_end + 1
        )
        await locked
        lock_end = call.now()
        assert lock_end > question_end + 1.0  # the turn had time to complete inside
        assert call.messages("user") == []
        assert agent.completed_turns == []

        call.audio_input.say_now("hello")
        committed = await call.wait_for_event(
            "conversation_item_added",
            lambda ev: ev.item.type == "message" and ev.item.role == "user",
            timeout=3,
        )

    assert committed.event.item.text_content == LINES["hello"].text
    assert agent.completed_turns == [LINES["hello"].text]
    assert call.llm.requests[0].last_user_text == LINES["hello"].text


async def test_baseline_speech_spilling_over_a_lock_becomes_a_fragment_turn() -> None:
    """Speech that starts during locked speech and goes on after it is transcribed only
    from the unlock on (the locked part reached the STT as silence) and committed as an
    ordinary turn that gets a reply."""
    question = LINES["question"]
    llm_ = ScriptedLLM(["Sorry, could you repeat that?"])
    async with SimulatedCall(CallScript([UserLine(0.2, "question")]), llm=llm_) as call:
        await call.session.say("x" * 18, allow_interruptions=False)  # 1.2 s of audio
        unlocked_at = call.now()
        committed = await call.wait_for_event(
            "conversation_item_added",
            lambda ev: ev.item.type == "message" and ev.item.role == "user",
            timeout=3,
        )
        await call.wait_until(lambda: bool(llm_.requests), timeout=1)

    assert 0.2 < unlocked_at < 0.2 + question.duration - 0.5
    fragment = committed.event.item.text_content
    assert fragment
    assert question.text.endswith(fragment)
    assert fragment != question.text
    assert not question.text.startswith(fragment.split()[0])
    assert [t.text for t in call.stt.transcripts] == [fragment]
    assert llm_.requests[0].last_user_text == fragment
