"""The core's costs: dispatch, ignored events, construction and memory, strict mode.

Targets (GitHub issue 23, "an engine near the floor"): a handled event costs at most
20 µs through the controller (compiled engine, the default), an event the state does
not handle at most 2 µs, and a controller at most 0.3 ms and 50 KiB to build. The
reference engine (python-statemachine's own, ``engine="reference"``), a bare
python-statemachine ``send()``, ``transitions`` and a dict table stand beside them.
"""

from __future__ import annotations

import gc
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

from turnfsm import TurnController, TurnMachine
from turnfsm.controller import initial_state
from turnfsm.machine import leaf_states
from turnfsm.reach import reach
from turnfsm.rules import TurnRules
from turnfsm.testing import event_alphabet, fresh_context

from .callscript import POLICY, dispatch_steps, scripted_call
from .equivalents import TransitionsTurnMachine, check_equivalent, dict_table
from .harness import Config, Row, Section, gc_paused, ratio, rounds_of, verdict

HANDLED_TARGET_US = 20.0
"""A handled event through the controller, in µs."""
IGNORED_TARGET_US = 2.0
"""An ignored event through the controller, in µs."""
CONSTRUCTION_TARGET_US = 300.0
MEMORY_TARGET_KIB = 50.0
"""A controller's construction: time and memory."""

START = initial_state(POLICY)


def bare_machine(state: str = START) -> tuple[TurnMachine, list]:
    """A TurnMachine with the rules listener, as the controller builds it, and its outbox."""
    rules = TurnRules(policy=POLICY)
    machine = TurnMachine(start_value=state, listeners=[rules])
    rules.outbox.clear()  # the start state's enter actions are not part of a step
    return machine, rules.outbox


def _per_event(run: Callable[[], None], events: int) -> float:
    """Time ``run`` with the collector paused; µs of this process's CPU per event (what a
    step costs, whatever else the machine runs: a wall clock also counts the time the
    process waits for a core, which on a shared machine is most of a microsecond step)."""
    with gc_paused():
        start = time.process_time()
        run()
        elapsed = time.process_time() - start
    return elapsed / events * 1e6


def _whole_call_case(events: list, passes: int, **options: Any) -> Callable[[], float]:
    """A case: ``passes`` fresh controllers each handle ``events``; µs per event."""

    def case() -> float:
        controllers = [TurnController(POLICY, **options) for _ in range(passes)]

        def run() -> None:
            for c in controllers:
                handle = c.handle
                for event in events:
                    handle(event)

        return _per_event(run, passes * len(events))

    return case


# -- 1. dispatch -------------------------------------------------------------------------


def dispatch(config: Config) -> Section:
    steps = dispatch_steps()
    check_equivalent(steps, START)
    events = [step.event for step in steps]
    sends = [(step.event.name, step.event) for step in steps]
    triggers = [(step.event.name, step.branch) for step in steps]
    passes = config.scaled(5)
    total = passes * len(steps)

    def controller(**options: Any) -> Callable[[], float]:
        return _whole_call_case(events, passes, **options)

    def psm() -> float:
        machines = [bare_machine() for _ in range(passes)]

        def run() -> None:
            for machine, outbox in machines:
                send = machine.send
                for name, event in sends:
                    send(name, ev=event)
                    outbox.clear()

        return _per_event(run, total)

    def transitions() -> float:
        models = [TransitionsTurnMachine(START).model for _ in range(passes)]

        def run() -> None:
            for model in models:
                trigger = model.trigger
                for name, branch in triggers:
                    trigger(name, branch=branch)

        return _per_event(run, total)

    table = dict_table()

    def floor() -> float:
        def run() -> None:
            for _ in range(passes):
                state = START
                for name, branch in triggers:
                    state = table[state, name, branch]

        return _per_event(run, total)

    names = {
        "record": "TurnController.handle (record=True, default)",
        "norecord": "TurnController.handle (record=False)",
        "reference": 'TurnController.handle, engine="reference" (record=True)',
        "psm": "python-statemachine send(), same machine + rules",
        "transitions": "transitions 0.9.3, equivalent machine, no-op callbacks",
        "dict": "dict table {(state, event): next} (floor)",
    }
    samples = rounds_of(
        {
            names["record"]: controller(record=True),
            names["norecord"]: controller(record=False),
            names["reference"]: controller(record=True, engine="reference"),
            names["psm"]: psm,
            names["transitions"]: transitions,
            names["dict"]: floor,
        },
        config,
    )
    rows = {key: Row(names[key], samples[names[key]], "µs/event") for key in names}
    for key, row in rows.items():
        parts = [f"{ratio(row.times(rows['psm']))} psm"]
        if key != "dict":
            parts.append(f"{ratio(row.times(rows['dict']))} dict")
        if key == "psm":
            parts.append(f"{ratio(row.times(rows['transitions']))} transitions")
        row.ratios = ", ".join(parts)
    for key in ("record", "norecord"):
        median = rows[key].median
        rows[key].target = verdict(
            median <= HANDLED_TARGET_US,
            f"≤ {HANDLED_TARGET_US:g} µs; {median - HANDLED_TARGET_US:+.1f} µs",
        )
    added = {key: rows[key].minus(rows["dict"]) for key in ("record", "norecord")}
    return Section(
        "Dispatch, handled events of a call",
        list(rows.values()),
        [
            f"Dispatch: the {len(steps)} handled events of a {len(scripted_call())}-event "
            f"outbound call (answer, hello, locked greeting, 4 turns, a 2-round tool loop, "
            f"an idle re-prompt, a barge-in, hang-up), {passes} calls per round, each on a "
            f"fresh instance. The controller (compiled engine) adds {added['record']:+.1f} "
            f"µs/event with record=True, {added['norecord']:+.1f} µs/event without, over "
            "the dict table. "
            "transitions and the dict table make the same moves (checked), the branch each "
            "guard chose given to them (transitions: oracle conditions; dict: part of the key).",
        ],
    )


# -- 2. ignored events -------------------------------------------------------------------


def ignored_pairs() -> list[tuple[str, object]]:
    """(state, event) for every alphabet event a non-final state the policy reaches (the
    caller silent, if live) has no transition for."""
    final = {state.id for state in TurnMachine.states if state.final}
    reached = reach(POLICY).states  # phases too: not every phase of a reached state is
    pairs: list[tuple[str, object]] = []
    for leaf in leaf_states(TurnMachine):  # each of the greeting's phases too
        state = leaf.id
        if state in final or state not in reached:
            continue
        if any(t.is_eventless for t in leaf.transitions):  # left in the step that enters it
            continue
        controller = TurnController(POLICY, record=False)
        controller.restore(state, fresh_context(state, POLICY))
        handled = controller.handled_events
        pairs += [(state, event) for event in event_alphabet() if event.name not in handled]
    return pairs


def ignored(config: Config) -> Section:
    pairs = ignored_pairs()
    states = sorted({state for state, _ in pairs})
    loops = config.scaled(15)
    total = loops * len(pairs)

    def controller(**options: Any) -> Callable[[], float]:
        def case() -> float:
            by_state = {}
            for state in states:
                c = TurnController(POLICY, **options)
                c.restore(state, fresh_context(state, POLICY))
                by_state[state] = c.handle
            work = [(by_state[state], event) for state, event in pairs]

            def run() -> None:
                for _ in range(loops):
                    for handle, event in work:
                        handle(event)

            return _per_event(run, total)

        return case

    def psm() -> float:
        machines = {state: bare_machine(state)[0].send for state in states}
        work = [(machines[state], event.name, event) for state, event in pairs]

        def run() -> None:
            for _ in range(loops):
                for send, name, event in work:
                    send(name, ev=event)

        return _per_event(run, total)

    names = {
        "record": "TurnController.handle (record=True, default)",
        "norecord": "TurnController.handle (record=False)",
        "psm": "python-statemachine send(), no transition in state",
    }
    samples = rounds_of(
        {
            names["record"]: controller(record=True),
            names["norecord"]: controller(record=False),
            names["psm"]: psm,
        },
        config,
    )
    rows = {key: Row(names[key], samples[names[key]], "µs/event") for key in names}
    for key, row in rows.items():
        row.ratios = f"{ratio(row.times(rows['psm']))} psm"
        if key != "psm":
            row.target = verdict(
                row.median <= IGNORED_TARGET_US,
                f"≤ {IGNORED_TARGET_US:g} µs; {row.median - IGNORED_TARGET_US:+.2f} µs",
            )
    script = scripted_call()
    steps = dispatch_steps()
    return Section(
        "Ignored events (no transition in state)",
        list(rows.values()),
        [
            f"Ignored: {len(pairs)} (state, event) pairs, every event of testing.event_alphabet "
            f"a non-final state has no transition for ({', '.join(states)}); e.g. "
            f"user_transcript and agent_speech_started everywhere, call_ringing outside "
            f"ringing. The controller drops them before the engine; with record=True it "
            f"still traces the step (transcript text redacted). In the scripted call "
            f"{len(script) - len(steps)} of {len(script)} events are of this kind.",
        ],
    )


# -- 3. construction and memory ----------------------------------------------------------

MEMORY_INSTANCES = 200


def _build_transitions() -> object:
    return TransitionsTurnMachine(START)


BARE = "bare TurnMachine + TurnRules listener"
CONTROLLER = "TurnController(policy), record=True"
BUILDERS: dict[str, Callable[[], object]] = {
    CONTROLLER: lambda: TurnController(POLICY),
    'TurnController(policy, engine="reference")': lambda: TurnController(
        POLICY, engine="reference"
    ),
    BARE: lambda: bare_machine()[0],
    "transitions 0.9.3 equivalent Machine": _build_transitions,
}


def _bytes_per_instance(build: Callable[[], object], count: int) -> float:
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = [build() for _ in range(count)]
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    del kept
    return (after - before) / count


def construction(config: Config) -> Section:
    for build in BUILDERS.values():
        build()  # class-level caches are filled once per process, not per call
    count = config.scaled(15)

    def timing(build: Callable[[], object]) -> Callable[[], float]:
        def case() -> float:
            with gc_paused():
                start = time.perf_counter()
                kept = [build() for _ in range(count)]
                elapsed = time.perf_counter() - start
            del kept
            return elapsed / count * 1e6

        return case

    memory_config = Config(rounds=min(config.rounds, 2), quick=config.quick)
    instances = config.scaled(MEMORY_INSTANCES)
    times = rounds_of({name: timing(build) for name, build in BUILDERS.items()}, config)
    sizes = rounds_of(
        {
            name: (lambda build=build: _bytes_per_instance(build, instances) / 1024)
            for name, build in BUILDERS.items()
        },
        memory_config,
        warm_up=False,  # deterministic, and the builders were warmed above
    )
    rows = []
    for kind, samples, unit in (("construct", times, "µs"), ("memory", sizes, "KiB")):
        group = {name: Row(f"{kind}: {name}", samples[name], unit) for name in BUILDERS}
        for row in group.values():
            row.ratios = f"{ratio(row.times(group[BARE]))} bare"
        limit = CONSTRUCTION_TARGET_US if kind == "construct" else MEMORY_TARGET_KIB
        controller = group[CONTROLLER]
        controller.target = verdict(
            controller.median <= limit,
            f"≤ {limit:g} {unit}; {controller.median - limit:+.1f} {unit}",
        )
        rows.extend(group.values())
    return Section(
        "Construction time and memory per instance",
        rows,
        [
            f"Construction: {count} instances per round, timed; memory is what tracemalloc "
            f"sees retained by {instances} live instances, per instance, over "
            f"{memory_config.rounds} rounds (class-level caches warmed first).",
        ],
    )


# -- 4. strict mode ----------------------------------------------------------------------


def strict(config: Config) -> Section:
    script = scripted_call()
    passes = config.scaled(5)

    def controller(**options: bool) -> Callable[[], float]:
        return _whole_call_case(script, passes, **options)

    off, on = "whole call, strict=False (default)", "whole call, strict=True (SafetyMonitor)"
    samples = rounds_of({off: controller(strict=False), on: controller(strict=True)}, config)
    rows = [Row(off, samples[off], "µs/event"), Row(on, samples[on], "µs/event")]
    rows[0].ratios = "1.00× strict=False"
    rows[1].ratios = f"{ratio(rows[1].times(rows[0]))} strict=False"
    per_call_ms = rows[1].median * len(script) / 1000  # absolute: load shows here
    return Section(
        "Strict mode (SafetyMonitor on)",
        rows,
        [
            f"Strict: all {len(script)} events of the scripted call (handled and ignored), "
            f"record=True, {passes} calls per round on fresh controllers; the monitor adds "
            f"{rows[1].minus(rows[0]):+.1f} µs/event "
            f"({per_call_ms:.1f} ms for the whole call with it on).",
        ],
    )


SECTIONS = [dispatch, ignored, construction, strict]
"""Run in this order by ``python -m benchmarks``."""
