"""Two pass-through links the adapter puts into the session's audio chain.

* :class:`InputGate` sits in front of whatever ``session.input.audio`` is (RoomIO or a
  custom input). Muted, it hands the pipeline silence instead of the caller's frames —
  so VAD ends a speaking state cleanly — and either drops the caller's frames or holds
  them to replay them on unmute. It works for every input, unlike
  ``set_audio_enabled(False)``, whose dropping depends on the input honouring
  ``on_detached`` and which cannot keep the audio.
* :class:`PlayoutMeter` measures every playback segment of ``session.output.audio``:
  seconds pushed, seconds played, interrupted, the synchronized transcript when the chain
  has one, and where in the audio each piece of text starts when the TTS says so
  (LiveKit's timed transcripts: per sentence for a non-streaming TTS, per word for aligned
  ones). The adapter uses it to know what the caller really heard, with or without a
  ``TranscriptSynchronizer``. :func:`measure_playout` puts it right behind the session's
  output object (e.g. RoomIO's transcript synchronizer), so ``session.output.audio`` stays
  the object LiveKit or the app put there; only a bare sink, with nothing behind it, gets
  the meter in front.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from livekit import rtc
from livekit.agents.types import USERDATA_TIMED_TRANSCRIPT
from livekit.agents.utils import is_given
from livekit.agents.voice.io import (
    AgentOutput,
    AudioInput,
    AudioOutput,
    AudioOutputCapabilities,
    PlaybackFinishedEvent,
)

_OutputEvent = Literal["playback_finished", "playback_started", "playback_progressed"]

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
        """Frames kept by a holding mute, not released yet."""
        self._replaying: collections.deque[rtc.AudioFrame] = collections.deque()
        """Frames an unmute released for replay, not passed on yet (then the live ones
        that came meanwhile, so the order is kept)."""
        self._held_seconds = 0.0
        self._replayed: list[asyncio.Future[None]] = []
        """Waiting for the replay to be over (:meth:`replayed`)."""

    @property
    def muted(self) -> bool:
        """Whether the caller's audio is kept from the pipeline."""
        return self._muted

    @property
    def held_seconds(self) -> float:
        """Seconds of the caller's audio waiting to be replayed (held, or being replayed)."""
        return self._held_seconds

    def mute(self, *, hold_audio: bool) -> None:
        """Shut the gate; with ``hold_audio`` keep the caller's frames for :meth:`unmute`."""
        self._muted = True
        self._holding = hold_audio

    def unmute(self, *, replay_held_audio: bool) -> None:
        """Open the gate; frames held by this mute are replayed first, or discarded.

        What an earlier unmute released for replay and was not replayed yet (the gate was
        shut again meanwhile, e.g. for a tool step, which holds nothing) is replayed in
        any case: it is what the caller said while held, promised a hearing.
        """
        self._muted = False
        self._holding = False
        if replay_held_audio:
            self._replaying.extend(self._held)
        else:
            self._held_seconds -= sum(frame.duration for frame in self._held)
        self._held.clear()
        if not self._replaying:
            self._held_seconds = 0.0  # exactly: the sum of float durations drifts off it

    def replayed(self) -> asyncio.Future[None]:
        """Done once every frame released for replay has been passed on (at once when
        none is left)."""
        future = asyncio.get_running_loop().create_future()
        if self._replaying:
            self._replayed.append(future)
        else:
            future.set_result(None)
        return future

    async def __anext__(self) -> rtc.AudioFrame:
        while True:
            if not self._muted and self._replaying:
                frame = self._replaying.popleft()
                self._held_seconds = self._held_seconds - frame.duration
                if not self._replaying and not self._held:
                    self._held_seconds = 0.0
                await asyncio.sleep(frame.duration / REPLAY_SPEED)
                if not self._replaying:
                    self._replay_over()
                return frame
            frame = await super().__anext__()
            if not self._muted:
                if self._replaying:  # keep order: what was held plays before what comes now
                    self._keep(self._replaying, frame)
                    continue
                return frame
            if self._holding:
                self._keep(self._held, frame)
            return _silence_like(frame)

    def _replay_over(self) -> None:
        waiting, self._replayed = self._replayed, []
        for future in waiting:
            if not future.done():
                future.set_result(None)

    def _keep(self, frames: collections.deque[rtc.AudioFrame], frame: rtc.AudioFrame) -> None:
        frames.append(frame)
        self._held_seconds += frame.duration
        for oldest in (self._replaying, self._held):
            while self._held_seconds > MAX_HELD_SECONDS and oldest:
                self._held_seconds -= oldest.popleft().duration


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
    """Passes audio on unchanged and reports each finished segment to ``on_segment``.

    It measures the frames it passes on (a segment starts at its first frame) and reports
    a segment when ``head``, the object the session plays into, says it finished: with
    the transcript a synchronizer above the meter adds on the way up.
    """

    def __init__(
        self,
        next_in_chain: AudioOutput,
        *,
        on_segment_start: Callable[[], None],
        on_segment: Callable[[PlayedSegment], None],
        head: AudioOutput | None = None,
    ) -> None:
        super().__init__(
            label="turnfsm.PlayoutMeter",
            capabilities=AudioOutputCapabilities(pause=next_in_chain.can_pause),
            next_in_chain=next_in_chain,
        )
        self._on_segment_start = on_segment_start
        self._on_segment = on_segment
        self._segments: collections.deque[_SegmentLog] = collections.deque()
        self._capturing = False
        self.head: AudioOutput = head if head is not None else self
        """``session.output.audio``: the meter itself when it went in front of a bare sink."""
        self.head.on("playback_finished", self._segment_finished)

    def remove(self) -> None:
        """Leave the chain (the call is over): the object in front of the meter is linked
        to the one behind it again, as before :func:`measure_playout`. A meter in front of
        a bare sink stays: it is what the session plays into."""
        if self.head is self or self.head.next_in_chain is not self:
            return
        self.head.off("playback_finished", self._segment_finished)
        assert self.next_in_chain is not None
        _link(self.head, self.next_in_chain, instead_of=self)

    @property
    def sample_rate(self) -> int | None:
        # the sink's, as it is now (LiveKit can swap the sink at the chain's bottom)
        assert self.next_in_chain is not None
        return self.next_in_chain.sample_rate

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

    def _segment_finished(self, event: PlaybackFinishedEvent) -> None:
        log = self._segments.popleft() if self._segments else None
        played = event.playback_position
        self._on_segment(
            PlayedSegment(
                pushed_seconds=max(log.pushed, played) if log is not None else played,
                played_seconds=played,
                interrupted=event.interrupted,
                timed_text=tuple(log.timed) if log is not None else (),
                complete=log is None or log.complete or not event.interrupted,
            )
        )


_CHAIN_LINKS: tuple[tuple[_OutputEvent, str], ...] = (
    ("playback_finished", "_dispatch_playback_finished"),
    ("playback_started", "_forward_next_playback_started"),
    ("playback_progressed", "_forward_next_playback_progressed"),
)
"""The events an ``AudioOutput`` hears from its ``next_in_chain``, and its handler of each
(what LiveKit's ``AudioOutput.__init__`` subscribes)."""


def measure_playout(
    output: AgentOutput,
    *,
    on_segment_start: Callable[[], None],
    on_segment: Callable[[PlayedSegment], None],
) -> PlayoutMeter:
    """Put a :class:`PlayoutMeter` into the chain of ``output.audio``.

    It goes right behind ``output.audio`` when that object passes its audio on (a
    ``TranscriptSynchronizer``, a recorder, any wrapper): ``output.audio`` stays the
    session's object, its segments and events unchanged, so code that reads it back after
    the start finds what it (or LiveKit) put there. A bare sink has nothing behind it:
    the meter then goes in front, as ``output.audio``.
    """
    head = output.audio
    assert head is not None
    below: AudioOutput | None = head.next_in_chain
    if below is None or head._next_in_chain is not below:
        # (a wrapper whose next_in_chain is not LiveKit's own link cannot be entered)
        meter = PlayoutMeter(head, on_segment_start=on_segment_start, on_segment=on_segment)
        output.audio = meter
        return meter
    meter = PlayoutMeter(
        below, on_segment_start=on_segment_start, on_segment=on_segment, head=head
    )
    _link(head, meter, instead_of=below)
    return meter


def _link(output: AudioOutput, below: AudioOutput, *, instead_of: AudioOutput) -> None:
    """Make ``below`` the ``next_in_chain`` of ``output`` in place of ``instead_of``, and
    have ``output`` hear its events (as LiveKit's ``AudioOutput.__init__`` links them)."""
    for event, handler in _CHAIN_LINKS:
        instead_of.off(event, getattr(output, handler))
        below.on(event, getattr(output, handler))
    output._next_in_chain = below
