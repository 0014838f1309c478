"""The virtual clock under a busy-wait: a task polling with ``asyncio.sleep(0)`` for what a
timer will do must not freeze the clock (LiveKit's realtime tool path polls so for its
speech queue, behind a ``min_consecutive_speech_delay`` timer)."""

from __future__ import annotations

import asyncio

import pytest

from turnfsm.adapters.sim.clock import (
    BUSY_SPIN_LIMIT,
    BUSY_TURNS,
    SimulationDeadlock,
    VirtualClockLoop,
)


def test_a_busy_wait_lets_the_clock_reach_the_timer_it_waits_for() -> None:
    loop = VirtualClockLoop()

    async def poll_until_the_timer_fired() -> tuple[float, int]:
        fired = asyncio.Event()
        start = loop.time()
        loop.call_later(0.5, fired.set)
        turns = 0
        while not fired.is_set() and turns < 3 * BUSY_TURNS:  # bounded: fails, not hangs
            await asyncio.sleep(0)
            turns += 1
        return loop.time() - start, turns

    try:
        waited, turns = loop.run_until_complete(poll_until_the_timer_fired())
    finally:
        loop.close()
    assert waited == 0.5  # exactly the timer's delay: the jump lands on it
    assert BUSY_TURNS - 5 <= turns <= BUSY_TURNS  # after a bounded spin, not forever


def test_work_at_one_instant_does_not_move_the_clock() -> None:
    """Fewer turns than a busy-wait, each with work ready: the clock stands still."""
    loop = VirtualClockLoop()

    async def many_turns() -> float:
        start = loop.time()
        loop.call_later(0.5, lambda: None)
        for _ in range(BUSY_TURNS // 10):
            await asyncio.sleep(0)
        return loop.time() - start

    try:
        assert loop.run_until_complete(many_turns()) == 0.0
    finally:
        loop.close()


def test_a_busy_wait_nothing_can_end_is_a_deadlock_not_a_hang() -> None:
    """No timer and no thread: the poll spins for what nothing will do; the loop says so."""
    loop = VirtualClockLoop()
    turns = 0

    async def poll_forever() -> None:
        nonlocal turns
        while turns < 2 * BUSY_SPIN_LIMIT:  # bounded: fails, not hangs
            await asyncio.sleep(0)
            turns += 1

    try:
        with pytest.raises(SimulationDeadlock, match="busy-waits"):
            loop.run_until_complete(poll_forever())
    finally:
        loop.close()
    assert turns < BUSY_SPIN_LIMIT + BUSY_TURNS
