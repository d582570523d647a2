"""Typed-ahead cache: keep serving the last suggestion while the user types what it predicted (pure).

If the text after the cursor is unchanged and the characters typed since the suggestion was made
are its start, the rest of the suggestion is the answer, with no model call at all.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Remembered:
    uri: str
    before: str  # document text before the cursor when the suggestion was made
    after: str  # document text after the cursor
    text: str  # the suggestion


def remember(uri: str, text: str, cursor: int, suggestion: str) -> Remembered | None:
    if not suggestion:
        return None
    return Remembered(uri, text[:cursor], text[cursor:], suggestion)


def lookup(entry: Remembered | None, uri: str, text: str, cursor: int) -> str | None:
    """The rest of the remembered suggestion at this cursor, or None when it no longer applies."""
    if entry is None or entry.uri != uri:
        return None
    n = len(entry.before)
    if cursor < n or len(text) - cursor != len(entry.after):
        return None
    typed = text[n:cursor]
    if not entry.text.startswith(typed) or len(typed) >= len(entry.text):
        return None
    if not text.endswith(entry.after) or not text.startswith(entry.before):
        return None
    rest = entry.text[len(typed) :]
    return rest if rest.strip() else None
