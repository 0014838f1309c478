"""``turnfsm check``: prove a policy, and optionally your own rules or machine, safe.

Two searches, both strict (every step checked against the invariants I1–I8):

* the exhaustive explorer (:func:`turnfsm.testing.explore`): every configuration
  reachable with the finite event alphabet; a breach comes with a shortest event path;
* random calls (hypothesis, when installed: ``pip install turnfsm[check]`` or the test
  dependencies): long event sequences drawn from the same alphabet, shrunk to a minimal
  failing call. Without hypothesis the explorer alone runs, and the report says so.

Pure like the rest of :mod:`turnfsm`: the command line (``cli.py``) reads the policy file
and imports the user's classes, then calls :func:`run_check` and prints
:func:`format_check`.

>>> from turnfsm import TurnPolicy
>>> report = run_check(TurnPolicy(greeting="Hi", max_tool_steps=1), random_calls=0)
>>> report.ok, report.exploration.states >= {"greeting", "listening"}
(True, True)
"""

from __future__ import annotations

from collections.abc import Sequence
from random import Random

import attrs

from .. import events as ev
from ..controller import TurnController
from ..invariants import InvariantViolation
from ..machine import TurnChart, TurnMachine, declared_moves
from ..policy import TurnPolicy
from ..rules import TurnRules
from ..testing import ExplorationReport, event_alphabet, explore

_ENDINGS = frozenset({"call_ended", "session_error", "answering_machine_detected"})
"""Events that end the call from any state: drawn only among any events, or calls end
before they get anywhere."""


@attrs.frozen
class RandomCalls:
    """What the random calls covered and the first breach, shrunk."""

    calls: int
    """Calls run (hypothesis examples)."""
    violation: str | None = None
    """The breach of the minimal failing call, if any."""
    path: tuple[ev.Event, ...] = ()
    """The minimal failing call's events."""


@attrs.frozen
class CheckReport:
    """The result of :func:`run_check`."""

    policy: TurnPolicy
    exploration: ExplorationReport
    declared: int
    """Declared (state, event, target) moves of the machine checked."""
    random: RandomCalls | None
    """``None`` when hypothesis is not installed or no random calls were asked for."""

    @property
    def ok(self) -> bool:
        """No breach in either search."""
        return not self.exploration.violations and (
            self.random is None or self.random.violation is None
        )


def run_check(
    policy: TurnPolicy,
    *,
    machine_class: type[TurnChart] = TurnMachine,
    rules_class: type[TurnRules] = TurnRules,
    random_calls: int = 300,
    max_configurations: int = 200_000,
    extra_events: Sequence[ev.Event] = (),
) -> CheckReport:
    """Explore ``policy`` exhaustively, then run ``random_calls`` random calls.

    ``extra_events`` are the events an extension adds (instances, e.g. one per variant),
    fed to both searches with the standard alphabet.

    Raises:
        RuntimeError: the explorer found more than ``max_configurations`` configurations
            (a rule that counts without bound).
    """
    exploration = explore(
        policy,
        machine_class=machine_class,
        rules_class=rules_class,
        max_configurations=max_configurations,
        extra_events=extra_events,
    )
    alphabet = (*event_alphabet(), *extra_events)
    random = (
        _random_calls(policy, machine_class, rules_class, alphabet, random_calls)
        if random_calls
        else None
    )
    return CheckReport(
        policy=policy,
        exploration=exploration,
        declared=len(declared_moves(machine_class)),
        random=random,
    )


def _random_calls(
    policy: TurnPolicy,
    machine_class: type[TurnChart],
    rules_class: type[TurnRules],
    alphabet: tuple[ev.Event, ...],
    calls: int,
) -> RandomCalls | None:
    try:
        from hypothesis import HealthCheck, given, settings
        from hypothesis import strategies as st
    except ImportError:
        return None
    failures: list[tuple[str, tuple[ev.Event, ...]]] = []
    runs = [0]

    @settings(
        max_examples=calls,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.randoms(use_true_random=False), st.integers(1, 40))
    def one_call(random: Random, length: int) -> None:
        """Four events in five are ones the current state handles, hang-ups aside (guided:
        hypothesis calls are short), the fifth any event of the alphabet."""
        runs[0] += 1
        controller = TurnController(
            policy, strict=True, record=False, machine_class=machine_class, rules_class=rules_class
        )
        path: list[ev.Event] = []
        for _ in range(length):
            guided = [
                e
                for e in alphabet
                if e.name in controller.handled_events and e.name not in _ENDINGS
            ]
            pool = guided if random.random() < 0.8 and guided else alphabet
            path.append(random.choice(pool))
            try:
                controller.handle(path[-1])
            except InvariantViolation as breach:
                # hypothesis shrinks: the last failure recorded is the minimal one
                failures.append((str(breach), tuple(path)))
                raise

    try:
        one_call()
    except InvariantViolation:
        message, path = failures[-1]
        return RandomCalls(calls=runs[0], violation=message, path=path)
    return RandomCalls(calls=runs[0])


def format_check(report: CheckReport) -> str:
    """The report as text: coverage, then each breach with its event path."""
    exploration = report.exploration
    taken = len({move for move in exploration.transitions if move[0] != "ended"})
    lines = [
        f"explored {exploration.configurations} configurations, {exploration.steps} checked "
        f"steps; states reached: {', '.join(sorted(exploration.states))}",
        f"moves taken: {taken} (the machine declares {report.declared})",
        f"engines compared (E1): {exploration.engine_checks} steps also run on "
        "python-statemachine's engine, one per distinct decisions",
    ]
    if report.random is None:
        lines.append("random calls: skipped (hypothesis not installed, or none asked for)")
    else:
        lines.append(f"random calls: {report.random.calls}")
    for violation, path in zip(exploration.violations, exploration.paths, strict=True):
        lines += [f"VIOLATION {violation}", *_steps(path)]
    if report.random is not None and report.random.violation is not None:
        lines += [
            f"VIOLATION (random call) {report.random.violation}",
            *_steps(report.random.path),
        ]
    lines.append("ok: no invariant broken" if report.ok else "FAILED")
    return "\n".join(lines)


def _steps(path: tuple[ev.Event, ...]) -> list[str]:
    return [f"  {number}. {event!r}" for number, event in enumerate(path, start=1)]
