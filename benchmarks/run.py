"""``make bench``: run every benchmark section and print one table.

Sections live in ``benchmarks/bench_*.py`` modules, each listing its section functions
in ``SECTIONS``; modules run in name order, so a new benchmark is a new module and
needs no change here. A section function takes a :class:`~benchmarks.harness.Config`
and returns a :class:`~benchmarks.harness.Section` of rows.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
import time
from pathlib import Path

from .harness import Config, SectionFunction, describe_machine, render, timed

BUDGET_SECONDS = 300.0
"""``make bench`` must finish well within this on a fresh clone."""


def discover() -> list[SectionFunction]:
    """Every ``SECTIONS`` entry of every ``benchmarks/bench_*.py``, in module-name order."""
    found: list[SectionFunction] = []
    names = sorted(
        info.name
        for info in pkgutil.iter_modules([str(Path(__file__).parent)])
        if info.name.startswith("bench_")
    )
    for name in names:
        module = importlib.import_module(f"{__package__}.{name}")
        found.extend(module.SECTIONS)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    default = Config().rounds
    parser.add_argument(
        "--rounds", type=int, default=default, help=f"rounds per case (default {default})"
    )
    parser.add_argument(
        "--quick", action="store_true", help="3 rounds, fewer iterations: a smoke run"
    )
    parser.add_argument(
        "--only", metavar="TEXT", help="run the sections whose function name contains TEXT"
    )
    args = parser.parse_args(argv)
    config = Config(rounds=3 if args.quick else max(1, args.rounds), quick=args.quick)
    sections = [s for s in discover() if not args.only or args.only in s.__name__]
    machine = describe_machine()
    start = time.perf_counter()
    results = []
    for function in sections:
        print(f"running {function.__module__}.{function.__name__} ...", file=sys.stderr)
        results.append(timed(function, config))
    elapsed = time.perf_counter() - start
    print(render(results, config, machine, elapsed))
    if elapsed > BUDGET_SECONDS:
        print(f"warning: took {elapsed:.0f} s, over the {BUDGET_SECONDS:.0f} s budget")
    return 0


if __name__ == "__main__":
    sys.exit(main())
