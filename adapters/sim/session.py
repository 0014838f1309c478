"""A real LiveKit ``AgentSession`` wired to the simulated call components, without a room.

:class:`SimulatedCall` builds the session with the bundled silero VAD, the scripted
LLM/STT/TTS and the real-time audio IO, starts it, records every session event on the
call's clock, and offers helpers to wait for conditions::

    async with SimulatedCall(CallScript([UserLine(0.3, "question")])) as call:
        await call.wait_for_event("conversation_item_added", timeout=8)
        print(call.session.history.items)
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import numpy as np
from livekit.agents import Agent, AgentSession, llm, vad
from livekit.agents.voice.events import EventTypes
from livekit.agents.voice.transcription._speaking_rate import SpeakingRateStream
from livekit.agents.voice.transcription.synchronizer import TranscriptSynchronizer
from livekit.agents.voice.turn import TurnHandlingOptions
from livekit.plugins import silero

from .io import PacedAudioOutput, RecordingTextOutput, ScriptedAudioInput
from .models import ScriptedLLM, ScriptedSTT, ScriptedTTS
from .speech import CallScript, SpeechLedger, UserLine

__all__ = [
    "DEFAULT_TURN_HANDLING",
    "LIVEKIT_DEFAULT_TURN_HANDLING",
    "RecordedEvent",
    "SimulatedCall",
    "load_silero_vad",
    "remember_speaking_rates",
]

DEFAULT_TURN_HANDLING: TurnHandlingOptions = {
    "turn_detection": "vad",
    "interruption": {"mode": "vad"},
    "preemptive_generation": {"enabled": False},
}
"""Turn handling of a simulated call: local VAD turns and barge-in, no preemptive replies."""

LIVEKIT_DEFAULT_TURN_HANDLING: TurnHandlingOptions = {"turn_detection": "vad"}
"""LiveKit 1.8.9's own turn handling, offline: preemptive generation on, interruption and
false-interruption settings at their defaults (``mode`` left to LiveKit). Only the turn
detector differs: LiveKit's default, ``inference.TurnDetector()``, is a LiveKit Cloud
model; VAD endpointing (LiveKit's own fallback without it) stands in."""

RECORDED_EVENTS: tuple[EventTypes, ...] = (
    "user_state_changed",
    "agent_state_changed",
    "user_input_transcribed",
    "user_transcription_timeout",
    "conversation_item_added",
    "agent_false_interruption",
    "overlapping_speech",
    "function_tools_executed",
    "speech_created",
    "tool_execution_updated",
    "error",
    "close",
)
"""Session events that :class:`SimulatedCall` records."""


@functools.cache
def load_silero_vad() -> vad.VAD:
    """The bundled silero VAD with default options, loaded once per process.

    Loading takes a while; one instance can serve any number of sessions, in any loop.
    Its model remembers what it answered to inputs it was given before
    (:class:`InferenceMemo`): the same answers, without running it again.
    """
    loaded = silero.VAD.load()
    loaded._onnx_session = InferenceMemo(loaded._onnx_session)  # type: ignore[attr-defined]
    return loaded


_Inputs = tuple[tuple[str, str, tuple[int, ...], bytes], ...]
"""Everything silero's model is given, exactly: for each input by name, its dtype, shape and
bytes (the window of samples with the previous window's tail, the recurrent state, the
sample rate)."""


class InferenceMemo:
    """The silero model's ONNX session, answering inputs met before from memory.

    The model is a pure function of its inputs: a window of samples (with the previous
    window's tail as context), its recurrent state and the sample rate. Simulated calls
    repeat each other's inputs exactly where they begin alike: every call starts from a
    zeroed state with silence until the caller's first sound, and calls that play the
    same lines at the same times (as tests do, many times over) hear the same windows
    from the same states for as long as they agree. Where calls differ, nothing recurs:
    a fuzzed call speaks lines made from its own seed, and the state under silence never
    settles (still moving after 3,000 windows of zeros), so a fuzz run repeats only the
    opening silence.

    So the memo keeps the model's outputs for inputs it has met twice: a first run
    leaves the inputs' hash in a bounded set of sightings, a second keeps the outputs,
    keyed by the exact bytes of every input (compared in full), and every later run of
    those inputs is answered from memory. An answer from memory is a copy of what the
    model once returned to those very inputs: bit for bit what running it again gives,
    so the VAD decides exactly as it would without the memo.

    Args:
        session: The ``onnxruntime.InferenceSession`` silero loaded.
        limit: Answers kept at most (each about 5 KB: the inputs' bytes and the outputs).
        sightings: Hashes of inputs met once kept at most; the set starts over when full.
    """

    def __init__(self, session: Any, *, limit: int = 20_000, sightings: int = 200_000) -> None:
        self._session = session
        self._limit = limit
        self._sightings = sightings
        self._answers: dict[_Inputs, tuple[np.ndarray, ...]] = {}
        self._sighted: set[int] = set()
        self.hits = 0
        self.runs = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)  # the rest of the session's API, as it is

    def run(self, output_names: Any, input_feed: dict[str, Any], *args: Any) -> Any:
        """``InferenceSession.run``, from memory where the memo has the answer."""
        if (
            output_names is not None
            or args
            or not all(isinstance(value, np.ndarray) for value in input_feed.values())
        ):
            self.runs += 1
            return self._session.run(output_names, input_feed, *args)  # not silero's call
        key = tuple(
            (name, value.dtype.str, value.shape, value.tobytes())
            for name, value in sorted(input_feed.items())
        )
        known = self._answers.get(key)
        if known is not None:
            self.hits += 1
            return [output.copy() for output in known]  # the caller may change them
        self.runs += 1
        outputs = self._session.run(None, input_feed)
        sighting = hash(key)
        if sighting in self._sighted and len(self._answers) < self._limit:
            self._answers[key] = tuple(output.copy() for output in outputs)
        else:
            if len(self._sighted) >= self._sightings:
                self._sighted.clear()
            self._sighted.add(sighting)
        return outputs


_RateInputs = tuple[bytes, str, tuple[int, ...], int, float]
"""What LiveKit's speaking-rate estimate reads: the window's bytes, their dtype and shape,
the sample rate, and the stream's silence threshold."""


class SpeakingRateMemo:
    """LiveKit's speaking-rate estimate of the agent's audio, answered from memory.

    A ``TranscriptSynchronizer`` paces the transcript by how fast the agent speaks, which
    it estimates from the agent's audio every 0.1 s: a spectral flux over the last second
    (``SpeakingRateStream._compute_speaking_rate``), a pure function of those samples,
    their sample rate and the stream's silence threshold, and costly (an FFT every
    12.5 ms of audio). The scripted TTS renders every reply as the same tone from the
    same phase, so a reply's windows are those of any other reply as long, up to its
    last second: nearly every estimate of a simulated call was made before (95 % of
    them over 60 fuzzed calls). The memo keeps each estimate, keyed by the window's
    exact bytes (compared in full) and the rest of what the estimate reads, and answers
    a window it has seen with the float computed for it then: the same value, so the
    synchronizer paces the text exactly as without the memo.

    Args:
        compute: The estimate, ``SpeakingRateStream._compute_speaking_rate`` as LiveKit
            defines it.
        limit_bytes: Window bytes kept at most (a second of 24 kHz audio is 96 KB); past
            it, new windows are estimated without being kept.
    """

    def __init__(
        self,
        compute: Callable[[SpeakingRateStream, np.ndarray, int], float],
        *,
        limit_bytes: int = 64 * 2**20,
    ) -> None:
        self._compute = compute
        self._limit_bytes = limit_bytes
        self._rates: dict[_RateInputs, float] = {}
        self.kept_bytes = 0
        self.hits = 0
        self.runs = 0

    def rate(self, stream: SpeakingRateStream, audio: np.ndarray, sample_rate: int) -> float:
        """The estimate of ``audio``, from memory where the memo has it."""
        samples = audio.tobytes()
        key = (
            samples,
            audio.dtype.str,
            audio.shape,
            sample_rate,
            stream._opts._silence_threshold,
        )
        known = self._rates.get(key)
        if known is not None:
            self.hits += 1
            return known
        self.runs += 1
        estimate = self._compute(stream, audio, sample_rate)
        if self.kept_bytes + len(samples) <= self._limit_bytes:
            self._rates[key] = estimate
            self.kept_bytes += len(samples)
        return estimate


@functools.cache
def remember_speaking_rates() -> SpeakingRateMemo:
    """Make LiveKit's speaking-rate estimate answer from a :class:`SpeakingRateMemo`,
    process-wide, once (every ``TranscriptSynchronizer`` of the process uses it; its
    answers are the estimate's own). :class:`SimulatedCall` does so with
    ``transcript_sync``."""
    memo = SpeakingRateMemo(SpeakingRateStream._compute_speaking_rate)

    def compute_speaking_rate(
        stream: SpeakingRateStream, audio: np.ndarray, sample_rate: int
    ) -> float:
        return memo.rate(stream, audio, sample_rate)

    SpeakingRateStream._compute_speaking_rate = compute_speaking_rate  # type: ignore[method-assign,assignment]
    return memo


@dataclass(frozen=True)
class RecordedEvent:
    """A session event, stamped with the call time at which it was emitted.

    Attributes:
        at: Seconds since the audio input started.
        name: The event name (as passed to ``session.on``).
        event: The event object.
    """

    at: float
    name: str
    event: Any


def _merge_turn_handling(
    base: TurnHandlingOptions, overrides: TurnHandlingOptions | None
) -> TurnHandlingOptions:
    merged: dict[str, Any] = dict(base)
    for key, value in (overrides or {}).items():
        current = merged.get(key)
        merged[key] = (
            {**current, **value}
            if isinstance(current, dict) and isinstance(value, dict)
            else value
        )
    return merged  # type: ignore[return-value]


class SimulatedCall:
    """An outbound call to a simulated callee, driven by a real ``AgentSession``.

    The session gets the silero VAD, the scripted models and the simulated IO (set before
    ``session.start(agent)``; no room), ``aec_warmup_duration=None`` and
    :data:`DEFAULT_TURN_HANDLING` updated with ``turn_handling``. Use it as an async
    context manager, or call :meth:`start` and :meth:`aclose`.

    Args:
        script: What the callee says and when.
        agent: The agent to run; a plain instructed :class:`Agent` by default.
        llm: The LLM; a default :class:`ScriptedLLM` when omitted. A realtime model
            (``llm.RealtimeModel``, e.g. ``openai.realtime.RealtimeModel`` on a
            :class:`~turnfsm.adapters.sim.realtime.RealtimeTestServer`) hears the callee
            itself: the session then gets no STT, TTS or VAD, and LiveKit's own turn
            handling updated with ``turn_handling``.
        stt: The STT; by default a :class:`ScriptedSTT` on the call's ledger. When given,
            its ledger becomes the call's ledger.
        tts: The TTS; a default :class:`ScriptedTTS` when omitted.
        final_lag: ``final_lag`` of the default STT, in seconds.
        frame_duration: Audio input frame length (0.01, 0.02 or 0.05 s).
        turn_handling: Overrides of :data:`DEFAULT_TURN_HANDLING` (merged per key), or of
            :data:`LIVEKIT_DEFAULT_TURN_HANDLING` with ``livekit_defaults``.
        livekit_defaults: Run under LiveKit's own turn handling
            (:data:`LIVEKIT_DEFAULT_TURN_HANDLING`) instead of the simulation's.
        vad: The VAD; :func:`load_silero_vad` when omitted.
        text_output: Also attach a :class:`RecordingTextOutput` as transcription sink.
        transcript_sync: Put a LiveKit ``TranscriptSynchronizer`` in front of the audio
            output and a :class:`RecordingTextOutput` (implied), as RoomIO does with
            ``sync_transcription``: text is released as the audio plays, and an
            interrupted reply is committed only up to what was heard. Its speaking-rate
            estimates come from memory where made before (:func:`remember_speaking_rates`).
        session_options: Further ``AgentSession`` keyword arguments
            (e.g. ``max_tool_steps``, ``user_away_timeout``). Unless given,
            ``session_close_transcript_timeout`` is the STT's ``final_lag`` plus 0.3 s:
            on close LiveKit waits that long for a last final transcript, which the
            scripted STT only sends after speech.
        before_start: Called with the session after its IO is set and before it starts,
            e.g. to ``attach`` a turn controller.

    Attributes:
        session: The ``AgentSession`` (created by :meth:`start`).
        agent: The running agent.
        ledger: What the callee's audio input produced and delivered.
        audio_input: The callee's microphone.
        audio_output: The callee's loudspeaker, with its log of playback segments.
        text_output: The transcription sink, if requested.
        synchronizer: The ``TranscriptSynchronizer``, with ``transcript_sync``.
        llm: The LLM.
        stt: The STT.
        tts: The TTS.
        events: Every recorded session event, in order.
    """

    def __init__(
        self,
        script: CallScript | Iterable[UserLine] = (),
        *,
        agent: Agent | None = None,
        llm: ScriptedLLM | llm.RealtimeModel | None = None,
        stt: ScriptedSTT | None = None,
        tts: ScriptedTTS | None = None,
        final_lag: float = 0.1,
        frame_duration: float = 0.02,
        turn_handling: TurnHandlingOptions | None = None,
        livekit_defaults: bool = False,
        vad: vad.VAD | None = None,
        text_output: bool = False,
        transcript_sync: bool = False,
        session_options: Mapping[str, Any] | None = None,
        before_start: Callable[[AgentSession], object] | None = None,
    ) -> None:
        self.ledger: SpeechLedger = stt.ledger if stt is not None else SpeechLedger()
        self.audio_input = ScriptedAudioInput(
            script, ledger=self.ledger, frame_duration=frame_duration
        )
        self.audio_output = PacedAudioOutput()
        self.text_output = RecordingTextOutput() if text_output or transcript_sync else None
        self._transcript_sync = transcript_sync
        self.synchronizer: TranscriptSynchronizer | None = None
        self.llm = llm if llm is not None else ScriptedLLM()
        self.stt = stt if stt is not None else ScriptedSTT(self.ledger, final_lag=final_lag)
        self.tts = tts if tts is not None else ScriptedTTS()
        self.agent = agent if agent is not None else Agent(instructions="You are on a call.")
        self.events: list[RecordedEvent] = []
        self._vad = vad
        base = LIVEKIT_DEFAULT_TURN_HANDLING if livekit_defaults else DEFAULT_TURN_HANDLING
        if self.realtime:
            base = {}
        self._turn_handling = _merge_turn_handling(base, turn_handling)
        self._session_options = {
            "aec_warmup_duration": None,
            "session_close_transcript_timeout": self.stt.final_lag + 0.3,
            **(session_options or {}),
        }
        self._before_start = before_start
        self._session: AgentSession | None = None
        self._started_at: float | None = None

    @property
    def realtime(self) -> bool:
        """Whether the call's model is a realtime model (it hears the callee itself)."""
        return isinstance(self.llm, llm.RealtimeModel)

    @property
    def session(self) -> AgentSession:
        """The running ``AgentSession``.

        Raises:
            RuntimeError: Before :meth:`start`.
        """
        if self._session is None:
            raise RuntimeError("the call has not been started")
        return self._session

    async def start(self) -> SimulatedCall:
        """Build and start the session, and wait until the callee's audio is flowing."""
        session = self.build_session()
        if self._before_start is not None:
            self._before_start(session)
        await session.start(self.agent, record=False)
        await self.wait_started()
        return self

    def build_session(self, session_class: type[AgentSession] = AgentSession) -> AgentSession:
        """Build the session on the call's models and IO, without starting it: for code
        that starts it itself, e.g. a job entrypoint (then :meth:`wait_started`)."""
        models: dict[str, Any] = {"llm": self.llm, "vad": None}
        if not self.realtime:
            models.update(
                stt=self.stt,
                tts=self.tts,
                vad=self._vad if self._vad is not None else load_silero_vad(),
            )
        session = session_class(
            turn_handling=self._turn_handling, **models, **self._session_options
        )
        self._session = session
        for name in RECORDED_EVENTS:
            session.on(name, functools.partial(self._record, name))
        session.input.audio = self.audio_input
        session.output.audio = self.audio_output
        if self.text_output is not None:
            session.output.transcription = self.text_output
        if self._transcript_sync:
            remember_speaking_rates()
            self.synchronizer = TranscriptSynchronizer(
                next_in_chain_audio=self.audio_output, next_in_chain_text=self.text_output
            )
            session.output.audio = self.synchronizer.audio_output
            session.output.transcription = self.synchronizer.text_output
        self._started_at = asyncio.get_running_loop().time()
        return session

    async def wait_started(self) -> None:
        """Wait until the started session's audio input is flowing (the call's clock)."""
        await self.wait_until(lambda: self.audio_input.started_at is not None, timeout=5.0)

    async def aclose(self) -> None:
        """Close the session and stop the simulated IO."""
        if self._session is not None:
            await self._session.aclose()
        if self.synchronizer is not None:
            await self.synchronizer.aclose()
        self.audio_input.close()
        await self.audio_output.aclose()

    async def __aenter__(self) -> SimulatedCall:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    def now(self) -> float:
        """Call time: seconds since the callee's audio input started (the script's clock)."""
        loop = asyncio.get_running_loop()
        origin = self.audio_input.started_at or self._started_at
        return 0.0 if origin is None else loop.time() - origin

    def messages(self, role: llm.ChatRole | None = None) -> list[llm.ChatMessage]:
        """The chat messages in ``session.history``, optionally only those of ``role``."""
        return [
            item
            for item in self.session.history.items
            if item.type == "message" and (role is None or item.role == role)
        ]

    def events_named(self, name: str) -> list[RecordedEvent]:
        """The recorded events called ``name``, in order."""
        return [event for event in self.events if event.name == name]

    async def wait_until(
        self, condition: Callable[[], bool], *, timeout: float, poll_interval: float = 0.01
    ) -> float:
        """Wait until ``condition()`` holds.

        Returns:
            The call time at which it was seen to hold.

        Raises:
            TimeoutError: If it did not hold within ``timeout`` seconds.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not condition():
            if loop.time() >= deadline:
                raise TimeoutError(
                    f"condition not met within {timeout} s (call time {self.now():.2f} s)"
                )
            await asyncio.sleep(poll_interval)
        return self.now()

    async def wait_for_event(
        self,
        name: str,
        predicate: Callable[[Any], bool] | None = None,
        *,
        timeout: float,
        after: float | None = None,
    ) -> RecordedEvent:
        """Wait for a session event (one already recorded counts too).

        Args:
            name: Event name, e.g. ``"agent_state_changed"``.
            predicate: Condition on the event object.
            timeout: Seconds to wait at most.
            after: Only consider events at or after this call time.

        Returns:
            The first matching recorded event.

        Raises:
            TimeoutError: If no such event arrived in time.
        """

        def find() -> RecordedEvent | None:
            for recorded in self.events:
                if (
                    recorded.name == name
                    and (after is None or recorded.at >= after)
                    and (predicate is None or predicate(recorded.event))
                ):
                    return recorded
            return None

        await self.wait_until(lambda: find() is not None, timeout=timeout)
        found = find()
        assert found is not None
        return found

    async def sleep_until(self, call_time: float) -> None:
        """Sleep until the call clock reaches ``call_time`` seconds."""
        delay = call_time - self.now()
        if delay > 0:
            await asyncio.sleep(delay)

    def _record(self, name: str, event: Any) -> None:
        self.events.append(RecordedEvent(at=self.now(), name=name, event=event))
