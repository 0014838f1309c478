"""The realtime model's levers: what carries out the machine's effects under
``llm.RealtimeModel``, where several pipeline levers do not hold (:mod:`.realtime`).

:class:`RealtimeLevers` decides nothing and keeps only what it changed on the model (to
restore it): the facts of the model's protocol (its responses, requests, cancels, what
it said and how fast) are :class:`~.realtime.RealtimeLink`'s, which it asks. Each lever
takes the port, the effect and its site, as the pipeline's do (:mod:`.port`).

=========================  ============================================================
effect                     realtime lever
=========================  ============================================================
MuteInput / HoldUserTurns  the pipeline levers: under server turn detection the machine
                           holds user turns ``at_input_gate`` (the model would hear the
                           caller and cancel): the :class:`~.audio.InputGate` shut,
                           holding the audio with ``answer_whole``; ``ResumeUserTurns``
                           replays it, the model commits the overlap as one turn;
                           ``ClearUserTurn`` clears the model's input buffer. A
                           spill-over tail is never held there (the model commits it).
PauseModelReplies          ``update_options(turn_detection=<the session's, with
                           create_response and interrupt_response off>)``: what the
                           model committed before the gate shut (the lock's window) is
                           neither answered nor allowed to cancel anything;
                           ``ResumeModelReplies`` restores the session's setting
SuppressReply              the held speech interrupted before it is authorized (LiveKit
                           sends ``response.cancel``); once done, its server items are
                           deleted
StartGreeting / Say        ``session.say`` with a TTS or ``supports_say``, else
                           ``generate_reply(instructions='Say exactly: "..."',
                           tool_choice="none")``; ``done`` at the speech's end once the
                           model completed the response, ``refused`` when it rejects it,
                           ``failed`` (detail ``unfinished: response <status>``) when the
                           response ended ``cancelled``, ``failed`` or ``incomplete`` or
                           its connection was lost (``dropped``): the machine says the
                           greeting once more, locked
DropUnspokenText           for every message cut short (interrupted, or its audio never
                           all came: a cancelled, failed or incomplete response, a lost
                           connection; the adapter reports those as interrupted): the
                           local message is edited in place to the words played to their
                           end (:mod:`.heard`; never the transcript synchronizer's text):
                           over the item's own audio length once all of it came, else at
                           the slowest of its rate, the model's earlier rates and a slow
                           prior, one word earlier; nothing heard → removed. Its
                           outcome tells the lengths measured, as the pipeline's does.
                           Server side, LiveKit truncates an interrupted message
                           (``conversation.item.truncate``, ``audio_end_ms`` = played ms)
                           and the plugin's mirror gets the heard text; a message the
                           model cut is replaced through ``update_chat_ctx`` (re-created
                           on a new connection whose replay left it out). A truncate the
                           model rejects as past its audio (its items run ~85 ms short)
                           is sent again at the length the model states
ForbidTools / AllowTools   the session's ``tool_choice`` set to ``"none"`` (before the
                           capped step's output reaches the model) / restored
CancelToolReply            ``cancel_tool_reply()`` (LiveKit asks for no further step)
FinalReplyWithoutTools     ``generate_reply(tool_choice="none")``
=========================  ============================================================

"""

from __future__ import annotations

from typing import Any

from livekit.agents.voice import SpeechHandle

from turnfsm import effects as fx

from . import levers
from .port import Lever, LeverPort, Site
from .realtime import RealtimeLink, say_exactly


class RealtimeLevers:
    """The realtime levers of one call, over its :class:`~.realtime.RealtimeLink`."""

    def __init__(self, link: RealtimeLink, port: LeverPort) -> None:
        self.link = link
        self.port = port
        self.levers: dict[type[fx.Effect], Lever] = {
            fx.StartGreeting: self._start_greeting,
            fx.Say: self._say,
            fx.DropUnspokenText: self._drop_unspoken_text,
            fx.FinalReplyWithoutTools: self._final_reply_without_tools,
            fx.SuppressReply: self._suppress_reply,
            fx.PauseModelReplies: self._pause_model_replies,
            fx.ResumeModelReplies: self._resume_model_replies,
            fx.ForbidTools: self._forbid_tools,
            fx.AllowTools: self._allow_tools,
        }
        self._saved_tool_choice: Any = None
        self._tools_forbidden = False
        self._saved_turn_detection: Any = None
        self._replies_paused = False

    async def follow_handoff(self) -> None:
        """A handoff started a new agent activity: the link moves to the new realtime
        session, if any (:meth:`.RealtimeLink.follow_handoff`), and the levers in force
        are put on it (the lock's paused replies, forbidden tools)."""
        rt_session = await self.link.follow_handoff()
        if rt_session is None:
            return
        options = getattr(rt_session, "_opts", None)
        if self._replies_paused and getattr(options, "turn_detection", None) is not None:
            self._replies_paused = False
            self._pause()
        if self._tools_forbidden:
            self._tools_forbidden = False
            self._forbid()

    def release(self) -> None:
        """Restore what the levers changed on the model, and stop the link (detach)."""
        if self.link.released:
            return
        if not self.port.closing:
            self._allow()
            self._resume()
        self._tools_forbidden = self._replies_paused = False
        self.link.release()

    def _speak(self, port: LeverPort, text: str | None, instructions: str | None) -> SpeechHandle:
        session = port.session
        caps = self.link.capabilities
        if text is not None and (session.tts is not None or (caps and caps.supports_say)):
            return session.say(text)
        directive = say_exactly(text) if text is not None else instructions
        return session.generate_reply(instructions=directive or "", tool_choice="none")

    def _ask(self, port: LeverPort, text: str | None, instructions: str | None) -> None:
        """Say a greeting; its outcome waits for the model to take or refuse it."""
        handle = self._speak(port, text, instructions)
        if not handle.done():
            self.link.await_response(handle.id, port.defer_outcome())

    def _start_greeting(self, port: LeverPort, effect: fx.StartGreeting, site: Site) -> None:
        self._ask(port, effect.text, effect.instructions)

    def _say(self, port: LeverPort, effect: fx.Say, site: Site) -> None:
        if effect.reason == "greeting":
            self._ask(port, effect.text, None)
        else:
            self._speak(port, effect.text, None)

    def _final_reply_without_tools(
        self, port: LeverPort, effect: fx.FinalReplyWithoutTools, site: Site
    ) -> None:
        port.session.generate_reply(tool_choice="none")

    def _suppress_reply(self, port: LeverPort, effect: fx.SuppressReply, site: Site) -> None:
        self.link.suppress(effect.speech_id).interrupt(force=True)

    @property
    def replies_paused(self) -> bool:
        """Whether the model's own replies are off (``PauseModelReplies`` in force)."""
        return self._replies_paused

    def _pause_model_replies(
        self, port: LeverPort, effect: fx.PauseModelReplies, site: Site
    ) -> None:
        self._pause()

    def _pause(self) -> None:
        rt_session = self.link.rt_session
        options = getattr(rt_session, "_opts", None)
        current = getattr(options, "turn_detection", None)
        if rt_session is None or self._replies_paused or current is None:
            return
        self._saved_turn_detection = current
        self._replies_paused = True
        rt_session.update_options(  # type: ignore[call-arg]  # the OpenAI plugin's
            turn_detection=current.model_copy(
                update={"create_response": False, "interrupt_response": False}
            )
        )

    def _resume_model_replies(
        self, port: LeverPort, effect: fx.ResumeModelReplies, site: Site
    ) -> None:
        self._resume()

    def _resume(self) -> None:
        rt_session = self.link.rt_session
        if not self._replies_paused or rt_session is None:
            return
        self._replies_paused = False
        update = rt_session.update_options
        update(turn_detection=self._saved_turn_detection)  # type: ignore[call-arg]

    def _forbid_tools(self, port: LeverPort, effect: fx.ForbidTools, site: Site) -> None:
        self._forbid()

    def _forbid(self) -> None:
        rt_session = self.link.rt_session
        if self._tools_forbidden or rt_session is None:
            return
        options = getattr(rt_session, "_opts", None)
        self._saved_tool_choice = getattr(options, "tool_choice", None) or "auto"
        self._tools_forbidden = True
        rt_session.update_options(tool_choice="none")

    def _allow_tools(self, port: LeverPort, effect: fx.AllowTools, site: Site) -> None:
        self._allow()

    def _allow(self) -> None:
        rt_session = self.link.rt_session
        if not self._tools_forbidden or rt_session is None:
            return
        self._tools_forbidden = False
        rt_session.update_options(tool_choice=self._saved_tool_choice)

    def _drop_unspoken_text(
        self, port: LeverPort, effect: fx.DropUnspokenText, site: Site
    ) -> None:
        link = self.link
        message = levers.committed_message(port, effect)
        heard = levers.cut_to_heard(
            port,
            effect,
            message,
            link.whole_text(message),
            lambda: link.heard(port, effect, message),
        )
        if not heard:
            link.delete_items([message.id])
            return
        caps = link.capabilities
        if caps is not None and caps.message_truncation and message.interrupted:
            link.mirror_text(message.id, heard)  # LiveKit truncated the server item already
        elif caps is not None and caps.mutable_chat_context:
            # cut by the model (failed, cancelled, its connection lost): the plugin's diff
            # replaces the server's item with the heard text, or re-creates it on a new
            # connection whose replay left it out
            agent = port.session.current_agent
            port.track(agent.update_chat_ctx(agent.chat_ctx.copy()), "update_chat_ctx")
