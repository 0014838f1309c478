"""What every benchmark section shares: timing, rows, the machine description, the table.

A section is a function ``(Config) -> Section``. Timings are taken in short rounds:
each round runs every case of the section once, back to back, so that load from other
processes hits the cases of a round alike. A row's figure is the median over rounds;
a ratio between two rows of one section is the median of their per-round ratios
(paired), which a burst of load on the machine shifts far less than a ratio of medians.
"""

from __future__ import annotations

import gc
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path


@dataclass(frozen=True)
class Config:
    """How hard to measure: ``rounds`` repeats of every case (medians are over them)."""

    rounds: int = 21
    quick: bool = False
    """A smoke run (a few rounds, fewer iterations): figures are indicative only."""

    def scaled(self, n: int) -> int:
        """An iteration count, cut down in quick runs."""
        return max(1, n // 5) if self.quick else n


@dataclass
class Row:
    """One measured case: a value per round, its unit, and how it compares."""

    case: str
    samples: list[float]
    unit: str
    ratios: str = ""
    target: str = ""

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    def times(self, reference: Row) -> float:
        """How many times ``reference`` this row is: paired per round when they were
        measured in the same rounds, else the ratio of medians."""
        if len(self.samples) == len(reference.samples):
            return statistics.median(
                a / b for a, b in zip(self.samples, reference.samples, strict=True)
            )
        return self.median / reference.median

    def minus(self, reference: Row) -> float:
        """How much more than ``reference`` this row is, paired like :meth:`times`."""
        if len(self.samples) == len(reference.samples):
            return statistics.median(
                a - b for a, b in zip(self.samples, reference.samples, strict=True)
            )
        return self.median - reference.median


@dataclass
class Section:
    title: str
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def row(self, case: str) -> Row:
        return next(row for row in self.rows if row.case == case)


SectionFunction = Callable[[Config], Section]


def rounds_of(
    cases: dict[str, Callable[[], float]], config: Config, *, warm_up: bool = True
) -> dict[str, list[float]]:
    """Run every case once per round, interleaved; collect each case's values.

    A first, discarded round warms up what runs once per process (imports, lazily
    built caches, the allocator), which would otherwise land in the first sample.
    """
    if warm_up:
        for case in cases.values():
            case()
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(config.rounds):
        for name, case in cases.items():
            samples[name].append(case())
    return samples


@contextmanager
def gc_paused() -> Iterator[None]:
    """No garbage collection inside a timed region (as ``timeit`` does)."""
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def ratio(x: float) -> str:
    """A ratio as text: ``1.07×``, ``0.067×``, ``1,230×``."""
    if x < 0.1:
        return f"{x:.2g}×"
    return f"{x:.2f}×" if x < 100 else f"{x:,.0f}×"


def verdict(met: bool, text: str) -> str:
    return f"{'MET' if met else 'MISSED'} ({text})"


# -- the machine -------------------------------------------------------------------------


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "not installed"


def _git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).parent,
            timeout=5,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip()


def load_average() -> str:
    """The 1, 5 and 15 minute load averages (other processes compete for the cores)."""
    try:
        return ", ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def describe_machine() -> list[str]:
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    cores = f"{os.cpu_count()} logical" + (f", {usable} usable" if usable else "")
    packages = ", ".join(
        f"{name} {_version(name)}" for name in ("python-statemachine", "transitions", "attrs")
    )
    return [
        f"CPU: {cpu_model()} ({cores}); load average at start: {load_average()}",
        f"Python {platform.python_version()} ({platform.python_implementation()}) "
        f"on {platform.system()} {platform.release()}",
        f"Packages: turnfsm {_version('turnfsm')} (commit {_git_commit()}), {packages}",
    ]


# -- the table ---------------------------------------------------------------------------


def _number(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def render(sections: list[Section], config: Config, machine: list[str], elapsed: float) -> str:
    header = ["Section", "Case", "Median", "Min–max", "Ratios (paired)", "Target"]
    body: list[list[str]] = []
    for number, section in enumerate(sections, start=1):
        for index, row in enumerate(section.rows):
            body.append(
                [
                    f"{number}. {section.title}" if index == 0 else "",
                    row.case,
                    f"{_number(row.median)} {row.unit}",
                    f"{_number(min(row.samples))}–{_number(max(row.samples))}",
                    row.ratios,
                    row.target,
                ]
            )
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    out = [
        f"turnfsm benchmarks — medians over {config.rounds} rounds"
        + (" (QUICK: indicative only)" if config.quick else ""),
        "",
        *(f"- {text}" for text in machine),
        "",
        line(header),
        "|" + "|".join("-" * (w + 2) for w in widths) + "|",
        *(line(cells) for cells in body),
        "",
    ]
    for number, section in enumerate(sections, start=1):
        for note in section.notes:
            out.append(f"{number}. {note}")
    out.append(
        "Sections took "
        + ", ".join(f"{n}: {s.seconds:.1f} s" for n, s in enumerate(sections, start=1))
        + f"; total {elapsed:.1f} s. Load average at the end: {load_average()}."
    )
    return "\n".join(out)


def timed(function: SectionFunction, config: Config) -> Section:
    start = time.perf_counter()
    section = function(config)
    section.seconds = time.perf_counter() - start
    return section
