"""Minimal edits: (original text, rewritten region) -> the smallest set of replacements.

A model answers an edit request with a whole rewritten region; sending that region back as one
replacement would move the user's cursor, flicker and clobber marks. `diff` turns it into small
edits: a line diff first, then a character diff inside each block of changed lines, so unchanged
text is never touched. Offsets are string offsets into the original; an edit never starts or ends
between the "\\r" and "\\n" of a CRLF (not a valid LSP position). `joined` makes one edit of several, for the
clients that take only one. Pure and synchronous.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

_LINES = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+")
_UNITS = re.compile(r"\r\n|.", re.DOTALL)

# Above this many characters on both sides of a changed block, the character diff (quadratic in the worst
# case) is skipped and the block is replaced whole: it is still confined to the changed lines.
CHAR_DIFF_LIMIT = 20_000


@dataclass(frozen=True)
class Edit:
    """Replace original[start:end] with `text` (string offsets into the original)."""

    start: int
    end: int
    text: str


def lines_of(text: str) -> list[str]:
    """Lines with their terminators ("\\n", "\\r\\n" or "\\r"); the last may have none."""
    return _LINES.findall(text)


def _offsets(parts: Sequence[str]) -> list[int]:
    out = [0]
    for p in parts:
        out.append(out[-1] + len(p))
    return out


def _char_diff(old: str, new: str, base: int) -> list[Edit]:
    """Character-level edits turning `old` into `new`; CRLF counts as one unit."""
    if len(old) > CHAR_DIFF_LIMIT and len(new) > CHAR_DIFF_LIMIT:
        return [Edit(base, base + len(old), new)]
    a, b = _UNITS.findall(old), _UNITS.findall(new)
    oa, ob = _offsets(a), _offsets(b)
    edits: list[Edit] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag != "equal":
            edits.append(Edit(base + oa[i1], base + oa[i2], new[ob[j1] : ob[j2]]))
    return edits


def diff(old: str, new: str, base: int = 0) -> list[Edit]:
    """Minimal edits turning `old` into `new`, offsets shifted by `base`; sorted, non-overlapping."""
    if old == new:
        return []
    a, b = lines_of(old), lines_of(new)
    oa, ob = _offsets(a), _offsets(b)
    edits: list[Edit] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        old_block, new_block = old[oa[i1] : oa[i2]], new[ob[j1] : ob[j2]]
        if tag == "replace":
            edits.extend(_char_diff(old_block, new_block, base + oa[i1]))
        else:  # a pure insertion or deletion of whole lines
            edits.append(Edit(base + oa[i1], base + oa[i2], new_block))
    return edits


def region_edits(original: str, start: int, end: int, rewritten: str) -> list[Edit]:
    """Minimal edits turning original[start:end] into `rewritten`, in offsets of `original`."""
    return diff(original[start:end], rewritten, start)


def apply(text: str, edits: Iterable[Edit]) -> str:
    """Apply non-overlapping edits (offsets into `text`)."""
    out: list[str] = []
    pos = 0
    for e in sorted(edits, key=lambda e: (e.start, e.end)):
        if e.start < pos:
            raise ValueError(f"overlapping edits at {e.start}")
        out.append(text[pos : e.start])
        out.append(e.text)
        pos = e.end
    out.append(text[pos:])
    return "".join(out)


def joined(text: str, edits: Sequence[Edit]) -> Edit:
    """Non-overlapping edits (at least one) as one replacement from the first's start to the last's end, the
    text between them kept: for clients that take only one edit. No longer minimal, so only for those."""
    start, end = min(e.start for e in edits), max(e.end for e in edits)
    inner = [Edit(e.start - start, e.end - start, e.text) for e in edits]
    return Edit(start, end, apply(text[start:end], inner))


def changed_chars(edits: Iterable[Edit]) -> int:
    """How much an edit set changes: characters removed plus characters inserted."""
    return sum((e.end - e.start) + len(e.text) for e in edits)
