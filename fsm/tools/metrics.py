"""Per-call turn metrics, folded from a call's steps: one definition for every consumer.

:class:`CallMeter` takes the steps of one call as they happen (the LiveKit telemetry
feeds it live) and :meth:`CallMeter.result` gives a :class:`CallMetrics`;
:func:`call_metrics` folds a recorded :class:`~turnfsm.trace.Trace` the same way (the
``turnfsm report`` reads thousands of them). Only the steps are read: the event, the
states before and after, and the effects. Transcript text is never kept, only lengths,
so a redacted trace gives the same figures as a kept one.

>>> from turnfsm import TurnController, TurnPolicy, events
>>> controller = TurnController(TurnPolicy(direction="outbound", greeting="Hi"))
>>> for event in (
...     events.CallAnswered(at=1.0),
...     events.UserTurnCommitted(at=3.0, text="Hello?", item_id="u1"),
...     events.AgentSpeechCreated(at=3.1, speech_id="g"),
...     events.AgentSpeechStarted(at=3.5, speech_id="g"),
...     events.CallEnded(at=9.0),
... ):
...     _ = controller.handle(event)
>>> metrics = call_metrics(controller.trace)
>>> metrics.end_reason, metrics.time_to_greeting
('hangup', 2.5)
>>> dict(metrics.state_seconds)
{'ringing': 0.0, 'awaiting_user': 2.0, 'greeting': 6.0}
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

import attrs

from .. import effects as fx
from .. import events as ev
from ..policy import GreetingOverlap, TurnPolicy
from ..trace import Trace, TraceStep

BARGE_IN_STATES: frozenset[str] = frozenset({"greeting", "listening", "speaking", "tool_loop"})
"""States where an interrupted agent speech that played audio is a barge-in by the caller.
Before the answer the machine itself stops early speech; after the end, the hang-up cut
it."""

_SAY_COUNTS: dict[str, str] = {
    "reprompt": "reprompts",
    "tool_fallback": "tool_fallbacks",
    "greeting": "greeting_retries",
}
"""The count each reason of a ``Say`` adds to."""


@attrs.frozen
class CallMetrics:
    """How one call took its turns. Times are seconds on the call's event clock."""

    direction: str
    """The policy's ``direction``."""

    steps: int
    """Steps seen (every event, handled or ignored)."""

    duration: float
    """From the first step to the last."""

    end_reason: str | None
    """The reason of the ``EndCall`` the transition into ``ended`` emitted: its action's
    own when turnfsm ended the call (``idle``, ``max_duration``..., the ``end_call_*``
    actions of :class:`~turnfsm.rules.TurnRules`), else the ``CallEnded`` event's (the
    caller's ``hangup``, LiveKit's close reason); ``None`` while the call has not ended."""

    states_visited: tuple[str, ...]
    """States in the order first visited, from the start state."""

    state_seconds: Mapping[str, float]
    """Time spent in each state, from the step that entered it to the step that left
    it (the first state counts from the first step); ``ended`` has none."""

    time_to_greeting: float | None
    """From the answer to the greeting's first audio; ``None`` if no greeting was heard."""

    greeting_overlaps: int
    """Times the caller started speaking during the greeting (heard only with
    ``greeting_lock="keep_listening"``: a muted input hears nothing)."""

    overlap_handling: GreetingOverlap | None
    """How the caller's speech over the greeting was handled, when there was some: the
    policy's ``greeting_overlap`` (``answer_whole``: one whole turn after the greeting;
    ``drop``)."""

    overlap_dropped: int
    """Pieces of overlapping speech dropped: turns rejected in the greeting, pending
    speech cleared as the greeting ends after the caller talked over it, and the tail of
    an overlap or a spill-over cleared once the caller stops."""

    agent_speeches: int
    """Agent speeches that started playing."""

    barge_ins: int
    """Agent speeches the caller interrupted after some of their audio played (see
    :data:`BARGE_IN_STATES`)."""

    discarded_speeches: int
    """Agent speeches interrupted before any of their audio played, in any state: replies
    LiveKit prepared early and threw away (preemptive generation, on by default, replaces
    its reply when the caller goes on talking), a reply the machine stopped before the
    greeting, a tool step cut before it said anything. Not barge-ins."""

    drops: int
    """Interrupted replies whose unspoken text was dropped from the history. A speech
    LiveKit committed no text for (one discarded before any audio, or cut within its first
    syllable) left nothing to drop: neither the drop the machine asks for it nor that
    lever's refusal ("no assistant message committed") is counted."""

    dropped_chars: int
    """Unspoken characters dropped, over the drops that could be measured: the length of
    the speech's whole text less what the lever kept of it (the words the caller heard to
    their end, measured at the output), as the lever reported them in its outcome
    (``effect_outcome``'s ``text_chars`` and ``heard_chars``). Lengths only, so redaction
    changes nothing."""

    unmeasured_drops: int
    """Drops no outcome measured: the lever refused or failed, its outcome is not in the
    trace (a bounded trace let it go, the call ended first), or the trace was written
    before outcomes measured drops (format 3 and earlier)."""

    tool_rounds: int
    """Tool rounds run (parallel calls in one step count once)."""

    tool_rounds_refused: int
    """Tool steps started past the cap: not counted, their replies cancelled as they
    ended."""

    tool_caps: int
    """Times the cap was hit: a final reply without tools was asked for (a realtime
    model: tools were forbidden)."""

    tool_fallbacks: int
    """Times the fallback text was said because the final reply said nothing."""

    reprompts: int
    """Idle re-prompts said."""

    greeting_retries: int
    """Greetings said again because the first start was refused or failed."""

    lever_outcomes: Mapping[str, int] = attrs.field(factory=dict)
    """Levers that did not do their effect, as ``"effect:outcome"`` (``refused`` by
    LiveKit or ``failed``) -> count, from ``effect_outcome`` events (but for drops with
    nothing to drop, see :attr:`drops`)."""

    @property
    def greeted(self) -> bool:
        """Whether the call reached the greeting."""
        return "greeting" in self.states_visited


class CallMeter:
    """Folds one call's steps into :class:`CallMetrics`; feed it with :meth:`add`."""

    def __init__(self, policy: TurnPolicy) -> None:
        self._policy = policy
        self._steps = 0
        self._first_at: float | None = None
        self._last_at: float | None = None
        self._end_reason: str | None = None
        self._visited: dict[str, None] = {}
        self._seconds: dict[str, float] = {}
        self._answered_at: float | None = None
        self._greeting_speeches: set[str] = set()
        self._greeting_heard_at: float | None = None
        self._started: set[str] = set()
        self._played: set[str] = set()
        """Speeches whose end reported played audio (the start may not be reported when
        one speech follows another without the agent's state leaving ``speaking``)."""
        self._interrupted: set[str] = set()
        self._barged: set[str] = set()
        """Interrupted in a state where an interruption is the caller's (a barge-in, if
        the speech played audio)."""
        self._committed: set[str] = set()
        """Speeches LiveKit committed a message for."""
        self._drops: list[fx.DropUnspokenText] = []
        self._measured_drops: dict[str, tuple[int, int]] = {}
        """Speech -> ``(text_chars, heard_chars)``, as its drop's lever measured them."""
        self._counts: Counter[str] = Counter()
        self._turn_rounds = 0
        """Tool rounds counted since the last user turn, as the machine counts them."""
        self._overlapped = False
        """The caller talked over the greeting being played."""
        self._outcomes: list[ev.EffectOutcome] = []
        """Outcomes other than done."""

    def add(self, step: TraceStep) -> None:
        """Take the next step of the call."""
        if self._first_at is None:
            self._first_at = step.at
            self._visited[step.before] = None
            self._seconds[step.before] = 0.0
        elif self._last_at is not None and step.before != "ended":
            self._seconds[step.before] = self._seconds.get(step.before, 0.0) + max(
                0.0, step.at - self._last_at
            )
        self._steps += 1
        self._last_at = step.at
        self._visited.setdefault(step.after, None)
        if self._answered_at is None and _answers(step):
            self._answered_at = step.at
        self._count_event(step)
        for effect in step.effects:
            self._count(step, effect)
        if step.before == "greeting" and step.after != "greeting":
            self._overlapped = False

    def _count_event(self, step: TraceStep) -> None:
        event = step.event
        if isinstance(event, ev.UserSpeechStarted) and step.before == "greeting":
            self._counts["greeting_overlaps"] += 1
            self._overlapped = True
        elif isinstance(event, ev.AgentSpeechStarted):
            self._started.add(event.speech_id)
            if event.speech_id in self._greeting_speeches and self._greeting_heard_at is None:
                self._greeting_heard_at = step.at
        elif isinstance(event, ev.AssistantMessageCommitted):
            self._committed.add(event.speech_id)
        elif isinstance(event, ev.UserTurnCommitted):
            self._turn_rounds = 0
        elif isinstance(event, ev.ToolStepStarted) and step.after == "tool_loop":
            # a step past the cap is none of the turn's rounds: its reply is cancelled as
            # it ends (the machine decides that then, where LiveKit can cancel it)
            if self._turn_rounds < self._policy.max_tool_steps:
                self._turn_rounds += 1
                self._counts["tool_rounds"] += 1
            else:
                self._counts["tool_rounds_refused"] += 1
        elif isinstance(event, ev.EffectOutcome):
            self._count_outcome(event)
        if isinstance(event, ev.AgentSpeechEnded) and event.played_seconds > 0:
            self._played.add(event.speech_id)
        if isinstance(event, ev.AgentSpeechInterrupted) or (
            isinstance(event, ev.AgentSpeechEnded) and event.interrupted
        ):
            self._interrupted.add(event.speech_id)
            if step.before in BARGE_IN_STATES:
                self._barged.add(event.speech_id)

    def _count_outcome(self, outcome: ev.EffectOutcome) -> None:
        if outcome.outcome != "done":
            self._outcomes.append(outcome)
        elif (
            outcome.effect == fx.DropUnspokenText.name
            and outcome.speech_id is not None
            and outcome.text_chars is not None
            and outcome.heard_chars is not None
        ):
            self._measured_drops[outcome.speech_id] = (outcome.text_chars, outcome.heard_chars)

    def _count(self, step: TraceStep, effect: fx.Effect) -> None:
        if isinstance(effect, fx.EndCall) and self._end_reason is None:
            self._end_reason = effect.reason
        elif isinstance(effect, fx.LockSpeech):
            self._greeting_speeches.add(effect.speech_id)
        elif isinstance(effect, fx.RejectUserTurn) or (
            # leaving the greeting clears pending speech even when nobody talked over it
            isinstance(effect, fx.ClearUserTurn)
            and (step.before != "greeting" or self._overlapped)
        ):
            self._counts["overlap_dropped"] += 1
        elif isinstance(effect, fx.DropUnspokenText):
            self._drops.append(effect)
        elif isinstance(effect, fx.ForbidTools) or (
            # a realtime model's final reply is asked for later, after ForbidTools at the cap
            isinstance(effect, fx.FinalReplyWithoutTools)
            and isinstance(step.event, ev.ToolStepFinished)
        ):
            self._counts["tool_caps"] += 1
        elif isinstance(effect, fx.Say):
            self._counts[_SAY_COUNTS[effect.reason]] += 1

    def result(self) -> CallMetrics:
        """The call's metrics so far."""
        audible = self._started | self._played
        nothing_to_drop = {drop.speech_id for drop in self._drops} - self._committed
        drops = [drop for drop in self._drops if drop.speech_id not in nothing_to_drop]
        outcomes = Counter(
            f"{outcome.effect}:{outcome.outcome}"
            for outcome in self._outcomes
            if not (
                outcome.effect == fx.DropUnspokenText.name and outcome.speech_id in nothing_to_drop
            )
        )
        dropped_chars = unmeasured = 0
        for drop in drops:
            measured = self._measured_drops.get(drop.speech_id)
            if measured is None:
                unmeasured += 1
            else:
                text_chars, heard_chars = measured
                dropped_chars += max(0, text_chars - heard_chars)
        heard, answered = self._greeting_heard_at, self._answered_at
        counts = self._counts
        return CallMetrics(
            direction=self._policy.direction,
            steps=self._steps,
            duration=(self._last_at or 0.0) - (self._first_at or 0.0),
            end_reason=self._end_reason,
            states_visited=tuple(self._visited),
            state_seconds=dict(self._seconds),
            time_to_greeting=(
                max(0.0, heard - answered) if heard is not None and answered is not None else None
            ),
            greeting_overlaps=counts["greeting_overlaps"],
            overlap_handling=(
                self._policy.greeting_overlap if counts["greeting_overlaps"] else None
            ),
            overlap_dropped=counts["overlap_dropped"],
            agent_speeches=len(self._started),
            barge_ins=len(self._barged & audible),
            discarded_speeches=len(self._interrupted - audible),
            drops=len(drops),
            dropped_chars=dropped_chars,
            unmeasured_drops=unmeasured,
            tool_rounds=counts["tool_rounds"],
            tool_rounds_refused=counts["tool_rounds_refused"],
            tool_caps=counts["tool_caps"],
            tool_fallbacks=counts["tool_fallbacks"],
            reprompts=counts["reprompts"],
            greeting_retries=counts["greeting_retries"],
            lever_outcomes=dict(outcomes),
        )


def call_metrics(trace: Trace) -> CallMetrics:
    """The metrics of a recorded call."""
    return metrics_of(trace.policy, trace.steps)


def metrics_of(policy: TurnPolicy, steps: Iterable[TraceStep]) -> CallMetrics:
    """The metrics of a call's steps under ``policy``, in order."""
    meter = CallMeter(policy)
    for step in steps:
        meter.add(step)
    return meter.result()


def _answers(step: TraceStep) -> bool:
    """Whether this step answered the call: an outbound call left ``ringing`` for a live
    state, or an inbound session started."""
    if step.before == "ringing":
        return step.after not in ("ringing", "ended")
    return step.event.name == "session_started"
