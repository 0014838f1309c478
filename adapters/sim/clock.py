"""A virtual-time event loop: a simulated call takes no wall time and runs the same way every time.

:class:`VirtualClockLoop` is an asyncio loop whose clock stands still while there is work to do and
jumps straight to the next timer when the loop would otherwise sleep. A 30-second call then ends in
the time its CPU work takes, and in an order fixed by the script and the seed, not by how busy the
machine is:

>>> import asyncio
>>> loop = VirtualClockLoop(seed=7)
>>> async def call() -> float:
...     start = loop.time()
...     await asyncio.sleep(30)
...     return loop.time() - start
>>> loop.run_until_complete(call())
30.0
>>> loop.close()

Four things make a LiveKit session deterministic on it:

* **Work off the loop costs no virtual time.** Functions sent to the default executor (the
  silero VAD's inference, ``asyncio.to_thread``) run inline, at the instant they were asked for,
  so the VAD still hears every frame but its CPU time never moves the clock. An explicit
  executor keeps its threads; while one of its jobs runs the clock does not move.
* **Wall-clock reads follow the loop.** LiveKit stamps events and messages with ``time.time()`` and
  measures with ``time.perf_counter()``; :func:`install_virtual_wall_clock` points ``time.time``,
  ``time.perf_counter``, ``time.monotonic`` (and their ``_ns`` forms) and ``uuid.uuid4`` at the
  running virtual loop, and at the real ones everywhere else (other threads, ordinary loops), so it
  can stay installed for the whole process. Each ``time.time()`` within one instant is a
  microsecond later than the one before: LiveKit orders chat items by ``created_at``. The
  monotonic clocks read the loop's time exactly, so a wait computed from them is one on the loop.
* **Simultaneous timers fire in the order they were set**, as they would in real time, instead of
  in the heap's order.
* **A busy-wait lets time pass.** A task that polls with ``await asyncio.sleep(0)`` keeps the
  loop from ever going idle, so its clock would stand still and a timer the poll waits for
  would never fire (LiveKit's realtime tool path polls so for its speech queue). After
  :data:`BUSY_TURNS` turns of the loop at one instant without a pause, the clock jumps to the
  next timer, as real time would pass while the task spins.

A loop that has nothing scheduled and no thread working for it can never wake up again: instead of
hanging, it raises :class:`SimulationDeadlock`. So does a busy-wait that spins for
:data:`BUSY_SPIN_LIMIT` turns with no timer to jump to.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import heapq
import math
import random
import selectors
import sys
import time
import uuid
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = [
    "BUSY_SPIN_LIMIT",
    "BUSY_TURNS",
    "SimulationDeadlock",
    "SimulationTimeLimit",
    "VirtualClockLoop",
    "install_virtual_wall_clock",
    "run",
    "running_virtual_loop",
]

_T = TypeVar("_T")

WALL_CLOCK_EPOCH = 1_767_225_600.0
"""What ``time.time()`` reads at virtual time zero (2026-01-01 UTC): only differences count."""

LOOP_TIME_ORIGIN = 1_000.0
"""``loop.time()`` at the start: not zero, so no ``started_at or ...`` takes a start for none."""

_READ_STEP = 1e-6
"""How much later each wall-clock read within one virtual instant is than the one before."""

BUSY_TURNS = 2_000
"""Turns of the loop at one instant, each with work ready, after which it is taken for a
busy-wait and the clock jumps to the next timer. The suite's calls take at most about 300
at one instant without polling (measured over the realtime, integration and sim tests)."""

BUSY_SPIN_LIMIT = 50 * BUSY_TURNS
"""Turns of a busy-wait at one instant with no timer to jump to after which the loop declares a
deadlock instead of spinning forever."""

_SAME_INSTANT = 1e-12
"""Timers this close to the current time are due now: one instant computed two ways (a delay
added to another time) differs by a rounding, and fires with the others, in order."""


def _resolution(now: float) -> float:
    """asyncio fires the timers due before ``now`` + the loop's resolution: `_SAME_INSTANT`,
    but never below one float step of ``now`` (a fixed 1e-12 vanishes below a float's
    precision after about 2.4 virtual hours, and the timer due now would never fire)."""
    return max(_SAME_INSTANT, math.ulp(now))


_IDLE_WAIT = 30.0
"""Wall seconds an idle loop waits for a thread to wake it before it declares a deadlock."""

_real_time = time.time
_real_time_ns = time.time_ns
_real_perf_counter = time.perf_counter
_real_perf_counter_ns = time.perf_counter_ns
_real_monotonic = time.monotonic
_real_monotonic_ns = time.monotonic_ns
_real_uuid4 = uuid.uuid4


class SimulationDeadlock(RuntimeError):
    """The virtual loop is idle with nothing scheduled: nothing can ever happen again."""


class SimulationTimeLimit(RuntimeError):
    """The virtual clock passed the loop's ``time_limit``: something waits without a timeout
    while timers keep firing (a call's audio frames do), which in real time would hang."""


class _OrderedTimer(asyncio.TimerHandle):
    """A timer that fires after every timer set earlier for the same instant."""

    __slots__ = ("_key",)

    def __init__(self, when: float, order: int, *args: Any) -> None:
        super().__init__(when, *args)
        self._key = (when, order)  # built once: the heap compares timers thousands of times

    def __lt__(self, other: asyncio.TimerHandle) -> bool:
        if isinstance(other, _OrderedTimer):
            return self._key < other._key
        return super().__lt__(other)


class _JumpingSelector(selectors.BaseSelector):
    """Never sleeps: where the loop would wait for its next timer, the clock jumps there.

    Registered file objects (the loop's self-pipe, any real socket) are still polled, without
    waiting. With nothing scheduled the loop can only be woken by a thread: the selector waits for
    that, and while a thread job of the loop's runs it waits instead of jumping.
    """

    def __init__(self, loop: VirtualClockLoop) -> None:
        self._loop = loop
        self._real = selectors.DefaultSelector()

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._real.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.modify(fileobj, events, data)

    def get_map(self) -> Any:
        return self._real.get_map()

    def close(self) -> None:
        self._real.close()

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout == 0 and len(self._real.get_map()) <= 1:
            # work is ready and only the loop's self-pipe is registered: nothing to poll
            # for (a thread's callback is queued without it; the pipe only wakes a loop
            # that waits, and is drained when the loop next would), so no system call
            self._loop.count_busy_turn()
            return []
        ready = self._real.select(0)
        if timeout == 0 and not ready:
            self._loop.count_busy_turn()
        if ready or timeout == 0:
            return ready
        if self._loop.threads_working():
            # a thread is computing for the loop: its result comes first, at this instant
            return self._real.select(timeout=None if timeout is None else _IDLE_WAIT)
        if timeout is None:
            ready = self._real.select(_IDLE_WAIT)
            if not ready and not self._loop.threads_working():
                raise SimulationDeadlock(
                    "the simulation is idle with nothing scheduled: every task waits for "
                    "something that nothing will do (a missing scripted reply, a queue nobody "
                    "feeds?)"
                )
            return ready
        self._loop.jump_to_next_timer()
        return []


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """An asyncio loop on a virtual clock (see the module's docstring).

    Args:
        seed: Seeds :attr:`random`, which also draws this loop's ``uuid.uuid4()`` values (once
            :func:`install_virtual_wall_clock` ran; the loop runs it), so ids are the same on
            every run of the same seed.
        time_limit: Virtual seconds after which the next jump raises
            :class:`SimulationTimeLimit` (a forgotten timeout costs seconds, not all memory).

    Attributes:
        random: The loop's random source, for anything in the simulation that draws.
    """

    def __init__(self, *, seed: int = 0, time_limit: float = 3600.0) -> None:
        self._now = LOOP_TIME_ORIGIN
        self._time_limit = time_limit
        self._last_read = -1.0  # the first read is the instant itself
        self._timer_order = 0
        self._busy_turns = 0
        self._busy_at = LOOP_TIME_ORIGIN
        self._threads_working = 0
        self.random = random.Random(seed)
        super().__init__(selector=_JumpingSelector(self))
        self._clock_resolution = _resolution(self._now)
        install_virtual_wall_clock()

    # the clock
    def time(self) -> float:
        return self._now

    def jump_to_next_timer(self) -> None:
        """Move the clock to the next timer's time, exactly (the selector does, when the loop
        would sleep): adding the wait to the clock instead would drift by a rounding per jump."""
        scheduled: list[asyncio.TimerHandle] = self._scheduled  # type: ignore[attr-defined]
        if scheduled and scheduled[0].when() > self._now:
            self._move_to(scheduled[0].when())
        if self.elapsed() > self._time_limit:
            raise SimulationTimeLimit(
                f"the simulation ran past its time limit of {self._time_limit:g} virtual seconds"
            )

    def _move_to(self, instant: float) -> None:
        self._now = instant
        self._clock_resolution = _resolution(instant)

    def count_busy_turn(self) -> None:
        """Counts a turn of the loop with work ready; after `BUSY_TURNS` at one instant, the
        clock jumps to the next timer (a task is busy-waiting for it)."""
        if self._now != self._busy_at:
            self._busy_at, self._busy_turns = self._now, 0
        self._busy_turns += 1
        if self._busy_turns % BUSY_TURNS:
            return
        scheduled: list[asyncio.TimerHandle] = self._scheduled  # type: ignore[attr-defined]
        if scheduled or self.threads_working():
            self._busy_turns = 0
            self.jump_to_next_timer()
        elif self._busy_turns >= BUSY_SPIN_LIMIT:
            # no timer to jump to and no thread working: the poll waits for what nothing does
            raise SimulationDeadlock(
                f"a task busy-waits ({self._busy_turns} turns of the loop at one instant) with "
                "no timer scheduled and no thread working: nothing can end its wait"
            )

    def elapsed(self) -> float:
        """Virtual seconds since the loop was made."""
        return self._now - LOOP_TIME_ORIGIN

    def wall_read(self) -> float:
        """Virtual seconds for a ``time.time()`` read: later than every such read before it."""
        now = self.elapsed()
        self._last_read = now if now > self._last_read else self._last_read + _READ_STEP
        return self._last_read

    # timers, in the order they were set when they fall due together
    def call_at(  # type: ignore[override]
        self,
        when: float,
        callback: Callable[..., object],
        *args: Any,
        context: contextvars.Context | None = None,
    ) -> asyncio.TimerHandle:
        self._check_closed()  # type: ignore[attr-defined]
        self._timer_order += 1
        timer = _OrderedTimer(when, self._timer_order, callback, args, self, context)
        heapq.heappush(self._scheduled, timer)  # type: ignore[attr-defined]
        timer._scheduled = True  # type: ignore[attr-defined]
        return timer

    # work off the loop
    def run_in_executor(  # type: ignore[override]
        self, executor: concurrent.futures.Executor | None, func: Callable[..., _T], *args: Any
    ) -> asyncio.Future[_T]:
        if executor is not None:
            return self._run_in_thread(executor, func, *args)
        future: asyncio.Future[_T] = self.create_future()
        try:
            future.set_result(func(*args))
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            future.set_exception(exc)
        return future

    def _run_in_thread(
        self, executor: concurrent.futures.Executor, func: Callable[..., _T], *args: Any
    ) -> asyncio.Future[_T]:
        # counted on the loop's own thread, until the loop has taken the result: a count the
        # worker thread lowered itself would let the clock jump between its end and its result
        self._threads_working += 1
        future = super().run_in_executor(executor, func, *args)
        future.add_done_callback(self._thread_job_taken)
        return future

    def _thread_job_taken(self, _future: asyncio.Future[Any]) -> None:
        self._threads_working -= 1

    def threads_working(self) -> bool:
        """Whether a job of an explicit executor is running for this loop."""
        return self._threads_working > 0


def run(main: Coroutine[Any, Any, _T], *, seed: int = 0, time_limit: float = 3600.0) -> _T:
    """Run ``main`` on a new :class:`VirtualClockLoop`, as ``asyncio.run`` does on a real one.

    >>> async def call() -> str:
    ...     await asyncio.sleep(3600 * 24)
    ...     return "a day later"
    >>> run(call(), time_limit=3600 * 25)
    'a day later'
    """
    loop = VirtualClockLoop(seed=seed, time_limit=time_limit)
    try:
        asyncio.set_event_loop(loop)
        return loop.run_until_complete(main)
    finally:
        try:
            _cancel_remaining_tasks(loop)
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            asyncio.set_event_loop(None)
            loop.close()


def _cancel_remaining_tasks(loop: asyncio.AbstractEventLoop) -> None:
    tasks = asyncio.all_tasks(loop)
    for task in tasks:
        task.cancel()
    if tasks:
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))


def running_virtual_loop() -> VirtualClockLoop | None:
    """The virtual loop running in this thread, or None (no loop, or an ordinary one)."""
    loop = _get_running_loop()
    return loop if isinstance(loop, VirtualClockLoop) else None


# The reads below run thousands of times a call (LiveKit times every VAD inference, every
# event and message): each looks the running loop up itself rather than through
# running_virtual_loop(), and reads the loop's clock directly.
_get_running_loop = asyncio._get_running_loop


def _time() -> float:
    loop = _get_running_loop()
    if isinstance(loop, VirtualClockLoop):
        return WALL_CLOCK_EPOCH + loop.wall_read()
    return _real_time()


def _time_ns() -> int:
    loop = _get_running_loop()
    if isinstance(loop, VirtualClockLoop):
        return round((WALL_CLOCK_EPOCH + loop.wall_read()) * 1e9)
    return _real_time_ns()


def _perf_counter() -> float:
    loop = _get_running_loop()
    if isinstance(loop, VirtualClockLoop):
        return loop._now - LOOP_TIME_ORIGIN
    return _real_perf_counter()


def _perf_counter_ns() -> int:
    loop = _get_running_loop()
    if isinstance(loop, VirtualClockLoop):
        return round((loop._now - LOOP_TIME_ORIGIN) * 1e9)
    return _real_perf_counter_ns()


def _monotonic() -> float:
    loop = _get_running_loop()
    if isinstance(loop, VirtualClockLoop):
        return loop._now - LOOP_TIME_ORIGIN
    return _real_monotonic()


def _monotonic_ns() -> int:
    loop = _get_running_loop()
    if isinstance(loop, VirtualClockLoop):
        return round((loop._now - LOOP_TIME_ORIGIN) * 1e9)
    return _real_monotonic_ns()


def _uuid4() -> uuid.UUID:
    loop = _get_running_loop()
    if isinstance(loop, VirtualClockLoop):
        return uuid.UUID(int=loop.random.getrandbits(128), version=4)
    return _real_uuid4()


_VIRTUAL_READS: dict[str, Callable[[], Any]] = {
    "time": _time,
    "time_ns": _time_ns,
    "perf_counter": _perf_counter,
    "perf_counter_ns": _perf_counter_ns,
    "monotonic": _monotonic,
    "monotonic_ns": _monotonic_ns,
}

_installed = False


def install_virtual_wall_clock() -> None:
    """Point wall-clock reads and ``uuid.uuid4`` at the running virtual loop, process-wide.

    Idempotent. Outside a virtual loop every replaced function returns what the real one would.
    LiveKit's pydantic models that captured ``time.time`` as a ``default_factory`` at import
    (``created_at`` of events and chat items) are rebuilt on the virtual read too.
    """
    global _installed
    _rebuild_livekit_models()  # models of LiveKit modules imported since the last call
    if _installed:
        return
    for name, read in _VIRTUAL_READS.items():
        setattr(time, name, read)
    uuid.uuid4 = _uuid4
    _installed = True


_scanned_modules: set[str] = set()
"""Modules looked at already, LiveKit's or not (each is looked at once: a loop is made per
simulated call, and going through every loaded module again would cost each call
milliseconds)."""


def _rebuild_livekit_models() -> None:
    """Rebuild every loaded LiveKit pydantic model whose field defaults to a real clock read."""
    from pydantic import BaseModel

    if not sys.modules.keys() - _scanned_modules:
        return  # nothing imported since the last call (the usual case: a few µs, not ms)
    for module_name, module in list(sys.modules.items()):
        if module_name in _scanned_modules or module is None:
            continue
        _scanned_modules.add(module_name)
        if not module_name.startswith("livekit."):
            continue
        for model in list(vars(module).values()):
            if not (isinstance(model, type) and issubclass(model, BaseModel)):
                continue
            fields = model.__dict__.get("__pydantic_fields__", {})
            captured = [info for info in fields.values() if info.default_factory is _real_time]
            for info in captured:
                info.default_factory = _time
            if captured:
                model.model_rebuild(force=True)
