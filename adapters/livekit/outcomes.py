"""The outcome monitor: what the session really did, checked beside what the machine emitted.

:class:`~turnfsm.invariants.SafetyMonitor` proves the machine's *effects* right; a lever
that does nothing, or a LiveKit setting that undoes it, leaves them right and the call
wrong. :class:`OutcomeMonitor` looks at the session instead: the audio that reached the
output (:class:`~.audio.PlayoutMeter`), the history, the tool rounds LiveKit ran, and the
input gate.

======  ==============================  ==================================================
name    short name                      what must hold (measured on)
======  ==============================  ==================================================
O1      no_audio_before_greeting        no agent audio reaches the output before the
                                        greeting's first frame (playout segments)
O2      greeting_played_whole           the greeting's audio plays to its end: its segment
                                        is not cut and everything pushed is played
                                        (unless the call ends during it)
O3      no_reply_to_overlap_fragment    no reply answers part of the speech that
                                        overlapped the greeting: with ``drop`` no reply
                                        to a turn holding any of it, with
                                        ``answer_whole`` only to a turn holding all of it
                                        (held audio replayed, every transcript of it kept)
O4      committed_text_heard            an interrupted reply leaves in the history no more
                                        words than the caller heard, measured apart from
                                        the lever (playout meter, the text's timing;
                                        a text-only session: the text sent), unless
                                        ``interrupted_text="keep"``
O5      tool_rounds_capped              LiveKit runs at most ``max_tool_steps`` tool rounds
                                        per user turn (``function_tools_executed``)
O6      input_released                  the input gate is open and user turns are not
                                        held in every state that does not mute or hold
                                        them, and when the call ends; a realtime model's
                                        own replies are not left paused past the greeting
O7      state_agrees                    the machine's configuration agrees with what the
                                        session shows (:class:`StateAgreement`): at every
                                        ``agent_state_changed`` and
                                        ``user_state_changed``, and whenever the session
                                        goes quiet
======  ==============================  ==================================================

A breach is counted in :attr:`OutcomeMonitor.counts` and traced, as an
``OutcomeBreached`` event naming the check, so ``turnfsm report`` names the calls that
broke one; :attr:`OutcomeMonitor.breaches` keeps them for a finished call (e.g.
:attr:`OutcomeMonitor.agreement_breaches`). In production it is logged once per check and
call, as a warning naming the check (no transcript text); with ``strict`` it is raised as
:class:`OutcomeBreach` at the end of the adapter's current run-to-completion step, never
inside LiveKit's audio chain.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from typing import Any, Protocol

from livekit.agents import AgentSession, llm
from livekit.agents.voice import SpeechHandle

from turnfsm import TurnController
from turnfsm import effects as fx
from turnfsm import events as ev
from turnfsm.machine import LIVE_STATES, PRE_GREETING_STATES, public_state
from turnfsm.spoken import spoken_prefix

from .audio import InputGate, PlayedSegment
from .effect_outcomes import UNFINISHED
from .log import logger
from .port import LeverPort
from .realtime import RealtimeLink
from .realtime_levers import RealtimeLevers
from .warmup import EchoWarmUpHold


class Watched(Protocol):
    """What the monitor reads of the adapter (:class:`~.adapter.TurnAdapter`), which it
    checks from beside it: it never imports it."""

    @property
    def controller(self) -> TurnController: ...

    @property
    def session(self) -> AgentSession: ...

    @property
    def dispatching(self) -> bool: ...

    @property
    def attached(self) -> bool: ...

    @property
    def closing(self) -> bool: ...

    @property
    def gate(self) -> InputGate | None: ...

    @property
    def held_turn_settings(self) -> tuple[Any, bool] | None: ...

    @property
    def warmup(self) -> EchoWarmUpHold: ...

    @property
    def realtime(self) -> RealtimeLink | None: ...

    @property
    def realtime_levers(self) -> RealtimeLevers | None: ...

    @property
    def assistant_messages(self) -> dict[str, llm.ChatMessage]: ...

    @property
    def forwarded_texts(self) -> dict[str, str]: ...

    @property
    def agent_hook(self) -> object | None: ...

    @property
    def port(self) -> LeverPort: ...

    def now(self) -> float: ...

    def trace_only(self, event: ev.Event) -> None: ...

    def guarded_call(self, name: str, call: Callable[[], object]) -> None: ...


OUTCOME_CHECKS: dict[ev.OutcomeCheck, str] = {
    "O1": "no_audio_before_greeting",
    "O2": "greeting_played_whole",
    "O3": "no_reply_to_overlap_fragment",
    "O4": "committed_text_heard",
    "O5": "tool_rounds_capped",
    "O6": "input_released",
    "O7": "state_agrees",
}

STATE_AGREEMENT: ev.OutcomeCheck = "O7"
"""The state-agreement check's name (:class:`StateAgreement`)."""

UNTIL_THE_GREETING = PRE_GREETING_STATES | {"greeting"}
"""Until the greeting has played: no other speech may reach the output (O1), and a
turn committed there is the first words or an overlap, judged by the greeting's checks."""
REPLIES_PAUSED_IN = UNTIL_THE_GREETING
"""The states in which a realtime model's own replies may be paused (the machine's:
:func:`turnfsm.rules.model_replies_paused`)."""
_REPORTS_OF_A_CUT = (
    ev.AgentSpeechInterrupted,
    ev.AgentSpeechEnded,
    ev.AssistantMessageCommitted,
    ev.EffectOutcome,
)
"""Events that come with a cut speech, before a hang-up's ``CallEnded`` would."""
UNHEARD_WORDS_TOLERATED = 1
"""A word cut in the middle may count as heard by one measure and not by the other."""
PLAYED_SECONDS_TOLERATED = 0.05
"""Playout positions are reported to about a frame."""
QUIET_SECONDS = 1.0
"""The session has gone quiet once no LiveKit event reached the adapter and the machine took
no step for this long, on the event loop's clock: O7 is checked then."""
TRANSCRIPT_WAIT = 2.0
"""How long LiveKit may wait for the final transcript of a turn whose speech ended
(``commit_user_turn``'s default ``transcript_timeout``)."""
TALKING_STATES = frozenset({"speaking", "tool_loop"})


class OutcomeBreach(AssertionError):
    """The session did something a guarantee rules out."""

    def __init__(self, check: ev.OutcomeCheck, message: str) -> None:
        super().__init__(f"{check} {OUTCOME_CHECKS[check]}: {message}")
        self.check = check


class OutcomeMonitor:
    """Checks one call's session against the outcome checks (table above)."""

    def __init__(self, adapter: Watched, *, strict: bool | None = None) -> None:
        self.adapter = adapter
        self.policy = adapter.controller.policy
        self.strict = adapter.controller.strict if strict is None else strict
        self.counts: collections.Counter[str] = collections.Counter()
        """Breaches so far, by check name (``"O1"`` ...)."""
        self.breaches: list[OutcomeBreach] = []
        self._unraised: list[OutcomeBreach] = []
        # O1, O2: the greeting's speeches and whether its audio started
        self._greeting_speeches: set[str] = set()
        self._greeting_heard_from: str | None = None
        """The speech whose audio counted as the greeting's first audio."""
        self._greeting_cut: str | None = None
        """O2's verdict on a cut greeting, given once the call goes on (a hang-up cuts
        whatever plays, and LiveKit cuts the speech before it reports the close)."""
        # O3: the speech that overlapped the greeting
        self._greeting_ended_at: float | None = None
        self._user_speaking = False
        self._in_overlap = False
        self._hearing_overlap = False
        """The caller's speech now is the overlap's (its transcripts are the overlap's)."""
        self._overlap_committed = False
        """A turn was committed after the greeting: speech from then on is new speech,
        even within the spill-over window."""
        self._spilled_over = False
        """A speech started in the spill-over window: it is the overlap's tail; one that
        starts after it is new speech, even within the window (the machine closes the
        window at the first)."""
        self._overlap_texts: list[str] = []
        self._fresh_texts: list[str] = []
        """Final transcripts of speech that is not the overlap's, since the last turn."""
        self._held_audio_replayed = True
        self._judged_turn: ev.UserTurnCommitted | None = None
        self._judged_turn_fresh: list[str] = []
        """The fresh transcripts the judged turn ends with, when LiveKit commits them."""
        self._said_speeches: set[str] = set()
        """``session.say`` speeches (the policy's own texts: no reply to a turn)."""
        # O4: each speech's committed text before any drop
        self._full_texts: dict[str, str] = {}
        self._segments: dict[str, PlayedSegment] = {}
        """O4: each speech's last playout segment, until the speech ends."""
        # O5: tool rounds LiveKit ran since the last user turn
        self._tool_rounds = 0
        self._user_turns = 0
        self._speech_turn: dict[str, int] = {}
        """The user turns committed when each speech was created."""
        self._interrupted_speeches: set[str] = set()
        # O7: the machine's configuration against the session's
        self.agreement = StateAgreement(self)

    @property
    def agreement_breaches(self) -> list[OutcomeBreach]:
        """The state-agreement breaches (O7) so far: for a finished call, whether the
        machine ever disagreed with the session."""
        return [breach for breach in self.breaches if breach.check == STATE_AGREEMENT]

    # -- reporting ----------------------------------------------------------------------

    def breach(self, check: ev.OutcomeCheck, message: str) -> None:
        """Record a breach: trace it, warn once per check, or raise it (strict) at the
        step's end."""
        error = OutcomeBreach(check, message)
        self.counts[check] += 1
        self.breaches.append(error)
        self.adapter.trace_only(ev.OutcomeBreached(at=self.adapter.now(), check=check))
        if self.strict:
            self._unraised.append(error)
        elif self.counts[check] == 1:
            logger.warning("turnfsm: outcome check %s", error, extra={"check": check})

    def raise_pending(self) -> None:
        """Strict: raise the first breach recorded since the last call (adapter's step end)."""
        if self._unraised:
            first, self._unraised = self._unraised[0], []
            raise first

    # -- the adapter's hooks ------------------------------------------------------------

    def step(
        self, before: str, event: ev.Event, after: str, effects: tuple[fx.Effect, ...]
    ) -> None:
        """After a step's effects ran (not the monitor's own breaches: judging those
        would breach again, without end)."""
        if isinstance(event, ev.OutcomeBreached):
            return
        self._judge_greeting_cut(event, after)
        self._note_greeting(before, event, after, effects)
        self._check_overlap(before, event, after, effects)
        self._check_committed_text(event, after)
        self._check_tool_rounds(event)
        self._check_input(after)

    def segment_started(self, speech_id: str | None) -> None:
        """A speech's first audio frame reached the output."""
        if not self.policy.has_greeting or self._greeting_heard_from is not None:
            return
        if speech_id is not None and speech_id in self._greeting_speeches:
            self._greeting_heard_from = speech_id
        elif self.adapter.controller.state in UNTIL_THE_GREETING:
            self.breach(
                "O1", f"speech {speech_id!r} reached the output before the greeting's audio"
            )

    def segment_finished(self, speech_id: str | None, segment: PlayedSegment) -> None:
        """A playout segment ended (played out or cut)."""
        if speech_id is not None:
            self._segments[speech_id] = segment
        if speech_id is None or speech_id not in self._greeting_speeches:
            return
        unplayed = segment.pushed_seconds - segment.played_seconds
        if segment.interrupted or unplayed > PLAYED_SECONDS_TOLERATED:
            self._greeting_cut = (
                f"greeting speech {speech_id!r} cut after {segment.played_seconds:.2f} s "
                f"of {segment.pushed_seconds:.2f} s"
            )

    def _judge_greeting_cut(self, event: ev.Event, after: str) -> None:
        if self._greeting_cut is None or isinstance(event, _REPORTS_OF_A_CUT):
            return
        cut, self._greeting_cut = self._greeting_cut, None
        if after != "ended" and not self._session_closing():
            self.breach("O2", cut)

    def _session_closing(self) -> bool:
        """Whether the session is closing. ``aclose()`` cuts the speech playing and ends
        the caller's speech (its last transcript, ``user_state_changed``) before LiveKit
        emits ``close``: those events are the hang-up's, not the call going on. LiveKit
        tells that only privately (``AgentSession._is_closing``), hence the guard."""
        is_closing = getattr(self.adapter.session, "_is_closing", None)
        return self.adapter.closing or (callable(is_closing) and bool(is_closing()))

    # -- O1, O2: which speech is the greeting -------------------------------------------

    def _note_greeting(
        self, before: str, event: ev.Event, after: str, effects: tuple[fx.Effect, ...]
    ) -> None:
        if isinstance(event, ev.AgentSpeechCreated) and after == "greeting":
            # taken for the greeting in it, or as it starts (the agent's own words)
            locked = fx.LockSpeech(speech_id=event.speech_id) in effects
            if locked:
                self._greeting_speeches.add(event.speech_id)
        elif (
            isinstance(event, ev.EffectOutcome)
            and event.effect == fx.StartGreeting.name
            and event.speech_id
        ):
            if event.outcome == "done" or event.detail.startswith(UNFINISHED):
                # (a greeting the model did not finish was the greeting, cut)
                self._greeting_speeches.add(event.speech_id)
            else:  # the speech taken for the greeting played something else
                self._greeting_speeches.discard(event.speech_id)
                if self._greeting_heard_from == event.speech_id:
                    self._greeting_heard_from = None
                    self.breach(
                        "O1",
                        f"speech {event.speech_id!r} reached the output before the "
                        "greeting's audio",
                    )
        if before == "greeting" and after != "greeting":
            self._greeting_ended_at = event.at

    # -- O3: the overlap ----------------------------------------------------------------

    def _check_overlap(
        self, before: str, event: ev.Event, after: str, effects: tuple[fx.Effect, ...]
    ) -> None:
        answer_whole = self.policy.greeting_overlap == "answer_whole"
        if before == "greeting" and after != "greeting":
            replay = [e for e in effects if isinstance(e, fx.UnmuteInput)]
            gate = self.adapter.gate
            if replay and replay[0].replay_held_audio and gate is not None:
                self._held_audio_replayed = gate.held_seconds > 0
        if isinstance(event, ev.UserSpeechStarted):
            self._user_speaking = True
            spill_over = (
                self._in_spill_over_window(event.at)
                and not self._overlap_committed
                and not self._spilled_over
            )
            self._spilled_over = self._spilled_over or spill_over
            self._hearing_overlap = before == "greeting" or spill_over
            if self._hearing_overlap and not self._in_overlap:
                self._in_overlap = True
                self._overlap_texts = []
            elif not self._hearing_overlap and not self._overlap_texts:
                self._in_overlap = False  # new speech; nothing of the overlap was transcribed
            if not self._in_overlap:
                self._judged_turn = None
        elif isinstance(event, ev.UserSpeechEnded):
            self._user_speaking = False
        elif isinstance(event, ev.UserTranscript) and event.is_final:
            if event.text.strip():
                heard = self._overlap_texts if self._hearing_overlap else self._fresh_texts
                heard.append(event.text)
        elif isinstance(event, ev.UserTurnCommitted):
            fresh, self._fresh_texts = self._fresh_texts, []
            if before in UNTIL_THE_GREETING:
                return
            rejected = any(isinstance(e, fx.RejectUserTurn) for e in effects)
            self._judged_turn, self._judged_turn_fresh = (None if rejected else event), fresh
            if not rejected:  # what the caller says from now on is no part of the overlap
                if self._overlap_committed:  # a later turn: the overlap had its own
                    self._in_overlap, self._overlap_texts = False, []
                self._hearing_overlap = False
                self._overlap_committed = self._greeting_ended_at is not None
        elif isinstance(event, ev.AgentSpeechCreated) and event.source == "say":
            self._said_speeches.add(event.speech_id)
        elif (
            isinstance(event, ev.AgentSpeechStarted)
            and event.speech_id not in self._said_speeches
            and self._judged_turn is not None
        ):
            # judged when its audio starts: a preemptive reply is created before the turn
            # it answers is committed (and replies to fragments are discarded unplayed)
            self._judge_reply(self._judged_turn, answer_whole)
            self._judged_turn = None
        if isinstance(event, ev.UserTranscript) and before != after == "greeting":
            # the greeting starts on the first words' transcript: it answers them, and
            # the caller's voice still going on is speech over the greeting
            self._fresh_texts = []
            self._hearing_overlap = self._in_overlap = self._user_speaking
            self._overlap_texts = []

    def _in_spill_over_window(self, at: float) -> bool:
        ended = self._greeting_ended_at
        return (
            self.policy.mutes_greeting
            and ended is not None
            and 0 <= at - ended <= self.policy.spill_over_window
        )

    def _judge_reply(self, turn: ev.UserTurnCommitted, answer_whole: bool) -> None:
        overlap = [_words(text) for text in self._overlap_texts]
        # the words of speech since the overlap, which the turn ends with, are no part of
        # it even where they repeat it ("Hello?" dropped, then "Hello? Can you hear me?")
        fresh = _words(" ".join(self._judged_turn_fresh))
        turn_words = _words(turn.text)
        if fresh and turn_words[-len(fresh) :] == fresh:
            turn_words = turn_words[: -len(fresh)]
        holds = [bool(words) and _contains(turn_words, words) for words in overlap]
        if any(holds):
            self._in_overlap = False
            if not answer_whole:
                self.breach(
                    "O3",
                    f"turn {turn.item_id!r} answered: it holds speech that overlapped "
                    "the greeting (greeting_overlap='drop')",
                )
            elif not all(holds) or not self._held_audio_replayed:
                self.breach(
                    "O3",
                    f"turn {turn.item_id!r} answered with only part of the speech that "
                    f"overlapped the greeting ({sum(holds)} of {len(holds)} transcripts, "
                    f"held audio replayed: {self._held_audio_replayed})",
                )
        elif not self._user_speaking:
            self._in_overlap = False  # the overlap was dropped; this turn is new speech
        self._overlap_texts = [] if not self._in_overlap else self._overlap_texts

    # -- O4: committed text ⊆ played audio ----------------------------------------------

    def _check_committed_text(self, event: ev.Event, after: str) -> None:
        if isinstance(event, ev.AssistantMessageCommitted) and event.speech_id:
            self._full_texts.setdefault(event.speech_id, event.text)
            return
        if not isinstance(event, ev.AgentSpeechEnded):
            return
        full = self._full_texts.pop(event.speech_id, None)
        segment = self._segments.pop(event.speech_id, None)
        if not event.interrupted or self.policy.interrupted_text == "keep" or full is None:
            return
        if after == "ended" or self.adapter.closing:
            return  # what a hang-up cuts is not edited: the machine is done with the call
        message = self.adapter.assistant_messages.get(event.speech_id)
        if message is None:
            return
        in_history = self.adapter.session.history.get_by_id(message.id) is not None
        committed = len(_words(message.text_content or "")) if in_history else 0
        if self.adapter.port.text_only:  # no audio: the caller read all of the text sent
            heard = len(_words(self.adapter.forwarded_texts.get(event.speech_id) or full))
        else:
            heard = self._words_heard(segment, message.id, full) if segment is not None else 0
        if committed > heard + UNHEARD_WORDS_TOLERATED:
            self.breach(
                "O4",
                f"speech {event.speech_id!r} left {committed} words in the history, "
                f"{heard} were heard",
            )

    def _words_heard(self, segment: PlayedSegment, message_id: str, full: str) -> int:
        """How many words of the speech's message the caller can have heard to their end:
        O4's own measure, from the audio that reached the output and the text's timing,
        never the lever's (:mod:`.heard`), so that a wrong cut there is caught here. It
        bounds the heard words from above, since a cut may only keep fewer:

        - all of the audio came: the played share of the text (a word counts once played
          to its end, :func:`~turnfsm.spoken.spoken_prefix`);
        - a realtime model's message whose audio did not all come: its transcript as far
          as it had come when the audio that played came (the model streams its
          transcript ahead of its audio, never behind);
        - a TTS's timed transcripts: the pieces played whole, and the played share of
          the one playing (its end is the next one's start, or the audio that came);
        - else the played share of the text over the audio that came (less than the
          whole when it did not all come: the share is then larger than the caller's).

        On a realtime model the text is the model's own transcript (LiveKit commits only
        a transcript synchronizer's prefix of it)."""
        played = segment.played_seconds
        realtime = self.adapter.realtime
        item = realtime.item(message_id) if realtime is not None else None
        if item is not None and item.transcript:
            if item.audio_done:
                text = spoken_prefix(item.transcript, played, item.audio_seconds)
            else:
                came = (chars for audio, chars in item.text_by_audio if audio >= played)
                text = item.transcript[: next(came, len(item.transcript))]
        elif segment.timed_text:
            pieces = segment.timed_text
            ends = [start for start, _ in pieces[1:]] + [segment.pushed_seconds]
            text = "".join(
                spoken_prefix(piece, played - start, end - start)
                for (start, piece), end in zip(pieces, ends, strict=True)
                if start < played
            )
        else:
            text = spoken_prefix(full, played, segment.pushed_seconds)
        return len(_words(text))

    # -- O5: tool rounds ----------------------------------------------------------------

    def _check_tool_rounds(self, event: ev.Event) -> None:
        if isinstance(event, ev.UserTurnCommitted):
            self._tool_rounds = 0
            self._user_turns += 1
        elif isinstance(event, ev.AgentSpeechCreated):
            self._speech_turn[event.speech_id] = self._user_turns
        elif isinstance(event, ev.AgentSpeechInterrupted):
            self._interrupted_speeches.add(event.speech_id)
        elif isinstance(event, ev.ToolStepFinished):
            speech_id = event.speech_id
            earlier = self._speech_turn.get(speech_id, self._user_turns) < self._user_turns
            if earlier and speech_id in self._interrupted_speeches:
                # an earlier turn's reply, cut for this turn while its tools ran: its
                # round ends with it, and is none of this turn's (a preemptive reply to
                # this turn is created before it commits, but is not cut)
                return
            self._tool_rounds += 1
            if self._tool_rounds > self.policy.max_tool_steps:
                self.breach(
                    "O5",
                    f"LiveKit ran tool round {self._tool_rounds} in one user turn, "
                    f"cap {self.policy.max_tool_steps}",
                )

    # -- O6: the input is released ------------------------------------------------------

    def _check_input(self, after: str) -> None:
        adapter = self.adapter
        muting: set[str] = set()
        if self.policy.mutes_greeting:
            muting.add("greeting")
        if self.policy.mute_input_during_tools:
            muting.add("tool_loop")
        holding = {"greeting", "listening"} if after != "ended" else set()
        if adapter.realtime is not None or adapter.warmup.holding:
            muting |= holding  # turns held at the gate (server turn detection, AEC warm-up)
        if adapter.gate is not None and adapter.gate.muted and after not in muting:
            self.breach("O6", f"the input is muted in {after}")
        if adapter.held_turn_settings is not None and after not in holding:
            self.breach("O6", f"user turns are held in {after}")
        realtime = adapter.realtime_levers
        if realtime is not None and realtime.replies_paused and after not in REPLIES_PAUSED_IN:
            # a ResumeModelReplies that failed: the model answers no turn any more
            self.breach("O6", f"the model's own replies are paused in {after}")


class StateAgreement:
    """O7: the machine's configuration is one the session can be in.

    What the session shows is observed here, beside the adapter's translation and
    independently of the levers: LiveKit's own speech handles (from ``speech_created``
    until their done callbacks ran), its tool steps (``tool_execution_updated`` to
    ``function_tools_executed``), and the agent's and user's states as the session
    announced them (``agent_state_changed``, ``user_state_changed``: LiveKit emits one
    whenever ``session.agent_state`` / ``session.user_state`` changes). What must hold:

    * ``speaking`` / ``tool_loop`` only while LiveKit has a speech or a tool step in
      flight: a speech scheduled and not done, or a tool step running. A reply LiveKit
      prepared before the turn ended (``preemptive_generation``: created, never
      scheduled) is in flight only while its turn may still be answered: the user is
      speaking, the agent's turn hook runs, or the turn's end may still be pending
      (LiveKit's ``endpointing["max_delay"]`` plus :data:`TRANSCRIPT_WAIT` after the user
      stopped). After that LiveKit leaves it parked, never played nor ended;
    * ``listening`` only while LiveKit's agent plays nothing and no speech is scheduled
      (one being interrupted is on its way out);
    * ``caller_speaking`` only while LiveKit's user is ``speaking``.

    Checked at every ``agent_state_changed`` and ``user_state_changed`` (once the adapter
    handled the event, and its run-to-completion step is through), and whenever the
    session goes quiet: :data:`QUIET_SECONDS` of loop time after the last session event or
    machine step, and once more when a prepared reply's turn can no longer be pending.
    Not before the call is live nor after it ends; the greeting and the wait for the
    callee's words are left to O1, O2 and the machine's timers. A disagreement is one
    breach until the two agree again.
    """

    def __init__(self, monitor: OutcomeMonitor) -> None:
        self.monitor = monitor
        self.adapter = monitor.adapter
        self._speeches: dict[str, SpeechHandle] = {}
        """LiveKit's speeches whose done callbacks have not run yet."""
        self._tool_step_running = False
        self._agent_state = "initializing"
        self._user_state = "listening"
        self._user_stopped_at: float | None = None
        self._last_activity = 0.0
        self._quiet_timer: asyncio.TimerHandle | None = None
        self._window_timer: asyncio.TimerHandle | None = None
        self._pending: str | None = None
        """A check asked for while the adapter's step runs: made once it is through."""
        self._disagreement: str | None = None

    # -- what the session shows -----------------------------------------------------------

    def speech_created(self, handle: SpeechHandle) -> None:
        self._speeches[handle.id] = handle
        handle.add_done_callback(self._speech_done)

    def _speech_done(self, handle: SpeechHandle) -> None:
        self._speeches.pop(handle.id, None)

    def tool_step(self, *, running: bool) -> None:
        self._tool_step_running = running

    def agent_state_changed(self, new_state: str) -> None:
        self._agent_state = new_state
        self.checkpoint("agent_state_changed")

    def user_state_changed(self, old_state: str, new_state: str) -> None:
        self._user_state = new_state
        if old_state == "speaking":
            self._user_stopped_at = self._now()
        self.checkpoint("user_state_changed")

    # -- when it is checked -------------------------------------------------------------

    def activity(self) -> None:
        """A session event reached the adapter, or the machine took a step."""
        loop = asyncio.get_running_loop()
        self._last_activity = loop.time()
        if self._quiet_timer is None:
            self._quiet_timer = loop.call_later(QUIET_SECONDS, self._quiet)

    def checkpoint(self, where: str) -> None:
        """Check now, or once the adapter's step is through."""
        if self.adapter.dispatching:
            self._pending = where  # the machine has not seen the event yet
        else:
            self.check(where)

    def step_through(self) -> None:
        """The adapter's run-to-completion step is through."""
        where, self._pending = self._pending, None
        if where is not None:
            self.check(where)

    def _quiet(self) -> None:
        self._quiet_timer = None
        loop = asyncio.get_running_loop()
        remaining = self._last_activity + QUIET_SECONDS - loop.time()
        if remaining > 1e-6:
            self._quiet_timer = loop.call_later(remaining, self._quiet)
            return
        self.adapter.guarded_call("state agreement", lambda: self.check("quiet"))

    def _window_closed(self) -> None:
        self._window_timer = None
        self.adapter.guarded_call("state agreement", lambda: self.check("quiet"))

    def close(self) -> None:
        """Stop checking (the adapter detached)."""
        for timer in (self._quiet_timer, self._window_timer):
            if timer is not None:
                timer.cancel()
        self._quiet_timer = self._window_timer = None

    # -- the check ----------------------------------------------------------------------

    def check(self, where: str) -> None:
        adapter = self.adapter
        configuration = adapter.controller.configuration
        state = public_state(configuration[0])
        if adapter.closing or not adapter.attached or state not in LIVE_STATES:
            return
        agent, user = self._agent_state, self._user_state
        problems = []
        if state in TALKING_STATES and not self._in_flight():
            problems.append(f"{state} while LiveKit has no speech nor tool step in flight")
        if state == "listening" and (agent == "speaking" or self._scheduled()):
            problems.append("listening while LiveKit has a speech scheduled or playing")
        if "caller_speaking" in configuration and user != "speaking":
            problems.append("caller_speaking while LiveKit's user is not speaking")
        if not problems:
            self._disagreement = None
            return
        disagreement = "; ".join(problems)
        if disagreement == self._disagreement:
            return  # the same disagreement, still: one breach
        self._disagreement = disagreement
        self.monitor.breach(
            STATE_AGREEMENT,
            f"{disagreement} (at {where}: machine {' + '.join(configuration)}, LiveKit agent "
            f"{agent}, user {user}, speeches {self._describe_speeches()})",
        )

    def _in_flight(self) -> bool:
        if self._tool_step_running:
            return True
        handles = self._speeches.values()
        return any(handle.scheduled for handle in handles) or (
            bool(handles) and self._turn_may_be_answered()
        )

    def _scheduled(self) -> bool:
        return any(
            handle.scheduled and not handle.done() and not handle.interrupted
            for handle in self._speeches.values()
        )

    def _turn_may_be_answered(self) -> bool:
        """A prepared reply may still be adopted: the user's turn is not over yet."""
        if self._user_state == "speaking" or self.adapter.agent_hook is not None:
            return True
        if self._user_stopped_at is None:
            return False
        endpointing = self.adapter.session.options.endpointing
        closes = self._user_stopped_at + float(endpointing["max_delay"]) + TRANSCRIPT_WAIT
        wait = closes - self._now()
        if wait <= 0:
            return False
        if self._window_timer is None:  # check again once it is over
            loop = asyncio.get_running_loop()
            self._window_timer = loop.call_later(wait, self._window_closed)
        return True

    def _describe_speeches(self) -> str:
        return str(
            {
                speech_id: "done"
                if handle.done()
                else ("scheduled" if handle.scheduled else "prepared")
                for speech_id, handle in self._speeches.items()
            }
        )

    def _now(self) -> float:
        return asyncio.get_running_loop().time()


def _words(text: str) -> list[str]:
    return [w.strip(".,!?;:\"'").lower() for w in text.split() if w.strip(".,!?;:\"'")]


def _contains(words: list[str], part: list[str]) -> bool:
    """Whether ``part`` occurs in ``words`` as a run of consecutive words."""
    size = len(part)
    return any(words[i : i + size] == part for i in range(len(words) - size + 1))
