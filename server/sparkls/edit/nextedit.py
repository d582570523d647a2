"""Next-edit prediction: the recent edits of a document, the prompt that asks for the next one, its answer (pure).

`History` keeps the last edits of one document as small line hunks with timestamps and sequence numbers, fed
from each `didChange` content change; keystrokes inside the lines of the previous hunk merge into it (typing a
word is one hunk, not eight).

The prompt is a unified diff for the model to continue (no chat template): the file as it was before the recent
edits (an excerpt around the cursor: the `EditFrame`), then those edits as a diff, oldest first, then a hunk header
at the cursor with the cursor's line as removed (no context lines: decision 0013). The model writes only what
changes: more `-` lines, then the `+` lines that replace them (the cursor's line again first when it only inserts
below it); it stops when it goes back to context. The frame stays while the user edits near it, so consecutive
predictions are one prompt that grows by appending each new edit: the engine reuses the KV of all the rest. The
lowest token probability on the added lines is the prediction's confidence; the gate (`edit/generate.py`) offers
the whole change or its longest sure beginning (`candidates`), and trusts a change made of the recent edits'
changes (`repeats`) from a lower probability.
Measured against a whole-window rewrite with the edits described in words (the prompt before), a chat prompt with
diffs, and this diff without the cursor's line removed (`benchmarks/next_prompts.py`, `next_eval.py`). Secrets
never reach the model: the excerpt and the diff are redacted, the lines the hunk may remove masked with numbered
placeholders that the answer's lines get back.
"""

from __future__ import annotations

import collections
import math
import re
import time
from dataclasses import dataclass

from sparkls.text.document import Document
from sparkls.workspace import redact

MAX_HUNK_CHARS = 4000


@dataclass
class Hunk:
    line: int  # first line, in the document as it was right after this hunk
    old: list[str]  # the lines before the edit
    new: list[str]  # the same lines after it
    time: float
    seq: int = 0  # the History's count of hunks when this one began (a merged keystroke keeps it)


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
        self.count = 0  # hunks ever added

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
        if (
            last is not None
            and now - last.time <= self.merge_s
            and last.line <= first
            and first + n_old <= last.line + len(last.new)
        ):
            at = first - last.line
            last.new = last.new[:at] + new_lines + last.new[at + n_old :]
            last.time = now
            if last.new == last.old:
                self.hunks.pop()  # typed and undone
            return
        if old_lines != new_lines:
            self.count += 1
            self.hunks.append(Hunk(first, old_lines, new_lines, now, self.count))


PRIOR_HUNKS = 3  # edits already in the document when a frame begins, shown as its diff's first hunks
MAX_HUNKS = 12  # a frame's diff shows at most this many; one more starts a new frame
MAX_DIFF_CHARS = 3000
CONTEXT_LINES = 0  # unchanged lines above the cursor in the hunk the model continues (decision 0013)
# No stop strings beyond the end of text: the first character of the line after the change ends the request
# (`finished`), so its probability, the decision to stop, is seen.
STOPS = ("<|endoftext|>",)


@dataclass(frozen=True)
class EditFrame:
    """A document's stable prompt head: the file's text around the cursor as it was before the edits its diff
    shows, from the hunk numbered `first_seq` on."""

    uri: str
    head: str
    lo: int  # the excerpt's lines [lo, hi), in the text it was taken from
    hi: int
    first_seq: int


def _revert(text: str, hunks: list[Hunk]) -> str:
    """`text` as it was before `hunks` (oldest first; each hunk's lines are where they were right after it)."""
    lines = text.split("\n")
    for h in reversed(hunks):
        lines[h.line : h.line + len(h.new)] = h.old
    return "\n".join(lines)


def _shown(history: History | None, first_seq: int) -> list[Hunk]:
    return [h for h in history.hunks if h.seq >= first_seq] if history is not None else []


def unified(path: str, hunks: list[Hunk]) -> str:
    """The hunks as one unified diff without context lines, oldest first, each at its lines then (redacted)."""
    out = [f"--- a/{path}", f"+++ b/{path}"]
    for h in hunks:
        old = [x for x in h.old if x or len(h.old) > 1]  # a one-line hunk on an empty line inserts or deletes
        new = [x for x in h.new if x or len(h.new) > 1]
        out.append(f"@@ -{h.line + 1},{len(old)} +{h.line + 1},{len(new)} @@")
        out += ["-" + x for x in old] + ["+" + x for x in new]
    return redact.redact("\n".join(out) + "\n")


def frame_for(
    doc: Document, line: int, history: History | None, path: str, above: int, below: int, frame: EditFrame | None
) -> EditFrame:
    """`frame` while it still serves a prediction at `line`, else a new one: the last `PRIOR_HUNKS` edits
    reverted, the excerpt `above` lines above the cursor to `below` lines under it."""
    if frame is not None and frame.uri == doc.uri and history is not None:
        shown = _shown(history, frame.first_seq)
        complete = (bool(shown) and shown[0].seq == frame.first_seq) or (not shown and history.count < frame.first_seq)
        margin = max(1, min(above, below) // 3)  # from an edge where the excerpt was cut
        inside = (frame.lo == 0 or frame.lo + margin <= line) and (
            frame.hi >= doc.text.count("\n") or line < frame.hi - margin
        )
        if (
            complete
            and inside
            and len(shown) <= MAX_HUNKS
            and sum(len(unified(path, [h])) for h in shown) <= MAX_DIFF_CHARS
        ):
            return frame
    hunks = list(history.hunks)[-PRIOR_HUNKS:] if history is not None else []
    first_seq = hunks[0].seq if hunks else (history.count + 1 if history is not None else 1)
    lines = _revert(doc.text, hunks).splitlines(keepends=True)
    lo, hi = max(0, line - above), min(len(lines), line + below)
    excerpt = "".join(lines[lo:hi])
    return EditFrame(doc.uri, f"<|file_sep|>{path}\n{redact.redact(excerpt)}", lo, hi, first_seq)


@dataclass(frozen=True)
class DiffPrompt:
    text: str
    line: int  # the cursor's line: the hunk's first removed line
    context: int  # the first context line above it (the prediction's region starts there)
    frame: EditFrame
    lines: tuple[str, ...]  # the document's lines from `context` on as the model sees them (masked), no terminators
    secrets: redact.Secrets = ()
    removed: str = ""  # the prompt's last line: the cursor's line as removed (none past the last line)


def render(
    doc: Document,
    cursor: int,
    history: History | None,
    path: str,
    above: int = 60,
    below: int = 30,
    frame: EditFrame | None = None,
    max_lines: int = 8,
    context_lines: int = CONTEXT_LINES,
) -> DiffPrompt:
    """The prompt for the next edit at the cursor's line (see the module's docstring)."""
    line = doc.text.count("\n", 0, cursor)
    f = frame_for(doc, line, history, path, above, below, frame)
    # Past the last line (a file's end) the hunk shows that line as context: the model needs one line to add after.
    last = doc.text.count("\n") - (1 if doc.text.endswith("\n") else 0)
    context = max(0, min(line - context_lines, last))
    s, e = line_start(doc.text, context), line_start(doc.text, line + max_lines + 1)
    masked, secrets = redact.mask(doc.text, s, e)
    lines = masked.split("\n")
    if masked.endswith("\n") or not masked:
        lines.pop()  # the text after the last line's terminator is not a line
    if masked.count("\n") != doc.text.count("\n", s, e):
        lines = []  # a secret spans lines here (a key block): no line of it can be matched or changed
    ctx = "".join(f" {x}\n" for x in lines[: line - context])
    cursor_line = f"-{lines[line - context]}\n" if line - context < len(lines) else ""
    text = (
        f"{f.head}<|file_sep|>{path}.diff\n{unified(path, _shown(history, f.first_seq))}"
        f"@@ -{context + 1} +{context + 1} @@\n{ctx}{cursor_line}"
    )
    return DiffPrompt(text, line, context, f, tuple(lines), secrets, cursor_line)


def line_start(text: str, line: int) -> int:
    """The offset of line `line` (0-based) in `text`, or len(text) past its last line."""
    at = 0
    for _ in range(line):
        nl = text.find("\n", at)
        if nl == -1:
            return len(text)
        at = nl + 1
    return at


@dataclass(frozen=True)
class Answer:
    """A parsed answer: the document's lines [first, last) replaced by `added` (each with its "\n")."""

    first: int
    last: int
    added: list[str]
    confidence: float  # the lowest token probability on the added lines, or for a deletion on the token after it
    # (1.0 when the engine gave none)


def finished(answer: str) -> bool:
    """The model has written its change and begun a line that is not part of it (context, another hunk): stop
    generating (the first character decides; `parse` reads the change the same way)."""
    removing = adding = False
    lines = answer.split("\n")
    for i, x in enumerate(lines):
        if not x:
            if i < len(lines) - 1:
                return True  # an empty line is not a diff line: the model is done
            continue  # the next line has not begun
        if x.startswith("+") and not x.startswith("+++"):
            adding = True
        elif x.startswith("-") and not adding and not x.startswith("---"):
            removing = True
        elif removing or adding or not x.startswith(" "):
            return True
    return False


def applied(text: str, p: DiffPrompt, got: Answer | None) -> tuple[int, int, str]:
    """The prediction's region of `text` (the hunk's context lines to the last line it removes, at least the
    cursor's line) and that region with the answer applied (as it is when `got` is None)."""
    s = line_start(text, p.context)
    e = line_start(text, max(p.line + 1, got.last if got else 0))
    if got is None:
        return s, e, text[s:e]
    a, b = line_start(text, got.first), line_start(text, got.last)
    new = text[s:a] + "".join(got.added) + text[b:e]
    if not text.endswith("\n") and b == e == len(text) and new.endswith("\n"):
        new = new[:-1]  # the last line had no terminator: it still has none
    return s, e, new


def candidates(p: DiffPrompt, answer: str, line_logprobs: list[float] | None = None) -> list[Answer]:
    """The model's change after the prompt's hunk header (`answer` begins with the cursor's `-` line the prompt
    ends with), then the same change cut after each of its added lines, longest first: a prediction whose first
    lines are sure and whose last ones are not is shown as its sure part (the model goes on writing past the edit
    more often than it gets the edit wrong). A cut removes no more lines than it keeps added, and none of those
    the whole change writes back at its end (the cursor's line, when it inserts above it): a cut replaces lines,
    never drops one. Empty when the answer changes nothing, removes a line that is not the document's, or writes
    a placeholder the masked lines did not have. `line_logprobs`: per line of `answer`, the lowest token
    log-probability."""
    if not p.lines:
        return []
    first = p.line - p.context
    removed, end = 0, 0.0
    added: list[tuple[str, float]] = []
    for i, x in enumerate(answer.split("\n")):
        lp = line_logprobs[i] if line_logprobs is not None and i < len(line_logprobs) else 0.0
        if x.startswith("-") and not added:
            if first + removed >= len(p.lines) or p.lines[first + removed] != x[1:]:
                return []
            removed += 1
        elif x.startswith("+"):
            added.append((x[1:], lp))
        else:
            # A deletion is decided by the first token after its lines. After `+` lines, the chosen token's
            # probability says little: many tokens end a change (`@@`, context, another file), so it is not counted.
            end = lp
            break
    if not added:
        got = _answer(p, removed, [], end)
        return [got] if got is not None else []
    written_back = _trim(p, removed, [x for x, _ in added])[3]
    out: list[Answer] = []
    for keep in range(len(added), 0, -1):
        cut = len(added) - keep
        got = _answer(
            p,
            min(keep, removed - min(written_back, cut)) if cut else removed,
            [x for x, _ in added[:keep]],
            min(lp for _, lp in added[:keep]),
        )
        if got is not None and got not in out:
            out.append(got)
    return out


def parse(p: DiffPrompt, answer: str, line_logprobs: list[float] | None = None) -> Answer | None:
    """The model's whole change (`candidates`' first), or None."""
    got = candidates(p, answer, line_logprobs)
    return got[0] if got else None


def _trim(p: DiffPrompt, removed: int, added: list[str]) -> tuple[int, int, list[str], int]:
    """A change without the lines it removes and writes again unchanged (the cursor's line, when the model inserts
    below or above it): its first line (an index into `p.lines`), lines removed, lines added, and how many of the
    lines it wrote again were at its end."""
    at, tail = p.line - p.context, 0
    while removed and added and added[0] == p.lines[at]:
        at, removed, added = at + 1, removed - 1, added[1:]
    while removed and added and added[-1] == p.lines[at + removed - 1]:
        removed, added, tail = removed - 1, added[:-1], tail + 1
    return at, removed, added, tail


def _answer(p: DiffPrompt, removed: int, added: list[str], low: float) -> Answer | None:
    at, removed, added, _ = _trim(p, removed, added)
    if not removed and not added:
        return None
    new: list[str] = []
    for x in added:
        for placeholder, value in p.secrets:
            x = x.replace(placeholder, value)
        if "<redacted" in x:
            return None
        new.append(x + "\n")
    return Answer(p.context + at, p.context + at + removed, new, math.exp(low))


_WORD = re.compile(r"\w+|[^\w\s]")


def _words_changed(old: list[str], new: list[str]) -> tuple[set[str], set[str]]:
    """The words (identifiers, numbers, punctuation) that `new` has fewer / more of than `old`."""
    a, b = collections.Counter(_WORD.findall("\n".join(old))), collections.Counter(_WORD.findall("\n".join(new)))
    return set(a - b), set(b - a)


Words = tuple[frozenset[str], frozenset[str]]


def recent_words(history: History | None) -> Words:
    """The words the recent edits removed, and those they added."""
    removed: set[str] = set()
    added: set[str] = set()
    for h in history.hunks if history is not None else ():
        r, a = _words_changed(h.old, h.new)
        removed |= r
        added |= a
    return frozenset(removed), frozenset(added)


def repeats(recent: Words, p: DiffPrompt, got: Answer) -> bool:
    """Whether the predicted change is made of the recent edits' changes (`recent_words`): every word it removes
    one of them removed, every word it adds one of them added (a rename carried on, the same fix at the next
    call)."""
    removes, adds = _words_changed(
        list(p.lines[got.first - p.context : got.last - p.context]), [x.rstrip("\n") for x in got.added]
    )
    return bool(removes or adds) and removes <= recent[0] and adds <= recent[1]


def may_repeat(recent: Words, answer: str) -> bool:
    """Whether a change whose diff lines so far are `answer` can still turn out to repeat the recent edits: no
    finished word on its added lines is one that neither a recent edit added nor the change removes."""
    if not recent[0] and not recent[1]:
        return False
    lines = answer.split("\n")
    allowed = recent[1] | set(_WORD.findall("\n".join(x for x in lines if x.startswith("-"))))
    text = "\n".join(x[1:] for x in lines if x.startswith("+"))
    words = _WORD.findall(text)
    if words and re.match(r"\w", text[-1:]):
        words.pop()  # a word still being written
    return all(w in allowed for w in words)
