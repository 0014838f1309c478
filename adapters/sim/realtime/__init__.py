"""A simulated OpenAI Realtime service, for offline calls on the real OpenAI realtime plugin.

`RealtimeTestServer` speaks the OpenAI Realtime protocol, scripted by a `RealtimeScript`,
with a `Fidelity` saying how far it departs from the real service; every event either way
is checked against the ``openai`` package's typed models (`conformance`).
"""

from .conformance import ConformanceError, Violation
from .fidelity import FIDELITY_MATRIX, IDEAL, REAL_PROTOCOL, UNEVEN_SPEECH, Fidelity
from .script import (
    RealtimeScript,
    ResponsePolicy,
    ResponseRequest,
    ResponseTrigger,
    ScriptedResponse,
    ToolCall,
)
from .server import (
    SAMPLE_RATE,
    Direction,
    RealtimeConnection,
    RealtimeTestServer,
    RecordedEvent,
    ResponseRecord,
    SessionSnapshot,
    Transport,
)
from .transport import MemoryHttpSession, MemoryWebSocket

__all__ = [
    "FIDELITY_MATRIX",
    "IDEAL",
    "MemoryHttpSession",
    "MemoryWebSocket",
    "REAL_PROTOCOL",
    "SAMPLE_RATE",
    "UNEVEN_SPEECH",
    "ConformanceError",
    "Direction",
    "Fidelity",
    "RealtimeConnection",
    "RealtimeScript",
    "RealtimeTestServer",
    "RecordedEvent",
    "ResponsePolicy",
    "ResponseRecord",
    "ResponseRequest",
    "ResponseTrigger",
    "ScriptedResponse",
    "SessionSnapshot",
    "ToolCall",
    "Transport",
    "Violation",
]
