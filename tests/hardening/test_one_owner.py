"""Issue 11.4: one controller, one thread. A second thread is refused, never interleaved.

Two threads driving one controller used to swap effects silently: python-statemachine
queues an event sent while another thread's step runs and hands its effects to that
thread. Now the first thread to use a controller (or an adapter) owns it; any other
gets :class:`~turnfsm.ConcurrentUseError` and nothing changes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from hardening_calls import POLICY, call_events
from livekit.agents import AgentSession

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
    assert controller.is_ended
    with pytest.raises(ConcurrentUseError):
        controller.restore("listening", TurnContext())


def test_two_threads_racing_for_a_new_controller_get_one_owner() -> None:
    controller = TurnController(POLICY)
    start = threading.Barrier(8)
    outcomes: list[str] = []

    def race() -> None:
        start.wait()
        try:
            controller.handle(ev.CallRinging(at=0.0))
            outcomes.append("owner")
        except ConcurrentUseError:
            outcomes.append("refused")

    threads = [threading.Thread(target=race) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["owner"] + ["refused"] * 7
    assert len(controller.trace or ()) == 1


def test_a_step_re_entered_from_its_own_action_raises() -> None:
    holder: list[TurnController] = []

    class ReEntering(TurnRules):
        def begin_call(self) -> None:
            super().begin_call()
            holder[0].handle(ev.CallRinging(at=1.0))

    controller = TurnController(POLICY, rules_class=ReEntering)
    holder.append(controller)
    with pytest.raises(ConcurrentUseError, match="re-entered"):
        controller.handle(ev.CallAnswered(at=1.0))
    assert controller.state == "ringing"
    assert len(controller.trace or ()) == 0


async def test_the_adapter_refuses_a_dispatch_from_another_thread() -> None:
    adapter = TurnAdapter(AgentSession(), TurnController(POLICY))
    adapter.dispatch(ev.CallRinging(at=0.0))  # the loop's thread (not subscribed: ignored)
    error = in_thread(lambda: adapter.dispatch(ev.CallAnswered(at=1.0)))
    assert isinstance(error, ConcurrentUseError)
    assert "call_soon_threadsafe" in str(error)
