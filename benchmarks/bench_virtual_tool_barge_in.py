"""Model requests wasted by a barge-in into a tool step (issue 23, point 2).

The caller asks a question; the model calls a 2.5 s tool; 2.0 s into it the caller starts
speaking, so the tool returns while they speak, before LiveKit decides on the barge-in
(when their turn ends). Each call runs on the virtual clock under LiveKit 1.8.9's default
turn handling with ``min_words=3``, two ways:

* **turnfsm**: a ``TurnAgent`` with a controller attached, its policy's defaults (the
  reply to the tool output is held while the caller speaks in the step, until the end of
  their turn decides: ``tool_reply_hold=3.0``);
* **plain LiveKit**: the same agent as a plain ``Agent``.

And two barge-ins:

* **real turn** ("Wait, stop, stop."): LiveKit interrupts. Wasted: the requests for the
  reply to the tool output (never played) and the tools started after the barge-in.
* **backchannel** ("Uh-huh.", under ``min_words``): no interruption (the machine declines
  the turn at LiveKit's end of it, as LiveKit does over a playing reply); the reply to the
  tool output is spoken. Row: end of the backchannel → first frame of that reply.

Goal: 0 wasted requests and 0 tools started after a barge-in LiveKit honours; a
backchannel's reply later than plain LiveKit's by at most ``tool_reply_hold``.
"""

from __future__ import annotations

import asyncio

from livekit.agents import Agent, function_tool

from turnfsm import TurnController, TurnPolicy
from turnfsm.adapters.livekit import TurnAgent, attach
from turnfsm.adapters.sim import clock
from turnfsm.adapters.sim.models import LLMRequest, ScriptedLLM, ScriptedReply, ScriptedToolCall
from turnfsm.adapters.sim.session import SimulatedCall, load_silero_vad
from turnfsm.adapters.sim.speech import LINES, CallScript, UserLine, spoken_line

from .harness import Config, Row, Section, verdict

TOOL_SECONDS = 2.5
BARGE_IN_AFTER = 2.0
ANSWER = "Your appointment is on Tuesday at ten."
QUESTION = LINES["question"].text
BACKCHANNEL = spoken_line("Uh-huh.", duration=0.75, name="bench_uh_huh")
POLICY = TurnPolicy(direction="inbound", first_speaker="user", max_tool_steps=3)


def _reply(request: LLMRequest) -> ScriptedReply:
    if request.chat_ctx.items[-1].type == "function_call_output":
        return ScriptedReply(text=ANSWER)
    if request.last_user_text == QUESTION:
        return ScriptedReply(tool_calls=(ScriptedToolCall("lookup"),))
    return ScriptedReply(text="Okay.")


class _Lookup:
    """The slow tool, counting its starts."""

    started = 0

    @function_tool
    async def lookup(self) -> str:
        """Look up the customer's appointment."""
        self.started += 1
        await asyncio.sleep(TOOL_SECONDS)
        return "Tuesday at ten."


class _TurnLookup(_Lookup, TurnAgent):
    pass


class _PlainLookup(_Lookup, Agent):
    pass


async def _call(variant: str, barge_in: str) -> tuple[int, int, float | None]:
    """(requests answering the tool output never played, tools started after the first,
    end of the barge-in → first frame of the reply to the tool output in ms, if it played)."""
    agent: _Lookup
    controller: TurnController | None = None
    if variant == "turnfsm":
        controller = TurnController(POLICY)
        agent = _TurnLookup(instructions="Look things up.")
    else:
        agent = _PlainLookup(instructions="Look things up.")

    def before_start(session: object) -> None:
        if controller is not None:
            attach(session, controller)  # type: ignore[arg-type]

    llm = ScriptedLLM(_reply)
    call = SimulatedCall(
        CallScript([UserLine(0.3, "question")]),
        agent=agent,  # type: ignore[arg-type]
        llm=llm,
        livekit_defaults=True,
        transcript_sync=True,
        turn_handling={"interruption": {"min_words": 3}},
        before_start=before_start,
    )
    line = LINES["stop"] if barge_in == "real turn" else BACKCHANNEL
    async with call:
        await call.wait_until(lambda: agent.started > 0, timeout=10)
        await call.sleep_until(call.now() + BARGE_IN_AFTER)
        call.audio_input.say_now(line)
        await call.sleep_until(call.now() + 12)
        tool_replies = [
            r for r in llm.requests if r.chat_ctx.items[-1].type == "function_call_output"
        ]
        spoken = ANSWER in [m.text_content for m in call.messages("assistant")]
        wasted = 0 if spoken else len(tool_replies)
        ended = call.ledger.utterances_of(line.name)[0].ended_at
        assert ended is not None
        # nothing plays before the reply to the tool output: it is the first segment
        segments = call.audio_output.segments
        reply_ms = (segments[0].captured_at - ended) * 1000 if spoken and segments else None
        return wasted, agent.started - 1, reply_ms


def tool_step_barge_in(config: Config) -> Section:
    load_silero_vad()
    figures = {
        (variant, barge_in): clock.run(_call(variant, barge_in))
        for variant in ("turnfsm", "plain LiveKit")
        for barge_in in ("real turn", "backchannel")
    }
    rows: list[Row] = []
    for variant in ("turnfsm", "plain LiveKit"):
        wasted, more_tools, _ = figures[(variant, "real turn")]
        row = Row(f"wasted LLM requests per tool-step barge-in: {variant}", [wasted], "")
        tools = Row(f"tools started after a tool-step barge-in: {variant}", [more_tools], "")
        if variant == "turnfsm":
            row.target = verdict(wasted == 0, f"0; {wasted}")
            tools.target = verdict(more_tools == 0, f"0; {more_tools}")
        rows += [row, tools]
    ours = figures[("turnfsm", "backchannel")][2]
    plain = figures[("plain LiveKit", "backchannel")][2]
    for variant, reply_ms in (("turnfsm", ours), ("plain LiveKit", plain)):
        row = Row(
            f"backchannel in a tool step → its reply, {variant}",
            [reply_ms if reply_ms is not None else float("nan")],
            "ms",
        )
        if variant == "turnfsm" and ours is not None and plain is not None:
            added = ours - plain
            assert POLICY.tool_reply_hold is not None
            limit = POLICY.tool_reply_hold * 1000
            row.ratios = f"{added:+.0f} ms vs plain LiveKit"
            row.target = verdict(added <= limit, f"≤ +{limit:.0f} ms; {added:+.0f} ms")
        rows.append(row)
    return Section(
        "Tool-step barge-in: wasted model requests (virtual clock, LiveKit defaults)",
        rows,
        [
            "One call per figure on the virtual clock; see the module docstring. The "
            "backchannel's reply is held until LiveKit's end of the caller's turn, where "
            "the machine declines it (min_words) and releases the reply.",
        ],
    )


SECTIONS = [tool_step_barge_in]
