"""The figures of calls, computed straight from their traces, for tests to compare with.

Written apart from ``turnfsm.tools.metrics`` and ``turnfsm.tools.report`` (whole lists, no folding,
no shared helper) so that a slip in either shows up as a difference. The definitions are
the documented ones: see ``CallMetrics`` and the report's glossary.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

from turnfsm import Trace
from turnfsm import effects as fx

LIVE = {"greeting", "listening", "speaking", "tool_loop"}


def call_figures(trace: Trace) -> dict[str, Any]:
    steps = trace.steps
    effects = [(step, effect) for step in steps for effect in step.effects]

    def effects_of(kind: type) -> list[Any]:
        return [effect for _, effect in effects if isinstance(effect, kind)]

    ends = effects_of(fx.EndCall)
    seconds: dict[str, float] = {steps[0].before: 0.0} if steps else {}
    for previous, step in zip(steps, steps[1:], strict=False):
        if step.before != "ended":
            seconds[step.before] = seconds.get(step.before, 0.0) + max(0.0, step.at - previous.at)
    visited = []
    for state in [steps[0].before] + [step.after for step in steps] if steps else []:
        if state not in visited:
            visited.append(state)

    if trace.policy.direction == "outbound":
        answers = [
            s for s in steps if s.before == "ringing" and s.after not in ("ringing", "ended")
        ]
    else:
        answers = [s for s in steps if s.event.name == "session_started"]
    locked = {e.speech_id for e in effects_of(fx.LockSpeech)}
    heard = [
        s for s in steps if s.event.name == "agent_speech_started" and s.event.speech_id in locked
    ]
    to_greeting = max(0.0, heard[0].at - answers[0].at) if answers and heard else None

    messages = {s.event.speech_id for s in steps if s.event.name == "assistant_message_committed"}
    # what each drop's lever measured of its cut, in its done outcome
    cuts = {
        s.event.speech_id: s.event.text_chars - s.event.heard_chars
        for s in steps
        if s.event.name == "effect_outcome"
        and s.event.effect == "drop_unspoken_text"
        and s.event.outcome == "done"
        and s.event.text_chars is not None
        and s.event.heard_chars is not None
    }

    def speeches(condition: Any) -> set[str]:
        return {s.event.speech_id for s in steps if condition(s)}

    cut = speeches(
        lambda s: (
            s.event.name == "agent_speech_interrupted"
            or (s.event.name == "agent_speech_ended" and s.event.interrupted)
        )
    )
    audible = speeches(lambda s: s.event.name == "agent_speech_started") | speeches(
        lambda s: s.event.name == "agent_speech_ended" and s.event.played_seconds > 0
    )
    unheard = cut - audible
    cut_live = speeches(
        lambda s: (
            s.before in LIVE
            and (
                s.event.name == "agent_speech_interrupted"
                or (s.event.name == "agent_speech_ended" and s.event.interrupted)
            )
        )
    )
    asked = effects_of(fx.DropUnspokenText)
    empty = {d.speech_id for d in asked} - messages  # no text committed: none to drop
    drops = [d for d in asked if d.speech_id not in empty]
    dropped = sum(max(0, cuts[d.speech_id]) for d in drops if d.speech_id in cuts)
    unmeasured = sum(1 for d in drops if d.speech_id not in cuts)

    tool_starts = [
        i
        for i, s in enumerate(steps)
        if s.event.name == "tool_step_started" and s.after == "tool_loop"
    ]

    def rounds_so_far(index: int) -> int:
        """The tool steps of ``index``'s user turn up to it, itself included."""
        begun = max(
            (i for i in range(index) if steps[i].event.name == "user_turn_committed"), default=-1
        )
        return sum(1 for i in tool_starts if begun < i <= index)

    # a turn's first max_tool_steps steps are its rounds; any later one is refused
    refused = [i for i in tool_starts if rounds_so_far(i) > trace.policy.max_tool_steps]
    says = effects_of(fx.Say)
    cleared = 0
    for index, step in enumerate(steps):
        clears = sum(1 for e in step.effects if isinstance(e, fx.ClearUserTurn))
        if clears and step.before == "greeting":
            entered = max(
                (i for i in range(index) if steps[i].after == "greeting" != steps[i].before),
                default=0,
            )
            talked_over = any(
                s.event.name == "user_speech_started" and s.before == "greeting"
                for s in steps[entered : index + 1]
            )
            clears = clears if talked_over else 0
        cleared += clears
    overlaps = sum(
        1 for s in steps if s.event.name == "user_speech_started" and s.before == "greeting"
    )
    return {
        "direction": trace.policy.direction,
        "end_reason": ends[0].reason if ends else None,
        "duration": steps[-1].at - steps[0].at if steps else 0.0,
        "states_visited": visited,
        "state_seconds": seconds,
        "time_to_greeting": to_greeting,
        "greeting_overlaps": overlaps,
        "overlap_handling": trace.policy.greeting_overlap if overlaps else None,
        "overlap_dropped": len(effects_of(fx.RejectUserTurn)) + cleared,
        "agent_speeches": len(
            {s.event.speech_id for s in steps if s.event.name == "agent_speech_started"}
        ),
        "barge_ins": len(cut_live & audible),
        "discarded_speeches": len(unheard),
        "drops": len(drops),
        "dropped_chars": dropped,
        "unmeasured_drops": unmeasured,
        "tool_rounds": len(tool_starts) - len(refused),
        "tool_rounds_refused": len(refused),
        # the cap: the final reply asked for in the capping step, or (realtime) tools forbidden
        "tool_caps": len(effects_of(fx.ForbidTools))
        + sum(
            isinstance(e, fx.FinalReplyWithoutTools)
            for s in steps
            if s.event.name == "tool_step_finished"
            for e in s.effects
        ),
        "tool_fallbacks": sum(1 for e in says if e.reason == "tool_fallback"),
        "reprompts": sum(1 for e in says if e.reason == "reprompt"),
        "greeting_retries": sum(1 for e in says if e.reason == "greeting"),
        "lever_outcomes": dict(
            Counter(
                f"{s.event.effect}:{s.event.outcome}"
                for s in steps
                if s.event.name == "effect_outcome"
                and s.event.outcome != "done"
                and not (s.event.effect == "drop_unspoken_text" and s.event.speech_id in empty)
            )
        ),
    }


def row_figures(trace: Trace) -> dict[str, Any]:
    """What the report keeps of a call beside its metrics: its policy, its breaches."""
    return {
        "policy": json.dumps(trace.policy.to_dict(), sort_keys=True),
        "breaches": dict(
            Counter(s.event.check for s in trace.steps if s.event.name == "outcome_breached")
        ),
    }


def nearest_rank(values: Sequence[float], percent: int) -> float | None:
    """The smallest value with at least ``percent`` % of ``values`` at or below it (the
    report's exact percentile), by counting, not by index."""
    if not values:
        return None
    return min(
        v for v in values if 100 * sum(1 for w in values if w <= v) >= percent * len(values)
    )


def percent(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "–"


def seconds(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f} s"


def report_figures(calls: list[dict[str, Any]]) -> dict[str, str]:
    """The report's headline figures, as it prints them."""
    n = len(calls)

    def total(name: str) -> int:
        return sum(call[name] for call in calls)

    def having(name: str) -> int:
        return sum(1 for call in calls if call[name] > 0)

    def share(part: int) -> str:
        return f"{part} ({percent(part, n)})"

    greet = [c["time_to_greeting"] for c in calls if c["time_to_greeting"] is not None]
    greeted = sum(1 for c in calls if "greeting" in c["states_visited"])
    handled = [c["overlap_handling"] for c in calls]
    figures = {
        "calls": str(n),
        "policies": str(len({c["policy"] for c in calls})),
        "breaches": str(sum(sum(c["breaches"].values()) for c in calls)),
        "calls_with_breach": share(sum(1 for c in calls if c["breaches"])),
        "greeting_heard": share(len(greet)),
        "greeting_mean": seconds(sum(greet) / len(greet) if greet else None),
        "greeting_max": seconds(max(greet) if greet else None),
        "greeted": str(greeted),
        "overlap_rate": percent(having("greeting_overlaps"), greeted),
        "overlaps": str(total("greeting_overlaps")),
        "overlap_answered_whole": str(handled.count("answer_whole")),
        "overlap_drop_policy": str(handled.count("drop")),
        "overlap_dropped": str(total("overlap_dropped")),
        "agent_speeches": str(total("agent_speeches")),
        "barge_ins": str(total("barge_ins")),
        "barge_in_rate": percent(total("barge_ins"), total("agent_speeches")),
        "calls_with_barge_in": share(having("barge_ins")),
        "discarded_speeches": str(total("discarded_speeches")),
        "drops": str(total("drops")),
        "dropped_chars": str(total("dropped_chars")),
        "unmeasured_drops": str(total("unmeasured_drops")),
        "calls_with_drop": share(having("drops")),
        "tool_rounds": str(total("tool_rounds")),
        "tool_rounds_refused": str(total("tool_rounds_refused")),
        "tool_caps": str(total("tool_caps")),
        "calls_with_tool_cap": share(having("tool_caps")),
        "tool_cap_rate": percent(having("tool_caps"), n),
        "tool_fallbacks": str(total("tool_fallbacks")),
        "reprompts": str(total("reprompts")),
        "calls_with_reprompt": share(having("reprompts")),
        "greeting_retries": str(total("greeting_retries")),
        "lever_problems": str(sum(sum(c["lever_outcomes"].values()) for c in calls)),
        "duration_mean": seconds(sum(c["duration"] for c in calls) / n if n else None),
    }
    durations = [c["duration"] for c in calls]
    for p in (50, 95, 99):
        figures[f"greeting_p{p}"] = seconds(nearest_rank(greet, p))
        figures[f"duration_p{p}"] = seconds(nearest_rank(durations, p))
    for check in {check for c in calls for check in c["breaches"]}:
        figures[f"breach_{check}"] = str(sum(c["breaches"].get(check, 0) for c in calls))
    reasons = [c["end_reason"] or "not ended" for c in calls]
    for reason in set(reasons):
        figures[f"ended_{reason}"] = share(reasons.count(reason))
    all_time = sum(sum(c["state_seconds"].values()) for c in calls)
    for state in {s for c in calls for s in c["state_seconds"]}:
        times = [c["state_seconds"][state] for c in calls if state in c["state_seconds"]]
        figures[f"state_{state}_calls"] = str(len(times))
        figures[f"state_{state}_mean"] = seconds(sum(times) / len(times))
        figures[f"state_{state}_p50"] = seconds(nearest_rank(times, 50))
        figures[f"state_{state}_p95"] = seconds(nearest_rank(times, 95))
        figures[f"state_{state}_share"] = percent(sum(times), all_time)
    return figures
