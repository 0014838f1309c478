"""A LiveKit call site takes the machine's decision from the step it dispatched (issue
12.3): ``TurnAdapter.dispatch`` returns the step's effects, and a lever that must act on
the call site's own LiveKit event does so within that step; none leaves a decision on
the adapter for a later callback."""

from __future__ import annotations

from livekit.agents import AgentSession, FunctionToolsExecutedEvent, llm
from livekit.agents.voice.events import ToolCallStarted, ToolExecutionUpdatedEvent

from turnfsm import TurnController, TurnPolicy
from turnfsm import effects as fx
from turnfsm import events as ev
from turnfsm.adapters.livekit import attach
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
    assert controller.configuration == ("awaiting_user", "caller_speaking")  # then ran
    adapter.detach()
    assert adapter.dispatch(ev.CallEnded(at=adapter.now(), reason="hangup")) == ()


async def test_the_tool_reply_is_cancelled_on_the_event_being_handled() -> None:
    """At the cap the step that ``function_tools_executed`` dispatches cancels the reply
    on that very event; a round refused as it starts has no such event yet: refused, and
    decided again when its tools have run."""
    controller = TurnController(POLICY, strict=True, keep_text=True)
    session = AgentSession()
    adapter = attach(session, controller, end_call=lambda reason: None)
    context = TurnContext(  # the cap was reached and its final reply asked for
        tool_rounds=1, capped=True, tool_speech_id="s1", active_speeches=frozenset({"s1"})
    )
    controller.restore(("tool_loop", "caller_silent"), context)

    started = ToolExecutionUpdatedEvent(update=ToolCallStarted(function_call=CALL))
    session.emit("tool_execution_updated", started)  # a round past the cap starts
    outcomes = [s.event for s in controller.trace or () if s.event.name == "effect_outcome"]
    assert [(o.effect, o.outcome) for o in outcomes] == [("cancel_tool_reply", "refused")]

    event = tools_executed()
    assert event.has_tool_reply
    session.emit("function_tools_executed", event)
    assert not event.has_tool_reply  # LiveKit will not ask the model again
    outcomes = [s.event for s in controller.trace or () if s.event.name == "effect_outcome"]
    assert [(o.effect, o.outcome) for o in outcomes] == [
        ("cancel_tool_reply", "refused"),
        ("cancel_tool_reply", "done"),
    ]
    assert not hasattr(adapter, "cancelled_tool_replies")
    assert not hasattr(adapter, "rejected_turns")
    adapter.detach()
