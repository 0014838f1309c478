"""The virtual clock: what it promises (time jumps, work off the loop costs nothing, ties keep
their order, wall-clock reads and ids follow the loop), that a call on it replays bit for bit,
and — on the wall clock — that it plays the same call as real time does."""

from __future__ import annotations

import asyncio
import concurrent.futures
import doctest
import threading
import time
import uuid
from pathlib import Path

import pytest
from livekit.agents import llm

from turnfsm.adapters.sim import clock
from turnfsm.adapters.sim.clock import SimulationDeadlock, SimulationTimeLimit, VirtualClockLoop
from turnfsm.adapters.sim.demo import run_scenario
from turnfsm.trace import Trace


def _run(main: object, **options: object) -> object:
    return clock.run(main, **options)  # type: ignore[arg-type]


def test_the_clock_jumps_to_the_next_timer_and_costs_no_wall_time() -> None:
    async def a_long_call() -> float:
        loop = asyncio.get_running_loop()
        start = loop.time()
        await asyncio.sleep(1800)
        return loop.time() - start

    started = clock._real_perf_counter()
    assert _run(a_long_call()) == 1800
    assert clock._real_perf_counter() - started < 60  # half an hour did not pass


def test_timers_due_late_in_a_long_simulation_fire_on_time() -> None:
    """Past a few hours a fixed firing tolerance vanishes below the time's float precision;
    the timer due now must still fire, at its time (it spun forever at the same instant)."""

    async def a_week_of_hourly_ticks() -> list[float]:
        loop = asyncio.get_running_loop()
        start = loop.time()
        ticks = []
        for _ in range(24 * 7):
            await asyncio.sleep(3600)
            ticks.append(loop.time() - start)
        return ticks

    ticks = clock.run(a_week_of_hourly_ticks(), time_limit=3600 * 24 * 8)
    assert ticks == [3600.0 * hour for hour in range(1, 24 * 7 + 1)]


def test_the_clock_modules_examples_hold() -> None:
    """Its docstrings are its user documentation (``--doctest-modules`` does not run on
    ``adapters/``: see tests/core/test_purity.py)."""
    results = doctest.testmod(clock)
    assert results.attempted > 0
    assert results.failed == 0


def test_timers_due_together_fire_in_the_order_they_were_set() -> None:
    async def main() -> list[int]:
        loop = asyncio.get_running_loop()
        fired: list[int] = []
        when = loop.time() + 1
        for n in range(50):
            loop.call_at(when, fired.append, n)
        await asyncio.sleep(2)
        return fired

    assert _run(main()) == list(range(50))


def test_default_executor_work_runs_inline_at_the_instant_it_was_asked_for() -> None:
    def busy() -> tuple[float, str]:
        time.sleep(0.05)  # real CPU / blocking time
        return time.perf_counter(), threading.current_thread().name

    async def main() -> tuple[float, float, str]:
        before = time.perf_counter()
        after, thread = await asyncio.get_running_loop().run_in_executor(None, busy)
        return before, after, thread

    before, after, thread = _run(main())  # type: ignore[misc]
    assert after == before
    assert thread == threading.current_thread().name


def test_explicit_executor_work_holds_the_clock_until_it_is_done() -> None:
    gate = threading.Event()

    def waits_for_gate() -> str:
        assert gate.wait(5)
        return "done"

    async def main() -> tuple[str, float]:
        loop = asyncio.get_running_loop()
        start = loop.time()
        loop.call_later(0.001, gate.set)  # only fires if the clock moves: it must not yet
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            threading.Timer(0.2, gate.set).start()
            result = await loop.run_in_executor(pool, waits_for_gate)
        return result, loop.time() - start

    result, elapsed = _run(main())  # type: ignore[misc]
    assert result == "done"
    assert elapsed == 0  # the thread's 0.2 wall seconds cost no virtual time


def test_an_idle_loop_with_nothing_scheduled_raises_instead_of_hanging(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(clock, "_IDLE_WAIT", 0.05)

    async def waits_forever() -> None:
        await asyncio.get_running_loop().create_future()

    with pytest.raises(SimulationDeadlock, match="idle with nothing scheduled"):
        _run(waits_forever())


def test_a_wait_without_timeout_under_running_timers_hits_the_time_limit() -> None:
    async def frames_forever() -> None:
        while True:
            await asyncio.sleep(0.02)

    with pytest.raises(SimulationTimeLimit, match="60 virtual seconds"):
        _run(frames_forever(), time_limit=60)


def test_wall_clock_reads_and_ids_follow_the_virtual_loop_only() -> None:
    async def main() -> tuple[list[float], float, float, list[uuid.UUID]]:
        reads = [time.time() for _ in range(3)]
        monotonic_before = time.monotonic()
        await asyncio.sleep(10)
        message = llm.ChatMessage(role="user", content=["hi"])
        return (
            reads,
            time.monotonic() - monotonic_before,
            message.created_at,
            [uuid.uuid4() for _ in range(3)],
        )

    reads, slept, created_at, ids = _run(main(), seed=3)  # type: ignore[misc]
    assert reads == sorted(set(reads))  # one instant, yet strictly increasing
    assert reads[0] == clock.WALL_CLOCK_EPOCH
    assert slept == 10
    assert created_at >= clock.WALL_CLOCK_EPOCH + 10  # LiveKit's captured default factory
    assert created_at < clock.WALL_CLOCK_EPOCH + 11
    assert ids == _run(main(), seed=3)[3]  # type: ignore[index]
    assert ids != _run(main(), seed=4)[3]  # type: ignore[index]
    assert abs(time.time() - clock._real_time()) < 1  # outside the loop: the real clock
    assert uuid.uuid4() != uuid.uuid4()


def _trace_shape(trace_file: Path) -> list[tuple[str, str, str, tuple[str, ...]]]:
    return [
        (step.before, step.event.name, step.after, tuple(e.name for e in step.effects))
        for step in Trace.read(trace_file)
    ]


def test_a_call_on_the_virtual_clock_replays_bit_for_bit(tmp_path: Path) -> None:
    """The same scenario and seed twice: byte-identical trace files."""
    files = [
        _run(run_scenario("interrupt_mid_answer", tmp_path / str(n), echo=lambda _: None), seed=1)
        for n in range(2)
    ]
    first, second = (Path(str(f)).read_bytes() for f in files)
    assert first == second
    assert b"speech_" in first


@pytest.mark.wall_clock
def test_the_virtual_clock_plays_the_call_real_time_plays(tmp_path: Path) -> None:
    """Smoke test on the wall clock: the demo's default call, once in real time and once on
    the virtual clock, takes the same path through the machine, step for step."""
    quiet = {"echo": lambda _: None, "settings": "sim"}
    real = asyncio.run(run_scenario("greeting_barge_in", tmp_path / "real", **quiet))
    virtual = _run(run_scenario("greeting_barge_in", tmp_path / "virtual", **quiet))
    assert _trace_shape(Path(str(virtual))) == _trace_shape(real)


def test_the_loop_is_a_selector_loop_users_can_make_themselves() -> None:
    loop = VirtualClockLoop(seed=5)
    try:
        assert loop.run_until_complete(asyncio.sleep(2, result="ok")) == "ok"
        assert loop.elapsed() == 2
    finally:
        loop.close()


async def test_an_async_test_runs_on_the_virtual_clock() -> None:
    assert isinstance(asyncio.get_running_loop(), VirtualClockLoop)


@pytest.mark.wall_clock
async def test_a_wall_clock_test_runs_on_an_ordinary_loop() -> None:
    """The mark must be on the test when pytest-asyncio parametrizes it, at collection: a mark
    added later (``pytest_collection_modifyitems``) changes nothing, silently."""
    assert not isinstance(asyncio.get_running_loop(), VirtualClockLoop)
