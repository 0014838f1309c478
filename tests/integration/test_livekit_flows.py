"""Issue 20: LiveKit's own flows, with turnfsm attached, do what LiveKit does where the
policy asks nothing, and what the policy asks where it does.

The cases LiveKit's own test suite found (``make livekit-compat``), in our words:

* an agent that greets in ``on_enter`` under a policy where the caller speaks first and
  turnfsm says nothing (no greeting): LiveKit runs ``on_enter`` before the session leaves
  ``initializing``, and its speech used to be stopped silently as if the call had not
  started. Every ``on_enter`` speech plays, in order;
* ``first_speaker="agent"`` without a greeting text: the agent's first speech (a
  ``generate_reply`` or ``say`` in ``on_enter``) *is* the greeting: locked, speech over it
  answered whole after it, the caller released exactly at its end;
* under ``first_speaker="user"`` with a greeting, an ``on_enter`` speech is stopped and
  reported: one warning naming the agent class, the method and the fix
  (``EmbeddingError`` from ``session.start`` under strict);
* workflows, as LiveKit's docs teach them: an ``AgentTask`` awaited in a tool, tasks
  nested in tasks, a task awaited in ``on_enter`` before anything is said, a tool that
  returns the next agent, and ``update_agent`` handoffs (before the greeting, while it
  plays, after it): each agent's speech plays under the policy, and no task LiveKit or
  turnfsm started is left pending once the session is closed (handing over used to re-set
  the session's turn detection on the new agent, which opened a second turn-detector
  stream nobody closed).

Each call checks the audio the caller heard, the history, the trace, and that no task is
left pending once it is closed.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

import pytest
from livekit.agents import Agent, AgentTask, function_tool, inference, llm
from turncalls import (
    GREETING,
    TurnCall,
    recorded_tasks,
    settle,
    still_pending,
    turn_call,
    wait_segment,
)

from turnfsm import TurnPolicy
from turnfsm import effects as fx
from turnfsm.adapters.livekit import EmbeddingError, TurnAgent
from turnfsm.adapters.sim import (
    LINES,
    CallScript,
    LLMRequest,
    ScriptedLLM,
    ScriptedReply,
    ScriptedToolCall,
    UserLine,
)

TRANSPARENT = TurnPolicy(first_speaker="user", interrupted_text="keep", await_user_timeout=None)
"""The policy closest to LiveKit: the caller speaks first, turnfsm says nothing first,
interrupted replies keep their text, no timers."""
OWN_WORDS = TurnPolicy()
"""Inbound, the agent greets first in its own words (no greeting text)."""

WELCOME = "Thanks for calling Acme, how can I help?"
QUESTION = LINES["question"].text
ANSWER = "We open at nine."
ASK_NAME = "May I have your name for the booking?"
BOOKED = "You are booked for nine."
YES = "Yes, that works for me."


def _instructions(request: LLMRequest) -> str | None:
    """The instructions of a ``generate_reply(instructions=...)``: LiveKit appends them
    to the request's context as its last, system message."""
    last = request.chat_ctx.items[-1]
    if isinstance(last, llm.ChatMessage) and last.role == "system":
        return last.text_content
    return None


def _model(request: LLMRequest) -> ScriptedReply:
    instructions = _instructions(request)
    last = request.chat_ctx.items[-1]
    if instructions == "Welcome the caller.":
        return ScriptedReply(text=WELCOME)
    if instructions == "Greet the caller.":
        return ScriptedReply(text=GREETING)
    if instructions == "Ask for the name.":
        return ScriptedReply(text=ASK_NAME)
    if last.type == "function_call_output":
        return ScriptedReply(text=BOOKED if "book" in request.tool_names else ANSWER)
    if request.last_user_text == YES and "record_name" in request.tool_names:
        return ScriptedReply(tool_calls=(ScriptedToolCall("record_name", {"name": "Ada"}),))
    if request.last_user_text == QUESTION and "book" in request.tool_names:
        return ScriptedReply(tool_calls=(ScriptedToolCall("book"),))
    if request.last_user_text == QUESTION:
        return ScriptedReply(text=ANSWER)
    return ScriptedReply(text="Sorry, what was that?")


class WelcomesOnEnter(Agent):
    """LiveKit's own pattern: a plain agent that greets in ``on_enter``."""

    def __init__(self) -> None:
        super().__init__(instructions="You answer the phone for Acme.")

    async def on_enter(self) -> None:
        self.session.generate_reply(instructions="Welcome the caller.")


class SaysTwiceOnEnter(Agent):
    """Says a fixed line, then a generated one, waiting for each."""

    def __init__(self) -> None:
        super().__init__(instructions="You answer the phone for Acme.")

    async def on_enter(self) -> None:
        await self.session.say(GREETING)
        await self.session.generate_reply(instructions="Welcome the caller.")


class GreetsOnEnter(TurnAgent):
    def __init__(self, how: str) -> None:
        super().__init__(instructions="You answer the phone for Acme.")
        self.how = how

    async def on_enter(self) -> None:
        if self.how == "say":
            self.session.say(GREETING)
        else:
            self.session.generate_reply(instructions="Greet the caller.")


@contextlib.asynccontextmanager
async def _no_task_left() -> AsyncIterator[None]:
    """Around a call: once it is closed (and its last callbacks ran), no task LiveKit or
    turnfsm started in it is left pending."""
    with recorded_tasks() as created:
        yield
        await settle()
    assert still_pending(created) == [], "the closed call left tasks pending"


def _history(tc: TurnCall) -> list[tuple[str, str | None]]:
    return [(m.role, m.text_content) for m in tc.call.messages()]


def _played_whole(tc: TurnCall, index: int, text: str) -> None:
    segment = tc.call.audio_output.segments[index]
    context = tc.describe()
    assert abs(segment.pushed - tc.call.tts.duration_of(text)) < 0.05, context
    assert not segment.interrupted, context
    assert segment.played == segment.pushed, context


async def _answered(tc: TurnCall, answer: str = ANSWER, *, timeout: float = 12.0) -> None:
    call = tc.call
    try:
        await call.wait_until(
            lambda: answer in [m.text_content for m in call.messages("assistant")],
            timeout=timeout,
        )
        await call.wait_until(lambda: call.audio_output.segments[-1].finished, timeout=6)
        await call.wait_until(lambda: tc.controller.state == "listening", timeout=2)
    except TimeoutError as error:
        raise AssertionError(f"{error}\n{tc.describe()}") from None


# -- point 1: where the policy asks nothing, LiveKit's behaviour --------------------------


async def test_an_on_enter_greeting_plays_where_the_caller_speaks_first_without_a_greeting() -> (
    None
):
    script = CallScript([UserLine(4.5, "question")])
    model = ScriptedLLM(_model)
    async with (
        _no_task_left(),
        turn_call(TRANSPARENT, script, agent=WelcomesOnEnter(), llm=model) as tc,
    ):
        await _answered(tc)
        context = tc.describe()
        _played_whole(tc, 0, WELCOME)
        assert tc.call.tts.texts[0] == WELCOME, context
        assert _history(tc) == [
            ("assistant", WELCOME),
            ("user", QUESTION),
            ("assistant", ANSWER),
        ], context
        assert tc.effects(fx.Interrupt) == [], context  # nothing of LiveKit's was stopped
        assert tc.effects(fx.LockSpeech) == [], context  # nor locked: no greeting asked for


async def test_every_on_enter_speech_plays_in_order() -> None:
    async with (
        _no_task_left(),
        turn_call(TRANSPARENT, (), agent=SaysTwiceOnEnter(), llm=ScriptedLLM(_model)) as tc,
    ):
        await wait_segment(tc.call, 1, timeout=12, finished=True)
        _played_whole(tc, 0, GREETING)
        _played_whole(tc, 1, WELCOME)
        assert _history(tc) == [("assistant", GREETING), ("assistant", WELCOME)], tc.describe()


# -- point 2: the agent's own code greets --------------------------------------------------


@pytest.mark.parametrize(
    ("how", "lock", "settings"),
    [
        ("generate_reply", "keep_listening", "livekit-defaults"),
        ("say", "mute_input", "sim"),
    ],
)
async def test_the_agents_first_speech_is_the_locked_greeting(
    how: str, lock: str, settings: str
) -> None:
    """The caller talks over the agent's own greeting: it plays whole, and the caller's
    words are answered once, whole, after it."""
    policy = TurnPolicy(greeting_lock=lock)  # type: ignore[arg-type]
    script = CallScript([UserLine(1.5, "question")])  # over the ~4.9 s greeting
    model = ScriptedLLM(_model)
    agent = GreetsOnEnter(how)
    async with (
        _no_task_left(),
        turn_call(policy, script, agent=agent, llm=model, settings=settings) as tc,
    ):
        greeting = await tc.segment_played(0, timeout=8)
        await _answered(tc)
        context = tc.describe()
        _played_whole(tc, 0, GREETING)
        assert tc.call.tts.texts[0] == GREETING, context
        # the greeting's speech: locked as it was created, the caller held meanwhile
        (created,) = [s for s in tc.events("agent_speech_created") if s.before == "awaiting_agent"]
        assert created.after == "greeting", context
        assert fx.LockSpeech(speech_id=created.event.speech_id) in created.effects, context
        held = fx.MuteInput(hold_audio=True) if lock == "mute_input" else fx.HoldUserTurns()
        assert held in created.effects, context
        # released exactly at its end: the step that reports the greeting's end
        (released,) = [s for s in tc.steps if s.before == "greeting" and s.after == "listening"]
        assert released.event.name == "agent_speech_ended", context
        assert released.event.speech_id == created.event.speech_id, context
        assert abs(tc.at(released) - tc.call_time(greeting.finished_at)) < 0.05, context
        # the overlap is answered once, whole
        assert [r.last_user_text for r in model.requests if r.last_user_text] == [QUESTION]
        assert _history(tc) == [
            ("assistant", GREETING),
            ("user", QUESTION),
            ("assistant", ANSWER),
        ], context
        assert tc.adapter.outcomes.counts == {}, context


async def test_a_caller_who_speaks_before_the_agent_greets_is_answered_unlocked() -> None:
    agent = Agent(instructions="You answer the phone for Acme.")  # no on_enter speech
    script = CallScript([UserLine(0.5, "question")])
    async with (
        _no_task_left(),
        turn_call(OWN_WORDS, script, agent=agent, llm=ScriptedLLM(_model)) as tc,
    ):
        await _answered(tc)
        context = tc.describe()
        # LiveKit's reply to the caller (created before or after the turn is reported)
        # is no greeting: the conversation starts unlocked
        first = [s for s in tc.steps if s.before == "awaiting_agent" and s.after != s.before]
        assert [s.event.name for s in first] in (
            ["agent_speech_created"],
            ["user_turn_committed"],
        ), context
        assert tc.effects(fx.LockSpeech) == [], context
        assert tc.effects(fx.HoldUserTurns) == [], context
        assert _history(tc) == [("user", QUESTION), ("assistant", ANSWER)], context


async def test_an_on_enter_speech_before_the_callers_first_words_is_refused_loudly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    policy = TurnPolicy(first_speaker="user", greeting=GREETING)
    script = CallScript([UserLine(1.0, "hello")])
    agent = GreetsOnEnter("generate_reply")
    async with (
        _no_task_left(),
        turn_call(
            policy, script, agent=agent, llm=ScriptedLLM(_model), adapter_strict=False
        ) as tc,
    ):
        await tc.segment_played(0, timeout=8)
        context = tc.describe()
        _played_whole(tc, 0, GREETING)  # the policy's greeting is the first thing heard
        assert tc.call.tts.texts == [GREETING], context  # the stopped speech never played
    refusals = [
        r for r in caplog.records if r.name.startswith("turnfsm") and r.levelno >= logging.WARNING
    ]
    assert len(refusals) == 1, [r.getMessage() for r in refusals]
    message = refusals[0].getMessage()
    assert "GreetsOnEnter.on_enter called session.generate_reply" in message
    assert "before the caller's first words" in message
    assert "TurnPolicy(first_speaker='agent') without a greeting text" in message  # the fix
    caplog.clear()  # seen: the integration suite's own check would fail on it


async def test_strict_an_on_enter_speech_before_the_callers_first_words_fails_the_start() -> None:
    policy = TurnPolicy(direction="outbound", greeting=GREETING)
    with pytest.raises(EmbeddingError, match=r"GreetsOnEnter.on_enter called session.say"):
        async with turn_call(policy, (), agent=GreetsOnEnter("say"), llm=ScriptedLLM(_model)):
            pass


# -- point 3: workflows --------------------------------------------------------------------


class CollectName(AgentTask[str]):
    """LiveKit's task pattern: asks in ``on_enter``, completes from a tool."""

    def __init__(self) -> None:
        super().__init__(instructions="Collect the caller's name.")

    async def on_enter(self) -> None:
        self.session.generate_reply(instructions="Ask for the name.")

    @function_tool
    async def record_name(self, name: str) -> None:
        """Record the caller's name."""
        self.complete(name)


class Booking(AgentTask[str]):
    """A task that runs a nested task from its own ``on_enter``."""

    def __init__(self) -> None:
        super().__init__(instructions="Book the caller.")

    async def on_enter(self) -> None:
        name = await CollectName()
        self.complete(f"booked for {name}")


class Receptionist(TurnAgent):
    def __init__(self, *, nested: bool = False) -> None:
        super().__init__(instructions="You answer the phone for Acme.")
        self.nested = nested

    async def on_enter(self) -> None:
        self.session.generate_reply(instructions="Welcome the caller.")

    @function_tool
    async def book(self) -> str:
        """Book an appointment at nine."""
        return await (Booking() if self.nested else CollectName())


async def _book(policy: TurnPolicy, *, nested: bool) -> None:
    async with _no_task_left():
        await _book_and_close(policy, nested=nested)


async def _book_and_close(policy: TurnPolicy, *, nested: bool) -> None:
    script = CallScript([UserLine(4.0, "question")])
    model = ScriptedLLM(_model)
    agent = Receptionist(nested=nested)
    # LiveKit's default turn detector (a local model, streaming): each agent of the
    # workflow hands its stream over to the next
    turns = {"turn_detection": inference.TurnDetector()}
    async with turn_call(
        policy, script, agent=agent, llm=model, settings="livekit-defaults", turn_handling=turns
    ) as tc:
        call = tc.call
        await tc.segment_played(1, timeout=14)  # the task's question, after the welcome
        await call.sleep_until(call.now() + 0.8)
        call.audio_input.say_now("yes")
        await _answered(tc, BOOKED, timeout=LINES["yes"].duration + 10)
        context = tc.describe()
        # every speech heard whole, in order: the welcome, the task's question, the booking
        # (only what LiveKit alone synthesizes: the tool-cap fallback waits for the cap)
        assert call.tts.texts == [WELCOME, ASK_NAME, BOOKED], context
        for index, text in enumerate([WELCOME, ASK_NAME, BOOKED]):
            _played_whole(tc, index, text)
        messages = [(role, text) for role, text in _history(tc)]
        assert messages == [
            ("assistant", WELCOME),
            ("user", QUESTION),
            ("assistant", ASK_NAME),
            ("user", YES),
            ("assistant", BOOKED),
        ], context
        assert type(tc.session.current_agent) is Receptionist, context  # back from the task
        assert tc.adapter.outcomes.counts == {}, context


@pytest.mark.parametrize("policy", [TRANSPARENT, OWN_WORDS], ids=["transparent", "own-words"])
@pytest.mark.parametrize("nested", [False, True], ids=["task", "nested-tasks"])
async def test_an_agent_task_runs_as_in_livekit_and_leaves_no_task(
    policy: TurnPolicy, nested: bool
) -> None:
    await _book(policy, nested=nested)


class Desk(TurnAgent):
    """Welcomes in ``on_enter`` and answers questions."""

    def __init__(self) -> None:
        super().__init__(instructions="Front desk.")

    async def on_enter(self) -> None:
        self.session.generate_reply(instructions="Welcome the caller.")


async def test_a_handoff_to_an_agent_that_speaks_in_on_enter() -> None:
    """``update_agent`` after the own-words greeting: the new agent's ``on_enter`` speech
    plays, unlocked, and the call goes on with it."""
    async with _no_task_left():
        await _hand_over_and_close()


async def _hand_over_and_close() -> None:
    turns = {"turn_detection": inference.TurnDetector()}
    model = ScriptedLLM(_model)
    async with turn_call(OWN_WORDS, (), agent=Desk(), llm=model, turn_handling=turns) as tc:
        await tc.segment_played(0, timeout=8)
        await tc.call.wait_until(lambda: tc.controller.state == "listening", timeout=2)
        tc.session.update_agent(Desk())
        await tc.segment_played(1, timeout=8)
        tc.call.audio_input.say_now("question")
        await _answered(tc, timeout=LINES["question"].duration + 10)
        context = tc.describe()
        assert tc.call.tts.texts == [WELCOME, WELCOME, ANSWER], context
        _played_whole(tc, 1, WELCOME)
        assert len(tc.effects(fx.LockSpeech)) == 1, context  # only the first is the greeting
        assert type(tc.session.current_agent) is Desk, context
        assert _history(tc)[-2:] == [("user", QUESTION), ("assistant", ANSWER)], context
        assert tc.adapter.outcomes.counts == {}, context


async def test_a_handoff_while_the_greeting_plays_waits_for_its_end() -> None:
    """``update_agent`` during the own-words greeting: LiveKit lets the locked greeting
    finish, then the new agent's ``on_enter`` speech plays, unlocked."""
    async with (
        _no_task_left(),
        turn_call(OWN_WORDS, (), agent=Desk(), llm=ScriptedLLM(_model)) as tc,
    ):
        await tc.call.wait_until(lambda: tc.controller.state == "greeting", timeout=4)
        await tc.call.sleep_until(tc.call.now() + 1.5)  # in the middle of it
        tc.session.update_agent(Billing())
        await tc.segment_played(1, timeout=12)
        await tc.call.wait_until(lambda: tc.controller.state == "listening", timeout=2)
        context = tc.describe()
        assert tc.call.tts.texts == [WELCOME, WELCOME], context
        _played_whole(tc, 0, WELCOME)
        _played_whole(tc, 1, WELCOME)
        (locked,) = tc.effects(fx.LockSpeech)
        assert tc.events("agent_speech_created")[0].event.speech_id == locked.speech_id
        assert type(tc.session.current_agent) is Billing, context
        assert _history(tc) == [("assistant", WELCOME), ("assistant", WELCOME)], context
        assert tc.adapter.outcomes.counts == {}, context


async def test_a_handoff_before_the_agent_greeted_makes_the_new_agents_speech_the_greeting() -> (
    None
):
    """The first agent says nothing; the agent handed over to greets in ``on_enter``: its
    speech is the call's greeting, locked."""
    first = Agent(instructions="Says nothing.")
    script = CallScript([UserLine(2.5, "question")])  # over the greeting
    async with (
        _no_task_left(),
        turn_call(OWN_WORDS, script, agent=first, llm=ScriptedLLM(_model)) as tc,
    ):
        await tc.call.sleep_until(0.3)
        assert tc.controller.state == "awaiting_agent", tc.describe()
        tc.session.update_agent(Desk())
        await tc.segment_played(0, timeout=8)
        await _answered(tc)
        context = tc.describe()
        _played_whole(tc, 0, WELCOME)
        (locked,) = tc.effects(fx.LockSpeech)
        assert tc.events("agent_speech_created")[0].event.speech_id == locked.speech_id, context
        assert type(tc.session.current_agent) is Desk, context
        assert _history(tc) == [
            ("assistant", WELCOME),
            ("user", QUESTION),
            ("assistant", ANSWER),
        ], context
        assert tc.adapter.outcomes.counts == {}, context


TRANSFERRING = "Transferring you to billing."


class Billing(TurnAgent):
    """The agent a tool hands the call to: it speaks in ``on_enter``."""

    def __init__(self) -> None:
        super().__init__(instructions="Billing.")

    async def on_enter(self) -> None:
        self.session.generate_reply(instructions="Welcome the caller.")


class Frontline(TurnAgent):
    """LiveKit's documented handoff: a tool returns the next agent (and its output)."""

    def __init__(self) -> None:
        super().__init__(instructions="You answer the phone for Acme.")

    async def on_enter(self) -> None:
        self.session.generate_reply(instructions="Greet the caller.")

    @function_tool
    async def transfer_to_billing(self) -> tuple[Agent, str]:
        """Hand the caller to billing."""
        return Billing(), TRANSFERRING


def _transfer_model(request: LLMRequest) -> ScriptedReply:
    """Frontline hands a question to billing and says so (LiveKit still replies to the
    tool's output, then the new agent's ``on_enter`` speaks)."""
    last = request.chat_ctx.items[-1]
    if last.type == "function_call_output":
        return ScriptedReply(text=last.output)
    if request.last_user_text == QUESTION and "transfer_to_billing" in request.tool_names:
        return ScriptedReply(tool_calls=(ScriptedToolCall("transfer_to_billing"),))
    return _model(request)


@pytest.mark.parametrize("policy", [TRANSPARENT, OWN_WORDS], ids=["transparent", "own-words"])
async def test_a_tool_that_returns_an_agent_hands_the_call_over(policy: TurnPolicy) -> None:
    """The handoff LiveKit's docs teach, from the middle of a tool step: the new agent's
    ``on_enter`` speech plays whole, unlocked (only an own-words first speech is the
    greeting), the call goes on with the new agent, and nothing is left pending."""
    async with _no_task_left():
        await _transfer_and_close(policy)


async def _transfer_and_close(policy: TurnPolicy) -> None:
    turns = {"turn_detection": inference.TurnDetector()}
    model = ScriptedLLM(_transfer_model)
    script = CallScript([UserLine(7.0, "question")])  # after the greeting (1.3 s to 6.2 s)
    async with turn_call(
        policy,
        script,
        agent=Frontline(),
        llm=model,
        settings="livekit-defaults",
        turn_handling=turns,
    ) as tc:
        await tc.segment_played(2, timeout=LINES["question"].duration + 16)
        await tc.call.wait_until(lambda: tc.controller.state == "listening", timeout=2)
        context = tc.describe()
        # only what LiveKit alone synthesizes (the tool-cap fallback waits for the cap)
        spoken = [GREETING, TRANSFERRING, WELCOME]
        assert tc.call.tts.texts == spoken, context
        for index, text in enumerate(spoken):
            _played_whole(tc, index, text)
        assert type(tc.session.current_agent) is Billing, context
        assert _history(tc) == [
            ("assistant", GREETING),
            ("user", QUESTION),
            ("assistant", TRANSFERRING),
            ("assistant", WELCOME),
        ], context
        locked = tc.effects(fx.LockSpeech)
        assert len(locked) == (1 if policy.greets_in_own_words else 0), context
        assert tc.adapter.outcomes.counts == {}, context


class AsksNameFirst(TurnAgent):
    """LiveKit's documented task pattern: the agent awaits a task in ``on_enter`` before
    anything else (consent, a name), then greets."""

    def __init__(self) -> None:
        super().__init__(instructions="You answer the phone for Acme.")

    async def on_enter(self) -> None:
        name = await CollectName()
        self.session.generate_reply(instructions=f"Welcome the caller. {name}")


@pytest.mark.parametrize("policy", [TRANSPARENT, OWN_WORDS], ids=["transparent", "own-words"])
async def test_a_task_awaited_in_on_enter_speaks_first(policy: TurnPolicy) -> None:
    """The task's question is the agent's first speech: played whole (and, where the agent
    greets in its own words, it is the locked greeting); the agent's welcome follows the
    caller's answer, and nothing is left pending."""
    async with _no_task_left():
        await _ask_name_and_close(policy)


def _name_model(request: LLMRequest) -> ScriptedReply:
    instructions = _instructions(request) or ""
    if instructions.startswith("Welcome the caller. "):
        return ScriptedReply(text=WELCOME)
    return _model(request)


async def _ask_name_and_close(policy: TurnPolicy) -> None:
    turns = {"turn_detection": inference.TurnDetector()}
    model = ScriptedLLM(_name_model)
    async with turn_call(
        policy,
        (),
        agent=AsksNameFirst(),
        llm=model,
        settings="livekit-defaults",
        turn_handling=turns,
    ) as tc:
        call = tc.call
        await tc.segment_played(0, timeout=8)
        await call.sleep_until(call.now() + 0.8)
        call.audio_input.say_now("yes")
        await tc.segment_played(1, timeout=LINES["yes"].duration + 10)
        await call.wait_until(lambda: tc.controller.state == "listening", timeout=2)
        context = tc.describe()
        # only what LiveKit alone synthesizes (the tool-cap fallback waits for the cap)
        assert call.tts.texts == [ASK_NAME, WELCOME], context
        for index, text in enumerate([ASK_NAME, WELCOME]):
            _played_whole(tc, index, text)
        assert _history(tc) == [
            ("assistant", ASK_NAME),
            ("user", YES),
            ("assistant", WELCOME),
        ], context
        assert type(tc.session.current_agent) is AsksNameFirst, context
        locked = tc.effects(fx.LockSpeech)
        assert len(locked) == (1 if policy.greets_in_own_words else 0), context
        if locked:
            first = tc.events("agent_speech_created")[0].event.speech_id
            assert locked[0].speech_id == first, context
        assert tc.adapter.outcomes.counts == {}, context
