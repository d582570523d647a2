"""Next-edit prediction: the recent edits of a document, and the prompt that asks for the next one (pure).

`History` keeps the last edits of one document as small line hunks with timestamps, fed from each
`didChange` content change; keystrokes inside the lines of the previous hunk merge into it (typing
a word is one hunk, not eight). `render` asks the model to rewrite an editable window around the
cursor with the next edit applied, the recent hunks described in words (`describe`: the 0.5B model
follows "replaced `count` with `n` on line 2" where it echoed a diff unchanged); the window's
minimal diff is the prediction. Secrets in the window and the hunks never reach the model (`rewrite.render`).
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass

from sparkls.edit import rewrite
from sparkls.text.document import Document
from sparkls.workspace.redact import Secrets

MAX_HUNK_CHARS = 4000


@dataclass
class Hunk:
    line: int  # first line, in the document as it was right after this hunk
    old: list[str]  # the lines before the edit
    new: list[str]  # the same lines after it
    time: float


def _line_bounds(text: str, start: int, end: int) -> tuple[int, int]:
    """[first line start, last line end) of the lines touched by [start, end), terminator excluded."""
    s = text.rfind("\n", 0, start) + 1
    e = text.find("\n", end)
    return s, len(text) if e == -1 else e


class History:
    """The last `size` edits of one document."""

    def __init__(self, size: int = 16, merge_s: float = 30.0) -> None:
        self.hunks: collections.deque[Hunk] = collections.deque(maxlen=size)
        self.merge_s = merge_s

    def record(self, old_text: str, start: int, end: int, inserted: str, now: float | None = None) -> None:
        """One content change: old_text[start:end] was replaced by `inserted`."""
        now = time.monotonic() if now is None else now
        if end - start > MAX_HUNK_CHARS or len(inserted) > MAX_HUNK_CHARS:
            return  # a whole-file replacement or a big paste says nothing about the next small edit
        s, e = _line_bounds(old_text, start, end)
        first = old_text.count("\n", 0, s)
        old_lines = old_text[s:e].split("\n")
        new_seg = old_text[s:start] + inserted + old_text[end:e]
        new_lines = new_seg.split("\n")
        last = self.hunks[-1] if self.hunks else None
        n_old = len(old_lines)
        if last is not None and now - last.time <= self.merge_s and \
                last.line <= first and first + n_old <= last.line + len(last.new):
            at = first - last.line
            last.new = last.new[:at] + new_lines + last.new[at + n_old :]
            last.time = now
            if last.new == last.old:
                self.hunks.pop()  # typed and undone
            return
        if old_lines != new_lines:
            self.hunks.append(Hunk(first, old_lines, new_lines, now))


def _ident(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


def _changed_words(old: str, new: str) -> tuple[str, str]:
    """The changed part of one line (or lines), widened to whole identifiers when the change is inside one."""
    p = 0
    while p < min(len(old), len(new)) and old[p] == new[p]:
        p += 1
    q = 0
    while q < min(len(old), len(new)) - p and old[len(old) - 1 - q] == new[len(new) - 1 - q]:
        q += 1
    oe, ne = len(old) - q, len(new) - q

    def touches(at_old: int, at_new: int) -> bool:
        return (at_old < oe and _ident(old[at_old])) or (at_new < ne and _ident(new[at_new]))

    while p > 0 and _ident(old[p - 1]) and touches(p, p):
        p -= 1
    while q > 0 and _ident(old[oe]) and ((oe > p and _ident(old[oe - 1])) or (ne > p and _ident(new[ne - 1]))):
        oe, ne, q = oe + 1, ne + 1, q - 1
    return old[p:oe].strip(), new[p:ne].strip()


def describe(h: Hunk) -> str:
    """One hunk in words ("replaced `count` with `n` on line 2"): small models follow words better than diffs."""
    a, b = _changed_words("\n".join(h.old), "\n".join(h.new))
    where = f"line {h.line + 1}" if len(h.new) <= 1 else f"lines {h.line + 1}-{h.line + len(h.new)}"
    if "\n" in a or "\n" in b or len(a) > 80 or len(b) > 80:
        return f"rewrote {where}"
    if a and b:
        return f"replaced `{a}` with `{b}` on {where}"
    if b:
        return f"inserted `{b}` on {where}"
    return f"deleted `{a}` from {where}" if a else f"changed {where}"


def instruction(history: History | None, limit: int = 3) -> str:
    """What the model is asked: continue the most recent edits, described in words."""
    hunks = list(history.hunks)[-limit:] if history is not None else []
    if not hunks:
        return ("Make the next edit the developer is most likely to make in this code (finish what is unfinished); "
                "if nothing needs to change, repeat the code unchanged.")
    said = "; then ".join(describe(h) for h in hunks)
    return (f"The developer just {said}. Make the same change wherever it is still missing in this code, or the "
            "next edit that follows from it; change nothing else.")


@dataclass(frozen=True)
class NextEditPrompt:
    text: str
    start: int  # the editable window in the document (whole lines)
    end: int
    secrets: Secrets = ()  # the placeholders in the prompt's window and the values they stand for


def window(text: str, cursor: int, before: int, after: int) -> tuple[int, int]:
    """Whole lines from `before` lines above the cursor's line to `after` lines below it."""
    s = text.rfind("\n", 0, cursor) + 1
    for _ in range(before):
        if s == 0:
            break
        s = text.rfind("\n", 0, s - 1) + 1
    e = text.find("\n", cursor)
    for _ in range(after):
        if e == -1:
            break
        e = text.find("\n", e + 1)
    return s, len(text) if e == -1 else e + 1


def render(doc: Document, cursor: int, history: History | None, path: str = "", before: int = 3,
           after: int = 8) -> NextEditPrompt:
    """Ask for the editable window around the cursor rewritten with the next edit (the rewrite prompt)."""
    s, e = window(doc.text, cursor, before, after)
    p = rewrite.render(doc, s, e, instruction(history), path)
    return NextEditPrompt(p.text, s, e, p.secrets)
