"""A realistic outbound call as events, and the steps the turn machine takes on it.

:func:`scripted_call` is what an adapter would feed: ringing, the answer, the callee's
"Hello?", the locked greeting, several turns with transcripts, a two-round tool loop,
an idle re-prompt, a barge-in and the hang-up. :func:`dispatch_steps` runs it through a
:class:`~turnfsm.TurnController` and keeps only the events the state before handles
(those reach the engine), each with the transition the engine took, so that the other
implementations can replay exactly the same moves.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from turnfsm import TurnController, TurnMachine, TurnPolicy
from turnfsm import events as ev
from turnfsm.controller import handled_events
from turnfsm.machine import leaf_states, leaf_transitions, side_region_of
from turnfsm.rules import TurnRules

POLICY = TurnPolicy(
    direction="outbound",
    greeting="Hi, this is Ada from Acme. Is now a good time?",
    max_tool_steps=2,
    idle_timeout=8.0,
    max_call_duration=600.0,
)
"""An outbound call with every timer on, so that steps emit realistic effects."""


@dataclass(frozen=True)
class Step:
    """One handled event: the move it made and which transition the engine took."""

    event: ev.Event
    before: str
    after: str
    branch: int
    """Index of the transition taken among ``before``'s transitions on this event, in
    declaration order; -1 when every guard failed and the event was ignored."""


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self, seconds: float = 0.4) -> float:
        self.now += seconds
        return round(self.now, 3)


def scripted_call() -> list[ev.Event]:
    """Every event of one call, in order, as the adapter would send them."""
    t = _Clock()
    script: list[ev.Event] = [
        ev.CallRinging(at=t()),
        ev.CallRinging(at=t(2.0)),
        ev.CallAnswered(at=t(3.0)),
        ev.AnsweringMachineDetected(at=t(0.2), result="human"),
        ev.UserSpeechStarted(at=t()),
        ev.UserTranscript(at=t(), text="Hel"),
        ev.UserSpeechEnded(at=t()),
        ev.UserTranscript(at=t(), text="Hello?", is_final=True),
        ev.UserTurnCommitted(at=t(), text="Hello?", item_id="u0"),
        ev.AgentSpeechCreated(at=t(0.1), speech_id="greet", source="say"),
        ev.AgentSpeechStarted(at=t(0.3), speech_id="greet"),
        ev.AgentSpeechEnded(at=t(3.5), speech_id="greet", played_seconds=3.5),
        ev.AssistantMessageCommitted(at=t(0.01), item_id="a0", speech_id="greet"),
    ]

    def user_turn(n: int, words: str) -> None:
        script.extend(
            [
                ev.UserSpeechStarted(at=t(1.0)),
                ev.UserTranscript(at=t(), text=words[: len(words) // 2]),
                ev.UserTranscript(at=t(), text=words),
                ev.UserSpeechEnded(at=t()),
                ev.UserTranscript(at=t(0.1), text=words, is_final=True),
                ev.UserTurnCommitted(at=t(0.3), text=words, item_id=f"u{n}"),
            ]
        )

    def reply(speech: str, text: str, *, source: str = "reply") -> None:
        script.extend(
            [
                ev.AgentSpeechCreated(at=t(0.2), speech_id=speech, source=source),
                ev.AgentSpeechStarted(at=t(0.6), speech_id=speech),
                ev.AssistantMessageCommitted(at=t(2.0), speech_id=speech, text=text),
                ev.AgentSpeechEnded(at=t(0.01), speech_id=speech, played_seconds=2.0),
            ]
        )

    for n, (words, answer) in enumerate(
        [
            ("Yes, who is this?", "Ada from Acme, about your order."),
            ("Oh right, the blue chair.", "Exactly. It ships tomorrow."),
            ("Can I change the address?", "Sure, what is the new one?"),
            ("Twelve Main Street, Springfield.", "Got it, Twelve Main Street."),
        ],
        start=1,
    ):
        user_turn(n, words)
        reply(f"s{n}", answer)

    # A two-round tool loop: each round's reply asks for tools, the next one speaks.
    user_turn(5, "And what do I still owe?")
    script.extend(
        [
            ev.AgentSpeechCreated(at=t(0.2), speech_id="s5"),
            ev.ToolStepStarted(at=t(0.5), speech_id="s5", calls=2),
            ev.ToolStepFinished(at=t(0.8), speech_id="s5", calls=2),
            ev.AgentSpeechCreated(at=t(0.01), speech_id="s6", source="tool_reply"),
            ev.AgentSpeechEnded(at=t(0.01), speech_id="s5"),
            ev.ToolStepStarted(at=t(0.5), speech_id="s6"),
            ev.ToolStepFinished(at=t(0.6), speech_id="s6"),
            ev.AgentSpeechCreated(at=t(0.01), speech_id="s7", source="tool_reply"),
            ev.AgentSpeechEnded(at=t(0.01), speech_id="s6"),
            ev.AgentSpeechStarted(at=t(0.6), speech_id="s7"),
            ev.AssistantMessageCommitted(at=t(3.0), speech_id="s7", text="You owe $42."),
            ev.AgentSpeechEnded(at=t(0.01), speech_id="s7", played_seconds=3.0),
        ]
    )

    # The caller goes quiet: the idle timer re-prompts.
    script.append(ev.IdleTimerExpired(at=t(8.0)))
    reply("s8", "Are you still there?", source="say")

    # A barge-in: the caller talks over a long reply, which ends interrupted.
    user_turn(6, "Yes, sorry. Can I pay now?")
    script.extend(
        [
            ev.AgentSpeechCreated(at=t(0.2), speech_id="s9"),
            ev.AgentSpeechStarted(at=t(0.6), speech_id="s9"),
            ev.UserSpeechStarted(at=t(1.2)),
            ev.UserTranscript(at=t(0.2), text="Actually"),
            ev.AgentSpeechEnded(
                at=t(0.1),
                speech_id="s9",
                interrupted=True,
                played_seconds=1.5,
            ),
            ev.AssistantMessageCommitted(
                at=t(0.01), speech_id="s9", text="Of course, by card.", interrupted=True
            ),
            ev.UserTranscript(at=t(), text="Actually, never mind."),
            ev.UserSpeechEnded(at=t()),
            ev.UserTurnCommitted(at=t(0.3), text="Actually, never mind.", item_id="u7"),
        ]
    )
    reply("s10", "No problem. Anything else?")
    user_turn(8, "No, that's all, bye.")
    reply("s11", "Thanks, goodbye!")
    script.append(ev.CallEnded(at=t(0.5), reason="hangup"))
    return script


class _TransitionRecorder:
    """A listener that notes which transition of the turn the engine took (the regions
    beside it, the caller's voice, move in their own)."""

    def __init__(self) -> None:
        self.taken: object | None = None

    def on_transition(self, transition: Any) -> None:
        # the event's own move, not the eventless ones that follow it in the same step
        if side_region_of(transition.source) is None and self.taken is None:
            self.taken = transition


def transitions_on(state: str, event: str) -> list[object]:
    """``state``'s transitions on ``event``, in the order the engine tries them."""
    (source,) = (leaf for leaf in leaf_states(TurnMachine) if leaf.id == state)
    return [t for t in leaf_transitions(source) if event in {str(e) for e in t.events}]


def dispatch_steps(policy: TurnPolicy = POLICY) -> list[Step]:
    """The handled events of :func:`scripted_call` (by the state or the caller's voice
    beside it), each with the move the state made."""
    controller = TurnController(policy, record=False)
    recorder = _TransitionRecorder()
    shadow = TurnMachine(listeners=[TurnRules(policy=policy), recorder])
    handled = handled_events()
    steps: list[Step] = []
    for event in scripted_call():
        # the leaf (a greeting's phase, not the public ``state``): what the rebuilds model
        before, handles = controller.configuration[0], event.name in controller.handled_events
        controller.handle(event)
        if not handles:
            continue
        recorder.taken = None
        shadow.send(event.name, ev=event)  # the voice's moves too: its guards read them
        # branch -1: the state stays (the caller's voice alone may have moved)
        candidates = transitions_on(before, event.name) if event.name in handled[before] else []
        branch = -1 if recorder.taken is None else candidates.index(recorder.taken)
        steps.append(Step(event, before, controller.configuration[0], branch))
    if not controller.is_ended:
        raise AssertionError(f"the scripted call must hang up, it is {controller.state}")
    return steps
