"""What part of a reply the caller heard."""

from __future__ import annotations

import re

_WORD_END = re.compile(r"\S+")


def spoken_prefix(text: str, played_seconds: float, pushed_seconds: float) -> str:
    """The words of ``text`` heard after ``played_seconds`` of ``pushed_seconds`` of audio.

    Speech audio is close to proportional to text length, so the heard share of the
    audio maps to the same share of the characters; the cut is moved to the nearest
    word boundary, which keeps the result within one word of what was heard.

    >>> spoken_prefix("one two three four", 1.0, 2.0)
    'one two'
    >>> spoken_prefix("one two three four", 0.0, 2.0)
    ''
    """
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
