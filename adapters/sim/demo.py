"""``make demo``: an offline simulated outbound call through a real ``AgentSession``.

The callee is recorded speech played in real time, heard by the real silero VAD; the
LLM, STT and TTS are scripted. turnfsm is attached exactly as in production. The demo
prints every state change as it happens, then writes the call's trace (JSON lines), its
timeline (SVG) and the machine's diagram with the call overlaid into an output folder.

Run ``python -m turnfsm.adapters.sim.demo --scenario NAME [--out DIR] [--settings ROW]``;
the call runs under LiveKit's default turn handling with a transcript synchronizer
(``--settings livekit-defaults``, the default) or the simulation's (``--settings sim``:
no preemptive generation, VAD interruption mode, no synchronizer). Scenarios:

* ``greeting_barge_in`` (default): the callee says "Hello?", the locked greeting starts
  and the callee talks over it; the greeting plays whole and the overlap is answered as
  one whole turn.
* ``interrupt_mid_answer``: the callee asks a question and cuts the long answer short;
  only the spoken part of the answer stays in the chat context.
* ``tool_loop``: the model calls a tool on every step; the machine allows exactly
  ``max_tool_steps`` rounds, then one spoken reply without tools.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from livekit.agents import function_tool

from turnfsm import TurnController, TurnPolicy
from turnfsm.events import CallAnswered, CallEnded
from turnfsm.tools import cli as turnfsm_cli
from turnfsm.trace import TraceStep

from ..livekit import TurnAdapter, TurnAgent, attach
from . import clock
from .models import ScriptedLLM
from .session import SimulatedCall
from .speech import CallScript, UserLine

SETTINGS = ("livekit-defaults", "sim")
"""The LiveKit settings a demo call can run under (LiveKit's own first)."""

GREETING = "Hi, this is Ada from Acme Dental, calling about your appointment tomorrow."


class DemoAgent(TurnAgent):
    """The demo's agent: one slow lookup tool."""

    def __init__(self) -> None:
        super().__init__(instructions="You confirm dental appointments.")

    @function_tool
    async def lookup_appointment(self) -> str:
        """Look up the callee's appointment."""
        await asyncio.sleep(0.3)
        return "Tomorrow at 9:30 with Dr. Chen."


@dataclass(frozen=True)
class Scenario:
    """A scripted call: what the callee says when, the model's replies, the policy."""

    description: str
    lines: tuple[UserLine, ...]
    policy: TurnPolicy
    hang_up_at: float
    llm: Callable[[], ScriptedLLM]
    interrupt_at: float | None = None
    notes: tuple[str, ...] = field(default=())


SCENARIOS: dict[str, Scenario] = {
    "greeting_barge_in": Scenario(
        description="the callee talks over the locked greeting",
        lines=(UserLine(1.0, "hello"), UserLine(3.5, "long_overlap")),
        policy=TurnPolicy(direction="outbound", greeting=GREETING),
        hang_up_at=14.0,
        llm=lambda: ScriptedLLM(["No problem, I'll call you back this afternoon. Drive safe!"]),
        notes=(
            '"Hello?" is answered by the greeting and stays in the history before it;',
            "the overlap is answered once, whole, after the greeting.",
        ),
    ),
    "interrupt_mid_answer": Scenario(
        description="the callee cuts a long answer short",
        lines=(UserLine(1.0, "hello"), UserLine(8.0, "question"), UserLine(12.5, "stop")),
        policy=TurnPolicy(direction="outbound", greeting="Hi, this is Ada from Acme Dental."),
        hang_up_at=17.0,
        llm=lambda: ScriptedLLM(
            [
                "We open at nine. On Tuesdays and Thursdays we stay open late, until seven "
                "in the evening. On Saturdays we open at ten and close at two.",
                "Sure, go ahead.",
            ]
        ),
        notes=("only the words the callee heard stay in the chat context.",),
    ),
    "tool_loop": Scenario(
        description="the model calls a tool on every step",
        lines=(UserLine(1.0, "hello"), UserLine(7.0, "question")),
        policy=TurnPolicy(direction="outbound", greeting="Hi, this is Ada.", max_tool_steps=2),
        hang_up_at=15.0,
        llm=lambda: ScriptedLLM(
            default_reply="Your appointment is tomorrow at 9:30.",
            always_call_tool="lookup_appointment",
        ),
        notes=("exactly max_tool_steps=2 tool rounds, then one reply without tools.",),
    ),
}


async def run_scenario(
    name: str,
    out: Path,
    *,
    settings: str = "livekit-defaults",
    echo: Callable[[str], None] = print,
) -> Path:
    """Run scenario ``name``; write ``call.jsonl``, ``timeline.svg`` and the diagram to ``out``.

    ``settings`` is one of :data:`SETTINGS`.

    Returns:
        The trace file.
    """
    scenario = SCENARIOS[name]
    if settings not in SETTINGS:
        raise ValueError(f"settings must be one of {SETTINGS}, got {settings!r}")
    livekit_defaults = settings == "livekit-defaults"
    controller = TurnController(scenario.policy, strict=True, keep_text=True)
    adapters: list[TurnAdapter] = []
    call = SimulatedCall(
        CallScript(list(scenario.lines)),
        agent=DemoAgent(),
        llm=scenario.llm(),
        livekit_defaults=livekit_defaults,
        transcript_sync=livekit_defaults,
        before_start=lambda session: adapters.append(attach(session, controller)),
    )
    echo(f"turnfsm demo: {name} — {scenario.description} (LiveKit settings: {settings})")
    echo("  time  event                        state")
    printed = 0
    async with call:
        adapter = adapters[0]
        adapter.dispatch(CallAnswered(at=adapter.now()))
        assert controller.trace is not None
        while call.now() < scenario.hang_up_at:
            await asyncio.sleep(0.05)
            printed = _echo_steps(controller.trace.steps, printed, echo)
        adapter.dispatch(CallEnded(at=adapter.now(), reason="demo_over"))
        history = [
            (item.role, item.text_content)
            for item in call.session.history.items
            if item.type == "message"
        ]
    _echo_steps(controller.trace.steps, printed, echo)
    echo("\nchat history:")
    for role, text in history:
        echo(f"  {role:>9}: {text}")
    for note in scenario.notes:
        echo(f"  → {note}")
    return _write_outputs(controller, out, echo)


def _echo_steps(steps: Sequence[TraceStep], printed: int, echo: Callable[[str], None]) -> int:
    for step in steps[printed:]:
        moved = f"{step.before} → {step.after}" if step.before != step.after else step.after
        effects = ", ".join(effect.name for effect in step.effects)
        echo(
            f"{step.at:6.2f}  {step.event.name:28} {moved}" + (f"  [{effects}]" if effects else "")
        )
    return len(steps)


def _write_outputs(controller: TurnController, out: Path, echo: Callable[[str], None]) -> Path:
    assert controller.trace is not None
    out.mkdir(parents=True, exist_ok=True)
    trace_file = out / "call.jsonl"
    controller.trace.write(trace_file)
    commands = [
        ["timeline", str(trace_file), "-o", str(out / "timeline.svg")],
        ["diagram", "--trace", str(trace_file), "-o", str(out / "diagram.mmd")],
    ]
    if shutil.which("dot") is not None:
        commands.append(
            [
                "diagram",
                "--trace",
                str(trace_file),
                "--format",
                "svg",
                "-o",
                str(out / "diagram.svg"),
            ]
        )
    for command in commands:
        if turnfsm_cli.main(command) != 0:
            raise RuntimeError(f"turnfsm {' '.join(command)} failed")
    echo(f"\nwrote {out}/: " + ", ".join(sorted(path.name for path in out.iterdir())))
    return trace_file


def main(argv: list[str] | None = None) -> int:
    """Command line entry: ``python -m turnfsm.adapters.sim.demo``."""
    parser = argparse.ArgumentParser(prog="turnfsm-demo", description=__doc__.split("\n")[0])
    parser.add_argument("--scenario", choices=sorted(SCENARIOS), default="greeting_barge_in")
    parser.add_argument("--out", type=Path, default=Path("demo-output"))
    parser.add_argument("--settings", choices=SETTINGS, default="livekit-defaults")
    parser.add_argument(
        "--real-time",
        action="store_true",
        help="run the call on the wall clock instead of the virtual one (same call, slower)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    started = time.monotonic()
    scenario = run_scenario(args.scenario, args.out, settings=args.settings)
    if args.real_time:
        asyncio.run(scenario)
    else:
        clock.run(scenario)
    print(f"done in {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
