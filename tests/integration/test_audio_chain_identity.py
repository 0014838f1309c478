"""Issues 9 (point 6) and 20: LiveKit's audio objects stay the ones LiveKit put there.

The input gate goes in front of ``session.input.audio`` only under a policy that can mute
or hold the caller's audio (``greeting_lock="mute_input"``, ``mute_input_during_tools``):
otherwise code that checks ``isinstance(session.input.audio, <its own input class>)``
after ``session.start`` keeps working.

The playout meter always measures the output, from inside the chain: behind a transcript
synchronizer (RoomIO's, or one the app built) ``session.output.audio`` is still the
synchronizer's after the start, so an app that finds its synchronizer there, e.g. to close
it with the session as LiveKit's own tests do, finds it — and what the caller heard is
still measured to the end of each speech. Once the call is over the meter leaves the
chain.
"""

from __future__ import annotations

import pytest
from livekit.agents import AgentSession
from livekit.agents.voice.transcription.synchronizer import (
    TranscriptSynchronizer,
    _SyncedAudioOutput,
)
from turncalls import (
    GREETING,
    TurnCall,
    recorded_tasks,
    run_scenarios,
    settle,
    still_pending,
    turn_call,
)

from turnfsm import TurnPolicy
from turnfsm import effects as fx
from turnfsm.adapters.livekit.audio import InputGate
from turnfsm.adapters.sim import PacedAudioOutput, PlayoutSegment, ScriptedAudioInput

OUTBOUND = TurnPolicy(direction="outbound", greeting=GREETING)
"""Never mutes (``keep_listening``): nothing asks for a gate."""


def _played_whole(tc: TurnCall, played: PlayoutSegment) -> None:
    """The greeting reached the sink to its end and LiveKit committed it whole: the chain
    carried all of it (nothing was cut, so no drop measured it)."""
    assert not played.interrupted, tc.describe()
    assert played.played == pytest.approx(played.pushed), tc.describe()
    history = [(m.role, m.text_content) for m in tc.call.messages()]
    assert ("assistant", GREETING) in history, tc.describe()
    assert not tc.effects(fx.DropUnspokenText), tc.describe()


async def _never_mutes() -> None:
    async with turn_call(OUTBOUND, settings="livekit-defaults") as tc:
        await tc.call.sleep_until(0.3)
        assert isinstance(tc.session.input.audio, ScriptedAudioInput)
        assert tc.session.input.audio is tc.call.audio_input
        assert tc.adapter.gate is None
        synchronizer = tc.call.synchronizer
        assert synchronizer is not None
        assert tc.session.output.audio is synchronizer.audio_output
        # the greeting (after 8 s of silence), measured to its end from inside the chain
        played = await tc.segment_played(0, timeout=16)
        await tc.call.wait_until(lambda: bool(tc.events("agent_speech_ended")), timeout=2)
        ended = tc.events("agent_speech_ended")[0].event
        assert not ended.interrupted, tc.describe()
        assert ended.played_seconds == pytest.approx(played.played), tc.describe()
        _played_whole(tc, played)
        assert tc.session.output.audio is synchronizer.audio_output


async def _mutes(**options: object) -> None:
    policy = TurnPolicy(direction="outbound", greeting=GREETING, **options)  # type: ignore[arg-type]
    async with turn_call(policy, settings="livekit-defaults") as tc:
        await tc.call.sleep_until(0.3)
        gate = tc.session.input.audio
        assert isinstance(gate, InputGate)
        assert gate is tc.adapter.gate
        assert gate.source is tc.call.audio_input


async def test_the_input_is_gated_only_when_the_policy_can_mute() -> None:
    await run_scenarios(
        {
            "never-mutes": _never_mutes(),
            "mutes-the-greeting": _mutes(greeting_lock="mute_input"),
            "mutes-tools": _mutes(mute_input_during_tools=True),
        }
    )


def _synchronized_output(session: AgentSession) -> None:
    """The app's own output chain, built before the start as LiveKit's tests build it."""
    synchronizer = TranscriptSynchronizer(
        next_in_chain_audio=session.output.audio,  # type: ignore[arg-type]
        next_in_chain_text=session.output.transcription,
    )
    session.output.audio = synchronizer.audio_output
    session.output.transcription = synchronizer.text_output


async def test_an_app_finds_its_synchronizer_after_the_start_and_closes_it() -> None:
    with recorded_tasks() as created:
        async with turn_call(
            OUTBOUND,
            settings="livekit-defaults",
            transcript_sync=False,  # the app builds its own
            text_output=True,
            before_start=_synchronized_output,
        ) as tc:
            # read back after the start, to close it with the session
            found = tc.session.output.audio
            assert isinstance(found, _SyncedAudioOutput), found
            played = await tc.segment_played(0, timeout=16)
            await tc.call.wait_until(lambda: bool(tc.events("agent_speech_ended")), timeout=2)
            ended = tc.events("agent_speech_ended")[0].event
            assert ended.played_seconds == pytest.approx(played.played), tc.describe()
            _played_whole(tc, played)
            await tc.session.aclose()
            # the call is over: the app's chain is as it built it (synchronizer, LiveKit's
            # proxy, sink), with no meter left in it
            proxy = found.next_in_chain
            assert proxy is not None
            assert proxy.next_in_chain is tc.call.audio_output, found
            await found._synchronizer.aclose()
        await settle()
    assert still_pending(created) == [], "the closed call left tasks pending"


async def test_only_a_bare_sink_gets_the_meter_in_front() -> None:
    """With nothing behind the sink there is no behind: the meter is then
    ``session.output.audio``, the sink behind it (as the README says)."""
    async with turn_call(OUTBOUND, settings="sim") as tc:  # no synchronizer
        meter = tc.session.output.audio
        assert meter is tc.adapter.port.meter
        assert meter is not None
        assert meter.next_in_chain is not None
        assert meter.next_in_chain.next_in_chain is tc.call.audio_output  # via LiveKit's proxy
        played = await tc.segment_played(0, timeout=16)
        await tc.call.wait_until(lambda: bool(tc.events("agent_speech_ended")), timeout=2)
        ended = tc.events("agent_speech_ended")[0].event
        assert ended.played_seconds == pytest.approx(played.played), tc.describe()


async def test_a_sink_swapped_in_after_the_start_is_measured() -> None:
    """LiveKit swaps the sink at the chain's bottom (``replace_audio_tail``, e.g. for an
    avatar) keeping the wrappers: the meter is one of them, and measures the new sink."""
    async with turn_call(OUTBOUND, settings="livekit-defaults") as tc:
        synchronizer = tc.call.synchronizer
        assert synchronizer is not None
        avatar = PacedAudioOutput(label="avatar")
        tc.session.output.replace_audio_tail(avatar)
        assert tc.session.output.audio is synchronizer.audio_output
        await tc.call.wait_until(lambda: bool(tc.events("agent_speech_ended")), timeout=16)
        assert tc.call.audio_output.segments == [], "the greeting played on the swapped sink"
        (played,) = avatar.segments
        ended = tc.events("agent_speech_ended")[0].event
        assert played.played > 4, tc.describe()  # the whole greeting
        assert ended.played_seconds == pytest.approx(played.played), tc.describe()
        _played_whole(tc, played)
