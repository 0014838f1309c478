"""Callee speech, the call script, and the ledger of what was actually delivered.

The simulated callee speaks recorded lines (16 kHz mono 16-bit WAVs, recorded with
espeak-ng by the test suite's ``support/make_audio.py``), or lines made from any text
and a duration with :func:`spoken_line` (no WAV: syllable-size pieces of the recorded
speech, put together in memory, with known word timings). :class:`ScriptedAudioInput`
plays them at their scripted times and writes every frame it *delivers* to the session
into a :class:`SpeechLedger`. The scripted STT reads the same ledger to learn which part
of which line each frame it receives belongs to (by the frame object's identity, or else
by when it arrives), so it transcribes only the words it really heard:
a line whose head was dropped (input detached) or silenced (locked agent speech) yields
only its tail, which is how "fragment" turns are produced and detected.

This module does not import livekit.
"""

from __future__ import annotations

import bisect
import collections
import functools
import wave
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

SAMPLE_RATE = 16000
"""Sample rate of every recorded line, in Hz (mono, 16-bit)."""

AUDIO_DIR = Path(__file__).resolve().with_name("audio")
"""Directory holding the demo's recorded lines (``<name>.wav``)."""

VOICED_RMS = 200.0
"""RMS (int16 units) above which a 20 ms stretch of a recording counts as voiced."""

IDENTITY_MEMORY = 6000
"""How many recently delivered frames the ledger can recognise by identity (two minutes
of 20 ms frames: longer than any stretch of audio a consumer may hold back)."""


@dataclass(frozen=True)
class WordTiming:
    """Where one word of a recorded line sits in its audio.

    Attributes:
        index: Position of the word in the line (0-based).
        text: The word as written, punctuation included.
        start: Start offset in the line's audio, in seconds.
        end: End offset in the line's audio, in seconds.
    """

    index: int
    text: str
    start: float
    end: float

    @property
    def midpoint(self) -> float:
        """Offset of the middle of the word, in seconds."""
        return (self.start + self.end) / 2


@dataclass(frozen=True)
class SpeechLine:
    """One line of the callee: a recording, or speech made in memory (:func:`spoken_line`).

    Attributes:
        name: Identifier, also the WAV file stem of a recorded line.
        text: What is said, exactly as the STT will transcribe it.
        espeak_speed: Words per minute used by ``make_audio`` to record it.
        folder: Directory holding the WAV file.
        audio: The line's int16 samples when made in memory (no WAV file); None for a
            recorded line.
        timings: Where each word sits in ``audio``, when made in memory; None for a
            recorded line (its timings are estimated from the recording).
    """

    name: str
    text: str
    espeak_speed: int = 160
    folder: Path = AUDIO_DIR
    audio: np.ndarray | None = field(default=None, repr=False, compare=False)
    timings: tuple[WordTiming, ...] | None = field(default=None, repr=False)

    @property
    def path(self) -> Path:
        """Path of the recorded WAV file (none exists for a line made in memory)."""
        return self.folder / f"{self.name}.wav"

    @property
    def words(self) -> list[str]:
        """The words of the line, punctuation attached."""
        return self.text.split()

    @property
    def samples(self) -> np.ndarray:
        """The line as int16 samples (a recording is read once per process)."""
        return self.audio if self.audio is not None else _read_wav(self.path)

    @property
    def duration(self) -> float:
        """Length of the line's audio, in seconds."""
        return len(self.samples) / SAMPLE_RATE

    @property
    def word_timings(self) -> list[WordTiming]:
        """Position of each word in the audio.

        Exact for a line made in memory. For a recording, estimated: words share the
        *voiced* time of the recording in proportion to their length, so pauses (commas,
        sentence ends) fall between words rather than inside them.
        """
        return list(self.timings) if self.timings is not None else _word_timings(self)

    def words_heard(self, heard: Sequence[tuple[float, float]]) -> list[WordTiming]:
        """The words whose middle falls inside one of the ``heard`` offset intervals.

        Args:
            heard: ``(start, end)`` offsets into the recording, in seconds.

        Returns:
            The heard words, in line order.
        """
        return [
            word
            for word in self.word_timings
            if any(start <= word.midpoint <= end for start, end in heard)
        ]


SHIPPED_LINES: tuple[SpeechLine, ...] = (
    SpeechLine("hello", "Hello?"),
    SpeechLine("stop", "Wait, stop, stop."),
    SpeechLine("question", "What time do you open tomorrow morning?"),
    SpeechLine(
        "long_overlap",
        "Sorry, I am driving right now, could you call me back later this afternoon?",
        espeak_speed=185,
    ),
)
"""The demo's recorded lines, shipped with the package: also the speech material that
:func:`spoken_line` cuts its pieces from."""

LINES: dict[str, SpeechLine] = {line.name: line for line in SHIPPED_LINES}
"""Every playable line, by name: its text and (through :attr:`SpeechLine.path`) its file.
The package ships the demo's lines; :func:`add_lines` adds more (the tests add theirs)."""


def add_lines(*lines: SpeechLine) -> None:
    """Make more recorded lines playable by name.

    Raises:
        ValueError: If a name is already taken by a different line.
    """
    for line in lines:
        known = LINES.get(line.name)
        if known is not None and known != line:
            raise ValueError(f"speech line {line.name!r} is already {known}")
    LINES.update((line.name, line) for line in lines)


def get_line(name: str) -> SpeechLine:
    """Look up a recorded line by name.

    Raises:
        KeyError: If no line has that name (the message lists the known ones).
    """
    try:
        return LINES[name]
    except KeyError:
        raise KeyError(f"unknown speech line {name!r}; known lines: {sorted(LINES)}") from None


@functools.cache
def _read_wav(path: Path) -> np.ndarray:
    with wave.open(str(path), "rb") as wav:
        if (wav.getframerate(), wav.getnchannels(), wav.getsampwidth()) != (SAMPLE_RATE, 1, 2):
            raise ValueError(f"{path} must be {SAMPLE_RATE} Hz mono 16-bit")
        samples = np.frombuffer(wav.readframes(wav.getnframes()), dtype=np.int16)
    samples.flags.writeable = False
    return samples


@functools.cache
def _word_timings(line: SpeechLine) -> list[WordTiming]:
    step = SAMPLE_RATE // 50
    samples = line.samples.astype(np.float64)
    usable = len(samples) // step * step
    rms = np.sqrt((samples[:usable].reshape(-1, step) ** 2).mean(axis=1))
    voiced = np.flatnonzero(rms > VOICED_RMS)
    if len(voiced) == 0:
        raise ValueError(f"recording of {line.name!r} has no voiced audio")
    # cumulative voiced time at the end of each 20 ms step
    voiced_time = np.cumsum(rms > VOICED_RMS) * (step / SAMPLE_RATE)
    total_voiced = float(voiced_time[-1])

    def offset_of(voiced_seconds: float) -> float:
        step_index = int(np.searchsorted(voiced_time, voiced_seconds, side="left"))
        return min(step_index, len(voiced_time) - 1) * step / SAMPLE_RATE

    words = line.words
    weights = np.array([len(word) + 1 for word in words], dtype=np.float64)
    bounds = np.concatenate([[0.0], np.cumsum(weights) / weights.sum()]) * total_voiced
    timings = []
    for index, word in enumerate(words):
        start = offset_of(bounds[index] + 1e-9)
        end = max(offset_of(bounds[index + 1]) + step / SAMPLE_RATE, start)
        timings.append(WordTiming(index=index, text=word, start=start, end=end))
    return timings


SPOKEN_CHARS_PER_SECOND = 14.0
"""Default speaking rate of :func:`spoken_line`, in characters per second (about the rate
of the recorded lines, espeak-ng at 160 words per minute)."""

MIN_SPOKEN_SECONDS = 0.2
"""The shortest line :func:`spoken_line` makes: shorter speech is not reliably heard by a
VAD (silero needs several 32 ms windows to start a detection)."""

SPEECH_PIECE_SECONDS = (0.08, 0.24)
"""Shortest and longest piece of recorded speech :func:`spoken_line` puts together: about
a syllable."""

_PIECE_STEP = SAMPLE_RATE // 100
"""Samples per 10 ms step, the resolution at which recordings are cut into pieces."""

_PIECE_FADE = SAMPLE_RATE // 200
"""Samples of fade at each end of a piece (5 ms), so joins do not click."""


def spoken_line(
    text: str,
    *,
    duration: float | None = None,
    chars_per_second: float | None = None,
    name: str | None = None,
    seed: int = 0,
) -> SpeechLine:
    """A callee line saying ``text`` for ``duration`` seconds, made in memory without a WAV.

    The audio is syllable-size pieces of the shipped recordings' voiced stretches
    (:data:`SHIPPED_LINES`, cut between :data:`SPEECH_PIECE_SECONDS` long), drawn from
    ``seed`` and joined with short fades: a VAD hears one stretch of speech, voiced from
    its first sample to its last. The words share that time in proportion to their length
    (a character more each, for the gap after it), and those timings are exact: the
    scripted STT transcribes the words whose middle it heard. The same arguments give the
    same samples, in any process.

    Args:
        text: What is said, exactly as the STT will transcribe it.
        duration: Length of the line, in seconds (at least :data:`MIN_SPOKEN_SECONDS`).
        chars_per_second: Speaking rate instead of a duration (``len(text) / rate``
            seconds, at least :data:`MIN_SPOKEN_SECONDS`); by default
            :data:`SPOKEN_CHARS_PER_SECOND`.
        name: The line's name (how the ledger and the tests refer to it); by default
            derived from the text, duration and seed.
        seed: Which pieces are drawn.

    Returns:
        A :class:`SpeechLine` holding its ``audio`` and word ``timings``; play it with
        ``UserLine(at, line)`` (it need not be added to :data:`LINES`).

    Raises:
        ValueError: naming the argument: no words, a duration too short or not finite, a
            rate not positive, both a duration and a rate, an empty name.
        TypeError: a seed that is not an integer.
    """
    words = text.split() if isinstance(text, str) else None
    if not words:
        raise ValueError(f"text must hold at least one word, got {text!r}")
    if duration is not None and chars_per_second is not None:
        raise ValueError("give duration or chars_per_second, not both")
    if chars_per_second is not None and not (
        np.isfinite(chars_per_second) and chars_per_second > 0
    ):
        raise ValueError(f"chars_per_second must be positive, got {chars_per_second!r}")
    if duration is None:
        rate = chars_per_second if chars_per_second is not None else SPOKEN_CHARS_PER_SECOND
        duration = max(MIN_SPOKEN_SECONDS, len(text.strip()) / rate)
    if not (np.isfinite(duration) and duration >= MIN_SPOKEN_SECONDS):
        raise ValueError(f"duration must be at least {MIN_SPOKEN_SECONDS} s, got {duration!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an integer, got {seed!r}")
    if name is None:
        digest = zlib.crc32(f"{text}|{duration!r}|{seed}".encode())
        name = f"spoken-{digest:08x}"
    elif not name:
        raise ValueError("name must not be empty")
    rng = np.random.default_rng([zlib.crc32(text.encode()), seed % 2**64])
    audio = _joined_pieces(round(duration * SAMPLE_RATE), rng)
    duration = len(audio) / SAMPLE_RATE
    weights = np.array([len(word) + 1 for word in words], dtype=np.float64)
    bounds = np.concatenate([[0.0], np.cumsum(weights) / weights.sum()]) * duration
    timings = tuple(
        WordTiming(
            index=index, text=word, start=float(bounds[index]), end=float(bounds[index + 1])
        )
        for index, word in enumerate(words)
    )
    return SpeechLine(name, " ".join(words), audio=audio, timings=timings)


def _joined_pieces(length: int, rng: np.random.Generator) -> np.ndarray:
    """``length`` samples of speech: random pieces, each faded in and out, end to end."""
    pieces = _speech_pieces()
    chosen: list[np.ndarray] = []
    total = 0
    while total < length:
        piece = pieces[int(rng.integers(len(pieces)))]
        chosen.append(piece)
        total += len(piece)
    audio = np.concatenate(chosen)[:length].astype(np.float64)
    fade = min(_PIECE_FADE, length // 2)
    audio[length - fade :] *= np.linspace(1.0, 0.0, fade + 1)[:-1]  # the last piece is cut
    spoken = np.clip(np.round(audio), -32768, 32767).astype(np.int16)
    spoken[spoken == 0] = 1  # no digitally silent sample: all-zero frames mean "silenced"
    spoken.flags.writeable = False
    return spoken


@functools.cache
def _speech_pieces() -> tuple[np.ndarray, ...]:
    """The voiced stretches of the shipped recordings, cut into syllable-size pieces at
    their quietest 10 ms step, each faded in and out (float64 samples)."""
    shortest, longest = (round(seconds * 100) for seconds in SPEECH_PIECE_SECONDS)
    ramp = np.linspace(0.0, 1.0, _PIECE_FADE + 1)[1:]
    pieces: list[np.ndarray] = []
    for line in SHIPPED_LINES:
        samples = line.samples.astype(np.float64)
        steps = len(samples) // _PIECE_STEP
        rms = np.sqrt((samples[: steps * _PIECE_STEP].reshape(steps, -1) ** 2).mean(axis=1))
        for start, end in _runs(rms > VOICED_RMS):
            while end - start >= shortest:
                cut = end
                if end - start > longest:
                    window = rms[start + shortest : start + longest + 1]
                    cut = start + shortest + int(np.argmin(window))
                piece = samples[start * _PIECE_STEP : cut * _PIECE_STEP].copy()
                piece[:_PIECE_FADE] *= ramp
                piece[-_PIECE_FADE:] *= ramp[::-1]
                pieces.append(piece)
                start = cut
    return tuple(pieces)


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """``(start, end)`` index ranges where ``mask`` is true."""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], mask.astype(np.int8), [0]])))
    return [(int(start), int(end)) for start, end in zip(edges[::2], edges[1::2], strict=True)]


@dataclass(frozen=True, init=False)
class UserLine:
    """One line of the callee in a :class:`CallScript`.

    Built as ``UserLine(at, "question")`` (a line of :data:`LINES`, by name) or
    ``UserLine(at, spoken_line("Hello?"))`` (a line made in memory, played as given).

    Attributes:
        at: When the line starts, in seconds from the start of the audio input.
        name: Name of the line.
    """

    at: float
    name: str
    _given: SpeechLine | None = field(default=None, repr=False)

    def __init__(self, at: float, line: str | SpeechLine) -> None:
        if at < 0:
            raise ValueError("a line cannot start before the call")
        given = line if isinstance(line, SpeechLine) else None
        name = line.name if isinstance(line, SpeechLine) else get_line(line).name
        object.__setattr__(self, "at", at)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "_given", given)

    @property
    def line(self) -> SpeechLine:
        """The line to play."""
        return self._given if self._given is not None else get_line(self.name)


class CallScript:
    """What the callee says and when, as :class:`UserLine` entries sorted by time.

    Example:
        ``CallScript([UserLine(0.3, "hello"), UserLine(4.0, "question")])``
    """

    def __init__(self, lines: Iterable[UserLine] = ()) -> None:
        self._lines = tuple(sorted(lines, key=lambda line: line.at))

    @property
    def lines(self) -> tuple[UserLine, ...]:
        """The scripted lines, earliest first."""
        return self._lines

    def __iter__(self) -> Iterator[UserLine]:
        return iter(self._lines)

    def __len__(self) -> int:
        return len(self._lines)

    def __repr__(self) -> str:
        return f"CallScript({list(self._lines)!r})"


@dataclass
class Utterance:
    """One playback of a recorded line by the audio input.

    Attributes:
        index: Position in :attr:`SpeechLedger.utterances`.
        line: The recorded line being played.
        started_at: Loop time when its first frame was produced.
        ended_at: Loop time when its last frame was produced (None while playing).
        delivered: Merged ``(start, end)`` offsets of the line that reached the session.
        dropped: Merged ``(start, end)`` offsets produced while the input was detached.
    """

    index: int
    line: SpeechLine
    started_at: float
    ended_at: float | None = None
    delivered: list[tuple[float, float]] = field(default_factory=list)
    dropped: list[tuple[float, float]] = field(default_factory=list)

    @property
    def delivered_seconds(self) -> float:
        """How much of the line reached the session, in seconds."""
        return sum(end - start for start, end in self.delivered)

    @property
    def dropped_seconds(self) -> float:
        """How much of the line was produced while the input was detached, in seconds."""
        return sum(end - start for start, end in self.dropped)


@dataclass(frozen=True)
class DeliveredFrame:
    """One frame handed to the session by the audio input.

    Attributes:
        seq: Position among delivered frames (0-based).
        delivered_at: Loop time when the frame was returned to the session.
        utterance: The utterance it carries, or None for silence between lines.
        offset: Start of the frame within the utterance's line, in seconds.
        duration: Length of the frame, in seconds.
    """

    seq: int
    delivered_at: float
    utterance: Utterance | None
    offset: float
    duration: float


def _extend_intervals(intervals: list[tuple[float, float]], start: float, end: float) -> None:
    if intervals and start - intervals[-1][1] < 1e-6:
        intervals[-1] = (intervals[-1][0], max(end, intervals[-1][1]))
    else:
        intervals.append((start, end))


class SpeechLedger:
    """Wall-clock record of which line's samples the audio input emitted, and when.

    Shared by :class:`~turnfsm.adapters.sim.io.ScriptedAudioInput` (which writes it) and
    :class:`~turnfsm.adapters.sim.models.ScriptedSTT` (which reads it). Times are
    ``loop.time()`` values of the event loop running the call.
    """

    def __init__(self) -> None:
        self.utterances: list[Utterance] = []
        """Every line played so far, in order."""
        self._frames: list[DeliveredFrame] = []
        self._delivery_times: list[float] = []
        # recently delivered frame objects, by identity (kept alive so ids stay unique)
        self._by_identity: dict[int, tuple[object, DeliveredFrame]] = {}
        self._identity_order: collections.deque[tuple[int, int]] = collections.deque()

    def begin_utterance(self, line: SpeechLine, started_at: float) -> Utterance:
        """Register that the input started playing ``line`` at loop time ``started_at``."""
        utterance = Utterance(index=len(self.utterances), line=line, started_at=started_at)
        self.utterances.append(utterance)
        return utterance

    def end_utterance(self, utterance: Utterance, ended_at: float) -> None:
        """Register that the input produced the last frame of ``utterance``."""
        utterance.ended_at = ended_at

    def record_frame(
        self,
        *,
        utterance: Utterance | None,
        offset: float,
        duration: float,
        at: float,
        delivered: bool,
        frame: object | None = None,
    ) -> None:
        """Record one frame produced by the input.

        Args:
            utterance: The utterance the frame carries, None for silence.
            offset: Start of the frame within the utterance's line, in seconds.
            duration: Length of the frame, in seconds.
            at: Loop time when the frame was produced (and, if delivered, returned).
            delivered: False when the input was detached and dropped the frame.
            frame: The frame object handed to the session, so that a consumer that gets
                this very object later (e.g. replayed after being held back) can be
                matched by identity (:meth:`match_frame`).
        """
        if utterance is not None:
            target = utterance.delivered if delivered else utterance.dropped
            _extend_intervals(target, offset, offset + duration)
        if delivered:
            record = DeliveredFrame(
                seq=len(self._frames),
                delivered_at=at,
                utterance=utterance,
                offset=offset,
                duration=duration,
            )
            self._frames.append(record)
            self._delivery_times.append(at)
            if frame is not None:
                self._remember(frame, record)

    def _remember(self, frame: object, record: DeliveredFrame) -> None:
        # an entry keeps its frame alive, so no other live object can share its id
        self._by_identity[id(frame)] = (frame, record)
        self._identity_order.append((id(frame), record.seq))
        while len(self._identity_order) > IDENTITY_MEMORY:
            key, seq = self._identity_order.popleft()
            if self._by_identity[key][1].seq == seq:  # not since reused by a newer frame
                del self._by_identity[key]

    def frame_by_identity(self, frame: object) -> DeliveredFrame | None:
        """The delivered frame that ``frame`` is (the same object), if it is one of the
        last :data:`IDENTITY_MEMORY` frames the input delivered."""
        entry = self._by_identity.get(id(frame))
        return entry[1] if entry is not None and entry[0] is frame else None

    def match_frame(
        self, frame: object, received_at: float, *, after_seq: int, max_latency: float = 0.1
    ) -> DeliveredFrame | None:
        """Find the delivered frame that a consumer received: by identity when the
        consumer got the very frame object the input delivered (whenever it got it),
        otherwise by time (:meth:`match_received_frame`), e.g. for a copy or a resampled
        frame."""
        found = self.frame_by_identity(frame)
        if found is not None:
            return found
        return self.match_received_frame(received_at, after_seq=after_seq, max_latency=max_latency)

    def match_received_frame(
        self, received_at: float, *, after_seq: int, max_latency: float = 0.1
    ) -> DeliveredFrame | None:
        """Find the delivered frame that a consumer received at loop time ``received_at``.

        Consumers see frames in delivery order, shortly after delivery. The match is the
        first delivered frame after ``after_seq`` (the consumer's previous match) that was
        delivered no more than ``max_latency`` before ``received_at``; this resynchronises
        by itself when the consumer missed frames.

        Args:
            received_at: Loop time when the consumer got the frame.
            after_seq: ``seq`` of the consumer's previous match, -1 for none.
            max_latency: Longest plausible delay between delivery and reception, seconds.

        Returns:
            The matching frame, or None when no delivered frame can be this one.
        """
        latest = bisect.bisect_right(self._delivery_times, received_at) - 1
        if latest <= after_seq:
            return None
        earliest_plausible = bisect.bisect_left(self._delivery_times, received_at - max_latency)
        return self._frames[min(max(after_seq + 1, earliest_plausible), latest)]

    def utterances_of(self, name: str) -> list[Utterance]:
        """All playbacks of the line called ``name``, in order."""
        return [utterance for utterance in self.utterances if utterance.line.name == name]
