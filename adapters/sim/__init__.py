"""Offline simulated calls: recorded speech, real-time audio IO and scripted models.

Everything here runs a *real* LiveKit ``AgentSession`` offline: the callee's lines are
recorded WAVs, or speech made from text and a duration (:func:`spoken_line`), played in
real time, the agent's audio is played out in wall-clock time,
and the models are scripted. Used by the integration tests and by ``make demo``.
"""

from .._extras import raise_if_extra_missing

try:
    from .io import (
        PacedAudioOutput,
        PlayoutSegment,
        RecordingTextOutput,
        ScriptedAudioInput,
    )
    from .models import (
        LLMRequest,
        ScriptedLLM,
        ScriptedReply,
        ScriptedSTT,
        ScriptedToolCall,
        ScriptedTTS,
        Transcript,
    )
    from .session import (
        DEFAULT_TURN_HANDLING,
        LIVEKIT_DEFAULT_TURN_HANDLING,
        RecordedEvent,
        SimulatedCall,
        load_silero_vad,
    )
    from .speech import (
        LINES,
        CallScript,
        DeliveredFrame,
        SpeechLedger,
        SpeechLine,
        UserLine,
        Utterance,
        WordTiming,
        get_line,
        spoken_line,
    )
except ImportError as error:
    raise_if_extra_missing(
        error,
        package="turnfsm.adapters.sim",
        extra="sim",
        needs={
            "livekit.agents": "LiveKit Agents",
            "livekit.plugins.silero": "LiveKit's silero plugin",
        },
    )
    raise

__all__ = [
    "DEFAULT_TURN_HANDLING",
    "LIVEKIT_DEFAULT_TURN_HANDLING",
    "LINES",
    "CallScript",
    "DeliveredFrame",
    "LLMRequest",
    "PacedAudioOutput",
    "PlayoutSegment",
    "RecordedEvent",
    "RecordingTextOutput",
    "ScriptedAudioInput",
    "ScriptedLLM",
    "ScriptedReply",
    "ScriptedSTT",
    "ScriptedTTS",
    "ScriptedToolCall",
    "SimulatedCall",
    "SpeechLedger",
    "SpeechLine",
    "Transcript",
    "UserLine",
    "Utterance",
    "WordTiming",
    "get_line",
    "load_silero_vad",
    "spoken_line",
]
