"""One rule for what part of an interrupted reply the caller heard (issue 12.4).

The rule: the played share of the audio is the same share of the characters (the cut);
a word is heard once its last character is at or before the cut.
"""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from turnfsm.spoken import spoken_prefix

WORDS = st.lists(
    st.text(alphabet="abcdefghij,.'?", min_size=1, max_size=8), min_size=1, max_size=12
)


def test_the_example_from_the_issue_keeps_only_whole_words() -> None:
    # 1.3 s of 2.0 s: the cut (11.7 of 18 characters) is inside "three" (8..13)
    assert spoken_prefix("one two three four", 1.3, 2.0) == "one two"
    # once "three" has played to its end (13 of 18 characters), it is heard
    assert spoken_prefix("one two three four", 2.0 * 13 / 18, 2.0) == "one two three"


@given(words=WORDS, played=st.floats(0, 1.2), separator=st.sampled_from([" ", "  ", "\n"]))
def test_the_heard_text_is_the_words_ending_at_or_before_the_cut(
    words: list[str], played: float, separator: str
) -> None:
    text = separator.join(words)
    heard = spoken_prefix(text, played, 1.0)
    assert text.startswith(heard)
    if played >= 1.0:
        assert heard == text
        return
    cut = len(text) * played
    spans = [match.span() for match in re.finditer(r"\S+", text)]
    expected = [span for span in spans if span[1] <= cut]
    assert heard == (text[: expected[-1][1]] if expected and played > 0 else "")


@given(words=WORDS, first=st.floats(0, 1.2), second=st.floats(0, 1.2))
def test_more_played_never_means_less_heard(words: list[str], first: float, second: float) -> None:
    text = " ".join(words)
    earlier, later = sorted((first, second))
    assert spoken_prefix(text, later, 1.0).startswith(spoken_prefix(text, earlier, 1.0))
