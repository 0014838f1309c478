"""Issue 11.4: one controller, one thread. A second thread is refused, never interleaved.

Two threads driving one controller used to swap effects silently: python-statemachine
queues an event sent while another thread's step runs and hands its effects to that
thread. Now the first thread to use a controller (or an adapter) owns it; any other
gets :class:`~turnfsm.ConcurrentUseError` and nothing changes.
"""

from __future__ import annotations

import pickle
import threading
from collections.abc import Callable

import pytest
from hardening_calls import POLICY, call_events
from livekit.agents import AgentSession
from statemachine import State, StateChart

from turnfsm import ConcurrentUseError, TurnController
from turnfsm import events as ev
from turnfsm.adapters.livekit import TurnAdapter
from turnfsm.context import TurnContext
from turnfsm.rules import TurnRules


def in_thread(work: Callable[[], object]) -> BaseException | None:
    """Run ``work`` in a new thread; what it raised, if anything."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as error:  # noqa: BLE001 - handed back to the test
            raised.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return raised[0] if raised else None


def test_a_second_threads_handle_raises_and_changes_nothing() -> None:
    controller = TurnController(POLICY)
    events = list(call_events(2))
    controller.handle(events[0])
    before = (controller.state, controller.snapshot(), len(controller.trace or ()))
    error = in_thread(lambda: controller.handle(events[1]))
    assert isinstance(error, ConcurrentUseError)
    assert "belongs to thread" in str(error)
    assert (controller.state, controller.snapshot(), len(controller.trace or ())) == before
    for event in events[1:]:  # the owner goes on as if nothing happened
        controller.handle(event)
    assert controller.is_ended


def test_the_owner_is_the_first_thread_to_use_it() -> None:
    """Built in one thread, driven from another (a worker): that is one owner."""
    controller = TurnController(POLICY)
    assert in_thread(lambda: [controller.handle(e) for e in call_events(1)]) is None
    with pytest.raises(ConcurrentUseError):
        controller.restore("listening", TurnContext())
    with pytest.raises(ConcurrentUseError):
        assert controller.is_ended


def test_two_threads_racing_for_a_new_controller_get_one_owner() -> None:
    controller = TurnController(POLICY)
    start = threading.Barrier(8)
    outcomes: list[str] = []

    def race() -> None:
        start.wait()
        try:
            controller.handle(ev.CallRinging(at=0.0))
            outcomes.append(f"owner, {len(controller.trace or ())} step recorded")
        except ConcurrentUseError:
            outcomes.append("refused")

    threads = [threading.Thread(target=race) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["owner, 1 step recorded"] + ["refused"] * 7


def test_a_step_re_entered_from_its_own_action_raises() -> None:
    holder: list[TurnController] = []

    class ReEntering(TurnRules):
        def start_timers(self, state: State, machine: StateChart) -> None:
            super().start_timers(state, machine)
            holder[0].handle(ev.CallRinging(at=1.0))

    controller = TurnController(POLICY, rules_class=ReEntering)
    holder.append(controller)
    with pytest.raises(ConcurrentUseError, match="during a step"):
        controller.handle(ev.CallAnswered(at=1.0))
    assert controller.state == "ringing"
    assert len(controller.trace or ()) == 0


async def test_the_adapter_refuses_a_dispatch_from_another_thread() -> None:
    adapter = TurnAdapter(AgentSession(), TurnController(POLICY))
    adapter.dispatch(ev.CallRinging(at=0.0))  # the loop's thread (not subscribed: ignored)
    error = in_thread(lambda: adapter.dispatch(ev.CallAnswered(at=1.0)))
    assert isinstance(error, ConcurrentUseError)
    assert "call_soon_threadsafe" in str(error)


# -- issue 22: reads, re-entry and pickling ---------------------------------------------------

READS: dict[str, Callable[[TurnController], object]] = {
    "state": lambda c: c.state,
    "configuration": lambda c: c.configuration,
    "context": lambda c: c.context,
    "snapshot()": lambda c: c.snapshot(),
    "handled_events": lambda c: c.handled_events,
    "is_ended": lambda c: c.is_ended,
    "trace": lambda c: c.trace,
}
"""Every read of what a step changes: from another thread it could see half a step
(3.9 % of reads did, racing a driving thread)."""


@pytest.mark.parametrize("read", list(READS))
def test_a_read_from_another_thread_raises(read: str) -> None:
    controller = TurnController(POLICY)
    controller.handle(ev.CallRinging(at=0.0))
    error = in_thread(lambda: READS[read](controller))
    assert isinstance(error, ConcurrentUseError), error
    assert "belongs to thread" in str(error)
    READS[read](controller)  # the owner reads on


def test_the_settings_are_read_from_anywhere() -> None:
    """What no step changes cannot be torn: the policy, the call and the options."""
    controller = TurnController(POLICY)
    controller.handle(ev.CallRinging(at=0.0))
    settings = lambda: (controller.policy, controller.call, controller.keep_text)  # noqa: E731
    assert in_thread(settings) is None


class _ReEnteringSink:
    """A trace sink that acts on the controller while a step records."""

    def __init__(self, act: Callable[[TurnController], object]) -> None:
        self.act = act
        self.controller: TurnController | None = None
        self.raised: BaseException | None = None

    def start(self, policy: object, call: object) -> None:
        pass

    def append(self, step: object) -> None:
        assert self.controller is not None
        try:
            self.act(self.controller)
        except ConcurrentUseError as error:
            self.raised = error
            raise


@pytest.mark.parametrize(
    ("act", "event"),
    [
        (lambda c: c.handle(ev.CallRinging(at=9.0)), ev.CallRinging(at=1.0)),  # ignored
        (lambda c: c.handle(ev.CallRinging(at=9.0)), ev.CallAnswered(at=1.0)),  # handled
        (lambda c: c.snapshot(), ev.CallRinging(at=1.0)),
        (lambda c: c.state, ev.CallAnswered(at=1.0)),
    ],
    ids=["handle-in-ignored", "handle-in-handled", "snapshot-in-ignored", "state-in-handled"],
)
def test_acting_on_the_controller_during_its_step_raises(
    act: Callable[[TurnController], object], event: ev.Event
) -> None:
    """A sink re-entering ``handle()`` during an ignored event was not refused; a read
    during a step sees a state the step may still roll back."""
    sink = _ReEnteringSink(act)
    controller = TurnController(POLICY, trace_sink=sink)  # type: ignore[arg-type]
    sink.controller = controller
    with pytest.raises(ConcurrentUseError, match="during a step"):
        controller.handle(event)
    assert isinstance(sink.raised, ConcurrentUseError)
    assert controller.state == "ringing"
    assert len(controller.trace or ()) == 0


def test_pickling_is_refused_naming_snapshot_and_restore() -> None:
    """``pickle.dumps`` succeeded and ``pickle.loads`` failed."""
    controller = TurnController(POLICY)
    controller.handle(ev.CallAnswered(at=1.0))
    with pytest.raises(TypeError, match=r"snapshot\(\).*restore\(") as error:
        pickle.dumps(controller)
    assert "cannot be pickled" in str(error.value)
    configuration, context = controller.snapshot()
    elsewhere = TurnController(POLICY)
    elsewhere.restore(*pickle.loads(pickle.dumps((configuration, context))))
    assert elsewhere.snapshot() == controller.snapshot()
