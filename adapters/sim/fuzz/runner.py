"""Many fuzzed calls on a process pool, one replayed with its trace, and ``turnfsm fuzz``.

``turnfsm fuzz --seed S --calls N`` runs the calls of seeds ``S`` to ``S + N - 1``, one
worker process per core (each loads the silero VAD once; every call runs on its own
virtual loop), prints one line per failing call with its seed, and ends with
``N calls, K failures, X calls/min``; with ``--realtime`` the calls are the realtime
world's (a realtime model against the in-process protocol server: :mod:`.realtime_call`).
``turnfsm fuzz --replay SEED --out DIR`` runs one call again and writes its trace
(``call.jsonl``: the same bytes on every replay), timeline (``timeline.svg``), plan and findings.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import gc
import logging
import multiprocessing
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from turnfsm.tools.timeline import render_timeline

from ..session import load_silero_vad
from .draw import WORLDS, World
from .harness import CallRecord, Mutation, run_call
from .judge import JUDGEMENTS, Finding, judge_call

try:
    import tomllib
except ImportError:  # Python 3.10: the same parser as the package tomli, where installed
    try:
        import tomli as tomllib
    except ImportError:
        tomllib = None  # type: ignore[assignment]

CHUNK = 1
"""Calls a worker takes at a time: one, since calls differ tenfold in cost (0.1 to 1 s of
CPU) and a worker left with a chunk of long ones would hold the run up at its end; a
round trip costs about a millisecond."""


@dataclass(frozen=True)
class Verdict:
    """One fuzzed call's result, small enough to send back from a worker."""

    seed: int
    findings: tuple[Finding, ...]
    description: str
    virtual_seconds: float
    cpu_seconds: float

    @property
    def failed(self) -> bool:
        return bool(self.findings)

    @property
    def judgements(self) -> frozenset[str]:
        """The names of the judgements the call failed."""
        return frozenset(finding.judgement for finding in self.findings)

    def line(self) -> str:
        """The call in one line: its seed, what failed, and what it drew."""
        names = ",".join(dict.fromkeys(finding.judgement for finding in self.findings))
        return f"seed {self.seed}: {names}: {self.findings[0].message} [{self.description}]"


@dataclass(frozen=True)
class KnownCall:
    """A call listed in a regression file (``tests/fuzz/regressions.toml``): a seed that
    once failed, what it found, why, and whether that is fixed (it must pass now) or still
    open (it must still fail with exactly ``found``)."""

    seed: int
    found: tuple[str, ...]
    status: Literal["fixed", "open"]
    cause: str
    plan: str = ""
    """Fingerprint of the call the seed drew when listed (see tests/fuzz)."""
    world: World = "pipeline"
    """Which world's call the seed stands for (each world draws its own calls)."""

    def expects(self, verdict: Verdict) -> bool:
        """Whether ``verdict`` is what this entry says the call does now."""
        if self.status == "fixed":
            return not verdict.failed
        return verdict.judgements == frozenset(self.found)


def load_known(path: Path) -> dict[tuple[World, int], KnownCall]:
    """The calls a regression file lists, by world and seed.

    Raises:
        ValueError: naming the entry and field that is wrong.
    """
    if tomllib is None:
        raise ValueError(f"--known {path}: reading TOML needs Python 3.11 or the package tomli")
    try:
        with path.open("rb") as stream:
            data = tomllib.load(stream)
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise ValueError(f"--known {path}: {error}") from None
    known: dict[tuple[World, int], KnownCall] = {}
    for index, entry in enumerate(data.get("call", [])):
        where = f"{path}: call #{index + 1}"
        try:
            call = KnownCall(
                seed=int(entry["seed"]),
                found=tuple(entry["found"]),
                status=entry["status"],
                cause=str(entry["cause"]),
                plan=str(entry.get("plan", "")),
                world=entry.get("world", "pipeline"),
            )
        except KeyError as missing:
            raise ValueError(f"{where}: {missing.args[0]} is missing") from None
        if call.world not in WORLDS:
            raise ValueError(f"{where}: world must be one of {sorted(WORLDS)}, got {call.world!r}")
        if call.status not in ("fixed", "open"):
            raise ValueError(f"{where}: status must be 'fixed' or 'open', got {call.status!r}")
        unknown = set(call.found) - set(JUDGEMENTS)
        if unknown:
            raise ValueError(f"{where}: found names no judgement: {sorted(unknown)}")
        if (call.world, call.seed) in known:
            raise ValueError(f"{where}: {call.world} seed {call.seed} is listed twice")
        known[call.world, call.seed] = call
    return known


@dataclass(frozen=True)
class Summary:
    """A fuzz run's totals."""

    calls: int
    failures: tuple[Verdict, ...]
    """Failing calls, but those a regression file lists as open with these very findings."""
    known: tuple[Verdict, ...]
    """Failing calls a regression file lists as open, failing as it says."""
    wall_seconds: float
    cpu_seconds: float
    virtual_seconds: float

    @property
    def calls_per_minute(self) -> float:
        return self.calls / self.wall_seconds * 60 if self.wall_seconds > 0 else 0.0

    def cost_line(self) -> str:
        """What a call costs: CPU and virtual seconds, and the rate two free cores make of it
        (the wall-clock rate also counts whatever else runs on the machine)."""
        cpu = self.cpu_seconds / self.calls
        rate = 2 * 60 / cpu if cpu > 0 else 0.0
        virtual = self.virtual_seconds / self.calls
        return (
            f"per call: {cpu:.3f} s CPU, {virtual:.1f} s of call; "
            f"{rate:.0f} calls/min on 2 free cores"
        )

    def line(self) -> str:
        """``N calls, K failures, X calls/min``."""
        return (
            f"{self.calls} calls, {len(self.failures)} failures, "
            f"{self.calls_per_minute:.0f} calls/min"
        )


def verdict_of(record: CallRecord, cpu_seconds: float = 0.0) -> Verdict:
    """What the judges say of ``record``."""
    return Verdict(
        seed=record.plan.seed,
        findings=tuple(judge_call(record)),
        description=record.plan.describe(),
        virtual_seconds=record.closed_at or 0.0,
        cpu_seconds=cpu_seconds,
    )


def judged_call(
    seed: int,
    world: World = "pipeline",
    mutation: Mutation | None = None,
    out: Path | None = None,
) -> Verdict:
    """Run and judge one call; with ``out``, a failing call's files go to ``out/<seed>/``."""
    began = time.process_time()
    record = run_call(seed, world=world, mutation=mutation)
    verdict = verdict_of(record, time.process_time() - began)
    if verdict.failed and out is not None:
        write_call(record, verdict, out / str(seed))
    return verdict


def write_call(record: CallRecord, verdict: Verdict, out: Path) -> None:
    """Write a call's trace, timeline, plan and findings into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    if record.trace is not None:
        record.trace.write(out / "call.jsonl")
        (out / "timeline.svg").write_text(render_timeline(record.trace), encoding="utf-8")
    (out / "plan.txt").write_text(f"{record.plan}\n", encoding="utf-8")
    findings = [str(finding) for finding in verdict.findings] or ["no findings"]
    if record.harness_error:
        findings.append(record.harness_error)
    (out / "findings.txt").write_text("\n".join(findings) + "\n", encoding="utf-8")


def _quiet_logs() -> Callable[[], None]:
    """Quiet the logs (turnfsm's warnings are judged, not printed; LiveKit's and asyncio's
    are noise here); returns what puts them back as they were."""
    livekit, asyncio_log, turnfsm = (
        logging.getLogger(n) for n in ("livekit", "asyncio", "turnfsm")
    )
    before = (livekit.level, asyncio_log.level, turnfsm.propagate)
    livekit.setLevel(logging.CRITICAL)
    asyncio_log.setLevel(logging.CRITICAL)
    turnfsm.propagate = False

    def restore() -> None:
        livekit.setLevel(before[0])
        asyncio_log.setLevel(before[1])
        turnfsm.propagate = before[2]

    return restore


def _start_worker() -> None:
    """A worker process: quiet logs for its whole life, the VAD loaded, and what is loaded
    by then (LiveKit and its imports, most of a worker's objects) left out of garbage
    collection: it lives as long as the worker, and walking it on every full collection
    cost each call milliseconds."""
    _quiet_logs()
    load_silero_vad()
    gc.freeze()


def _judged_calls(seeds: Sequence[int], world: World, out: Path | None) -> list[Verdict]:
    return [judged_call(seed, world, out=out) for seed in seeds]


def fuzz(
    seeds: Iterable[int],
    *,
    world: World = "pipeline",
    workers: int | None = None,
    out: Path | None = None,
    known: Mapping[tuple[World, int], KnownCall] | None = None,
    on_verdict: Callable[[Verdict, bool], None] | None = None,
) -> Summary:
    """Run and judge the calls of ``seeds`` on ``workers`` processes (one per core).

    Args:
        seeds: The calls' seeds.
        world: Which kind of calls.
        workers: Worker processes; by default one per core this process may use.
        out: Where failing calls' files go (``out/<seed>/``), if anywhere.
        known: Calls a regression file lists, by world and seed: one listed as open that
            fails as listed is counted as known, not as a failure.
        on_verdict: Called with each call's verdict as it comes in, and whether it is a
            known failure.
    """
    seeds = list(seeds)
    known = known or {}
    workers = workers or len(os.sched_getaffinity(0))
    began, failures, known_failures = time.monotonic(), [], []
    cpu = virtual = 0.0
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__])
    with concurrent.futures.ProcessPoolExecutor(
        max_workers=workers, mp_context=context, initializer=_start_worker
    ) as pool:
        chunks = [seeds[i : i + CHUNK] for i in range(0, len(seeds), CHUNK)]
        futures = [pool.submit(_judged_calls, chunk, world, out) for chunk in chunks]
        for future in concurrent.futures.as_completed(futures):
            for verdict in future.result():
                cpu += verdict.cpu_seconds
                virtual += verdict.virtual_seconds
                listed = known.get((world, verdict.seed))
                is_known = (
                    verdict.failed
                    and listed is not None
                    and listed.status == "open"
                    and listed.expects(verdict)
                )
                if is_known:
                    known_failures.append(verdict)
                elif verdict.failed:
                    failures.append(verdict)
                if on_verdict is not None:
                    on_verdict(verdict, is_known)
    failures.sort(key=lambda verdict: verdict.seed)
    known_failures.sort(key=lambda verdict: verdict.seed)
    return Summary(
        calls=len(seeds),
        failures=tuple(failures),
        known=tuple(known_failures),
        wall_seconds=time.monotonic() - began,
        cpu_seconds=cpu,
        virtual_seconds=virtual,
    )


def replay(seed: int, out: Path, *, world: World = "pipeline") -> Verdict:
    """Run the call of ``seed`` again, in this process, and write its files to ``out``
    (the process's logging is left as it was)."""
    restore_logs = _quiet_logs()
    try:
        load_silero_vad()
        record = run_call(seed, world=world)
    finally:
        restore_logs()
    verdict = verdict_of(record)
    write_call(record, verdict, out)
    return verdict


def seeds_from(seed: int, calls: int) -> Iterator[int]:
    """The seeds of ``calls`` calls from ``seed`` on."""
    return iter(range(seed, seed + calls))


def main(args: argparse.Namespace, echo: Callable[[str], None] = print) -> int:
    """Run ``turnfsm fuzz`` (its options are parsed by :mod:`turnfsm.tools.cli`); 0 when no call
    failed, 1 otherwise.

    Raises:
        ValueError: a bad option, naming it.
    """
    world: World = "realtime" if args.realtime else "pipeline"
    if args.replay is not None:
        if args.out is None:
            raise ValueError("--replay needs --out DIR (where the trace and timeline go)")
        verdict = replay(args.replay, args.out, world=world)
        for finding in verdict.findings:
            echo(f"seed {verdict.seed}: {finding}")
        echo(f"wrote {args.out}/: call.jsonl, timeline.svg, plan.txt, findings.txt")
        return 1 if verdict.failed else 0
    if args.calls < 1:
        raise ValueError(f"--calls must be at least 1, got {args.calls}")

    known = load_known(args.known) if args.known is not None else {}

    def report(verdict: Verdict, is_known: bool) -> None:
        if verdict.failed:
            echo(f"known, open: {verdict.line()}" if is_known else verdict.line())

    summary = fuzz(
        seeds_from(args.seed, args.calls),
        world=world,
        workers=args.workers,
        out=args.out,
        known=known,
        on_verdict=report,
    )
    if summary.known:
        echo(f"{len(summary.known)} failing calls are listed as open in {args.known}")
    echo(summary.cost_line())
    echo(summary.line())
    return 1 if summary.failures else 0
