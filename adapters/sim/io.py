"""Real-time audio and text IO for a simulated call, on LiveKit's own IO base classes.

* :class:`ScriptedAudioInput` is the callee's microphone: it plays the lines of a
  :class:`~turnfsm.adapters.sim.speech.CallScript` in real time and, like RoomIO, drops
  frames while the session has detached it.
* :class:`PacedAudioOutput` is the callee's loudspeaker: it "plays" the agent's audio in
  wall-clock time, can pause, and reports playback to the session exactly as LiveKit
  expects from an audio sink.
* :class:`RecordingTextOutput` keeps the agent's transcript text.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from livekit import rtc
from livekit.agents.voice.io import AudioInput, AudioOutput, AudioOutputCapabilities, TextOutput

from .speech import (
    SAMPLE_RATE,
    CallScript,
    SpeechLedger,
    SpeechLine,
    UserLine,
    Utterance,
    get_line,
)

__all__ = ["PacedAudioOutput", "PlayoutSegment", "RecordingTextOutput", "ScriptedAudioInput"]


FRAME_DURATIONS = (0.01, 0.02, 0.05)
"""Frame lengths the scripted input makes, in seconds (RoomIO's default is 0.05)."""


@dataclass
class _PendingLine:
    at: float
    line: SpeechLine


class ScriptedAudioInput(AudioInput):
    """Microphone of the simulated callee: scripted recorded lines, in real time.

    The input's clock starts when the session first asks for a frame. From then on a
    producer task makes one frame every ``frame_duration`` seconds of loop time, paced
    against the start time (a late frame is followed by the next one at once, so lateness
    never accumulates), and queues it for the session, as RoomIO's track reader does.
    Frames carry silence, or the recorded line that is due; a line that falls due while
    another is playing starts right after it.

    While detached (``session.input.set_audio_enabled(False)``) frames keep being produced
    at the same pace and are dropped, as RoomIO does: the callee keeps talking and that
    speech is lost. Every produced frame is written to the :class:`SpeechLedger`, marked
    delivered or dropped.

    Args:
        script: The lines to play and when.
        ledger: Where produced frames are recorded; a new one when omitted.
        frame_duration: Length of each frame in seconds: 0.01, 0.02, or 0.05 (RoomIO's
            default ``frame_size_ms``; the fuzzer's, half the frames of 0.02 to process).
        label: Label reported to LiveKit.
    """

    def __init__(
        self,
        script: CallScript | Iterable[UserLine] = (),
        *,
        ledger: SpeechLedger | None = None,
        frame_duration: float = 0.02,
        label: str = "ScriptedAudioInput",
    ) -> None:
        super().__init__(label=label)
        if frame_duration not in FRAME_DURATIONS:
            raise ValueError(f"frame_duration must be one of {FRAME_DURATIONS} seconds")
        self._ledger = ledger if ledger is not None else SpeechLedger()
        self._frame_duration = frame_duration
        self._samples_per_frame = round(SAMPLE_RATE * frame_duration)
        script = script if isinstance(script, CallScript) else CallScript(script)
        self._pending = [_PendingLine(entry.at, entry.line) for entry in script]
        self._attached = True
        self._closed = False
        self._started_at: float | None = None
        self._queue: asyncio.Queue[rtc.AudioFrame | None] = asyncio.Queue()
        self._producer: asyncio.Task[None] | None = None
        self._frames_produced = 0
        self._utterance: Utterance | None = None
        self._utterance_position = 0  # next sample of the current utterance

    @property
    def ledger(self) -> SpeechLedger:
        """The ledger this input writes to."""
        return self._ledger

    @property
    def frame_duration(self) -> float:
        """Length of each frame, in seconds."""
        return self._frame_duration

    @property
    def started_at(self) -> float | None:
        """Loop time when the session first asked for a frame, None before that."""
        return self._started_at

    @property
    def attached(self) -> bool:
        """False while the session has detached the input (frames are dropped)."""
        return self._attached

    @property
    def current_utterance(self) -> Utterance | None:
        """The line being played (whether delivered or dropped), None during silence."""
        return self._utterance

    def elapsed(self) -> float:
        """Seconds of call time produced so far (0 before the first frame)."""
        return self._frames_produced * self._frame_duration

    def say_now(self, line: str | SpeechLine) -> None:
        """Play ``line`` (a line of :data:`~.speech.LINES` by name, or a
        :class:`~.speech.SpeechLine`, e.g. from :func:`~.speech.spoken_line`) as soon as
        possible.

        It starts with the next frame, or right after the line being played.

        Raises:
            KeyError: If there is no line of that name.
        """
        line = line if isinstance(line, SpeechLine) else get_line(line)
        self._pending.append(_PendingLine(self.elapsed(), line))
        self._pending.sort(key=lambda pending: pending.at)

    def close(self) -> None:
        """Stop producing frames and end the session's iteration over the input."""
        self._closed = True
        if self._producer is not None:
            self._producer.cancel()
        self._queue.put_nowait(None)

    def on_attached(self) -> None:
        """Deliver frames again (called by ``session.input.set_audio_enabled(True)``)."""
        super().on_attached()
        self._attached = True

    def on_detached(self) -> None:
        """Drop frames from now on (called by ``set_audio_enabled(False)``)."""
        super().on_detached()
        self._attached = False

    async def __anext__(self) -> rtc.AudioFrame:
        if self._producer is None and not self._closed:
            self._started_at = asyncio.get_running_loop().time()
            self._producer = asyncio.create_task(self._produce(), name=self.label)
        frame = await self._queue.get()
        if frame is None:
            self._queue.put_nowait(None)  # every later request ends too
            raise StopAsyncIteration
        return frame

    async def _produce(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._started_at is not None
        while True:
            # a frame is available once its audio has been "spoken", like a real microphone
            due = self._started_at + (self._frames_produced + 1) * self._frame_duration
            delay = due - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            frame = self._produce_frame(now=loop.time())
            if self._attached:
                self._queue.put_nowait(frame)

    def _produce_frame(self, *, now: float) -> rtc.AudioFrame:
        call_time = self.elapsed()
        self._frames_produced += 1
        if self._utterance is None and self._pending and self._pending[0].at <= call_time:
            pending = self._pending.pop(0)
            self._utterance = self._ledger.begin_utterance(pending.line, started_at=now)
            self._utterance_position = 0

        data = np.zeros(self._samples_per_frame, dtype=np.int16)
        utterance = self._utterance
        if utterance is not None:
            samples = utterance.line.samples
            start = self._utterance_position
            chunk = samples[start : start + self._samples_per_frame]
            data[: len(chunk)] = chunk
            self._utterance_position += len(chunk)
            frame = self._frame_of(data)
            self._ledger.record_frame(
                utterance=utterance,
                offset=start / SAMPLE_RATE,
                duration=len(chunk) / SAMPLE_RATE,
                at=now,
                delivered=self._attached,
                frame=frame,
            )
            if self._utterance_position >= len(samples):
                self._ledger.end_utterance(utterance, ended_at=now)
                self._utterance = None
        else:
            frame = self._frame_of(data)
            self._ledger.record_frame(
                utterance=None,
                offset=0.0,
                duration=self._frame_duration,
                at=now,
                delivered=self._attached,
                frame=frame,
            )
        return frame

    def _frame_of(self, data: np.ndarray) -> rtc.AudioFrame:
        return rtc.AudioFrame(
            data=data.tobytes(),
            sample_rate=SAMPLE_RATE,
            num_channels=1,
            samples_per_channel=self._samples_per_frame,
        )


@dataclass
class PlayoutSegment:
    """One playback segment of :class:`PacedAudioOutput` (audio between two flushes).

    Times are ``loop.time()`` values; durations are in seconds.

    Attributes:
        index: Position in :attr:`PacedAudioOutput.segments`.
        captured_at: When its first frame was captured.
        started_at: When it started playing, None if it never did.
        finished_at: When playback finished or was interrupted, None while open.
        pushed: Audio captured for the segment.
        played: Audio actually played.
        interrupted: Whether ``clear_buffer()`` cut it short; None while open.
        pauses: How many times it was paused.
        flushed: Whether all of its audio has been captured (``flush()`` was called).
    """

    index: int
    captured_at: float
    started_at: float | None = None
    finished_at: float | None = None
    pushed: float = 0.0
    played: float = 0.0
    interrupted: bool | None = None
    pauses: int = 0
    flushed: bool = False

    @property
    def finished(self) -> bool:
        """True once playback_finished was reported for this segment."""
        return self.finished_at is not None


class PacedAudioOutput(AudioOutput):
    """Loudspeaker of the simulated callee: plays captured audio in wall-clock time.

    A playout task advances the play position by elapsed loop time (never past the audio
    captured so far, so a slow producer causes an underrun, as on a real device). For each
    segment it calls ``on_playback_started(created_at=time.time())`` when the first frame
    plays, and exactly once ``on_playback_finished(playback_position=<seconds played>,
    interrupted=..., synchronized_transcript=None)``: when all the flushed audio has played,
    or at once when ``clear_buffer()`` interrupts it. Frames captured for an interrupted
    segment before its flush are discarded. ``pause()`` freezes the play position and
    ``resume()`` continues from it.

    Args:
        label: Label reported to LiveKit.
        sample_rate: Required sample rate, or None to accept any.
    """

    def __init__(self, *, label: str = "PacedAudioOutput", sample_rate: int | None = None) -> None:
        super().__init__(
            label=label,
            capabilities=AudioOutputCapabilities(pause=True),
            sample_rate=sample_rate,
        )
        self.segments: list[PlayoutSegment] = []
        """Every playback segment so far, in order."""
        self._capturing = False
        self._paused = False
        self._last_advance = 0.0
        self._changed = asyncio.Event()
        self._playout_task: asyncio.Task[None] | None = None

    @property
    def paused(self) -> bool:
        """True between ``pause()`` and ``resume()``."""
        return self._paused

    @property
    def current_segment(self) -> PlayoutSegment | None:
        """The segment being captured or played, None when idle."""
        if self.segments and not self.segments[-1].finished:
            return self.segments[-1]
        return None

    @property
    def playing(self) -> bool:
        """True while audio is audibly playing (started, not paused, not finished)."""
        segment = self.current_segment
        return (
            segment is not None
            and segment.started_at is not None
            and not self._paused
            and segment.played < segment.pushed
        )

    async def capture_frame(self, frame: rtc.AudioFrame) -> None:
        """Queue a frame of the current segment (starting one if needed)."""
        await super().capture_frame(frame)
        now = self._now()
        if self._playout_task is None:
            self._last_advance = now
            self._playout_task = asyncio.create_task(self._playout(), name="PacedAudioOutput")
        if not self._capturing:
            self._capturing = True
            self.segments.append(PlayoutSegment(index=len(self.segments), captured_at=now))
        segment = self.segments[-1]
        if segment.finished:
            return  # interrupted before its flush: the rest of it is discarded
        self._advance(now)
        segment.pushed += frame.duration
        self._changed.set()

    def flush(self) -> None:
        """Mark the current segment complete: it finishes once all of it has played."""
        super().flush()
        if not self._capturing:
            return
        self._capturing = False
        self.segments[-1].flushed = True
        self._changed.set()

    def clear_buffer(self) -> None:
        """Stop the current segment now and report it as interrupted."""
        segment = self.current_segment
        if segment is None:
            return
        now = self._now()
        self._advance(now)
        self._finish(segment, interrupted=True, now=now)

    def pause(self) -> None:
        """Freeze the play position."""
        super().pause()
        if self._paused:
            return
        self._advance(self._now())
        self._paused = True
        if (segment := self.current_segment) is not None and segment.started_at is not None:
            segment.pauses += 1

    def resume(self) -> None:
        """Continue playing from where ``pause()`` stopped."""
        super().resume()
        if not self._paused:
            return
        self._advance(self._now())
        self._paused = False
        self._changed.set()

    async def aclose(self) -> None:
        """Stop the playout task. Call once the session is closed."""
        if self._playout_task is not None:
            self._playout_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._playout_task
            self._playout_task = None

    @staticmethod
    def _now() -> float:
        return asyncio.get_running_loop().time()

    def _advance(self, now: float) -> None:
        segment = self.current_segment
        if segment is not None and segment.started_at is not None and not self._paused:
            segment.played = min(segment.pushed, segment.played + (now - self._last_advance))
        self._last_advance = now

    def _finish(self, segment: PlayoutSegment, *, interrupted: bool, now: float) -> None:
        segment.finished_at = now
        segment.interrupted = interrupted
        self.on_playback_finished(
            playback_position=segment.played,
            interrupted=interrupted,
            synchronized_transcript=None,
        )

    async def _playout(self) -> None:
        while True:
            now = self._now()
            self._advance(now)
            wake_after: float | None = None
            segment = self.current_segment
            if segment is not None and not self._paused:
                if segment.started_at is None and segment.pushed > 0:
                    segment.started_at = now
                    self.on_playback_started(created_at=time.time())
                remaining = segment.pushed - segment.played
                if remaining > 1e-6:
                    wake_after = remaining
                elif segment.flushed:
                    segment.played = segment.pushed  # what is left is rounding, not audio
                    self._finish(segment, interrupted=False, now=now)
                    continue
            self._changed.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout=wake_after)


class RecordingTextOutput(TextOutput):
    """Text sink that keeps the agent's transcript, segment by segment.

    Args:
        label: Label reported to LiveKit.
        next_in_chain: Optional sink that receives the same text.
    """

    def __init__(
        self, *, label: str = "RecordingTextOutput", next_in_chain: TextOutput | None = None
    ) -> None:
        super().__init__(label=label, next_in_chain=next_in_chain)
        self.segments: list[str] = []
        """Text of every flushed segment, in order."""
        self._current: list[str] = []

    @property
    def pending_text(self) -> str:
        """Text captured for the segment not flushed yet."""
        return "".join(self._current)

    async def capture_text(self, text: str) -> None:
        """Keep ``text`` as part of the current segment."""
        self._current.append(text)
        if self.next_in_chain is not None:
            await self.next_in_chain.capture_text(text)

    def flush(self) -> None:
        """Close the current segment."""
        self.segments.append("".join(self._current))
        self._current = []
        if self.next_in_chain is not None:
            self.next_in_chain.flush()
