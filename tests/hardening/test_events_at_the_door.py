"""Issue 11.1: events and snapshots are checked at the door; a step is all or nothing.

Each reproducer of the issue is here: a wrong-typed field used to move the machine and
then raise (the greeting lost, or never locked); ``"no"`` read as true; ``nan`` accepted
and written as bare ``NaN``; ``restore()`` taking any context. Now a bad event cannot be
built, a failing step changes nothing, and ``restore()`` refuses what no call can be in.
"""

from __future__ import annotations

import json
import re
import typing

import attrs
import pytest
from hardening_calls import POLICY, call_events

from turnfsm import InvariantViolation, Trace, TraceStep, TurnController, TurnPolicy
from turnfsm import effects as fx
from turnfsm import events as ev
from turnfsm.context import TurnContext
from turnfsm.rules import TurnRules
from turnfsm.trace import CallInfo

OUTBOUND = TurnPolicy(direction="outbound", greeting="Hi, it's Ada.")


def greeting_controller(**options: object) -> TurnController:
    """A controller whose next committed turn starts the greeting."""
    controller = TurnController(OUTBOUND, **options)  # type: ignore[arg-type]
    controller.handle(ev.CallAnswered(at=0.0))
    assert controller.state == "awaiting_user"
    return controller


# -- events are checked when built ----------------------------------------------------------


def test_a_wrong_typed_text_is_refused_and_the_greeting_still_starts() -> None:
    controller = greeting_controller()
    with pytest.raises(TypeError, match=r"^UserTurnCommitted\.text must be a string, got 42$"):
        controller.handle(ev.UserTurnCommitted(at=2.0, text=42))  # type: ignore[arg-type]
    assert controller.state == "awaiting_user"
    effects = controller.handle(ev.UserTurnCommitted(at=2.1, text="Hello?", item_id="u1"))
    assert any(isinstance(effect, fx.StartGreeting) for effect in effects)  # not lost


def test_an_unhashable_speech_id_is_refused_and_the_greeting_is_still_locked() -> None:
    controller = greeting_controller()
    controller.handle(ev.UserTurnCommitted(at=2.1, text="Hello?", item_id="u1"))
    with pytest.raises(TypeError, match=r"^AgentSpeechCreated\.speech_id must be a string"):
        ev.AgentSpeechCreated(at=2.2, speech_id=["g1"], source="say")  # type: ignore[arg-type]
    assert controller.context.greeting_speech_id is None
    effects = controller.handle(ev.AgentSpeechCreated(at=2.2, speech_id="g1", source="say"))
    assert fx.LockSpeech(speech_id="g1") in effects
    controller.handle(ev.AgentSpeechEnded(at=4.0, speech_id="g1", played_seconds=1.8))
    assert controller.state == "listening"  # the call leaves the greeting


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: ev.AgentSpeechEnded(at=1.0, interrupted="no"), "AgentSpeechEnded.interrupted"),
        (lambda: ev.SessionError(at=1.0, recoverable="no"), "SessionError.recoverable"),
        (lambda: ev.UserTranscript(at=1.0, is_final=1), "UserTranscript.is_final"),
    ],
)
def test_a_flag_must_be_a_real_boolean(build: typing.Callable[[], object], message: str) -> None:
    with pytest.raises(TypeError, match=rf"^{message} must be True or False"):
        build()


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0, "1.0", True, None])
def test_times_are_finite_seconds(bad: object) -> None:
    with pytest.raises((TypeError, ValueError), match=r"^UserSpeechStarted\.at must be"):
        ev.UserSpeechStarted(at=bad)  # type: ignore[arg-type]
    with pytest.raises((TypeError, ValueError), match=r"^AgentSpeechEnded\.played_seconds"):
        ev.AgentSpeechEnded(at=1.0, played_seconds=bad)  # type: ignore[arg-type]


def test_a_trace_is_always_valid_json() -> None:
    """``at=nan`` used to be written as a bare ``NaN``; it cannot be built any more, and
    the writer refuses a non-finite number whatever reaches it."""
    trace = Trace(policy=POLICY)
    step = ev.UserSpeechStarted(at=1.0)
    trace.append(TraceStep(float("nan"), step, "listening", "listening", ()))
    with pytest.raises(ValueError, match="Out of range float"):
        trace.to_jsonl()


BAD_VALUES: dict[str, list[object]] = {
    "float": [float("nan"), -0.5, "1", True, None, [1.0]],
    "int": [-1, 1.5, "2", True, None],
    "bool": ["no", 0, 1, None, "false"],
    "str": [42, None, ["x"], b"bytes", {"a": 1}],
}
"""Values each kind of field refuses (a ``str | None`` field takes ``None``)."""


REQUIRED: dict[str, object] = {
    "speech_id": "s1",
    "effect": "interrupt",
    "outcome": "done",
    "check": "O1",
}
"""Good values for the fields some events require, so that one bad field is the only one."""


def field_cases() -> list[tuple[type[ev.Event], str, object]]:
    cases = []
    for cls in ev.EVENT_TYPES:
        hints = typing.get_type_hints(cls, vars(ev))
        for field in attrs.fields(cls):
            annotation = hints[field.name]
            optional = type(None) in typing.get_args(annotation)
            base = next((a for a in typing.get_args(annotation) if a is not type(None)), None)
            if typing.get_origin(annotation) is typing.Literal:
                kind = "str"
                values: list[object] = ["not-one-of-them", 3, None]
            else:
                kind = (base if optional else annotation).__name__
                values = [v for v in BAD_VALUES[kind] if not (optional and v is None)]
            cases += [(cls, field.name, value) for value in values]
    return cases


@pytest.mark.parametrize(
    ("cls", "name", "value"),
    field_cases(),
    ids=lambda x: x.__name__ if isinstance(x, type) else repr(x),
)
def test_every_field_of_every_event_is_checked(
    cls: type[ev.Event], name: str, value: object
) -> None:
    required = {f.name for f in attrs.fields(cls) if f.default is attrs.NOTHING}
    fields = {**{k: v for k, v in REQUIRED.items() if k in required}, "at": 1.0, name: value}
    with pytest.raises((TypeError, ValueError)) as error:
        cls(**fields)  # type: ignore[arg-type]
    assert str(error.value).startswith(f"{cls.__name__}.{name} must be")


def test_good_events_still_build_and_integers_become_seconds() -> None:
    event = ev.AgentSpeechEnded(at=3, speech_id="s1", played_seconds=2)
    assert (event.at, event.played_seconds) == (3.0, 2.0)
    assert isinstance(event.at, float)


# -- handle() is all or nothing -------------------------------------------------------------


class HalfLockingRules(TurnRules):
    """A rules bug: the greeting's lock fails half-way (context changed, effect queued)."""

    def lock_greeting(self, ev: ev.AgentSpeechCreated) -> None:  # type: ignore[override]
        super().lock_greeting(ev)
        if ev.speech_id == "bad":
            raise RuntimeError("lock failed")


def observable(controller: TurnController) -> tuple[object, ...]:
    assert controller.trace is not None
    return (controller.state, controller.snapshot(), list(controller.trace))


def test_a_failing_step_changes_nothing() -> None:
    controller = greeting_controller(rules_class=HalfLockingRules)
    controller.handle(ev.UserTurnCommitted(at=2.1, text="Hello?", item_id="u1"))
    before = observable(controller)
    with pytest.raises(RuntimeError, match="lock failed"):
        controller.handle(ev.AgentSpeechCreated(at=2.2, speech_id="bad", source="say"))
    assert observable(controller) == before
    # the outbox was emptied too: the next step returns its own effects only
    effects = controller.handle(ev.AgentSpeechCreated(at=2.3, speech_id="g1", source="say"))
    assert effects == (fx.LockSpeech(speech_id="g1"),)
    assert controller.context.greeting_speech_id == "g1"
    assert controller.context.active_speeches == {"g1"}


def test_a_failing_step_into_the_end_leaves_the_machine_running() -> None:
    class FailingCleanUp(TurnRules):
        def end_call(self, ev: ev.CallEnded) -> None:
            super().end_call(ev)
            raise RuntimeError("clean-up failed")

    controller = greeting_controller(rules_class=FailingCleanUp)
    before = observable(controller)
    with pytest.raises(RuntimeError, match="clean-up failed"):
        controller.handle(ev.CallEnded(at=3.0))
    assert observable(controller) == before
    effects = controller.handle(ev.UserTurnCommitted(at=3.1, text="Hello?", item_id="u1"))
    assert any(isinstance(effect, fx.StartGreeting) for effect in effects)


def test_an_invariant_violation_changes_nothing() -> None:
    class InterruptingGreeting(TurnRules):
        def note_speech(self, ev: ev.AgentSpeechCreated) -> None:
            super().note_speech(ev)
            self.emit(fx.Interrupt(force=True))  # breaks I1: the greeting is locked

    controller = greeting_controller(strict=True, rules_class=InterruptingGreeting)
    controller.handle(ev.UserTurnCommitted(at=2.1, text="Hello?", item_id="u1"))
    controller.handle(ev.AgentSpeechCreated(at=2.2, speech_id="g1", source="say"))
    before = observable(controller)
    with pytest.raises(InvariantViolation, match="I1"):
        controller.handle(ev.AgentSpeechCreated(at=2.5, speech_id="s2"))  # after the greeting
    assert observable(controller) == before
    assert controller.context.active_speeches == {"g1"}


def test_a_failing_trace_sink_changes_nothing() -> None:
    class FullDisk:
        def __init__(self) -> None:
            self.fail = False

        def start(self, policy: TurnPolicy, call: CallInfo) -> None:
            pass

        def append(self, step: TraceStep) -> None:
            if self.fail:
                raise OSError(28, "No space left on device")

    sink = FullDisk()
    controller = greeting_controller(trace_sink=sink)
    before = observable(controller)
    sink.fail = True
    with pytest.raises(OSError, match="No space"):
        controller.handle(ev.UserTurnCommitted(at=2.1, text="Hello?", item_id="u1"))
    assert observable(controller) == before


def test_a_whole_call_after_failed_steps_matches_a_clean_one() -> None:
    """Every event is first sent once in a broken form (a failing rules action), then
    as it is: the call ends exactly as the same call without the failures."""

    class FailOnce(TurnRules):
        armed = True

        def emit(self, effect: fx.Effect) -> None:
            super().emit(effect)
            if FailOnce.armed:
                raise RuntimeError("injected")

    events = list(call_events(6))
    clean = TurnController(POLICY, strict=True)
    expected = [clean.handle(event) for event in events]
    flaky = TurnController(POLICY, strict=True, rules_class=FailOnce)
    got = []
    for event in events:
        FailOnce.armed = True
        try:
            got.append(flaky.handle(event))  # steps without effects never fail
        except RuntimeError:
            FailOnce.armed = False
            got.append(flaky.handle(event))
    assert got == expected
    assert flaky.trace == clean.trace


# -- restore() refuses impossible contexts ------------------------------------------------

CAPPED = TurnPolicy(direction="outbound", greeting="Hi", max_tool_steps=2)


def test_a_negative_tool_round_count_cannot_lift_the_cap() -> None:
    """The issue's reproducer: ``tool_rounds=-100`` let 6 rounds through a cap of 2."""
    controller = TurnController(CAPPED)
    with pytest.raises(ValueError, match=r"^TurnContext\.tool_rounds must be >= 0, got -100"):
        controller.restore("speaking", TurnContext(tool_rounds=-100))
    assert controller.state == "ringing"
    assert controller.context == TurnContext()


@pytest.mark.parametrize(
    ("context", "error", "message"),
    [
        (TurnContext(tool_rounds=3), ValueError, "tool_rounds must be <= 2"),
        (TurnContext(reprompts=1), ValueError, "reprompts must be <= 0"),  # no idle timer
        (TurnContext(active_speeches={"s1"}), TypeError, "active_speeches must be a frozenset"),  # type: ignore[arg-type]
        (TurnContext(active_speeches=frozenset({1})), TypeError, "items each must be a string"),  # type: ignore[arg-type]
        (TurnContext(dropped_speeches=frozenset({"s1"})), ValueError, "must be active"),
        (TurnContext(greeting_speech_id="g1"), ValueError, "'g1' is not an active speech"),
        (TurnContext(final_speech_id="s9"), ValueError, "'s9' is not an active speech"),
        # a speech in flight is the agent's turn (issue 24: O7 holds listening to that)
        (
            TurnContext(active_speeches=frozenset({"s1"})),
            ValueError,
            "active_speeches must be empty in 'listening' after a greeting, got ['s1']",
        ),
    ],
)
def test_restore_refuses_a_context_no_call_can_be_in(
    context: TurnContext, error: type[Exception], message: str
) -> None:
    controller = TurnController(CAPPED)
    with pytest.raises(error, match=re.escape(message)):
        controller.restore("listening", context)
    assert (controller.state, controller.context) == ("ringing", TurnContext())


def test_restore_refuses_a_handoff_outside_the_conversation() -> None:
    """A tool step hands the call over only where tool rounds are counted: the handoff's
    region is ``handing_off`` in the conversation alone; a tool loop running or
    interrupted since ran a round (the step that handed over left both)."""
    controller = TurnController(CAPPED)
    with pytest.raises(ValueError, match="hands the call over only in the conversation"):
        controller.restore(("greeting_requested", "handing_off"), TurnContext())
    assert (controller.state, controller.context) == ("ringing", TurnContext())
    controller.restore(("listening_open", "handing_off"), TurnContext())
    assert "handing_off" in controller.configuration
    interrupted = ("tool_loop", "tool_loop_interrupted", "handing_off")
    step = TurnContext(active_speeches=frozenset({"s1"}), tool_speech_id="s1")
    with pytest.raises(ValueError, match="at least 1 in 'tool_loop_interrupted' beside"):
        controller.restore(
            ("speaking", *interrupted[1:]), TurnContext(active_speeches=frozenset({"s1"}))
        )
    with pytest.raises(ValueError, match="at least 1 in 'tool_loop' beside"):
        controller.restore(("tool_loop", "handing_off"), step)
    controller.restore(interrupted, attrs.evolve(step, tool_rounds=1))


def test_restore_refuses_what_is_not_a_context_or_a_state() -> None:
    controller = TurnController(CAPPED)
    with pytest.raises(TypeError, match="context must be a TurnContext"):
        controller.restore("listening", {"started": True})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="configuration must be one of"):
        controller.restore(["listening"], TurnContext())  # type: ignore[arg-type]


def test_a_snapshot_restores() -> None:
    controller = TurnController(POLICY)
    for event in call_events(4):
        controller.handle(event)
        state, context = controller.snapshot()
        controller.restore(state, context)
    assert controller.is_ended


def test_a_redacted_trace_header_is_still_json_with_every_key() -> None:
    header = json.loads(TurnController(POLICY).trace.header())  # type: ignore[union-attr]
    assert set(header["policy"]) == set(POLICY.to_dict())
