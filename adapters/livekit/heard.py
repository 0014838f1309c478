"""What the caller heard of a cut reply: the one answer both levers cut a message to.

The pipeline's ``DropUnspokenText`` (levers.py) and the realtime one (realtime.py) ask the
same question of the same kind of facts, so they share one answer (issue 19 point 4,
issue 21 point 4): **the words played to their end, measured** at the head of the output
chain (the sink's playback position), by :func:`turnfsm.spoken.spoken_prefix`'s rule.

- Never a ``TranscriptSynchronizer``'s text: it releases words on its own clock and at
  LiveKit's standard rate, not at the voice's, so it keeps words nobody heard (seen: 2–3
  unheard words with an 11 chars/s voice, 3 of 5 played on a busy loop).
- Where the text's timing in the audio is known (a TTS's timed transcripts), the pieces
  place the cut; else the share of the text the played share of the audio covers.
- While a reply's audio is incomplete (cut before all of it came: a barge-in while it
  streams, a failed or cancelled response, a dropped socket) its length is unknown. It is
  then estimated at a *conservative* rate, the slowest of: this reply's observed rate,
  the voice's earlier replies' rates and a prior (LiveKit's standard rate,
  :func:`.text.estimated_seconds`), and the cut is made one word earlier, since words
  are not spoken at an even rate. A faster guess places the cut later in the text, past
  words still unsaid. A realtime model's transcript runs ahead of its audio, so its text
  over its audio overstates its rate; its rate is measured instead as the transcript's
  growth over the audio's (:meth:`ModelItem.rate`): the lead cancels out (a first
  message cut by a dropped socket kept 3 unheard words of a 12.6 chars/s voice, faster
  than the prior: fuzz realtime seed 1502).

The outcome monitor's O4 does not use this module: it measures the heard words its own
way (outcomes.py), so a wrong cut here is caught there.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from livekit.agents import llm

from turnfsm.spoken import spoken_prefix

from .audio import PlayedSegment
from .text import estimated_seconds

_WORD = re.compile(r"\S+")

RATE_WINDOW_SECONDS = 1.0
"""Audio a realtime item's transcript must have grown over for its growth to measure the
voice's rate: over less, a word's length in characters outweighs the audio's."""


class SpeakingRates:
    """The slowest speaking rate (characters a second) of a voice's replies whose audio
    all came (only the slowest is ever used); infinite before the first."""

    def __init__(self) -> None:
        self.slowest = math.inf

    def heard_whole(self, text: str, audio_seconds: float) -> None:
        """A reply of ``text`` whose whole audio lasted ``audio_seconds``."""
        if text.strip() and audio_seconds > 0:
            self.slowest = min(self.slowest, len(text) / audio_seconds)

    def speech_played(
        self, segment: PlayedSegment | None, message: llm.ChatMessage | None
    ) -> None:
        """A speech is done: its rate counts if its last segment played whole, all of its
        audio pushed (a speech cut short, or whose audio never all came, says nothing of
        the voice's rate)."""
        if segment is None or message is None or segment.interrupted or not segment.complete:
            return
        self.heard_whole(message.text_content or "", segment.pushed_seconds)


@dataclass(frozen=True)
class Playout:
    """What is measured of one cut reply."""

    text: str
    """All of its text that is known (a streamed reply's text runs ahead of its audio)."""
    played_seconds: float
    """Its audio the caller heard (the sink's playback position)."""
    audio_seconds: float
    """Its audio that came: its whole length when ``complete``."""
    complete: bool
    timed: tuple[tuple[float, str], ...] = ()
    """``(start, text)``: where in the audio each piece of the text starts (a TTS's
    timed transcripts; empty when there are none)."""
    rate: float | None = None
    """Its own rate, measured while its audio came (characters a second); None: its text
    over its audio."""

    @classmethod
    def of_segment(cls, segment: PlayedSegment, text: str) -> Playout:
        """A pipeline reply: its playout segment, measured at the output."""
        return cls(
            text=text,
            played_seconds=segment.played_seconds,
            audio_seconds=segment.pushed_seconds,
            complete=segment.complete,
            timed=segment.timed_text,
        )


def heard_text(playout: Playout, rates: SpeakingRates) -> str:
    """The words of ``playout.text`` the caller heard to their end (module docstring).

    All the audio came (5 s): the played share of the text, word by word:

    >>> whole = Playout("one two three four five", 3.0, 5.0, complete=True)
    >>> heard_text(whole, SpeakingRates())
    'one two three'

    2 s of it came, 1.8 s played, its rate measured at 10 characters a second: its 23
    characters take 2.3 s, so the cut falls at character 18, after "four", and is made
    one word earlier:

    >>> streaming = Playout("one two three four five", 1.8, 2.0, complete=False, rate=10.0)
    >>> heard_text(streaming, SpeakingRates())
    'one two three'
    """
    if playout.timed:
        return _heard_timed(playout, rates)
    return _heard_share(
        playout.text,
        playout.played_seconds,
        playout.audio_seconds,
        rates if not playout.complete else None,
        playout.rate,
    )


def _heard_share(
    text: str,
    played_seconds: float,
    audio_seconds: float,
    unfinished: SpeakingRates | None,
    rate: float | None = None,
) -> str:
    """The played share of ``text``; ``unfinished``: its audio did not all come, and its
    length is estimated at the slowest rate (``rate``, the reply's own, measured)."""
    if unfinished is None:
        return spoken_prefix(text, played_seconds, audio_seconds)
    observed = rate if rate is not None else len(text) / max(audio_seconds, 1e-9)
    rates = [observed, unfinished.slowest]
    if (standard := estimated_seconds(text)) > 0:
        rates.append(len(text) / standard)
    length = max(audio_seconds, len(text) / min(rates))
    return one_word_earlier(spoken_prefix(text, played_seconds, length))


def _heard_timed(playout: Playout, rates: SpeakingRates) -> str:
    """Pieces that ended before the played position were heard whole; the piece playing
    then is cut by its share (its end is the next piece's start; the last piece's end is
    unknown while the audio is incomplete, and estimated as :func:`_heard_share` does).
    Unlike the share of the whole text, this holds while the reply's audio still comes:
    the text of unsynthesized audio is never counted."""
    pieces, played = playout.timed, playout.played_seconds
    heard: list[str] = []
    for index, (start, text) in enumerate(pieces):
        if start >= played:
            break
        last = index + 1 == len(pieces)
        end = playout.audio_seconds if last else pieces[index + 1][0]
        measured = playout.complete or not last
        if played >= end and measured:
            heard.append(text)
            continue
        unfinished = None if measured else rates
        heard.append(_heard_share(text, played - start, end - start, unfinished))
        break
    return "".join(heard).rstrip()


def one_word_earlier(prefix: str) -> str:
    """``prefix`` without its last word.

    >>> one_word_earlier("one two three")
    'one two'
    >>> one_word_earlier("one")
    ''
    """
    words = list(_WORD.finditer(prefix))
    return prefix[: words[-2].end()] if len(words) > 1 else ""


@dataclass
class ModelItem:
    """What a realtime model sent for one message item: its transcript, its audio, and
    how much of the transcript had come as each piece of audio came (the outcome monitor
    measures the heard words on it)."""

    transcript: str = ""
    audio_seconds: float = 0.0
    audio_done: bool = False
    """The item completed: ``audio_seconds`` is its whole length."""
    text_by_audio: list[tuple[float, int]] = field(default_factory=list)
    """``(audio seconds that had come, transcript characters that had come then)``, at
    each audio delta."""

    def add_text(self, delta: str) -> None:
        self.transcript += delta

    def add_audio(self, seconds: float) -> None:
        self.audio_seconds += seconds
        self.text_by_audio.append((self.audio_seconds, len(self.transcript)))

    def rate(self) -> float | None:
        """Its speaking rate (characters a second), from how its transcript grew as its
        audio came: the transcript runs ahead of the audio by a lead that stays the same
        (in audio time), so the growth of one over the other is the rate, the lead
        cancelled; the transcript's text over its audio overstates the rate by the lead.
        The growth is measured up to where the transcript stopped growing (all of it came,
        or it was cut). None: it grew over less than :data:`RATE_WINDOW_SECONDS` of audio.

        >>> item = ModelItem()
        >>> for second in range(4):  # 12 characters a second, 24 ahead of the audio
        ...     item.add_text("x" * (36 if second == 0 else 12))
        ...     item.add_audio(1.0)
        >>> item.rate()
        12.0
        """
        if not self.text_by_audio:
            return None
        first_audio, first_chars = self.text_by_audio[0]
        final_chars = self.text_by_audio[-1][1]
        reached = next(audio for audio, chars in self.text_by_audio if chars == final_chars)
        if reached - first_audio < RATE_WINDOW_SECONDS:
            return None
        return (final_chars - first_chars) / (reached - first_audio)

    def playout(self, played_seconds: float, text: str) -> Playout:
        """The item cut after ``played_seconds``; ``text`` is its transcript, or the
        message's text when the model sent none."""
        complete = self.audio_done and bool(self.transcript) and self.audio_seconds > 0
        rate = self.rate() if self.transcript else None
        return Playout(text, played_seconds, self.audio_seconds, complete, rate=rate)


def heard_of_model(
    segment: PlayedSegment, item: ModelItem | None, message_text: str, rates: SpeakingRates
) -> str:
    """The heard words of a realtime model's message: its own transcript over its own
    audio (LiveKit commits only a synchronizer's prefix of the text when one is in the
    chain); without the model's item, the message's text over the audio that played."""
    if item is None:
        playout = Playout(message_text, segment.played_seconds, segment.pushed_seconds, False)
    else:
        playout = item.playout(segment.played_seconds, item.transcript or message_text)
    return heard_text(playout, rates)
