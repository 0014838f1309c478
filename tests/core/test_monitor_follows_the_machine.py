"""The safety monitor judges what the machine does on the same facts the machine takes:
two sequences on which it once judged facts the machine rightly ignores or forgets."""

from __future__ import annotations

from turnfsm import TurnController, TurnPolicy
from turnfsm import effects as fx
from turnfsm import events as ev

POLICY = TurnPolicy(first_speaker="agent", greeting="Hi", greeting_lock="mute_input")


def test_a_response_before_the_models_link_is_no_models() -> None:
    """The machine takes a realtime model's events once one is linked: a response created
    before is not the model's, and the greeting is asked for at once (I9 holds)."""
    controller = TurnController(POLICY, strict=True)
    controller.handle(ev.ModelResponseCreated(at=0.0, response_id="r1"))
    controller.handle(ev.RealtimeModelLinked(at=0.1, replies_to_turns=True))
    effects = controller.handle(ev.SessionStarted(at=0.2))
    assert fx.StartGreeting(text="Hi") in effects


def test_a_speech_reusing_a_refused_greetings_id_is_stopped_before_the_retry() -> None:
    """The greeting's start refused, naming its speech: that speech is not the greeting.
    A speech of the agent's own code created later under the same id comes before the
    retried greeting and is stopped (I8), which is no interrupt of the greeting (I1)."""
    controller = TurnController(POLICY, strict=True)
    controller.handle(ev.SessionStarted(at=0.0))
    controller.handle(ev.AgentSpeechCreated(at=0.1, speech_id="s1"))
    refused = ev.EffectOutcome(at=0.2, effect="start_greeting", outcome="refused", speech_id="s1")
    controller.handle(refused)
    controller.handle(ev.AgentSpeechEnded(at=0.3, speech_id="s1", played_seconds=0.0))
    assert controller.configuration[0] == "retry_requested"
    own = ev.AgentSpeechCreated(at=0.4, speech_id="s1", source="say", from_agent_code=True)
    assert controller.handle(own) == (fx.Interrupt(force=True, speech_id="s1"),)
