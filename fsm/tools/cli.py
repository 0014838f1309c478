"""The ``turnfsm`` command: draw the machine, a call on it, and a call's timeline.

``turnfsm diagram`` prints the machine as Mermaid (default) or DOT, or renders SVG/PNG
with Graphviz; ``--trace`` overlays a recorded call. ``turnfsm diagrams`` writes the
committed diagrams (``make diagrams``) and, with ``--check``, fails when they are
stale. ``turnfsm timeline`` draws a recorded call as an SVG timeline. ``turnfsm report``
sums many recorded calls into one HTML page, reading one trace at a time: a trace it
cannot read or fold is listed (by a printable name) and the others are reported. ``turnfsm
fuzz`` runs seeded simulated calls (it imports :mod:`turnfsm.adapters.sim.fuzz`, and so
LiveKit, only when run).

This is the only module that reads or writes files or runs a program. Every line it
prints goes through :func:`turnfsm.tools.escape.printable`, file names through
:func:`~turnfsm.tools.escape.printable_path`: nothing a trace or a file name holds reaches the
terminal raw, and no name can forge a second ``turnfsm:`` line.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from .. import __version__
from ..machine import TurnChart, TurnMachine
from ..policy import Seconds, TurnPolicy, option_of
from ..trace import Trace, TraceFormatError
from .diagram import (
    build_diagram,
    parallel_regions,
    to_dot,
    to_mermaid,
    to_overview,
    ways_to_end,
    whole_call_transitions,
)
from .escape import printable, printable_path
from .report import CallFilter, CallReport, timeline_file
from .timeline import render_timeline

if sys.version_info >= (3, 11):
    import tomllib
else:  # the same parser, as a package, before Python 3.11
    import tomli as tomllib

PRESETS: dict[str, TurnPolicy] = {
    direction: TurnPolicy(
        direction=direction,
        greeting="Hello!",
        idle_timeout=10.0,
        max_call_duration=600.0,
    )
    for direction in ("outbound", "inbound")
}
"""``--policy outbound|inbound``: that direction's defaults, with idle re-prompts and a
maximum call duration turned on so that every feature is drawn."""

FORMATS: tuple[str, ...] = ("mermaid", "dot", "svg", "png")
SUFFIX_FORMATS: dict[str, str] = {
    ".mmd": "mermaid",
    ".mermaid": "mermaid",
    ".dot": "dot",
    ".gv": "dot",
    ".svg": "svg",
    ".png": "png",
}
"""The format ``diagram -o FILE`` picks from the file's suffix; other suffixes are refused."""

POLICY_SUFFIXES: tuple[str, ...] = (".json", ".toml")

MISSING_DOT = (
    "Graphviz 'dot' program not found on PATH: install graphviz to render svg/png "
    "(mermaid and dot need nothing)"
)


class CliError(Exception):
    """A problem to report in one line, without a traceback."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 ok, 1 error, 2 usage)."""
    args = _parser().parse_args(argv)
    try:
        return int(args.run(args))
    except CliError as error:
        _say("error", str(error))
        return 1
    except Exception as error:  # a bug of ours: one line, never a traceback for any input
        _say("internal error", f"{_internal(error)} (please report it)")
        return 1


def _say(kind: str, message: str) -> None:
    """One line on stderr: ``turnfsm: <kind>: <message>``, made printable."""
    print(f"turnfsm: {kind}: {printable(message)}", file=sys.stderr)


def _internal(error: BaseException) -> str:
    return printable(f"{type(error).__name__}: {error}")[:300]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="turnfsm", description="Draw the turn machine and recorded calls."
    )
    parser.add_argument("--version", action="version", version=f"turnfsm {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    diagram = commands.add_parser(
        "diagram",
        help="draw the machine (Mermaid by default)",
        description="Draw the turn machine from its class, optionally with a call on it.",
    )
    diagram.add_argument(
        "--policy",
        metavar="outbound|inbound|FILE.json|FILE.toml",
        help="draw what can happen under this policy: a preset, or a file holding a JSON "
        "object or TOML table of TurnPolicy fields (default: every transition; with "
        "--trace, the trace's policy)",
    )
    diagram.add_argument(
        "--format", choices=FORMATS, help="output format (default: from -o's suffix, or mermaid)"
    )
    diagram.add_argument(
        "--trace", type=Path, metavar="CALL.jsonl", help="highlight and count this call"
    )
    diagram.add_argument("-o", "--output", type=Path, help="write here instead of stdout")
    diagram.set_defaults(run=_diagram)

    diagrams = commands.add_parser(
        "diagrams",
        help="write the committed diagrams",
        description="Write overview.mmd, and <preset>.mmd, .dot and (with Graphviz) .svg "
        "for each preset.",
    )
    diagrams.add_argument("--out", type=Path, default=Path("diagrams"), help="directory")
    diagrams.add_argument(
        "--check", action="store_true", help="write nothing; fail if the text files are stale"
    )
    diagrams.add_argument(
        "--readme",
        type=Path,
        help="also update this file's generated blocks: <!-- diagram:overview --> and "
        "<!-- policy:options -->",
    )
    diagrams.set_defaults(run=_diagrams)

    timeline = commands.add_parser(
        "timeline",
        help="draw a recorded call as an SVG timeline",
        description="Draw states, speech, tool rounds and effects of a call over time.",
    )
    timeline.add_argument("trace", type=Path, metavar="CALL.jsonl")
    timeline.add_argument("-o", "--output", type=Path, help="write the SVG here (default stdout)")
    timeline.set_defaults(run=_timeline)

    report = commands.add_parser(
        "report",
        help="sum many recorded calls into one HTML page",
        description="How calls ended, time to greeting, overlaps, barge-ins, dropped text, "
        "tool caps, time per state and every call's path on the diagram, in one page.",
    )
    report.add_argument(
        "traces", type=Path, nargs="+", metavar="CALL.jsonl|DIR", help="traces, or folders of them"
    )
    report.add_argument(
        "-o",
        "--output",
        type=Path,
        help="write the HTML here (default stdout), and each call's timeline beside it, "
        "in <name>-timelines/, linked from the calls table",
    )
    report.add_argument(
        "--policy",
        action="append",
        default=[],
        metavar="ID",
        help="only calls under this policy (its id in a report's 'By policy'); repeatable",
    )
    report.add_argument(
        "--agent",
        action="append",
        default=[],
        metavar="NAME",
        help="only calls taken by this agent ('unknown': traces that do not say); repeatable",
    )
    report.add_argument(
        "--day",
        action="append",
        default=[],
        metavar="YYYY-MM-DD",
        help="only calls started on this day (as their trace's start time says); repeatable",
    )
    report.add_argument(
        "--no-timelines", action="store_true", help="do not write the calls' timelines"
    )
    report.set_defaults(run=_report)
    check = commands.add_parser(
        "check",
        help="check a policy (and your rules or machine) against every invariant",
        description="Explore every reachable configuration and run random calls; print "
        "the coverage and each invariant breach with its shortest event path.",
    )
    check.add_argument("policy", metavar="POLICY", help="FILE.json, FILE.toml or module:attr")
    check.add_argument("--rules", metavar="module:Class", help="a TurnRules subclass")
    check.add_argument("--machine", metavar="module:attr", help="a class from build_machine")
    check.add_argument(
        "--events", metavar="module:attr", help="the extension's own events: a list of them"
    )
    check.add_argument(
        "--random-calls", type=int, default=300, metavar="N", help="0 to skip (default 300)"
    )
    check.set_defaults(run=_check)

    fuzz = commands.add_parser(
        "fuzz",
        help="run seeded simulated calls on the virtual clock and judge them",
        description="Draw whole calls from seeds (policy, LiveKit settings, caller lines and "
        "timing, tools, handoffs, faults), run each in a real AgentSession on the virtual "
        "clock, and judge what the caller got. Prints one line per failing call, then "
        "'N calls, K failures, X calls/min'. Needs turnfsm[livekit].",
    )
    fuzz.add_argument("--seed", type=int, default=0, help="the first call's seed (default 0)")
    fuzz.add_argument("--calls", type=int, default=100, help="how many calls (default 100)")
    fuzz.add_argument(
        "--realtime",
        action="store_true",
        help="realtime calls: the real openai.realtime.RealtimeModel against the in-process "
        "OpenAI Realtime protocol server (its latency, cancel delay, transcript lead, speech "
        "rate, server VAD and faults drawn too)",
    )
    fuzz.add_argument("--workers", type=int, help="worker processes (default: one per core)")
    fuzz.add_argument("--replay", type=int, metavar="SEED", help="run one call again")
    fuzz.add_argument(
        "--out", type=Path, help="write each failing call's (or the replayed call's) files here"
    )
    fuzz.add_argument(
        "--known",
        type=Path,
        metavar="FILE.toml",
        help="a regression list: calls it lists as open that fail as listed are reported "
        "as known, not counted as failures",
    )
    fuzz.set_defaults(run=_fuzz)
    return parser


# -- commands -------------------------------------------------------------------------------


def _diagram(args: argparse.Namespace) -> int:
    trace = _read_trace(args.trace) if args.trace else None
    policy = _policy(args.policy) if args.policy else (trace.policy if trace else None)
    diagram = build_diagram(policy=policy, trace=trace)
    for warning in diagram.warnings:
        _say("warning", warning)
    fmt = _diagram_format(args.format, args.output)
    if fmt == "mermaid":
        _emit(to_mermaid(diagram).encode(), args.output)
    elif fmt == "dot":
        _emit(to_dot(diagram).encode(), args.output)
    else:
        _emit(render_graphviz(to_dot(diagram), fmt), args.output)
    return 0


def _diagram_format(fmt: str | None, output: Path | None) -> str:
    """The format to write: ``--format``, else the output's suffix, else Mermaid. An
    output suffix that names no format, or another one than ``--format``, is refused
    (``-o x.pdf`` must not quietly hold Mermaid text)."""
    if output is None:
        return fmt or "mermaid"
    suffix = output.suffix.lower()
    if suffix not in SUFFIX_FORMATS:
        known = ", ".join(SUFFIX_FORMATS)
        raise CliError(
            f"cannot write a diagram as {printable_path(output)}: name the output {known}"
        )
    if fmt is not None and SUFFIX_FORMATS[suffix] != fmt:
        raise CliError(
            f"--format {fmt} but {printable_path(output)} names {SUFFIX_FORMATS[suffix]}"
        )
    return SUFFIX_FORMATS[suffix]


def _diagrams(args: argparse.Namespace) -> int:
    if args.check:
        stale = stale_diagrams(args.out)
        for message in stale:
            _say("stale", message)
        return 1 if stale else 0
    args.out.mkdir(parents=True, exist_ok=True)
    if args.readme:
        update_readme(args.readme)
    files = committed_diagrams()
    for name, text in files.items():
        _write(args.out / name, text.encode())
    if shutil.which("dot") is None:
        _say("warning", f"skipped the svg files: {MISSING_DOT}")
        return 0
    for name in PRESETS:
        _write(args.out / f"{name}.svg", render_graphviz(files[f"{name}.dot"], "svg"))
    return 0


def _timeline(args: argparse.Namespace) -> int:
    if args.output and args.output.suffix != ".svg":
        raise CliError(
            f"the timeline is an SVG: name the output *.svg, got {printable_path(args.output)}"
        )
    _emit(render_timeline(_read_trace(args.trace)).encode(), args.output)
    return 0


def _report(args: argparse.Namespace) -> int:
    if args.output and args.output.suffix not in (".html", ".htm"):
        name = printable_path(args.output)
        raise CliError(f"the report is an HTML page: name the output *.html, got {name}")
    days = [day for day in args.day if not re.fullmatch(r"\d{4}-\d{2}-\d{2}|unknown", day)]
    if days:
        raise CliError(f"--day must be YYYY-MM-DD (or unknown), got {days[0]!r}")
    timelines = (
        None
        if args.output is None or args.no_timelines
        else args.output.with_name(f"{args.output.stem}-timelines")
    )
    report = CallReport(
        CallFilter(frozenset(args.policy), frozenset(args.agent), frozenset(args.day)),
        timelines=timelines.name if timelines is not None else "",
    )
    for path in _trace_files(args.traces):
        name = printable_path(path)
        try:
            trace = Trace.read(path)
        except OSError as error:
            _skip(report, name, f"cannot read it: {error.strerror}")
            continue
        except TraceFormatError as error:
            _skip(report, name, str(error))
            continue
        try:
            _fold(report, trace, name, timelines)
        except CliError:
            raise
        except Exception as error:  # a bug of ours: this trace alone is left out
            _skip(report, name, f"internal error: {_internal(error)} (please report it)")
    if not report.calls:
        raise CliError(
            f"no readable trace among {report.unreadable} file(s)"
            if not report.filter
            else f"no call of {report.filter.describe()} among the traces read"
        )
    _emit_parts(report.render_parts(), args.output)
    return 0


def _fold(report: CallReport, trace: Trace, name: str, timelines: Path | None) -> None:
    """Count one read trace (when the filter takes it), with its timeline written."""
    for warning in trace.warnings():
        _say("warning", f"{name}: {warning}")
    if not report.filter.takes(trace):
        return
    if timelines is not None:
        timelines.mkdir(exist_ok=True)
        _write(timelines / timeline_file(report.calls + 1), render_timeline(trace).encode())
    report.add(trace, source=os.path.basename(name), timeline=timelines is not None)


def _skip(report: CallReport, name: str, problem: str) -> None:
    _say("warning", f"skipped {name}: {problem}")
    report.skip(name, problem)


def _trace_files(paths: list[Path]) -> Iterator[str | Path]:
    """Each path, or the ``*.jsonl`` files of a folder (as listed: never all at once).

    A folder's files are yielded as plain strings: a ``Path`` interns each name for the
    life of the process, which would grow with the number of traces read."""
    for path in paths:
        if path.is_dir():
            with os.scandir(path) as entries:
                for entry in entries:
                    if entry.name.endswith(".jsonl") and entry.is_file():
                        yield entry.path
        else:
            yield path


# -- committed diagrams ---------------------------------------------------------------------


def committed_diagrams(machine_class: type[TurnChart] = TurnMachine) -> dict[str, str]:
    """The text files ``turnfsm diagrams`` writes, by file name: the whole machine's
    overview (``overview.mmd``, the README's), then Mermaid and DOT in full per preset."""
    files = {"overview.mmd": to_overview(build_diagram(machine_class))}
    for name, policy in PRESETS.items():
        diagram = build_diagram(machine_class, policy=policy)
        files[f"{name}.mmd"] = to_mermaid(diagram)
        files[f"{name}.dot"] = to_dot(diagram)
    return files


README_BLOCK = re.compile(r"(<!-- diagram:overview -->\n).*?(<!-- /diagram -->)", re.S)
"""Where the README holds the generated overview."""


def readme_diagram(machine_class: type[TurnChart] = TurnMachine) -> str:
    """The README's inline diagram: the overview in a Mermaid block, then the
    transitions it leaves to a caption (those of the whole call, the ways to the end)."""
    diagram = build_diagram(machine_class)
    whole_call = whole_call_transitions(diagram)
    targets = sorted({target for _, target in whole_call})
    caption = "".join(
        "From every state of the call, "
        + ", ".join(f"`{event}`" for event, to in whole_call if to == target)
        + f" lead to `{target}`. "
        for target in targets
    )
    for final in sorted({target for _, target, _ in ways_to_end(diagram)}):
        ways = [
            f"`{source}` ({', '.join(f'`{event}`' for event in events)})"
            for source, target, events in ways_to_end(diagram)
            if target == final
        ]
        caption += f"`{final}` is also reached from {', '.join(ways)}. "
    for state, regions in parallel_regions(diagram):
        listed = "; ".join(f"`{region}` ({_listed(states)})" for region, states in regions)
        caption += f"In `{state}`, its regions run side by side: {listed}. "
    return f"```mermaid\n{to_overview(diagram)}```\n\n{caption.rstrip()}\n"


def _listed(states: list[str]) -> str:
    return ", ".join(f"`{state}`" for state in states)


README_OPTIONS = re.compile(r"(<!-- policy:options -->\n).*?(<!-- /policy -->)", re.S)
"""Where the README holds the generated option table."""


def option_table() -> str:
    """The README's option table: one row per :class:`~turnfsm.policy.TurnPolicy` field,
    in declaration order, from its :class:`~turnfsm.policy.Option`."""
    rows = ["| option | default | meaning | also known as |", "|---|---|---|---|"]
    for field in attrs.fields(TurnPolicy):
        option = option_of(field)
        cells = (f"`{field.name}`", _shown_default(field), option.meaning, option.known_as)
        rows.append("|" + "|".join(f" {cell} " if cell else " " for cell in cells) + "|")
    return "\n".join(rows) + "\n"


def _shown_default(field: attrs.Attribute) -> str:
    """A field's default as the table shows it: its own words, else the value as it is
    written in Python (with its unit, seconds)."""
    shown = option_of(field).shown_default
    if shown is not None:
        return shown
    value = json.dumps(field.default) if isinstance(field.default, str) else repr(field.default)
    unit = " s" if isinstance(field.validator, Seconds) and field.default is not None else ""
    return f"`{value}`{unit}"


def _between_markers(generated: str) -> Callable[[re.Match[str]], str]:
    """A block's replacement: ``generated`` between the block's markers."""
    return lambda match: match[1] + generated + match[2]


def update_readme(readme: Path, machine_class: type[TurnChart] = TurnMachine) -> bool:
    """Rewrite ``readme``'s generated diagram and option table; whether it changed."""
    text = readme.read_text(encoding="utf-8")
    updated = text
    for block, marker, generated in (
        (README_BLOCK, "<!-- diagram:overview -->", readme_diagram(machine_class)),
        (README_OPTIONS, "<!-- policy:options -->", option_table()),
    ):
        if not block.search(text):
            raise CliError(f"{printable_path(readme)} has no {marker} block to update")
        updated = block.sub(_between_markers(generated), updated)
    if updated != text:
        readme.write_text(updated, encoding="utf-8")
    return updated != text


def stale_diagrams(out: Path, machine_class: type[TurnChart] = TurnMachine) -> list[str]:
    """One message per committed text file that differs from a fresh rendering."""
    stale = []
    for name, text in committed_diagrams(machine_class).items():
        path = out / name
        if not path.exists():
            stale.append(f"{printable_path(path)} is missing: run `make diagrams`")
        elif path.read_text(encoding="utf-8") != text:
            stale.append(f"{printable_path(path)} differs from the machine: run `make diagrams`")
    return stale


def _check(args: argparse.Namespace) -> int:
    from ..events import Event
    from ..rules import TurnRules
    from .check import format_check, run_check

    policy = _check_policy(args.policy)
    options: dict[str, Any] = {"random_calls": args.random_calls}
    if args.rules:
        options["rules_class"] = _import_class(
            args.rules, "--rules", TurnRules, "a TurnRules subclass"
        )
    if args.machine:
        options["machine_class"] = _import_class(
            args.machine, "--machine", TurnChart, "a class from build_machine"
        )
    if args.events:
        options["extra_events"] = tuple(_import(args.events, "--events"))
        if not all(isinstance(event, Event) for event in options["extra_events"]):
            raise CliError(f"--events must name a list of turnfsm events, got {args.events!r}")
    try:
        report = run_check(policy, **options)
    except Exception as error:  # the user's rules or machine: report, never a traceback
        raise CliError(f"the check could not run: {type(error).__name__}: {error}") from None
    print("\n".join(map(printable, format_check(report).splitlines())))
    return 0 if report.ok else 1


FUZZ_RUNNER = "turnfsm.adapters.sim.fuzz.runner:main"
"""What ``turnfsm fuzz`` runs: it drives LiveKit sessions, so it is imported only when the
command runs (importing this module loads no LiveKit)."""


def _fuzz(args: argparse.Namespace) -> int:
    runner = _import(FUZZ_RUNNER, "fuzz")
    try:
        return int(runner(args, echo=lambda line: print(printable(line), flush=True)))
    except ValueError as error:
        raise CliError(str(error)) from None


def _import_class(spec: str, flag: str, base: type, what: str) -> type:
    """The class ``spec`` (``module:attr``) names, which must derive from ``base``."""
    value = _import(spec, flag)
    if not (isinstance(value, type) and issubclass(value, base)):
        raise CliError(f"{flag} must name {what}, got {spec!r}")
    return value


def _check_policy(spec: str) -> TurnPolicy:
    if ":" in spec and not Path(spec).exists():
        value = _import(spec, "POLICY")
    elif Path(spec).suffix in POLICY_SUFFIXES:
        return _policy_file(Path(spec))
    else:
        raise CliError(f"POLICY must be a .json or .toml file or module:attr, got {spec!r}")
    if isinstance(value, TurnPolicy):
        return value
    if not isinstance(value, Mapping):
        raise CliError(f"{spec}: expected a TurnPolicy or a table of its fields, got {value!r}")
    try:
        return TurnPolicy.from_dict(value)
    except ValueError as error:
        raise CliError(f"{spec}: {error}") from None


def _import(spec: str, option: str) -> Any:
    """What ``spec`` (``module:attr``) names in the user's code. Whatever importing it
    does wrong is the user's to fix (a syntax error, an exception, an exit), never a
    check that passed having checked nothing."""
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except SystemExit as exit_:
        raise CliError(
            f"{option}: importing {module_name!r} exited (SystemExit: {exit_.code}): "
            "nothing was checked"
        ) from None
    except Exception as error:  # the user's module: SyntaxError, ImportError, its own raise
        raise CliError(
            f"{option}: cannot import {spec!r}: {type(error).__name__}: {error}"
        ) from None
    try:
        return getattr(module, attr)
    except AttributeError as error:
        raise CliError(f"{option}: cannot import {spec!r}: {error}") from None


# -- files and programs ---------------------------------------------------------------------


def render_graphviz(dot_text: str, fmt: str) -> bytes:
    """Render DOT text to ``fmt`` (``svg``, ``png``) with the Graphviz ``dot`` program.

    Raises:
        CliError: ``dot`` is not on PATH, or it failed.
    """
    program = shutil.which("dot")
    if program is None:
        raise CliError(MISSING_DOT)
    result = subprocess.run(
        [program, f"-T{fmt}"], input=dot_text.encode(), capture_output=True, check=False
    )
    if result.returncode != 0:
        raise CliError(f"dot -T{fmt} failed: {result.stderr.decode(errors='replace').strip()}")
    return result.stdout


def _policy(spec: str) -> TurnPolicy:
    if spec in PRESETS:
        return PRESETS[spec]
    path = Path(spec)
    if path.suffix not in POLICY_SUFFIXES:
        raise CliError(
            f"--policy must be one of {sorted(PRESETS)} or a .json or .toml file, got {spec!r}"
        )
    return _policy_file(path)


def _policy_file(path: Path) -> TurnPolicy:
    """A policy file: a JSON object or a TOML table of ``TurnPolicy`` fields, checked
    field by field (an unknown key is named, with the closest field)."""
    try:
        text = path.read_text(encoding="utf-8")
        data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
        return TurnPolicy.from_dict(data)
    except OSError as error:
        raise CliError(f"cannot read {printable_path(path)}: {error.strerror}") from None
    except UnicodeDecodeError:
        raise CliError(f"{printable_path(path)}: not UTF-8 text") from None
    except (ValueError, tomllib.TOMLDecodeError) as error:  # JSONDecodeError is a ValueError
        raise CliError(f"{printable_path(path)}: {error}") from None


def _read_trace(path: str | Path) -> Trace:
    name = printable_path(path)
    try:
        trace = Trace.read(path)
    except OSError as error:
        raise CliError(f"cannot read {name}: {error.strerror}") from None
    except TraceFormatError as error:
        raise CliError(f"{name}: {error}") from None
    for warning in trace.warnings():
        _say("warning", f"{name}: {warning}")
    return trace


def _emit(data: bytes, output: Path | None) -> None:
    if output is None:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    else:
        _write(output, data)


def _emit_parts(parts: Iterator[str], output: Path | None) -> None:
    """Write text piece by piece (a page is never held whole)."""
    try:
        if output is None:
            sys.stdout.buffer.writelines(part.encode() for part in parts)
            sys.stdout.buffer.flush()
        else:
            with open(output, "wb") as stream:
                stream.writelines(part.encode() for part in parts)
    except OSError as error:
        where = "stdout" if output is None else printable_path(output)
        raise CliError(f"cannot write {where}: {error.strerror}") from None


def _write(path: Path, data: bytes) -> None:
    try:
        path.write_bytes(data)
    except OSError as error:
        raise CliError(f"cannot write {printable_path(path)}: {error.strerror}") from None
