"""What a fuzzed call is judged on: what the caller got, not only what turnfsm emitted.

Each judgement reads a :class:`~.harness.CallRecord` and returns its findings (empty when
the call passes):

==========================  ================================================================
judgement                   what must hold
==========================  ================================================================
greeting                    no agent audio before the greeting; the greeting's first
                            playout plays whole (all of its audio, uncut); a greeting that
                            never plays leaves a call that ended (with a named reason, or
                            hung up on before the call went on)
hello_before_greeting       the callee's first words, finished before the greeting
                            started, are in the history before the greeting
committed_heard             every assistant message in the history is a word prefix of its
                            speech's text, no longer than the words played to their end
                            (``interrupted_text="keep"`` keeps unheard words by design)
tool_rounds                 at most ``max_tool_steps`` tool rounds per user turn, and a
                            spoken reply after the last one (unless the caller spoke or
                            the call ended)
no_deaf_call                the probe question, asked 2 s into whatever state the call is
                            in, is answered: its answer plays whole (a probe that fell
                            where the caller is not heard by design is asked again and
                            only the last is judged: :meth:`CallRecord.deaf_windows`)
history_is_agent_context    the history's messages are the agent's ``chat_ctx`` messages (the
                            same text; since a handoff, the same messages)
input_released              when the call ends, the input is not muted, user turns are not
                            held and turn detection is the session's own again (unless the
                            state it ends in mutes or holds by design)
invariants                  no safety invariant (I1–I10) broke
outcomes                    the adapter's outcome monitor (O1–O7) saw no breach
turnfsm_warnings            turnfsm logged no failure but the plan's own lever fault
harness                     the call ran to its end (no harness error, no call limit)
==========================  ================================================================

A lever the plan makes raise excuses only what it directly carries out
(:data:`EXCUSED_BY_FAULT`); everything else must still hold.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from .draw import GENERATED_GREETING, PROBES
from .harness import CallRecord, SpeechRecord

PLAYED_TOLERANCE = 0.03
"""Seconds a word's end may lie past the played position and still count as heard: the
playout position is known to a frame, and a render's length is rounded to a sample."""

CUT_BY_END = 0.25
"""A playout cut this close to the call's end was cut by the hang-up."""

REPLY_WAIT = 6.0
"""Seconds after a tool round within which its spoken reply must start."""

EXCUSED_BY_FAULT: dict[str, tuple[tuple[str, str], ...]] = {
    "drop_unspoken_text": (("committed_heard", ""), ("outcomes", "O4 ")),
    # realtime: LiveKit then asks for the tool reply, first cancelling whatever response is
    # active, the answer to the caller's next turn included (fuzz realtime seed 1349)
    "cancel_tool_reply": (("tool_rounds", ""), ("outcomes", "O5 "), ("no_deaf_call", "")),
    "final_reply_without_tools": (("tool_rounds", ""),),
    "interrupt": (("greeting", ""), ("outcomes", "O1 ")),
    "clear_user_turn": (("outcomes", "O3 "),),  # the overlap to drop is not cleared
    "mute_input": (("outcomes", "O3 "),),  # no audio held: the monitor sees none replayed
    "unmute_input": (("outcomes", "O3 "),),  # the held audio is not replayed
    # realtime: the model's own reply to the first words is not suppressed, and plays
    "suppress_reply": (("greeting", "agent audio"), ("outcomes", "O1 ")),
    # realtime: the model's replies stay off, reported (OUTCOME_DECISIONS: a deaf agent)
    "resume_model_replies": (("no_deaf_call", ""), ("outcomes", "O6 ")),
}
"""What a failing lever excuses, as ``(judgement, start of its message)``: the outcome that
lever alone carries out."""


@dataclass(frozen=True)
class Finding:
    """One thing a call got wrong."""

    judgement: str
    message: str

    def __str__(self) -> str:
        return f"{self.judgement}: {self.message}"


def _words(text: str) -> list[str]:
    return text.split()


def _segments_started(record: CallRecord) -> list[tuple[float, str | None, int]]:
    """``(call time it started, speech id, index in record.segments)``, by start."""
    started = [
        (record.call_time(segment.started_at), speech_id, index)
        for index, (segment, speech_id) in enumerate(record.segments)
        if segment.started_at is not None
    ]
    return sorted(started)


def _greeting_text(record: CallRecord) -> str:
    return record.plan.policy.greeting or GENERATED_GREETING


def _step_of(speech: SpeechRecord, text: str) -> int | None:
    for step in range(len(speech.steps)):
        if speech.step_text(step) == text:
            return step
    return None


def _segment_of_step(speech: SpeechRecord, step: int) -> int | None:
    """Index in ``speech.segments`` of the playout of ``step`` (steps that rendered audio
    play in order, one segment each)."""
    audible = [index for index, renders in enumerate(speech.steps) if renders]
    if step not in audible:
        return None
    position = audible.index(step)
    return position if position < len(speech.segments) else None


def _rendered_seconds(speech: SpeechRecord, step: int) -> float:
    return sum(render.seconds for render in speech.steps[step])


def _heard_words(record: CallRecord, speech: SpeechRecord, step: int) -> int:
    """How many words of ``step`` were played to their end."""
    segment_index = _segment_of_step(speech, step)
    if segment_index is None:
        return 0
    segment = speech.segments[segment_index]
    played = segment.played + PLAYED_TOLERANCE
    heard, offset = 0, 0.0
    if record.words_heard is not None:  # the speech's own timeline
        for render in speech.steps[step]:
            heard += len(record.words_heard(render.text, played - offset))
            offset += render.seconds
        return heard
    rate = record.tts_rate
    for render in speech.steps[step]:
        text = render.text.strip()
        for word in re.finditer(r"\S+", text):
            if offset + word.end() / rate > played:
                return heard
            heard += 1
        offset += render.seconds
    return heard


def _closed_within(record: CallRecord, at: float | None, seconds: float) -> bool:
    """Whether the call's end began no later than ``seconds`` after ``at``."""
    ended = record.ended_at()
    return at is not None and ended is not None and ended - at <= seconds


def judge_greeting(record: CallRecord) -> list[str]:
    policy = record.plan.policy
    if not policy.has_greeting:
        return []
    text = _greeting_text(record)
    started = _segments_started(record)
    greeting_ids = [
        speech.speech_id
        for speech in record.speeches.values()
        if _step_of(speech, text) is not None
    ]
    findings = []
    if started and started[0][1] not in greeting_ids:
        at, speech_id, _ = started[0]
        said = _said(record, speech_id)
        findings.append(f"agent audio ({said!r}) at {at:.2f} s before the greeting")
    greeting_plays = [  # a greeting the service broke is judged by its retry (unless the
        # client had all of it anyway)
        (at, index)
        for at, speech_id, index in started
        if speech_id in greeting_ids
        and (not record.speeches[speech_id].broken or _played_whole(record, index, text))
    ]
    if not greeting_plays:
        reasons = record.ends_of_its_own()
        went_on = bool(record.probes) and record.closed_by == "caller"
        if went_on and not reasons:
            findings.append("the greeting never played, and the call went on")
        return findings
    at, index = greeting_plays[0]
    segment, speech_id = record.segments[index]
    assert speech_id is not None
    speech = record.speeches[speech_id]
    step = _step_of(speech, text)
    assert step is not None
    whole = _rendered_seconds(speech, step)
    finished = record.call_time(segment.finished_at) if segment.finished_at is not None else None
    cut = segment.interrupted or segment.played < segment.pushed - PLAYED_TOLERANCE
    short = segment.pushed < whole - PLAYED_TOLERANCE
    if (cut or short) and not _closed_within(record, finished, CUT_BY_END):
        findings.append(
            f"the greeting started at {at:.2f} s played {segment.played:.2f} s of "
            f"{whole:.2f} s (interrupted={segment.interrupted})"
        )
    return findings


def _played_whole(record: CallRecord, index: int, text: str) -> bool:
    """Whether playout segment ``index`` played all of ``text``, uncut."""
    segment, speech_id = record.segments[index]
    speech = record.speeches.get(speech_id or "")
    step = _step_of(speech, text) if speech is not None else None
    if speech is None or step is None:
        return False
    whole = _rendered_seconds(speech, step)
    return (
        not segment.interrupted
        and segment.pushed >= whole - PLAYED_TOLERANCE
        and segment.played >= segment.pushed - PLAYED_TOLERANCE
    )


def _said(record: CallRecord, speech_id: str | None) -> str:
    speech = record.speeches.get(speech_id) if speech_id else None
    if speech is None or not speech.steps:
        return "?"
    return speech.step_text(0)[:40]


def judge_hello_before_greeting(record: CallRecord) -> list[str]:
    policy = record.plan.policy
    if not policy.has_greeting or policy.first_speaker != "user":
        return []
    started = _segments_started(record)
    if not started or not record.lines or record.lines[0].cue.kind != "hello":
        return []
    hello = record.lines[0]
    first_audio = started[0][0]
    if hello.started_at is None or hello.ended_at is None or hello.ended_at > first_audio - 0.2:
        return []
    if any(start < hello.ended_at and hello.started_at < end for start, end in record.lost_audio):
        return []  # the service lost it (a dropped socket): it cannot be in the history
    text = _greeting_text(record)
    asked = [s.created_at for s in record.speeches.values() if _step_of(s, text) is not None]
    if asked and hello.ended_at > min(asked):
        # the greeting was asked for (the await timer) while the callee was still saying
        # it: the "Hello?" is speech over the greeting, handled as the policy's overlap
        return []
    history = [(role, said) for _, role, said in record.history]
    greeted = [i for i, (role, said) in enumerate(history) if role == "assistant" and said == text]
    if not greeted:
        return []  # not committed whole: the greeting judgement speaks for it
    before = [said for role, said in history[: greeted[0]] if role == "user"]
    if not any("Hello" in said for said in before):
        return [f"the callee's {hello.cue.text!r} is not in the history before the greeting"]
    return []


def judge_committed_heard(record: CallRecord) -> list[str]:
    findings = []
    speech_of = dict(record.assistant_messages)
    keeps_text = record.plan.policy.interrupted_text == "keep"
    for item_id, role, text in record.history:
        if role != "assistant" or item_id not in speech_of:
            continue
        speech = record.speeches.get(speech_of[item_id] or "")
        if speech is None:
            continue
        words = _words(text)
        steps = [
            step
            for step in range(len(speech.steps))
            if _words(speech.step_text(step))[: len(words)] == words
        ]
        if not steps:
            findings.append(f"{text!r} is no word prefix of what its speech said")
            continue
        step = steps[0]
        segment_index = _segment_of_step(speech, step)
        if segment_index is not None:
            segment = speech.segments[segment_index]
            end = record.call_time(segment.finished_at) if segment.finished_at else None
            if record.closed_by == "turnfsm" and _closed_within(record, end, CUT_BY_END):
                continue  # cut by turnfsm's own hang-up: the call is over
        heard = _heard_words(record, speech, step)
        if len(words) > heard and not keeps_text:
            findings.append(f"{text!r} committed: {len(words)} words, {heard} played to their end")
    return findings


def judge_tool_rounds(record: CallRecord) -> list[str]:
    cap = record.plan.policy.max_tool_steps
    turns = [at for at, _ in record.user_turns]
    findings = []
    groups: dict[int, list[float]] = {}
    for began, ended in record.tool_rounds:
        # a round is the turn's it began in; one that began in the instant a turn was
        # committed is that turn's: LiveKit runs the tools of the reply it prepared for
        # the turn (preemptively, or as the transcript came) as the turn commits, while
        # the previous reply, cut or capped by then, starts none in that instant (on a
        # realtime model, the tools begin as the turn is committed)
        groups.setdefault(sum(turn <= began for turn in turns), []).append(ended)
    for rounds in groups.values():
        if len(rounds) > cap:
            findings.append(f"{len(rounds)} tool rounds in one user turn (cap {cap})")
        last = rounds[-1]
        caller_spoke = any(  # the caller talking keeps the reply back, or cuts it
            line.started_at is not None
            and line.started_at <= last + REPLY_WAIT
            and (line.ended_at is None or line.ended_at >= last - 0.5)
            for line in record.lines + record.probes
        )
        if caller_spoke or _closed_within(record, last, REPLY_WAIT):
            continue
        replied = any(last <= at <= last + REPLY_WAIT for at, _, _ in _segments_started(record))
        if not replied:
            findings.append(
                f"no spoken reply within {REPLY_WAIT} s of the tool round at {last:.2f} s"
            )
    return findings


def judge_no_deaf_call(record: CallRecord) -> list[str]:
    if not record.probes:
        return []
    probe = record.probes[-1]
    if probe.unheard_by_design or record.unheard_until(probe) is not None:
        return []  # asked each time where the caller is not heard on purpose
    if probe.started_at is None:
        return ["the probe was never played"]
    answer = PROBES[probe.cue.text]
    answers = [
        (segment, _rendered_seconds(speech, step))
        for at, speech_id, index in _segments_started(record)
        if at >= probe.started_at
        and (speech := record.speeches.get(speech_id or "")) is not None
        and (step := _step_of(speech, answer)) is not None
        for segment in (record.segments[index][0],)
    ]
    if any(  # all of it played (a realtime model's response may end before its audio)
        segment.finished and not segment.interrupted and segment.played >= whole - PLAYED_TOLERANCE
        for segment, whole in answers
    ):
        return []
    # the longest call, or a greeting the service refused twice (the call ends by design:
    # a probe asked as it fails is never answered; fuzz realtime seed 1844)
    reasons = set(record.end_reasons()) & {"max_duration", "greeting_failed"}
    if record.closed_by == "turnfsm" and reasons:
        return []
    state = record.probe_states[-1] if record.probe_states else "?"
    heard = "answer cut" if answers else "no answer"
    return [f"the probe asked at {probe.started_at:.2f} s in {state} got {heard}"]


def judge_history_is_agent_context(record: CallRecord) -> list[str]:
    """The history and the agent's context agree: the same text for every message both
    hold, and every message since the agent took the call in both. (An agent handed the
    call holds what its application gave it: messages from before the handoff, and what
    the agent before it still said, may be in one and not the other. Once the call's end
    began, the closing session may flush the caller's last words into the history as a
    handoff in flight completes: seed 1820.)"""
    if record.agent_context is None:
        return []
    since = max(record.handoffs, default=-math.inf)
    ended = record.ended_at()
    until = math.inf if ended is None else ended
    history = {item_id: text for item_id, _, text in record.history}
    context = {item_id: text for item_id, _, text in record.agent_context}
    findings = [
        f"{history[item_id]!r} in the history, {context[item_id]!r} in the agent's chat_ctx"
        for item_id in history.keys() & context.keys()
        if history[item_id] != context[item_id]
    ]
    sides = (("the history", history, context), ("the agent's chat_ctx", context, history))
    speech_of = dict(record.assistant_messages)

    def agents_own(item_id: str) -> bool:
        """Added since the agent took the call and before the call's end began, and not
        said by the one before it."""
        outgoing = record.spoken_before(speech_of.get(item_id), since)
        added = record.added_at.get(item_id)
        in_call = added is None or since <= added < until
        return in_call and not outgoing

    for name, mine, other in sides:
        missing = [  # an empty message says nothing (LiveKit keeps a realtime reply cut
            # before its first word, empty, in the agent's chat_ctx and not in the history)
            text
            for item_id, text in mine.items()
            if text and item_id not in other and agents_own(item_id)
        ]
        if missing:
            findings.append(f"only in {name}: {missing!r}")
    return findings


def judge_input_released(record: CallRecord) -> list[str]:
    """Checked as the caller hangs up (or turnfsm does): a state that mutes or holds the
    caller by design may do so then."""
    policy, state = record.plan.policy, record.state_at_end
    # on a realtime model, the greeting's lock shuts the input gate whatever the policy
    # (HoldUserTurns: the model would hear the caller, and cancel the greeting)
    mutes_greeting = policy.mutes_greeting or record.plan.world == "realtime"
    muting = (state == "greeting" and mutes_greeting) or (
        state == "tool_loop" and policy.mute_input_during_tools
    )
    findings = []
    if record.input_muted and not muting:
        findings.append(f"the input is muted as the call ends in {state}")
    if record.turns_held and state not in ("greeting", "listening"):
        findings.append(f"user turns are held as the call ends in {state}")
    if not record.turn_detection_restored and not record.turns_held:
        findings.append("turn detection is not the session's own as the call ends")
    return findings


def judge_invariants(record: CallRecord) -> list[str]:
    return list(dict.fromkeys(record.violations))


def judge_outcomes(record: CallRecord) -> list[str]:
    return list(dict.fromkeys(record.breaches))


def judge_turnfsm_warnings(record: CallRecord) -> list[str]:
    # the plan's own lever fault is expected; outcome breaches are judged by "outcomes"
    expected = ("SimulatedLeverFailure", "turnfsm: outcome check")
    return list(
        dict.fromkeys(
            warning for warning in record.warnings if not any(e in warning for e in expected)
        )
    )


def judge_harness(record: CallRecord) -> list[str]:
    findings = []
    if record.harness_error is not None:
        findings.append(record.harness_error.strip().splitlines()[-1])
    if record.closed_by == "limit":
        findings.append("the call was still going at the call limit")
    return findings


JUDGEMENTS: dict[str, Callable[[CallRecord], list[str]]] = {
    "greeting": judge_greeting,
    "hello_before_greeting": judge_hello_before_greeting,
    "committed_heard": judge_committed_heard,
    "tool_rounds": judge_tool_rounds,
    "no_deaf_call": judge_no_deaf_call,
    "history_is_agent_context": judge_history_is_agent_context,
    "input_released": judge_input_released,
    "invariants": judge_invariants,
    "outcomes": judge_outcomes,
    "turnfsm_warnings": judge_turnfsm_warnings,
    "harness": judge_harness,
}
"""Every judgement, by name (the table in the module's docstring)."""


def judge_call(record: CallRecord) -> list[Finding]:
    """Every finding of every judgement on ``record``, minus what its fault excuses."""
    excused: tuple[tuple[str, str], ...] = ()
    if record.plan.fault is not None and record.fault_fired:
        excused = EXCUSED_BY_FAULT.get(record.plan.fault.effect, ())
    return [
        Finding(name, message)
        for name, judgement in JUDGEMENTS.items()
        for message in judgement(record)
        if not any(
            name == judgement_name and message.startswith(start)
            for judgement_name, start in excused
        )
    ]
