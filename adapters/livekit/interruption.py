"""When LiveKit really interrupted a speech: ``AgentSpeechInterrupted`` for the machine,
and what waits for its decision (the end of the caller's turn, the held tool replies).

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

from livekit.agents import llm
from livekit.agents.tokenize.basic import split_words
from livekit.agents.voice import SpeechHandle
from livekit.agents.voice.agent_activity import AgentActivity
from livekit.agents.voice.audio_recognition import _EndOfTurnInfo


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


class TurnEnd:
    """LiveKit's end of the caller's turn (``AgentActivity.on_end_of_turn``), the call
    site of the step it dispatches: the turn's transcript, as LiveKit judges it, and the
    activity that ends it."""

    def __init__(self, activity: AgentActivity, info: _EndOfTurnInfo) -> None:
        self.activity = activity
        self.transcript = info.new_transcript
        self.declined = False

    @property
    def words(self) -> int:
        """The transcript's words as LiveKit 1.8.9 counts them for ``min_words``."""
        return len(split_words(self.transcript, split_character=True))

    def decline(self) -> None:
        """No turn, exactly as LiveKit answers a turn under ``min_words`` over a playing
        reply: the reply it prepared meanwhile (``preemptive_generation``) cancelled, and
        the turn not committed (its words stay for the caller's next turn)."""
        self.activity._cancel_preemptive_generation()
        self.declined = True


class TurnEndWatch:
    """Reports LiveKit's end of each caller's turn before LiveKit decides on it.

    LiveKit 1.8.9 applies ``interruption["min_words"]`` in ``on_end_of_turn``, silently
    (a turn too short to interrupt its current speech is no turn, and no event says so),
    and only to its current speech: a tool step's speech is a background one while its
    tools run, and any committed turn interrupts it. No public event marks the end of a
    turn, so the activity's ``on_end_of_turn`` is wrapped (on that instance; its audio
    recognition calls it there): ``report`` is called with a :class:`TurnEnd` first, and
    a turn the machine declined there (``RejectUserTurn``) is answered as LiveKit answers
    one under ``min_words``; any other goes on to LiveKit's own.
    """

    def __init__(self, report: Callable[[TurnEnd], None]) -> None:
        self._report = report
        self._watched: list[AgentActivity] = []

    def watch(self, activity: AgentActivity | None) -> None:
        """Watch the turns ``activity`` ends (once; ``None``: no activity runs)."""
        if activity is None or any(watched is activity for watched in self._watched):
            return
        own = activity.on_end_of_turn

        def on_end_of_turn(info: _EndOfTurnInfo) -> bool:
            turn_end = TurnEnd(activity, info)
            self._report(turn_end)
            return False if turn_end.declined else own(info)

        setattr(activity, "on_end_of_turn", on_end_of_turn)  # noqa: B010 - a method
        self._watched.append(activity)

    def close(self) -> None:
        """Stop watching (the adapter detached): LiveKit's own ``on_end_of_turn`` again."""
        for activity in self._watched:
            vars(activity).pop("on_end_of_turn", None)
        self._watched.clear()


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
