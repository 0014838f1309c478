"""Embedding checks: a piece a real call needs and lacks is refused at ``session.start``.

A call that is missing a piece of the embedding does not fail loudly on its own: it
runs, and the guarantee quietly does not hold (LiveKit's reply to "Hello?" plays while
the machine says ``greeting``; an idle hang-up closes the session while the SIP callee
stays on a silent line). :func:`attach` wraps this session's ``start`` so that
:func:`check_start` runs first: it raises :class:`EmbeddingError` saying what to add,
before anything is started.

=====================================  ===================================================
missing piece                          refused when
=====================================  ===================================================
the ``TurnAgent`` hooks                the policy's greeting answers the callee's first
(``llm_node``,                         words (``first_speaker="user"``) and the model is
``on_user_turn_completed``)            not a realtime model (whose server reply the
                                       adapter cancels itself)
an ``end_call`` that hangs up          the session runs in a room, the policy can hang up
                                       (idle, maximum duration, no answer, answering
                                       machine) and ``delete_room_on_close`` is off
                                       (LiveKit's default)
=====================================  ===================================================

Before that, :func:`check_attach` refuses what ``attach`` itself can see: a session
already started (its first moments would have run without the machine), a controller
that already ran or runs another call, a second controller on one session, and an
``end_call`` that is no function. While the call runs, a speech the agent's own code asks
for before the caller's first words, under a policy where the caller speaks first, is
stopped and reported (:func:`refused_early_speech`): one warning naming the agent, the
method and the fix, or this error under ``strict``.

Agent shapes that have the hooks but may still bypass them (``llm_node`` overrides,
handoffs) are the closed-loop checks' (issue 9), not these.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any, Protocol

from livekit.agents import AgentSession, llm, utils

from turnfsm import TurnController, TurnPolicy
from turnfsm.reach import ends_of_its_own

from .text_turns import Reporting, wait_for_text_greeting


class Embedded(Reporting, Protocol):
    """What the embedding's checks read of the adapter (:class:`~.adapter.TurnAdapter`)."""

    starting: bool

    @property
    def end_call(self) -> Callable[[str], object] | None: ...

    def raise_refusal(self) -> None: ...


class EmbeddingError(RuntimeError):
    """A piece of the embedding is missing; the message says what to add."""


_CLAIMED: weakref.WeakSet[TurnController] = weakref.WeakSet()
"""Controllers attached to a session so far: each serves one call."""


def check_attach(session: object, controller: object, end_call: object) -> None:
    """What :func:`~.adapter.attach` can refuse before it changes anything.

    Raises:
        EmbeddingError: naming the problem and what to change.
    """
    if not isinstance(session, AgentSession):
        raise EmbeddingError(
            f"attach() takes the call's AgentSession, got {type(session).__name__}: "
            "attach(session, controller) with the session you start"
        )
    if not isinstance(controller, TurnController):
        raise EmbeddingError(
            f"attach() takes a TurnController, got {type(controller).__name__}: "
            "attach(session, TurnController(TurnPolicy(...)))"
        )
    if end_call is not None and not callable(end_call):
        raise EmbeddingError(
            f"end_call must be a function of the hang-up reason, got a "
            f"{type(end_call).__name__}: pass end_call=hang_up_room(ctx), or wrap the call "
            "that hangs up, e.g. end_call=lambda reason: ctx.api.room.remove_participant("
            "...) (an awaitable it returns is awaited)"
        )
    if session_started(session):
        raise EmbeddingError(
            "attach() was called after session.start(): the call's start ran without the "
            "machine (no greeting, no embedding checks). Call attach(session, controller) "
            "right after building the session, before session.start()"
        )
    if controller.state == "ended":
        raise EmbeddingError(
            "this TurnController's call has ended: a controller serves one call. Create "
            "a new TurnController(policy) for each session"
        )
    if controller in _CLAIMED:
        raise EmbeddingError(
            "this TurnController is already attached to another session: a controller "
            "serves one call. Create a new TurnController(policy) for each session"
        )


def claim(controller: TurnController) -> None:
    """Mark ``controller`` as serving a call (a second :func:`check_attach` refuses it)."""
    _CLAIMED.add(controller)


def session_started(session: AgentSession) -> bool:
    """``session.start`` was called: LiveKit runs (or ran) its agent."""
    try:
        session.current_agent  # noqa: B018 - LiveKit sets the agent as the start begins
    except RuntimeError:  # "VoiceAgent isn't running"
        return False
    return True


def needs_agent_hooks(policy: TurnPolicy) -> list[str]:
    """Why this policy needs the ``TurnAgent`` hooks (empty: a plain ``Agent`` will do).

    >>> needs_agent_hooks(TurnPolicy(direction="outbound", greeting="Hi."))
    ["the greeting is the reply to the callee's first words (llm_node)"]
    >>> needs_agent_hooks(TurnPolicy(greeting="Hi."))
    []
    """
    if policy.first_speaker == "user" and policy.has_greeting:
        return ["the greeting is the reply to the callee's first words (llm_node)"]
    return []


def check_start(adapter: Embedded, agent: Any, room: Any, room_options: Any) -> None:
    """What ``session.start(agent, room=..., room_options=...)`` must bring.

    Raises:
        EmbeddingError: naming the missing piece and what to add.
    """
    policy = adapter.controller.policy
    hooks = needs_agent_hooks(policy)
    if hooks and not getattr(agent, "turnfsm_hooks", False) and not _realtime(adapter, agent):
        raise EmbeddingError(
            f"{type(agent).__name__} has no TurnAgent hooks, and this policy needs them: "
            f"{'; '.join(hooks)}. Derive your agent from "
            "turnfsm.adapters.livekit.TurnAgent (or mix it in before Agent); a plain Agent "
            "lets LiveKit's own reply play while the machine is greeting"
        )
    reasons = ends_of_its_own(policy)
    if (
        room is not None
        and utils.is_given(room)
        and reasons
        and adapter.end_call is None
        and not getattr(room_options, "delete_room_on_close", False)
    ):
        raise EmbeddingError(
            f"this policy hangs up on its own (ends {', '.join(reasons)}) but attach() got no "
            "end_call: the hang-up would only close the session, and a SIP callee would "
            "stay on a silent line (RoomOptions.delete_room_on_close is off by default). "
            "Pass attach(session, controller, end_call=...) that deletes the room "
            "(turnfsm.adapters.livekit.job.hang_up_room(ctx)) or removes the participant, "
            "or start with room_options=RoomOptions(delete_room_on_close=True)"
        )


def guard_start(adapter: Embedded) -> None:
    """Run :func:`check_start` when this session starts, before LiveKit does anything;
    in a text-only session, return once the greeting the session starts with was said
    (:func:`.text_turns.wait_for_text_greeting`).

    The wrapper is set on the session instance only (its class is untouched) and
    removed by :meth:`~.adapter.TurnAdapter.detach`.
    """
    session = adapter.session
    start: Callable[..., Any] = session.start

    @functools.wraps(start)
    async def checked_start(agent: Any, **options: Any) -> Any:
        room_options = options.get("room_options")
        if not utils.is_given(room_options) or room_options is None:
            room_options = options.get("room_input_options")  # deprecated, same field
        check_start(adapter, agent, options.get("room"), room_options)
        adapter.starting = True
        try:
            started = await start(agent, **options)
        finally:
            adapter.starting = False
        adapter.raise_refusal()  # strict: an early speech its on_enter asked for
        await wait_for_text_greeting(adapter)
        return started

    session.start = checked_start  # type: ignore[method-assign]


def unguard_start(session: AgentSession) -> None:
    """Undo :func:`guard_start` (idempotent)."""
    session.__dict__.pop("start", None)


def _realtime(adapter: Embedded, agent: Any) -> bool:
    model = getattr(agent, "llm", None)
    if model is None or not utils.is_given(model):
        model = adapter.session.llm
    return isinstance(model, llm.RealtimeModel)


def early_speech_refusal(policy: TurnPolicy, speaker: str, call: str) -> EmbeddingError:
    """The error for a speech the agent's code asked for (``call``, e.g.
    ``session.generate_reply``, in ``speaker``, e.g. ``Assistant.on_enter``) before the
    caller's first words, which the policy's greeting answers: the machine stopped it."""
    if policy.direction == "outbound":
        fix = (
            "Remove it: the policy's greeting answers the callee's first words, and the "
            "agent speaks once the callee has spoken (e.g. in on_user_turn_completed)"
        )
    else:
        fix = (
            "To let the agent greet, use TurnPolicy(first_speaker='agent') without a "
            "greeting text (its first speech is then the greeting); or remove it, and the "
            "policy's greeting answers the caller"
        )
    return EmbeddingError(
        f"{speaker} called {call} before the caller's first words, under a policy where "
        f"the caller speaks first (first_speaker='user') and the greeting answers them: "
        f"the speech was stopped. {fix}"
    )
