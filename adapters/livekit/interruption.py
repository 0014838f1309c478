"""When LiveKit really interrupted a speech: ``AgentSpeechInterrupted`` for the machine.

LiveKit decides itself whether the caller's voice interrupts the agent. A VAD start is
only a candidate: the session's ``interruption`` options must agree (``enabled``, the
handle's ``allow_interruptions``, ``min_duration``, ``min_words``), and with
``resume_false_interruption`` the speech is first only *paused*: a final transcript or a
committed turn then interrupts it, or the pause times out and the speech resumes
(``agent_false_interruption``). The one place where the decision shows is the speech
handle: ``speech_handle.interrupted`` turns true when LiveKit (or anyone, through
``session.interrupt()``) interrupts it, and never for a refused, short or resumed
barge-in.

:class:`InterruptionWatch` waits on each speech handle with LiveKit's public
``SpeechHandle.wait_if_not_interrupted`` and reports the interruption once: as soon as it
happens, and at the latest right before the handle's end is reported (the adapter calls
:meth:`InterruptionWatch.settle` first in its done callback), so the machine always sees
``agent_speech_interrupted`` before ``agent_speech_ended``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from livekit.agents.voice import SpeechHandle


class InterruptionWatch:
    """Calls ``report(speech_id)`` once for every watched speech that LiveKit interrupts."""

    def __init__(self, report: Callable[[str], None]) -> None:
        self._report = report
        self._reported: set[str] = set()
        self._tasks: set[asyncio.Task[Any]] = set()

    def watch(self, handle: SpeechHandle) -> None:
        """Start watching ``handle`` (from ``speech_created``)."""
        if handle.done():
            return  # settle() reports it from the done callback
        task = asyncio.ensure_future(self._wait(handle))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _wait(self, handle: SpeechHandle) -> None:
        done = asyncio.get_running_loop().create_future()

        def mark_done(_: SpeechHandle) -> None:
            if not done.done():
                done.set_result(None)

        handle.add_done_callback(mark_done)
        await handle.wait_if_not_interrupted([done])
        if handle.interrupted and not handle.done():
            self._report_once(handle.id)

    def settle(self, handle: SpeechHandle) -> None:
        """The handle is done: report an interruption not reported yet, then forget it."""
        if handle.interrupted:
            self._report_once(handle.id)
        self._reported.discard(handle.id)

    def _report_once(self, speech_id: str) -> None:
        if speech_id not in self._reported:
            self._reported.add(speech_id)
            self._report(speech_id)

    def close(self) -> None:
        """Stop watching (the adapter detached)."""
        for task in self._tasks:
            task.cancel()
        self._tasks.clear()
        self._reported.clear()
