"""SIP call status and answering-machine verdicts as turn-machine events.

LiveKit's SIP participant carries ``sip.callStatus``: ``dialing`` (outbound, not yet
picked up), ``ringing`` (inbound), ``automation`` (connected, DTMF still dialing),
``active`` and ``hangup``. The participant exists before the callee answers, so the
call is answered only when the status becomes ``active``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from turnfsm import events as ev

from .adapter import TurnAdapter

CALL_STATUS_ATTRIBUTE = "sip.callStatus"


def call_status_event(status: str, at: float) -> ev.Event | None:
    """The event for a ``sip.callStatus`` value; None for statuses that change nothing.

    >>> call_status_event("active", 1.5)
    CallAnswered(at=1.5)
    >>> call_status_event("automation", 1.0) is None
    True
    """
    if status in ("dialing", "ringing"):
        return ev.CallRinging(at=at)
    if status == "active":
        return ev.CallAnswered(at=at)
    if status == "hangup":
        return ev.CallEnded(at=at, reason="hangup")
    return None


def watch_sip_participant(
    adapter: TurnAdapter, room: Any, participant_identity: str
) -> Callable[[], None]:
    """Feed a SIP participant's call status and disconnect to the adapter.

    Args:
        adapter: the session's adapter.
        room: the ``rtc.Room`` of the call.
        participant_identity: the SIP participant's identity.

    Returns:
        A function that stops watching.
    """

    def on_status(status: str | None) -> None:
        if status and (event := call_status_event(status, adapter.now())) is not None:
            adapter.dispatch(event)

    def on_attributes_changed(changed: dict[str, str], participant: Any) -> None:
        if participant.identity == participant_identity and CALL_STATUS_ATTRIBUTE in changed:
            on_status(changed[CALL_STATUS_ATTRIBUTE])

    def on_connected(participant: Any) -> None:
        # joining with a status is no attribute change: e.g. watched only after
        # create_sip_participant(wait_until_answered=True), before the join reached the room
        if participant.identity == participant_identity:
            on_status(participant.attributes.get(CALL_STATUS_ATTRIBUTE))

    def on_disconnected(participant: Any) -> None:
        if participant.identity == participant_identity:
            adapter.dispatch(ev.CallEnded(at=adapter.now(), reason="participant_disconnected"))

    room.on("participant_connected", on_connected)
    room.on("participant_attributes_changed", on_attributes_changed)
    room.on("participant_disconnected", on_disconnected)
    if (participant := room.remote_participants.get(participant_identity)) is not None:
        on_status(participant.attributes.get(CALL_STATUS_ATTRIBUTE))

    def stop() -> None:
        room.off("participant_connected", on_connected)
        room.off("participant_attributes_changed", on_attributes_changed)
        room.off("participant_disconnected", on_disconnected)

    return stop


def watch_amd(adapter: TurnAdapter, detector: Any) -> Callable[[], None]:
    """Feed a LiveKit ``AMD`` detector's verdicts (``amd_prediction``) to the adapter.

    Human verdicts become ``AnsweringMachineDetected(result="human")``; voicemail, IVR and
    unavailable become ``"machine"``; ``uncertain`` is ignored.
    """

    def on_prediction(prediction: Any) -> None:
        if prediction.is_human or prediction.is_machine:
            result: Literal["human", "machine"] = "human" if prediction.is_human else "machine"
            adapter.dispatch(ev.AnsweringMachineDetected(at=adapter.now(), result=result))

    detector.on("amd_prediction", on_prediction)
    return lambda: detector.off("amd_prediction", on_prediction)
