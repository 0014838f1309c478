"""What a fuzzed call is: everything drawn from its seed, as plain data (no LiveKit).

:func:`draw_call` turns a seed into a :class:`CallPlan`: the world (:data:`WORLDS`: the
pipeline, or a realtime model on the in-process protocol server, whose calls are a
:class:`RealtimeCallPlan`), the turnfsm policy, LiveKit's settings,
the models' pace, what the caller says and when (:class:`Cue`), how the model answers each
turn (:class:`ReplyPlan`: text, tool rounds, a handoff), and the faults. The same seed
draws the same plan in any process (``random.Random`` seeded with an integer never reads
the string hash), and the harness (:mod:`.harness`) runs it the same way every time on
the virtual clock.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import attrs

from turnfsm import TurnPolicy
from turnfsm import effects as fx
from turnfsm.policy import Direction, Speaker, option_of
from turnfsm.testing import drawn_values

from ..realtime.fidelity import REAL_PROTOCOL, Fidelity

World = Literal["pipeline", "realtime"]

Anchor = Literal["call", "line_end", "agent_audio"]
"""What a cue's ``offset`` counts from: the call's start (the callee's audio input), the
end of the caller's previous line, or the start of agent audio (the one playing, else the
next to start)."""

CueKind = Literal[
    "hello", "overlap", "backchannel", "barge_in", "question", "long_turn", "hang_up"
]

MIN_WORDS = (0, 0, 0, 1, 2, 3)
"""LiveKit's interruption ``min_words`` as drawn (0, LiveKit's default, half the time)."""

PROBES: dict[str, str] = {
    "Open on Saturday?": "Yes, until noon.",
    "And on Sunday?": "No, closed.",
    "What about Monday?": "Monday works.",
}
"""The no-deaf-call probes and the model's answers (no tools: the judgement stays crisp).
The first is asked once the script is through, 2 s into whatever state the call is in
then, and must be answered; the others are asked instead when it fell where the caller
is not heard on purpose (every attempt in other words, so that none can pass for the
other). Each has at least ``max(MIN_WORDS)`` words: over the agent's speech LiveKit takes
a shorter turn for none (it keeps the words for the next turn), so a shorter probe would
go unanswered by design, not by a fault."""

GREETINGS = (
    "Hi, this is Ada.",
    "Hi, this is Ada from Acme Dental, calling about your appointment.",
    "Hello, this is Ada calling from Acme Dental about your appointment tomorrow "
    "morning, do you have a minute?",
)
GREETING_INSTRUCTIONS = "Greet the callee and say who you are."
HANDOVER_INSTRUCTIONS = "Introduce yourself: you are taking the call over."
HANDOVER_GREETING = "Hi, this is Bea, I am taking over from Ada."
"""What the agent a ``transfer`` tool hands the call to says as it enters."""
GENERATED_GREETING = "Hello there, this is Ada from Acme Dental."
"""What the scripted model says when asked for the greeting by instructions."""

QUESTIONS = (
    "What time do you open tomorrow?",
    "Can I move my appointment to Friday?",
    "Do I need to bring anything?",
    "Is there parking near the office?",
    "How much will the cleaning cost?",
)
LONG_TURNS = (
    "Well I am not sure the morning works for me, I have to drop the kids at school first",
    "Sorry the line was breaking up, could you tell me again what this call is about",
)
BACKCHANNELS = ("Mhm.", "Yes.", "Uh-huh.", "Okay.")
BARGE_INS = ("Wait, stop.", "Sorry, hold on a second.", "No no, that is wrong.")
OVERLAPS = ("Sorry, who is this?", "Hello? Can you hear me?", "Speaking, go ahead.")
SHORT_REPLIES = (
    "Sure, we open at nine.",
    "Yes, that works.",
    "Of course, no problem at all.",
)
LONG_REPLIES = (
    "Let me explain: we open at nine in the morning, we close at six, and on Saturdays "
    "we open at ten.",
    "Your appointment is with Doctor Chen tomorrow at half past nine, please come ten "
    "minutes early.",
)
AFTER_TOOLS = ("I checked, and everything is in order.", "All done, I found it for you.")

EFFECTS_THAT_MAY_FAIL: tuple[type[fx.Effect], ...] = (
    fx.MuteInput,
    fx.UnmuteInput,
    fx.LockSpeech,
    fx.StartGreeting,
    fx.HoldUserTurns,
    fx.ResumeUserTurns,
    fx.Interrupt,
    fx.DropUnspokenText,
    fx.ClearUserTurn,
    fx.RejectUserTurn,
    fx.CancelToolReply,
    fx.FinalReplyWithoutTools,
    fx.StartTimer,
    fx.Say,
)
"""Effects whose lever a call may make raise (``EndCall`` aside: the harness hangs up)."""

REALTIME_EFFECTS_THAT_MAY_FAIL: tuple[type[fx.Effect], ...] = (
    *EFFECTS_THAT_MAY_FAIL,
    fx.SuppressReply,
    fx.PauseModelReplies,
    fx.ResumeModelReplies,
    fx.ForbidTools,
    fx.AllowTools,
)
"""...and on a realtime model, whose link has levers of its own."""


@dataclass(frozen=True)
class Cue:
    """One thing the caller says.

    Attributes:
        kind: What it is, for the judges and the failure lines.
        text: The words (spoken with :func:`~turnfsm.adapters.sim.speech.spoken_line`).
        duration: How long it takes to say, in seconds.
        anchor: What ``offset`` counts from (:data:`Anchor`).
        offset: Seconds after the anchor.
    """

    kind: CueKind
    text: str
    duration: float
    anchor: Anchor
    offset: float


ToolName = Literal["lookup", "broken_lookup", "transfer"]
TOOL_NAMES: tuple[ToolName, ...] = ("lookup",) * 6 + ("broken_lookup",) * 2 + ("transfer",)
"""The tools a round draws from, weighted: mostly slow lookups, some raising, a handoff."""
REALTIME_TOOL_NAMES: tuple[ToolName, ...] = ("lookup",) * 3 + ("broken_lookup",)
"""...on a realtime model: no handoff (a realtime call is one agent's)."""


@dataclass(frozen=True)
class ToolCall:
    """One tool call of a round: ``lookup`` (sleeps ``seconds``), ``broken_lookup``
    (raises after ``seconds``) or ``transfer`` (hands the call to a new agent)."""

    name: ToolName
    seconds: float = 0.0


@dataclass(frozen=True)
class ReplyPlan:
    """How the model answers one user turn: tool rounds (each a parallel set of calls),
    then ``text``. It asks for more rounds than the cap when the plan says so, and keeps
    calling tools under ``tool_choice="none"`` when ``ignores_tool_choice``."""

    text: str
    tool_rounds: tuple[tuple[ToolCall, ...], ...] = ()
    ignores_tool_choice: bool = False


@dataclass(frozen=True)
class LeverFault:
    """The lever of ``effect`` raises on its ``occurrence``-th use (1-based)."""

    effect: str
    occurrence: int


@dataclass(frozen=True)
class Pace:
    """How fast the scripted models are."""

    tts_chars_per_second: float
    tts_synthesis_delay: float
    llm_chars_per_second: float
    llm_time_to_first_token: float
    stt_final_lag: float


@dataclass(frozen=True)
class CallPlan:
    """Everything one fuzzed call draws from its seed.

    Attributes:
        seed: The call's seed (also the virtual loop's).
        world: Which kind of call (:data:`World`).
        policy: The turnfsm policy.
        turn_handling: LiveKit's turn handling options.
        session_options: Further ``AgentSession`` options (``aec_warmup_duration``).
        transcript_sync: A LiveKit ``TranscriptSynchronizer`` in the output chain.
        answer_at: Outbound: when the callee picks up (call time, seconds).
        pace: How fast the scripted models are.
        cues: What the caller says, in order.
        replies: How the model answers user turns, in the order new turns reach it.
        probe_delay: Seconds after the last cue's line before the probe is placed (2 s
            into the state the call is then in).
        fault: A lever that raises, if any.
    """

    seed: int
    world: World
    policy: TurnPolicy
    turn_handling: dict[str, Any]
    session_options: dict[str, Any]
    transcript_sync: bool
    answer_at: float
    pace: Pace
    cues: tuple[Cue, ...]
    replies: tuple[ReplyPlan, ...]
    probe_delay: float | None
    fault: LeverFault | None = None
    notes: tuple[str, ...] = field(default=())

    def describe(self) -> str:
        """The plan in a few words, for a failure line."""
        policy = self.policy
        greeting = "no greeting" if not policy.has_greeting else policy.greeting_lock
        parts = [
            self.world,
            policy.direction,
            f"first={policy.first_speaker}",
            greeting,
            policy.greeting_overlap,
            f"text={policy.interrupted_text}",
            f"cap={policy.max_tool_steps}",
            "sync" if self.transcript_sync else "nosync",
            "preemptive" if self.turn_handling["preemptive_generation"]["enabled"] else "",
            " ".join(cue.kind for cue in self.cues),
            f"fault={self.fault.effect}#{self.fault.occurrence}" if self.fault else "",
        ]
        return " ".join(part for part in parts if part)


@dataclass(frozen=True)
class RealtimeCallPlan(CallPlan):
    """A call on a realtime model (``openai.realtime.RealtimeModel``, the real plugin)
    against the in-process OpenAI Realtime protocol server: what the server does beside
    the :class:`CallPlan`. (``pace.tts_chars_per_second`` is the server's speaking rate;
    the pipeline models' pace means nothing here.)

    Attributes:
        fidelity: The server's timing: latency, cancel delay, transcript lead, generation
            speed, uneven speech.
        server_vad: The ``server_vad`` turn detection the model is given
            (``silence_duration_ms``, ``prefix_padding_ms``).
        refuse_creates: How many of the client's first ``response.create`` the server
            refuses (behind a response of its own).
        fail_responses: How many of the responses the client asks for fail, after
            ``fail_after_ms`` of audio.
        fail_after_ms: See ``fail_responses``.
        drop_socket_at: Seconds into the first agent audio at which the socket drops
            (None: it never does).
        race_auto_replies: How many user turns the server answers although turnfsm
            turned its replies off (server VAD racing the lock).
    """

    fidelity: Fidelity = REAL_PROTOCOL
    server_vad: dict[str, Any] = field(default_factory=dict)
    refuse_creates: int = 0
    fail_responses: int = 0
    fail_after_ms: int = 1000
    drop_socket_at: float | None = None
    race_auto_replies: int = 0

    def describe(self) -> str:
        faults = [
            f"refused={self.refuse_creates}" if self.refuse_creates else "",
            f"failed@{self.fail_after_ms}ms" if self.fail_responses else "",
            f"drop@{self.drop_socket_at}s" if self.drop_socket_at is not None else "",
            "vad_race" if self.race_auto_replies else "",
        ]
        fidelity = self.fidelity
        timing = (
            f"{fidelity.network_latency_ms}ms cancel={fidelity.cancel_latency_ms}ms "
            f"lead={fidelity.transcript_lead_ms}ms"
        )
        return " ".join(part for part in [super().describe(), timing, *faults] if part)


def draw_call(seed: int, world: World = "pipeline") -> CallPlan:
    """The call that ``seed`` stands for in ``world``.

    Raises:
        ValueError: an unknown world.
    """
    if world not in WORLDS:
        raise ValueError(f"world must be one of {sorted(WORLDS)}, got {world!r}")
    return WORLDS[world](seed)


def _rate(rng: random.Random) -> float:
    """A caller's speaking rate, in characters per second."""
    return rng.uniform(10.0, 18.0)


def _cue(rng: random.Random, kind: CueKind, text: str, anchor: Anchor, offset: float) -> Cue:
    duration = max(0.25, round(len(text) / _rate(rng), 3))
    return Cue(kind=kind, text=text, duration=duration, anchor=anchor, offset=round(offset, 3))


LISTED_OPTIONS: tuple[str, ...] = (
    "await_user_timeout",
    "on_await_user_timeout",
    "greeting_lock",
    "greeting_overlap",
    "spill_over_window",
    "interrupted_text",
    "max_tool_steps",
    "mute_input_during_tools",
    "idle_timeout",
    "idle_max_reprompts",
    "max_call_duration",
)
"""The options the listed seeds' calls were drawn with (``tests/fuzz/regressions.toml``),
from the call's own stream, in this order: kept so that every listed seed draws the call
it was listed with. Never added to: every other option is drawn from a stream of its own
(:func:`_draw_options`), so that a new option is drawn without an edit and shifts no
other draw."""


def _draw_policy(rng: random.Random, stream: str) -> TurnPolicy:
    """The policy: its shape (direction, who speaks first, the greeting) by hand, every
    other option from the values the tests draw for it (:func:`turnfsm.testing.drawn_values`)."""
    direction: Direction = rng.choice(("outbound", "outbound", "outbound", "inbound", "inbound"))
    first_speaker: Speaker = "user" if direction == "outbound" else "agent"
    if rng.random() < 0.15:
        first_speaker = "agent" if first_speaker == "user" else "user"
    greeting_needed = direction == "outbound" or first_speaker == "agent"
    greeting: str | None = None
    instructions: str | None = None
    if greeting_needed or rng.random() < 0.5:
        if rng.random() < 0.15:
            instructions = GREETING_INSTRUCTIONS
        else:
            greeting = rng.choice(GREETINGS)
    return TurnPolicy(
        direction=direction,
        first_speaker=first_speaker,
        greeting=greeting,
        greeting_instructions=instructions,
        **_draw_options(rng, stream),
    )


def _draw_options(rng: random.Random, stream: str) -> dict[str, Any]:
    """Every option but the call's shape: a listed one (:data:`LISTED_OPTIONS`) from
    ``rng``, any other from its own stream, named by ``stream`` and the option."""
    options: dict[str, Any] = {}
    for option in attrs.fields(TurnPolicy):
        if option_of(option).shapes_the_call:
            continue
        own = option.name not in LISTED_OPTIONS
        source = random.Random(f"{stream} {option.name}") if own else rng
        options[option.name] = _pick(source, drawn_values(option))
    return options


def _pick(rng: random.Random, values: tuple[Any, ...]) -> Any:
    """One of ``values``, weighed by repetition: a flag as a chance (the share of
    ``True``), a single value without drawing."""
    if len(set(values)) == 1:
        return values[0]
    if all(isinstance(value, bool) for value in values):
        return rng.random() < values.count(True) / len(values)
    return rng.choice(values)


def _draw_settings(
    rng: random.Random, policy: TurnPolicy
) -> tuple[dict[str, Any], dict[str, Any], bool]:
    preemptive: dict[str, Any] = {"enabled": rng.random() < 0.5}
    if preemptive["enabled"]:
        preemptive["preemptive_tts"] = rng.random() < 0.3
    interruption: dict[str, Any] = {
        "min_words": rng.choice(MIN_WORDS),
        "min_duration": rng.choice((0.5, 0.5, 0.2, 0.8)),
        "resume_false_interruption": rng.random() < 0.6,
        "false_interruption_timeout": rng.choice((2.0, 2.0, 1.0, None)),
    }
    if rng.random() < 0.5:
        interruption["mode"] = "vad"
    turn_handling: dict[str, Any] = {
        "turn_detection": "vad",
        "interruption": interruption,
        "preemptive_generation": preemptive,
        "endpointing": {"min_delay": rng.choice((0.5, 0.5, 0.3, 0.8))},
    }
    # an AEC warm-up silences the STT during the first speech: turnfsm refuses it where
    # the overlap must be answered whole (attach's refuse_unsafe_settings)
    hears_overlap = (
        policy.has_greeting
        and policy.greeting_lock == "keep_listening"
        and policy.greeting_overlap == "answer_whole"
    )
    warmup = None if hears_overlap else rng.choice((None, None, 1.0, 3.0))
    return turn_handling, {"aec_warmup_duration": warmup}, rng.random() < 0.5


def _draw_replies(
    rng: random.Random, policy: TurnPolicy, tool_names: tuple[ToolName, ...] = TOOL_NAMES
) -> tuple[ReplyPlan, ...]:
    replies = []
    for _ in range(8):
        roll = rng.random()
        if roll < 0.45:
            replies.append(ReplyPlan(rng.choice(SHORT_REPLIES + LONG_REPLIES)))
            continue
        rounds = []
        for _ in range(rng.choice((1, policy.max_tool_steps, policy.max_tool_steps + 1))):
            calls = []
            for _ in range(rng.choice((1, 1, 1, 2, 3))):
                kind: ToolName = rng.choice(tool_names)
                calls.append(ToolCall(kind, rng.choice((0.1, 0.3, 1.0, 2.5))))
            rounds.append(tuple(calls))
        replies.append(
            ReplyPlan(
                rng.choice(AFTER_TOOLS + LONG_REPLIES),
                tool_rounds=tuple(rounds),
                ignores_tool_choice=rng.random() < 0.25,
            )
        )
    return tuple(replies)


def _draw_cues(rng: random.Random, policy: TurnPolicy, greeting_seconds: float) -> list[Cue]:
    cues: list[Cue] = []
    said: set[str] = set()

    def fresh(texts: tuple[str, ...]) -> str:
        """A text not said yet in this call: a caller repeating words is no overlap
        repeated (turnfsm's outcome monitor tells speech apart by its words)."""
        text = rng.choice([text for text in texts if text not in said] or list(texts))
        said.add(text)
        return text

    user_first = policy.first_speaker == "user"
    if user_first:
        opening = rng.choice(("hello", "hello", "double_hello", "silence", "long"))
        if opening in ("hello", "double_hello"):
            cues.append(_cue(rng, "hello", "Hello?", "call", rng.uniform(0.2, 1.5)))
        if opening == "double_hello":
            cues.append(_cue(rng, "hello", "Hello?", "line_end", rng.uniform(0.2, 2.5)))
        if opening == "long":
            cues.append(_cue(rng, "hello", "Hello? Yes, who is calling please?", "call", 0.5))
    if policy.has_greeting and rng.random() < 0.6:
        text = fresh(BACKCHANNELS + OVERLAPS + LONG_TURNS[:1])
        kind: CueKind = "backchannel" if text in BACKCHANNELS else "overlap"
        at = rng.uniform(-0.3, 1.1) * greeting_seconds
        cues.append(_cue(rng, kind, text, "agent_audio", max(0.0, at)))
    for _ in range(rng.choice((0, 1, 1, 1, 2, 2, 3))):
        roll = rng.random()
        if roll < 0.55:
            text = fresh(QUESTIONS)
            cues.append(_cue(rng, "question", text, "line_end", rng.uniform(0.3, 2.5)))
        elif roll < 0.7:
            text = fresh(LONG_TURNS)
            cues.append(_cue(rng, "long_turn", text, "line_end", rng.uniform(0.3, 2.0)))
        else:
            text = fresh(BACKCHANNELS + BARGE_INS)
            kind = "backchannel" if text in BACKCHANNELS else "barge_in"
            cues.append(_cue(rng, kind, text, "agent_audio", rng.uniform(0.0, 3.0)))
    if rng.random() < 0.05:
        cues.append(_cue(rng, "hang_up", "", "agent_audio", rng.uniform(0.0, 3.0)))
    return cues


def _draw_fault(
    rng: random.Random, probability: float, effects: tuple[type[fx.Effect], ...]
) -> LeverFault | None:
    """A lever of ``effects`` that raises on its first or second use, or (mostly) none."""
    if rng.random() >= probability:
        return None
    effect = rng.choice(effects)
    return LeverFault(effect=effect.name, occurrence=rng.choice((1, 1, 2)))


def _draw_pipeline(seed: int) -> CallPlan:
    rng = random.Random(seed)
    policy = _draw_policy(rng, f"pipeline {seed}")
    turn_handling, session_options, transcript_sync = _draw_settings(rng, policy)
    pace = Pace(
        tts_chars_per_second=round(rng.uniform(12.0, 18.0), 2),
        tts_synthesis_delay=rng.choice((0.02, 0.05, 0.2)),
        llm_chars_per_second=rng.choice((40.0, 60.0, 200.0)),
        llm_time_to_first_token=rng.choice((0.05, 0.2, 0.6)),
        stt_final_lag=rng.choice((0.1, 0.1, 0.3, 0.6)),
    )
    greeting_text = policy.greeting or GENERATED_GREETING
    greeting_seconds = len(greeting_text) / pace.tts_chars_per_second
    cues = _draw_cues(rng, policy, greeting_seconds)
    replies = _draw_replies(rng, policy)
    fault = _draw_fault(rng, 0.2, EFFECTS_THAT_MAY_FAIL)
    ends_early = any(cue.kind == "hang_up" for cue in cues)
    return CallPlan(
        seed=seed,
        world="pipeline",
        policy=policy,
        turn_handling=turn_handling,
        session_options=session_options,
        transcript_sync=transcript_sync,
        answer_at=round(rng.uniform(0.0, 0.5), 3),
        pace=pace,
        cues=tuple(cues),
        replies=replies,
        probe_delay=None if ends_early else round(rng.uniform(0.0, 2.0), 3),
        fault=fault,
    )


def _draw_realtime(seed: int) -> RealtimeCallPlan:
    rng = random.Random(f"realtime {seed}")  # not the pipeline call of the same seed
    policy = _draw_policy(rng, f"realtime {seed}")
    uneven = rng.random() < 0.5
    fidelity = Fidelity(
        network_latency_ms=rng.choice((0, 50, 100, 300)),
        cancel_latency_ms=rng.choice((0, 150, 600)),
        transcript_lead_ms=rng.choice((0, 0, 1000)),
        generation_speed=rng.choice((1.0, 2.0, 4.0)),
        truncate_shortfall_ms=REAL_PROTOCOL.truncate_shortfall_ms,
        truncate_clears_transcript=REAL_PROTOCOL.truncate_clears_transcript,
        state_errors_name_event=REAL_PROTOCOL.state_errors_name_event,
        speaking_rate_variation=rng.choice((0.15, 0.3)) if uneven else 0.0,
    )
    speaking_rate = round(rng.uniform(12.0, 18.0), 2)
    server_vad = {
        "silence_duration_ms": rng.choice((200, 500, 500, 800)),
        "prefix_padding_ms": rng.choice((100, 300)),
    }
    interruption: dict[str, Any] = {"resume_false_interruption": rng.random() < 0.5}
    turn_handling: dict[str, Any] = {
        "turn_detection": "realtime_llm",
        "interruption": interruption,
        "preemptive_generation": {"enabled": False},
    }
    pace = Pace(
        tts_chars_per_second=speaking_rate,
        tts_synthesis_delay=0.0,
        llm_chars_per_second=0.0,
        llm_time_to_first_token=0.0,
        stt_final_lag=0.0,
    )
    greeting_text = policy.greeting or GENERATED_GREETING
    cues = _draw_cues(rng, policy, len(greeting_text) / speaking_rate)
    replies = _draw_replies(rng, policy, REALTIME_TOOL_NAMES)
    fault = _draw_fault(rng, 0.15, REALTIME_EFFECTS_THAT_MAY_FAIL)
    server_fault = rng.choice(
        ("none", "none", "none", "refused", "refused", "failed", "drop", "vad_race")
    )
    ends_early = any(cue.kind == "hang_up" for cue in cues)
    return RealtimeCallPlan(
        seed=seed,
        world="realtime",
        policy=policy,
        turn_handling=turn_handling,
        session_options={"aec_warmup_duration": None},
        transcript_sync=rng.random() < 0.5,
        answer_at=round(rng.uniform(0.0, 0.5), 3),
        pace=pace,
        cues=tuple(cues),
        replies=replies,
        probe_delay=None if ends_early else round(rng.uniform(0.0, 2.0), 3),
        fault=fault,
        fidelity=fidelity,
        server_vad=server_vad,
        refuse_creates=rng.choice((1, 2)) if server_fault == "refused" else 0,
        fail_responses=1 if server_fault == "failed" else 0,
        fail_after_ms=rng.choice((300, 1200)),
        drop_socket_at=round(rng.uniform(0.0, 2.0), 3) if server_fault == "drop" else None,
        race_auto_replies=1 if server_fault == "vad_race" else 0,
    )


WORLDS: dict[str, Callable[[int], CallPlan]] = {
    "pipeline": _draw_pipeline,
    "realtime": _draw_realtime,
}
"""How each world draws a call from a seed."""
