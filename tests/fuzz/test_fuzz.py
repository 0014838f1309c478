"""``turnfsm fuzz``: calls drawn from seeds, replayed byte for byte, and seeded bugs found.

The fuzzer is only worth its calls if it finds what is wrong: each seeded bug below is a
lever that breaks one promise, and the fuzzer must find it within a stated number of
calls, by the judgement that speaks for that promise (not only by turnfsm's own
monitors). A replay of a seed writes the same trace, byte for byte, in this process and
in others whatever their string hashing.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import attrs
import pytest
from livekit.agents.tokenize.basic import split_words

from turnfsm import TurnController, TurnPolicy
from turnfsm import effects as fx
from turnfsm import events as ev
from turnfsm.adapters.livekit.levers import committed_message
from turnfsm.adapters.livekit.port import LeverPort, Site
from turnfsm.adapters.sim.fuzz import draw_call, judge_call, run_call
from turnfsm.adapters.sim.fuzz.draw import (
    EFFECTS_THAT_MAY_FAIL,
    MIN_WORDS,
    PROBES,
    REALTIME_EFFECTS_THAT_MAY_FAIL,
    RealtimeCallPlan,
    World,
)
from turnfsm.adapters.sim.fuzz.harness import CallRecord, Mutation
from turnfsm.adapters.sim.fuzz.judge import judge_tool_rounds
from turnfsm.adapters.sim.fuzz.runner import replay
from turnfsm.policy import option_of
from turnfsm.testing import drawn_values
from turnfsm.tools import cli

REPLAYED = 23
"""A call with a greeting, barge-ins, tool rounds and a handoff: much to keep in order."""
REALTIME_REPLAYED = 37
"""A realtime call whose socket drops into the greeting (retried), with an overlap, a
barge-in, a tool round and a failing lever: as much to keep in order."""
REPLAYS = [("pipeline", REPLAYED), ("realtime", REALTIME_REPLAYED)]


OPTIONS = [option for option in attrs.fields(TurnPolicy) if not option_of(option).shapes_the_call]
POLICY_DRAWN = {
    "direction=inbound",
    "direction=outbound",
    "first=user",
    "first=agent",
    *(f"{option.name}={value!r}" for option in OPTIONS for value in drawn_values(option)),
}
"""The policy's dimensions every world draws, each value: every option's declared values
(:func:`turnfsm.testing.drawn_values`), so that a new option is held to being drawn."""


def _policy_drawn(policy: TurnPolicy) -> set[str]:
    return {
        f"direction={policy.direction}",
        f"first={policy.first_speaker}",
        *(f"{option.name}={getattr(policy, option.name)!r}" for option in OPTIONS),
    }


def test_a_seed_draws_the_same_call_and_every_dimension_is_drawn() -> None:
    assert draw_call(7) == draw_call(7)
    assert draw_call(7) != draw_call(8)
    plans = [draw_call(seed) for seed in range(600)]
    drawn = Counter()
    for plan in plans:
        policy = plan.policy
        drawn.update(
            {
                *_policy_drawn(policy),
                f"instructions={policy.greeting_instructions is not None}",
                f"preemptive={plan.turn_handling['preemptive_generation']['enabled']}",
                f"min_words={plan.turn_handling['interruption']['min_words']}",
                f"resume={plan.turn_handling['interruption']['resume_false_interruption']}",
                f"sync={plan.transcript_sync}",
                f"aec={plan.session_options['aec_warmup_duration'] is not None}",
                f"fault={plan.fault.effect if plan.fault else None}",
                *(f"cue={cue.kind}" for cue in plan.cues),
                *(
                    f"tool={call.name}"
                    for reply in plan.replies
                    for round_ in reply.tool_rounds
                    for call in round_
                ),
                *("parallel" for r in plan.replies for round_ in r.tool_rounds if len(round_) > 1),
                *("ignores_tool_choice" for reply in plan.replies if reply.ignores_tool_choice),
            }
        )
    expected = {
        *POLICY_DRAWN,
        "instructions=True",
        "preemptive=True",
        "preemptive=False",
        "min_words=3",
        "resume=False",
        "sync=True",
        "aec=True",
        "parallel",
        "ignores_tool_choice",
        *(f"cue={kind}" for kind in ("hello", "overlap", "backchannel", "barge_in")),
        *(f"cue={kind}" for kind in ("question", "long_turn", "hang_up")),
        *(f"tool={name}" for name in ("lookup", "broken_lookup", "transfer")),
        *(f"fault={effect.name}" for effect in EFFECTS_THAT_MAY_FAIL),
    }
    assert expected <= set(drawn), sorted(expected - set(drawn))


def test_a_realtime_seed_draws_its_own_call_and_every_realtime_dimension_is_drawn() -> None:
    assert draw_call(7, "realtime") == draw_call(7, "realtime")
    assert draw_call(7, "realtime") != draw_call(8, "realtime")
    assert draw_call(7, "realtime").policy != draw_call(7).policy  # not the pipeline's
    plans = [draw_call(seed, "realtime") for seed in range(400)]
    assert all(isinstance(plan, RealtimeCallPlan) for plan in plans)
    drawn: Counter[str] = Counter()
    for plan in plans:
        assert isinstance(plan, RealtimeCallPlan)
        fidelity = plan.fidelity
        drawn.update(
            {
                *_policy_drawn(plan.policy),
                f"latency={fidelity.network_latency_ms}",
                f"cancel={fidelity.cancel_latency_ms}",
                f"lead={fidelity.transcript_lead_ms}",
                f"speed={fidelity.generation_speed}",
                f"uneven={fidelity.speaking_rate_variation > 0}",
                f"silence={plan.server_vad['silence_duration_ms']}",
                f"sync={plan.transcript_sync}",
                f"refused={plan.refuse_creates}",
                f"failed={plan.fail_responses}",
                f"drop={plan.drop_socket_at is not None}",
                f"vad_race={plan.race_auto_replies}",
                f"fault={plan.fault.effect if plan.fault else None}",
                *(f"cue={cue.kind}" for cue in plan.cues),
                *(
                    f"tool={call.name}"
                    for reply in plan.replies
                    for round_ in reply.tool_rounds
                    for call in round_
                ),
            }
        )
        hellos = [cue for cue in plan.cues if cue.kind == "hello"]
        drawn.update({"double_hello"} if len(hellos) == 2 else set())
    expected = {
        *POLICY_DRAWN,
        *(f"latency={ms}" for ms in (0, 50, 100, 300)),
        *(f"cancel={ms}" for ms in (0, 150, 600)),
        "lead=0",
        "lead=1000",
        "speed=4.0",
        "uneven=True",
        "uneven=False",
        *(f"silence={ms}" for ms in (200, 500, 800)),
        "sync=True",
        "sync=False",
        "refused=1",
        "refused=2",
        "failed=1",
        "drop=True",
        "vad_race=1",
        "double_hello",
        *(f"cue={kind}" for kind in ("hello", "overlap", "backchannel", "barge_in")),
        *(f"cue={kind}" for kind in ("question", "long_turn", "hang_up")),
        "tool=lookup",
        "tool=broken_lookup",
        *(f"fault={effect.name}" for effect in REALTIME_EFFECTS_THAT_MAY_FAIL),
    }
    assert expected <= set(drawn), sorted(expected - set(drawn))
    assert "tool=transfer" not in drawn  # a realtime call is one agent's


def test_every_probe_is_a_turn_over_the_agents_speech_whatever_min_words_is_drawn() -> None:
    # LiveKit counts words so when it weighs a turn over the agent's speech (seed 1428:
    # a two-word probe under min_words=3 went unanswered, by LiveKit's design)
    words = {probe: len(split_words(probe, split_character=True)) for probe in PROBES}
    assert min(words.values()) >= max(MIN_WORDS), words


@pytest.mark.parametrize(("world", "seed"), REPLAYS)
def test_a_replay_writes_the_same_trace_byte_for_byte(
    world: World, seed: int, tmp_path: Path
) -> None:
    loggers = [logging.getLogger(name) for name in ("livekit", "asyncio", "turnfsm")]
    before = [(log.level, log.propagate) for log in loggers]
    first = replay(seed, tmp_path / "a", world=world)
    second = replay(seed, tmp_path / "b", world=world)
    # the calling process's logging is its own again (it silenced LiveKit's errors for
    # every later test of the worker process)
    assert [(log.level, log.propagate) for log in loggers] == before
    assert first == second
    trace = (tmp_path / "a" / "call.jsonl").read_bytes()
    assert trace == (tmp_path / "b" / "call.jsonl").read_bytes()
    assert trace.count(b"\n") > 40  # a whole call, not a stub
    assert (tmp_path / "a" / "timeline.svg").read_bytes().startswith(b"<svg")


@pytest.mark.parametrize(("world", "seed"), REPLAYS)
def test_the_same_trace_in_other_processes_whatever_their_string_hashing(
    world: World, seed: int, tmp_path: Path
) -> None:
    replay(seed, tmp_path / "here", world=world)
    realtime = ["--realtime"] if world == "realtime" else []
    runs = {
        hash_seed: subprocess.Popen(
            [
                sys.executable,
                "-m",
                "turnfsm",
                "fuzz",
                *realtime,
                "--replay",
                str(seed),
                "--out",
                str(tmp_path / hash_seed),
            ],
            env={**os.environ, "PYTHONHASHSEED": hash_seed},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for hash_seed in ("1", "2")
    }
    for run in runs.values():
        _, errors = run.communicate(timeout=600)
        assert b"internal error" not in errors, errors
    here = (tmp_path / "here" / "call.jsonl").read_bytes()
    for hash_seed in runs:
        trace = (tmp_path / hash_seed / "call.jsonl").read_bytes()
        assert trace == here, f"PYTHONHASHSEED={hash_seed}"


# -- the judges ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fourth_round_at", "over_the_cap"),
    [(10.5, False), (10.4, True)],
    ids=["in-the-commit-instant: the new turn's", "before the commit: the old turn's"],
)
def test_a_tool_round_begun_as_a_turn_commits_counts_for_that_turn(
    fourth_round_at: float, over_the_cap: bool
) -> None:
    """Seed 25309's rounds (cap 3): three for the turn committed at 6.4 s, then one that
    LiveKit began for the turn committed at 10.5 s as it committed (its reply was
    prepared before). The judge counted it as the first turn's fourth round (it took a
    round for a turn only when it began strictly after the commit), where the outcome
    monitor, following the speeches, saw none: 9 false findings of the 20000-29999 run."""
    record = CallRecord(plan=draw_call(25309))
    assert record.plan.policy.max_tool_steps == 3
    record.user_turns = [(6.4, "Uh-huh."), (10.5, "Is there parking near the office?")]
    record.tool_rounds = [(6.6, 9.1), (9.3, 9.6), (9.8, 10.1), (fourth_round_at, 13.0)]
    capped = [f for f in judge_tool_rounds(record) if "tool rounds in one user turn" in f]
    assert capped == (["4 tool rounds in one user turn (cap 3)"] if over_the_cap else [])


@pytest.mark.parametrize(
    ("last_event", "end_reason", "of_its_own"),
    [
        (ev.CallEnded(at=20.0, reason="hangup"), "hangup", False),
        (ev.CallEnded(at=20.0, reason="error"), "error", False),  # LiveKit closed it
        (ev.MaxDurationTimerExpired(at=60.0), "max_duration", True),
        (ev.SessionError(at=20.0, recoverable=False), "error", True),
    ],
    ids=["hang-up", "LiveKit's close", "max duration", "session error"],
)
def test_the_judges_tell_the_calls_turnfsm_ended_from_those_the_caller_ended(
    last_event: ev.Event, end_reason: str, of_its_own: bool
) -> None:
    """A greeting that never played is excused when turnfsm ended the call itself: the
    end reasons are read from the trace (an EndCall on any event but CallEnded), not from
    a list of names to keep in step with the machine's."""
    controller = TurnController(TurnPolicy(first_speaker="user", max_call_duration=60))
    for event in (ev.SessionStarted(at=0.0), last_event):
        controller.handle(event)
    record = CallRecord(plan=draw_call(0), trace=controller.trace)
    assert record.end_reasons() == [end_reason]
    assert record.ends_of_its_own() == ([end_reason] if of_its_own else [])


# -- seeded bugs ------------------------------------------------------------------------------


def commits_the_full_text(port: LeverPort, effect: fx.DropUnspokenText, site: Site) -> None:
    """The seeded bug: an interrupted reply keeps its whole text, heard or not."""
    committed_message(port, effect)  # refused as the real lever is, when none was


def never_resumes_user_turns(port: LeverPort, effect: fx.ResumeUserTurns, site: Site) -> None:
    """The seeded bug: user turns held for the greeting are never released."""


def never_resumes_model_replies(
    port: LeverPort, effect: fx.ResumeModelReplies, site: Site
) -> None:
    """The seeded bug: a realtime model's own replies, paused for the greeting, stay off."""


SEEDED_BUGS: dict[str, tuple[World, type[fx.Effect], Any, str, int]] = {
    "commits_the_full_text": (
        "pipeline",
        fx.DropUnspokenText,
        commits_the_full_text,
        "committed_heard",
        12,
    ),
    "never_resumes_user_turns": (
        "pipeline",
        fx.ResumeUserTurns,
        never_resumes_user_turns,
        "no_deaf_call",
        5,
    ),
    "realtime_commits_the_full_text": (
        "realtime",
        fx.DropUnspokenText,
        commits_the_full_text,
        "committed_heard",
        15,
    ),
    "never_resumes_model_replies": (
        "realtime",
        fx.ResumeModelReplies,
        never_resumes_model_replies,
        "no_deaf_call",
        5,
    ),
}
"""bug: (world, effect, lever, the judgement that must find it, within so many calls)."""


@pytest.mark.parametrize("bug", list(SEEDED_BUGS))
def test_the_fuzzer_finds_a_seeded_bug(bug: str, summary_line: Any) -> None:
    world, effect, lever, judgement, within = SEEDED_BUGS[bug]
    mutation = Mutation(levers={effect: lever})
    for seed in range(within):  # calls 1, 2, ... are seeds 0, 1, ...
        findings = judge_call(run_call(seed, world=world, mutation=mutation))
        if any(finding.judgement == judgement for finding in findings):
            break
    else:
        pytest.fail(f"{bug}: not found by {judgement} in {within} calls")
    # the same call with turnfsm's own lever passes that judgement: the bug was found
    assert judgement not in {f.judgement for f in judge_call(run_call(seed, world=world))}
    summary_line(f"fuzz: seeded bug {bug} found by {judgement} in {world} call {seed + 1}")


# -- the command line -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["fuzz", "--calls", "0"], "--calls"),
        (["fuzz", "--replay", "3"], "--out"),
        (["fuzz", "--known", "no/such/file.toml"], "--known"),
    ],
)
def test_bad_options_are_refused_naming_them(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(argv) == 1
    assert named in capsys.readouterr().err


@pytest.mark.parametrize("world", [[], ["--realtime"]], ids=["pipeline", "realtime"])
def test_a_fuzz_run_prints_failing_calls_and_the_summary(
    world: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    status = cli.main(["fuzz", *world, "--seed", "5", "--calls", "3", "--workers", "1"])
    out = capsys.readouterr().out.splitlines()
    assert re.fullmatch(r"3 calls, (\d) failures, \d+ calls/min", out[-1]), out
    failures = int(re.match(r"3 calls, (\d)", out[-1]).group(1))  # type: ignore[union-attr]
    assert status == (1 if failures else 0)
    assert len([line for line in out if line.startswith("seed ")]) == failures
