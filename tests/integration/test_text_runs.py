"""Issue 18.6 / 20.5: LiveKit's text testing, ``session.run(user_input=...)`` + ``result.expect``,
with turnfsm attached.

A text session (``AgentSession(llm=...)``: no VAD, STT, TTS nor audio) as LiveKit's testing
docs build it; the typed input reaches the session through ``generate_reply(user_input=...)``,
which runs no ``on_user_turn_completed``. Each test asserts what LiveKit's own text test
would see (the run's events, the history) and what the machine saw (its trace).
"""

from __future__ import annotations

import asyncio
import logging

import pytest
from livekit.agents import Agent, AgentSession, AgentTask, RunContext, function_tool, llm

from turnfsm import TurnController, TurnPolicy
from turnfsm.adapters.livekit import TurnAgent, attach
from turnfsm.adapters.sim import LLMRequest, ScriptedLLM, ScriptedReply, ScriptedToolCall
from turnfsm.events import EffectOutcome
from turnfsm.tools.cli import PRESETS

GREETING = "Hi, this is Ada from Acme Dental."
ANSWER = "We open at nine on weekdays and at ten on Saturdays, and we close at six every day."


def history(session: AgentSession) -> list[tuple[str, str]]:
    return [
        (item.role, item.text_content or "")
        for item in session.history.items
        if item.type == "message"
    ]


def path(controller: TurnController) -> list[tuple[str, str, str]]:
    assert controller.trace is not None
    return [(s.before, s.event.name, s.after) for s in controller.trace.steps]


def text_session(llm: ScriptedLLM) -> AgentSession:
    """A session as LiveKit's testing docs make one: a model, nothing else."""
    return AgentSession(llm=llm, aec_warmup_duration=None)


def assistant_texts(result: object) -> list[str]:
    return [
        event.item.text_content or ""
        for event in result.events  # type: ignore[attr-defined]
        if event.type == "message" and event.item.role == "assistant"
    ]


async def test_outbound_the_first_run_is_the_callees_first_words_and_gets_the_greeting() -> None:
    """Was: no reply on three turns (the machine never heard a text turn, and stopped every
    reply as speech before the greeting)."""
    llm = ScriptedLLM(["We open at nine.", "You're welcome."])
    async with text_session(llm) as session:
        controller = TurnController(
            TurnPolicy(direction="outbound", greeting=GREETING), strict=True, keep_text=True
        )
        attach(session, controller)
        await session.start(TurnAgent(instructions="You are Ada."))

        greeted = await session.run(user_input="Hello?")
        greeted.expect.next_event().is_message(role="assistant")
        greeted.expect.no_more_events()
        assert assistant_texts(greeted) == [GREETING]

        answered = await session.run(user_input="When do you open?")
        answered.expect.next_event().is_message(role="assistant")
        answered.expect.no_more_events()
        assert assistant_texts(answered) == ["We open at nine."]

        thanked = await session.run(user_input="Thanks.")
        assert assistant_texts(thanked) == ["You're welcome."]

    assert history(session) == [
        ("user", "Hello?"),
        ("assistant", GREETING),
        ("user", "When do you open?"),
        ("assistant", "We open at nine."),
        ("user", "Thanks."),
        ("assistant", "You're welcome."),
    ]
    steps = path(controller)
    # the first words answered the call (no SIP status in a text session) and were greeted
    assert ("ringing", "user_turn_committed", "greeting") in steps
    assert steps.count(("listening", "user_turn_committed", "listening")) == 2
    assert [r.last_user_text for r in llm.requests] == ["When do you open?", "Thanks."]


async def test_inbound_greeting_is_said_before_start_returns_and_the_run_answers() -> None:
    """Was: the first typed turn went into the history before the greeting, and the machine
    saw neither the turn nor its reply (it stayed ``listening`` while the reply played)."""
    llm = ScriptedLLM(["We open at nine."])
    async with text_session(llm) as session:
        controller = TurnController(TurnPolicy(greeting=GREETING), strict=True, keep_text=True)
        attach(session, controller)
        await session.start(TurnAgent(instructions="You are Ada."))
        assert history(session) == [("assistant", GREETING)]  # said once start returns
        assert controller.state == "listening"

        result = await session.run(user_input="When do you open?")
        result.expect.next_event().is_message(role="assistant")
        result.expect.no_more_events()

    assert history(session) == [
        ("assistant", GREETING),
        ("user", "When do you open?"),
        ("assistant", "We open at nine."),
    ]
    steps = path(controller)
    assert ("listening", "user_turn_committed", "listening") in steps
    assert ("listening", "agent_speech_created", "speaking") in steps
    # the model saw the greeting before the question
    (request,) = llm.requests
    assert [m.text_content for m in request.chat_ctx.items if m.type == "message"][-2:] == [
        GREETING,
        "When do you open?",
    ]


@pytest.mark.parametrize("agent_class", [TurnAgent, Agent], ids=["TurnAgent", "Agent"])
async def test_inbound_user_first_each_typed_turn_is_one_machine_turn(
    agent_class: type[Agent],
) -> None:
    llm = ScriptedLLM(["One.", "Two."])
    async with text_session(llm) as session:
        controller = TurnController(TurnPolicy(first_speaker="user"), strict=True, keep_text=True)
        attach(session, controller)
        await session.start(agent_class(instructions="You answer."))
        for text, reply in (("First?", "One."), ("Second?", "Two.")):
            result = await session.run(user_input=text)
            assert assistant_texts(result) == [reply]
    committed = [s.event for s in controller.trace.steps if s.event.name == "user_turn_committed"]  # type: ignore[union-attr]
    assert [e.text for e in committed] == ["First?", "Second?"]  # type: ignore[attr-defined]
    assert path(controller).count(("listening", "agent_speech_created", "speaking")) == 2


class Booker(TurnAgent):
    def __init__(self) -> None:
        super().__init__(instructions="You book appointments.")
        self.lookups = 0

    @function_tool
    async def lookup_slot(self, context: RunContext) -> str:
        """Find a free slot."""
        self.lookups += 1
        return "no slot yet"


async def test_tool_rounds_are_capped_in_a_text_run() -> None:
    """A model that calls a tool on every step: ``max_tool_steps`` rounds, then one reply."""
    llm = ScriptedLLM(always_call_tool="lookup_slot", default_reply="Let me call you back.")
    agent = Booker()
    async with text_session(llm) as session:
        controller = TurnController(
            TurnPolicy(first_speaker="user", max_tool_steps=2), strict=True, keep_text=True
        )
        attach(session, controller)
        await session.start(agent)
        result = await session.run(user_input="Book me in.")
        for _ in range(2):
            result.expect.next_event().is_function_call(name="lookup_slot")
            result.expect.next_event().is_function_call_output()
        result.expect.next_event().is_message(role="assistant")
        result.expect.no_more_events()
    assert agent.lookups == 2
    rounds = [s for s in controller.trace.steps if s.event.name == "tool_step_started"]  # type: ignore[union-attr]
    assert len(rounds) == 2


@pytest.mark.parametrize("name", sorted(PRESETS))
@pytest.mark.parametrize("overlap", ["answer_whole", "drop"])
@pytest.mark.parametrize("lock", ["keep_listening", "mute_input"])
async def test_a_text_run_never_wedges(name: str, overlap: str, lock: str) -> None:
    """Every preset, lock and overlap rule: each run ends, with one reply (the greeting for
    the outbound call's first words)."""
    policy = TurnPolicy(
        direction=PRESETS[name].direction,
        greeting=PRESETS[name].greeting,
        idle_timeout=PRESETS[name].idle_timeout,
        max_call_duration=PRESETS[name].max_call_duration,
        greeting_lock=lock,  # type: ignore[arg-type]
        greeting_overlap=overlap,  # type: ignore[arg-type]
    )
    llm = ScriptedLLM(["A.", "B.", "C."])
    async with text_session(llm) as session:
        controller = TurnController(policy, strict=True, keep_text=True)
        attach(session, controller)
        await session.start(TurnAgent(instructions="x"))
        replies = []
        for text in ("Hello?", "Question one?", "Question two?"):
            result = await asyncio.wait_for(session.run(user_input=text), timeout=30)
            replies.append(assistant_texts(result))
    first = [policy.greeting] if policy.direction == "outbound" else ["A."]
    rest = [["A."], ["B."]] if policy.direction == "outbound" else [["B."], ["C."]]
    assert replies == [first, *rest]


@pytest.mark.parametrize("overlap", ["answer_whole", "drop"])
async def test_a_turn_typed_over_the_outbound_greeting(
    overlap: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A second turn typed while the greeting (the reply to the first words) is being said:
    answered once the greeting is over under ``answer_whole``; under ``drop`` not answered
    and not kept, with a warning saying why. Either way the run ends."""
    llm = ScriptedLLM(["We open at nine."])
    async with text_session(llm) as session:
        controller = TurnController(
            TurnPolicy(direction="outbound", greeting=GREETING, greeting_overlap=overlap),  # type: ignore[arg-type]
            strict=True,
            keep_text=True,
        )
        attach(session, controller)
        await session.start(TurnAgent(instructions="x"))
        greeted = session.run(user_input="Hello?")
        session.generate_reply(user_input="When do you open?")  # typed over the greeting
        await asyncio.wait_for(greeted, timeout=30)
        await asyncio.sleep(5)  # an answer would be over by now
    if overlap == "answer_whole":
        # answered once the greeting is over; LiveKit keeps the typed turn at the time it
        # was typed, before the greeting it was typed over
        assert history(session) == [
            ("user", "Hello?"),
            ("user", "When do you open?"),
            ("assistant", GREETING),
            ("assistant", "We open at nine."),
        ]
        return
    assert history(session) == [("user", "Hello?"), ("assistant", GREETING)]
    assert llm.requests == []  # the model was not asked to answer the dropped turn
    (warning,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "greeting_overlap='drop'" in warning.getMessage()
    caplog.clear()  # the one warning this test expects, checked


class AskName(AgentTask[str]):
    def __init__(self) -> None:
        super().__init__(instructions="Ask the caller's name.")

    async def on_enter(self) -> None:
        self.session.generate_reply(instructions="Ask for the name.")

    @function_tool
    async def record_name(self, context: RunContext, name: str) -> None:
        """Record the caller's name."""
        self.complete(name)


class GreetsThroughATask(Agent):
    """Its ``on_enter`` reply calls a tool that awaits a task, which needs the caller."""

    def __init__(self) -> None:
        super().__init__(instructions="You answer the phone.")

    async def on_enter(self) -> None:
        self.session.generate_reply(instructions="Greet the caller.")

    @function_tool
    async def ask_name(self, context: RunContext) -> str:
        """Ask the caller's name."""
        return f"the name is {await AskName()}"


def _task_model(request: LLMRequest) -> ScriptedReply:
    last = request.chat_ctx.items[-1]
    if isinstance(last, llm.ChatMessage) and last.text_content == "Greet the caller.":
        return ScriptedReply(tool_calls=(ScriptedToolCall("ask_name"),))
    if isinstance(last, llm.ChatMessage) and last.text_content == "Ask for the name.":
        return ScriptedReply(text="May I have your name?")
    if request.last_user_text == "Ada." and "record_name" in request.tool_names:
        return ScriptedReply(tool_calls=(ScriptedToolCall("record_name", {"name": "Ada"}),))
    return ScriptedReply(text="Thanks, Ada.")


async def _greet_through_a_task(policy: TurnPolicy | None) -> list[object]:
    """The run's events and the history of one text call, turnfsm attached under
    ``policy`` (``None``: LiveKit alone)."""
    async with text_session(ScriptedLLM(_task_model)) as session:
        if policy is not None:
            attach(session, TurnController(policy, strict=True, keep_text=True))
        await asyncio.wait_for(session.start(GreetsThroughATask()), timeout=10)
        result = await asyncio.wait_for(session.run(user_input="Ada."), timeout=10)
        events = [(event.type, assistant_texts(result)) for event in result.events]
        agent = type(session.current_agent)
    return [events, agent, history(session)]


async def test_an_own_words_greeting_that_awaits_the_caller_does_not_hold_the_start() -> None:
    """Where the agent greets in its own words, ``session.start`` returns as LiveKit's does,
    even when that first speech runs a tool awaiting a task only the caller can finish (it
    waited for the greeting's end: a deadlock, found by LiveKit's own
    ``test_handoff_from_pre_run_speech``); the typed turn then runs as in LiveKit."""
    livekit = await _greet_through_a_task(None)
    assert livekit[1] is AskName  # the task runs: the greeting's tool awaits it
    assert await _greet_through_a_task(TurnPolicy()) == livekit


@pytest.mark.parametrize("keep", ["spoken", "drop"])
async def test_a_reply_cut_in_a_text_session_keeps_the_text_the_caller_read(keep: str) -> None:
    """No audio plays, so the caller read every word sent before the cut: ``spoken`` keeps
    them all, its drop's outcome measuring nothing dropped (was: the message was removed,
    there being no playout to measure); ``drop`` removes it, all of it measured dropped."""
    llm = ScriptedLLM([ANSWER, "Okay."], chars_per_second=20.0)  # cut 1.5 s in
    policy = TurnPolicy(direction="inbound", first_speaker="user", interrupted_text=keep)  # type: ignore[arg-type]
    async with text_session(llm) as session:
        controller = TurnController(policy, strict=True, keep_text=True)
        attach(session, controller)
        await session.start(TurnAgent(instructions="x"))
        session.generate_reply(user_input="When are you open?")
        await asyncio.sleep(1.5)
        session.interrupt()
        await asyncio.sleep(0.5)
        read = [text for role, text in history(session) if role == "assistant"]
        assert controller.trace is not None
        (cut,) = [
            s.event
            for s in controller.trace.steps
            if isinstance(s.event, EffectOutcome) and s.event.effect == "drop_unspoken_text"
        ]
    if keep == "spoken":
        assert len(read) == 1, read
        assert 10 < len(read[0]) < len(ANSWER), read
        assert ANSWER.startswith(read[0]), read
        assert (cut.text_chars, cut.heard_chars) == (len(read[0]), len(read[0])), cut
    else:
        assert read == [], read
        assert cut.heard_chars == 0, cut
        assert (cut.text_chars or 0) > 10, cut
