"""Issue 22: the job's trace file and the call its header names.

A room name of about 235 characters or more made ``trace_writer``'s file name too long
for the file system: ``TurnController()`` raised ``OSError`` before ``session.start``,
and the call never started. Now a long name is shortened with a hash of the whole.
"""

from __future__ import annotations

import datetime
from pathlib import Path

from livekit.agents import AgentSession
from livekit.agents.ipc.mock_room import create_mock_room
from livekit.agents.testing import fake_job_context

from turnfsm import Trace, TurnController, TurnPolicy
from turnfsm import events as ev
from turnfsm.adapters.livekit.job import MAX_FILE_NAME, call_info, trace_writer

POLICY = TurnPolicy(direction="outbound", greeting="Hi, this is Ada.")


def _record(room_name: str, folder: Path) -> Trace:
    """A short call of a job in room ``room_name``, traced by the job's writer (in a
    running event loop, as a job's entrypoint is: the session needs one)."""
    room = create_mock_room()
    room.name = room_name
    with fake_job_context(room=room, job_id="AJ_x7Qp2") as ctx:
        writer = trace_writer(ctx, AgentSession(), folder)
        controller = TurnController(POLICY, call=call_info(ctx), trace_sink=writer)
        controller.handle(ev.CallAnswered(at=0.0))
        controller.handle(ev.CallEnded(at=1.0))
        writer.close()
        return Trace.read(writer.path)


async def test_a_long_room_name_is_shortened_with_a_hash(tmp_path: Path) -> None:
    long_names = ["sip-" + "a" * 300, "sip-" + "a" * 299 + "b"]
    for name in long_names:
        assert len(_record(name, tmp_path)) == 2
    files = sorted(path.name for path in tmp_path.iterdir())
    assert len(files) == 2  # alike at the start, told apart by the hash
    assert all(len(name) <= MAX_FILE_NAME for name in files)
    assert all(name.startswith("sip-aaaa") and name.endswith(".jsonl") for name in files)


async def test_a_short_room_name_is_kept_with_the_job_id(tmp_path: Path) -> None:
    _record("call-_+15550100_Xk2p", tmp_path)
    assert [path.name for path in tmp_path.iterdir()] == ["call-__15550100_Xk2p-AJ_x7Qp2.jsonl"]


async def test_the_header_names_the_room_and_when_the_call_started(tmp_path: Path) -> None:
    before = datetime.datetime.now(datetime.timezone.utc)
    call = _record("call-_+15550100_Xk2p", tmp_path).call
    assert call.call_id == "call-_+15550100_Xk2p"
    assert call.started_at is not None
    assert call.started_at.endswith("Z")
    started = datetime.datetime.fromisoformat(call.started_at.replace("Z", "+00:00"))
    assert (
        before - datetime.timedelta(seconds=1) <= started <= before + datetime.timedelta(seconds=5)
    )
    assert call.day == started.date().isoformat()
