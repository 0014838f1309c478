"""Hypothesis drives whole calls: random policies, the full event alphabet, real timers.

The test keeps a timer wheel from the ``StartTimer``/``CancelTimer`` effects and a
simulated clock; one rule advances the clock to the next due timer and delivers its
expiry. About 80 % of the events are drawn among those the current state handles
(the controller's pre-filter, built by introspection), the rest from the whole alphabet.

Every controller is strict: the safety monitor raises on any breach of I1–I8. On top,
after every step: the wheel matches the timers the configuration runs, a tool reply is
cancelled only as its step ends (where LiveKit can), nothing is emitted after ``ended``
and the input is released there; at teardown the recorded trace replays
to equal steps (determinism) and survives a JSONL round trip. (Checks run in the step,
not as ``@invariant`` methods, and rule arguments are drawn up front rather than through
``st.data()``: together a quarter of the run time.)
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable

import attrs
import pytest
from hypothesis import HealthCheck, seed, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    rule,
    run_state_machine_as_test,
)

from turnfsm import Trace, TurnController, TurnPolicy, replay
from turnfsm import effects as fx
from turnfsm import events as ev
from turnfsm.events import EVENT_TYPES
from turnfsm.machine import REGION_STATES, STATES, declared_moves, public_state
from turnfsm.policy import Seconds, option_of
from turnfsm.rules import TurnRules
from turnfsm.testing import drawn_values, region_moves

settings.register_profile(
    "turnfsm-core",
    # 2,000 calls: each move the coverage assertion asks for is taken at least 3 times
    # by the draws of each of seeds 0-7 (at 1,000 calls, with one rare move, those of 3
    # seeds in 7 took every move), so a change to the machine, which draws other calls,
    # does not fail it by chance
    max_examples=2_000,
    stateful_step_count=20,
    deadline=None,
    database=None,
    # `make test` draws the same calls every run (CORE_SEED), so its coverage assertions
    # are reproducible; `make test-deep` draws fresh calls
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "turnfsm-deep",
    settings.get_profile("turnfsm-core"),
    max_examples=10_000,
    stateful_step_count=40,
    derandomize=False,
)

SPEECH_IDS = ("s1", "s2", "s3")
ITEM_IDS = ("u1", "u2", "u3")
EVENT_NAMES = tuple(sorted(cls.name for cls in EVENT_TYPES))
CHOICE = st.integers(0, 1023)
"""A fixed-range choice, taken modulo the size of the pool it picks from."""
ELAPSED = st.sampled_from([0.0, 0.2, 0.5, 1.5])
"""Seconds that pass before an event."""
ENDING = frozenset({"call_ended", "session_error", "answering_machine_detected"})
"""Events that may end the call from any state: drawn rarely, or calls end too soon."""
DECLARED = frozenset(declared_moves())
"""Every (source, event, target) move the machine declares."""
CHANGES = frozenset(move for move in DECLARED if move[0] != move[2])
"""The declared moves that change the state."""
RARE_PHASES = frozenset(
    public_state(leaf) for region in ("tool_cap", "tool_reply") for leaf in REGION_STATES[region]
) - {"tools_open", "reply_free"} | frozenset(REGION_STATES["handoff"])
"""The cap's region past ``tools_open``, and a tool step's reply held: rare in random
calls (a step must end the last round of a drawn ``max_tool_steps``, a few times in 1 000
calls; the caller must barge into a tool step under a drawn hold, with the tools not
muting them); and the handoff's region, never left: no step drawn hands the call over
(its tests are test_transitions_unit's). The explorer reaches each
(tests/core/test_explorer.py)."""
ANY = tuple(name for name in EVENT_NAMES if name not in ENDING)
MODEL_EVENTS = frozenset(
    {
        "model_reply_started",
        "model_response_created",
        "model_response_done",
        "model_cancel_sent",
        "model_cancel_answered",
    }
)
"""What a realtime model reports: guided only once the call linked one."""
LINK = frozenset({"realtime_model_linked"})
"""Drawn with the call (a realtime model is linked when the adapter attaches)."""
TEXTS = ("", "Hello?", "wait, what?")


def option_values(option: attrs.Attribute) -> tuple[object, ...]:
    """What the calls draw for ``option``: what every test draws for it, weighed alike
    (:func:`turnfsm.testing.drawn_values`), then its default and no limit (where it may
    have none) if they are not among them."""
    drawn = drawn_values(option)
    check = option.validator
    no_limit = (None,) if isinstance(check, Seconds) and check.optional else ()
    return drawn + tuple(dict.fromkeys(v for v in (option.default, *no_limit) if v not in drawn))


OPTIONS = {
    option.name: st.sampled_from(option_values(option))
    for option in attrs.fields(TurnPolicy)
    if not option_of(option).shapes_the_call
}
"""Every option but the call's shape, drawn from its declared values: a new option is
drawn as soon as it is declared."""


@st.composite
def policies(draw: st.DrawFn) -> TurnPolicy:
    direction = draw(st.sampled_from(["inbound", "outbound"]))
    first_speaker = draw(st.sampled_from(["user", "agent"]))
    greeting_kind = draw(
        st.sampled_from(["text", "instructions"] + (["none"] if direction == "inbound" else []))
    )
    # no greeting text: the caller speaks first, or the agent greets in its own words
    return TurnPolicy(
        direction=direction,
        first_speaker=first_speaker,
        greeting="Hi, this is Ada." if greeting_kind == "text" else None,
        greeting_instructions="Introduce yourself" if greeting_kind == "instructions" else None,
        **{name: draw(values) for name, values in OPTIONS.items()},
    )


def _variants(**domains: tuple[object, ...]) -> tuple[dict[str, object], ...]:
    names = list(domains)
    return tuple(
        dict(zip(names, values, strict=True)) for values in itertools.product(*domains.values())
    )


SPEECH = {"speech_id": SPEECH_IDS}
VARIANTS: dict[str, tuple[dict[str, object], ...]] = {
    "call_ended": _variants(reason=("hangup", "room_closed")),
    "user_transcript": _variants(text=TEXTS, is_final=(False, True)),
    "user_turn_committed": _variants(text=TEXTS[1:3], item_id=ITEM_IDS),
    "user_turn_declined": _variants(
        reason=("rejected", "false_interruption"), prepared_speech_id=("", *SPEECH_IDS)
    ),
    "agent_speech_created": _variants(**SPEECH, source=("say", "reply", "tool_reply"))
    + _variants(**SPEECH, source=("say", "reply"), from_agent_code=(True,)),
    "agent_speech_started": _variants(**SPEECH),
    "agent_speech_ended": _variants(
        **SPEECH,
        interrupted=(False, True),
        # six lengths where a played text was (issue 21 took it out): as many variants, so
        # the fixed search of test_seeded_bugs still walks to the tool-cap bug
        played_seconds=(0.0, 0.4, 0.9, 1.6, 2.5, 4.0),
    ),
    "assistant_message_committed": _variants(
        item_id=("a1",), **SPEECH, text=TEXTS[1:2], interrupted=(False, True)
    ),
    "tool_step_started": _variants(**SPEECH, calls=(1, 3)),
    "tool_step_finished": _variants(**SPEECH, calls=(1, 3)),
    **{kind.name: _variants() for kind in ev.TIMER_EVENTS},
    "answering_machine_detected": _variants(result=("human", "machine")),
    "session_error": _variants(message=("boom",), recoverable=(True, False)),
    "outcome_breached": _variants(check=("O2", "O6", "O7")),
    "agent_speech_interrupted": _variants(**SPEECH),
    "realtime_model_linked": _variants(
        replies_to_turns=(False, True), replies_to_tool_output=(False, True)
    ),
    "model_reply_started": _variants(
        **SPEECH, after_tool_output=(False, True), duplicate=(False, True)
    ),
    "model_cancel_sent": _variants(cancel_id=("c1", "c2"), response_id=("", "r1")),
    "model_cancel_answered": _variants(cancel_id=("c1", "c2")),
    "effect_outcome": _variants(
        effect=("interrupt", "start_greeting", "say", "lock_speech"),
        outcome=("done", "refused", "failed"),
    ),
}
"""Each event type's fields, from small domains so that ids collide often: one draw
picks a whole event (a draw per field makes hypothesis several times slower)."""


class Totals:
    """What the runs covered, for the terminal summary."""

    examples = 0
    steps = 0
    timers_fired = 0
    stale_timers = 0
    ended: dict[str, int] = {}
    moves: Counter[tuple[str, str, str]] = Counter()
    picks: Counter[str] = Counter()


class TurnCalls(RuleBasedStateMachine):
    rules_class: type[TurnRules] = TurnRules
    """The rules under test (``test_seeded_bugs`` swaps in broken ones)."""

    def __init__(self) -> None:
        super().__init__()
        self.controller: TurnController | None = None
        self.now = 0.0
        self.wheel: dict[str, float] = {}
        """Running timers and when they are due, from the effects only."""
        self.cancelled: str | None = None
        self.muted = False
        """A ``MuteInput`` is in force, from the effects only."""
        self.held = False
        """A ``HoldUserTurns`` is in force, from the effects only."""

    @initialize(
        policy=policies(), model=st.sampled_from((None, *VARIANTS["realtime_model_linked"]))
    )
    def start_call(self, policy: TurnPolicy, model: dict[str, object] | None) -> None:
        self.controller = TurnController(
            policy, strict=True, keep_text=True, rules_class=self.rules_class
        )
        Totals.examples += 1
        if model is not None:  # a realtime model: the adapter reports it when it attaches
            self.deliver(ev.RealtimeModelLinked(at=0.0, **model))

    def deliver(self, event: ev.Event) -> tuple[fx.Effect, ...]:
        assert self.controller is not None
        before = self.controller.configuration
        effects = self.controller.handle(event)  # strict: raises InvariantViolation
        Totals.steps += 1
        Totals.moves.update(region_moves(before, event.name, self.controller.configuration))
        if before[0] == "ended":
            assert effects == (), f"{event} after the end emitted {effects}"
        for effect in effects:
            if isinstance(effect, fx.StartTimer):
                self.wheel[effect.timer] = self.now + effect.seconds
            elif isinstance(effect, fx.CancelTimer):
                del self.wheel[effect.timer]
                self.cancelled = effect.timer
            elif isinstance(effect, fx.MuteInput | fx.UnmuteInput):
                assert self.muted == isinstance(effect, fx.UnmuteInput), effect  # paired
                self.muted = isinstance(effect, fx.MuteInput)
            elif isinstance(effect, fx.HoldUserTurns | fx.ResumeUserTurns):
                assert self.held == isinstance(effect, fx.ResumeUserTurns), effect  # paired
                self.held = isinstance(effect, fx.HoldUserTurns)
            elif isinstance(effect, fx.CancelToolReply):
                # where its lever can act: LiveKit cancels a reply as the step's tools end
                assert isinstance(event, ev.ToolStepFinished), f"{effect} on {event.name}"
        assert set(self.wheel) == self.controller.running_timers, (
            "the effects and the running timers disagree"
        )
        if self.controller.is_ended:
            assert not self.muted
            assert not self.held
            if before[0] != "ended":  # the call ended on this event
                reason = next((e.reason for e in effects if isinstance(e, fx.EndCall)), "?")
                Totals.ended[reason] = Totals.ended.get(reason, 0) + 1
        return effects

    def due(self) -> float:
        return min(self.wheel.values(), default=float("inf"))

    @rule(pick=CHOICE, which=CHOICE, variant=CHOICE, elapsed=ELAPSED)
    def step(self, pick: int, which: int, variant: int, elapsed: float) -> None:
        """One step of the call: time passes and one event arrives.

        A single rule with weighted branches, since hypothesis picks among rules
        uniformly (a separate timer rule would spend half the steps firing timers).
        """
        assert self.controller is not None
        pick %= 40  # hypothesis favours 0: it is guided
        if pick == 17:  # 2.5 %: hang up, a fatal error, an answering machine
            Totals.picks["ending"] += 1
            pool = tuple(sorted(ENDING))
        elif pick in (18, 19):  # 5 %: nothing happens until the next timer is due
            Totals.picks["next timer"] += 1
            self.fire_next_timer()
            return
        elif pick >= 36:  # 10 %: any other event, handled here or not
            Totals.picks["any"] += 1
            pool = ANY
        else:  # 82.5 %: an event the current state handles
            Totals.picks["guided"] += 1
            handled = self.controller.handled_events - ENDING - LINK
            if "model_unlinked" in self.controller.configuration:
                # a pipeline call never hears from a realtime model (the `any` picks still
                # deliver such events at random, to be ignored or handled)
                handled -= MODEL_EVENTS
            pool = tuple(sorted(handled)) or ANY
        # fixed-range draws, taken modulo: a replayed or mutated choice stays valid
        name = pool[which % len(pool)]
        variants = VARIANTS.get(name, ({},))
        fields = variants[variant % len(variants)]
        active = sorted(self.controller.context.active_speeches)
        # the speech a guided event names: a declined turn's prepared reply, if it has one
        named = "speech_id" if "speech_id" in fields else "prepared_speech_id"
        if fields.get(named, "") != "" and active and pick < 36 and pick % 4 != 3:
            # a guided event about a speech mostly names one the machine knows (else
            # ending the only reply, the commonest move of a call, is a 1-in-3 draw)
            fields = {**fields, named: active[which % len(active)]}
        # time passes, but never beyond the next due timer: that would fire first
        self.now = max(self.now, min(self.now + elapsed, self.due()))
        expires = ev.EVENTS_BY_NAME[name]
        if issubclass(expires, ev.TimerExpired) and expires.timer in self.wheel:
            self.fire_next_timer()  # timers expire in order, when due
            return
        self.deliver(ev.EVENTS_BY_NAME[name](at=self.now, **fields))

    def fire_next_timer(self) -> None:
        """Advance the clock to the next due timer and deliver its expiry.

        With no timer running, deliver the late expiry of the last cancelled one (a
        race the adapter cannot always prevent): it must be ignored.
        """
        if not self.wheel:
            if self.cancelled is not None:
                Totals.stale_timers += 1
                self.deliver(ev.timer_expired(self.cancelled, at=self.now))
            return
        timer, due = min(self.wheel.items(), key=lambda item: item[1])
        self.now = max(self.now, due)
        del self.wheel[timer]
        Totals.timers_fired += 1
        self.deliver(ev.timer_expired(timer, at=self.now))

    def teardown(self) -> None:
        if self.controller is None:
            return
        trace = self.controller.trace
        assert trace is not None
        replayed = replay(trace, keep_text=True, rules_class=self.rules_class)
        assert replayed.steps == trace.steps, "replay diverged"
        assert Trace.parse(trace.to_jsonl().splitlines()) == trace


CORE_SEED = 0
"""The seed of the calls `make test` draws.

Without it a derandomized search seeds itself from the source of the state machine class
(comments aside), so rewording an assertion message in TurnCalls drew other calls and
could fail the coverage assertion below. The seed fixes the draws against edits to this file;
an edit to the machine still changes them, since the pools are drawn from its state.
"""


@seed(CORE_SEED)
def core_calls() -> TurnCalls:
    return TurnCalls()


def run(profile: str, summary_line: Callable[[str], None]) -> None:
    Totals.examples = Totals.steps = Totals.timers_fired = Totals.stale_timers = 0
    Totals.ended = {}
    Totals.moves = Counter()
    Totals.picks = Counter()
    profile_settings = settings.get_profile(profile)
    factory = core_calls if profile_settings.derandomize else TurnCalls
    run_state_machine_as_test(factory, settings=profile_settings)
    taken = DECLARED & set(Totals.moves)
    summary_line(
        f"hypothesis [{profile}]: {Totals.examples} calls, {Totals.steps} events "
        f"({Totals.timers_fired} timer expiries, {Totals.stale_timers} stale); "
        f"steps by kind {dict(sorted(Totals.picks.items()))}; "
        f"calls ended by {dict(sorted(Totals.ended.items()))}; "
        f"{len(taken)} of {len(DECLARED)} declared moves taken"
    )
    target = profile_settings.max_examples
    assert Totals.examples >= target, f"only {Totals.examples} examples of {target}"
    beside = {public_state(leaf) for leaves in REGION_STATES.values() for leaf in leaves}
    reached = {after for _, _, after in Totals.moves}
    assert reached <= {*STATES, *beside}
    # (no move enters the model's first state: a call starts there, and the link leaves it)
    assert {*STATES, *beside} - reached <= RARE_PHASES | {"model_unlinked"}
    # The guided strategy gets deep into calls: every state change short of the end is
    # taken. Each state's way to `ended` is rarer by design; the explorer covers those
    # exhaustively. The calls drawn are the same in any process and after any test
    # (CORE_SEED; tests/conftest.py keeps hypothesis from drawing the literals of the
    # modules imported before); an edit to the machine draws others. Four moves are left
    # to the explorer (tests/core/test_explorer.py takes every declared state change),
    # each a chain of draws that 2,000 calls take only a few times (1 to 16 across seeds
    # 0-7 for the last three):
    # - a declined turn's prepared reply as the last speech of a tool step whose own
    #   speech already ended (four guided draws in a row);
    # - the callee's final words greeted on their transcript (an outbound or user-first
    #   policy greeting on `final_transcript` on a pipeline, and a final transcript with
    #   words before the turn commits): not once in seed 0's calls after a walk of issue
    #   21 added one more event handled in `awaiting_user`;
    # - the greeting's end while a speech made during it is in flight;
    # - the caller speaking again after speaking over the greeting, once it ended.
    rare = {
        ("tool_loop", "user_turn_declined", "listening"),
        ("awaiting_user", "user_transcript", "greeting"),
        ("greeting", "agent_speech_ended", "speaking"),
        ("caller_spoke_over_greeting", "user_speech_started", "caller_speaking"),
    }
    changes = {
        (source, event, target)
        for source, event, target in CHANGES
        if target != "ended" and RARE_PHASES.isdisjoint({source, target})
    }
    missing = changes - taken - rare
    assert not missing, f"never taken: {sorted(missing)}"


def test_random_calls_keep_every_invariant(summary_line: Callable[[str], None]) -> None:
    run("turnfsm-core", summary_line)


@pytest.mark.deep
def test_random_calls_keep_every_invariant_deep(summary_line: Callable[[str], None]) -> None:
    run("turnfsm-deep", summary_line)
