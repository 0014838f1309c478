"""Realtime models: the model's protocol tracked, its facts told to the machine.

With a realtime model (``openai.realtime.RealtimeModel`` and the like) the model itself
hears the caller and, with server-side turn detection, decides turns on its own: it
cancels its own response when the caller speaks (``interrupt_response``), answers every
committed turn with a response nobody asked for (``create_response``), refuses a
``response.create`` while a response of it is active, and LiveKit downgrades
``allow_interruptions=False`` to ``True`` (#6635). Several pipeline levers therefore do
not hold. :func:`~turnfsm.adapters.livekit.attach` recognises a realtime model
(``isinstance(session.llm, llm.RealtimeModel)``) and puts :class:`RealtimeLink` and its
levers (:mod:`.realtime_levers`) in charge; every other effect keeps its pipeline lever.

:class:`RealtimeLink` decides nothing: it tracks the model's protocol and tells the
machine what the model does, as events (facts → events); every wait is a machine timer:

=====================================  ==================================================
the model (plugin event)               machine event
=====================================  ==================================================
the session started (its capabilities)  ``RealtimeModelLinked`` (``turn_detection`` →
                                        ``replies_to_turns``,
                                        ``auto_tool_reply_generation`` →
                                        ``replies_to_tool_output``)
``response.created`` / ``response.done``  ``ModelResponseCreated`` / ``ModelResponseDone``
                                        (raw events of the OpenAI plugin,
                                        ``openai_server_event_received``)
a reply nobody asked for                ``ModelReplyStarted`` (its speech is held: it
(``speech_created``, not user            reaches the machine as ``AgentSpeechCreated``
initiated)                              only if not suppressed), ``after_tool_output``
                                        and ``duplicate`` (LiveKit asks for the tool
                                        reply itself) read from the conversation
a ``response.cancel`` sent (``openai_    ``ModelCancelSent`` (it gets an event id; one
client_event_queued``)                  naming no response is made to name the reply
                                        the machine suppressed, when that is the
                                        plugin's current generation)
its answer: an error (``response_       ``ModelCancelAnswered``, the named cancel or the
cancel_not_active``), or the             oldest; ``response.done`` answers the cancels
``response.done`` of the response it     naming its response or none unless it
cancelled                               ``completed`` (done before they landed: each
                                        gets an error)
a new connection                        ``ModelResponseDone`` for each response the
(``session_reconnected``)               lost connection left open,
                                        ``ModelCancelAnswered`` for each cancel; its
                                        requests and truncates are forgotten (the plugin
                                        replays its options, the lock's included)
a committed user item                   ``UserTurnCommitted`` (``remote_item_added``, or
                                        ``conversation_item_added``; once per item)
a ``response.create`` refused           ``EffectOutcome`` ``refused`` of the
(``conversation_already_has_active_      ``StartGreeting``/``Say`` that asked for it, and
response``, matched to the oldest        its speech ended at once, as the plugin ends it
unanswered request: the real service     when the refusal names it (it would wait 10 s;
names no event id)                      interrupting it would send a cancel)
=====================================  ==================================================

Its levers are :class:`~.realtime_levers.RealtimeLevers` (their table is there).

Only private details of the plugin are touched, all guarded: the mirror of the server
conversation (``RealtimeSession._remote_chat_ctx``) gets the edited text of a truncated
message; the session's ``tool_choice`` and ``turn_detection`` are read from its options
to restore them; a refused request's wait for its response
(``RealtimeSession._response_created_futures``) is failed as the plugin fails it.
"""

from __future__ import annotations

import asyncio
import collections
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from livekit.agents import llm, utils
from livekit.agents.voice import SpeechHandle
from livekit.agents.voice.events import FunctionToolsExecutedEvent, SpeechCreatedEvent

from turnfsm import effects as fx
from turnfsm import events as ev

from . import translate
from .effect_outcomes import UNFINISHED, PendingOutcome
from .heard import ModelItem, SpeakingRates, heard_of_model
from .port import LeverPort

_R = TypeVar("_R")


class Dispatching(Protocol):
    """What the link needs of the dispatcher (:class:`~.dispatch.Dispatcher`)."""

    def dispatch(self, event: ev.Event) -> tuple[fx.Effect, ...]: ...

    def now(self) -> float: ...

    def guarded(self, name: str, handler: Callable[[Any], _R]) -> Callable[[Any], _R | None]: ...

    def report_failure(self, where: str, error: BaseException, detail: str) -> None: ...


ACTIVE_RESPONSE = "conversation_already_has_active_response"
"""The error code of a ``response.create`` refused while a response is active."""

CANCEL_NOT_ACTIVE = "response_cancel_not_active"
"""The error code of a ``response.cancel`` that found no response to cancel (the one
it names is done, or none is active)."""

_AUDIO_TOO_SHORT = re.compile(r"Audio content of (\d+)ms is already shorter than (\d+)ms")
"""The model's refusal of a truncate past the end of its item's audio."""


_PCM16_BYTES_PER_SECOND = 24000 * 2
"""The plugin's realtime audio: 24 kHz mono PCM16."""


def say_exactly(text: str) -> str:
    """Instructions that make a realtime model speak ``text`` (it has no ``say``)."""
    return f'Say exactly this, word for word, and nothing else: "{text}"'


@dataclass
class _ResponseItems:
    """Server items a response produced, and the speech that plays it."""

    speech_id: str | None
    items: list[tuple[str, str, str]] = field(default_factory=list)
    """(item id, ``message``|``function_call``, call id)."""
    skipped: bool = False
    """A reply of the model's own for which LiveKit made no speech: nothing plays it."""


@dataclass
class _Cancel:
    """A ``response.cancel`` the client sent and the model has not answered yet."""

    cancel_id: str
    response_id: str
    """The response it names; empty: whatever is active when it lands."""


@dataclass
class _Request:
    """A ``response.create`` the client sent and the model has not answered yet."""

    event_id: str
    speech_id: str | None
    cancelled: bool = False
    """LiveKit cancelled it before the model created its response: cancelled by name
    once created."""


class RealtimeLink:
    """The realtime model's protocol tracker for one call: its facts, as machine events."""

    def __init__(self, port: LeverPort, dispatcher: Dispatching) -> None:
        self.port = port
        self.dispatcher = dispatcher
        self.rt_session: llm.RealtimeSession | None = None
        self.server_turns = False
        """Server turn detection answers turns itself (``capabilities.turn_detection``)."""
        self._released = False
        self._committed_user_items: set[str] = set()
        self._held: dict[str, SpeechHandle] = {}
        """The model's own replies reported to the machine, until they are done."""
        self._suppressed: set[str] = set()
        self._cut_speeches: set[str] = set()
        """Speeches done cut short (interrupted, or suppressed): what the model still sends
        for them was never heard."""
        self._responses: dict[str, _ResponseItems] = {}
        self._speech_responses: dict[str, list[str]] = {}
        self._response_status: dict[str, str] = {}
        """How each response ended (``response.done``), by response id."""
        self._current_response: str | None = None
        self._last_server_speech: SpeechHandle | None = None
        self._last_input: str | None = None
        self._tool_event: FunctionToolsExecutedEvent | None = None
        self._requests: collections.deque[_Request] = collections.deque()
        self._discarded: dict[str, str] = {}
        """Requests cancelled before their response was created, whose speech is done:
        the speech, by the request's event id."""
        self._cancels: collections.deque[_Cancel] = collections.deque()
        self._request_outcomes: dict[str, PendingOutcome] = {}
        """Deferred outcomes of greeting levers, by the speech they created."""
        self._items: dict[str, ModelItem] = {}
        self._rates = SpeakingRates()
        """The model's slowest speaking rate, over its items whose audio was all sent."""
        self._truncates: collections.deque[dict[str, Any]] = collections.deque()
        self._rt_handlers: list[tuple[str, Callable[..., None]]] = []
        self._session_handlers: list[tuple[str, Callable[..., None]]] = []

    # -- lifecycle ----------------------------------------------------------------------

    @property
    def capabilities(self) -> llm.RealtimeCapabilities | None:
        """The running realtime session's capabilities (None before the session started)."""
        return self.rt_session.capabilities if self.rt_session is not None else None

    def bind(self) -> None:
        """Subscribe to the realtime session and tell the machine which model it runs
        (called once the agent session started, before ``SessionStarted``)."""
        if self.rt_session is not None:
            return
        caps = self._subscribe(self.port.session.current_agent.realtime_llm_session)
        guarded = self.dispatcher.guarded("realtime tools", self._on_tools_executed)
        self.port.session.on("function_tools_executed", guarded)
        self._session_handlers.append(("function_tools_executed", guarded))
        self.dispatcher.dispatch(
            ev.RealtimeModelLinked(
                at=self.dispatcher.now(),
                replies_to_turns=caps.turn_detection,
                replies_to_tool_output=caps.auto_tool_reply_generation,
            )
        )

    def _subscribe(self, rt_session: llm.RealtimeSession) -> llm.RealtimeCapabilities:
        self.rt_session = rt_session
        caps = rt_session.capabilities
        self.server_turns = caps.turn_detection
        rt_handlers: dict[str, Callable[[Any], None]] = {
            "generation_created": self._on_generation_created,
            "remote_item_added": self._on_remote_item_added,
            # the OpenAI plugin's raw protocol events; other plugins never emit them
            "openai_server_event_received": self._on_server_event,
            "openai_client_event_queued": self._on_client_event,
            "session_reconnected": self._on_reconnected,
        }
        for name, handler in rt_handlers.items():
            guarded = self.dispatcher.guarded(f"realtime {name}", handler)
            rt_session.on(name, guarded)
            self._rt_handlers.append((name, guarded))
        return caps

    def _unsubscribe(self) -> None:
        if self.rt_session is not None:
            for name, handler in self._rt_handlers:
                self.rt_session.off(name, handler)
        self._rt_handlers.clear()

    async def follow_handoff(self) -> llm.RealtimeSession | None:
        """A handoff started a new agent activity, which may open a new realtime session
        (an agent with a model of its own): once the activity started, the link moves to
        it, as after a reconnect. Returns the new session (its levers in force are put on
        it: :meth:`.RealtimeLevers.follow_handoff`), ``None`` when the link stays."""
        activity = getattr(self.port.session, "_activity", None)
        started = getattr(activity, "_lock", None)  # held while the activity starts
        if started is not None:
            async with started:
                pass
        try:
            rt_session = self.port.session.current_agent.realtime_llm_session
        except RuntimeError:
            return None  # the new agent runs no realtime model
        if self._released or self.rt_session is None or rt_session is self.rt_session:
            return None  # (the first agent's activity: bind() takes its session)
        self._unsubscribe()
        self._on_reconnected(llm.RealtimeSessionReconnectedEvent())
        self._subscribe(rt_session)
        return rt_session

    @property
    def released(self) -> bool:
        """The link stopped listening (:meth:`release`)."""
        return self._released

    def release(self) -> None:
        """Stop listening (detach)."""
        if self._released:
            return
        self._released = True
        self._unsubscribe()
        for name, handler in self._session_handlers:
            self.port.session.off(name, handler)  # type: ignore[arg-type]
        self._session_handlers.clear()
        self._held.clear()

    # -- user turns ---------------------------------------------------------------------

    @property
    def owns_user_turns(self) -> bool:
        """User turns are committed by the server, not by LiveKit's turn detector."""
        return self.server_turns

    def user_item(self, item: llm.ChatMessage) -> None:
        """A user message reached the conversation: commit it as a turn, once per id."""
        if item.id in self._committed_user_items:
            return
        self._committed_user_items.add(item.id)
        self._last_input = "user"
        self.dispatcher.dispatch(translate.user_turn(item, self.dispatcher.now()))

    def item(self, item_id: str) -> ModelItem | None:
        """What the model sent for its message ``item_id`` (the outcome monitor's facts)."""
        return self._items.get(item_id)

    def cut_short(self, item_id: str) -> bool:
        """The model's message ``item_id`` ended before all its audio came: its response
        was cancelled, failed or left incomplete, or its connection was lost."""
        item = self._items.get(item_id)
        return item is not None and item.audio_seconds > 0 and not item.audio_done

    def suppress(self, speech_id: str) -> SpeechHandle:
        """The model's own reply ``speech_id``, marked suppressed (its speech is never
        reported and its server items are deleted once done)."""
        handle = self._held.get(speech_id)
        if handle is None:
            raise LookupError(f"no reply {speech_id!r} of the model to suppress")
        self._suppressed.add(handle.id)
        return handle

    def await_response(self, speech_id: str, outcome: PendingOutcome) -> None:
        """A greeting lever's outcome waits for the model to take or refuse its speech."""
        self._request_outcomes[speech_id] = outcome

    # -- speeches -----------------------------------------------------------------------

    def intercept_speech(self, event: SpeechCreatedEvent) -> bool:
        """Called first for every ``speech_created``; True swallows the speech (the
        machine suppressed it: it is cancelled before it plays and never reaches the
        machine as an agent speech). A speech it lets through reaches :meth:`speech_done`
        from the adapter's own end of the speech, first (a speech's done callbacks run in
        no set order)."""
        handle = event.speech_handle
        if event.user_initiated:
            return False
        self._last_server_speech = handle
        self._held[handle.id] = handle
        self.dispatcher.dispatch(
            ev.ModelReplyStarted(
                at=self.dispatcher.now(),
                speech_id=handle.id,
                after_tool_output=self._last_input == "tool_output",
                duplicate=self._last_input == "tool_output" and self._livekit_continues_tools(),
            )
        )
        if handle.id not in self._suppressed:
            return False
        handle.add_done_callback(self.speech_done)
        return True

    def _livekit_continues_tools(self) -> bool:
        """LiveKit asks for the reply to the last tool step itself (the server's own reply
        would be a second one)."""
        caps = self.capabilities
        tool_event = self._tool_event
        return (
            caps is not None
            and not caps.auto_tool_reply_generation
            and tool_event is not None
            and tool_event.has_tool_reply
        )

    def speech_done(self, handle: SpeechHandle) -> None:
        """A speech ended: its greeting's outcome is reported, its unheard server items
        deleted (before the machine hears of its end)."""
        if self._released:  # detached: nothing may start any more
            return
        try:
            self._speech_done(handle)
        except Exception as error:
            self.dispatcher.report_failure("realtime speech done", error, handle.id)

    def _speech_done(self, handle: SpeechHandle) -> None:
        speech_id = handle.id
        self._held.pop(speech_id, None)
        for request in [r for r in self._requests if r.speech_id == speech_id]:
            self._requests.remove(request)  # never answered (timed out, or interrupted)
            if request.cancelled:  # the model may still create it: the plugin discards it
                self._discarded[request.event_id] = speech_id
        outcome = self._request_outcomes.pop(speech_id, None)
        if outcome is not None:  # reported before the speech's end reaches the machine
            error = handle.exception()
            unfinished = self._unfinished_response(speech_id)
            if isinstance(error, llm.RealtimeError):
                outcome.resolve("refused", getattr(error, "code", None) or "RealtimeError")
            elif unfinished is not None:
                outcome.resolve("failed", f"{UNFINISHED}: response {unfinished}")
            else:
                outcome.resolve("done")
        if handle.interrupted or speech_id in self._suppressed:
            self._cut_speeches.add(speech_id)
            self._delete_unplayed(speech_id, everything=speech_id in self._suppressed)

    def _on_reconnected(self, event: llm.RealtimeSessionReconnectedEvent) -> None:
        """The plugin lost its connection and opened a new one (replaying its options,
        the lock's turn detection included, and the conversation it had confirmed). What
        was in flight on the old one is gone: its responses never end, its requests and
        truncates are never answered. The machine is told the model is free."""
        for response_id in self._responses:
            if response_id not in self._response_status:
                self._response_status[response_id] = "dropped"
                self.dispatcher.dispatch(
                    ev.ModelResponseDone(at=self.dispatcher.now(), response_id=response_id)
                )
        self._answer_cancels(list(self._cancels))  # gone with their connection
        self._requests.clear()
        self._discarded.clear()
        self._truncates.clear()
        self._current_response = None

    def _unfinished_response(self, speech_id: str) -> str | None:
        """How the last response of a speech ended when the model did not complete it
        (``cancelled``, ``failed``, ``incomplete``, or ``dropped``: its connection was
        lost before its ``response.done``); None when it completed or none was made."""
        responses = self._speech_responses.get(speech_id)
        if not responses:
            return None
        status = self._response_status.get(responses[-1], "dropped")
        return None if status == "completed" else status

    # -- the model's protocol events (OpenAI plugin) -------------------------------------

    def _on_client_event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "response.create":
            speech = self.port.session.current_speech
            speech_id = speech.id if speech is not None else None
            self._requests.append(
                _Request(
                    event_id=str(event.get("event_id") or ""),
                    speech_id=speech_id,
                )
            )
        elif kind == "conversation.item.truncate":
            self._truncates.append(event)
        elif kind == "response.cancel":
            self._cancel_sent(event)

    def _on_server_event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "response.created":
            response = event.get("response") or {}
            self._answer_request(
                (response.get("metadata") or {}).get("client_event_id"), response.get("id") or ""
            )
            self.dispatcher.dispatch(
                ev.ModelResponseCreated(
                    at=self.dispatcher.now(), response_id=str(response.get("id") or "")
                )
            )
        elif kind == "response.done":
            response = event.get("response") or {}
            response_id, status = str(response.get("id") or ""), str(response.get("status") or "")
            self._response_status[response_id] = status
            self.dispatcher.dispatch(
                ev.ModelResponseDone(at=self.dispatcher.now(), response_id=response_id)
            )
            if status != "completed":
                # it ended as a cancel landed (or before one could: failed, incomplete), so
                # the cancels meant for it are answered; a completed response was done before
                # they landed, and each is answered by an error
                self._answer_cancels(
                    [c for c in self._cancels if c.response_id in ("", response_id)]
                )
        elif kind == "response.output_audio.delta":
            item = self._items.setdefault(str(event.get("item_id")), ModelItem())
            item.add_audio(_pcm16_seconds(str(event.get("delta") or "")))
        elif kind == "response.output_audio_transcript.delta":
            item = self._items.setdefault(str(event.get("item_id")), ModelItem())
            item.add_text(str(event.get("delta") or ""))
        elif kind == "response.output_item.done":
            self._item_done(event.get("item") or {})
        elif kind == "conversation.item.truncated":
            self._answer_truncate(str(event.get("item_id") or ""))
        elif kind == "error":
            self._on_error(event.get("error") or {})

    def _item_done(self, done: dict[str, Any]) -> None:
        """A message item is whole only when completed: a cancelled one ends with the
        text that ran ahead of its audio, which would overstate the speaking rate."""
        item = self._items.get(str(done.get("id")))
        if item is None or done.get("status") != "completed":
            return
        item.audio_done = True
        self._rates.heard_whole(item.transcript, item.audio_seconds)

    def _cancel_sent(self, cancel: dict[str, Any]) -> None:
        """A ``response.cancel`` is about to leave (the plugin serialises the event after
        this hook): it gets an id, and the machine holds it until the model answers it
        (invariant I9: nothing is asked of the model meanwhile).

        LiveKit's interrupt cancels the plugin's current generation with a cancel that
        names no response: the model cancels whatever is active when it arrives, the
        greeting by then (issue 19). When that generation is a reply the machine
        suppressed, or any response not done as far as the link knows, the cancel names it,
        so a late one is refused instead of cutting another response: a barge-in's cancel
        landing after the model cut the reply itself (``turn_detected``) and began
        answering the next turn cut that answer (fuzz realtime seeds 134, 392, 434, 452,
        471). A cancel for a reply not created yet (the plugin's ``generate_reply`` given
        up) stays bare."""
        current = self._current_response
        items = self._responses.get(current or "")
        if (
            not cancel.get("response_id")
            and current
            and items is not None
            and (items.speech_id in self._suppressed or current not in self._response_status)
        ):
            cancel["response_id"] = current
        settled = current is None or current in self._response_status
        if not cancel.get("response_id") and self._requests and settled:
            # LiveKit cancels a reply whose create is still on its way (the plugin's pending
            # generation): no response exists to name yet, and a bare cancel would cut
            # whatever is active when it lands, e.g. the model's answer to the caller who
            # interrupted (fuzz realtime seed 836). It names the request instead, which no
            # response is (the model refuses it, harmlessly), and the reply is cancelled by
            # its own id once created.
            request = self._requests[-1]
            request.cancelled = True
            cancel["response_id"] = f"not_created_{request.event_id}"
        cancel_id = str(cancel.get("event_id") or utils.shortuuid("response_cancel_"))
        cancel["event_id"] = cancel_id
        response_id = str(cancel.get("response_id") or "")
        self._cancels.append(_Cancel(cancel_id=cancel_id, response_id=response_id))
        self.dispatcher.dispatch(
            ev.ModelCancelSent(
                at=self.dispatcher.now(), cancel_id=cancel_id, response_id=response_id
            )
        )

    def _cancel_refused(self, event_id: str | None) -> None:
        """The model had nothing to cancel: the cancel it names, else the oldest one
        unanswered (the model handles client events in order; the real service names
        none)."""
        named = [c for c in self._cancels if event_id and c.cancel_id == event_id]
        self._answer_cancels(named[:1] or list(self._cancels)[:1])

    def _answer_cancels(self, answered: list[_Cancel]) -> None:
        for cancel in answered:
            self._cancels.remove(cancel)
            self.dispatcher.dispatch(
                ev.ModelCancelAnswered(at=self.dispatcher.now(), cancel_id=cancel.cancel_id)
            )

    def _answer_request(self, event_id: str | None, response_id: str = "") -> None:
        """The model created a response: the request it answers is taken. A greeting's
        outcome waits for its speech's end: only a response the model completed is a
        greeting said (issue 19)."""
        for request in list(self._requests):
            if request.event_id == event_id:
                self._requests.remove(request)
                # the OpenAI plugin's raw send: its interrupt() cancels only what is active
                send = getattr(self.rt_session, "send_event", None)
                if request.cancelled and send is not None and response_id:
                    send({"type": "response.cancel", "response_id": response_id})
                return
        speech_id = self._discarded.pop(event_id or "", None)
        if speech_id is not None and response_id:
            # the plugin discards it (no generation_created): what it sends is its cut
            # speech's, never heard, and deleted as it comes (the tool call of a reply
            # stopped at the tool cap stayed in the model's conversation)
            self._current_response = response_id
            self._responses[response_id] = _ResponseItems(speech_id=speech_id)
            self._speech_responses.setdefault(speech_id, []).append(response_id)

    def _answer_truncate(self, item_id: str) -> None:
        for truncate in list(self._truncates):
            if truncate.get("item_id") == item_id:
                self._truncates.remove(truncate)
                return

    def _on_error(self, error: dict[str, Any]) -> None:
        code = error.get("code")
        message = str(error.get("message") or "")
        if code == ACTIVE_RESPONSE:
            self._request_refused(error.get("event_id"), message)
        elif code == CANCEL_NOT_ACTIVE or message.startswith("Cancellation failed"):
            self._cancel_refused(error.get("event_id"))
        elif (too_short := _AUDIO_TOO_SHORT.search(message)) and self._truncates:
            self._truncate_again(int(too_short.group(1)), int(too_short.group(2)))

    def _request_refused(self, event_id: str | None, message: str) -> None:
        """A ``response.create`` was refused: the one it names, else the oldest pending
        (the model handles client events in order; the real service names none)."""
        if not self._requests:
            return
        named = [r for r in self._requests if event_id and r.event_id == event_id]
        request = named[0] if named else self._requests[0]
        self._requests.remove(request)
        # its speech ends with the refusal, as when the model names the request
        failed = self._fail_request(request.event_id, message)
        if request.speech_id is None:
            return
        outcome = self._request_outcomes.pop(request.speech_id, None)
        if outcome is not None:
            outcome.resolve("refused", ACTIVE_RESPONSE)
        if failed:
            return
        handle = self.port.speeches.get(request.speech_id)
        if handle is not None and not handle.done():
            handle.interrupt(force=True)  # nothing will play: end it now, not in 10 s

    def _fail_request(self, event_id: str, message: str) -> bool:
        """Fail the plugin's wait for the refused request's ``response.created``, as the
        plugin does itself when the refusal names its event: its speech ends at once.
        (Interrupting the speech instead makes LiveKit cancel the request with a
        ``response.cancel`` naming no response, for a response nothing created, and one
        more cancel on its way for the greeting to wait out.) False when the plugin keeps
        no such wait."""
        futures = getattr(self.rt_session, "_response_created_futures", None)
        waiting = futures.pop(event_id, None) if isinstance(futures, dict) else None
        if not isinstance(waiting, asyncio.Future) or waiting.done():
            return False
        waiting.set_exception(llm.RealtimeError(message, code=ACTIVE_RESPONSE))
        return True

    def _truncate_again(self, audio_ms: int, asked_ms: int) -> None:
        """A truncate past the end of the item's audio was refused: cut at its end."""
        refused = next(
            (t for t in self._truncates if int(t.get("audio_end_ms", -1)) == asked_ms),
            self._truncates[0],
        )
        self._truncates.remove(refused)
        if self.rt_session is None:
            return
        self.rt_session.truncate(  # at 0 ms the plugin deletes the item: nothing is in it
            message_id=str(refused.get("item_id")),
            modalities=["audio", "text"],
            audio_end_ms=audio_ms,
        )

    # -- server conversation bookkeeping ------------------------------------------------

    def _on_generation_created(self, event: llm.GenerationCreatedEvent) -> None:
        if event.user_initiated:
            speech = self.port.session.current_speech
        else:
            speech, self._last_server_speech = self._last_server_speech, None
        response_id = event.response_id or ""
        self._current_response = response_id
        speech_id = speech.id if speech is not None else None
        skipped = speech is None and not event.user_initiated
        self._responses[response_id] = _ResponseItems(speech_id=speech_id, skipped=skipped)
        if speech_id is not None:
            self._speech_responses.setdefault(speech_id, []).append(response_id)

    def _on_remote_item_added(self, event: llm.RemoteItemAddedEvent) -> None:
        item = event.item
        if item.type == "function_call_output":
            self._last_input = "tool_output"
            return
        if item.type == "function_call":
            self._note_response_item(item.id, "function_call", item.call_id)
            return
        if item.type != "message":
            return
        if item.role == "user":
            # a server-committed audio turn carries no text yet; text items are the
            # client's own and come back through conversation_item_added
            if self.owns_user_turns and not item.text_content:
                self.user_item(item)
        elif item.role == "assistant" and not item.text_content:
            self._note_response_item(item.id, "message", "")

    def _note_response_item(self, item_id: str, kind: str, call_id: str) -> None:
        response = self._responses.get(self._current_response or "")
        if response is None:
            return
        response.items.append((item_id, kind, call_id))
        if response.skipped:
            # a reply of the model's own that no speech plays: LiveKit skipped its generation
            # (its scheduling stopped: the session closes after turnfsm hung up, waiting out
            # a tool step, while the model still answers the caller) but keeps what it sends
            # in the agent's chat_ctx (fuzz realtime seed 1195)
            self.delete_items([item_id])
        elif response.speech_id in self._cut_speeches:
            # arrived after its speech was done, cancelled or interrupted: never heard
            # (fuzz realtime seeds 769, 936: a tool reply cut before any audio played)
            everything = response.speech_id in self._suppressed
            self._delete_unplayed(response.speech_id, everything=everything)

    def _delete_unplayed(self, speech_id: str, *, everything: bool) -> None:
        """Delete the server items of a speech's responses that the caller never heard:
        messages never committed with text, function calls that never got an output."""
        caps = self.capabilities
        if self.rt_session is None or caps is None or not caps.mutable_chat_context:
            return
        remote = self.rt_session.chat_ctx
        answered = {item.call_id for item in remote.items if item.type == "function_call_output"}
        history = self.port.session.history
        doomed: list[str] = []
        for response_id in self._speech_responses.get(speech_id, []):
            for item_id, kind, call_id in self._responses[response_id].items:
                if remote.get_by_id(item_id) is None:
                    continue
                if kind == "function_call":
                    unplayed = everything or call_id not in answered
                else:
                    committed = history.get_by_id(item_id)
                    unplayed = everything or not (
                        isinstance(committed, llm.ChatMessage) and committed.text_content
                    )
                if unplayed:
                    doomed.append(item_id)
        if doomed:
            self.delete_items(doomed)

    def delete_items(self, item_ids: list[str]) -> None:
        session = self.port.session
        for item_id in item_ids:
            if session.history.get_by_id(item_id) is not None:
                session.history.remove(item_id)

        async def sync() -> None:
            agent = session.current_agent
            context = agent.chat_ctx.copy()
            for item_id in item_ids:
                if context.get_by_id(item_id) is not None:
                    context.remove(item_id)
            await agent.update_chat_ctx(context)

        self.port.track(sync(), "update_chat_ctx (unplayed realtime items)")

    def _on_tools_executed(self, event: FunctionToolsExecutedEvent) -> None:
        self._tool_event = event

    def whole_text(self, message: llm.ChatMessage) -> str:
        """All of the message's text that is known: the model's own transcript (LiveKit
        commits only a synchronizer's prefix of it when one is in the chain), else the
        message's, as :func:`.heard.heard_of_model` cuts it."""
        item = self._items.get(message.id)
        return (item.transcript if item is not None else "") or message.text_content or ""

    def heard(self, port: LeverPort, effect: fx.DropUnspokenText, message: llm.ChatMessage) -> str:
        """The words of the message played to their end (:func:`.heard.heard_of_model`:
        the model's own transcript over its own audio, never the synchronizer's text)."""
        segment = port.last_segment.get(effect.speech_id)
        if segment is None:
            return ""
        item = self._items.get(message.id)
        return heard_of_model(segment, item, message.text_content or "", self._rates)

    def mirror_text(self, item_id: str, text: str) -> None:
        """Keep the plugin's mirror of the server item equal to the local message, so a
        later context diff does not delete and re-create it."""
        mirror = getattr(self.rt_session, "_remote_chat_ctx", None)
        node = mirror.get(item_id) if mirror is not None else None
        item = getattr(node, "item", None)
        if isinstance(item, llm.ChatMessage):
            item.content = [text]


def _pcm16_seconds(delta: str) -> float:
    """Seconds of audio in a base64 PCM16 delta, from its length (no decoding)."""
    padding = delta[-2:].count("=") if delta else 0
    return (len(delta) * 3 // 4 - padding) / _PCM16_BYTES_PER_SECOND
