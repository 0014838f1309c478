"""The README's code, as the tests that keep it true read it."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_embed_block() -> str:
    """The Python block of the README's "Embedding" section."""
    readme = README.read_text(encoding="utf-8")
    section = readme.split("## Embedding\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```python\n(.*?)```", section, flags=re.S)
    assert block is not None
    return block.group(1)
