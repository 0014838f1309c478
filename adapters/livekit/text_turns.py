"""Typed turns: ``generate_reply(user_input=...)`` is the caller's turn, as a spoken one is.

LiveKit's text testing (``result = await session.run(user_input=...)``, then
``result.expect``) and RoomIO's text input hand the caller's words to
``session.generate_reply(user_input=...)``: no VAD, no STT, no end of turn, and no
``Agent.on_user_turn_completed``, where :class:`~.agent.TurnAgent` reports a spoken turn.
Unreported, such a turn never reached the machine: an outbound call stayed in ``ringing``
and every reply was stopped as speech before the greeting (no reply at all), and an inbound
machine never knew a reply was being spoken.

:func:`report_text_turns` (called by :func:`~.adapter.attach`) wraps ``generate_reply`` on
this session instance only (its class is untouched; :meth:`~.adapter.TurnAdapter.detach`
removes it). A call with ``user_input`` and a pipeline model reports the turn to the
machine *before* LiveKit creates the reply, exactly where a spoken turn is reported, with
the reply's chat context as the call site (:class:`~.turn_hook.UserTurnHook`):

* the callee's first words (``ringing`` or ``awaiting_user``): the machine greets, and the
  greeting is written into that context, so the reply LiveKit generates *is* the greeting
  (``TurnAgent.llm_node``); "Hello?" is in the history before it;
* a turn the machine rejects (typed over the greeting under ``greeting_overlap="drop"``):
  a reply without the turn is created and stopped before LiveKit schedules it, so neither
  the turn nor a reply enters the history, the model is not asked, and the run still
  ends; a warning says why;
* any other turn: a turn, as spoken.

A text-only session (no audio output) says a policy greeting it starts with before
``session.start`` returns (:func:`wait_for_text_greeting`), so the first typed turn comes
after it, as a caller's first words would.

Realtime models take typed input their own way (the model commits the user item): such
a turn is not reported here, and where the machine waits for the callee's first words
it gets no reply; a warning says so, once per call.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Protocol

from livekit.agents import NOT_GIVEN, AgentSession, llm, utils
from livekit.agents.types import NotGivenOr
from livekit.agents.voice import SpeechHandle
from livekit.agents.voice.events import SpeechCreatedEvent

from turnfsm import TurnController
from turnfsm import effects as fx

from .log import logger
from .turn_hook import NO_REPLY, UserTurnHook, reply_model, requested_greeting


class Reporting(Protocol):
    """What typed turns need of the adapter (:class:`~.adapter.TurnAdapter`)."""

    warned_realtime_typed_turn: bool

    @property
    def session(self) -> AgentSession: ...

    @property
    def controller(self) -> TurnController: ...

    @property
    def speeches(self) -> dict[str, SpeechHandle]: ...

    def before_greeting(self) -> bool: ...

    def text_turn(self, hook: UserTurnHook) -> tuple[fx.Effect, ...]: ...

    def user_turn_hook_ended(self, hook: UserTurnHook, error: BaseException | None) -> None: ...


def report_text_turns(adapter: Reporting) -> None:
    """Report every typed turn of this session to the machine (see the module docstring)."""
    session = adapter.session
    generate_reply: Callable[..., Any] = session.generate_reply

    @functools.wraps(generate_reply)
    def reported_generate_reply(
        *,
        user_input: NotGivenOr[str | llm.ChatMessage] = NOT_GIVEN,
        chat_ctx: NotGivenOr[llm.ChatContext] = NOT_GIVEN,
        **options: Any,
    ) -> Any:
        if not utils.is_given(user_input):
            return generate_reply(chat_ctx=chat_ctx, **options)
        if not isinstance(reply_model(session), llm.LLM):
            _warn_realtime_typed_turn(adapter)
            return generate_reply(user_input=user_input, chat_ctx=chat_ctx, **options)
        message = (
            user_input
            if isinstance(user_input, llm.ChatMessage)
            else llm.ChatMessage(role="user", content=[str(user_input)])
        )
        reply_ctx = chat_ctx if utils.is_given(chat_ctx) and chat_ctx is not None else None
        base = reply_ctx if reply_ctx is not None else session.current_agent.chat_ctx
        hook = UserTurnHook(base.copy(), message)
        effects = adapter.text_turn(hook)
        if fx.RejectUserTurn(item_id=message.id) in effects:
            return _refused_reply(adapter, generate_reply, hook, options)
        if requested_greeting(hook.turn_ctx) is not None:
            reply_ctx = hook.turn_ctx  # the reply is the greeting
        try:
            handle = generate_reply(
                user_input=message,
                chat_ctx=reply_ctx if reply_ctx is not None else NOT_GIVEN,
                **options,
            )
        except BaseException as error:
            adapter.user_turn_hook_ended(hook, error)
            raise
        adapter.user_turn_hook_ended(hook, None)
        return handle

    session.generate_reply = reported_generate_reply  # type: ignore[method-assign]


def _warn_realtime_typed_turn(adapter: Reporting) -> None:
    """A realtime model commits a typed turn itself: the machine does not hear it as the
    callee's first words, so a greeting waiting for them is never said (no reply)."""
    if adapter.before_greeting() and not adapter.warned_realtime_typed_turn:
        adapter.warned_realtime_typed_turn = True
        logger.warning(
            "turnfsm: a typed turn (generate_reply(user_input=...), session.run) reached a "
            "realtime model while the machine waits for the callee's first words "
            "(state %s): typed turns are not the callee's first words with a realtime model, "
            "so it gets no reply and the greeting waits. Test a realtime agent with spoken "
            "input, or its replies with a policy whose agent speaks first "
            "(first_speaker='agent')",
            adapter.controller.state,
            extra={"event": "user_turn_committed", "state": adapter.controller.state},
        )


def _refused_reply(
    adapter: Reporting,
    generate_reply: Callable[..., Any],
    hook: UserTurnHook,
    options: dict[str, Any],
) -> Any:
    """A reply that never plays, for a turn the machine rejected.

    ``session.run`` watches the handle ``generate_reply`` returns and ends when it is done:
    raising here would leave the run open, and LiveKit refuses every later run as nested.
    The reply is asked for without the turn (it is not kept), with :data:`NO_REPLY` in its
    context (``TurnAgent.llm_node`` does not ask the model), and interrupted as LiveKit
    creates it, before it is scheduled: nothing plays, nothing is committed.
    """
    session = adapter.session
    logger.warning(
        "turnfsm: a typed turn came while the greeting was being said and "
        "greeting_overlap=%r drops speech over the greeting: it gets no reply and is not kept. "
        "Wait for the greeting (a text session's start returns once it was said; an outbound "
        "greeting is the reply to the first run) before typing the next turn",
        adapter.controller.policy.greeting_overlap,
        extra={"event": "user_turn_committed", "state": adapter.controller.state},
    )

    def stop(event: SpeechCreatedEvent) -> None:
        event.speech_handle.interrupt(force=True)

    hook.turn_ctx.add_message(role="system", content="", extra={NO_REPLY: True})
    session.on("speech_created", stop)
    try:
        return generate_reply(chat_ctx=hook.turn_ctx, **options)
    finally:
        session.off("speech_created", stop)


def stop_reporting_text_turns(session: AgentSession) -> None:
    """Undo :func:`report_text_turns` (idempotent)."""
    session.__dict__.pop("generate_reply", None)


async def wait_for_text_greeting(adapter: Reporting) -> None:
    """In a text-only session (no audio output), wait until the greeting the machine started
    with the session has been said: the first typed turn then follows it in the history and
    in the model's context, as a caller's first words follow a greeting they heard.

    An agent that greets in its own words started that speech itself, as in LiveKit, whose
    ``start`` does not wait for it: nor does this (the speech may run a tool that awaits a
    task only the caller can finish; waiting for its end never returned)."""
    session, controller = adapter.session, adapter.controller
    if session.output.audio is not None or controller.state != "greeting":
        return
    if controller.policy.greets_in_own_words:
        return
    speech_id = controller.context.greeting_speech_id
    handle = adapter.speeches.get(speech_id) if speech_id is not None else None
    if handle is not None:
        await handle  # never raises: a failed speech is done too
