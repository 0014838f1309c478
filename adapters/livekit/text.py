"""What part of a reply the caller heard, from LiveKit's timing of its audio (the rule
itself is :func:`turnfsm.spoken.spoken_prefix`)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from livekit.agents.tokenize.basic import hyphenate_word

from turnfsm.spoken import spoken_prefix

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


def audio_seconds(text: str, pushed_seconds: float, *, complete: bool = True) -> float:
    """How long the audio of ``text`` is: the ``pushed_seconds`` of it, or, when it was
    not all pushed (``complete=False``), at least what :func:`estimated_seconds` says.

    >>> audio_seconds("Good morning, this is the clinic.", 0.5, complete=False) > 2
    True
    >>> audio_seconds("Good morning, this is the clinic.", 0.5)
    0.5
    """
    return pushed_seconds if complete else max(pushed_seconds, estimated_seconds(text))


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
    :func:`~turnfsm.spoken.spoken_prefix`, its end being the next piece's start (the last
    one ends with the ``pushed_seconds`` of audio, or later as :func:`audio_seconds`
    estimates when the audio was not all pushed). Unlike the share of the whole text, this
    holds when the reply's audio was not all pushed yet: the text of unsynthesized audio
    is never counted.

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
            length = audio_seconds(text, end - start, complete=complete or not last)
            cut = spoken_prefix(text, played_seconds - start, length)
            heard.append(cut)
            break
    return "".join(heard).rstrip()
