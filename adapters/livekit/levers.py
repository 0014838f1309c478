"""One function per effect: the exact LiveKit lever that carries it out.

Each lever takes the port (:class:`~.port.LeverPort`), the effect and the site it runs
at (:class:`~.port.Site`); returning is ``done``, raising
:class:`~.effect_outcomes.EffectRefused` is LiveKit's refusal, any other exception a
failure — the dispatcher reports each as ``EffectOutcome``. A decision a LiveKit call
site must carry out runs within the step that call site dispatched (``site.call``):
``cancel_tool_reply()`` on the ``function_tools_executed`` event being handled, and the
greeting written into the ``turn_ctx`` of the ``on_user_turn_completed`` hook being run
(:mod:`.turn_hook`); the turn hook raises ``StopResponse`` on the ``RejectUserTurn`` its
``dispatch`` returns. No lever leaves a decision on the port for a later callback.

=======================  =================================================================
effect                   lever
=======================  =================================================================
MuteInput                :class:`~.audio.InputGate` shut (silence to the pipeline; the
                         caller's frames dropped, or held with ``hold_audio``); nothing in
                         a text-only session (no audio input: the caller types)
UnmuteInput              gate open; held frames replayed or discarded (replayed: done
                         once the replay is over)
LockSpeech               ``speech_handle.allow_interruptions = False``; refused once the
                         speech is interrupted
StartGreeting            the reply to the callee's turn becomes the greeting: written into
                         the ``turn_ctx`` of the ``on_user_turn_completed`` hook that
                         committed it, which ``TurnAgent.llm_node`` reads (done when the
                         hook lets LiveKit reply, refused when it stops the reply; a
                         preemptive reply is dropped with ``session.interrupt()``); with
                         ``first_words`` (not committed yet), a locked
                         ``generate_reply(user_input=first_words)`` whose context asks
                         for the greeting, then ``session.clear_user_turn()``; else
                         ``session.say(..., allow_interruptions=False)`` /
                         ``generate_reply(instructions=)``. A text greeting plays its
                         pre-rendered audio (``TurnAgent.tts_node``, ``say(audio=)``)
                         when it is ready (:mod:`.prerender`; the outcome's detail says)
HoldUserTurns            ``session.update_options(turn_detection="manual")`` and
                         ``interruption["discard_audio_if_uninterruptible"] = False`` so
                         STT hears the overlap; through LiveKit's AEC warm-up (the STT
                         hears silence then) the gate holds the caller's audio too,
                         replayed when it ends (:mod:`.warmup`). ``at_input_gate`` (a
                         realtime model's server turns): the gate shut, holding the
                         audio with ``hold_audio``; nothing in a text-only session
ResumeUserTurns          audio held through the warm-up replayed; previous turn detection
                         and discard setting restored;
                         ``session.commit_user_turn()`` when ``commit_pending`` (no wait
                         for a final transcript when the held speech's is in).
                         ``at_input_gate``: the gate open, its held audio replayed with
                         ``replay_held_audio`` (the server commits it as a turn)
Interrupt                ``session.interrupt(force=...)``; refused when the current speech
                         does not allow interruptions (LiveKit raises). Forced, also
                         ``speech_handle.interrupt(force=True)`` on every speech not
                         scheduled yet (it is created before LiveKit schedules it). With
                         ``speech_id``: ``speech_handle.interrupt()`` on that one only
DropUnspokenText         the committed assistant message edited in place to the words
                         played to their end (:mod:`.heard`; a text-only session's:
                         kept whole, all of it was read), or emptied and removed
                         (``agent.update_chat_ctx``, ``session.history.remove``);
                         its outcome tells the lengths measured (``text_chars``,
                         ``heard_chars``); refused when LiveKit committed none
ClearUserTurn            ``session.clear_user_turn()``
RejectUserTurn           ``StopResponse`` from ``TurnAgent.on_user_turn_completed``, or
                         the item removed from the history; at LiveKit's end of the
                         turn (:class:`~.interruption.TurnEnd`), no turn: answered as
                         LiveKit answers one under ``min_words``
CancelToolReply          ``FunctionToolsExecutedEvent.cancel_tool_reply()``
HoldToolReply            a gate for the speech (:class:`~.interruption.ToolReplyHolds`):
                         ``TurnAgent.llm_node`` awaits it before it asks the model for the
                         reply to that speech's tool output; refused when LiveKit would
                         not interrupt the speech (``allow_interruptions`` off) or it is
                         gone
ReleaseToolReply         the gate opened: the reply goes to the model (``send``), or the
                         node yields nothing (LiveKit's interruption has cancelled it)
FinalReplyWithoutTools   ``session.generate_reply(tool_choice="none")``; its
                         ``fallback_text`` pre-rendered meanwhile (:mod:`.prerender`)
StartTimer, CancelTimer  ``loop.call_later`` / ``TimerHandle.cancel``
Say                      ``session.say(text)``, ``allow_interruptions=False`` when locked;
                         ``audio=`` its pre-rendered frames when ready (the greeting, the
                         re-prompt, the fallback; the outcome's detail says). The greeting
                         said again (``in_reply_to``) within the hook of the turn it
                         answers goes into that hook's ``turn_ctx``, as ``StartGreeting``
                         does
EndCall                  the ``end_call`` callback given to :func:`attach` (an
                         awaitable it returns is awaited: its failure is the outcome),
                         else ``session.shutdown()``
SuppressReply,           realtime models only (``fx.REALTIME_EFFECTS``, emitted once the
PauseModelReplies,       machine was told of one): refused here
ResumeModelReplies,
ForbidTools, AllowTools
=======================  =================================================================

With a realtime model (``llm.RealtimeModel``) some of these do not hold, and
:class:`~.realtime_levers.RealtimeLevers` replaces them (its docstring has the table per
capability); under server-side turn detection:

=======================  =================================================================
effect                   realtime lever
=======================  =================================================================
HoldUserTurns            the gate shut (``at_input_gate``: the machine knows the server
                         detects turns), holding the audio with ``answer_whole`` (the
                         server would hear the caller and cancel); a spill-over is not
                         held (the server commits it before anything could)
ResumeUserTurns          gate open, held audio replayed (the server commits it as a turn)
StartGreeting            ``generate_reply(instructions='Say exactly: ...')`` (no TTS),
                         once the machine suppressed the model's own reply to the first
                         words and its response is done; refused when the model rejects it
Say                      ``generate_reply(instructions='Say exactly: ...')`` (no TTS)
SuppressReply            the model's own reply interrupted before it plays, its items
                         deleted
PauseModelReplies        ``turn_detection`` with ``create_response``/``interrupt_response``
                         off; ``ResumeModelReplies`` restores it
ForbidTools, AllowTools  the session's ``tool_choice="none"`` / restored
DropUnspokenText         LiveKit's ``conversation.item.truncate``/``delete`` plus the local
                         message edited in place, or removed (``agent.update_chat_ctx``);
                         unplayed items of interrupted responses deleted (#6424)
FinalReplyWithoutTools   ``generate_reply(tool_choice="none")``, when the machine asks
                         (it adopts the model's own tool-free reply instead, if one came)
=======================  =================================================================
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

from livekit.agents import NOT_GIVEN, FunctionToolsExecutedEvent, llm

from turnfsm import effects as fx

from . import heard
from .effect_outcomes import EffectRefused
from .interruption import TurnEnd
from .port import Lever, LeverPort, Site
from .prerender import played
from .turn_hook import GreetingForm, UserTurnHook, ask_greeting, reply_model


def mute_input(port: LeverPort, effect: fx.MuteInput, site: Site) -> None:
    if port.text_only:
        return  # no audio comes in to mute: the caller types (session.run, text input)
    port.require_gate().mute(hold_audio=effect.hold_audio)


def unmute_input(port: LeverPort, effect: fx.UnmuteInput, site: Site) -> None:
    if port.text_only:
        return
    gate = port.require_gate()
    gate.unmute(replay_held_audio=effect.replay_held_audio)
    if effect.replay_held_audio:  # done once the caller's held audio is heard
        port.track(gate.replayed(), "replay of the held audio")


def lock_speech(port: LeverPort, effect: fx.LockSpeech, site: Site) -> None:
    handle = port.speeches.get(effect.speech_id)
    if handle is None:
        raise LookupError(f"no speech {effect.speech_id!r} to lock")
    if handle.interrupted:  # LiveKit cannot lock it any more (its setter raises)
        raise EffectRefused("the speech is already interrupted")
    if handle.allow_interruptions:
        handle.allow_interruptions = False


def start_greeting(port: LeverPort, effect: fx.StartGreeting, site: Site) -> None:
    form: GreetingForm = "text" if effect.text is not None else "instructions"
    text = effect.text if effect.text is not None else effect.instructions or ""
    if (hook := _hook_of(port, site, effect.in_reply_to)) is not None:
        _greet_in_reply(port, hook, form, text)
        return
    if effect.first_words is not None and isinstance(reply_model(port.session), llm.LLM):
        greet_first_words(port, effect.first_words, form, text)
        return
    if effect.text is not None:
        say_text(port, effect.text, allow_interruptions=False)
    else:
        port.session.generate_reply(
            instructions=effect.instructions or "", allow_interruptions=False
        )


def _hook_of(port: LeverPort, site: Site, turn: str | None) -> UserTurnHook | None:
    """The ``on_user_turn_completed`` hook running now for ``turn``, when the reply to it
    can carry the greeting: a pipeline model, no greeting asked of it yet, and the agent's
    own hook still to run (once it ran, what the reply says is the agent's)."""
    hook = site.call
    if (
        isinstance(hook, UserTurnHook)
        and turn is not None
        and hook.message.id == turn
        and hook.greeting is None
        and not hook.agent_code_ran
        and isinstance(reply_model(port.session), llm.LLM)
    ):
        return hook
    return None


def _greet_in_reply(port: LeverPort, hook: UserTurnHook, form: GreetingForm, text: str) -> None:
    """The reply LiveKit generates from the hook's ``turn_ctx`` says the greeting
    (``TurnAgent.llm_node``; ``TurnAgent.tts_node`` plays a text pre-rendered if it can),
    so the callee's turn stays in the history before it."""
    discard_preemptive_reply(port)
    if form == "text":
        port.note_outcome_detail(port.prerendered.expect(text))
    hook.ask_greeting(form, text, port.defer_outcome())


def greet_first_words(port: LeverPort, words: str, form: GreetingForm, text: str) -> None:
    """The greeting answers the callee's first words as soon as their final transcript
    is in (``greet_on="final_transcript"``), before LiveKit's end of turn commits them.

    The reply LiveKit generates to ``generate_reply(user_input=words)`` is the greeting
    (written into its chat context, as :func:`_greet_in_reply` writes it into a turn's):
    LiveKit puts the words into the history as the reply starts, before the greeting, as
    it does for a committed turn; ``TurnAgent.tts_node`` plays the pre-rendered audio.
    Called on the session's own method: the machine already took the words as the
    callee's first, and :mod:`.text_turns` would report them again as a typed turn.
    LiveKit's pending user turn of the words is then dropped
    (:func:`take_first_words_from_livekit`), so that it never answers them again.
    """
    session = port.session
    discard_preemptive_reply(port)
    # made first: LiveKit inserts it by its creation time, and the request follows the
    # words it answers, as in a committed turn's context
    message = llm.ChatMessage(role="user", content=[words])
    turn_ctx = session.current_agent.chat_ctx.copy()
    ask_greeting(turn_ctx, form, text)
    if form == "text":
        port.note_outcome_detail(port.prerendered.expect(text))
    type(session).generate_reply(
        session, user_input=message, chat_ctx=turn_ctx, allow_interruptions=False
    )
    # LiveKit 1.8.9 adds a final transcript to its pending user turn, and prepares a reply
    # to it (preemptive generation: a model request), only once user_input_transcribed's
    # handlers have returned (AudioRecognition._process_stt_event): the words are taken
    # from it after this step, and no reply is prepared meanwhile (user turns are not held
    # under greeting_lock="mute_input"; the option is read when LiveKit prepares one)
    preemptive = session.options.preemptive_generation
    enabled = preemptive["enabled"]
    preemptive["enabled"] = False
    taken = asyncio.ensure_future(take_first_words_from_livekit(port))
    taken.add_done_callback(lambda _: preemptive.__setitem__("enabled", enabled))
    port.track(taken, "the first words taken from LiveKit's pending user turn")


async def take_first_words_from_livekit(port: LeverPort) -> None:
    """Drop LiveKit's pending user turn of the words the greeting answers: it would
    commit them again at the end of the callee's turn (``clear_user_turn()``). A reply
    LiveKit prepared for them all the same (an agent whose own ``turn_handling`` turns
    preemptive generation on) is stopped by its handle, the one speech LiveKit did not
    schedule: ``session.interrupt()``, which cancels it, would also try the locked
    greeting, queued by now."""
    port.session.clear_user_turn()
    for handle in list(port.speeches.values()):
        if not handle.done() and not handle.scheduled:
            handle.interrupt(force=True)


def discard_preemptive_reply(port: LeverPort) -> None:
    """Drop the reply LiveKit prepared before the turn ended (``preemptive_generation``,
    on by default) with ``session.interrupt()``, the public call that cancels it.

    LiveKit would discard it anyway, the turn context having changed, but with a warning
    in the agent's log on every call ("preemptive generation invalidated after
    ``on_user_turn_completed``"): the greeting replacing it is expected, not a fault.
    """
    if port.session.current_speech is None:
        port.track(port.session.interrupt(), "interrupt (preemptive reply)")


def hold_user_turns(port: LeverPort, effect: fx.HoldUserTurns, site: Site) -> None:
    if effect.at_input_gate:
        if not port.text_only:  # (no audio reaches the model: the caller types)
            port.require_gate().mute(hold_audio=effect.hold_audio)
        return
    session = port.session
    interruption = session.options.interruption
    port.held_turn_settings = (
        session.turn_detection,
        interruption["discard_audio_if_uninterruptible"],
    )
    interruption["discard_audio_if_uninterruptible"] = False
    session.update_options(turn_detection="manual")
    port.warmup.turns_held()


def resume_user_turns(port: LeverPort, effect: fx.ResumeUserTurns, site: Site) -> None:
    if effect.at_input_gate:
        if not port.text_only:
            port.require_gate().unmute(replay_held_audio=effect.replay_held_audio)
        return
    port.warmup.release()  # the audio held through LiveKit's AEC warm-up is heard now
    session = port.session
    if port.held_turn_settings is not None:
        turn_detection, discard = port.held_turn_settings
        port.held_turn_settings = None
        session.options.interruption["discard_audio_if_uninterruptible"] = discard
        session.update_options(turn_detection=turn_detection)
    if effect.commit_pending:
        commit_held_turn(port)


def commit_held_turn(port: LeverPort) -> None:
    """``session.commit_user_turn()`` of what the caller said while user turns were held."""
    # the caller is silent (the machine commits only a finished overlap): when its final
    # transcript is in, LiveKit need not wait for one more, which never comes once the
    # last final is older than 0.5 s (its default wait: 2 s)
    wait = 0.0 if port.transcript_final else 2.0
    port.track(port.session.commit_user_turn(transcript_timeout=wait), "commit_user_turn")


def release_input(
    port: LeverPort, *, commit: bool, report: Callable[[str, BaseException, str], None]
) -> None:
    """Whatever happened, the caller is heard again and user turns are committed;
    with ``commit`` (a failed ``ResumeUserTurns(commit_pending=True)``), what the
    caller said while they were held too: nothing else would commit it, as its end
    of speech came while turns were held, and the caller waits for an answer. A step
    that fails here is given to ``report`` (where, error, detail), never raised."""
    port.warmup.close()
    if port.gate is not None and port.gate.muted:
        port.gate.unmute(replay_held_audio=False)
    if port.held_turn_settings is not None:
        turn_detection, discard = port.held_turn_settings
        port.held_turn_settings = None
        try:
            port.session.options.interruption["discard_audio_if_uninterruptible"] = discard
            port.session.update_options(turn_detection=turn_detection)
        except Exception as error:
            report("release input", error, "restoring turn detection")
    if commit:
        try:
            commit_held_turn(port)
        except Exception as error:
            report("release input", error, "committing the held turn")


def interrupt(port: LeverPort, effect: fx.Interrupt, site: Site) -> None:
    if effect.speech_id is not None:
        interrupt_speech(port, effect.speech_id, force=effect.force)
        return
    session = port.session
    speech = session.current_speech
    try:
        done = session.interrupt(force=effect.force)
    except RuntimeError as error:
        if effect.force or speech is None or speech.allow_interruptions:
            raise  # not LiveKit's refusal (e.g. the session is not running)
        raise EffectRefused("the current speech does not allow interruptions") from error
    port.track(done, "interrupt")
    if effect.force:
        interrupt_unscheduled_speeches(port)


def interrupt_speech(port: LeverPort, speech_id: str, *, force: bool) -> None:
    """``speech_handle.interrupt()`` on that speech alone (queued or not yet scheduled,
    LiveKit then never plays it); refused when it is done already."""
    handle = port.speeches.get(speech_id)
    if handle is None:
        raise LookupError(f"no speech {speech_id!r} to interrupt")
    if handle.done():
        raise EffectRefused("the speech is done")
    handle.interrupt(force=force)


def interrupt_unscheduled_speeches(port: LeverPort) -> None:
    """Interrupt the speeches ``session.interrupt()`` cannot reach yet.

    LiveKit emits ``speech_created`` before it schedules the speech (``say``,
    ``generate_reply`` — e.g. from an agent's ``on_enter`` — and a preemptive reply), so
    an interrupt in that handler finds neither a current nor a queued speech: the speech
    would play once scheduled. Its handle is interrupted instead; LiveKit then never
    plays it.
    """
    for handle in list(port.speeches.values()):
        if not handle.done() and not handle.interrupted:
            handle.interrupt(force=True)


def drop_unspoken_text(port: LeverPort, effect: fx.DropUnspokenText, site: Site) -> None:
    apply_drop(port, effect, committed_message(port, effect))


def committed_message(port: LeverPort, effect: fx.DropUnspokenText) -> llm.ChatMessage:
    """The speech's assistant message, or a refusal: LiveKit has not committed one. (It
    commits a reply's message before the reply's end; one committed while the speech
    still plays gets its own drop, on ``assistant_message_committed``.)"""
    message = port.assistant_messages.get(effect.speech_id)
    if message is None:
        raise EffectRefused("no assistant message committed for this speech")
    return message


def apply_drop(port: LeverPort, effect: fx.DropUnspokenText, message: llm.ChatMessage) -> None:
    """Make ``message`` hold only what the caller heard (edits are in place: the agent's
    context and the session history share the message object)."""
    text = message.text_content or ""  # in full (the adapter restored it)
    if not cut_to_heard(port, effect, message, text, lambda: heard_text(port, effect, message)):
        _remove_message(port, message)


def cut_to_heard(
    port: LeverPort,
    effect: fx.DropUnspokenText,
    message: llm.ChatMessage,
    text: str,
    heard: Callable[[], str],
) -> str:
    """Cut ``message``, whose whole text is ``text``, to what the caller heard of it
    (``heard()``: the lever's measure; nothing under ``keep="nothing"``) and report both
    lengths in the effect's outcome, where the call metrics read the cut. Returns what it
    kept: empty, the lever removes the message.

    A text-only session plays no audio to measure: its caller read every word sent, which
    is what LiveKit committed, so all of it is kept (was: the adapter's speech end carried
    the text sent; with no playout to measure, the message was removed)."""
    if effect.keep == "nothing":
        kept = ""
    elif port.text_only:
        kept = message.text_content or ""
    else:
        kept = heard()
    port.note_cut(text_chars=len(text), heard_chars=len(kept))
    message.content = [kept] if kept else []
    return kept


def heard_text(port: LeverPort, effect: fx.DropUnspokenText, message: llm.ChatMessage) -> str:
    """The heard part of ``message``: :func:`.heard.heard_text` on its playout segment."""
    segment = port.last_segment.get(effect.speech_id)
    if segment is None:
        return ""
    playout = heard.Playout.of_segment(segment, message.text_content or "")
    return heard.heard_text(playout, port.speaking_rates)


def _remove_message(port: LeverPort, message: llm.ChatMessage) -> None:
    session = port.session
    if session.history.get_by_id(message.id) is not None:
        session.history.remove(message)
    agent = session.current_agent
    if agent.chat_ctx.get_by_id(message.id) is not None:
        context = agent.chat_ctx.copy()
        context.remove(message.id)
        port.track(agent.update_chat_ctx(context), "update_chat_ctx")


def clear_user_turn(port: LeverPort, effect: fx.ClearUserTurn, site: Site) -> None:
    port.session.clear_user_turn()


def reject_user_turn(port: LeverPort, effect: fx.RejectUserTurn, site: Site) -> None:
    """At LiveKit's end of the turn, no turn; out of the history if LiveKit already
    committed it; the turn hook that reported it raises ``StopResponse`` on this effect,
    taken from the step it dispatched."""
    if isinstance(turn_end := site.call, TurnEnd):
        turn_end.decline()
        return
    history = port.session.history
    if isinstance(message := history.get_by_id(effect.item_id), llm.ChatMessage):
        _remove_message(port, message)  # already committed: no hook can stop it now


def cancel_tool_reply(port: LeverPort, effect: fx.CancelToolReply, site: Site) -> None:
    executed = site.call
    if not isinstance(executed, FunctionToolsExecutedEvent):
        # (the machine asks for it only as a step ends: an extension that asks elsewhere)
        raise EffectRefused("LiveKit cancels a tool reply only in function_tools_executed")
    executed.cancel_tool_reply()


def hold_tool_reply(port: LeverPort, effect: fx.HoldToolReply, site: Site) -> None:
    handle = port.speeches.get(effect.speech_id)
    if handle is None or handle.done() or handle.interrupted:
        raise EffectRefused("the speech is gone: no reply to its tool output is to come")
    if not handle.allow_interruptions:
        raise EffectRefused("LiveKit will not interrupt the speech: its reply is not held")
    port.tool_reply_holds.hold(effect.speech_id)


def release_tool_reply(port: LeverPort, effect: fx.ReleaseToolReply, site: Site) -> None:
    port.tool_reply_holds.release(effect.speech_id, send=effect.send)


def final_reply_without_tools(
    port: LeverPort, effect: fx.FinalReplyWithoutTools, site: Site
) -> None:
    port.session.generate_reply(tool_choice="none")
    if not port.text_only:  # the fallback, if the model calls tools anyway, is rendered
        port.prerendered.start(effect.fallback_text)  # while it answers


def start_timer(port: LeverPort, effect: fx.StartTimer, site: Site) -> None:
    cancel_timer(port, fx.CancelTimer(timer=effect.timer), site)
    loop = asyncio.get_running_loop()
    port.timers[effect.timer] = loop.call_later(effect.seconds, port.timer_expired, effect.timer)


def cancel_timer(port: LeverPort, effect: fx.CancelTimer, site: Site) -> None:
    if (handle := port.timers.pop(effect.timer, None)) is not None:
        handle.cancel()


def say(port: LeverPort, effect: fx.Say, site: Site) -> None:
    if (hook := _hook_of(port, site, effect.in_reply_to)) is not None:
        # the greeting said again within the hook of the turn it answers (its first start
        # failed there): the reply to that turn still carries it
        _greet_in_reply(port, hook, "text", effect.text)
        return
    if effect.first_words is not None and isinstance(reply_model(port.session), llm.LLM):
        # the greeting said again, answering the words its first start was to carry
        greet_first_words(port, effect.first_words, "text", effect.text)
        return
    # only a locked say (the retried greeting) overrides the session's interruption default
    say_text(
        port,
        effect.text,
        allow_interruptions=NOT_GIVEN if effect.allow_interruptions else False,
    )


def say_text(port: LeverPort, text: str, *, allow_interruptions: Any) -> None:
    """``session.say``, with the text's pre-rendered audio when it can be played
    (:mod:`.prerender`); the outcome's detail says which audio was used."""
    frames, detail = port.prerendered.frames(text)
    audio = played(frames) if frames is not None else NOT_GIVEN
    port.session.say(text, audio=audio, allow_interruptions=allow_interruptions)
    port.note_outcome_detail(detail)


def end_call(port: LeverPort, effect: fx.EndCall, site: Site) -> None:
    if port.closing:  # the session is already closing: the call is over
        return
    if port.end_call is None:
        port.session.shutdown(drain=False)
        return
    hanging_up = port.end_call(effect.reason)
    if inspect.isawaitable(hanging_up):  # e.g. a coroutine: awaited, its failure reported
        port.track(hanging_up, "end_call", hang_up=True)


def realtime_only(port: LeverPort, effect: fx.Effect, site: Site) -> None:
    """The machine emits these only once told of a realtime model, whose link replaces
    this lever; reaching it means no model does what the effect asks."""
    raise EffectRefused(f"{effect.name} needs a realtime model")


LEVERS: dict[type[fx.Effect], Lever] = {
    fx.MuteInput: mute_input,
    fx.UnmuteInput: unmute_input,
    fx.LockSpeech: lock_speech,
    fx.StartGreeting: start_greeting,
    fx.HoldUserTurns: hold_user_turns,
    fx.ResumeUserTurns: resume_user_turns,
    fx.Interrupt: interrupt,
    fx.DropUnspokenText: drop_unspoken_text,
    fx.ClearUserTurn: clear_user_turn,
    fx.RejectUserTurn: reject_user_turn,
    fx.CancelToolReply: cancel_tool_reply,
    fx.HoldToolReply: hold_tool_reply,
    fx.ReleaseToolReply: release_tool_reply,
    fx.FinalReplyWithoutTools: final_reply_without_tools,
    fx.StartTimer: start_timer,
    fx.CancelTimer: cancel_timer,
    fx.Say: say,
    fx.EndCall: end_call,
    **dict.fromkeys(fx.REALTIME_EFFECTS, realtime_only),
}
"""Every effect type's lever; a test checks that none is missing."""
