"""A LiveKit call site takes the machine's decision from the step it dispatched (issue
12.3): ``TurnAdapter.dispatch`` returns the step's effects, and a lever that must act on
the call site's own LiveKit event does so within that step; none leaves a decision on
the adapter for a later callback. The greeting travels in the reply's own ``turn_ctx``.
"""

from __future__ import annotations

import pytest
from livekit.agents import AgentSession, FunctionToolsExecutedEvent, llm
from livekit.agents.voice.events import ToolCallStarted, ToolExecutionUpdatedEvent
from turncalls import turn_call

from turnfsm import TurnController, TurnPolicy
from turnfsm import effects as fx
from turnfsm import events as ev
from turnfsm.adapters.livekit import attach
from turnfsm.adapters.livekit.turn_hook import requested_greeting
from turnfsm.adapters.sim import LINES, CallScript, LLMRequest, ScriptedLLM, UserLine
from turnfsm.context import TurnContext
from turnfsm.trace import TraceStep

POLICY = TurnPolicy(direction="outbound", greeting="Hi.", max_tool_steps=1)


CALL = llm.FunctionCall(call_id="c1", name="lookup", arguments="{}")


def tools_executed() -> FunctionToolsExecutedEvent:
    output = llm.FunctionCallOutput(call_id="c1", name="lookup", output="9", is_error=False)
    return FunctionToolsExecutedEvent(function_calls=[CALL], function_call_outputs=[output])


async def test_dispatch_returns_its_steps_effects_and_queues_a_reentered_event() -> None:
    controller = TurnController(POLICY, strict=True)
    adapter = attach(AgentSession(), controller, end_call=lambda reason: None)
    returned_inside: list[tuple[fx.Effect, ...]] = []

    def dispatch_during_the_step(step: TraceStep) -> None:
        if step.event.name == "call_answered":
            returned_inside.append(adapter.dispatch(ev.UserSpeechStarted(at=adapter.now())))

    adapter.observers.append(dispatch_during_the_step)
    effects = adapter.dispatch(ev.CallAnswered(at=adapter.now()))
    assert effects == (fx.StartTimer(timer="await_user", seconds=POLICY.await_user_timeout),)
    assert returned_inside == [()]  # it waited behind the running step
    assert controller.configuration[:2] == ("awaiting_user", "caller_speaking")  # then ran
    adapter.detach()
    assert adapter.dispatch(ev.CallEnded(at=adapter.now(), reason="hangup")) == ()


async def test_the_tool_reply_is_cancelled_on_the_event_being_handled() -> None:
    """At the cap the step that ``function_tools_executed`` dispatches cancels the reply
    on that very event. A round past the cap asks for nothing as it starts: LiveKit
    reports it once its tools run, and can cancel its reply only when they have."""
    # (not strict: the safety monitor follows the turn from its own history, and a
    # restore gives it none of the rounds and the final reply the context says were)
    controller = TurnController(POLICY, keep_text=True)
    session = AgentSession()
    adapter = attach(session, controller, end_call=lambda reason: None)
    context = TurnContext(tool_rounds=1, tool_speech_id="s1", active_speeches=frozenset({"s1"}))
    # the cap was reached and its final reply asked for
    controller.restore(("tool_loop", "caller_silent", "final_reply_asked"), context)

    started = ToolExecutionUpdatedEvent(update=ToolCallStarted(function_call=CALL))
    session.emit("tool_execution_updated", started)  # a round past the cap starts
    assert controller.trace is not None
    assert controller.trace.steps[-1].event.name == "tool_step_started"
    assert controller.trace.steps[-1].effects == ()  # no lever could act on it

    event = tools_executed()
    assert event.has_tool_reply
    session.emit("function_tools_executed", event)
    assert not event.has_tool_reply  # LiveKit will not ask the model again
    outcomes = [s.event for s in controller.trace or () if s.event.name == "effect_outcome"]
    assert [(o.effect, o.outcome) for o in outcomes] == [("cancel_tool_reply", "done")]
    assert not hasattr(adapter, "cancelled_tool_replies")
    assert not hasattr(adapter, "rejected_turns")
    adapter.detach()


INSTRUCTIONS = "Greet the callee as Ada from Acme Dental, in one sentence."
MODEL_GREETING = "Hello, this is Ada from Acme Dental."


def _greets_when_asked(request: LLMRequest) -> str:
    return MODEL_GREETING if requested_greeting(request.chat_ctx) else "Anything else?"


async def test_the_greeting_travels_in_the_reply_to_the_first_words(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Under LiveKit's defaults (a preemptive reply to "Hello?" is prepared first): the
    turn hook's step writes the greeting into the ``turn_ctx`` LiveKit replies from; the
    model is asked once, with the callee's words and the instructions, without tools, and
    neither the request nor a reply to "Hello?" reaches the history. The prepared reply
    is dropped before LiveKit would find it invalidated (and warn about it on every
    call)."""
    policy = TurnPolicy(
        direction="outbound", greeting_instructions=INSTRUCTIONS, greet_on="end_of_turn"
    )
    model = ScriptedLLM(_greets_when_asked)
    script = CallScript([UserLine(2.0, "hello")])
    async with turn_call(policy, script, llm=model, settings="livekit-defaults") as tc:
        call = tc.call
        await tc.segment_played(0, timeout=8)
        context = tc.describe()

        (request,) = model.requests  # the preemptive reply never reached the model
        assert request.tool_names == [], context
        last_two = [(m.role, m.text_content) for m in request.chat_ctx.items[-2:]]
        assert last_two == [("user", LINES["hello"].text), ("system", INSTRUCTIONS)], context
        assert requested_greeting(request.chat_ctx) == ("instructions", INSTRUCTIONS)

        (greeting_start,) = [
            s.event
            for s in tc.steps
            if isinstance(s.event, ev.EffectOutcome) and s.event.effect == "start_greeting"
        ]
        assert greeting_start.outcome == "done", context

        assert call.tts.texts == [MODEL_GREETING], context
        assert call.audio_output.segments[0].interrupted is False, context
        history = [(m.role, m.text_content) for m in call.messages()]
        assert history == [("user", LINES["hello"].text), ("assistant", MODEL_GREETING)]
        agent_context = tc.session.current_agent.chat_ctx
        assert requested_greeting(agent_context) is None, context
        assert not hasattr(tc.adapter, "pending_greeting")
    invalidated = [r for r in caplog.records if "preemptive generation invalidated" in r.message]
    assert invalidated == []
