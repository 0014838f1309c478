"""LiveKit's AEC warm-up, met by holding the caller's audio instead of losing it.

For the first seconds of the agent's first speech (``aec_warmup_duration``: 3 s by
default, off for an outbound SIP callee), LiveKit lets the echo canceller settle: it
hands the STT silence in place of the caller's audio. That first speech is the greeting.
Under ``greeting_lock="keep_listening"`` with ``greeting_overlap="answer_whole"`` the
machine holds user turns through the greeting to answer speech over it as one whole turn
afterwards; the warm-up would have the STT miss its first seconds (a fragment answered).

So while user turns are held and the warm-up is still to come or running,
:class:`EchoWarmUpHold` keeps the caller's audio at the input gate (VAD and STT hear
silence, the frames are kept) and replays it as soon as the warm-up is over, or the user
turns are resumed, whichever comes first: the STT hears the overlap whole, later.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from livekit.agents import AgentSession

from turnfsm.policy import TurnPolicy

from .audio import InputGate


class Gated(Protocol):
    """What the hold reads of the call (a :class:`~.port.LeverPort`)."""

    @property
    def session(self) -> AgentSession: ...

    @property
    def policy(self) -> TurnPolicy: ...

    @property
    def gate(self) -> InputGate | None: ...

    def require_gate(self) -> InputGate: ...


class EchoWarmUpHold:
    """Holds the caller's audio at the gate through LiveKit's AEC warm-up, while the
    machine holds user turns (:func:`~.levers.hold_user_turns`)."""

    def __init__(self, port: Gated) -> None:
        self.port = port
        self.holding = False
        """The gate holds the caller's audio for the warm-up."""
        self._agent_spoke = False
        """The agent spoke once: LiveKit's warm-up (one-shot) started then."""
        self._timer: asyncio.TimerHandle | None = None

    def _warmup(self) -> float:
        return self.port.session.options.aec_warmup_duration or 0.0

    def needs_gate(self) -> bool:
        """The policy holds user turns to answer speech over the greeting whole, and
        LiveKit's warm-up is set (``attach`` cannot know yet whether LiveKit turns it off
        for an outbound SIP callee): the input needs a gate."""
        policy = self.port.policy
        holds_overlap = (
            policy.greeting_lock == "keep_listening"
            and policy.greeting_overlap == "answer_whole"
            and (policy.has_greeting or policy.greets_in_own_words)
        )
        return holds_overlap and self._warmup() > 0

    def turns_held(self) -> None:
        """User turns are held: hold the audio too, if a warm-up is to come or running."""
        gate = self.port.gate
        warmup_over = self._agent_spoke and self._timer is None
        if gate is None or gate.muted or warmup_over or self._warmup() <= 0:
            return
        gate.mute(hold_audio=True)
        self.holding = True

    def agent_speaking(self) -> None:
        """The agent speaks: the first time, LiveKit's warm-up starts now, for its length."""
        if self._agent_spoke:
            return
        self._agent_spoke = True
        if not self.holding:
            return
        warmup = self._warmup()
        if warmup <= 0:  # LiveKit turned it off meanwhile (an outbound SIP callee)
            self.release()
            return
        loop = asyncio.get_running_loop()
        # replayed in the loop turn after the expiry: LiveKit's own timer, due at the same
        # instant, has ended its warm-up by then (or the STT would hear silence again)
        self._timer = loop.call_later(warmup, loop.call_soon, self._warmed_up)

    def _warmed_up(self) -> None:
        self._timer = None
        self.release()

    def release(self) -> None:
        """The warm-up is over, or user turns are resumed: replay the held audio."""
        self._cancel_timer()
        if self.holding:
            self.holding = False
            self.port.require_gate().unmute(replay_held_audio=True)

    def close(self) -> None:
        """The call is over: open the gate, dropping what it held."""
        self._cancel_timer()
        if self.holding and self.port.gate is not None:
            self.holding = False
            self.port.gate.unmute(replay_held_audio=False)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
