"""The port every lever receives: what a lever may touch of the call, and nothing else.

A lever (:mod:`.levers`, :mod:`.realtime_levers`) is called as ``lever(port, effect,
site)``: the effect says what the machine decided, the :class:`Site` where it runs (the
LiveKit call site whose step emitted it), and the
:class:`LeverPort` what it acts on: the session, the input gate and the playout meter,
the registries the adapter keeps (speeches, committed assistant messages, played
segments), the timers, and the dispatcher's services for a
running lever (a future to track, an outcome to defer or to detail). A lever never sees
the controller or the adapter: only the dispatcher (:mod:`.dispatch`) reads the
controller, and a test checks that no lever reaches for either.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from livekit.agents import AgentSession, llm
from livekit.agents.voice import SpeechHandle

from turnfsm import effects as fx
from turnfsm.policy import TurnPolicy

from .audio import InputGate, PlayedSegment, PlayoutMeter
from .effect_outcomes import PendingOutcome
from .heard import SpeakingRates
from .interruption import ToolReplyHolds
from .prerender import PrerenderedTexts
from .warmup import EchoWarmUpHold

EndCall = Callable[[str], object]
"""Hangs up the call, given the hang-up reason; an awaitable it returns is awaited."""


@dataclass(frozen=True, slots=True)
class Site:
    """Where a lever runs, handed to it by the dispatcher with its effect."""

    call: object | None
    """The LiveKit event whose handler dispatched the step, or the agent hook being run
    (a :class:`~.turn_hook.UserTurnHook`), or ``None`` (a timer, a lever's own future):
    a lever that must act on its call site (``cancel_tool_reply()`` on a
    ``FunctionToolsExecutedEvent``, the greeting written into the hook's ``turn_ctx``)
    does so within that step."""


class Runner(Protocol):
    """The dispatcher's services for the lever that runs now (:mod:`.dispatch`)."""

    def track(self, awaitable: Awaitable[Any], what: str, *, hang_up: bool = False) -> None: ...

    def note_outcome_detail(self, detail: str) -> None: ...

    def note_cut(self, *, text_chars: int, heard_chars: int) -> None: ...

    def defer_outcome(self) -> PendingOutcome: ...


class LeverPort:
    """What the levers of one call act on (built by the adapter, shared with its
    handlers, which fill the registries)."""

    def __init__(
        self,
        session: AgentSession,
        policy: TurnPolicy,
        *,
        end_call: EndCall | None,
        timer_expired: Callable[[fx.TimerName], None],
    ) -> None:
        self.session = session
        self.policy = policy
        """The call's policy (fixed for the call)."""
        self.end_call = end_call
        self.timer_expired = timer_expired
        """Called by a timer started with ``loop.call_later`` when it expires."""
        self.runner: Runner | None = None
        """The dispatcher, once it is built (it sets itself here)."""
        self.gate: InputGate | None = None
        """In front of ``session.input.audio`` only under a policy that can mute or hold
        the caller's audio (otherwise the session's input is left as it is)."""
        self.meter: PlayoutMeter | None = None
        """Right behind ``session.output.audio`` (which stays the session's object), or
        in front of it when it is a bare sink (:func:`~.audio.measure_playout`)."""
        self.speeches: dict[str, SpeechHandle] = {}
        self.assistant_messages: dict[str, llm.ChatMessage] = {}
        self.last_segment: dict[str, PlayedSegment] = {}
        self.timers: dict[str, asyncio.TimerHandle] = {}
        self.transcript_final = False
        """A final transcript arrived since the caller last started speaking: the STT is
        done with what was said (``commit_user_turn`` need not wait for another)."""
        self.held_turn_settings: tuple[Any, bool] | None = None
        """The turn detection and discard setting that ``HoldUserTurns`` replaced."""
        self.closing = False
        """The session is closing: the call is over."""
        self.warmup = EchoWarmUpHold(self)
        """Holds the caller's audio at the gate through LiveKit's AEC warm-up while user
        turns are held (the STT hears silence then)."""
        self.tool_reply_holds = ToolReplyHolds()
        """The replies to tool output waiting for LiveKit's decision on a barge-in."""
        self.prerendered = PrerenderedTexts(session)
        """The greeting, re-prompt and fallback synthesized ahead, while the call rings
        (prerender.py)."""
        self.speaking_rates = SpeakingRates()
        """The voice's slowest rate so far, for cutting a reply whose audio never all came
        (heard.py)."""

    def _runner(self) -> Runner:
        if self.runner is None:
            raise RuntimeError("the port has no dispatcher yet")
        return self.runner

    def track(self, awaitable: Awaitable[Any], what: str, *, hang_up: bool = False) -> None:
        """Keep a lever's future alive and log its failure (:meth:`.Dispatcher.track`)."""
        self._runner().track(awaitable, what, hang_up=hang_up)

    def note_outcome_detail(self, detail: str) -> None:
        """How the running lever carried out its effect, said in its ``done`` outcome."""
        self._runner().note_outcome_detail(detail)

    def note_cut(self, *, text_chars: int, heard_chars: int) -> None:
        """What the running drop lever measured of its cut, said in its ``done`` outcome."""
        self._runner().note_cut(text_chars=text_chars, heard_chars=heard_chars)

    def defer_outcome(self) -> PendingOutcome:
        """The running lever's outcome, reported later by its call site (``resolve``)."""
        return self._runner().defer_outcome()

    @property
    def text_only(self) -> bool:
        """The session has no audio, in nor out: the caller types and reads (LiveKit's
        text testing, ``session.run(user_input=...)``). There is no audio to mute, and a
        speech reaches the caller as the text it sends."""
        session = self.session
        return (
            self.gate is None
            and self.meter is None
            and session.input.audio is None
            and session.output.audio is None
        )

    def require_gate(self) -> InputGate:
        """The input gate, or an error naming why it is missing."""
        if self.gate is None:
            raise RuntimeError("the session has no audio input to mute")
        return self.gate


Lever = Callable[[LeverPort, Any, Site], None]
"""A lever: carries out its effect (the second argument) through the port, at the site."""
