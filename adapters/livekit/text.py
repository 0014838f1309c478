"""What part of a reply the caller heard."""

from __future__ import annotations

import re
from collections.abc import Sequence

from livekit.agents.tokenize.basic import hyphenate_word

_WORD_END = re.compile(r"\S+")
_WORD = re.compile(r"[\w']+")

STANDARD_SYLLABLES_PER_SECOND = 3.83
"""LiveKit's standard speaking rate, the prior of its ``TranscriptSynchronizer``."""


def estimated_seconds(text: str) -> float:
    """How long ``text`` takes to say at LiveKit's standard speaking rate.

    >>> round(estimated_seconds("Good morning, this is the clinic."), 1)
    2.1
    """
    syllables = sum(len(hyphenate_word(word)) for word in _WORD.findall(text))
    return syllables / STANDARD_SYLLABLES_PER_SECOND


def spoken_prefix(
    text: str, played_seconds: float, pushed_seconds: float, *, complete: bool = True
) -> str:
    """The words of ``text`` heard after ``played_seconds`` of ``pushed_seconds`` of audio.

    Speech audio is close to proportional to text length, so the heard share of the
    audio maps to the same share of the characters; the cut is moved to the nearest
    word boundary, which keeps the result within one word of what was heard. When the
    audio was not all pushed (``complete=False``), its length is at least what
    :func:`estimated_seconds` says.

    >>> spoken_prefix("one two three four", 1.0, 2.0)
    'one two'
    >>> spoken_prefix("one two three four", 0.0, 2.0)
    ''
    """
    if not complete:
        pushed_seconds = max(pushed_seconds, estimated_seconds(text))
    if pushed_seconds <= 0 or played_seconds <= 0:
        return ""
    if played_seconds >= pushed_seconds:
        return text
    cut = len(text) * played_seconds / pushed_seconds
    best_end = 0
    for word in _WORD_END.finditer(text):
        middle = (word.start() + word.end()) / 2
        if middle <= cut:
            best_end = word.end()
        else:
            break
    return text[:best_end]


def spoken_prefix_timed(
    pieces: Sequence[tuple[float, str]],
    played_seconds: float,
    pushed_seconds: float,
    *,
    complete: bool = True,
) -> str:
    """The heard text, from where in the audio each piece of text starts.

    ``pieces`` are ``(start, text)`` in audio order (LiveKit's timed transcripts: a
    sentence each for a non-streaming TTS, a word each for an aligned one). Pieces that
    ended before ``played_seconds`` were heard whole; the piece playing then is cut by
    :func:`spoken_prefix`, its end being the next piece's start (the last one ends with
    the ``pushed_seconds`` of audio, or later as :func:`spoken_prefix` estimates when
    the audio was not all pushed). Unlike the share of the whole text, this holds when
    the reply's audio was not all pushed yet: the text of unsynthesized audio is never
    counted.

    >>> spoken_prefix_timed([(0.0, "One two."), (2.0, " Three four.")], 3.0, 4.0)
    'One two. Three'
    >>> spoken_prefix_timed([(0.0, "One two."), (2.0, " Three four.")], 1.0, 2.5)
    'One'
    """
    heard: list[str] = []
    for index, (start, text) in enumerate(pieces):
        if start >= played_seconds:
            break
        last = index + 1 == len(pieces)
        end = pushed_seconds if last else pieces[index + 1][0]
        if played_seconds >= end and (complete or not last):
            heard.append(text)
        else:
            cut = spoken_prefix(
                text, played_seconds - start, end - start, complete=complete or not last
            )
            heard.append(cut)
            break
    return "".join(heard).rstrip()
