"""Tools to check a turn machine: a finite event alphabet and an exhaustive explorer.

:func:`explore` visits every configuration reachable from a policy's start — the
state, the context (counters and flags) and the safety monitor's shadow — and feeds
every event of :func:`event_alphabet` to each, checking every invariant on every
step, and the watchdogs (:data:`WATCHDOGS`) in every configuration. The alphabet is
finite (two speeches, two user turns, each timer, early and late times), and the policy
bounds the counters, so the search ends.

>>> policy = TurnPolicy(greeting="Thanks for calling.", interrupted_text="keep", max_tool_steps=1)
>>> report = explore(policy)
>>> report.violations
[]
>>> report.configurations > 100
True

Testing your own agent's turn-taking in simulated calls (your ``TurnAgent`` and policy in
a real ``AgentSession``, on a virtual clock) is here too: :class:`CallerLine`,
:func:`simulate_call`, :class:`SimulatedTurnCall`, :class:`AgentSpeech`,
:class:`ScriptedLLM`, :class:`ScriptedReply` and :class:`ScriptedToolCall` are
:mod:`turnfsm.adapters.sim.testing`'s, imported on first use. They run LiveKit; this
module does not, and importing it imports no LiveKit (``fsm/`` is pure).
"""

from __future__ import annotations

import functools
import importlib
from collections import deque
from collections.abc import Callable, Collection, Hashable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from . import effects as fx
from . import events as ev
from .context import TurnContext
from .context_rules import check_context, state_rules_apply
from .controller import TurnController, active_states
from .effects import REALTIME_TIMERS
from .engine import Decision, UnsupportedChart
from .invariants import InvariantViolation, SafetyMonitor
from .machine import (
    CONVERSATION_STATES,
    LIVE_STATES,
    TurnChart,
    TurnMachine,
    handled_events,
    public_state,
    transition_key,
)
from .policy import Count, OneOf, Seconds, TurnPolicy, option_of
from .rules import TurnRules, running_timers

if TYPE_CHECKING:  # for type checkers only: at run time they come from __getattr__
    from statemachine.transition import Transition

    from .adapters.sim.testing import AgentSpeech as AgentSpeech
    from .adapters.sim.testing import CallerLine as CallerLine
    from .adapters.sim.testing import ScriptedLLM as ScriptedLLM
    from .adapters.sim.testing import ScriptedReply as ScriptedReply
    from .adapters.sim.testing import ScriptedToolCall as ScriptedToolCall
    from .adapters.sim.testing import SimulatedTurnCall as SimulatedTurnCall
    from .adapters.sim.testing import simulate_call as simulate_call

SIMULATED_CALLS = "turnfsm.adapters.sim.testing"
"""Where the simulated-call helpers live (they run LiveKit)."""

FORWARDED: frozenset[str] = frozenset(
    {
        "AgentSpeech",
        "CallerLine",
        "ScriptedLLM",
        "ScriptedReply",
        "ScriptedToolCall",
        "SimulatedTurnCall",
        "simulate_call",
    }
)
"""The names of :data:`SIMULATED_CALLS` this module hands out, importing it on first use."""


def __getattr__(name: str) -> Any:
    """A simulated-call helper (:data:`FORWARDED`), importing LiveKit only now (PEP 562)."""
    if name in FORWARDED:
        return getattr(importlib.import_module(SIMULATED_CALLS), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | FORWARDED)


EARLY = 1.0
LATE = 100.0
"""Event times. No guard reads them (time reaches the machine as timers' expiries): one
time per event is enough for :func:`explore`; ``LATE`` follows it, for the watchdogs."""

WATCHDOGS: dict[str, str] = {
    "W1": "max_duration_fires",
    "W2": "idle_timer_comes_back",
}
"""The timers no stuck state may silence, checked in every configuration :func:`explore`
reaches (:func:`watchdog_problem`):

W1 (``max_call_duration`` set) in every live configuration the ``max_duration`` timer
runs, and its expiry ends the call there.

W2 (``idle_timeout`` set) in every configuration of the conversation the ``idle`` timer
runs and its expiry re-prompts or hangs up; or the machine waits for what is in flight —
the agent's speeches it tracks, the caller's voice — and once each of those speeches
ended and the caller fell silent, it is back in ``listening`` with the timer running.

What the machine waits for is really in flight: the LiveKit adapter's state-agreement
check (O7) holds ``speaking``/``tool_loop`` to a speech or tool step LiveKit has in
flight, and ``caller_speaking`` to LiveKit's user speaking. So a call whose session is
quiet is in ``listening`` with the caller silent, where the idle timer runs."""


Samples = dict[type[ev.Event], "tuple[ev.Event, ...] | str"]
"""Per registered event type, the concrete events an exploration feeds, or why it feeds
none of that type."""


def pipeline_samples() -> Samples:
    """For every event type of the registry (:data:`~turnfsm.events.EVENT_TYPES`), what
    a call on an STT-LLM-TTS pipeline is told: one event per branch a guard can tell
    apart (two speeches, two user turns, a recoverable and a fatal error, the effect
    outcomes a rule reads...)."""
    speeches = ("s1", "s2")

    def per_speech(*make: Callable[[str], ev.Event]) -> tuple[ev.Event, ...]:
        return tuple(build(speech) for speech in speeches for build in make)

    realtime_only = "only a realtime model's link reports it"
    return {
        ev.SessionStarted: (ev.SessionStarted(at=EARLY),),
        ev.CallRinging: (ev.CallRinging(at=EARLY),),
        ev.CallAnswered: (ev.CallAnswered(at=EARLY),),
        ev.CallEnded: (ev.CallEnded(at=EARLY, reason="hangup"),),
        ev.UserSpeechStarted: (ev.UserSpeechStarted(at=EARLY),),
        ev.UserSpeechEnded: (ev.UserSpeechEnded(at=EARLY),),
        ev.UserTranscript: (
            ev.UserTranscript(at=EARLY, text="hello", is_final=True),
            ev.UserTranscript(at=EARLY, text="hel"),
        ),
        ev.UserTurnCommitted: USER_TURNS,
        # under and over the min_words of INTERRUPTION_SETTINGS
        ev.UserTurnEnded: (
            ev.UserTurnEnded(at=EARLY, words=1),
            ev.UserTurnEnded(at=EARLY, words=3),
        ),
        ev.UserTurnDeclined: (
            ev.UserTurnDeclined(at=EARLY, reason="false_interruption"),
            *per_speech(
                lambda s: ev.UserTurnDeclined(at=EARLY, reason="rejected", prepared_speech_id=s)
            ),
        ),
        ev.AnsweringMachineDetected: (
            ev.AnsweringMachineDetected(at=EARLY, result="human"),
            ev.AnsweringMachineDetected(at=EARLY, result="machine"),
        ),
        ev.SessionError: (
            ev.SessionError(at=EARLY, message="boom", recoverable=True),
            ev.SessionError(at=EARLY, message="boom", recoverable=False),
        ),
        # the realtime waits' timers start only once a realtime model is linked
        **{
            kind: "its timer starts only once a realtime model is linked"
            if kind.timer in REALTIME_TIMERS
            else (kind(at=EARLY),)
            for kind in ev.TIMER_EVENTS
        },
        ev.AgentSpeechStarted: (ev.AgentSpeechStarted(at=EARLY, speech_id="s1"),),
        ev.AssistantMessageCommitted: (
            ev.AssistantMessageCommitted(at=EARLY, speech_id="s1", text="hi"),
            *per_speech(
                lambda s: ev.AssistantMessageCommitted(
                    at=EARLY, speech_id=s, text="hi", interrupted=True
                )
            ),
        ),
        ev.ToolStepStarted: (
            ev.ToolStepStarted(at=EARLY, speech_id="s1", calls=3),
            *per_speech(lambda s: ev.ToolStepStarted(at=EARLY, speech_id=s, calls=1)),
        ),
        ev.ToolStepFinished: per_speech(
            lambda s: ev.ToolStepFinished(at=EARLY, speech_id=s),
            lambda s: ev.ToolStepFinished(at=EARLY, speech_id=s, hands_over=True),
        ),
        ev.EffectOutcome: (
            ev.EffectOutcome(at=EARLY, effect="interrupt", outcome="refused"),
            ev.EffectOutcome(at=EARLY, effect="start_greeting", outcome="failed"),
            ev.EffectOutcome(at=EARLY, effect="start_greeting", outcome="done"),
            ev.EffectOutcome(at=EARLY, effect="say", outcome="refused"),
            ev.EffectOutcome(at=EARLY, effect="lock_speech", outcome="refused"),
            *per_speech(
                lambda s: ev.EffectOutcome(
                    at=EARLY, effect="hold_tool_reply", outcome="refused", speech_id=s
                )
            ),
        ),
        ev.OutcomeBreached: (ev.OutcomeBreached(at=EARLY, check="O2"),),
        ev.AgentSpeechCreated: per_speech(
            lambda s: ev.AgentSpeechCreated(at=EARLY, speech_id=s, source="reply"),
            lambda s: ev.AgentSpeechCreated(
                at=EARLY, speech_id=s, source="say", from_agent_code=True
            ),
        ),
        ev.AgentSpeechEnded: per_speech(
            lambda s: ev.AgentSpeechEnded(at=EARLY, speech_id=s),
            lambda s: ev.AgentSpeechEnded(at=EARLY, speech_id=s, played_seconds=1.5),
            lambda s: ev.AgentSpeechEnded(
                at=EARLY, speech_id=s, interrupted=True, played_seconds=1.0
            ),
        ),
        ev.AgentSpeechInterrupted: per_speech(
            lambda s: ev.AgentSpeechInterrupted(at=EARLY, speech_id=s)
        ),
        # told again: the same fact (explore() starts after it)
        ev.InterruptionSettings: (INTERRUPTION_SETTINGS,),
        ev.RealtimeModelLinked: realtime_only,
        ev.ModelResponseCreated: realtime_only,
        ev.ModelResponseDone: realtime_only,
        ev.ModelReplyStarted: realtime_only,
        ev.ModelCancelSent: realtime_only,
        ev.ModelCancelAnswered: realtime_only,
    }


USER_TURNS = (
    ev.UserTurnCommitted(at=EARLY, text="hello", item_id="u1"),
    ev.UserTurnCommitted(at=EARLY, text="again", item_id="u2"),
)


def realtime_samples() -> Samples:
    """For every event type of the registry, what a call on a realtime model is told:
    the model's responses and its own replies, the link again (a handoff links a new
    session mid-call), and the call's events that meet the realtime waits (the
    greeting, speeches, tool steps, timers, the greeting's outcomes, the end). The rest
    is explored on the pipeline: the realtime rules do not read it."""
    traced_only = "traced only, in every state: explored on the pipeline"
    same_rule = "read by the same rules on both paths: explored on the pipeline"
    speeches = ("s1", "s2")
    return {
        ev.SessionStarted: (ev.SessionStarted(at=EARLY),),
        ev.CallRinging: traced_only,
        ev.CallAnswered: (ev.CallAnswered(at=EARLY),),
        ev.CallEnded: (ev.CallEnded(at=EARLY, reason="hangup"),),
        ev.UserSpeechStarted: (ev.UserSpeechStarted(at=EARLY),),
        ev.UserSpeechEnded: (ev.UserSpeechEnded(at=EARLY),),
        ev.UserTranscript: "a realtime model's server commits the words it transcribes:"
        " they never start the greeting (runs_realtime_model), explored on the pipeline",
        ev.UserTurnCommitted: USER_TURNS,
        ev.UserTurnEnded: same_rule,
        ev.UserTurnDeclined: same_rule,
        ev.AnsweringMachineDetected: same_rule,
        ev.SessionError: same_rule,
        **{kind: (kind(at=EARLY),) for kind in ev.TIMER_EVENTS},
        ev.AgentSpeechStarted: traced_only,
        ev.AssistantMessageCommitted: same_rule,
        ev.ToolStepStarted: tuple(
            ev.ToolStepStarted(at=EARLY, speech_id=s, calls=1) for s in speeches
        ),
        ev.ToolStepFinished: tuple(ev.ToolStepFinished(at=EARLY, speech_id=s) for s in speeches),
        ev.EffectOutcome: (
            ev.EffectOutcome(at=EARLY, effect="start_greeting", outcome="refused", speech_id="s1"),
            ev.EffectOutcome(at=EARLY, effect="say", outcome="refused"),
        ),
        ev.OutcomeBreached: traced_only,
        ev.AgentSpeechCreated: tuple(
            ev.AgentSpeechCreated(at=EARLY, speech_id=s, source="reply") for s in speeches
        ),
        ev.AgentSpeechEnded: tuple(
            event
            for s in speeches
            for event in (
                ev.AgentSpeechEnded(at=EARLY, speech_id=s),
                ev.AgentSpeechEnded(at=EARLY, speech_id=s, interrupted=True, played_seconds=1.0),
            )
        ),
        ev.AgentSpeechInterrupted: same_rule,
        ev.InterruptionSettings: same_rule,
        ev.RealtimeModelLinked: (REALTIME_LINK,),
        ev.ModelResponseCreated: (ev.ModelResponseCreated(at=EARLY, response_id="r1"),),
        ev.ModelResponseDone: (ev.ModelResponseDone(at=EARLY, response_id="r1"),),
        ev.ModelCancelSent: (ev.ModelCancelSent(at=EARLY, cancel_id="c1", response_id="r1"),),
        ev.ModelCancelAnswered: (ev.ModelCancelAnswered(at=EARLY, cancel_id="c1"),),
        ev.ModelReplyStarted: (
            ev.ModelReplyStarted(at=EARLY, speech_id="s1"),
            ev.ModelReplyStarted(at=EARLY, speech_id="s2", after_tool_output=True),
            ev.ModelReplyStarted(at=EARLY, speech_id="s2", after_tool_output=True, duplicate=True),
        ),
    }


def alphabet_of(samples: Samples) -> tuple[ev.Event, ...]:
    """The events ``samples`` lists, in the registry's order.

    Raises:
        KeyError: a registered event type has neither samples nor a reason.
    """
    missing = [kind.__name__ for kind in ev.EVENT_TYPES if kind not in samples]
    if missing:
        raise KeyError(f"event types with no samples nor a reason to have none: {missing}")
    return tuple(
        event
        for kind in ev.EVENT_TYPES
        if not isinstance(events := samples[kind], str)
        for event in events
    )


def event_alphabet() -> tuple[ev.Event, ...]:
    """A finite set of concrete events covering every event type and branch of a call
    on a pipeline (:func:`pipeline_samples`)."""
    return alphabet_of(pipeline_samples())


INTERRUPTION_SETTINGS = ev.InterruptionSettings(at=EARLY, min_words=2)
"""The session fact :func:`explore` starts from on a pipeline: LiveKit's ``min_words=2``
with an STT, so a turn's end is explored under it and over it."""

REALTIME_LINK = ev.RealtimeModelLinked(at=EARLY, replies_to_turns=True)
"""The realtime model :func:`explore` starts from with ``realtime=True``: OpenAI Realtime
(server turn detection answers turns; LiveKit asks for tool replies). A model that also
answers tool output itself is reached too: its first such reply tells the machine."""

REALTIME_LINKS = (
    REALTIME_LINK,
    ev.RealtimeModelLinked(at=EARLY, replies_to_turns=True, replies_to_tool_output=True),
)
"""The realtime models :func:`explore` starts from with ``realtime=True``: as
:data:`REALTIME_LINK`, and one whose link tells it answers tool output itself (LiveKit's
``auto_tool_reply_generation``), from the call's start."""


OWN_WORDS_SPEECH = (
    ev.AgentSpeechCreated(at=EARLY, speech_id="s3", source="reply", from_agent_code=True),
    ev.AgentSpeechEnded(at=EARLY, speech_id="s3"),
)
"""A speech the agent's own code asks for (its ``on_enter``) and its end: added to a
realtime exploration when the agent greets in its own words, where it is the greeting
(the realtime rules read no other speech of the agent's code; :func:`pipeline_samples`
has them for every policy)."""


def realtime_alphabet() -> tuple[ev.Event, ...]:
    """The events of a realtime call (:func:`realtime_samples`)."""
    return alphabet_of(realtime_samples())


@attrs.frozen
class ExplorationReport:
    """What :func:`explore` covered and the breaches it found."""

    configurations: int
    """Distinct configurations (the state of every region × context × monitor shadow)
    visited."""
    steps: int
    """Events fed, each checked against every invariant."""
    states: frozenset[str]
    """States reached (as :attr:`~turnfsm.TurnController.state` reports them)."""
    transitions: frozenset[tuple[str, str, str]]
    """(source, event, target) moves taken in each region (the state's, and each
    region's beside it), self loops included."""
    violations: list[str]
    """One line per breach: the invariant (or watchdog), the configuration and the event
    that reached it."""
    paths: tuple[tuple[ev.Event, ...], ...] = ()
    """For each violation, in the same order, a shortest event path from the start that
    ends with the breaking event (breadth-first: no shorter path breaks it there)."""
    watched: int = 0
    """Configurations in which a watchdog applied (its timer is set by the policy)."""
    engine_checks: int = 0
    """Steps also run on the reference engine and compared with the compiled one: one
    per distinct decisions (:attr:`turnfsm.engine.CompiledEngine.decisions`), which
    stand for every handled step with the same decisions."""
    fired: frozenset[tuple[str, int]] = frozenset()
    """The declared transitions some step took (:func:`~turnfsm.machine.transition_key`),
    on the compiled engine (none on the reference alone). The eventless ones taken as
    the machine is built, before the first event, are not steps: an outbound call's
    ``start`` to ``ringing``."""


SHORT_TIMERS: tuple[float, ...] = (1.0, 5.0)
"""Seconds a duration option is drawn at besides its default: timers that run out within
a simulated call."""


def drawn_values(field: attrs.Attribute) -> tuple[Any, ...]:
    """The values the tests draw for a :class:`~turnfsm.policy.TurnPolicy` option (the
    fuzzed calls weigh them by repetition): its :class:`~turnfsm.policy.Option`'s
    ``drawn``, else what its validator accepts: every choice; both flags; a duration's
    default, ``None`` (no limit) where it is optional and :data:`SHORT_TIMERS`; a count's
    minimum, default and one more; a text's default alone. So a new option is drawn as
    soon as it is declared.

    >>> import attrs
    >>> fields = attrs.fields_dict(TurnPolicy)
    >>> drawn_values(fields["greet_on"])
    ('final_transcript', 'end_of_turn')
    >>> drawn_values(fields["tool_reply_hold"])
    (3.0, None, 1.0, 5.0)
    """
    option, check, default = option_of(field), field.validator, field.default
    if option.drawn is not None:
        return option.drawn
    if isinstance(check, OneOf):
        return check.choices
    if isinstance(default, bool):
        return (False, True)
    if isinstance(check, Seconds):
        return tuple(dict.fromkeys((default, *[None] * check.optional, *SHORT_TIMERS)))
    if isinstance(check, Count) and isinstance(default, int):
        return tuple(dict.fromkeys((check.minimum, default, default + 1)))
    if option.shapes_the_call:
        raise ValueError(f"{field.name} shapes the call: it is drawn by hand, with the shape")
    return (default,)


def fresh_context(state: str, policy: TurnPolicy) -> TurnContext:
    """The context a call under ``policy`` has just after entering ``state`` (an atomic
    state: a greeting's phase, not ``greeting``) the plainest way (one that
    :meth:`~turnfsm.TurnController.restore` takes): the speech ``s1`` playing (and running
    a tool round in ``tool_loop``, locked as the greeting in its playing phases). (The
    greeting's waits for a busy realtime model have none: a fresh call's model is free.)"""
    playing = state in ("greeting_playing", "retry_playing")
    return TurnContext(
        greeting_speech_id="s1" if playing else None,
        active_speeches=frozenset({"s1"} if state in ("speaking", "tool_loop") or playing else ()),
        tool_rounds=1 if state == "tool_loop" else 0,
        tool_speech_id="s1" if state == "tool_loop" else None,
    )


@attrs.frozen
class _Step:
    """Where an event takes a (configuration, context)."""

    effects: tuple[fx.Effect, ...]
    configuration: tuple[str, ...]
    snapshot: tuple[Any, ...]
    """The context's :meth:`~turnfsm.context.TurnContext.snapshot` (kept rather than the
    context: many steps share one)."""
    moves: tuple[tuple[str, str, str], ...]
    """The step's :func:`region_moves`."""


_Checked = tuple[SafetyMonitor, Hashable] | InvariantViolation
"""The monitor's check of a step: the monitor after it and its shadow, or the breach."""


def explore(
    policy: TurnPolicy,
    *,
    machine_class: type[TurnChart] = TurnMachine,
    rules_class: type[TurnRules] = TurnRules,
    max_configurations: int = 200_000,
    extra_events: Sequence[ev.Event] = (),
    realtime: bool = False,
    reached: Callable[[tuple[str, ...], TurnContext], None] | None = None,
) -> ExplorationReport:
    """Breadth-first over every reachable configuration, every event, every invariant.

    ``machine_class`` and ``rules_class`` replace the machine or its guards and actions,
    e.g. with a deliberately broken subclass to show the invariants catch it, or with an
    extension from :func:`~turnfsm.machine.build_machine`; ``extra_events`` adds the
    extension's own events to the alphabet. Every exploration starts once the machine
    was told a fact of the session: :data:`INTERRUPTION_SETTINGS`, or with ``realtime``
    each of :data:`REALTIME_LINKS` (the machine told it runs a realtime model), which then
    feeds :func:`realtime_alphabet`. ``reached`` is called with each configuration and context
    first reached (a copy: keep it).

    Every step runs on the compiled engine (:mod:`turnfsm.engine`). The first step with
    each distinct decisions (the configuration, the event's name and every guard's
    answer at each choice the step makes) also runs on python-statemachine's own engine
    from the same configuration and context: a different configuration, context or
    effects (or error) after it is a violation, ``E1 engines differ``. As a step of
    either engine is a function of its decisions and its context, this proves the two
    engines equal on every step explored, at the cost of one reference step per
    distinct decisions (``ExplorationReport.engine_checks``). A chart or rules class the
    compiled engine refuses (:class:`~turnfsm.engine.UnsupportedChart`) is explored on the
    reference engine alone.

    Every configuration first reached is also held to the context rules
    (:func:`~turnfsm.context_rules.check_context`, what ``restore()`` lets in): a
    context some call reaches but ``restore()`` refuses is a violation, ``C1``, with
    the path to it; and its running timers (:func:`~turnfsm.rules.running_timers`) to
    those its path's effects left running (the monitor's own count): one the configuration
    runs but the effects never started (or cancelled), or the other way round, is ``I6``.

    Raises:
        RuntimeError: more than ``max_configurations`` configurations (unbounded state).
    """
    alphabet = (*(realtime_alphabet() if realtime else event_alphabet()), *extra_events)
    if realtime and policy.greets_in_own_words:
        alphabet = (*alphabet, *OWN_WORDS_SPEECH)
    by_state = state_rules_apply(machine_class, rules_class)
    reference = TurnController(
        policy,
        record=False,
        machine_class=machine_class,
        rules_class=rules_class,
        engine="reference",
    )
    try:
        controller = TurnController(
            policy, record=False, machine_class=machine_class, rules_class=rules_class
        )
    except UnsupportedChart:  # explored on the reference engine alone
        controller = reference
    engine = controller._engine
    taken: set[Transition] = set()
    if engine is not None:
        engine.taken = taken
    compared: set[Hashable] = set()
    handled_in: dict[tuple[str, ...], frozenset[str]] = {}
    handled_by_state = handled_events(machine_class)
    start = (controller.configuration, controller.context, SafetyMonitor(policy))
    origin = _key(start[0], start[1].snapshot(), start[2].shadow())
    # every configuration's first way in (parent key, event): shortest paths, breadth-first
    seen: dict[Hashable, tuple[Hashable, ev.Event] | None] = {origin: None}
    steps = 0
    states: set[str] = set()
    moves: set[tuple[str, str, str]] = set()
    # the session's fact is the first event of a call: start after it (after each)
    queue: deque[tuple[tuple[str, ...], TurnContext, SafetyMonitor]] = deque()
    for told in REALTIME_LINKS if realtime else (INTERRUPTION_SETTINGS,):
        controller._resume(start[0], start[1].copy())
        monitor = start[2].copy()
        effects = controller.handle(told)
        monitor.check(public_state(start[0][0]), told, controller.state, effects)
        linked = (controller.configuration, controller.context.copy(), monitor)
        moves.update(region_moves(start[0], told.name, linked[0], machine_class))
        seen[_key(linked[0], linked[1].snapshot(), monitor.shadow())] = (origin, told)
        queue.append(linked)
        if reached is not None:
            reached(linked[0], linked[1].copy())
    violations: list[str] = []
    paths: list[tuple[ev.Event, ...]] = []
    watched = 0
    # A configuration is the machine's states, its context and the monitor's shadow, but
    # the controller never reads the monitor: the same states and context, reached with
    # another shadow, take the same steps. So each step the controller takes is kept, and
    # taken once (and compared with the reference engine then, if its decisions are new).
    steps_from: dict[Hashable, dict[ev.Event, _Step]] = {}
    # one tuple per distinct context, however many steps kept end in it (the memory, and
    # the garbage collector's walks through it, grow with the distinct contexts alone)
    snapshots: dict[tuple[Any, ...], tuple[Any, ...]] = {}

    @functools.cache  # asked on every step, of few distinct arguments
    def step_moves(
        before: tuple[str, ...], event_name: str, after: tuple[str, ...]
    ) -> tuple[tuple[str, str, str], ...]:
        return tuple(region_moves(before, event_name, after, machine_class))

    # The monitor's check of a step reads only its shadow, the states before and after,
    # the event and the effects: few distinct checks stand for many steps. Each is made
    # once and its outcome kept: the checked monitor (shared by every configuration it
    # is reached in, as the explorer changes no monitor in place but a fresh copy; its
    # step count is its first path's) and its shadow, or the breach.
    checks_from: dict[Hashable, dict[Hashable, _Checked]] = {}
    while queue:
        configuration, context, monitor = queue.popleft()
        state = public_state(configuration[0])
        states.add(state)
        snapshot = _interned(snapshots, context.snapshot())
        shadow = monitor.shadow()
        here = _key(configuration, snapshot, shadow)
        handled = handled_in.get(configuration)
        if handled is None:  # as the controller decides what it ignores
            handled = frozenset().union(*(handled_by_state[leaf] for leaf in configuration))
            handled_in[configuration] = handled
        taken_here = steps_from.setdefault((configuration, snapshot), {})
        checked_here = checks_from.setdefault((shadow, state), {})
        for event in alphabet:
            steps += 1
            kept = taken_here.get(event)
            if event.name not in handled:
                # ignored: the controller returns nothing and changes nothing (no need to
                # run it); the monitor still sees the step
                step = _Step(
                    (),
                    configuration,
                    snapshot,
                    step_moves(configuration, event.name, configuration),
                )
            elif kept is not None:  # taken from here before, with another shadow
                step = kept
            else:
                # resumed unchecked (checked once, when first reached), the context
                # copied: a step changes it in place
                controller._resume(configuration, context.copy())
                decisions: list[Decision] = []
                if engine is not None:
                    engine.decisions = decisions
                try:
                    effects = controller.handle(event)
                finally:
                    if engine is not None:
                        engine.decisions = None
                step = _Step(
                    effects,
                    controller.configuration,
                    _interned(snapshots, controller.context.snapshot()),
                    step_moves(configuration, event.name, controller.configuration),
                )
                taken_here[event] = step
                decided = (tuple(decisions), event.name)
                if decisions and decided not in compared:
                    compared.add(decided)
                    difference = _engines_differ(
                        reference, configuration, context, event, controller, effects
                    )
                    if difference is not None:
                        violations.append(
                            f"{difference} [in {_named(configuration)} on {event!r}]"
                        )
                        paths.append((*_path_to(seen, here), event))
                        continue
            after_state = public_state(step.configuration[0])
            check = (event, after_state, step.effects)
            checked = checked_here.get(check)
            if checked is None:
                after_monitor = monitor.copy()
                try:
                    after_monitor.check(state, event, after_state, step.effects)
                    checked = (after_monitor, after_monitor.shadow())
                except InvariantViolation as breach:
                    checked = breach
                checked_here[check] = checked
            if isinstance(checked, InvariantViolation):
                violations.append(f"{checked} [in {_named(configuration)} on {event!r}]")
                paths.append((*_path_to(seen, here), event))
                continue
            after_monitor, after_shadow = checked
            moves.update(step.moves)
            key = _key(step.configuration, step.snapshot, after_shadow)
            if key not in seen:
                # as restore() would, once per configuration: a context some call reaches
                # that restore() refuses is a breach of the context rules (C1)
                after_context = TurnContext.from_snapshot(step.snapshot)
                try:
                    check_context(after_context, policy, step.configuration if by_state else None)
                except ValueError as refused:
                    violations.append(
                        f"C1 context refused: {refused} [in {_named(configuration)} on {event!r}]"
                    )
                    paths.append((*_path_to(seen, here), event))
                    continue
                if reached is not None:
                    reached(step.configuration, after_context.copy())
                seen[key] = (here, event)
                if len(seen) > max_configurations:
                    raise RuntimeError(f"more than {max_configurations} configurations")
                queue.append((step.configuration, after_context, after_monitor))
                watched += _watched(policy, step.configuration)
                # the configuration runs the timers the effects left running (I6)
                running = running_timers(policy, active_states(machine_class, step.configuration))
                if running != after_monitor.timers:
                    violations.append(
                        f"I6 timers_balanced: the effects left {sorted(after_monitor.timers)} "
                        f"running, {_named(step.configuration)} runs {sorted(running)} "
                        f"[reached on {event!r}]"
                    )
                    paths.append(_path_to(seen, key))
                problem = watchdog_problem(
                    controller, step.configuration, after_context.copy(), after_monitor.timers
                )
                if problem is not None:  # a path to the configuration, ending with the event
                    violations.append(f"{problem} [reached on {event!r}]")
                    paths.append(_path_to(seen, key))
    return ExplorationReport(
        configurations=len(seen),
        steps=steps,
        states=frozenset(states),
        transitions=frozenset(moves),
        violations=violations,
        paths=tuple(paths),
        watched=watched,
        engine_checks=len(compared),
        fired=frozenset(transition_key(transition) for transition in taken),
    )


def _engines_differ(
    reference: TurnController,
    configuration: tuple[str, ...],
    context: TurnContext,
    event: ev.Event,
    compiled: TurnController,
    effects: tuple[fx.Effect, ...],
) -> str | None:
    """How the reference engine's step from (``configuration``, ``context``) on ``event``
    differs from the compiled engine's, which ended in ``compiled`` with ``effects``."""
    reference._resume(configuration, context.copy())
    try:
        expected: object = reference.handle(event)
    except Exception as error:  # noqa: BLE001 - the compiled step did not raise
        expected = error
    if expected != effects:
        return f"E1 engines differ: effects {effects!r}, the reference's {expected!r}"
    if reference.configuration != compiled.configuration:
        return (
            f"E1 engines differ: {_named(compiled.configuration)}, the reference's "
            f"{_named(reference.configuration)}"
        )
    if reference.context != compiled.context:
        return (
            f"E1 engines differ: context {compiled.context}, the reference's {reference.context}"
        )
    return None


def watchdog_problem(
    controller: TurnController,
    configuration: tuple[str, ...],
    context: TurnContext,
    timers: Collection[str],
) -> str | None:
    """What keeps a watchdog (:data:`WATCHDOGS`) from firing in ``configuration``, if
    anything; the controller is left in some configuration (the explorer resumes it).

    ``timers`` are those the call's effects left running (:func:`timers_after`; the
    explorer's monitor keeps them): what the adapter runs, whatever the machine's
    configuration says runs (an action that forgot to start a timer, or cancelled one its
    state runs, silences it for good)."""
    policy, state = controller.policy, configuration[0]
    where = " + ".join(configuration)
    if policy.max_call_duration is not None and state in LIVE_STATES:
        if "max_duration" not in timers:
            return f"W1 max_duration_fires: the timer is not running in {where}"
        controller._resume(configuration, context.copy())
        controller.handle(ev.MaxDurationTimerExpired(at=LATE))
        if controller.state != "ended":
            return f"W1 max_duration_fires: its expiry leaves {where} in {controller.state}"
    if policy.idle_timeout is None or state not in CONVERSATION_STATES:
        return None
    controller._resume(configuration, context.copy())
    if "idle" in timers:
        effects = controller.handle(ev.IdleTimerExpired(at=LATE))
        reprompted = any(isinstance(e, fx.Say) and e.reason == "reprompt" for e in effects)
        if reprompted or controller.state == "ended":
            return None
        return f"W2 idle_timer_comes_back: its expiry does nothing in {where}"
    # what the machine waits for ends: every speech it tracks, then the caller's voice
    for speech_id in sorted(context.active_speeches):
        ended = ev.AgentSpeechEnded(at=LATE, speech_id=speech_id, played_seconds=1.0)
        timers = timers_after(timers, ended, controller.handle(ended))
    if "caller_speaking" in controller.configuration:
        silent = ev.UserSpeechEnded(at=LATE)
        timers = timers_after(timers, silent, controller.handle(silent))
    back = controller.state == "listening" and "idle" in timers
    if back or controller.state == "ended":
        return None
    return (
        f"W2 idle_timer_comes_back: not running in {where}, nor once what it waits for "
        f"ended ({' + '.join(controller.configuration)})"
    )


def timers_after(
    timers: Collection[str], event: ev.Event, effects: Sequence[fx.Effect]
) -> frozenset[str]:
    """The timers running after a step, as its effects leave ``timers`` (the expiry of a
    running one ends it; ``StartTimer`` and ``CancelTimer`` start and stop them): the
    adapter's view, kept apart from the machine's."""
    running = set(timers)
    if isinstance(event, ev.TimerExpired):
        running.discard(event.timer)
    for effect in effects:
        if isinstance(effect, fx.StartTimer):
            running.add(effect.timer)
        elif isinstance(effect, fx.CancelTimer):
            running.discard(effect.timer)
    return frozenset(running)


def _watched(policy: TurnPolicy, configuration: tuple[str, ...]) -> int:
    state = configuration[0]
    return int(
        (policy.max_call_duration is not None and state in LIVE_STATES)
        or (policy.idle_timeout is not None and state in CONVERSATION_STATES)
    )


def _path_to(
    seen: dict[Hashable, tuple[Hashable, ev.Event] | None], key: Hashable
) -> tuple[ev.Event, ...]:
    path: list[ev.Event] = []
    while (way_in := seen[key]) is not None:
        key, event = way_in
        path.append(event)
    return tuple(reversed(path))


def region_moves(
    before: tuple[str, ...],
    event: str,
    after: tuple[str, ...],
    machine_class: type[TurnChart] = TurnMachine,
) -> Iterator[tuple[str, str, str]]:
    """A step's moves: the state's, and each region's beside it on the events that region
    handles (a region's eventless moves, and its end with the call, belong to the turn's
    step). States are named as :attr:`~turnfsm.TurnController.state` reports them, as
    :func:`~turnfsm.machine.declared_moves` does."""
    yield public_state(before[0]), event, public_state(after[0])
    handled = handled_events(machine_class)
    for region, leaf in enumerate(before[1:], start=1):
        if event in handled[leaf]:
            moved = after[region] if region < len(after) else after[0]
            yield public_state(leaf), event, public_state(moved)


def _named(configuration: tuple[str, ...]) -> str:
    return " + ".join(configuration)


def _interned(
    kept: dict[tuple[Any, ...], tuple[Any, ...]], value: tuple[Any, ...]
) -> tuple[Any, ...]:
    """The tuple in ``kept`` equal to ``value``, or ``value``, now kept."""
    return kept.setdefault(value, value)


def _key(configuration: tuple[str, ...], snapshot: Hashable, shadow: Hashable) -> Hashable:
    """A configuration's identity: its states, its context's :meth:`~TurnContext.snapshot`
    and the monitor's :meth:`~turnfsm.invariants.SafetyMonitor.shadow`."""
    if configuration[0] == "ended":  # nothing is emitted after the end, whatever came before
        return configuration
    return configuration, snapshot, shadow
