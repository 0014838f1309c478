"""State-agreement (O7) breaches over many fuzzed calls, with the declined-turn fix and without.

Issue 24 asks how often the machine disagreed with the session, before and after the
fix that lets the machine hear a turn LiveKit declines (``UserTurnDeclined``: a
``min_words`` backchannel over a tool step, a false interruption, a turn the agent's
``on_user_turn_completed`` stopped). "Before" is today's code with that one event
withheld from the machine (``TurnAdapter._turn_declined`` does nothing), which is what
the adapter did before the fix; everything else, the draws and the judges included, is
the same, so the two counts differ by the fix alone.

Run from the repository root (it takes ~0.3 s of CPU per call)::

    .venv/bin/python -m benchmarks.agreement_breaches --seed 10000 --calls 10000 \\
        --out agreement-after.jsonl
    .venv/bin/python -m benchmarks.agreement_breaches --seed 10000 --calls 10000 \\
        --without-declined-turns --out agreement-before.jsonl

Each writes one JSON line per call (seed, and each finding's judgement and message) and
prints the counts: calls with an O7 breach, O7 breaches, calls failing any judgement.
``--summarise FILE`` prints the counts of a finished file again.

Not a ``bench_*`` section: ``make bench`` does not run it (10,000 calls take tens of
minutes).

As a pytest plugin (``-p benchmarks.agreement_breaches``) it counts the breaches the
test suite's own sessions record: every ``OutcomeMonitor.breach`` is appended, with the
test's id, to the file ``TURNFSM_BREACH_LOG`` names (one line each, per worker process);
with ``TURNFSM_WITHOUT_DECLINED_TURNS=1`` the suite runs without the fix.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import multiprocessing
import os
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

STATE_AGREEMENT = "O7"
CHUNK = 8


def withhold_declined_turns() -> None:
    """Put the adapter back as it was before the fix: a declined turn never reaches the
    machine."""
    from turnfsm.adapters.livekit.adapter import TurnAdapter

    def _turn_declined(self: TurnAdapter, reason: Any, item_id: str = "") -> None:
        return None

    TurnAdapter._turn_declined = _turn_declined  # type: ignore[method-assign]


def _start_worker(without_declined_turns: bool) -> None:
    from turnfsm.adapters.sim.fuzz import runner

    runner._start_worker()
    if without_declined_turns:
        withhold_declined_turns()


def _run(seeds: Sequence[int]) -> list[dict[str, Any]]:
    from turnfsm.adapters.sim.fuzz.runner import judged_call

    lines = []
    for seed in seeds:
        verdict = judged_call(seed)
        lines.append(
            {
                "seed": seed,
                "cpu": round(verdict.cpu_seconds, 4),
                "findings": [[f.judgement, f.message] for f in verdict.findings],
            }
        )
    return lines


def is_agreement_breach(finding: Sequence[str]) -> bool:
    judgement, message = finding
    return judgement == "outcomes" and message.startswith(f"{STATE_AGREEMENT} ")


def summarise(lines: Sequence[dict[str, Any]]) -> str:
    """The counts of a run's lines."""
    o7_calls = [line for line in lines if any(map(is_agreement_breach, line["findings"]))]
    o7 = sum(sum(map(is_agreement_breach, line["findings"])) for line in lines)
    failing = sum(bool(line["findings"]) for line in lines)
    by_judgement = Counter(f[0] for line in lines for f in line["findings"])
    seeds = [line["seed"] for line in o7_calls]
    return (
        f"{len(lines)} calls: {len(o7_calls)} with an O7 breach ({o7} breaches), "
        f"{failing} failing any judgement; findings by judgement: {dict(by_judgement)}; "
        f"O7 seeds (first 20): {seeds[:20]}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.agreement_breaches")
    parser.add_argument("--seed", type=int, default=10_000)
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--without-declined-turns", action="store_true")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--summarise", type=Path, metavar="FILE")
    args = parser.parse_args(argv)
    if args.summarise is not None:
        lines = [json.loads(text) for text in args.summarise.read_text().splitlines()]
        print(summarise(lines))
        return 0
    seeds = list(range(args.seed, args.seed + args.calls))
    chunks = [seeds[i : i + CHUNK] for i in range(0, len(seeds), CHUNK)]
    context = multiprocessing.get_context("forkserver")
    began = time.monotonic()
    lines: list[dict[str, Any]] = []
    out = args.out.open("w") if args.out is not None else None
    try:
        with concurrent.futures.ProcessPoolExecutor(
            max_workers=args.workers,
            mp_context=context,
            initializer=_start_worker,
            initargs=(args.without_declined_turns,),
        ) as pool:
            for future in concurrent.futures.as_completed(
                [pool.submit(_run, chunk) for chunk in chunks]
            ):
                for line in future.result():
                    lines.append(line)
                    if out is not None:
                        out.write(json.dumps(line) + "\n")
                        out.flush()
    finally:
        if out is not None:
            out.close()
    minutes = (time.monotonic() - began) / 60
    fix = "without the fix" if args.without_declined_turns else "with the fix"
    print(f"{fix}: {summarise(sorted(lines, key=lambda line: line['seed']))}")
    print(f"{len(lines) / minutes:.0f} calls/min")
    return 0


# -- as a pytest plugin: the suite's own breaches -------------------------------------


def _breach_log() -> Path | None:
    name = os.environ.get("TURNFSM_BREACH_LOG")
    return Path(f"{name}.{os.getpid()}") if name else None


def pytest_configure(config: Any) -> None:
    if os.environ.get("TURNFSM_WITHOUT_DECLINED_TURNS") == "1":
        withhold_declined_turns()
    log = _breach_log()
    if log is None:
        return
    from turnfsm.adapters.livekit.outcomes import OutcomeMonitor

    original = OutcomeMonitor.breach

    def breach(self: OutcomeMonitor, check: Any, message: str) -> None:
        test = os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" ", 1)[0]
        with log.open("a") as file:
            file.write(json.dumps({"test": test, "check": check}) + "\n")
        original(self, check, message)

    OutcomeMonitor.breach = breach  # type: ignore[method-assign]


def suite_counts(logs: Iterator[Path]) -> str:
    """The suite's breaches by check, and the tests with an O7 breach."""
    rows = [json.loads(text) for log in logs for text in log.read_text().splitlines()]
    by_check = Counter(row["check"] for row in rows)
    tests = sorted({row["test"] for row in rows if row["check"] == STATE_AGREEMENT})
    return f"breaches by check: {dict(by_check)}; tests with O7: {len(tests)}: {tests}"


if __name__ == "__main__":
    sys.exit(main())
