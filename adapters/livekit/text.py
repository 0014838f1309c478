"""How long a text takes to say at LiveKit's standard speaking rate."""

from __future__ import annotations

import re

from livekit.agents.tokenize.basic import hyphenate_word

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
