"""Many plausible calls, fast: scripted event sequences through the pure controller.

:func:`simulated_trace` plays one seeded call: one of a few policies, an agent and a day
(the trace's header), then the call's life as
LiveKit would report it (ringing, answer or not, "Hello?", the greeting with or without
the callee talking over it, user turns, replies with tool rounds and barge-ins, silences
that fire the idle timer, a hang-up or a timer's end). The driver reacts to the
machine's effects like a session would: timers fire when due, re-prompts and fallbacks
are said, an ``Interrupt`` cuts the speech that plays, ``EndCall`` ends the call; some
replies are prepared early and replaced before any audio, as LiveKit's preemptive
generation does. The controller runs strict, so every trace also keeps every invariant.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from turnfsm import Trace, TurnController, TurnPolicy
from turnfsm import effects as fx
from turnfsm import events as ev
from turnfsm.trace import CallInfo

REPLY = "Your appointment is on Tuesday at ten in the morning, with Doctor Shah."


class CallOver(Exception):
    """The machine hung up: the script stops here."""


class Driver:
    """Feeds one controller, keeps the call's clock and answers its effects."""

    def __init__(self, policy: TurnPolicy, rng: random.Random, call: CallInfo) -> None:
        self.controller = TurnController(policy, strict=True, keep_text=True, call=call)
        self.rng = rng
        self.t = 0.0
        self.timers: dict[str, float] = {}
        self.requests: list[fx.Effect] = []
        self.active: set[str] = set()
        """Speeches created and not ended; an ``Interrupt`` cuts them all."""
        self.committed: set[str] = set()
        """Speeches whose assistant message was committed."""
        self.heard_chars: dict[str, int] = {}
        """Of each reply cut by a barge-in, the characters its drop's lever measures as
        heard (words played to their end)."""
        self.serial = 0
        self.greeting_fails = rng.random() < 0.05
        """The greeting's start fails (the machine says it again, locked)."""

    @property
    def state(self) -> str:
        return self.controller.state

    def send(self, event: ev.Event) -> tuple[fx.Effect, ...]:
        effects = self.controller.handle(event)
        for effect in effects:
            if isinstance(effect, fx.StartTimer):
                self.timers[effect.timer] = self.t + effect.seconds
            elif isinstance(effect, fx.CancelTimer):
                self.timers.pop(effect.timer, None)
            elif isinstance(effect, fx.Say | fx.FinalReplyWithoutTools):
                self.requests.append(effect)
            elif isinstance(effect, fx.Interrupt):
                for speech in sorted(self.active):
                    self.end(speech, interrupted=True)
        if self.controller.is_ended:
            raise CallOver
        for effect in effects:  # each lever reports what it did, after the step
            outcome = self.outcome(effect)
            text_chars, heard_chars = (
                self.measured_cut(effect)
                if isinstance(effect, fx.DropUnspokenText) and outcome == "done"
                else (None, None)
            )
            self.send(
                ev.EffectOutcome(
                    at=self.t,
                    effect=effect.name,
                    outcome=outcome,
                    speech_id=getattr(effect, "speech_id", None) or None,
                    text_chars=text_chars,
                    heard_chars=heard_chars,
                )
            )
        return effects

    def measured_cut(self, drop: fx.DropUnspokenText) -> tuple[int, int]:
        """What the drop's lever measures, as the adapter's does: the message's length and
        what it kept of it (nothing, under ``keep="nothing"``)."""
        kept = 0 if drop.keep == "nothing" else self.heard_chars.get(drop.speech_id, 0)
        return len(REPLY), kept

    def outcome(self, effect: fx.Effect) -> str:
        if isinstance(effect, fx.StartGreeting) and self.greeting_fails:
            return "failed"
        if isinstance(effect, fx.DropUnspokenText) and effect.speech_id not in self.committed:
            return "refused"  # as the adapter's lever: no message to trim
        if isinstance(effect, fx.DropUnspokenText | fx.StartTimer) and self.rng.random() < 0.05:
            return self.rng.choice(["refused", "failed"])
        return "done"

    def advance(self, seconds: float) -> None:
        """Let time pass; timers due meanwhile fire, and what they ask for is said."""
        target = self.t + seconds
        while self.timers and min(self.timers.values()) <= target:
            timer, due = min(self.timers.items(), key=lambda item: item[1])
            del self.timers[timer]
            self.t = max(self.t, due)
            self.send(ev.timer_expired(timer, at=self.t))
            self.serve()
            target = max(target, self.t)
        self.t = max(self.t, target)

    def serve(self) -> None:
        """Say what the machine asked for (re-prompts, fallbacks, final replies)."""
        while self.requests:
            request = self.requests.pop(0)
            silent = isinstance(request, fx.FinalReplyWithoutTools) and self.rng.random() < 0.3
            self.speak("reply", silent=silent)

    def new_speech(self, source: ev.SpeechSource = "reply") -> str:
        self.serial += 1
        speech = f"s{self.serial}"
        self.active.add(speech)
        self.send(ev.AgentSpeechCreated(at=self.t, speech_id=speech, source=source))
        return speech

    def speak(
        self, source: ev.SpeechSource, *, silent: bool = False, seconds: float = 2.0
    ) -> None:
        """A whole speech: created, played (unless the model said nothing), committed."""
        speech = self.new_speech(source)
        self.advance(self.rng.uniform(0.2, 0.8))
        if silent:
            self.end(speech)
            self.serve()
            return
        self.play(speech, seconds)

    def end(self, speech: str, **details: object) -> None:
        if speech in self.active:
            self.active.discard(speech)
            self.send(ev.AgentSpeechEnded(at=self.t, speech_id=speech, **details))  # type: ignore[arg-type]

    def play(self, speech: str, seconds: float, *, barge_in_after: float | None = None) -> None:
        self.send(ev.AgentSpeechStarted(at=self.t, speech_id=speech))
        if barge_in_after is None:
            self.advance(seconds)
            if speech in self.active:
                self.commit(ev.AssistantMessageCommitted(at=self.t, speech_id=speech, text=REPLY))
                self.end(speech, played_seconds=seconds)
            return
        self.advance(barge_in_after)
        self.send(ev.UserSpeechStarted(at=self.t))
        self.advance(0.4)
        if speech in self.active:
            self.heard_chars[speech] = (
                self.rng.randrange(5, 40) if self.rng.random() < 0.6 else 0
            )  # nothing heard to its end: the lever removes the message
            message = ev.AssistantMessageCommitted(
                at=self.t, speech_id=speech, text=REPLY, interrupted=True
            )
            self.send(ev.AgentSpeechInterrupted(at=self.t, speech_id=speech))
            message_first = self.rng.random() < 0.5  # LiveKit commits it before or after
            if message_first:
                self.commit(message)
            self.end(speech, interrupted=True, played_seconds=barge_in_after + 0.4)
            if not message_first:
                self.commit(message)
        self.user_turn(speaking=True)

    def commit(self, message: ev.AssistantMessageCommitted) -> None:
        self.committed.add(message.speech_id)
        self.send(message)

    def user_turn(self, *, speaking: bool = False, seconds: float = 1.2) -> None:
        if not speaking:
            self.send(ev.UserSpeechStarted(at=self.t))
        self.advance(seconds)
        self.send(ev.UserSpeechEnded(at=self.t))
        self.advance(self.rng.uniform(0.3, 0.7))
        self.serial += 1
        self.send(
            ev.UserTurnCommitted(at=self.t, text="I'd like to move it.", item_id=f"u{self.serial}")
        )


GREETING = "Hi, this is Ada from Acme Dental."

POLICIES: tuple[TurnPolicy, ...] = (
    TurnPolicy(
        direction="outbound",
        greeting=GREETING,
        max_tool_steps=1,
        idle_timeout=6.0,
        idle_max_reprompts=1,
        max_call_duration=60.0,
    ),
    TurnPolicy(
        direction="outbound",
        greeting=GREETING,
        greeting_lock="mute_input",
        greeting_overlap="drop",
        interrupted_text="drop",
        max_tool_steps=2,
        on_await_user_timeout="hang_up",
    ),
    TurnPolicy(
        direction="outbound",
        greeting=GREETING,
        greeting_overlap="drop",
        interrupted_text="keep",
        idle_timeout=8.0,
    ),
    TurnPolicy(
        direction="inbound",
        greeting=GREETING,
        max_tool_steps=2,
        idle_timeout=6.0,
        max_call_duration=60.0,
    ),
    TurnPolicy(
        direction="inbound",
        greeting=GREETING,
        greeting_lock="mute_input",
        interrupted_text="drop",
        max_tool_steps=1,
        idle_max_reprompts=0,
    ),
    TurnPolicy(
        direction="outbound",
        greeting=GREETING,
        greeting_lock="mute_input",
        max_tool_steps=2,
        idle_timeout=8.0,
        idle_max_reprompts=0,
        max_call_duration=60.0,
        on_await_user_timeout="hang_up",
    ),
)
"""The policies the calls run under, as a few agents in production would: every lock,
overlap and interrupted-text choice, tool caps of 1 to 3, idle re-prompts and maximum
durations on some."""

AGENTS = {"outbound": ("outbound-caller", "renewals-caller"), "inbound": ("inbound-assistant",)}
DAYS = ("2025-06-01", "2025-06-02", "2025-06-03")


def call_info(seed: int, policy: TurnPolicy, rng: random.Random) -> CallInfo:
    """Who took the call and when: an agent of the policy's direction, one of three days."""
    minute = rng.randrange(24 * 60)
    return CallInfo(
        call_id=f"call-{seed:05d}",
        started_at=f"{rng.choice(DAYS)}T{minute // 60:02d}:{minute % 60:02d}:{seed % 60:02d}Z",
        agent_name=rng.choice(AGENTS[policy.direction]),
    )


def simulated_trace(seed: int) -> Trace:
    """One seeded call's trace."""
    rng = random.Random(seed)
    policy = rng.choice(POLICIES)
    call = Driver(policy, rng, call_info(seed, policy, rng))
    try:
        _script(call, rng)
        call.advance(rng.uniform(0.5, 3.0))
        call.send(ev.CallEnded(at=call.t, reason="hangup"))
    except CallOver:
        pass
    if rng.random() < 0.1:  # a tool step that finishes after the hang-up
        call.controller.handle(ev.ToolStepFinished(at=call.t + 0.5, speech_id="late"))
    if rng.random() < 0.05:  # the input was left muted: the monitor says so as the call ends
        call.controller.handle(ev.OutcomeBreached(at=call.t + 0.5, check="O6"))
    trace = call.controller.trace
    assert trace is not None
    return trace


def simulated_traces(count: int, seed: int = 0) -> Iterator[Trace]:
    """``count`` calls, seeded ``seed``, ``seed + 1``..."""
    for offset in range(count):
        yield simulated_trace(seed + offset)


def _script(call: Driver, rng: random.Random) -> None:
    policy = call.controller.policy
    if policy.direction == "outbound":
        call.send(ev.SessionStarted(at=call.t))
        call.send(ev.CallRinging(at=call.t))
        call.advance(rng.uniform(2.0, 12.0))
        if rng.random() < 0.06:
            call.send(ev.CallEnded(at=call.t, reason="no_answer"))
        call.send(ev.CallAnswered(at=call.t))
        if rng.random() < 0.08:
            call.advance(rng.uniform(1.0, 3.0))
            call.send(ev.AnsweringMachineDetected(at=call.t, result="machine"))
        if rng.random() < 0.12:
            call.advance(30.0)  # a silent callee: the await timer decides
        else:
            call.advance(rng.uniform(0.3, 2.5))
            call.user_turn(seconds=0.6)
    else:
        call.send(ev.SessionStarted(at=call.t))
    if call.state == "greeting":
        retry = [r for r in call.requests if isinstance(r, fx.Say) and r.reason == "greeting"]
        for request in retry:  # the retried greeting replaces the failed one
            call.requests.remove(request)
        greeting = call.new_speech("say")
        call.advance(rng.uniform(0.2, 1.6))
        call.send(ev.AgentSpeechStarted(at=call.t, speech_id=greeting))
        if rng.random() < 0.3:  # the callee talks over the greeting
            call.advance(rng.uniform(0.5, 1.5))
            call.user_turn(seconds=rng.uniform(0.5, 2.5))
            if rng.random() < 0.1:  # a lever failed: the overlap cut the greeting
                call.send(ev.OutcomeBreached(at=call.t, check="O2"))
        call.advance(rng.uniform(0.5, 2.0))
        call.end(greeting, played_seconds=2.0)
        call.serve()
    for _ in range(rng.randint(0, 4)):
        if rng.random() < 0.2:
            call.advance(rng.uniform(5.0, 20.0))  # silence: re-prompts, maybe the idle hang-up
        call.advance(rng.uniform(0.2, 1.0))
        call.user_turn(seconds=rng.uniform(0.5, 2.0))
        _reply(call, rng)


def _reply(call: Driver, rng: random.Random) -> None:
    if rng.random() < 0.2:  # a preemptive reply, replaced before it played
        early = call.new_speech()
        call.advance(rng.uniform(0.1, 0.5))
        call.send(ev.AgentSpeechInterrupted(at=call.t, speech_id=early))
        call.end(early, interrupted=True)
    speech = call.new_speech()
    for _ in range(rng.choice([0, 0, 0, 1, 2, 4])):
        call.advance(rng.uniform(0.3, 1.0))
        call.send(ev.ToolStepStarted(at=call.t, speech_id=speech))
        if rng.random() < 0.1:  # the caller talks while the tool runs; LiveKit interrupts
            call.send(ev.UserSpeechStarted(at=call.t))
            call.send(ev.AgentSpeechInterrupted(at=call.t, speech_id=speech))
            call.advance(0.5)
            call.send(ev.UserSpeechEnded(at=call.t))
        call.advance(rng.uniform(0.2, 1.5))
        finished = call.send(ev.ToolStepFinished(at=call.t, speech_id=speech))
        if call.requests and rng.random() < 0.3:  # LiveKit's own cap lets one more through
            call.send(ev.ToolStepStarted(at=call.t, speech_id=speech))
            call.send(ev.ToolStepFinished(at=call.t, speech_id=speech))
        if call.requests or any(isinstance(e, fx.CancelToolReply) for e in finished):
            break  # capped, or its reply cancelled: LiveKit asks the model for no more
    call.advance(rng.uniform(0.3, 0.9))
    if call.requests or speech not in call.active:  # capped or stopped: it says nothing
        call.end(speech)
        call.serve()
        return
    barge_in = rng.uniform(0.5, 1.5) if rng.random() < 0.25 else None
    call.play(speech, rng.uniform(1.0, 3.0), barge_in_after=barge_in)
    call.serve()
