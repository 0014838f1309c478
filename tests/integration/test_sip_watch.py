"""``watch_sip_participant`` started before dialing (``place_sip_call``) or after
``create_sip_participant`` returned: then the callee may already be active — present in
the room, or joining it with the status already set."""

from __future__ import annotations

from types import SimpleNamespace

from livekit import rtc
from livekit.agents import AgentSession

from turnfsm import TurnController, TurnPolicy
from turnfsm.adapters.livekit import attach, watch_sip_participant

IDENTITY = "callee"


class _Room(rtc.EventEmitter[str]):
    def __init__(self) -> None:
        super().__init__()
        self.remote_participants: dict[str, SimpleNamespace] = {}


def _participant(status: str) -> SimpleNamespace:
    return SimpleNamespace(identity=IDENTITY, attributes={"sip.callStatus": status})


def _controller() -> TurnController:
    return TurnController(TurnPolicy(direction="outbound", greeting="Hi."), strict=True)


async def test_status_changes_answer_and_end_the_call() -> None:
    controller, room = _controller(), _Room()
    adapter = attach(AgentSession(), controller)
    stop = watch_sip_participant(adapter, room, IDENTITY)
    room.emit("participant_connected", _participant("dialing"))
    assert controller.state == "ringing"
    changed = {"sip.callStatus": "active"}
    room.emit("participant_attributes_changed", changed, _participant("active"))
    assert controller.state == "awaiting_user"
    room.emit("participant_disconnected", _participant("hangup"))
    assert controller.state == "ended"
    stop()
    adapter.detach()


async def test_callee_already_active_in_the_room() -> None:
    controller, room = _controller(), _Room()
    room.remote_participants[IDENTITY] = _participant("active")
    adapter = attach(AgentSession(), controller)
    stop = watch_sip_participant(adapter, room, IDENTITY)
    assert controller.state == "awaiting_user"
    stop()
    adapter.detach()


async def test_callee_joins_already_active() -> None:
    controller, room = _controller(), _Room()
    adapter = attach(AgentSession(), controller)
    stop = watch_sip_participant(adapter, room, IDENTITY)
    room.emit("participant_connected", SimpleNamespace(identity="someone else", attributes={}))
    assert controller.state == "ringing"
    room.emit("participant_connected", _participant("active"))  # no attribute change follows
    assert controller.state == "awaiting_user"
    stop()
    room.emit("participant_disconnected", _participant("hangup"))
    assert controller.state == "awaiting_user"  # no longer watched
    adapter.detach()
