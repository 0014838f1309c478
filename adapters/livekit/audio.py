"""Two pass-through links the adapter puts into the session's audio chain.

* :class:`InputGate` sits in front of whatever ``session.input.audio`` is (RoomIO or a
  custom input). Muted, it hands the pipeline silence instead of the caller's frames —
  so VAD ends a speaking state cleanly — and either drops the caller's frames or holds
  them to replay them on unmute. It works for every input, unlike
  ``set_audio_enabled(False)``, whose dropping depends on the input honouring
  ``on_detached`` and which cannot keep the audio.
* :class:`PlayoutMeter` sits in front of ``session.output.audio`` and measures every
  playback segment: seconds pushed, seconds played, interrupted, the synchronized
  transcript when the chain has one, and where in the audio each piece of text starts
  when the TTS says so (LiveKit's timed transcripts: per sentence for a non-streaming
  TTS, per word for aligned ones). The adapter uses it to know what the caller really
  heard, with or without a ``TranscriptSynchronizer``.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from dataclasses import dataclass, field

from livekit import rtc
from livekit.agents.types import USERDATA_TIMED_TRANSCRIPT
from livekit.agents.utils import is_given
from livekit.agents.voice.io import AudioInput, AudioOutput, AudioOutputCapabilities

MAX_HELD_SECONDS = 30.0
"""Held audio beyond this is dropped, oldest first (a muted caller talking for minutes)."""

REPLAY_SPEED = 4.0
"""Held audio is replayed at this many times real time. All at once, the caller's held
utterances reach LiveKit in the same instant: it commits the first, the next one's
speech start cuts the reply to it, and nobody answers the caller. Paced, the pauses
between them keep their meaning (shortened), and the replay catches up with the live
audio after a third of the held time."""


class InputGate(AudioInput):
    """Open, muted (frames dropped) or holding (frames kept for replay); silence while shut."""

    def __init__(self, source: AudioInput) -> None:
        super().__init__(label="turnfsm.InputGate", source=source)
        self._muted = False
        self._holding = False
        self._held: collections.deque[rtc.AudioFrame] = collections.deque()
        self._held_seconds = 0.0

    @property
    def muted(self) -> bool:
        """Whether the caller's audio is kept from the pipeline."""
        return self._muted

    @property
    def held_seconds(self) -> float:
        """Seconds of the caller's audio waiting to be replayed."""
        return self._held_seconds

    def mute(self, *, hold_audio: bool) -> None:
        """Shut the gate; with ``hold_audio`` keep the caller's frames for :meth:`unmute`."""
        self._muted = True
        self._holding = hold_audio

    def unmute(self, *, replay_held_audio: bool) -> None:
        """Open the gate; held frames are replayed first, or discarded."""
        self._muted = False
        self._holding = False
        if not replay_held_audio:
            self._held.clear()
            self._held_seconds = 0.0

    async def __anext__(self) -> rtc.AudioFrame:
        while True:
            if not self._muted and self._held:
                frame = self._held.popleft()
                # exactly 0 once drained: the sum of float durations drifts off it
                self._held_seconds = self._held_seconds - frame.duration if self._held else 0.0
                await asyncio.sleep(frame.duration / REPLAY_SPEED)
                return frame
            frame = await super().__anext__()
            if not self._muted:
                if self._held:  # keep order: what was held plays before what comes now
                    self._hold(frame)
                    continue
                return frame
            if self._holding:
                self._hold(frame)
            return _silence_like(frame)

    def _hold(self, frame: rtc.AudioFrame) -> None:
        self._held.append(frame)
        self._held_seconds += frame.duration
        while self._held_seconds > MAX_HELD_SECONDS and self._held:
            self._held_seconds -= self._held.popleft().duration


def _silence_like(frame: rtc.AudioFrame) -> rtc.AudioFrame:
    return rtc.AudioFrame(
        data=bytes(len(frame.data) * 2),
        sample_rate=frame.sample_rate,
        num_channels=frame.num_channels,
        samples_per_channel=frame.samples_per_channel,
    )


@dataclass(frozen=True)
class PlayedSegment:
    """One playback segment, as measured at the head of the output chain."""

    pushed_seconds: float
    """Audio handed to the output for this segment."""
    played_seconds: float
    """Audio the caller heard (the sink's playback position)."""
    interrupted: bool
    synchronized_transcript: str | None
    """What the chain's transcript synchronizer says was heard, if there is one."""
    timed_text: tuple[tuple[float, str], ...] = ()
    """``(start, text)``: where in the segment's audio each piece of its text starts, as
    the TTS reported it (empty when it did not)."""
    complete: bool = True
    """All of the segment's audio had been pushed before it was cut: ``pushed_seconds`` is
    then its whole length (when a reply is cut while its audio is still coming, it is not)."""


@dataclass
class _SegmentLog:
    pushed: float = 0.0
    timed: list[tuple[float, str]] = field(default_factory=list)
    flushed: bool = False
    complete: bool = False
    cut: bool = False


class PlayoutMeter(AudioOutput):
    """Passes audio on unchanged and reports each finished segment to ``on_segment``."""

    def __init__(
        self,
        next_in_chain: AudioOutput,
        *,
        on_segment_start: Callable[[], None],
        on_segment: Callable[[PlayedSegment], None],
    ) -> None:
        super().__init__(
            label="turnfsm.PlayoutMeter",
            capabilities=AudioOutputCapabilities(pause=next_in_chain.can_pause),
            next_in_chain=next_in_chain,
            sample_rate=next_in_chain.sample_rate,
        )
        self._on_segment_start = on_segment_start
        self._on_segment = on_segment
        self._segments: collections.deque[_SegmentLog] = collections.deque()
        self._capturing = False

    async def capture_frame(self, frame: rtc.AudioFrame) -> None:
        if not self._capturing:
            self._capturing = True
            self._segments.append(_SegmentLog())
            self._on_segment_start()
        log = self._segments[-1]
        for piece in frame.userdata.get(USERDATA_TIMED_TRANSCRIPT, ()):
            start = getattr(piece, "start_time", None)
            offset = float(start) if is_given(start) and start is not None else log.pushed
            log.timed.append((offset, str(piece)))
        log.pushed += frame.duration
        await super().capture_frame(frame)
        assert self.next_in_chain is not None
        await self.next_in_chain.capture_frame(frame)

    def flush(self) -> None:
        super().flush()
        if self._capturing and self._segments:
            # LiveKit flushes a cancelled forwarding too, and clears the buffer in the same
            # step: the segment counts as complete only if no clear follows at once
            log = self._segments[-1]
            log.flushed = True
            asyncio.get_running_loop().call_soon(self._confirm_complete, log)
        self._capturing = False
        assert self.next_in_chain is not None
        self.next_in_chain.flush()

    @staticmethod
    def _confirm_complete(log: _SegmentLog) -> None:
        log.complete = not log.cut

    def clear_buffer(self) -> None:
        if self._segments and not self._segments[-1].complete:
            self._segments[-1].cut = True
        self._capturing = False
        assert self.next_in_chain is not None
        self.next_in_chain.clear_buffer()

    def pause(self) -> None:
        assert self.next_in_chain is not None
        self.next_in_chain.pause()

    def resume(self) -> None:
        assert self.next_in_chain is not None
        self.next_in_chain.resume()

    def on_playback_finished(
        self,
        *,
        playback_position: float,
        interrupted: bool,
        synchronized_transcript: str | None = None,
    ) -> None:
        log = self._segments.popleft() if self._segments else None
        pushed = log.pushed if log is not None else playback_position
        self._on_segment(
            PlayedSegment(
                pushed_seconds=max(pushed, playback_position),
                played_seconds=playback_position,
                interrupted=interrupted,
                synchronized_transcript=synchronized_transcript,
                timed_text=tuple(log.timed) if log is not None else (),
                complete=log is None or log.complete or not interrupted,
            )
        )
        super().on_playback_finished(
            playback_position=playback_position,
            interrupted=interrupted,
            synchronized_transcript=synchronized_transcript,
        )
