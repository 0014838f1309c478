"""The realtime model's activity: a region beside the call's line, not flags.

``model_unlinked`` until a realtime model is linked (a pipeline stays there), then
``model_free ⇄ model_responding``, and ``model_cancelling`` while a ``response.cancel`` is
on its way, follow what the model's link reports from the call's start; the waits for a
free model read the region, and the model's replies are paused by the states that hold
the pause (the states before the greeting, on a call with one, and the greeting)."""

from __future__ import annotations

import attrs
import pytest

from turnfsm import TurnController, TurnPolicy
from turnfsm import effects as fx
from turnfsm import events as ev
from turnfsm.context import TurnContext
from turnfsm.engine import ENGINES, EngineName

OUTBOUND = TurnPolicy(direction="outbound", greeting="Hi, it's Ada.")
LINK = ev.RealtimeModelLinked(at=0.0, replies_to_turns=True)
ON_REQUEST = ("turn_replies_on_request", "tool_replies_on_request")
"""What the model answers on its own, before its link (and on a pipeline): nothing."""
ANSWERS_TURNS = ("auto_turn_replies", "tool_replies_on_request")
"""What :data:`LINK`'s model answers on its own: the caller's turns."""


def linked(engine: EngineName = "compiled") -> TurnController:
    controller = TurnController(OUTBOUND, strict=True, engine=engine)
    assert controller.handle(LINK) == (fx.PauseModelReplies(),)  # before the greeting
    return controller


@pytest.mark.parametrize("engine", ENGINES)
def test_a_response_created_while_ringing_holds_the_greeting(engine: EngineName) -> None:
    """The region runs beside the whole call: what the model does before the answer
    still holds the greeting (I9), as the live call's own region could not tell."""
    controller = linked(engine)
    controller.handle(ev.ModelResponseCreated(at=0.1, response_id="r1"))
    assert controller.configuration == ("ringing", "model_responding", *ANSWERS_TURNS)
    controller.handle(ev.CallAnswered(at=1.0))
    assert controller.configuration[-3:] == ("model_responding", *ANSWERS_TURNS)
    effects = controller.handle(ev.UserTurnCommitted(at=2.0, text="Hello?", item_id="u1"))
    assert controller.configuration[0] == "greeting_awaiting_model"
    assert not any(isinstance(effect, fx.StartGreeting) for effect in effects)
    effects = controller.handle(ev.ModelResponseDone(at=2.5, response_id="r1"))
    # the region frees the model, and the greeting's wait ends in the same step
    assert controller.configuration == (
        "greeting_requested",
        "caller_silent",
        "tools_open",
        "reply_free",
        "agent_keeps_call",
        "model_free",
        *ANSWERS_TURNS,
    )
    assert any(isinstance(effect, fx.StartGreeting) for effect in effects)


@pytest.mark.parametrize("engine", ENGINES)
def test_only_the_answer_to_the_last_cancel_frees_the_model(engine: EngineName) -> None:
    controller = linked(engine)
    for cancel in ("c1", "c2"):
        controller.handle(ev.ModelCancelSent(at=0.2, cancel_id=cancel))
    assert controller.configuration == ("ringing", "cancelling_idle", *ANSWERS_TURNS)
    assert controller.context.pending_cancels == {"c1", "c2"}
    # an answer to a cancel the machine never took (sent before the link) frees nothing
    controller.handle(ev.ModelCancelAnswered(at=0.3, cancel_id="c0"))
    controller.handle(ev.ModelCancelAnswered(at=0.4, cancel_id="c1"))
    assert controller.configuration == ("ringing", "cancelling_idle", *ANSWERS_TURNS)
    controller.handle(ev.ModelResponseCreated(at=0.5, response_id="r1"))
    assert controller.configuration == ("ringing", "cancelling_active", *ANSWERS_TURNS)
    controller.handle(ev.ModelCancelAnswered(at=0.6, cancel_id="c2"))
    assert controller.configuration == ("ringing", "model_responding", *ANSWERS_TURNS)
    assert controller.context.pending_cancels == frozenset()


def test_a_pipeline_stays_unlinked() -> None:
    """No realtime model is linked: its events are taken by no state."""
    controller = TurnController(OUTBOUND, strict=True)
    controller.handle(ev.CallAnswered(at=1.0))
    for event in (
        ev.ModelResponseCreated(at=1.1, response_id="r1"),
        ev.ModelCancelSent(at=1.2, cancel_id="c1"),
        ev.ModelCancelAnswered(at=1.3, cancel_id="c1"),
    ):
        assert controller.handle(event) == ()
        assert controller.configuration == (
            "awaiting_user",
            "caller_silent",
            "tools_open",
            "reply_free",
            "agent_keeps_call",
            "model_unlinked",
            *ON_REQUEST,
        )
        assert controller.context.pending_cancels == frozenset()


@pytest.mark.parametrize(
    ("beside", "context", "refused"),
    [
        (("model_unlinked", "auto_turn_replies"), TurnContext(), "only with one linked"),
        (("model_unlinked", "auto_tool_replies"), TurnContext(), "only with one linked"),
        (("cancelling_idle",), TurnContext(), "pending_cancels"),
        (
            ("model_free",),
            TurnContext(pending_cancels=frozenset({"c1"})),
            "pending",
        ),
        (
            ("cancelling_active",),
            TurnContext(pending_cancels=frozenset({"c1"})),
            None,
        ),
        (("model_free", "auto_turn_replies", "auto_tool_replies"), TurnContext(), None),
    ],
)
def test_restore_holds_the_regions_to_the_model_linked_and_its_cancels(
    beside: tuple[str, ...], context: TurnContext, refused: str | None
) -> None:
    """What a model answers on its own is a linked model's; its region is cancelling
    exactly while cancels are on their way. (Regions left out are in their initial
    states: nothing answered on its own.)"""
    controller = TurnController(OUTBOUND)
    if refused is None:
        controller.restore(("ringing", *beside), context)
        assert controller.configuration == ("ringing", *beside, *ON_REQUEST[len(beside) - 1 :])
        return
    with pytest.raises(ValueError, match=refused):
        controller.restore(("ringing", *beside), context)


def test_the_states_that_hold_the_pause_pause_and_resume_once() -> None:
    """Paused from the link, before the greeting: going on into the greeting pauses
    nothing again, and its end resumes once; hanging up before it resumes too."""
    controller = linked()
    effects = controller.handle(ev.CallAnswered(at=1.0))
    assert not any(isinstance(effect, fx.PauseModelReplies) for effect in effects)
    effects = controller.handle(ev.UserTurnCommitted(at=2.0, text="Hello?", item_id="u1"))
    assert not any(isinstance(effect, fx.PauseModelReplies) for effect in effects)
    controller.handle(ev.AgentSpeechCreated(at=2.1, speech_id="g", source="say"))
    effects = controller.handle(ev.AgentSpeechEnded(at=4.0, speech_id="g"))
    assert [e for e in effects if isinstance(e, fx.ResumeModelReplies)] == [
        fx.ResumeModelReplies()
    ]
    assert controller.state == "listening"

    before_the_greeting = linked()
    before_the_greeting.handle(ev.CallAnswered(at=1.0))
    effects = before_the_greeting.handle(ev.CallEnded(at=2.0, reason="hangup"))
    assert [type(effect) for effect in effects][-2:] == [fx.ResumeModelReplies, fx.EndCall]


def test_a_model_linked_in_the_greeting_is_paused_through_it() -> None:
    """The greeting holds the pause whenever the model answers turns itself: one linked
    only once the greeting began (a late link) is paused at once, and resumed at its end."""
    controller = TurnController(OUTBOUND, strict=True)
    controller.handle(ev.CallAnswered(at=1.0))
    controller.handle(ev.UserTurnCommitted(at=2.0, text="Hello?", item_id="u1"))
    assert controller.state == "greeting"
    assert controller.handle(LINK) == (fx.PauseModelReplies(),)
    controller.handle(ev.AgentSpeechCreated(at=2.1, speech_id="g", source="say"))
    effects = controller.handle(ev.AgentSpeechEnded(at=4.0, speech_id="g"))
    assert fx.ResumeModelReplies() in effects


@pytest.mark.parametrize("engine", ENGINES)
def test_the_link_tells_each_region_what_the_model_answers_on_its_own(
    engine: EngineName,
) -> None:
    """One link, one step: the model's activity and what it answers on its own move
    together; a model answering only tool output pauses nothing. A second link changes
    nothing, whatever it tells."""
    controller = TurnController(OUTBOUND, strict=True, engine=engine)
    tools_only = ev.RealtimeModelLinked(at=0.0, replies_to_tool_output=True)
    assert controller.handle(tools_only) == ()
    assert controller.configuration == ("ringing", "model_free", *ANSWERS_TOOL_OUTPUT)
    assert controller.handle(LINK) == ()
    assert controller.configuration == ("ringing", "model_free", *ANSWERS_TOOL_OUTPUT)


ANSWERS_TOOL_OUTPUT = ("turn_replies_on_request", "auto_tool_replies")
"""What a model told to answer tool output alone answers on its own."""


@pytest.mark.parametrize("engine", ENGINES)
def test_a_model_seen_answering_tool_output_in_the_conversation_does_so_from_then_on(
    engine: EngineName,
) -> None:
    """Its own reply after tool output, in the conversation, moves the region for good:
    the capped final reply then waits for the model's own answer (``model_reply_wait``).
    Before the conversation (the greeting suppresses it) it tells nothing."""
    policy = TurnPolicy(greeting="Hi.", max_tool_steps=1)
    controller = TurnController(policy, strict=True, engine=engine)
    controller.handle(ev.RealtimeModelLinked(at=0.0))
    controller.handle(ev.SessionStarted(at=0.1))
    assert controller.state == "greeting"
    tool_reply = ev.ModelReplyStarted(at=0.2, speech_id="m0", after_tool_output=True)
    assert controller.handle(tool_reply) == (fx.SuppressReply(speech_id="m0"),)
    assert controller.configuration[-1] == "tool_replies_on_request"
    controller.handle(ev.AgentSpeechCreated(at=0.3, speech_id="g", source="say"))
    controller.handle(ev.AgentSpeechEnded(at=1.0, speech_id="g"))
    assert controller.state == "listening"
    assert controller.handle(attrs.evolve(tool_reply, at=1.1, speech_id="m1")) == ()
    assert controller.configuration[-1] == "auto_tool_replies"
    # the next user turn's step is capped: the cap waits for the model's own answer
    controller.handle(ev.UserTurnCommitted(at=2.0, text="Book it", item_id="u1"))
    controller.handle(ev.AgentSpeechCreated(at=2.1, speech_id="s1"))
    controller.handle(ev.ToolStepStarted(at=2.2, speech_id="s1"))
    controller.handle(ev.AgentSpeechEnded(at=2.3, speech_id="s1"))
    effects = controller.handle(ev.ToolStepFinished(at=2.4, speech_id="s1"))
    assert "final_awaits_model_reply" in controller.configuration
    assert fx.StartTimer(timer="model_reply", seconds=policy.model_reply_wait) in effects


def test_a_model_told_to_answer_tool_output_restores_before_the_conversation() -> None:
    """The link tells it before the call starts: a snapshot taken in ``start`` or the
    greeting restores. (As a context flag scoped to the conversation, where the explorer
    only ever saw it set, restore() refused such a call's own snapshots there.)"""
    policy = TurnPolicy(greeting="Hi.")
    controller = TurnController(policy, strict=True)
    controller.handle(ev.RealtimeModelLinked(at=0.0, replies_to_tool_output=True))

    def restores() -> None:
        configuration, context = controller.snapshot()
        assert configuration[-1] == "auto_tool_replies"
        TurnController(policy).restore(configuration, context)

    restores()
    controller.handle(ev.SessionStarted(at=0.1))
    assert controller.state == "greeting"
    restores()
