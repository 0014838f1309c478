"""turnfsm's loggers, LiveKit's way.

``turnfsm.adapters.livekit`` logs under ``turnfsm`` (as LiveKit's plugins log under
``livekit.plugins.<name>``), with the call's data in ``extra`` fields (``event``,
``state``, ``effect``, ``error``) that LiveKit's log formatters print or put in the JSON
line. Transcript and policy text appear only when the controller keeps text
(``keep_text=True``).

turnfsm registers itself as a LiveKit ``Plugin`` (on the main thread, as LiveKit
requires), so ``lk agent start --log-level ...`` sets turnfsm's level with
LiveKit's own; its DEBUG lines (one per refused lever, late callbacks) stay out of
production logs at LiveKit's default INFO. python-statemachine's engine log is quiet
unless asked for (:mod:`turnfsm._engine_log`).
"""

from __future__ import annotations

import logging
import threading

from livekit.agents import Plugin

from turnfsm import __version__

ROOT_LOGGER = "turnfsm"

logger = logging.getLogger("turnfsm.adapters.livekit")
"""The adapter's logger (a child of :data:`ROOT_LOGGER`)."""


class TurnfsmPlugin(Plugin):
    """turnfsm in LiveKit's plugin registry: its logger's level follows the worker's."""

    def __init__(self) -> None:
        super().__init__("turnfsm", __version__, "turnfsm", logging.getLogger(ROOT_LOGGER))


if threading.current_thread() is threading.main_thread():
    Plugin.register_plugin(TurnfsmPlugin())
