"""Issue 6.2: a storm of random LiveKit session events into an attached adapter.

Hypothesis generates sequences of real LiveKit event objects — user and agent state
changes, transcripts, user and assistant chat items (interrupted or not, duplicated),
``speech_created`` with real ``SpeechHandle`` objects (re-emitted, ended, interrupted),
tool events, errors and ``close`` — plus answers, loop turns and short pauses (timers of
tiny policies fire). Each sequence is emitted with ``session.emit`` into ONE real running
``AgentSession``, with a fresh strict controller attached for it (detached afterwards).
The adapter's levers act on that real session (``say``, ``generate_reply``,
``interrupt``, ``update_options`` ...), whose own events join the storm.

After every sequence: nothing escaped into LiveKit's emitter, no invariant was violated
(a strict controller's violation is logged as an error), the trace replays to itself, and
the input is released unless the machine is in a state that may mute it; after detaching,
the gate is open and turn detection is as it was.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from faultcalls import LogCapture, TaskLedger, attach_late, muting_states, outbound
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from livekit.agents import Agent, llm
from livekit.agents.voice import SpeechHandle
from livekit.agents.voice.events import (
    AgentStateChangedEvent,
    CloseEvent,
    CloseReason,
    ConversationItemAddedEvent,
    ErrorEvent,
    FunctionToolsExecutedEvent,
    SpeechCreatedEvent,
    ToolCallEnded,
    ToolCallStarted,
    ToolExecutionUpdatedEvent,
    UserInputTranscribedEvent,
    UserStateChangedEvent,
)

from turnfsm import TurnController, TurnPolicy
from turnfsm import events as ev
from turnfsm.adapters.livekit import TurnAdapter, adapter_for
from turnfsm.adapters.sim import ScriptedLLM, SimulatedCall
from turnfsm.adapters.sim.clock import VirtualClockLoop
from turnfsm.controller import replay

EXAMPLES = 200

POLICIES: tuple[TurnPolicy, ...] = (
    outbound(),
    outbound(greeting_lock="mute_input", greeting_overlap="drop"),
    outbound(greeting_lock="mute_input", mute_input_during_tools=True, max_tool_steps=1),
    outbound(greeting_overlap="drop", interrupted_text="drop"),
    outbound(await_user_timeout=0.01, on_await_user_timeout="hang_up"),
    outbound(max_call_duration=0.03, idle_timeout=0.01, idle_max_reprompts=1),
    TurnPolicy(direction="inbound", greeting="Welcome to Acme."),
    TurnPolicy(direction="inbound", first_speaker="user", idle_timeout=0.01),
)
USER_STATES = ("listening", "speaking", "away")
AGENT_STATES = ("initializing", "listening", "thinking", "speaking")
TEXTS = ("Hello?", "Yes, that works for me.", "Wait, stop, stop.", "")
SLOTS = 3

Action = tuple[Any, ...]

COMMON_ACTIONS = st.one_of(
    st.tuples(st.just("user_state"), st.sampled_from(USER_STATES), st.sampled_from(USER_STATES)),
    st.tuples(
        st.just("agent_state"), st.sampled_from(AGENT_STATES), st.sampled_from(AGENT_STATES)
    ),
    st.tuples(st.just("transcript"), st.sampled_from(TEXTS), st.booleans()),
    st.tuples(st.just("user_item"), st.integers(0, SLOTS - 1)),
    st.tuples(st.just("assistant_item"), st.integers(0, SLOTS - 1), st.booleans()),
    st.tuples(
        st.just("speech_created"),
        st.integers(0, SLOTS - 1),
        st.sampled_from(("say", "generate_reply")),
    ),
    st.tuples(st.just("speech_done"), st.integers(0, SLOTS - 1), st.booleans()),
    st.tuples(st.just("tool_update"), st.sampled_from(("started", "ended"))),
    st.tuples(st.just("tools_executed"), st.integers(1, 3)),
    st.tuples(st.just("answer")),
    st.tuples(st.just("tick")),
    st.tuples(st.just("pause")),
)
ENDING_ACTIONS = st.one_of(st.tuples(st.just("error"), st.booleans()), st.tuples(st.just("close")))
ACTIONS = st.integers(0, 19).flatmap(lambda n: ENDING_ACTIONS if n == 0 else COMMON_ACTIONS)
"""One action in twenty may end the call (an error or a close), so most storms run on."""


@dataclass
class Stats:
    sequences: int = 0
    events: int = 0
    steps: int = 0
    visited: collections.Counter[str] = field(default_factory=collections.Counter)
    """In how many sequences the machine was in each state."""
    lever_failures: collections.Counter[str] = field(default_factory=collections.Counter)


@dataclass
class Storm:
    loop: asyncio.AbstractEventLoop
    call: SimulatedCall
    logs: LogCapture
    ledger: TaskLedger
    stats: Stats = field(default_factory=Stats)

    @property
    def session(self) -> Any:
        return self.call.session

    async def run(self, policy: TurnPolicy, answered: bool, actions: list[Action]) -> None:
        session = self.session
        turn_detection = session.turn_detection
        discard = session.options.interruption["discard_audio_if_uninterruptible"]
        first_record = len(self.logs.records)
        controller = TurnController(policy, strict=True, keep_text=True)
        hang_ups: list[str] = []
        adapter = attach_late(session, controller, end_call=hang_ups.append)
        handles: dict[int, SpeechHandle] = {}
        users: dict[int, llm.ChatMessage] = {}
        assistants: dict[int, llm.ChatMessage] = {}

        def handle(slot: int) -> SpeechHandle:
            return handles.setdefault(slot, SpeechHandle.create())

        try:
            # what a session start looks like to a freshly attached adapter
            session.emit(
                "agent_state_changed",
                AgentStateChangedEvent(old_state="initializing", new_state="listening"),
            )
            if answered:
                adapter.dispatch(ev.CallAnswered(at=adapter.now()))
            for action in actions:
                await self._perform(action, adapter, handle, users, assistants)
            await asyncio.sleep(0)
            self._check(policy, controller, adapter, first_record)
        finally:
            adapter.detach()
            session.input.audio = self.call.audio_input  # unlink this adapter's gate
            for speech in handles.values():
                speech._mark_done()
            await self._quiet()
        assert session.turn_detection == turn_detection
        assert session.options.interruption["discard_audio_if_uninterruptible"] == discard
        assert adapter.gate is None or not adapter.gate.muted
        assert adapter.port.timers == {}
        assert adapter_for(session) is None
        self.stats.sequences += 1
        self.stats.events += len(actions)
        assert controller.trace is not None
        self.stats.steps += len(controller.trace)
        self.stats.visited.update({step.after for step in controller.trace})

    async def _perform(
        self,
        action: Action,
        adapter: TurnAdapter,
        handle: Callable[[int], SpeechHandle],
        users: dict[int, llm.ChatMessage],
        assistants: dict[int, llm.ChatMessage],
    ) -> None:
        session = self.session
        kind = action[0]
        if kind == "user_state":
            session.emit(
                "user_state_changed",
                UserStateChangedEvent(old_state=action[1], new_state=action[2]),
            )
        elif kind == "agent_state":
            session.emit(
                "agent_state_changed",
                AgentStateChangedEvent(old_state=action[1], new_state=action[2]),
            )
        elif kind == "transcript":
            session.emit(
                "user_input_transcribed",
                UserInputTranscribedEvent(transcript=action[1], is_final=action[2]),
            )
        elif kind == "user_item":
            message = users.setdefault(
                action[1], llm.ChatMessage(role="user", content=[TEXTS[action[1]]])
            )
            session.emit("conversation_item_added", ConversationItemAddedEvent(item=message))
        elif kind == "assistant_item":
            message = assistants.setdefault(
                action[1],
                llm.ChatMessage(
                    role="assistant", content=["Sure, one moment."], interrupted=action[2]
                ),
            )
            session.emit("conversation_item_added", ConversationItemAddedEvent(item=message))
        elif kind == "speech_created":
            session.emit(
                "speech_created",
                SpeechCreatedEvent(
                    user_initiated=True, source=action[2], speech_handle=handle(action[1])
                ),
            )
        elif kind == "speech_done":
            speech = handle(action[1])
            if action[2] and not speech.done():
                speech.interrupt(force=True)
            speech._mark_done()
        elif kind == "tool_update":
            call = llm.FunctionCall(call_id="call_storm", name="lookup", arguments="{}")
            update: Any = (
                ToolCallStarted(function_call=call)
                if action[1] == "started"
                else ToolCallEnded(id="call_storm", call_id="call_storm", status="done")
            )
            session.emit("tool_execution_updated", ToolExecutionUpdatedEvent(update=update))
        elif kind == "tools_executed":
            ids = [f"call_{i}" for i in range(action[1])]
            session.emit(
                "function_tools_executed",
                FunctionToolsExecutedEvent(
                    function_calls=[
                        llm.FunctionCall(call_id=i, name="lookup", arguments="{}") for i in ids
                    ],
                    function_call_outputs=[
                        llm.FunctionCallOutput(
                            call_id=i, name="lookup", output="9", is_error=False
                        )
                        for i in ids
                    ],
                ),
            )
        elif kind == "error":
            error = llm.LLMError(
                timestamp=0.0, label="storm", error=RuntimeError("storm"), recoverable=action[1]
            )
            session.emit("error", ErrorEvent(error=error, source=session.llm))
        elif kind == "close":
            session.emit("close", CloseEvent(reason=CloseReason.PARTICIPANT_DISCONNECTED))
        elif kind == "answer":
            adapter.dispatch(ev.CallAnswered(at=adapter.now()))
        elif kind == "tick":
            await asyncio.sleep(0)
        elif kind == "pause":
            await asyncio.sleep(0.005)
        else:  # pragma: no cover - the strategy and this table must agree
            raise AssertionError(f"unknown action {action!r}")

    def _check(
        self, policy: TurnPolicy, controller: TurnController, adapter: TurnAdapter, first: int
    ) -> None:
        records = self.logs.records[first:]
        errors = [r.getMessage() for r in records if r.levelno >= logging.ERROR]
        assert errors == [], "\n".join(errors)
        assert self.logs.escapes == []
        for record in records:
            if record.levelno == logging.WARNING:
                self.stats.lever_failures[record.getMessage().split(" failed")[0]] += 1
        trace = controller.trace
        assert trace is not None
        assert replay(trace, keep_text=True).steps == trace.steps
        attached = adapter_for(self.session) is adapter
        state = controller.state
        gate = adapter.gate
        if gate is not None and gate.muted:
            assert attached, "input muted after detaching"
            assert state in muting_states(policy), f"input muted in {state}"
        if adapter.held_turn_settings is not None:
            assert attached, "user turns held after detaching"
            assert state in ("greeting", "listening"), f"user turns held in {state}"

    async def _quiet(self) -> None:
        """Stop whatever the levers started on the real session before the next sequence."""
        session = self.session
        session.clear_user_turn()
        try:
            await asyncio.wait_for(session.interrupt(force=True), timeout=2.0)
        except RuntimeError:
            pass
        await asyncio.sleep(0)


@pytest.fixture(scope="module")
def storm() -> Iterator[Storm]:
    loop = VirtualClockLoop()
    ledger = TaskLedger()
    ledger.install(loop)
    call = SimulatedCall(
        (),
        agent=Agent(instructions="You are on a call."),
        llm=ScriptedLLM(chars_per_second=10_000, time_to_first_token=0.0),
    )
    loop.run_until_complete(call.start())
    # text-only replies: a greeting is over in milliseconds instead of seconds of audio
    call.session.output.audio = None
    try:
        with LogCapture() as logs:
            yield Storm(loop, call, logs, ledger)
    finally:
        loop.run_until_complete(call.aclose())
        loop.run_until_complete(asyncio.sleep(0.2))
        loop.close()


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    policy=st.sampled_from(POLICIES),
    answered=st.booleans(),
    actions=st.lists(ACTIONS, min_size=8, max_size=40),
)
def test_random_event_storms_break_nothing(
    storm: Storm, policy: TurnPolicy, answered: bool, actions: list[Action]
) -> None:
    storm.loop.run_until_complete(storm.run(policy, answered, actions))


def test_the_storm_covered_every_state(storm: Storm, summary_line: Callable[[str], None]) -> None:
    stats = storm.stats
    summary_line(
        f"fault storm: {stats.sequences} sequences, {stats.events} LiveKit events, "
        f"{stats.steps} machine steps; sequences visiting each state {dict(stats.visited)}; "
        f"lever failures logged {dict(stats.lever_failures)}; "
        f"{len(storm.logs.records)} turnfsm log records"
    )
    assert stats.sequences >= EXAMPLES
    assert set(stats.visited) >= {"awaiting_user", "greeting", "listening", "speaking", "ended"}
