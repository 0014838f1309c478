"""What part of a reply the caller heard: one rule for the pipeline and realtime adapters.

An interrupted reply is cut back in the history to what was spoken, so the model does not
believe it said words the caller never heard. Both adapters ask the same question with the
same inputs (the reply's text, how much of its audio played, how long its audio is) and
must get the same answer, so the rule lives here, once.
"""

from __future__ import annotations

import re

_WORD = re.compile(r"\S+")


def spoken_prefix(text: str, played_seconds: float, audio_seconds: float) -> str:
    """The words of ``text`` heard after ``played_seconds`` of its ``audio_seconds`` of audio.

    Speech audio is close to proportional to text length, so the played share of the
    audio maps to the same share of the characters (the *cut*). The rounding rule: **a
    word counts as heard once its last character is at or before the cut**; a word the
    cut falls inside is dropped. This is LiveKit's own rule (its
    ``TranscriptSynchronizer`` adds a word to the transcript it keeps on interruption
    only after the word's whole duration), and it errs the safe way: the history holds
    at most what the caller heard, never a word they did not hear to the end.

    "one two three four" is 18 characters; at 1.3 s of 2.0 s the cut is at 11.7,
    inside "three" (characters 8 to 13), so "three" is not heard yet:

    >>> spoken_prefix("one two three four", 1.3, 2.0)
    'one two'
    >>> spoken_prefix("one two three four", 1.0, 2.0)  # cut at 9: inside "three"
    'one two'
    >>> spoken_prefix("one two three four", 13 / 18 * 2.0, 2.0)  # cut at 13: "three" ends
    'one two three'

    Nothing played is nothing heard, all of it played is all of it (trailing spaces
    and punctuation included); punctuation belongs to the word it is attached to:

    >>> spoken_prefix("one two three four", 0.0, 2.0)
    ''
    >>> spoken_prefix("Hello, world.", 2.0, 2.0)
    'Hello, world.'
    >>> spoken_prefix("Hello, world.", 0.6, 1.3)
    'Hello,'

    Negative or zero lengths are no audio at all, not an error (a reply cut before its
    first frame):

    >>> spoken_prefix("one two", 0.5, 0.0)
    ''
    """
    if audio_seconds <= 0 or played_seconds <= 0:
        return ""
    if played_seconds >= audio_seconds:
        return text
    cut = len(text) * played_seconds / audio_seconds
    heard_end = 0
    for word in _WORD.finditer(text):
        if word.end() > cut:
            break
        heard_end = word.end()
    return text[:heard_end]
