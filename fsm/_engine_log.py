"""python-statemachine's engine log, quiet unless asked for (imported first by ``turnfsm``).

At DEBUG the engine logs every macro- and microstep of every event (the reference
engine, ``TurnController(..., engine="reference")``: the compiled one, the default, runs
no python-statemachine step): dozens of lines per call through whatever handler the
application set (LiveKit's formats each as JSON or colours it, on the session's event
loop). Like LiveKit's own noisy third-party loggers,
the ``statemachine`` logger is set to WARNING unless the application set its level; the
engine decides whether to log once, when it is built, so this must happen before any
machine exists. To see the engine's steps, set the level before creating a controller::

    logging.getLogger("statemachine").setLevel(logging.DEBUG)
"""

from __future__ import annotations

import logging

ENGINE_LOGGER = "statemachine"


def quiet_engine_log() -> None:
    """Set python-statemachine's logger to WARNING, unless its level was set already."""
    engine = logging.getLogger(ENGINE_LOGGER)
    if engine.level == logging.NOTSET:
        engine.setLevel(logging.WARNING)


quiet_engine_log()
