"""The realtime world: a drawn call on LiveKit's real ``openai.realtime.RealtimeModel``,
talking to the in-process OpenAI Realtime protocol server on the virtual clock.

The caller is the pipeline world's (:class:`~.harness.CallHarness`: the same cues, probes
and hang-up, its lines made with :func:`~turnfsm.adapters.sim.speech.spoken_line`), but
the model hears it: the server's energy VAD decides its turns under the drawn
``server_vad`` settings and transcribes each turn as the callee's lines it heard. The
server answers as the pipeline world's scripted LLM does (:class:`~.harness.PlannedReplies`),
says exactly what turnfsm's ``say_exactly`` asks for, and carries the drawn faults: creates
refused, a response that fails, a socket dropped into the first agent audio, a server-VAD
auto-reply racing the lock.

What the caller heard is told apart as in the pipeline world, with the server standing
for the TTS: the agent notes each message of a speech (its ``transcription_node``) and the
text it streams; the server response that streamed that text gives the reply's whole
text, and the server's own speech timeline which of its words played to their end.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
from collections.abc import AsyncIterable, AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, cast

from livekit.agents.voice.agent import ModelSettings
from livekit.plugins import openai
from openai.types.realtime.realtime_audio_input_turn_detection import ServerVad

from ..realtime import (
    ConformanceError,
    RealtimeConnection,
    RealtimeScript,
    RealtimeTestServer,
    ResponseRecord,
    ResponseRequest,
    ScriptedResponse,
)
from ..realtime import ToolCall as ServerToolCall
from ..realtime.replies import said_exactly, words_heard
from ..session import SimulatedCall
from .draw import RealtimeCallPlan
from .harness import (
    ANCHOR_WAIT,
    FRAME_DURATION,
    POLL,
    CallHarness,
    FuzzAgent,
    Mutation,
    PlannedReplies,
    Recorder,
    Render,
    speech_now,
)


def _normalized(text: str) -> str:
    return " ".join(text.split())


@dataclass
class _Message:
    """One message of a speech as the agent streamed it, and the response it came from."""

    speech_id: str
    step: int
    text: str = ""
    response: ResponseRecord | None = None


class _MessageRecorder(Recorder):
    """Notes each message of a speech and finds the server response that streamed it."""

    def __init__(self, record: Any, server: RealtimeTestServer) -> None:
        super().__init__(record)
        self.server = server
        self.messages: list[_Message] = []
        self._claimed: set[str] = set()

    def message_started(self) -> _Message | None:
        speech_id = speech_now()
        if speech_id is None:
            return None
        speech = self.speech(speech_id)
        speech.steps.append([])
        message = _Message(speech_id, len(speech.steps) - 1)
        self.messages.append(message)
        return message

    async def follow(
        self, message: _Message | None, deltas: AsyncIterable[Any]
    ) -> AsyncIterator[Any]:
        """Pass ``deltas`` on, noting the text of ``message`` as it streams."""
        async for delta in deltas:
            if message is not None:
                message.text += str(delta)
                self._claim(message)
            yield delta

    def _claim(self, message: _Message) -> None:
        """The oldest response not claimed yet that streamed this text (claimed again as
        more text tells replies with the same first words apart)."""
        said = _normalized(message.text)
        claimed = message.response
        if not said or (claimed is not None and _normalized(claimed.reply.text).startswith(said)):
            return
        if claimed is not None:
            self._claimed.discard(claimed.id)
        message.response = None
        for response in self.server.responses:
            text = response.reply.text
            if (
                response.id not in self._claimed
                and _normalized(text).startswith(said)
                and _normalized(response.transcript_sent).startswith(said)
            ):
                self._claimed.add(response.id)
                message.response = response
                _, total_ms = self.server.speech_timeline(text)
                speech = self.speech(message.speech_id)
                speech.steps[message.step] = [Render(text, total_ms / 1000)]
                return


class RealtimeFuzzAgent(FuzzAgent):
    """The fuzzed agent on a realtime model: each message it forwards noted for the
    judges (the model speaks: no ``tts_node``)."""

    def __init__(self, recorder: _MessageRecorder) -> None:
        super().__init__(recorder)
        self._messages = recorder

    def transcription_node(self, text: AsyncIterable[Any], model_settings: ModelSettings) -> Any:
        message = self._messages.message_started()
        return self._messages.follow(message, super().transcription_node(text, model_settings))


@dataclass(frozen=True)
class _Pushed:
    """A frame of the callee's audio the model was given: when, where in the audio the
    model was given (ms), how long, and the callee's line it carries (an utterance's
    index in the call's ledger), if any."""

    at: float
    start_ms: float
    ms: float
    utterance: int | None

    @property
    def end_ms(self) -> float:
        return self.start_ms + self.ms


class _HearingModel(openai.realtime.RealtimeModel):
    """The real plugin's model; each frame its session is given is noted (``on_push``)."""

    def __init__(self, on_push: Callable[[Any], None], **options: Any) -> None:
        super().__init__(**options)
        self._on_push = on_push

    def session(self, *, turn_detection_disabled: bool = False) -> Any:
        session = super().session(turn_detection_disabled=turn_detection_disabled)
        push_audio = session.push_audio

        def noted(frame: Any) -> None:
            self._on_push(frame)
            push_audio(frame)

        session.push_audio = noted  # type: ignore[method-assign]
        return session


class _HeardScript(RealtimeScript):
    """The server's script: replies by the plan, each turn's transcript what the callee
    said in it (``transcribe``)."""

    def __init__(self, transcribe: Callable[[], str], **options: Any) -> None:
        super().__init__(**options)
        self._transcribe = transcribe

    def next_user_transcript(self) -> str:
        return self._transcribe()


def _message_text(item: dict[str, Any]) -> str:
    return "".join(
        part.get("transcript") or part.get("text") or "" for part in item.get("content", [])
    )


class RealtimeHarness(CallHarness):
    """One realtime call: the pipeline world's caller, a realtime model and its server."""

    plan: RealtimeCallPlan

    def _build_call(self, mutation: Mutation) -> SimulatedCall:
        plan, record = self.plan, self.record
        script = _HeardScript(
            self._transcript,
            policy=self._respond,
            refuse_creates=plan.refuse_creates,
            race_auto_replies=plan.race_auto_replies,
            fail_responses=plan.fail_responses,
            fail_after_ms=plan.fail_after_ms,
        )
        self.server = RealtimeTestServer(
            script, fidelity=plan.fidelity, chars_per_second=plan.pace.tts_chars_per_second
        )
        self.recorder = _MessageRecorder(record, self.server)
        record.words_heard = functools.partial(words_heard, self.server)
        self.replies = PlannedReplies(plan)
        self.transcribed: set[int] = set()
        self.pushed: list[_Pushed] = []
        self.dropped: RealtimeConnection | None = None
        self.dropped_at = math.inf
        self.model = _HearingModel(
            self._pushed,
            api_key="dummy",
            turn_detection=ServerVad(type="server_vad", **plan.server_vad),
            **self.server.model_options(),
        )
        return SimulatedCall(
            agent=RealtimeFuzzAgent(self.recorder),
            llm=self.model,
            frame_duration=FRAME_DURATION,
            turn_handling=cast(Any, plan.turn_handling),
            transcript_sync=plan.transcript_sync,
            session_options=plan.session_options,
            before_start=functools.partial(self._before_start, mutation),
        )

    async def run(self) -> None:
        try:
            await super().run()
        finally:
            await self.model.aclose()
            await self.server.aclose(check_conformance=False)
        self._note_broken()
        self._close_lost_audio()
        violations = self.server.take_violations()
        if violations:  # the plugin or the server broke the protocol: a finding
            raise ConformanceError(violations)

    def _note_broken(self) -> None:
        """Mark the speeches whose response the service broke: it failed, or its socket
        dropped before the client had all of it (its end in flight, or never sent)."""
        dropped = {id(r) for r in self.dropped.responses} if self.dropped is not None else set()
        latency = self.plan.fidelity.network_latency_ms / 1000
        for message in self.recorder.messages:
            response = message.response
            if response is None:
                continue
            cut_by_drop = id(response) in dropped and (
                response.done_at is None or response.done_at + latency > self.dropped_at
            )
            if response.status == "failed" or cut_by_drop:
                self.record.speeches[message.speech_id].broken = True

    # -- the server's side -------------------------------------------------------------

    def _respond(self, request: ResponseRequest) -> ScriptedResponse:
        """What the model says: exactly what it is told to, else the plan's answer to the
        turn (after the tool rounds the conversation holds since it)."""
        exact = said_exactly(request.instructions)
        if exact is not None:
            return ScriptedResponse(text=exact)
        items = request.conversation
        user_at = max(
            (
                i
                for i, item in enumerate(items)
                if item.get("type") == "message" and item.get("role") == "user"
            ),
            default=-1,
        )
        turn = _message_text(items[user_at]) if user_at >= 0 else ""
        reply = self.replies.answer(
            request.instructions or "",
            turn=turn,
            rounds=sum(
                item.get("type") == "function_call_output" for item in items[user_at + 1 :]
            ),
            tools_forbidden=request.tool_choice == "none",
        )
        return ScriptedResponse(
            text=reply.text,
            tool_calls=tuple(
                ServerToolCall(call.name, call.arguments) for call in reply.tool_calls
            ),
        )

    def _pushed(self, frame: Any) -> None:
        delivered = self.call.ledger.frame_by_identity(frame)  # held and replayed, or not
        utterance = delivered.utterance if delivered is not None else None
        start_ms = self.pushed[-1].end_ms if self.pushed else 0.0
        self.pushed.append(
            _Pushed(
                at=asyncio.get_running_loop().time(),
                start_ms=start_ms,
                ms=frame.duration * 1000,
                utterance=utterance.index if utterance is not None else None,
            )
        )

    def _transcript(self) -> str:
        """The turn the server commits now: the callee's lines (not transcribed yet) in the
        audio the model was given from the turn's start to what the server has, each whole."""
        server = self.server
        connection = server.connection
        starts = [
            event.payload["audio_start_ms"]
            for event in server.events
            if event.direction == "sent"
            and event.type == "input_audio_buffer.speech_started"
            and event.connection == connection.index
        ]
        before = self._audio_before(connection.index)
        turn_from = (starts[-1] if starts else 0) + before
        turn_to = connection.input_audio_ms + before  # what the server has of it
        in_turn = {
            pushed.utterance
            for pushed in self.pushed
            if pushed.utterance is not None
            and pushed.utterance not in self.transcribed
            and pushed.end_ms > turn_from
            and pushed.start_ms < turn_to
        }
        utterances = self.call.ledger.utterances
        # a line the server's VAD split (a pause in it longer than its silence) is the turn's
        # that holds its end: the model answers the caller once it has the whole of it
        heard = sorted(index for index in in_turn if self._said_by(index, turn_to))
        self.transcribed.update(heard)
        return " ".join(utterances[index].line.text for index in heard)

    def _said_by(self, utterance: int, audio_ms: float) -> bool:
        """Whether all of the callee's line ``utterance`` was in the audio the model was
        given by ``audio_ms``."""
        if self.call.ledger.utterances[utterance].ended_at is None:
            return False  # still being said
        ends = [pushed.end_ms for pushed in self.pushed if pushed.utterance == utterance]
        return bool(ends) and max(ends) <= audio_ms

    def _audio_before(self, connection: int) -> float:
        """Milliseconds of audio the model was given before ``connection`` got its first
        (the server counts the audio of each connection from 0): the first connection
        gets all of it, a later one what is given once it is up (sent when it was, less
        the network's latency)."""
        if connection == 0:
            return 0.0
        first = next(
            (
                event.timestamp
                for event in self.server.events
                if event.connection == connection
                and event.direction == "received"
                and event.type == "input_audio_buffer.append"
            ),
            None,
        )
        if first is None:
            return self.pushed[-1].end_ms if self.pushed else 0.0
        sent_at = first - self.plan.fidelity.network_latency_ms / 1000
        before = [pushed for pushed in self.pushed if pushed.at < sent_at]
        return before[-1].end_ms if before else 0.0

    # -- the caller's side: a socket dropped into the first agent audio ---------------

    async def _caller(self) -> None:
        at = self.plan.drop_socket_at
        dropper = asyncio.ensure_future(self._drop_socket(at)) if at is not None else None
        try:
            await super()._caller()
        finally:
            if dropper is not None:
                dropper.cancel()

    async def _drop_socket(self, offset: float) -> None:
        """Drop the socket ``offset`` seconds into the first agent audio (or once none
        came in time), and note the caller's audio it loses: what its connection had not
        committed yet (to the client's knowledge), and what is said until the next
        connection is up."""
        await self._into_agent_audio(offset)
        server, record = self.server, self.record
        if self.closed.is_set() or not server.connections:
            return
        connection = self.dropped = server.connection
        latency = self.plan.fidelity.network_latency_ms / 1000
        now = asyncio.get_running_loop().time()
        commits = [  # that reached the client: what was in flight is lost with the socket
            event.timestamp
            for event in server.events
            if event.connection == connection.index
            and event.type in ("session.created", "input_audio_buffer.committed")
            and event.timestamp + latency <= now
        ]
        connection.drop()
        self.dropped_at = now
        record.lost_audio.append((record.call_time(commits[-1]), math.inf))
        with contextlib.suppress(TimeoutError):
            await self.call.wait_until(
                lambda: self._reconnected_at() is not None, timeout=ANCHOR_WAIT, poll_interval=POLL
            )
        self._close_lost_audio()

    def _reconnected_at(self) -> float | None:
        """When the connection after the dropped one took its session (call time)."""
        dropped = self.dropped
        assert dropped is not None
        return next(
            (
                self.record.call_time(event.timestamp)
                for event in self.server.events
                if event.connection > dropped.index and event.type == "session.updated"
            ),
            None,
        )

    def _close_lost_audio(self) -> None:
        """End the lost window at the reconnection (or the call's end)."""
        record = self.record
        if record.lost_audio and record.lost_audio[-1][1] == math.inf:
            start, _ = record.lost_audio[-1]
            end = self._reconnected_at() or record.closed_at or self.call.now()
            record.lost_audio[-1] = (start, end)
