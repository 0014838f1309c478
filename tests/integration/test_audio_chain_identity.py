"""Issue 9, point 6: LiveKit's audio objects are left alone where no policy needs them.

The input gate goes in front of ``session.input.audio`` only under a policy that can mute
or hold the caller's audio (``greeting_lock="mute_input"``, ``mute_input_during_tools``):
otherwise code that checks ``isinstance(session.input.audio, <its own input class>)``
after ``session.start`` keeps working. The playout meter always measures the output; the
object it went in front of (here LiveKit's transcript synchronizer) stays reachable as
``adapter.audio_output`` (and ``adapter.meter.next_in_chain``).
"""

from __future__ import annotations

from turncalls import GREETING, run_scenarios, turn_call

from turnfsm import TurnPolicy
from turnfsm.adapters.livekit.audio import InputGate
from turnfsm.adapters.sim import ScriptedAudioInput


async def _never_mutes() -> None:
    policy = TurnPolicy(direction="outbound", greeting=GREETING)  # keep_listening
    async with turn_call(policy, settings="livekit-defaults") as tc:
        await tc.call.sleep_until(0.3)
        assert isinstance(tc.session.input.audio, ScriptedAudioInput)
        assert tc.session.input.audio is tc.call.audio_input
        assert tc.adapter.gate is None
        synchronizer = tc.call.synchronizer
        assert synchronizer is not None
        assert tc.adapter.audio_output is synchronizer.audio_output
        assert tc.adapter.meter is not None
        assert tc.adapter.meter.next_in_chain is synchronizer.audio_output


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
