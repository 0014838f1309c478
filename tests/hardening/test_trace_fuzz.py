"""Issue 11.2: mutation fuzzing of valid traces. Every mutant is refused with a
:class:`~turnfsm.TraceFormatError`, or it replays, overlays and draws without error.

Before, one-field mutations of a valid trace were accepted about half the time and one
in seven crashed replay, ``diagram --trace`` or ``timeline`` with a raw exception. Here
:data:`MUTANTS` mutants a run (a fixed seed: the same mutants every run) change one
value somewhere in a line (a field of the step, its event, one of its effects, or the
header's policy) to a value from a hostile palette, delete or add a key, or damage the
text or the bytes of a line; each then goes through everything a user can do with a
trace file. An accepted mutant must also give valid XML for the timeline and Mermaid
whose every line is one the generator writes.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

from hardening_calls import assert_safe_mermaid, recorded

from turnfsm import Trace, TraceFormatError, replay
from turnfsm.tools.diagram import build_diagram, to_dot, to_mermaid
from turnfsm.tools.timeline import render_timeline

SEED = 20261201
MUTANTS = 1_200

PALETTE: list[Any] = [
    None, True, False, 0, -1, 7, 10**40, -(10**25), 1e308, -0.0, 0.25, -3.5, "", "x",
    "listening", "ended", "greeting", "idle", "say", "\u0000", "\x1b[2J", "\ud800",
    "\ufffe", "<script>alert(1)</script>", "a\n%% injected\nb", "]]>", "\u202e",
    "x" * 5_000, [], {}, [1, 2], {"name": "say"}, [{"name": "interrupt"}],
    {"name": "start_timer", "timer": "idle", "seconds": 1e300},
]  # fmt: skip
"""Values a mutation writes: wrong kinds, out of range, syntax of every output."""


def mutate_value(lines: list[str], rng: random.Random) -> list[str]:
    """Set, delete or add one key somewhere in one line."""
    index = rng.randrange(len(lines))
    record = json.loads(lines[index])
    targets: list[dict[str, Any]] = [record]
    if index == 0:
        targets.append(record["policy"])
    else:
        targets.append(record["event"])
        targets += record["effects"]
    target = rng.choice(targets)
    action = rng.random()
    if action < 0.75 and target:
        target[rng.choice(sorted(target))] = rng.choice(PALETTE)
    elif action < 0.9 and target:
        del target[rng.choice(sorted(target))]
    else:
        target[rng.choice(["name", "at", "text", "extra", "speech_id", "dropped_steps"])] = (
            rng.choice(PALETTE)
        )
    mutant = list(lines)
    mutant[index] = json.dumps(record)
    return mutant


def mutate_text(lines: list[str], rng: random.Random) -> list[str]:
    """Damage the text: a character changed, a line cut, doubled, dropped or swapped."""
    mutant = list(lines)
    index = rng.randrange(len(mutant))
    line = mutant[index]
    kind = rng.randrange(5)
    if kind == 0:
        at = rng.randrange(len(line))
        mutant[index] = line[:at] + rng.choice('{}[]":,0-9eE\\ ') + line[at + 1 :]
    elif kind == 1:
        mutant[index] = line[: rng.randrange(len(line))]
    elif kind == 2:
        mutant.insert(index, line)
    elif kind == 3 and len(mutant) > 1:
        del mutant[index]
    else:
        other = rng.randrange(len(mutant))
        mutant[index], mutant[other] = mutant[other], mutant[index]
    return mutant


def mutate_bytes(lines: list[str], rng: random.Random) -> bytes:
    """Damage the bytes of the file: invalid UTF-8, a NUL, a byte flipped."""
    data = bytearray("\n".join(lines).encode())
    at = rng.randrange(len(data))
    data[at : at + 1] = rng.choice([b"\xff", b"\xc3", b"\x00", bytes([data[at] ^ 0x20])])
    return bytes(data)


def use(trace: Trace) -> None:
    """Everything a user does with a trace file: replay it, overlay it, draw it."""
    if not trace.dropped:
        replay(trace)
    diagram = build_diagram(trace=trace)
    mermaid = to_mermaid(diagram)
    to_dot(diagram)
    assert_safe_mermaid(mermaid)
    svg = render_timeline(trace)
    ElementTree.fromstring(svg.encode("utf-8"))  # valid XML, encodable


def test_every_mutant_is_refused_or_replays_and_draws(
    tmp_path: Path, summary_line: Callable[[str], None]
) -> None:
    rng = random.Random(SEED)
    bases = [
        recorded(1).to_jsonl().splitlines(),
        recorded(3, keep_text=True).to_jsonl().splitlines(),
    ]
    outcomes: Counter[str] = Counter()
    refusals: Counter[str] = Counter()
    path = tmp_path / "mutant.jsonl"
    for number in range(MUTANTS):
        lines = rng.choice(bases)
        kind = rng.choices(["value", "text", "bytes"], weights=[6, 3, 1])[0]
        try:
            if kind == "bytes":
                path.write_bytes(mutate_bytes(lines, rng))
                trace = Trace.read(path)
            else:
                mutant = (mutate_value if kind == "value" else mutate_text)(lines, rng)
                trace = Trace.parse(mutant)
        except TraceFormatError as error:
            named = re.match(r"^line \d+: (\w+\W?\w*)", str(error))
            if named is None:
                raise AssertionError(f"mutant {number}: no line named: {error}") from error
            outcomes["refused"] += 1
            refusals[named.group(1)] += 1
            continue
        try:
            use(trace)
        except Exception as error:
            raise AssertionError(f"mutant {number} ({kind}) accepted, then {error!r}") from error
        outcomes["accepted"] += 1
    assert sum(outcomes.values()) == MUTANTS >= 1_000
    assert outcomes["accepted"] > MUTANTS // 10  # the palette does not only break things
    summary_line(
        f"trace fuzz: {MUTANTS} mutants (seed {SEED}): {outcomes['refused']} refused with "
        f"TraceFormatError, {outcomes['accepted']} replayed, overlaid and drawn; "
        f"top refusals {refusals.most_common(4)}"
    )
