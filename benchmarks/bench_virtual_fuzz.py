"""``turnfsm fuzz`` throughput: pipeline calls per minute, and the CPU a call costs.

Target (GitHub issue 18, point 4): ``turnfsm fuzz`` runs at least 1,000 pipeline calls a
minute on 2 cores, i.e. at most 0.12 s of CPU per call.

Two measurements:

* **CPU per call, in this process.** The calls of a fixed set of seeds, run one after
  another on the virtual clock (a real ``AgentSession``, the silero VAD, the scripted
  models, turnfsm attached and judged), in rounds; each round runs the seeds twice:
  with the simulation's VAD as it ships (its :class:`~turnfsm.adapters.sim.session.
  SilenceMemo` answers a call's opening silence from memory) and with the model run on
  every window. The paired ratio is what the memo saves. What two free cores make of
  the CPU per call is ``2 × 60 / CPU``.
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

from turnfsm.adapters.sim.fuzz.runner import _quiet_logs, fuzz, judged_call
from turnfsm.adapters.sim.session import SilenceMemo, load_silero_vad

from .harness import Config, Row, Section, load_average, ratio, verdict

TARGET_CALLS_PER_MINUTE = 1_000
CORES = 2
SEEDS = range(100, 108)
"""The in-process calls: 8 seeds of the usual mix (about 15 s of call each)."""
POOL_CALLS = 40


@contextlib.contextmanager
def _model_on_every_window() -> Iterator[None]:
    """The simulation's VAD without its memo, for the calls made meanwhile."""
    vad = load_silero_vad()
    memo = vad._onnx_session  # type: ignore[attr-defined]
    assert isinstance(memo, SilenceMemo)
    vad._onnx_session = memo._session  # type: ignore[attr-defined]
    try:
        yield
    finally:
        vad._onnx_session = memo  # type: ignore[attr-defined]


def _cpu_per_call(seeds: range) -> float:
    began = time.process_time()
    for seed in seeds:
        judged_call(seed)
    return (time.process_time() - began) / len(seeds)


def fuzz_section(config: Config) -> Section:
    seeds = SEEDS[:4] if config.quick else SEEDS
    rounds = 1 if config.quick else 3
    restore_logs = _quiet_logs()
    try:
        load_silero_vad()
        _cpu_per_call(seeds[:2])  # warm up: the first call of a process builds caches
        shipped: list[float] = []
        unmemoized: list[float] = []
        for _ in range(rounds):
            shipped.append(_cpu_per_call(seeds))
            with _model_on_every_window():
                unmemoized.append(_cpu_per_call(seeds))
    finally:
        restore_logs()
    calls = POOL_CALLS // 3 if config.quick else POOL_CALLS
    load_before = load_average()
    summary = fuzz(range(calls), workers=CORES)
    cpu = Row("CPU per call (as shipped)", shipped, "s")
    plain = Row("CPU per call, the VAD model run on every window", unmemoized, "s")
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
            f"{rounds} round(s), each seed once as shipped and once with the VAD model run "
            "on every window (no SilenceMemo); CPU is time.process_time(). The pool row: "
            f"fuzz() over seeds 0–{calls - 1} on {CORES} forkserver workers of {shared} "
            f"usable cores, wall clock from the pool's start ({summary.wall_seconds:.1f} s; "
            f"load average before {load_before}, after {load_average()}): other processes "
            "on the cores lower it, the CPU rows are what the calls themselves cost.",
        ],
    )


SECTIONS = [fuzz_section]
