"""The exhaustive explorer: every reachable configuration, every event, every invariant.

``make test`` explores five policies that together take every value of direction,
first_speaker, greeting_lock, greeting_overlap, interrupted_text and
mute_input_during_tools (and every timer and ending option), and one outbound call on a
realtime model (its own replies, responses and their waits: ``explore(realtime=True)``);
``make test-deep`` explores
the product of the binary options (32 policies), and the CLI's presets in full. Policies
are explored in parallel, one process per core (per core each pytest-xdist worker has).

Every exploration also checks the watchdogs (``turnfsm.testing.WATCHDOGS``) in every
configuration it reaches: every quick policy sets ``max_call_duration`` (W1, which adds
no configuration: the timer runs from the answer to the end), two set ``idle_timeout``
(W2); the presets set both.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor

import pytest

from turnfsm import TurnPolicy
from turnfsm.machine import (
    STATES,
    atomic_states,
    declared_moves,
    leaf_transitions,
    public_state,
    transition_key,
)
from turnfsm.reach import reach
from turnfsm.testing import ExplorationReport, explore
from turnfsm.tools.cli import PRESETS
from turnfsm.tools.diagram import build_diagram, declared_transitions, transition_edge

from support.cores import cores_for_one_test

QUICK: dict[str, TurnPolicy] = {  # the costliest first: two processes share the work
    "outbound-user-keep-answer": TurnPolicy(
        direction="outbound",
        first_speaker="user",
        greeting="Hi, this is Ada.",
        greeting_lock="keep_listening",
        greeting_overlap="answer_whole",
        interrupted_text="spoken",
        mute_input_during_tools=False,
        tool_reply_hold=None,  # the hold, on by default, is explored where it costs less
        idle_timeout=5,
        idle_max_reprompts=1,
        max_call_duration=60,
        max_tool_steps=1,
    ),
    "inbound-user-keep-drop": TurnPolicy(
        direction="inbound",
        first_speaker="user",
        greeting="Hi there.",
        greeting_lock="keep_listening",
        greeting_overlap="drop",
        interrupted_text="spoken",
        mute_input_during_tools=True,
        on_await_user_timeout="hang_up",
        max_call_duration=60,
        max_tool_steps=1,
    ),
    "outbound-agent-mute-drop": TurnPolicy(
        direction="outbound",
        first_speaker="agent",
        greeting_instructions="Introduce yourself",
        greeting_lock="mute_input",
        greeting_overlap="drop",
        interrupted_text="drop",
        mute_input_during_tools=True,
        max_call_duration=60,
        max_tool_steps=1,
    ),
    "inbound-agent-mute-answer": TurnPolicy(
        direction="inbound",
        first_speaker="agent",
        greeting="Thanks for calling.",
        greeting_lock="mute_input",
        greeting_overlap="answer_whole",
        interrupted_text="keep",
        mute_input_during_tools=False,
        tool_reply_hold=None,
        on_answering_machine="continue",
        max_call_duration=60,
        max_tool_steps=3,
    ),
    "inbound-user-no-greeting": TurnPolicy(  # the only way into listening at the start
        direction="inbound",
        first_speaker="user",
        interrupted_text="keep",  # the hold of a tool step's reply (on by default) explored
        idle_timeout=5,
        idle_max_reprompts=1,
        max_call_duration=60,
        max_tool_steps=1,
    ),
    "inbound-agent-own-words": TurnPolicy(  # the agent's first speech is the greeting
        direction="inbound",
        first_speaker="agent",
        greeting_lock="keep_listening",
        greeting_overlap="answer_whole",
        tool_reply_hold=None,
        max_call_duration=60,
        max_tool_steps=1,
    ),
}

REALTIME: dict[str, TurnPolicy] = {
    "realtime-outbound-keep-answer": TurnPolicy(
        direction="outbound", greeting="Hi, this is Ada.", max_tool_steps=1
    ),
    "realtime-inbound-own-words": TurnPolicy(greeting_lock="mute_input", max_tool_steps=1),
}
"""Explored from a realtime model's link (each of ``testing.REALTIME_LINKS``)."""

OPTIONS = {
    "direction": ("inbound", "outbound"),
    "first_speaker": ("user", "agent"),
    "greeting_lock": ("mute_input", "keep_listening"),
    "greeting_overlap": ("drop", "answer_whole"),
    "interrupted_text": ("spoken", "drop", "keep"),
    "mute_input_during_tools": (False, True),
}


def deep_policies() -> Iterator[TurnPolicy]:
    """The product of the binary options; interrupted_text takes each value in turn."""
    binary = [name for name, values in OPTIONS.items() if len(values) == 2]
    for number, values in enumerate(itertools.product(*(OPTIONS[name] for name in binary))):
        texts = OPTIONS["interrupted_text"]
        options = dict(zip(binary, values, strict=True))
        yield TurnPolicy(greeting="Hi", interrupted_text=texts[number % len(texts)], **options)


DECLARED = declared_moves()
DECLARED_KEYS = {transition_edge(t): transition_key(t) for t, _ in declared_transitions()}
"""Each diagram edge's declared transition."""
STATE_CHANGES = {move for move in DECLARED if move[0] != move[2]}


def _timed_explore(policy: TurnPolicy, realtime: bool = False) -> tuple[ExplorationReport, float]:
    start = time.perf_counter()
    report = explore(policy, realtime=realtime)
    return report, time.perf_counter() - start


def explore_all(
    policies: list[TurnPolicy], realtime: list[bool] | None = None
) -> list[tuple[ExplorationReport, float]]:
    workers = min(len(policies), cores_for_one_test(), 2)
    with ProcessPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(_timed_explore, policies, realtime or [False] * len(policies)))


def expected_states(policy: TurnPolicy) -> set[str]:
    states = set(STATES)
    states.discard("ringing" if policy.direction == "inbound" else "start")
    if policy.first_speaker == "agent":
        states.discard("awaiting_user")
    if not policy.greets_in_own_words:
        states.discard("awaiting_agent")
    if not policy.has_greeting and not policy.greets_in_own_words:
        states -= {"awaiting_user", "greeting"}
    return states


def check(policy: TurnPolicy, report: ExplorationReport) -> None:
    assert report.violations == []  # no invariant, watchdog (W1, W2) nor engine (E1) breach
    # both engines compared, once per distinct decisions (each stands for many steps: at
    # least 31 in realtime-outbound-keep-answer, whose configurations name what the model
    # answers on its own besides its activity, 7,784 checks for 241,706 steps)
    assert 0 < report.engine_checks < report.steps / 25
    assert report.states == expected_states(policy)
    assert report.configurations > 100
    if policy.max_call_duration is not None:  # every live configuration is watched
        assert report.watched > report.configurations / 2
    undeclared = {move for move in report.transitions if move[0] != move[2]} - DECLARED
    assert not undeclared, f"state changes the machine does not declare: {undeclared}"


@pytest.fixture(scope="module")
def quick_reports(summary_line: Callable[[str], None]) -> dict[str, ExplorationReport]:
    start = time.perf_counter()
    cases = {**QUICK, **REALTIME}
    results = explore_all(list(cases.values()), [name in REALTIME for name in cases])
    for name, (report, seconds) in zip(cases, results, strict=True):
        summary_line(
            f"explore {name}: {report.configurations} configurations, {report.steps} "
            f"checked steps, {len(report.transitions)} moves, "
            f"{len(report.violations)} violations ({seconds:.1f} s)"
        )
    summary_line(f"explore: {len(cases)} policies in {time.perf_counter() - start:.1f} s")
    return {name: report for name, (report, _) in zip(cases, results, strict=True)}


def test_quick_policies_cover_every_option_value() -> None:
    for option, values in OPTIONS.items():
        assert {getattr(policy, option) for policy in QUICK.values()} == set(values), option
    policies = QUICK.values()
    assert {p.on_await_user_timeout for p in policies} == {"greet", "hang_up"}
    assert {p.on_answering_machine for p in policies} == {"hang_up", "continue"}
    assert sum(1 for p in policies if p.idle_timeout) == 2  # W2 checked in two
    assert all(p.max_call_duration for p in policies)  # W1 checked in every one


@pytest.mark.parametrize("name", [*QUICK, *REALTIME])
def test_explore_finds_no_violation(
    name: str, quick_reports: dict[str, ExplorationReport]
) -> None:
    check({**QUICK, **REALTIME}[name], quick_reports[name])


def test_explore_takes_every_realtime_wait(quick_reports: dict[str, ExplorationReport]) -> None:
    """The realtime exploration reaches each wait and each way out of it."""
    moves = {
        (event, before)
        for before, event, _ in quick_reports["realtime-outbound-keep-answer"].transitions
    }
    for event in (
        "model_reply_started",
        "model_response_done",
        "model_response_created",
        "model_cancel_sent",
        "model_cancel_answered",
    ):
        assert {(event, "greeting"), (event, "speaking")} <= moves, event
    assert ("response_done_timer_expired", "greeting") in moves


NO_POLICY_REACHES = {
    ("start", "answering_machine_detected", "ended"),
    ("awaiting_agent", "answering_machine_detected", "ended"),
}
"""Declared state changes no policy can take: answering-machine detection ends outbound
calls only, and these states are inbound ones."""


def reachable_moves(policy: TurnPolicy) -> set[tuple[str, str, str]]:
    """The declared moves (:func:`declared_moves`) of the transitions ``policy`` can fire
    (:func:`turnfsm.reach.reach`), from the states it reaches."""
    reached = reach(policy)
    fires = {id(transition) for transition in reached.transitions}
    return {
        (public_state(state.id), str(event), public_state((transition.target or state).id))
        for state in atomic_states()
        if state.id in reached.states
        for transition in leaf_transitions(state)
        if id(transition) in fires
        for event in transition.events
    }


def test_explore_takes_every_declared_state_change(
    quick_reports: dict[str, ExplorationReport],
) -> None:
    taken = set().union(*(report.transitions for report in quick_reports.values()))
    assert not STATE_CHANGES - NO_POLICY_REACHES - taken, sorted(STATE_CHANGES - taken)
    policies = {**QUICK, **REALTIME}.values()
    reachable = set().union(*(reachable_moves(policy) for policy in policies))
    assert STATE_CHANGES - reachable == NO_POLICY_REACHES


@pytest.mark.parametrize("name", [*QUICK, *REALTIME])
def test_a_policys_diagram_draws_every_transition_its_calls_take(
    name: str, quick_reports: dict[str, ExplorationReport]
) -> None:
    """A policy's diagram leaves out only transitions no call under it takes: every
    transition the exploration fired is drawn (issue 21, point 6). The diagram may
    still draw more than the exploration fires (the static pruning reads the policy,
    not the context), never less."""
    policy = {**QUICK, **REALTIME}[name]
    drawn = {DECLARED_KEYS[edge] for edge in build_diagram(policy=policy).edges}
    fired = quick_reports[name].fired
    assert len(fired) > 25
    assert not fired - drawn, sorted(fired - drawn)


@pytest.mark.deep
def test_explore_every_binary_option_combination(summary_line: Callable[[str], None]) -> None:
    policies = list(deep_policies())
    assert len(policies) == 32
    start = time.perf_counter()
    results = explore_all(policies)
    for policy, (report, _) in zip(policies, results, strict=True):
        check(policy, report)
    configurations = sum(report.configurations for report, _ in results)
    steps = sum(report.steps for report, _ in results)
    summary_line(
        f"explore deep: {len(policies)} policies, {configurations} configurations, "
        f"{steps} checked steps, 0 violations ({time.perf_counter() - start:.0f} s)"
    )


@pytest.mark.deep
def test_watchdogs_hold_in_every_reachable_configuration_of_every_preset(
    summary_line: Callable[[str], None],
) -> None:
    """The CLI's presets turn every timer on: in every configuration they reach, the
    maximum duration ends the call and the idle timer runs, or comes back once what the
    machine waits for ended (W1, W2)."""
    start = time.perf_counter()
    results = explore_all(list(PRESETS.values()))
    for (name, policy), (report, _) in zip(PRESETS.items(), results, strict=True):
        assert policy.idle_timeout is not None
        assert policy.max_call_duration is not None
        check(policy, report)
        summary_line(
            f"explore preset {name}: {report.configurations} configurations, "
            f"{report.watched} watched, 0 violations"
        )
    summary_line(f"explore presets: {time.perf_counter() - start:.0f} s")
