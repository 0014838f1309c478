"""Issue 9, point 2: the outbound guarantees hold whatever shape the agent has.

Every call runs under LiveKit's default turn handling (preemptive generation on, a
transcript synchronizer in the output chain): the callee answers, says "Hello?" at 1 s,
hears the whole greeting, then asks a question that must be answered (a deaf agent
fails). Checked on the recorded output audio (no agent audio frame before the greeting's,
the greeting played whole) and on the history ("Hello?", then the greeting, then the
question and its answer), for:

* an agent that asks for a reply (``generate_reply``) or says something (``say``) in
  ``on_enter``, LiveKit's basic-agent pattern: the speech is interrupted before LiveKit
  schedules it, the model is not asked, and the agent's mistake is reported once (under
  ``strict``, ``session.start`` raises it: tests/integration/test_livekit_flows.py);
* an agent overriding ``llm_node`` (and ``on_user_turn_completed``) without ``super()``:
  the turnfsm hooks still run first;
 (an agent whose ``on_user_turn_completed`` stops the reply to "Hello?": the greeting is
  said anyway, tests/integration/test_outcome_greeting_retry.py);
* an agent that says a filler in ``on_user_turn_completed`` (for slow lookups): on the
  callee's "Hello?" the filler is stopped before it plays (nothing comes before the
  greeting) and the greeting is still LiveKit's reply, locked: the callee talking over
  it does not cut it; later turns get their filler;
* a plain ``Agent`` on a call where the agent speaks first (no reply to replace);
* a handoff (``session.update_agent``) in every state of the call: ringing, awaiting the
  callee, during the greeting, listening, speaking, and a tool returning a new agent in
  the tool loop; and to a plain ``Agent`` once the callee was greeted.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from livekit.agents import Agent, function_tool, llm
from turncalls import GREETING, TurnCall, run_scenarios, turn_call, wait_segment

from turnfsm import TurnPolicy
from turnfsm import effects as fx
from turnfsm.adapters.livekit import TurnAgent
from turnfsm.adapters.sim import (
    LINES,
    CallScript,
    LLMRequest,
    ScriptedLLM,
    ScriptedReply,
    ScriptedToolCall,
    UserLine,
)
from turnfsm.events import CallAnswered
from turnfsm.machine import STATES

HELLO_AT = 1.0
QUESTION = LINES["question"].text
ANSWER = "We open at nine."
OWN_TEXT = "This is my own reply."
HANDED_OVER = "You are talking to the second agent now."
QUESTION_AFTER_GREETING = 1.0
"""The callee asks this long after the greeting ended."""


def _model(request: LLMRequest) -> ScriptedReply:
    last = request.chat_ctx.items[-1]
    if last.type == "function_call_output":
        return ScriptedReply(text=ANSWER)
    if request.last_user_text == QUESTION:
        if "lookup" in request.tool_names:
            return ScriptedReply(tool_calls=(ScriptedToolCall("lookup"),))
        return ScriptedReply(text=ANSWER)
    return ScriptedReply(text="Sorry, what was that?")


class Second(TurnAgent):
    """The agent handed over to."""

    def __init__(self) -> None:
        super().__init__(instructions="You are the second agent.")


class PlainSecond(Agent):
    """A plain ``Agent`` handed over to after the greeting (turns then reach the machine
    from the history, not from its hook)."""

    def __init__(self) -> None:
        super().__init__(instructions="You are the second agent.")


class ReplyOnEnter(TurnAgent):
    async def on_enter(self) -> None:
        self.session.generate_reply(instructions="Greet the user.")


class SayOnEnter(TurnAgent):
    async def on_enter(self) -> None:
        self.session.say("Hello, hello, can you hear me? This is Ada from Acme.")


class OwnNodes(TurnAgent):
    """Overrides ``llm_node`` and ``on_user_turn_completed``, never calling ``super()``."""

    async def on_user_turn_completed(
        self, turn_ctx: llm.ChatContext, new_message: llm.ChatMessage
    ) -> None:
        turn_ctx.add_message(role="system", content="Be brief.")

    async def llm_node(self, chat_ctx: llm.ChatContext, tools: Any, model_settings: Any) -> Any:
        async def own() -> AsyncIterator[str]:
            asked = any(
                isinstance(item, llm.ChatMessage) and item.text_content == QUESTION
                for item in chat_ctx.items
            )
            yield ANSWER if asked else OWN_TEXT

        return own()


FILLER = "One moment."


class SaysAFiller(TurnAgent):
    """Says a filler while each turn's reply is prepared."""

    async def on_user_turn_completed(
        self, turn_ctx: llm.ChatContext, new_message: llm.ChatMessage
    ) -> None:
        self.session.say(FILLER)


class HandsOverInTool(TurnAgent):
    @function_tool
    async def lookup(self) -> Any:
        """Look up the opening hours."""
        await asyncio.sleep(0.5)
        return Second(), "We open at nine."


def _outbound(**options: Any) -> TurnPolicy:
    return TurnPolicy(direction="outbound", greeting=GREETING, **options)


def _history(tc: TurnCall) -> list[tuple[str, str | None]]:
    return [(m.role, m.text_content) for m in tc.call.messages()]


async def _greeted_then_answered(
    tc: TurnCall, *, hello: bool = True, during: Callable[[], Any] | None = None
) -> None:
    """Wait for the greeting to play, ask the question after it, wait for the answer;
    check what reached the caller."""
    call = tc.call
    await call.wait_until(lambda: GREETING in call.tts.texts, timeout=HELLO_AT + 6)
    greeting_index = call.tts.texts.index(GREETING)
    greeting = await wait_segment(call, 0, timeout=4)
    if during is not None:
        during()
    await call.wait_until(lambda: greeting.finished, timeout=8)
    assert greeting.finished_at is not None
    await call.sleep_until(tc.call_time(greeting.finished_at) + QUESTION_AFTER_GREETING)
    call.audio_input.say_now("question")
    try:
        await call.wait_until(
            lambda: ANSWER in [m.text_content for m in call.messages("assistant")],
            timeout=LINES["question"].duration + 6,
        )
        await call.wait_until(lambda: call.audio_output.segments[-1].finished, timeout=4)
        await call.wait_until(lambda: tc.controller.state == "listening", timeout=2)
    except TimeoutError as error:
        raise AssertionError(f"{error}\n{tc.describe()}") from None
    context = tc.describe()

    # no agent audio before the greeting's: the first segment is the greeting, whole
    assert greeting_index == 0, f"{call.tts.texts}\n{context}"
    segments = call.audio_output.segments
    assert abs(segments[0].pushed - call.tts.duration_of(GREETING)) < 0.05, context
    assert segments[0].interrupted is False, context
    assert segments[0].played == segments[0].pushed, context
    if hello:
        hello_end = HELLO_AT + LINES["hello"].duration
        assert min(tc.call_time(s.captured_at) for s in segments) > hello_end, context
    # the question is answered: nobody is deaf
    assert segments[-1].interrupted is False, context
    assert tc.controller.state == "listening", context
    assert tc.adapter.outcomes.counts == {}, context
    head = [("user", LINES["hello"].text)] if hello else []
    assert _history(tc)[: len(head) + 1] == [*head, ("assistant", GREETING)], context
    assert _history(tc)[-2:] == [("user", QUESTION), ("assistant", ANSWER)], context


async def _shape(agent: Agent, *, asks_model: bool = True, strict: bool | None = None) -> None:
    llm_model = ScriptedLLM(_model)
    script = CallScript([UserLine(HELLO_AT, "hello")])
    async with turn_call(
        _outbound(),
        script,
        agent=agent,
        llm=llm_model,
        settings="livekit-defaults",
        adapter_strict=strict,
    ) as tc:
        await _greeted_then_answered(tc)
        # the model was never asked for a reply before the greeting
        expected = [QUESTION] if asks_model else []
        assert [r.last_user_text for r in llm_model.requests] == expected, tc.describe()


async def _plain_agent_speaks_first() -> None:
    policy = _outbound(first_speaker="agent")
    agent = Agent(instructions="You are on a call.")
    async with turn_call(
        policy, (), agent=agent, llm=ScriptedLLM(_model), settings="livekit-defaults"
    ) as tc:
        await _greeted_then_answered(tc, hello=False)


async def test_agent_shapes(caplog: pytest.LogCaptureFixture) -> None:
    await run_scenarios(
        {
            # reported, not raised: the guarantees are what is checked here
            "on_enter-generate_reply": _shape(
                ReplyOnEnter(instructions="On a call."), strict=False
            ),
            "on_enter-say": _shape(SayOnEnter(instructions="On a call."), strict=False),
            "own-llm_node-and-turn-hook": _shape(
                OwnNodes(instructions="On a call."), asks_model=False
            ),
            "plain-agent-speaks-first": _plain_agent_speaks_first(),
        }
    )
    reported = sorted(
        r.getMessage().split(" before ")[0]
        for r in caplog.records
        if r.name.startswith("turnfsm") and r.levelno >= logging.WARNING
    )
    assert reported == [  # once each, naming the agent, its method and the call
        "turnfsm: ReplyOnEnter.on_enter called session.generate_reply",
        "turnfsm: SayOnEnter.on_enter called session.say",
    ]
    caplog.clear()  # seen: the integration suite's own check would fail on it


async def test_a_filler_in_the_turn_hook_is_not_taken_for_the_greeting() -> None:
    script = CallScript([UserLine(HELLO_AT, "hello")])
    agent = SaysAFiller(instructions="You are on a call.")
    policy = _outbound(greet_on="end_of_turn")  # the turn hook runs on "Hello?"
    async with turn_call(
        policy, script, agent=agent, llm=ScriptedLLM(_model), settings="livekit-defaults"
    ) as tc:
        call = tc.call
        greeting = await wait_segment(call, 0, timeout=HELLO_AT + 6)
        await call.sleep_until(tc.segment_start(greeting) + 1.0)
        call.audio_input.say_now("question")  # over the greeting: held, answered after
        try:
            await call.wait_until(
                lambda: ANSWER in [m.text_content for m in call.messages("assistant")],
                timeout=LINES["question"].duration + 10,
            )
        except TimeoutError as error:
            raise AssertionError(f"{error}\n{tc.describe()}") from None
        context = tc.describe()

        assert call.audio_output.segments[0] is greeting, context  # first heard
        assert greeting.interrupted is False, context
        assert greeting.played == greeting.pushed, context
        assert abs(greeting.pushed - call.tts.duration_of(GREETING)) < 0.05, context
        created = [s.event for s in tc.events("agent_speech_created")]
        filler, reply = created[1], created[2]  # after the preemptive reply, stopped
        assert filler.from_agent_code, context
        assert not reply.from_agent_code, context
        assert fx.Interrupt(force=True, speech_id=filler.speech_id) in tc.effects(fx.Interrupt)
        assert tc.effects(fx.LockSpeech) == [fx.LockSpeech(speech_id=reply.speech_id)], context
        assert _history(tc)[:2] == [("user", LINES["hello"].text), ("assistant", GREETING)]
        assert _history(tc)[-3:] == [
            ("user", QUESTION),
            ("assistant", FILLER),
            ("assistant", ANSWER),
        ], context
        assert tc.adapter.outcomes.counts == {}, context


# -- handoffs -------------------------------------------------------------------------


async def _handoff(state: str, second: Callable[[], Agent] = Second) -> None:
    """Hand the call to ``second`` once the machine is in ``state``."""
    script = CallScript([UserLine(HELLO_AT, "hello")])
    first = HandsOverInTool(instructions="You are on a call.") if state == "tool_loop" else None
    agent = first or TurnAgent(instructions="You are on a call.")
    async with turn_call(
        _outbound(),
        script,
        agent=agent,
        llm=ScriptedLLM(_model),
        settings="livekit-defaults",
        answer=state != "ringing",
    ) as tc:
        if state == "ringing":
            tc.session.update_agent(Second())
            await tc.call.sleep_until(0.3)
            tc.adapter.dispatch(_answered(tc))
            await _greeted_then_answered(tc)
        elif state == "awaiting_user":
            await tc.call.sleep_until(0.3)
            assert tc.controller.state == "awaiting_user"
            tc.session.update_agent(Second())
            await _greeted_then_answered(tc)
        elif state == "greeting":
            await _greeted_then_answered(tc, during=lambda: tc.session.update_agent(Second()))
        else:
            await _greeted_then_answered(tc)
            if state in ("listening", "speaking"):
                await _handoff_after_greeting(tc, state, second)
        if state != "ringing":
            assert type(tc.session.current_agent) is second, tc.describe()


async def _handoff_after_greeting(tc: TurnCall, state: str, second: Callable[[], Agent]) -> None:
    call = tc.call
    if state == "speaking":
        call.audio_input.say_now("question")
        await call.wait_until(lambda: tc.controller.state == "speaking", timeout=8)
    else:
        await call.wait_until(lambda: tc.controller.state == "listening", timeout=4)
    tc.session.update_agent(second())
    await call.sleep_until(call.now() + 2.0)
    call.audio_input.say_now("question")
    answers = len([m for m in call.messages("assistant") if m.text_content == ANSWER])
    await call.wait_until(
        lambda: len([m for m in call.messages("assistant") if m.text_content == ANSWER]) > answers,
        timeout=LINES["question"].duration + 6,
    )
    await call.wait_until(lambda: call.audio_output.segments[-1].finished, timeout=4)
    assert tc.controller.state == "listening", tc.describe()
    assert tc.adapter.outcomes.counts == {}, tc.describe()


def _answered(tc: TurnCall) -> CallAnswered:
    return CallAnswered(at=tc.adapter.now())


async def test_handoff_in_every_state() -> None:
    # every state a live outbound call rests in: it leaves `start` in the step that enters
    # it, and never waits for the agent's own greeting (an inbound call's handoff there:
    # tests/integration/test_livekit_flows.py)
    live = [state for state in STATES if state not in ("start", "awaiting_agent", "ended")]
    scenarios = {state: _handoff(state) for state in live}
    # a plain Agent after the greeting: nothing is left to replace
    scenarios["listening, to a plain Agent"] = _handoff("listening", PlainSecond)
    await run_scenarios(scenarios)
