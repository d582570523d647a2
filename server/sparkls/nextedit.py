"""Next-edit prediction: the recent edits of a document, and the prompt that asks for the next one (pure).

`History` keeps the last edits of one document as small line hunks with timestamps, fed from each
`didChange` content change; keystrokes inside the lines of the previous hunk merge into it (typing
a word is one hunk, not eight). `render` asks the model to rewrite an editable window around the
cursor with the next edit applied; the window's minimal diff is the prediction.
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass

from sparkls.document import Document
from sparkls.rewrite import FENCE, chatml, fence_lang

CURSOR = "<|user_cursor|>"
START, END = "<|editable_region_start|>", "<|editable_region_end|>"
SYSTEM = ("You predict the next edit a developer makes. From their recent edits, infer what they are doing and "
          "apply the next step of it inside the editable region: continue a rename, repeat a change on similar "
          "lines, finish what was started. Reply with the editable region rewritten, in one fenced code block, "
          "and nothing else; leave lines that need no change exactly as they are.")

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

    def diff_text(self, limit: int = 6) -> str:
        """The most recent hunks, oldest first, as a unified-diff-like text."""
        out = []
        for h in list(self.hunks)[-limit:]:
            out.append(f"@@ line {h.line + 1} @@")
            out.extend("-" + ln for ln in h.old)
            out.extend("+" + ln for ln in h.new)
        return "\n".join(out)


@dataclass(frozen=True)
class NextEditPrompt:
    text: str
    start: int  # the editable window in the document (whole lines)
    end: int


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
           after: int = 8, context_lines: int = 30) -> NextEditPrompt:
    s, e = window(doc.text, cursor, before, after)
    lang = fence_lang(doc.language)
    head = "".join(doc.text[:s].splitlines(keepends=True)[-context_lines:])
    tail = "".join(doc.text[e:].splitlines(keepends=True)[:context_lines // 2])
    editable = doc.text[s:cursor] + CURSOR + doc.text[cursor:e]
    edits = history.diff_text() if history is not None else ""
    parts = [f"File: {path or doc.uri}"]
    parts.append(f"Recent edits, oldest first:\n{FENCE}diff\n{edits}\n{FENCE}" if edits else "No recent edits.")
    parts.append(f"The code ({CURSOR} marks the cursor):\n{FENCE}{lang}\n{head}{START}\n{editable.rstrip(chr(10))}\n"
                 f"{END}\n{tail}{FENCE}")
    parts.append("Rewrite the editable region with the next edit applied.")
    return NextEditPrompt(chatml(SYSTEM, "\n\n".join(parts), f"{FENCE}{lang}\n"), s, e)


def clean(answer: str) -> str:
    """The model's rewritten window without the markers it may echo."""
    lines = [ln for ln in answer.split("\n") if ln.strip() not in (START, END)]
    return "\n".join(lines).replace(CURSOR, "")
