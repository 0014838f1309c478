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

Agent shapes that have the hooks but may still bypass them (``on_enter`` replies,
``llm_node`` overrides, handoffs) are the closed-loop checks' (issue 9), not these.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from livekit.agents import AgentSession, llm, utils

from turnfsm import TurnPolicy

from .text_turns import wait_for_text_greeting

if TYPE_CHECKING:
    from .adapter import TurnAdapter


class EmbeddingError(RuntimeError):
    """A piece of the embedding is missing; the message says what to add."""


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


def hang_ups(policy: TurnPolicy) -> list[str]:
    """The ways this policy can hang up on its own (empty: only the caller ends the call).

    >>> hang_ups(TurnPolicy(greeting="Hi.", idle_timeout=10.0))
    ['idle_timeout']
    """
    reasons = []
    if policy.idle_timeout is not None:
        reasons.append("idle_timeout")
    if policy.max_call_duration is not None:
        reasons.append("max_call_duration")
    if policy.first_speaker == "user" and policy.on_await_user_timeout == "hang_up":
        reasons.append("on_await_user_timeout='hang_up'")
    if policy.direction == "outbound" and policy.on_answering_machine == "hang_up":
        reasons.append("on_answering_machine='hang_up'")
    return reasons


def check_start(adapter: TurnAdapter, agent: Any, room: Any, room_options: Any) -> None:
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
    reasons = hang_ups(policy)
    if (
        room is not None
        and utils.is_given(room)
        and reasons
        and adapter.end_call is None
        and not getattr(room_options, "delete_room_on_close", False)
    ):
        raise EmbeddingError(
            f"this policy hangs up on its own ({', '.join(reasons)}) but attach() got no "
            "end_call: the hang-up would only close the session, and a SIP callee would "
            "stay on a silent line (RoomOptions.delete_room_on_close is off by default). "
            "Pass attach(session, controller, end_call=...) that deletes the room "
            "(turnfsm.adapters.livekit.job.hang_up_room(ctx)) or removes the participant, "
            "or start with room_options=RoomOptions(delete_room_on_close=True)"
        )


def guard_start(adapter: TurnAdapter) -> None:
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
        started = await start(agent, **options)
        await wait_for_text_greeting(adapter)
        return started

    session.start = checked_start  # type: ignore[method-assign]


def unguard_start(session: AgentSession) -> None:
    """Undo :func:`guard_start` (idempotent)."""
    session.__dict__.pop("start", None)


def _realtime(adapter: TurnAdapter, agent: Any) -> bool:
    model = getattr(agent, "llm", None)
    if model is None or not utils.is_given(model):
        model = adapter.session.llm
    return isinstance(model, llm.RealtimeModel)
