"""LiveKit Agents adapter: attach a :class:`~turnfsm.TurnController` to an ``AgentSession``.

>>> # controller = TurnController(policy); attach(session, controller); await session.start(...)
"""

from .._extras import raise_if_extra_missing

try:
    from .adapter import TurnAdapter, adapter_for, attach
    from .agent import TurnAgent
    from .audio import InputGate, PlayedSegment, PlayoutMeter
    from .embedding import EmbeddingError
    from .levers import LEVERS
    from .sip import call_status_event, watch_amd, watch_sip_participant
except ImportError as error:
    raise_if_extra_missing(
        error,
        package="turnfsm.adapters.livekit",
        extra="livekit",
        needs={"livekit.agents": "LiveKit Agents"},
    )
    raise

__all__ = [
    "LEVERS",
    "EmbeddingError",
    "InputGate",
    "PlayedSegment",
    "PlayoutMeter",
    "TurnAdapter",
    "TurnAgent",
    "adapter_for",
    "attach",
    "call_status_event",
    "watch_amd",
    "watch_sip_participant",
]
