"""Decide when a streamed suggestion is complete, and clean it up (pure).

Small code models rarely stop on their own: after a good middle they repeat the suffix or drift
into prose. `StopPolicy.feed` is called with the text generated so far after every token and
returns where to cut once the suggestion is complete:
- single-line mode: at the end of the line. At the end of a finished line, or of one ending in a comma, the
  model may answer with a newline instead: then the next line is the suggestion (a newline, its indentation,
  its code), cut at its end, unless the code after the cursor starts with that line; in the middle of a line,
  or after another unfinished one, such an answer cannot be used, and generation stops at once;
- multi-line mode: before a line that leaves the enclosing scope (dedent below the scope's body
  in indentation languages; a closing brace below the starting depth elsewhere), before a line
  that repeats the first line of the suffix, before a Markdown fence (```) in a code file (the Instruct
  model drifting into a chat answer), or after two blank lines; a closing brace ends the
  suggestion after it when the document lacks one (more `{` than `}` in the whole document), before it
  otherwise.
`finalize` then trims what duplicates the text after the cursor and keeps brackets balanced.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkls.completion.context import Context
from sparkls.text.nodes import indent_width

_PAIRS = {")": "(", "]": "[", "}": "{"}
_OPEN = set(_PAIRS.values())
_CLOSING = set(")]};,")
_PROSE = frozenset({"markdown", "plaintext"})  # documents where a ``` line may be what the user writes


def _in_docstring(text: str) -> bool:
    """Whether `text` leaves a triple-quoted string open (a docstring may hold a Markdown example)."""
    return (text.count('"""') + text.count("'''")) % 2 == 1


def _repeats_next_line(line: str, suffix: str) -> bool:
    """Whether a suggested whole line (with its indentation) is the first non-blank line after the cursor: the
    same code at the same indentation (a `}` one level deeper than the suffix's `}` closes another block)."""
    after = next((x for x in suffix.split("\n") if x.strip()), "")
    return bool(line.strip()) and line.strip() == after.strip() and indent_width(line) == indent_width(after)


def _first_code_line(text: str) -> str:
    for line in text.split("\n"):
        if line.strip():
            return line.strip()
    return ""


def newline_answer(text: str) -> bool:
    """The model started a new line instead of continuing the cursor's line (spaces before it aside)."""
    return text.lstrip(" \t\r").startswith("\n")


def next_line_end(text: str) -> int | None:
    """For a newline answer: where its first non-blank line ends (None while it is still growing)."""
    lines = text.split("\n")
    offset = len(lines[0]) + 1
    for k in range(1, len(lines) - 1):
        if lines[k].strip():
            return offset + len(lines[k])
        offset += len(lines[k]) + 1
    return None


def _next_line(text: str, eol: str) -> str:
    """A newline answer as shown: the newlines before the first non-blank line, and that line."""
    lines = text.split("\n")
    for k in range(1, len(lines)):
        if lines[k].strip():
            return eol * k + lines[k].rstrip()
    return ""


@dataclass
class StopPolicy:
    ctx: Context
    max_lines: int = 24

    def feed(self, text: str) -> int | None:
        """Cut offset once `text` holds a complete suggestion, else None (keep generating)."""
        ctx = self.ctx
        if ctx.mode == "single":
            if ctx.line_before.strip() and newline_answer(text):
                if not ctx.line_done:
                    return 0  # mid-line or an unfinished line: a new line cannot be used, stop now
                return next_line_end(text)
            start = len(text) - len(text.lstrip("\n")) if not ctx.line_before.strip() else 0
            nl = text.find("\n", start)
            if nl != -1 and text[:nl].strip():
                return nl
            return None
        lines = text.split("\n")
        complete = lines[:-1]  # the last line may still be growing
        suffix_first = _first_code_line(ctx.suffix)
        blank_run = 0
        offset = 0
        depth = 0
        for i, line in enumerate(complete):
            stripped = line.strip()
            col0 = ctx.line_before if i == 0 else ""
            full = col0 + line
            before = depth
            if ctx.braces:
                for ch in line:
                    if ch in _OPEN:
                        depth += 1
                    elif ch in _PAIRS:
                        depth -= 1
            # A line of closers that closes what the suggestion itself opened is its own, even when the suffix
            # starts with the same `}` (which closes the enclosing block).
            own_closer = ctx.braces and before > 0 and depth >= 0 and bool(stripped) and set(stripped) <= _CLOSING
            if i > 0 and stripped.startswith("```") and ctx.language not in _PROSE and not _in_docstring(text[:offset]):
                return max(0, offset - 1)  # a Markdown fence: the model has left the code for a chat answer
            if (i > 0 or ctx.insert_lines or ctx.newline) and not own_closer:
                if stripped and suffix_first and stripped == suffix_first:
                    return max(0, offset - 1) if i > 0 else 0
                if stripped and ctx.min_indent is not None and indent_width(full) < ctx.min_indent:
                    return max(0, offset - 1) if i > 0 else 0
            if ctx.braces and depth < 0:
                # The line closes the enclosing block: keep it when the document lacks that closer,
                # stop before it when the code after the cursor already closes the block.
                if stripped.startswith("}"):
                    duplicate = ctx.closers_needed == 0
                else:
                    duplicate = suffix_first[:1] in _PAIRS and stripped.startswith(suffix_first[:1])
                if duplicate:
                    return max(0, offset - 1) if i > 0 else 0
                return offset + len(line)
            blank_run = blank_run + 1 if not stripped else 0
            if blank_run >= 2:
                return max(0, offset - 1)
            if i + 1 >= self.max_lines:
                return offset + len(line)
            offset += len(line) + 1
        return None


def unheal(raw: str, heal: str) -> str | None:
    """Generated text relative to the cursor, when the prompt left out `heal` (the indentation
    before the cursor); None while it cannot be known yet."""
    if not heal:
        return raw
    if raw.startswith(heal):
        return raw[len(heal) :]
    stripped = raw.lstrip(" \t")
    if not stripped:
        return None if len(raw) < len(heal) and "\n" not in raw else ""
    return stripped


def _excess_closers(line: str) -> int:
    stack: list[str] = []
    excess = 0
    for ch in line:
        if ch in _OPEN:
            stack.append(ch)
        elif ch in _PAIRS:
            if stack and stack[-1] == _PAIRS[ch]:
                stack.pop()
            else:
                excess += 1
    return excess


def trim_line_overlap(before: str, completion: str, after: str) -> str:
    """Drop the end of a one-line completion that the rest of the line already has (`)`, `):`, ...)."""
    if not after.strip():
        return completion
    after = after.lstrip(" ")
    baseline = _excess_closers(before + completion + after)
    # The model wrote the rest of the line itself (and maybe more): cut where it starts.
    p = completion.find(after.rstrip())
    while p != -1:
        if _excess_closers(before + completion[:p] + after) < baseline or (
            not any(c in _PAIRS or c in _OPEN for c in after)
        ):
            return completion[:p]
        p = completion.find(after.rstrip(), p + 1)
    for k in range(min(len(after), len(completion)), 0, -1):
        tail = after[:k]
        if not tail.strip() or not completion.endswith(tail):
            continue
        trimmed = completion[:-k]
        has_brackets = any(c in _PAIRS or c in _OPEN for c in tail)
        if not has_brackets or _excess_closers(before + trimmed + after) < baseline:
            return trimmed
    return completion


def finalize(text: str, ctx: Context) -> str:
    """The suggestion to show: trimmed, without text duplicated from the suffix."""
    if ctx.mode == "single":
        if ctx.line_before.strip() and newline_answer(text):
            text = _next_line(text, ctx.eol) if ctx.line_done else ""
            return "" if _repeats_next_line(text.lstrip("\r\n"), ctx.suffix) else text  # the suffix has that line
        if not ctx.line_before.strip():
            text = text.lstrip("\r\n")
        text = text.split("\n", 1)[0].rstrip()
        if ctx.newline and _repeats_next_line(text, ctx.suffix):
            return ""  # the next line is already there
        return trim_line_overlap(ctx.line_before, text, ctx.line_after)
    lines = text.split("\n")
    while lines and not lines[-1].strip():
        lines.pop()
    out = "\n".join(line.rstrip() for line in lines)
    if ctx.insert_lines and out:
        out += "\n"
    return out
