"""The compiled engine against python-statemachine's own: what :mod:`turnfsm.engine` saves.

The turn chart runs on both engines (``TurnController(..., engine=...)``), driven the
same way: whole scripted calls through fresh controllers (what a live call pays), and
the explorer's inner loop (restore a configuration, feed it one event) over the
configurations of that call and every event of the explorer's alphabet (what the test
suite pays). Figures are ratios to the reference engine, paired per round.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from turnfsm import TurnController
from turnfsm.context import TurnContext
from turnfsm.engine import ENGINES, EngineName
from turnfsm.testing import event_alphabet

from .callscript import POLICY, scripted_call
from .harness import Config, Row, Section, gc_paused, ratio, rounds_of

EXPLORED_CONFIGURATIONS = 12
"""The scripted call's first distinct configurations the explorer loop is timed on."""


def _configurations() -> list[tuple[str, TurnContext]]:
    """The first distinct (state, context) pairs the scripted call passes through."""
    controller = TurnController(POLICY, record=False)
    seen: dict[tuple[Any, ...], tuple[str, TurnContext]] = {}
    for event in scripted_call():
        state, context = controller.snapshot()
        seen.setdefault((state, context.snapshot()), (state, context))
        controller.handle(event)
    return list(seen.values())[:EXPLORED_CONFIGURATIONS]


def engines(config: Config) -> Section:
    script = scripted_call()
    configurations = _configurations()
    alphabet = event_alphabet()
    calls = config.scaled(2)

    def whole_calls(engine: EngineName) -> Callable[[], float]:
        def case() -> float:
            controllers = [TurnController(POLICY, engine=engine) for _ in range(calls)]
            with gc_paused():
                start = time.process_time()
                for controller in controllers:
                    for event in script:
                        controller.handle(event)
                elapsed = time.process_time() - start
            return elapsed / (calls * len(script)) * 1e6

        return case

    def explorer_loop(engine: EngineName) -> Callable[[], float]:
        controller = TurnController(POLICY, record=False, engine=engine)

        def case() -> float:
            with gc_paused():
                start = time.process_time()
                for state, context in configurations:
                    for event in alphabet:
                        controller.restore(state, context)
                        controller.handle(event)
                elapsed = time.process_time() - start
            return elapsed / (len(configurations) * len(alphabet)) * 1e6

        return case

    cases = {
        f"{kind}: {engine}": build(engine)
        for kind, build in (("whole call", whole_calls), ("explorer step", explorer_loop))
        for engine in ENGINES
    }
    samples = rounds_of(cases, config)
    rows = {case: Row(case, values, "µs/event") for case, values in samples.items()}
    for kind in ("whole call", "explorer step"):
        reference = rows[f"{kind}: reference"]
        for engine in ENGINES:
            row = rows[f"{kind}: {engine}"]
            row.ratios = f"{ratio(row.times(reference))} reference"
    return Section(
        "Engine: compiled tables vs python-statemachine's own",
        list(rows.values()),
        [
            f"Engine: the turn chart on turnfsm.engine's compiled tables (compiled, the "
            f"default) and on python-statemachine's SyncEngine (reference). Whole call: "
            f"the {len(script)} events "
            f"of the scripted call (handled and ignored), record=True, {calls} fresh "
            f"controllers per round. Explorer step: restore() then handle() for each of the "
            f"call's first {len(configurations)} configurations x {len(alphabet)} alphabet events "
            "(the explorer itself also skips restore()'s checks: not measured here).",
        ],
    )


SECTIONS = [engines]
"""Run by ``python -m benchmarks`` after the core sections."""
