"""Realtime models: the levers that really hold under ``llm.RealtimeModel``.

With a realtime model (``openai.realtime.RealtimeModel`` and the like) the model itself
hears the caller and, with server-side turn detection, decides turns on its own: it
cancels its own response when the caller speaks (``interrupt_response``), answers every
committed turn with a response nobody asked for (``create_response``), and LiveKit
downgrades ``allow_interruptions=False`` to ``True`` (#6635). Several pipeline levers
therefore do not hold. :func:`~turnfsm.adapters.livekit.attach` recognises a realtime
model (``isinstance(session.llm, llm.RealtimeModel)``) and puts :class:`RealtimeLink` in
charge of the levers below; every other effect keeps its pipeline lever.

Levers per capability (``RealtimeCapabilities`` of the session, read once it started):

=========================================  ===============================================
capability / situation                      lever
=========================================  ===============================================
``turn_detection`` (server detection with   **Greeting lock:** the :class:`~.audio.InputGate`
``create_response``; the OpenAI default)    is shut (``MuteInput``; and ``HoldUserTurns``,
                                            see below): the model hears silence, so the
                                            server's VAD never fires — no server-side
                                            cancel, no ``speech_started`` barge-in. The
                                            greeting's handle is locked too
                                            (``LockSpeech``), but that alone does not hold.
                                            Server turn detection itself is never switched
                                            off (``update_options(turn_detection=None)``
                                            would leave nobody committing audio, since
                                            LiveKit keeps the flag it resolved at start,
                                            and it would have to be restored on every exit
                                            path); opening the gate is the only restore,
                                            done by the machine's clean-up and by
                                            :meth:`~.adapter.TurnAdapter.detach`.
                                            **keep_listening:** cannot hold (the server
                                            would hear the caller and cancel), so
                                            ``HoldUserTurns`` in the greeting shuts the gate
                                            *holding* the audio when ``greeting_overlap`` is
                                            ``answer_whole``: ``ResumeUserTurns`` replays it,
                                            the server commits the overlap as one turn and
                                            answers it whole. With ``drop`` the audio is
                                            dropped (``ClearUserTurn`` clears the server
                                            buffer). ``HoldUserTurns`` for a spill-over tail
                                            in ``listening`` is a no-op (no client-side turn
                                            to hold: the server commits it).
                                            **User turns:** ``UserTurnCommitted`` comes from
                                            the server's committed user item
                                            (``remote_item_added``, before the server's
                                            reply is created) or from
                                            ``conversation_item_added`` (role user), once per
                                            item id; ``TurnAgent.on_user_turn_completed``
                                            does not run here.
                                            **Greeting reply:** when the greeting answers
                                            the callee's first words, the server has
                                            already started its own reply; that reply is
                                            cancelled before it plays (its handle is
                                            interrupted before authorization, never shown
                                            to the machine, and its server items deleted),
                                            then the greeting is generated (next row).
no ``supports_say`` and no TTS              ``StartGreeting``/``Say`` with a fixed text:
                                            ``generate_reply(instructions='Say exactly:
                                            "..."', tool_choice="none")``; generated
                                            greetings use their instructions.
``message_truncation``                      ``DropUnspokenText``: LiveKit already truncates
                                            the played message server-side
                                            (``conversation.item.truncate``, ``audio_end_ms``
                                            = played ms) or deletes it when nothing played;
                                            the local message is edited in place to the
                                            spoken prefix (and the plugin's mirror of the
                                            server item with it, so later context diffs
                                            agree); nothing heard → removed with
                                            ``agent.update_chat_ctx`` (diffed into
                                            ``conversation.item.delete``). Without the
                                            capability the edited text is pushed with
                                            ``agent.update_chat_ctx``.
``mutable_chat_context``                    Unplayed items of an interrupted or cancelled
                                            response (messages never played, function calls
                                            never run) are deleted server-side once its
                                            handle is done (#6424), with
                                            ``agent.update_chat_ctx``.
``auto_tool_reply_generation`` = False      LiveKit asks for each tool reply itself; a reply
(OpenAI)                                    the server starts on its own after a tool
                                            output duplicates it and would bypass the cap
                                            (a fresh handle): it is cancelled before it
                                            plays or runs a tool.
``auto_tool_reply_generation`` = True       The server's own reply *is* the continuation and
                                            is let through below the cap.
every realtime model, at the tool cap       ``CancelToolReply``: ``cancel_tool_reply()``
                                            (LiveKit asks for no further step) and the
                                            session's ``tool_choice`` is set to ``"none"``
                                            before the tool output reaches the server, so no
                                            reply the server starts on its own can call a
                                            tool; restored when the final reply ends, on the
                                            next user turn, or on detach.
                                            ``FinalReplyWithoutTools``: once the capped
                                            step's handle is done, a reply the server
                                            started on its own is adopted as the final
                                            reply; otherwise (after a short wait for models
                                            that reply on their own)
                                            ``generate_reply(tool_choice="none")``.
=========================================  ===============================================

Without server turn detection (client-side turn taking, or ``create_response=False``)
LiveKit keeps ``allow_interruptions=False``, and the pipeline levers for
``HoldUserTurns``/``ResumeUserTurns`` and the user turn commits are used unchanged.

Only one private detail of the plugin is touched: the mirror of the server conversation
(``RealtimeSession._remote_chat_ctx``) gets the edited text of a truncated message, and
the session's ``tool_choice`` is read from its options to restore it; both are guarded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from livekit.agents import llm
from livekit.agents.voice import SpeechHandle
from livekit.agents.voice.events import FunctionToolsExecutedEvent, SpeechCreatedEvent

from turnfsm import effects as fx
from turnfsm import events as ev
from turnfsm.spoken import spoken_prefix

from . import levers
from .log import logger

if TYPE_CHECKING:
    from .adapter import TurnAdapter


GREETING_REPLY_WAIT = 2.0
"""Seconds to wait for the server's own reply to the callee's first words (it is replaced
by the greeting); without one by then the greeting is generated anyway."""

AUTO_TOOL_REPLY_WAIT = 2.0
"""Seconds to wait, at the tool cap, for a reply the server starts on its own (models that
reply to tool output themselves) before asking for the final reply."""

ACTIVE_GENERATION_WAIT = 5.0
"""Longest wait for the server to finish a response before asking for a new one."""

_POLL = 0.05


def say_exactly(text: str) -> str:
    """Instructions that make a realtime model speak ``text`` (it has no ``say``)."""
    return f'Say exactly this, word for word, and nothing else: "{text}"'


@dataclass
class _ResponseItems:
    """Server items a response produced, and the speech that plays it."""

    speech_id: str | None
    items: list[tuple[str, str, str]] = field(default_factory=list)
    """(item id, ``message``|``function_call``, call id)."""


@dataclass
class _FinalReply:
    """The final reply without tools asked for at the cap."""

    tool_speech_id: str
    speech_id: str | None = None
    deadline: float = 0.0


class RealtimeLink:
    """Realtime-specific levers and bookkeeping for one :class:`~.adapter.TurnAdapter`."""

    def __init__(self, adapter: TurnAdapter) -> None:
        self.adapter = adapter
        self.rt_session: llm.RealtimeSession | None = None
        self.server_turns = False
        """Server turn detection answers turns itself (``capabilities.turn_detection``)."""
        self.levers: dict[type[fx.Effect], levers.Lever] = {
            fx.HoldUserTurns: self._hold_user_turns,
            fx.ResumeUserTurns: self._resume_user_turns,
            fx.StartGreeting: self._start_greeting,
            fx.Say: self._say,
            fx.DropUnspokenText: self._drop_unspoken_text,
            fx.CancelToolReply: self._cancel_tool_reply,
            fx.FinalReplyWithoutTools: self._final_reply_without_tools,
        }
        self._released = False
        self._committed_user_items: set[str] = set()
        self._gate_holds_turns = False
        self._greeting: fx.StartGreeting | None = None
        self._greeting_timer: asyncio.TimerHandle | None = None
        self._replaced_for_greeting: str | None = None
        self._suppressed: set[str] = set()
        self._done_speeches: set[str] = set()
        self._handles: dict[str, SpeechHandle] = {}
        self._responses: dict[str, _ResponseItems] = {}
        self._speech_responses: dict[str, list[str]] = {}
        self._current_response: str | None = None
        self._last_server_speech: SpeechHandle | None = None
        self._last_input: str | None = None
        self._tool_event: FunctionToolsExecutedEvent | None = None
        self._server_tool_replies_seen = False
        self._no_tools = False
        self._saved_tool_choice: Any = None
        self._capped_speech = ""
        self._final: _FinalReply | None = None
        self._final_timer: asyncio.TimerHandle | None = None
        self._rt_handlers: list[tuple[str, Callable[..., None]]] = []
        self._session_handlers: list[tuple[str, Callable[..., None]]] = []

    # -- lifecycle ----------------------------------------------------------------------

    @property
    def capabilities(self) -> llm.RealtimeCapabilities | None:
        """The running realtime session's capabilities (None before the session started)."""
        return self.rt_session.capabilities if self.rt_session is not None else None

    def bind(self) -> None:
        """Subscribe to the realtime session (called once the agent session started)."""
        if self.rt_session is not None:
            return
        agent = self.adapter.session.current_agent
        rt_session = agent.realtime_llm_session
        self.rt_session = rt_session
        self.server_turns = rt_session.capabilities.turn_detection
        rt_handlers: dict[str, Callable[[Any], None]] = {
            "generation_created": self._on_generation_created,
            "remote_item_added": self._on_remote_item_added,
        }
        for name, handler in rt_handlers.items():
            guarded = self.adapter._guarded(f"realtime {name}", handler)
            rt_session.on(name, guarded)
            self._rt_handlers.append((name, guarded))
        guarded = self.adapter._guarded("realtime tools", self._on_tools_executed)
        self.adapter.session.on("function_tools_executed", guarded)
        self._session_handlers.append(("function_tools_executed", guarded))

    def release(self) -> None:
        """Stop listening, cancel timers and restore the session's options. Idempotent."""
        self._released = True
        for timer in (self._greeting_timer, self._final_timer):
            if timer is not None:
                timer.cancel()
        self._greeting_timer = self._final_timer = None
        self._greeting = None
        self._final = None
        if not self.adapter.closing:
            self._restore_tools()
        self._no_tools = False
        if self.rt_session is not None:
            for name, handler in self._rt_handlers:
                self.rt_session.off(name, handler)
        self._rt_handlers.clear()
        for name, handler in self._session_handlers:
            self.adapter.session.off(name, handler)  # type: ignore[arg-type]
        self._session_handlers.clear()
        self._gate_holds_turns = False

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
        self._restore_tools()
        self._cancel_final()
        self.adapter.dispatch(
            ev.UserTurnCommitted(
                at=self.adapter.now(), text=item.text_content or "", item_id=item.id
            )
        )

    # -- speeches -----------------------------------------------------------------------

    def intercept_speech(self, event: SpeechCreatedEvent) -> bool:
        """Called first for every ``speech_created``; True swallows the speech (it is
        cancelled before it plays and never reaches the machine)."""
        handle = event.speech_handle
        self._handles[handle.id] = handle
        handle.add_done_callback(self._on_speech_done)
        if event.user_initiated:
            return False
        self._last_server_speech = handle
        if self._greeting is not None and self._replaced_for_greeting is None:
            # the server's own answer to the callee's first words: the greeting replaces it
            self._replaced_for_greeting = handle.id
            self._suppress(handle)
            return True
        if self._last_input != "tool_output":
            return False  # a reply to the caller's turn: the machine decides
        self._server_tool_replies_seen = True
        final = self._final
        if final is not None and final.speech_id is None:
            final.speech_id = handle.id  # adopted: it runs under tool_choice "none"
            return False
        if final is not None or self._livekit_continues_tools():
            self._suppress(handle)
            return True
        return False

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

    def _suppress(self, handle: SpeechHandle) -> None:
        self._suppressed.add(handle.id)
        handle.interrupt(force=True)

    def _on_speech_done(self, handle: SpeechHandle) -> None:
        if self._released:  # detached: nothing may start any more
            return
        try:
            self._speech_done(handle)
        except Exception as error:
            self.adapter._report_failure("realtime speech done", error, handle.id)

    def _speech_done(self, handle: SpeechHandle) -> None:
        speech_id = handle.id
        self._done_speeches.add(speech_id)
        if handle.interrupted or speech_id in self._suppressed:
            self._delete_unplayed(speech_id, everything=speech_id in self._suppressed)
        if speech_id == self._replaced_for_greeting:
            self._replaced_for_greeting = None
            if self._greeting is not None:
                self._generate_greeting()
        final = self._final
        if final is not None and speech_id == final.tool_speech_id:
            wait = (
                AUTO_TOOL_REPLY_WAIT
                if self._server_tool_replies_seen
                or (self.capabilities is not None and self.capabilities.auto_tool_reply_generation)
                else 0.0
            )
            loop = asyncio.get_running_loop()
            final.deadline = loop.time() + wait + ACTIVE_GENERATION_WAIT
            self._schedule_final(wait)
        elif final is not None and speech_id == final.speech_id:
            self._cancel_final()
            self._restore_tools()
        self._handles.pop(speech_id, None)

    # -- server conversation bookkeeping ------------------------------------------------

    def _on_generation_created(self, event: llm.GenerationCreatedEvent) -> None:
        if event.user_initiated:
            speech = self.adapter.session.current_speech
        else:
            speech, self._last_server_speech = self._last_server_speech, None
        response_id = event.response_id or ""
        self._current_response = response_id
        speech_id = speech.id if speech is not None else None
        self._responses[response_id] = _ResponseItems(speech_id=speech_id)
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
        if response.speech_id in self._suppressed and response.speech_id in self._done_speeches:
            self._delete_items([item_id])  # arrived after its cancelled speech was done

    def _delete_unplayed(self, speech_id: str, *, everything: bool) -> None:
        """Delete the server items of a speech's responses that the caller never heard:
        messages never committed with text, function calls that never got an output."""
        caps = self.capabilities
        if self.rt_session is None or caps is None or not caps.mutable_chat_context:
            return
        remote = self.rt_session.chat_ctx
        answered = {item.call_id for item in remote.items if item.type == "function_call_output"}
        history = self.adapter.session.history
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
            self._delete_items(doomed)

    def _delete_items(self, item_ids: list[str]) -> None:
        session = self.adapter.session
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

        self.adapter.track(sync(), "update_chat_ctx (unplayed realtime items)")

    # -- tools --------------------------------------------------------------------------

    def _on_tools_executed(self, event: FunctionToolsExecutedEvent) -> None:
        self._tool_event = event

    def _force_no_tools(self) -> None:
        if self._no_tools or self.rt_session is None:
            return
        options = getattr(self.rt_session, "_opts", None)
        self._saved_tool_choice = getattr(options, "tool_choice", None) or "auto"
        self._no_tools = True
        self.rt_session.update_options(tool_choice="none")

    def _restore_tools(self) -> None:
        if not self._no_tools or self.rt_session is None:
            return
        self._no_tools = False
        try:
            self.rt_session.update_options(tool_choice=self._saved_tool_choice)
        except Exception as error:
            self.adapter._report_failure("restore tool_choice", error, "realtime session")

    def _schedule_final(self, delay: float) -> None:
        if self._final_timer is not None:
            self._final_timer.cancel()
        loop = asyncio.get_running_loop()
        self._final_timer = loop.call_later(delay, self._final_due)

    def _final_due(self) -> None:
        self._final_timer = None
        final = self._final
        if final is None or final.speech_id is not None:
            return
        rt_session = self.rt_session
        loop = asyncio.get_running_loop()
        busy = bool(getattr(rt_session, "has_active_generation", False))
        if busy and loop.time() < final.deadline:
            self._schedule_final(_POLL)
            return
        handle = self.adapter.session.generate_reply(tool_choice="none")
        final.speech_id = handle.id

    def _cancel_final(self) -> None:
        if self._final_timer is not None:
            self._final_timer.cancel()
            self._final_timer = None
        self._final = None

    # -- greeting -----------------------------------------------------------------------

    def _generate_greeting(self) -> None:
        if self._greeting_timer is not None:
            self._greeting_timer.cancel()
            self._greeting_timer = None
        greeting, self._greeting = self._greeting, None
        if greeting is not None:
            self._speak(greeting.text, greeting.instructions)

    def _speak(self, text: str | None, instructions: str | None) -> SpeechHandle:
        session = self.adapter.session
        caps = self.capabilities
        if text is not None and (session.tts is not None or (caps and caps.supports_say)):
            return session.say(text)
        directive = say_exactly(text) if text is not None else instructions
        return session.generate_reply(instructions=directive or "", tool_choice="none")

    # -- levers -------------------------------------------------------------------------

    def _hold_user_turns(self, adapter: TurnAdapter, effect: fx.HoldUserTurns) -> None:
        if not self.server_turns:
            levers.hold_user_turns(adapter, effect)
            return
        if adapter.controller.state != "greeting":
            logger.debug("turnfsm: realtime server turns: no spill-over hold")
            return
        hold = adapter.controller.policy.greeting_overlap == "answer_whole"
        adapter.require_gate().mute(hold_audio=hold)
        self._gate_holds_turns = True

    def _resume_user_turns(self, adapter: TurnAdapter, effect: fx.ResumeUserTurns) -> None:
        if not self.server_turns:
            levers.resume_user_turns(adapter, effect)
            return
        if self._gate_holds_turns:
            self._gate_holds_turns = False
            # held overlap is answered whole after the greeting, never after the end
            replay = (
                adapter.controller.policy.greeting_overlap == "answer_whole"
                and not adapter.controller.is_ended
            )
            adapter.require_gate().unmute(replay_held_audio=replay)

    def _start_greeting(self, adapter: TurnAdapter, effect: fx.StartGreeting) -> None:
        if effect.in_reply_to is not None and self.server_turns:
            # the server answers the first words on its own: that reply is replaced
            self._greeting = effect
            self._replaced_for_greeting = None
            loop = asyncio.get_running_loop()
            self._greeting_timer = loop.call_later(GREETING_REPLY_WAIT, self._greeting_overdue)
            return
        self._speak(effect.text, effect.instructions)

    def _greeting_overdue(self) -> None:
        self._greeting_timer = None
        if self._replaced_for_greeting is None:
            self._generate_greeting()

    def _say(self, adapter: TurnAdapter, effect: fx.Say) -> None:
        self._speak(effect.text, None)

    def _drop_unspoken_text(self, adapter: TurnAdapter, effect: fx.DropUnspokenText) -> None:
        message = adapter.assistant_messages.get(effect.speech_id)
        if message is None:  # nothing committed yet: applied when the message arrives
            adapter.pending_drops[effect.speech_id] = effect
            return
        adapter.pending_drops.pop(effect.speech_id, None)
        if effect.keep == "nothing":
            heard = ""
        else:
            segment = adapter.last_segment.get(effect.speech_id)
            if segment is not None and segment.synchronized_transcript is not None:
                heard = segment.synchronized_transcript
            elif effect.played_text is not None:
                heard = effect.played_text
            elif segment is not None:
                text = message.text_content or ""
                heard = spoken_prefix(text, segment.played_seconds, segment.pushed_seconds)
            else:
                heard = ""
        message.content = [heard] if heard else []
        if not heard:
            self._delete_items([message.id])
            return
        caps = self.capabilities
        if caps is not None and caps.message_truncation:
            self._mirror_text(message.id, heard)  # the server truncated it already
        elif caps is not None and caps.mutable_chat_context:
            agent = adapter.session.current_agent
            adapter.track(agent.update_chat_ctx(agent.chat_ctx.copy()), "update_chat_ctx")

    def _mirror_text(self, item_id: str, text: str) -> None:
        """Keep the plugin's mirror of the server item equal to the local message, so a
        later context diff does not delete and re-create it."""
        mirror = getattr(self.rt_session, "_remote_chat_ctx", None)
        node = mirror.get(item_id) if mirror is not None else None
        item = getattr(node, "item", None)
        if isinstance(item, llm.ChatMessage):
            item.content = [text]

    def _cancel_tool_reply(self, adapter: TurnAdapter, effect: fx.CancelToolReply) -> None:
        levers.cancel_tool_reply(adapter, effect)
        self._force_no_tools()
        self._capped_speech = effect.speech_id

    def _final_reply_without_tools(
        self, adapter: TurnAdapter, effect: fx.FinalReplyWithoutTools
    ) -> None:
        self._force_no_tools()
        tool_speech_id = self._capped_speech
        self._final = _FinalReply(tool_speech_id=tool_speech_id)
        if tool_speech_id in self._done_speeches or tool_speech_id not in self._handles:
            loop = asyncio.get_running_loop()
            self._final.deadline = loop.time() + ACTIVE_GENERATION_WAIT
            self._schedule_final(0.0)
