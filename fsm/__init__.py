"""turnfsm: explicit, checked, drawable turn-taking for LiveKit Agents voice agents.

The package is pure: no LiveKit, no asyncio, no clock, no I/O. LiveKit lives in
:mod:`turnfsm.adapters`.
"""

from . import _engine_log as _engine_log  # quiets python-statemachine's log, first
from . import effects, events
from .controller import ConcurrentUseError, TurnController, replay
from .invariants import INVARIANTS, InvariantViolation, SafetyMonitor
from .machine import TurnMachine
from .policy import TurnPolicy
from .trace import Trace, TraceFormatError, TraceStep, TraceWriter

__version__ = "0.1.0"
"""The release (the distribution's version is read from here; CHANGELOG.md says what it
holds)."""

__all__ = [
    "ConcurrentUseError",
    "INVARIANTS",
    "InvariantViolation",
    "SafetyMonitor",
    "Trace",
    "TraceFormatError",
    "TraceStep",
    "TraceWriter",
    "TurnController",
    "TurnMachine",
    "TurnPolicy",
    "effects",
    "events",
    "replay",
]
