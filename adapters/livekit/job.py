"""The pieces of a LiveKit job entrypoint that every turnfsm call needs.

::

    session = AgentSession(...)
    writer = trace_writer(ctx, session)            # traces/<room>-<job id>.jsonl
    controller = TurnController(policy, call=call_info(ctx), trace_sink=writer)
    adapter = attach(session, controller, end_call=hang_up_room(ctx))
    await session.start(agent, room=ctx.room, room_options=...)
    await place_sip_call(ctx, adapter, phone_number=phone_number_to_dial(ctx), ...)

Under ``console`` (a fake job: no server, no SIP), :func:`hang_up_room` ends the job
instead of deleting a room, and :func:`place_sip_call` answers the call at once, so an
outbound agent can be tried from the terminal.
"""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from google.protobuf.duration_pb2 import Duration
from livekit import api
from livekit.agents import AMD, NOT_GIVEN, AgentSession, JobContext

from turnfsm import events as ev
from turnfsm.trace import MAX_CALL_TEXT, CallInfo, TraceWriter

from .adapter import TurnAdapter
from .log import logger
from .sip import watch_amd, watch_sip_participant

RINGING_TIMEOUT = 30
"""Seconds an outbound call may ring before the SIP service gives up."""

MAX_FILE_NAME = 120
"""The longest trace file name :func:`trace_writer` makes (file systems allow 255 bytes,
some encrypted ones about 140): a longer room name is shortened with a hash."""

CONSOLE_NUMBER = "+15550100"
"""The number an outbound agent "calls" under ``console``, where nothing is dialed."""


def phone_number_to_dial(ctx: JobContext) -> str | None:
    """The ``phone_number`` of the job's metadata (``lk dispatch create --metadata
    '{"phone_number": "+1..."}'``); :data:`CONSOLE_NUMBER` under ``console``.

    Without one (or with metadata that is not a JSON object) the error is logged, the job
    is shut down and None is returned: the entrypoint should return.
    """
    try:
        metadata = json.loads(ctx.job.metadata or "{}")
    except json.JSONDecodeError:
        metadata = None
    number = metadata.get("phone_number") if isinstance(metadata, dict) else None
    if isinstance(number, str) and number:
        return number
    if ctx.is_fake_job():
        return CONSOLE_NUMBER
    logger.error(
        "turnfsm: no phone number to dial: dispatch the job with "
        '--metadata \'{"phone_number": "+15550100"}\''  # the metadata itself is not logged
    )
    ctx.shutdown("no phone number in the job metadata")
    return None


def hang_up_room(ctx: JobContext) -> Callable[[str], None]:
    """An ``end_call`` for :func:`~.adapter.attach` that hangs up a SIP call: it deletes
    the room, which disconnects every participant (the SIP callee too) and closes the
    session. Under ``console`` it shuts the job down (there is no room to delete)."""

    def hang_up(reason: str) -> None:
        logger.info("turnfsm: hanging up", extra={"reason": reason, "room": ctx.room.name})
        if ctx.is_fake_job():
            ctx.shutdown(reason)
        else:
            ctx.delete_room()

    return hang_up


def call_info(ctx: JobContext) -> CallInfo:
    """This job's call, for the controller's ``call``: the room name as its id, the
    agent's name, and now (UTC) as its start. Written in the trace's header, it names the
    call in ``turnfsm report`` and groups it by agent and day."""
    started = datetime.datetime.now(datetime.timezone.utc)
    return CallInfo(
        call_id=_shortened(ctx.room.name, MAX_CALL_TEXT) or None,
        started_at=started.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        agent_name=_shortened(ctx.job.agent_name, MAX_CALL_TEXT) or None,
    )


def trace_writer(
    ctx: JobContext, session: AgentSession, directory: str | Path = "traces"
) -> TraceWriter:
    """A :class:`~turnfsm.trace.TraceWriter` for this call, closed when it ends.

    The file is ``<directory>/<room name>-<job id>.jsonl`` (characters other than letters,
    digits, ``.``, ``_`` and ``-`` become ``_``; a name longer than :data:`MAX_FILE_NAME`
    keeps its start and ends with a hash of the whole); the directory is created. Each
    step is written as it happens; the file is closed when the session closes or, at the
    latest, when the job shuts down. Pass the writer as the controller's ``trace_sink``.
    """
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    name = re.sub(r"[^A-Za-z0-9._-]", "_", f"{ctx.room.name or 'room'}-{ctx.job.id}")
    writer = TraceWriter(folder / f"{_shortened(name, MAX_FILE_NAME - len('.jsonl'))}.jsonl")

    async def close_at_shutdown() -> None:
        writer.close()

    def close_after_the_last_step(_event: Any) -> None:
        # after every "close" handler: the adapter's records the call's end first
        asyncio.get_running_loop().call_soon(writer.close)

    session.on("close", close_after_the_last_step)
    ctx.add_shutdown_callback(close_at_shutdown)
    return writer


def _shortened(text: str, limit: int) -> str:
    """``text``, or when longer than ``limit``, its start and a hash of the whole (so two
    long names that start alike stay apart)."""
    if len(text) <= limit:
        return text
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{text[: limit - len(digest) - 1]}-{digest}"


async def place_sip_call(
    ctx: JobContext,
    adapter: TurnAdapter,
    *,
    phone_number: str,
    participant_identity: str,
    trunk_id: str,
    detect_answering_machine: bool = True,
    answering_machine_llm: Any = NOT_GIVEN,
) -> bool:
    """Dial ``phone_number`` into the room and feed the call's progress to the machine.

    Call it after ``session.start``. The call status (``sip.callStatus``) and the hang-up
    reach the machine through :func:`~.sip.watch_sip_participant`, LiveKit's answering
    machine detection (``AMD``, started before dialing so no audio is missed) through
    :func:`~.sip.watch_amd`. A call that fails (busy, no answer within
    :data:`RINGING_TIMEOUT`, rejected) is logged with its SIP status and the job is shut
    down, as in LiveKit's outbound example. Under ``console`` nothing is dialed: the call
    is answered at once.

    ``answering_machine_llm`` classifies the callee's first words (LiveKit's default: its
    inference gateway on LiveKit Cloud, else the session's LLM; a realtime session has no
    such LLM and needs one, e.g. ``openai.LLM(model="gpt-4.1-mini")``). While LiveKit's
    detector listens, it holds agent speech (the greeting) until its verdict.

    Returns:
        Whether the callee answered.

    Raises:
        ValueError: LiveKit's ``AMD`` found no LLM to classify with (before dialing);
            pass ``answering_machine_llm`` or ``detect_answering_machine=False``.
    """
    if ctx.is_fake_job():
        logger.info("turnfsm: console: no SIP call placed, the call is answered at once")
        adapter.dispatch(ev.CallAnswered(at=adapter.now()))
        return True
    if not trunk_id:
        logger.error("turnfsm: no SIP trunk to dial through: set SIP_OUTBOUND_TRUNK_ID")
        ctx.shutdown("no SIP trunk")
        return False
    request = api.CreateSIPParticipantRequest(
        room_name=ctx.room.name,
        sip_trunk_id=trunk_id,
        sip_call_to=phone_number,
        participant_identity=participant_identity,
        ringing_timeout=Duration(seconds=RINGING_TIMEOUT),
        wait_until_answered=True,  # returns once answered; raises if the call fails
    )
    stop_watching = watch_sip_participant(adapter, ctx.room, participant_identity)

    async def stop() -> None:
        stop_watching()

    ctx.add_shutdown_callback(stop)
    try:
        if not detect_answering_machine:
            await ctx.api.sip.create_sip_participant(request)
            return True
        detector = AMD(
            adapter.session, llm=answering_machine_llm, participant_identity=participant_identity
        )
        async with detector:
            stop_detecting = watch_amd(adapter, detector)
            try:
                await ctx.api.sip.create_sip_participant(request)
                await detector.execute()  # LiveKit holds agent speech until the verdict
            finally:
                stop_detecting()
    except api.TwirpError as error:
        logger.error(
            "turnfsm: the call failed",
            extra={
                "error": error.message,
                "sip_status_code": error.metadata.get("sip_status_code"),
                "sip_status": error.metadata.get("sip_status"),
            },
        )
        adapter.dispatch(ev.CallEnded(at=adapter.now(), reason="dial_failed"))
        ctx.shutdown("the call failed")
        return False
    return True
