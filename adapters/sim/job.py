"""Run a LiveKit job entrypoint offline, on a simulated call, as ``console`` would.

Under LiveKit's ``console`` subcommand the job is a fake one (no server, no SIP), its room
is LiveKit's console mock room, and ``session.start`` ignores the room: the console's own
audio is the session's. Here the simulated call's audio is; the job context is LiveKit's
own ``livekit.agents.testing.fake_job_context`` on the same mock room::

    call = SimulatedCall(CallScript([UserLine(0.5, "hello")]))
    async with run_entrypoint(example.outbound_caller, call, build_session=...) as ctx:
        await call.wait_for_event("conversation_item_added", timeout=8)
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from livekit.agents import AgentSession, JobContext
from livekit.agents.ipc.mock_room import create_mock_room
from livekit.agents.testing import fake_job_context
from livekit.agents.types import NOT_GIVEN

from .session import SimulatedCall, load_silero_vad

__all__ = ["ConsoleSession", "run_entrypoint"]


class ConsoleSession(AgentSession):
    """An ``AgentSession`` that starts without its room, as under ``console``: its audio
    is already set (the simulated call's), so the entrypoint's ``room`` and
    ``room_options`` are not used."""

    async def start(self, agent: Any, **options: Any) -> Any:  # type: ignore[override]
        options["room"] = NOT_GIVEN
        options["room_options"] = NOT_GIVEN
        options.setdefault("record", False)
        return await super().start(agent, **options)


@contextlib.asynccontextmanager
async def run_entrypoint(
    entrypoint: Callable[[JobContext], Awaitable[None]],
    call: SimulatedCall,
    *,
    metadata: str = "",
) -> AsyncIterator[JobContext]:
    """Run ``entrypoint`` in a fake job whose session is ``call``'s, then close the call.

    The entrypoint must build its session with the job's ``proc`` (``userdata["vad"]`` is
    the bundled silero VAD, as a prewarm would load it); the caller makes that session
    ``call.build_session(ConsoleSession)``. Yields once the entrypoint has returned and
    the call's audio is flowing; on exit the session closes (its ``close`` event fires,
    as when a caller hangs up) and the job's shutdown callbacks run.
    """
    with fake_job_context(room=create_mock_room(), job_metadata=metadata) as ctx:
        ctx.proc.userdata["vad"] = load_silero_vad()
        try:
            await entrypoint(ctx)
            await call.wait_started()
            yield ctx
        finally:
            await call.aclose()
            for callback in ctx._shutdown_callbacks:  # what the job runner does at shutdown
                await callback("test over")
