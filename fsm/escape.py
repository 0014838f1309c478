"""Strings from a trace made safe for each output: a terminal line, SVG, Mermaid.

A trace is untrusted input: a speech id or a transcript may hold control characters
(terminal escapes, characters XML forbids), lone surrogates (not encodable at all),
bidirectional overrides, or the syntax of the output it is drawn into. Every string a
picture or a message takes from a trace goes through one of these functions.

>>> printable("s1\\x1b[2J\\n")
's1\\\\x1b[2J\\\\n'
>>> xml_text("<script>\\x00")
'&lt;script&gt;\\\\x00'
>>> mermaid_text('a: b; "c" #d\\n<br/>')
"a∶ b, 'c' ♯d\\\\n‹br/›"
"""

from __future__ import annotations

import re

_UNPRINTABLE = re.compile(
    "[\x00-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)
"""Control characters, lone surrogates, non-characters and bidirectional controls."""


def printable(text: str) -> str:
    """``text`` on one line with every unprintable character spelt as an escape
    (``\\x1b``, ``\\n``, ``\\ud800``): safe for a terminal, a log line, and XML."""
    return _UNPRINTABLE.sub(_spelt, text)


def xml_text(text: str) -> str:
    """``text`` for XML character data and double-quoted attributes."""
    return (
        printable(text)
        .replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace('"', "&quot;")
    )


_MERMAID = str.maketrans(
    {
        ":": "∶",
        ";": ",",
        '"': "'",
        "#": "♯",
        "<": "‹",
        ">": "›",
    }
)
"""Characters Mermaid reads as syntax in a label or note, and look-alikes drawn instead."""


def mermaid_text(text: str) -> str:
    """``text`` safe in a Mermaid label, note or comment: one line, no syntax."""
    return printable(text).translate(_MERMAID)


def _spelt(match: re.Match[str]) -> str:
    character = match.group()
    named = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(character)
    if named:
        return named
    code = ord(character)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
