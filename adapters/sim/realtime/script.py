"""What the simulated model says: `RealtimeScript` decides each response of
`RealtimeTestServer` and the transcript of each user utterance."""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "RealtimeScript",
    "ResponsePolicy",
    "ResponseRequest",
    "ResponseTrigger",
    "ScriptedResponse",
    "ToolCall",
]

ResponseTrigger = Literal["response.create", "turn_detected", "tool_output"]
"""Why the server started a response: a client request, a user turn, or a tool result."""


@dataclass(frozen=True)
class ToolCall:
    """A function call the scripted model makes.

    Attributes:
        name: Name of the function tool.
        arguments: Arguments as a mapping (serialised to JSON) or a raw JSON string.
        call_id: Call id to use; a fresh ``call_...`` id when None.
    """

    name: str
    arguments: Mapping[str, Any] | str = field(default_factory=dict)
    call_id: str | None = None

    def arguments_json(self) -> str:
        """Returns the arguments as the JSON string sent on the wire."""
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(dict(self.arguments))


@dataclass(frozen=True)
class ScriptedResponse:
    """What one response contains: spoken text, then function calls, in that order.

    Attributes:
        text: Text to speak; no message item is produced when empty.
        tool_calls: Function calls emitted after the message item.
    """

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()


@dataclass(frozen=True)
class ResponseRequest:
    """What the scripted model sees when the server starts a response.

    Attributes:
        trigger: Why the response starts.
        instructions: Effective instructions (per-response override, else the session's).
        tool_choice: Effective tool choice, e.g. ``"auto"``, ``"none"`` or
            ``{"type": "function", "name": ...}``.
        tool_names: Names of the effective function tools.
        conversation: Snapshot of the server-side conversation items.
        params: The ``response`` object of ``response.create``; empty for server-initiated
            responses.
    """

    trigger: ResponseTrigger
    instructions: str | None
    tool_choice: str | dict[str, Any]
    tool_names: tuple[str, ...]
    conversation: tuple[dict[str, Any], ...]
    params: Mapping[str, Any]


ResponsePolicy = Callable[[ResponseRequest], "ScriptedResponse | str"]
"""Decides a response from its request; a ``str`` is shorthand for spoken text."""


class RealtimeScript:
    """Decides what the simulated model does, one response at a time.

    Each response is decided in this order: ``always_call_tool`` (unless the effective
    ``tool_choice`` is ``"none"`` or the tool is not declared), then the next queued
    response, then ``policy``, then ``default_text``.

    Args:
        responses: Queued responses, consumed in order; a ``str`` is spoken text.
        policy: Called when the queue is empty.
        user_transcripts: Transcripts of the user's committed utterances, in order.
        always_call_tool: Name of a tool that every response calls (loop tests).
        tool_arguments: Arguments for ``always_call_tool``.
        auto_tool_reply: If True, the server itself starts a response once every function
            call in the conversation has an output, like models that reply to tool
            results server-side.
        default_text: Spoken when nothing else decides.
        refuse_creates: How many of the client's next ``response.create`` the server
            refuses with the error it sends while a response is active
            (``conversation_already_has_active_response``). The service refuses a create
            only behind an active response, so one is there: when none is, the server
            starts its own reply just before the create lands (a turn it answers).
        race_auto_replies: How many of the next user turns the server answers although
            ``create_response`` is off, as when the ``session.update`` that turned it
            off arrived just after the turn was committed (server VAD racing a lock).
        fail_responses: How many of the next responses the client asks for
            (``response.create``) end ``failed`` after ``fail_after_ms`` of audio.
        fail_after_ms: How much audio a failing response generates before it fails.
    """

    def __init__(
        self,
        responses: Iterable[ScriptedResponse | str] = (),
        *,
        policy: ResponsePolicy | None = None,
        user_transcripts: Iterable[str] = (),
        always_call_tool: str | None = None,
        tool_arguments: Mapping[str, Any] | None = None,
        auto_tool_reply: bool = False,
        default_text: str = "Okay.",
        refuse_creates: int = 0,
        race_auto_replies: int = 0,
        fail_responses: int = 0,
        fail_after_ms: int = 1000,
    ) -> None:
        self._responses: deque[ScriptedResponse] = deque(
            self._coerce(response) for response in responses
        )
        self._user_transcripts: deque[str] = deque(user_transcripts)
        self._utterance_count = 0
        self.policy = policy
        self.always_call_tool = always_call_tool
        self.tool_arguments: Mapping[str, Any] = dict(tool_arguments or {})
        self.auto_tool_reply = auto_tool_reply
        self.default_text = default_text
        self.refuse_creates = refuse_creates
        self.race_auto_replies = race_auto_replies
        self.fail_responses = fail_responses
        self.fail_after_ms = fail_after_ms
        self.requests: list[ResponseRequest] = []
        """Every request decided so far, in order."""

    @staticmethod
    def _coerce(response: ScriptedResponse | str) -> ScriptedResponse:
        return ScriptedResponse(text=response) if isinstance(response, str) else response

    def push_response(self, response: ScriptedResponse | str) -> None:
        """Queues a response after the ones already queued."""
        self._responses.append(self._coerce(response))

    def push_user_transcript(self, transcript: str) -> None:
        """Queues the transcript of a future user utterance."""
        self._user_transcripts.append(transcript)

    def next_response(self, request: ResponseRequest) -> ScriptedResponse:
        """Decides the content of a response and records its request.

        Args:
            request: What the model is asked for.

        Returns:
            The scripted content of the response.
        """
        self.requests.append(request)
        if (
            self.always_call_tool is not None
            and request.tool_choice != "none"
            and self.always_call_tool in request.tool_names
        ):
            return ScriptedResponse(
                tool_calls=(ToolCall(self.always_call_tool, self.tool_arguments),)
            )
        if self._responses:
            return self._responses.popleft()
        if self.policy is not None:
            return self._coerce(self.policy(request))
        return ScriptedResponse(text=self.default_text)

    def next_user_transcript(self) -> str:
        """Returns the transcript of the next committed utterance.

        Returns:
            The next scripted transcript, or ``"user utterance <n>"`` once they run out.
        """
        self._utterance_count += 1
        if self._user_transcripts:
            return self._user_transcripts.popleft()
        return f"user utterance {self._utterance_count}"
