"""``turnfsm fuzz`` throughput: pipeline calls per minute, and the CPU a call costs.

Target (GitHub issue 18, point 4): ``turnfsm fuzz`` runs at least 1,000 pipeline calls a
minute on 2 cores, i.e. at most 0.12 s of CPU per call.

Two measurements:

* **CPU per call, in this process.** The calls of a set of seeds, run one after
  another on the virtual clock (a real ``AgentSession``, the silero VAD, the scripted
  models, turnfsm attached and judged), in rounds of seeds not run before (a fuzz run
  never repeats a seed, and a repeated call would come from memory); each round runs
  its seeds twice: as shipped, then without the simulation's memos (the VAD model run
  on every window, LiveKit's speaking-rate estimate made every time). As shipped, its
  :class:`~turnfsm.adapters.sim.session.InferenceMemo` answers the VAD's inputs met
  before, :class:`~turnfsm.adapters.sim.session.SpeakingRateMemo` the estimates; the
  paired ratio is what the memos save. What two free cores make of the CPU per call
  is ``2 × 60 / CPU``.
* **The pool, as the CLI runs it.** :func:`~turnfsm.adapters.sim.fuzz.runner.fuzz` on
  two worker processes over a run of seeds: calls per wall-clock minute, starting the
  pool included (as the CLI's summary line counts it). Other processes on the machine
  take cores from it: the load average is printed beside it.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator

from livekit.agents.voice.transcription._speaking_rate import SpeakingRateStream

from turnfsm.adapters.sim.fuzz.runner import _quiet_logs, fuzz, judged_call
from turnfsm.adapters.sim.session import InferenceMemo, load_silero_vad, remember_speaking_rates

from .harness import Config, Row, Section, load_average, ratio, verdict

TARGET_CALLS_PER_MINUTE = 1_000
CORES = 2
SEEDS_PER_ROUND = 8
"""The in-process calls of a round: 8 seeds of the usual mix (about 15 s of call each),
from seed 100 on."""
WARM_UP_SEED = 99
POOL_CALLS = 40


@contextlib.contextmanager
def _without_memos() -> Iterator[None]:
    """The simulation's VAD model run on every window and LiveKit's speaking-rate estimate
    made every time, for the calls made meanwhile."""
    vad = load_silero_vad()
    memo = vad._onnx_session  # type: ignore[attr-defined]
    assert isinstance(memo, InferenceMemo)
    rates = remember_speaking_rates()
    remembered = SpeakingRateStream._compute_speaking_rate
    vad._onnx_session = memo._session  # type: ignore[attr-defined]
    SpeakingRateStream._compute_speaking_rate = rates._compute  # type: ignore[method-assign]
    try:
        yield
    finally:
        vad._onnx_session = memo  # type: ignore[attr-defined]
        SpeakingRateStream._compute_speaking_rate = remembered  # type: ignore[method-assign]


def _cpu_per_call(seeds: range) -> float:
    began = time.process_time()
    for seed in seeds:
        judged_call(seed)
    return (time.process_time() - began) / len(seeds)


def fuzz_section(config: Config) -> Section:
    per_round = SEEDS_PER_ROUND // 2 if config.quick else SEEDS_PER_ROUND
    rounds = 1 if config.quick else 3
    seeds = range(100, 100 + per_round * rounds)
    restore_logs = _quiet_logs()
    try:
        load_silero_vad()
        remember_speaking_rates()
        _cpu_per_call(range(WARM_UP_SEED, WARM_UP_SEED + 1))  # the first call builds caches
        shipped: list[float] = []
        unmemoized: list[float] = []
        for first in seeds[::per_round]:
            round_seeds = range(first, first + per_round)
            shipped.append(_cpu_per_call(round_seeds))
            with _without_memos():  # what the memos learned of these calls goes unused
                unmemoized.append(_cpu_per_call(round_seeds))
    finally:
        restore_logs()
    calls = POOL_CALLS // 3 if config.quick else POOL_CALLS
    load_before = load_average()
    summary = fuzz(range(calls), workers=CORES)
    cpu = Row("CPU per call (as shipped)", shipped, "s")
    plain = Row("CPU per call without the memos (VAD model, speaking rate)", unmemoized, "s")
    free_cores = Row(
        f"calls/min {CORES} free cores would make (2 × 60 / CPU)",
        [CORES * 60 / sample for sample in shipped],
        "calls/min",
    )
    pool = Row(
        f"calls/min of fuzz() on {CORES} workers, {calls} calls",
        [summary.calls_per_minute],
        "calls/min",
    )
    pool_cpu = Row("CPU per call in the pool's workers", [summary.cpu_seconds / calls], "s")
    plain.ratios = f"{ratio(plain.times(cpu))} the shipped CPU"
    target_cpu = CORES * 60 / TARGET_CALLS_PER_MINUTE
    cpu.target = verdict(cpu.median <= target_cpu, f"≤ {target_cpu:.2f} s for 1,000/min")
    free_cores.target = verdict(
        free_cores.median >= TARGET_CALLS_PER_MINUTE, f"≥ {TARGET_CALLS_PER_MINUTE:,}/min"
    )
    pool.target = verdict(
        pool.median >= TARGET_CALLS_PER_MINUTE, f"≥ {TARGET_CALLS_PER_MINUTE:,}/min"
    )
    shared = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else CORES
    return Section(
        title="Fuzz throughput (pipeline calls)",
        rows=[cpu, plain, free_cores, pool, pool_cpu],
        notes=[
            f"Fuzz throughput: seeds {seeds.start}–{seeds.stop - 1} judged in this process, "
            f"{rounds} round(s) of {per_round} seeds, each seed as shipped, then without the "
            "memos (the VAD model run on every window, every speaking-rate estimate made); "
            "CPU is time.process_time(). The pool row: "
            f"fuzz() over seeds 0–{calls - 1} on {CORES} forkserver workers of {shared} "
            f"usable cores, wall clock from the pool's start ({summary.wall_seconds:.1f} s; "
            f"load average before {load_before}, after {load_average()}): other processes "
            "on the cores lower it, the CPU rows are what the calls themselves cost.",
        ],
    )


SECTIONS = [fuzz_section]
