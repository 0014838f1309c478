"""What the machine remembers about one call besides its state."""

from __future__ import annotations

import operator
from typing import Any

import attrs

from .fields import Text


@attrs.define
class TurnContext:
    """The call's counters and flags. Owned by the rules; read by the invariants.

    Every field holds an immutable value (the sets are frozensets): the rules replace a
    field, never change it in place, so a shallow :meth:`copy` shares nothing mutable.
    What the configuration says is no field: the running timers, for one
    (:attr:`TurnController.running_timers <turnfsm.TurnController.running_timers>`).
    """

    first_words_item: str | None = None
    """The callee's first committed turn, until the greeting is over: the greeting
    answers it and it is never rejected (invariant I7)."""

    first_words_heard: Text | None = None
    """The callee's first words as their final transcript gave them, when the greeting
    started on it (``greet_on="final_transcript"``), until the greeting is over: LiveKit
    has not committed them, the greeting's start (or its retry) carries them."""

    greeting_speech_id: str | None = None
    """The locked greeting's speech (set once the greeting is ``greeting_playing`` or
    ``retry_playing``)."""

    active_speeches: frozenset[str] = frozenset()
    """Agent speeches created and not yet ended."""

    dropped_speeches: frozenset[str] = frozenset()
    """Active speeches whose unspoken text was already dropped (the message of an
    interrupted speech may be committed before or after the speech ends)."""

    tool_rounds: int = 0
    """Tool steps in the current user turn."""

    tool_speech_id: str | None = None
    """The speech whose reply runs the current tool steps: only its interruption stops
    the loop (LiveKit also interrupts the preemptive replies it discards meanwhile)."""

    interrupted_speeches: frozenset[str] = frozenset()
    """Active speeches LiveKit interrupted while the agent was speaking or running tools:
    the reply to a tool step of theirs is never played. Kept on a realtime model only,
    the one path whose decisions read it."""

    tool_replies_due: frozenset[str] = frozenset()
    """Speeches whose tool step finished uncancelled and whose next step has not started:
    LiveKit asks the model for the reply to their tool output, with tools allowed."""

    held_tool_reply: str | None = None
    """The speech whose reply to its tool output is held (``HoldToolReply``) until LiveKit
    decides on the caller's barge-in into its tool step: set exactly while the tool
    reply's region is in ``reply_held``. (The step's speech as the hold began: a later
    step of another speech, under the cap, moves ``tool_speech_id`` on, not the hold.)"""

    final_speech_id: str | None = None
    """The final reply's speech (once the cap's ``final_reply_playing`` is entered); if it
    plays nothing, the fallback is said, even when it ends after the next user turn."""

    reprompts: int = 0
    """Idle re-prompts since the caller last spoke."""

    min_words: int = 0
    """The fewest words of a turn that interrupts a playing reply, as LiveKit applies its
    ``interruption["min_words"]`` in this session (``interruption_settings``; 0 without
    an STT or with manual turn detection: every turn does)."""

    pending_cancels: frozenset[str] = frozenset()
    """The realtime model's ``response.cancel`` requests not answered yet, by id (its
    region is in ``model_cancelling`` while any is): by id, because cancels overlap and
    only the answer to one the machine took may free the model (one sent before the
    model's link is answered too)."""

    final_after_speech: str | None = None
    """The capped tool step's speech, while the cap's ``final_awaits_tool_speech`` waits
    for its end (the final reply is asked for then)."""

    def snapshot(self) -> tuple[Any, ...]:
        """A hashable copy of every field, for exploration and comparison."""
        return _field_values(self)  # type: ignore[no-any-return]

    @classmethod
    def from_snapshot(cls, snapshot: tuple[Any, ...]) -> TurnContext:
        """The context a :meth:`snapshot` was taken of (a new one)."""
        return cls(*snapshot)

    def copy(self) -> TurnContext:
        """An independent copy (a step's checkpoint, a restore): ~10x cheaper than
        ``copy.copy`` or ``attrs.evolve``, which the controller would pay on every step."""
        return TurnContext(*_field_values(self))


_field_values = operator.attrgetter(*(field.name for field in attrs.fields(TurnContext)))
"""Every field's value, in declaration order (the order ``__init__`` takes them)."""
