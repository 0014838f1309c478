"""When LiveKit really interrupted a speech: ``AgentSpeechInterrupted`` for the machine,
and what waits for its decision (the tool step's ``min_words``, the held tool replies).

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

from livekit.agents import AgentSession, llm
from livekit.agents.tokenize.basic import split_words
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


class ToolStepMinWords:
    """LiveKit's ``min_words`` rule, applied to a tool step as it is to a playing reply.

    While its tools run, a reply's speech is no longer LiveKit's *current* speech (its
    playout is marked done first) but a background one. LiveKit 1.8.9 checks
    ``interruption["min_words"]`` only against the current speech, so during a tool step
    any committed user turn interrupts the step — a one-word backchannel ("uh-huh")
    included — whatever ``min_words`` says.

    With ``min_words > 0`` (and a :class:`~.agent.TurnAgent`, whose turn hook runs before
    LiveKit answers) the step's speech is made uninterruptible once it is a background
    speech, so LiveKit leaves it alone, and each turn committed meanwhile is judged as
    LiveKit judges one over a playing reply: shorter than ``min_words`` (LiveKit's own word
    split) it is no turn — no history item, no reply, and the machine hears it as
    ``UserTurnDeclined`` (``min_words``); otherwise the step's speech is interrupted
    (``speech_handle.interrupt()``), as LiveKit would have done. The speech's own setting
    is restored when the step ends, before the tool's reply. While the step's speech is
    still LiveKit's current one (the words the reply says before its tool call play, or a
    later round's step is just starting), LiveKit's own rules apply to it as they are.
    """

    def __init__(self, session: AgentSession) -> None:
        self._session = session
        self._guarded: SpeechHandle | None = None
        self._waits: set[asyncio.Future[None]] = set()

    def _min_words(self) -> int:
        options = self._session.options.interruption
        return int(options["min_words"]) if self._session.stt is not None else 0

    def step_started(self, handle: SpeechHandle | None) -> None:
        """A tool step of ``handle`` started: guarded once LiveKit made it a background
        speech. Until then it is LiveKit's current speech, whose ``min_words`` LiveKit
        applies itself; uninterruptible then, LiveKit would drop a turn that ends in that
        moment before the turn hook judges it (seed 871: a later round's step started as
        the caller's turn ended)."""
        if handle is None or self._guarded is not None or self._min_words() <= 0:
            return
        if handle.interrupted or handle.done() or not handle.allow_interruptions:
            return  # nothing to protect: LiveKit would not interrupt it on a turn either
        self._guarded = handle
        if handle is not self._session.current_speech:
            handle.allow_interruptions = False
            return
        # LiveKit moves it to its background speeches when it marks the step's generation
        # done (SpeechHandle._wait_for_generation, LiveKit 1.8.9: no public signal)
        task = asyncio.ensure_future(handle._wait_for_generation())
        self._waits.add(task)
        task.add_done_callback(lambda done: self._guard_in_background(handle, done))

    def _guard_in_background(self, handle: SpeechHandle, wait: asyncio.Future[None]) -> None:
        self._waits.discard(wait)
        if not wait.cancelled():
            wait.exception()  # none expected; a missing generation guards it at once
        if handle is self._guarded and not handle.interrupted and not handle.done():
            handle.allow_interruptions = False

    def guards(self, handle: SpeechHandle) -> bool:
        """``handle``'s step is guarded: LiveKit leaves it alone, and a real turn committed
        meanwhile interrupts it here."""
        return handle is self._guarded

    def step_finished(self, handle: SpeechHandle | None) -> None:
        """A tool step of ``handle`` ended: if it is the guarded step, the reply to its
        tools' output is interruptible again (a step nested in it, run by an
        ``AgentTask`` its tool awaits, leaves it guarded)."""
        if handle is None or handle is not self._guarded:
            return
        self._guarded = None
        if not handle.interrupted and not handle.done():
            handle.allow_interruptions = True

    def is_backchannel(self, text: str) -> bool:
        """Judge a user turn committed now: a backchannel (drop it) or a real turn (the
        guarded step's speech is interrupted)."""
        handle = self._guarded
        if handle is None or handle.interrupted or handle.done():
            return False
        if len(split_words(text, split_character=True)) < self._min_words():
            return True
        self._guarded = None
        handle.allow_interruptions = True
        handle.interrupt()
        return False


class ToolReplyHolds:
    """The replies to tool output held while LiveKit decides on a barge-in (``HoldToolReply``).

    LiveKit asks for the reply to a tool step's output (``llm_node`` again, on the same
    speech) as soon as its tools return, and decides whether the caller's barge-in
    interrupts the speech only when their turn ends. ``TurnAgent.llm_node`` awaits the
    gate of a held speech before it asks the model: released unsent, or interrupted by
    LiveKit meanwhile (which cancels the node), the model never receives the request.
    """

    def __init__(self) -> None:
        self._gates: dict[str, asyncio.Future[bool]] = {}
        self._last_step: str | None = None

    def hold(self, speech_id: str) -> None:
        if speech_id not in self._gates:
            self._gates[speech_id] = asyncio.get_running_loop().create_future()

    def release(self, speech_id: str, *, send: bool) -> None:
        gate = self._gates.pop(speech_id, None)
        if gate is not None and not gate.done():
            gate.set_result(send)

    def step_finished(self, speech_id: str) -> None:
        """A tool step of ``speech_id`` returned: the next reply that answers tool output
        (LiveKit asks for it right away) is that speech's."""
        self._last_step = speech_id

    def gate_for(self, chat_ctx: llm.ChatContext) -> asyncio.Future[bool] | None:
        """The gate of this generation if it answers the output of a held step's tools."""
        items = chat_ctx.items
        if not items or items[-1].type != "function_call_output" or self._last_step is None:
            return None
        return self._gates.get(self._last_step)

    def close(self) -> None:
        """Nothing will release the holds any more (the adapter detached): none is sent."""
        for speech_id in list(self._gates):
            self.release(speech_id, send=False)
