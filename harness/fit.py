"""Words fitted to a terminal's width: wrapped under their line, or shortened at a word boundary with a mark,
never cut inside a word (a path or an id longer than the line stays whole, past the width if it must)."""

from __future__ import annotations

import textwrap

MARK = "…"


def wrap(text: str, width: int, *, first: str = "", indent: str | None = None) -> list[str]:
    """`first` then `text`, wrapped at spaces to `width`; continuation lines start with `indent` (default: as
    many spaces as `first` is long, so the words line up under their start)."""
    indent = " " * len(first) if indent is None else indent
    lines = textwrap.wrap(" ".join(text.split()), width=max(width, len(first) + 1), initial_indent=first,
                          subsequent_indent=indent, break_long_words=False, break_on_hyphens=False)
    return lines or [first.rstrip()]


def shorten(text: str, width: int) -> str:
    """`text` on one line of at most `width` characters: whole when it fits, else cut after its last whole
    word that leaves room for the mark. A first word longer than the line is kept whole, with the mark when
    more followed it."""
    if len(text) <= width:
        return text
    text = " ".join(text.split())
    cut = text.rfind(" ", 0, max(width - len(MARK) + 1, 0))  # a narrow or negative width: the first word
    if cut <= 0:
        first, _, rest = text.partition(" ")
        return first + (MARK if rest else "")
    return text[:cut].rstrip(",;:") + MARK
