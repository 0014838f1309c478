"""Strings from a trace made safe for each output: a terminal line, SVG, Mermaid.

A trace is untrusted input: a speech id, a call id or a file name may hold control
characters (terminal escapes, characters XML forbids), lone surrogates (not encodable at
all), characters that change how the text around them reads while showing nothing
(bidirectional controls, line and paragraph separators, zero-width characters, tag
characters), or the syntax of the output it is drawn into. Every string a terminal line,
a picture or the report takes from a trace goes through one of these functions, which
spell each such character as an escape (``\\u202e``) instead.

>>> printable("s1\\x1b[2J\\n")
's1\\\\x1b[2J\\\\n'
>>> xml_text("<script>\\x00")
'&lt;script&gt;\\\\x00'
>>> mermaid_text('a: b; "c" #d\\n<br/>')
"a∶ b, 'c' ♯d\\\\n‹br/›"
"""

from __future__ import annotations

import os
import re

UNPRINTABLE_RANGES: tuple[tuple[int, int], ...] = (
    (0x0000, 0x001F),  # C0 controls (terminal escapes, newlines)
    (0x007F, 0x009F),  # DEL and C1 controls
    (0x00AD, 0x00AD),  # soft hyphen
    (0x0600, 0x0605),  # Arabic number signs (format characters)
    (0x061C, 0x061C),  # Arabic letter mark (bidirectional)
    (0x06DD, 0x06DD),
    (0x070F, 0x070F),
    (0x0890, 0x0891),
    (0x08E2, 0x08E2),
    (0x180E, 0x180E),  # Mongolian vowel separator
    (0x200B, 0x200F),  # zero-width space, non-joiner, joiner; LRM, RLM
    (0x2028, 0x202E),  # line and paragraph separators; bidirectional embeddings, overrides
    (0x2060, 0x2064),  # word joiner and invisible operators
    (0x2066, 0x206F),  # bidirectional isolates; deprecated format characters
    (0xD800, 0xDFFF),  # surrogates (a lone one cannot be encoded)
    (0xFDD0, 0xFDEF),  # non-characters
    (0xFEFF, 0xFEFF),  # zero-width no-break space (BOM)
    (0xFFF9, 0xFFFB),  # interlinear annotation
    (0xFFFE, 0xFFFF),  # non-characters
    (0x110BD, 0x110BD),
    (0x110CD, 0x110CD),
    (0x13430, 0x13438),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0001, 0xE0001),  # language tag
    (0xE0020, 0xE007F),  # tag characters (invisible ASCII look-alikes)
    *((plane + 0xFFFE, plane + 0xFFFF) for plane in range(0x10000, 0x110000, 0x10000)),
)
"""Code points spelt as escapes: every control (Cc), format (Cf), surrogate (Cs), line
(Zl) and paragraph (Zp) separator of Unicode, and every non-character (a test compares
them with the running Python's ``unicodedata``)."""

_UNPRINTABLE = re.compile(
    "[" + "".join(f"{chr(low)}-{chr(high)}" for low, high in UNPRINTABLE_RANGES) + "]"
)


def printable(text: str) -> str:
    """``text`` on one line with every unprintable character spelt as an escape
    (``\\x1b``, ``\\n``, ``\\ud800``): safe for a terminal, a log line, and XML."""
    return _UNPRINTABLE.sub(_spelt, text)


def printable_path(path: str | os.PathLike[str]) -> str:
    """A file name as :func:`printable` text: bytes that are not UTF-8 (a name the
    file system gave back undecoded) are spelt ``\\xff`` like any other escape."""
    raw = os.fsencode(path)
    return printable(raw.decode("utf-8", "backslashreplace"))


def xml_text(text: str) -> str:
    """``text`` for XML or HTML character data and attributes, quoted either way."""
    return (
        printable(text)
        .replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace('"', "&quot;")
        .replace("'", "&#x27;")
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
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
