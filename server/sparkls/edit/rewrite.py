"""Rewrite prompts and the model's answer, as lines (pure).

An edit prompt asks the model to rewrite one region and answer with that region only, in one fenced
code block. The layout keeps the KV cache useful: the fixed instructions, then the file's context
(stable while the user works in one place), then the region, then the instruction last (a redirect
changes only the end). For chat models (Qwen2.5-Coder-Instruct: ChatML) the assistant turn is
pre-filled with the opening fence, so the first generated token is already code. The model never sees a
credential-looking value: in the region each becomes a numbered placeholder (`<redacted-1>`) that the answer's
lines get back as the original value (`LineGeneration`), so a rewrite keeps every secret as it was; elsewhere
(imports, the code around, the instruction) it becomes `<redacted>`.

`LineReader` turns streamed text into completed lines and stops at the closing fence; `compose`
lays the lines generated so far over the original region, which is what the buffer shows while a
rewrite streams; `reindent` repairs a model that dropped the region's indentation.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from sparkls.text.document import Document
from sparkls.text.nodes import indentation
from sparkls.workspace import redact

SYSTEM = (
    "You are a precise code editor. You rewrite exactly the code you are given, change only what the "
    "instruction asks, and keep the rest of it character for character. Reply with the rewritten code in "
    "one fenced code block and nothing else."
)
FENCE = "```"
STOPS = ("<|im_end|>", "<|endoftext|>", "<|im_start|>", "\n" + FENCE)

FENCE_LANG = {"typescriptreact": "tsx", "javascriptreact": "jsx", "plaintext": ""}


@dataclass(frozen=True)
class RewritePrompt:
    text: str
    region: str  # the text the model rewrites (as the document has it)
    indent: str  # the region's indentation
    secrets: redact.Secrets = ()  # the placeholders in the prompt's region and the values they stand for


def fence_lang(language: str) -> str:
    return FENCE_LANG.get(language, language)


_IMPORT = re.compile(r"^(import |from \S+ import |use |#include |using |package )")


def imports_of(doc: Document, limit: int = 30) -> str:
    """The file's top-level import lines (the names a rewrite may use)."""
    found = [ln for ln in doc.text.splitlines() if _IMPORT.match(ln)]
    return "\n".join(found[:limit])


def _context(doc: Document, start: int, end: int, before_lines: int, after_lines: int) -> tuple[str, str]:
    head = doc.text[:start].splitlines(keepends=True)[-before_lines:] if before_lines else []
    tail = doc.text[end:].splitlines(keepends=True)[:after_lines] if after_lines else []
    return "".join(head), "".join(tail)


def chatml(system: str, user: str, assistant_prefix: str) -> str:
    return (
        f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n"
        f"<|im_start|>assistant\n{assistant_prefix}"
    )


def render(
    doc: Document, start: int, end: int, instruction: str, path: str = "", before_lines: int = 0, after_lines: int = 0
) -> RewritePrompt:
    """The prompt that asks for doc.text[start:end] rewritten according to `instruction` (secrets masked)."""
    region = doc.text[start:end]
    masked, secrets = redact.mask(doc.text, start, end)
    lang = fence_lang(doc.language)
    before, after = _context(doc, start, end, before_lines, after_lines)
    parts = [f"File: {path or doc.uri}"]
    imports = imports_of(doc)
    if imports and imports not in region:
        parts.append(f"The file's imports:\n{FENCE}{lang}\n{redact.redact(imports)}\n{FENCE}")
    if before.strip() or after.strip():
        parts.append(
            f"Code around it (for reference only, do not repeat it):\n{FENCE}{lang}\n"
            f"{redact.redact(before)}<<< the code to rewrite is here >>>\n{redact.redact(after)}{FENCE}"
        )
    parts.append(f"The code to rewrite:\n{FENCE}{lang}\n{masked.rstrip(chr(10))}\n{FENCE}")
    parts.append(f"Instruction: {redact.redact(instruction.strip())}")
    return RewritePrompt(chatml(SYSTEM, "\n\n".join(parts), f"{FENCE}{lang}\n"), region, indentation(region), secrets)


class LineReader:
    """Feed streamed text; get back each completed line (with its "\\n") once, until the closing fence."""

    def __init__(self) -> None:
        self._pending = ""
        self.lines: list[str] = []
        self.done = False

    def feed(self, text: str) -> list[str]:
        if self.done:
            return []
        self._pending += text
        out: list[str] = []
        while "\n" in self._pending and not self.done:
            line, self._pending = self._pending.split("\n", 1)
            if line.strip().startswith(FENCE):
                self.done = True
                break
            out.append(line + "\n")
        self.lines.extend(out)
        return out

    def finish(self) -> list[str]:
        """The generation ended: a last line without a newline counts (unless it is the fence)."""
        rest = self._pending
        self._pending = ""
        # A last line of only backticks is the closing fence cut short by the engine's stop string.
        if self.done or not rest.strip() or rest.strip().startswith(FENCE) or set(rest.strip()) == {"`"}:
            self.done = True
            return []
        self.done = True
        self.lines.append(rest)
        return [rest]


def reindent(lines: list[str], indent: str) -> list[str]:
    """When the model wrote the region's first line with less indentation than the region has, shift
    every line right by the difference (models often answer a method as if it were top level)."""
    first = next((ln for ln in lines if ln.strip()), None)
    if first is None or not indent:
        return lines
    have = first[: len(first) - len(first.lstrip(" \t"))]
    if len(have) >= len(indent) or not indent.startswith(have):
        return lines
    pad = indent[len(have) :]
    return [pad + ln if ln.strip() else ln for ln in lines]


def trim_echo(lines: list[str], region: str, before: str, after: str) -> list[str]:
    """Drop what the model echoed from outside the region: leading lines that are the file's text above
    the region (an import block, a package line) and trailing lines that are its text below, outside
    what the region itself holds. Small models often answer with more of the file than they were given."""
    inside = {ln.strip() for ln in region.splitlines() if ln.strip()}
    above = {ln.strip() for ln in before.splitlines() if ln.strip()} - inside
    below = {ln.strip() for ln in after.splitlines() if ln.strip()} - inside
    start, end = 0, len(lines)
    while start < end and (
        lines[start].strip() in above
        or (not lines[start].strip() and start + 1 < end and lines[start + 1].strip() in above)
    ):
        start += 1
    while end > start and (
        lines[end - 1].strip() in below
        or (not lines[end - 1].strip() and end - 1 > start and lines[end - 2].strip() in below)
    ):
        end -= 1
    region_lines = region.splitlines()
    if region_lines and region_lines[0].strip():  # blank lines the region does not start or end with
        while start < end and not lines[start].strip():
            start += 1
    if region_lines and region_lines[-1].strip():
        while end > start and not lines[end - 1].strip():
            end -= 1
    return lines[start:end]


def changed_lines(old: str, new: str) -> int:
    """Lines removed plus lines added between two texts."""
    a, b = old.splitlines(), new.splitlines()
    return sum(
        (i2 - i1) + (j2 - j1)
        for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
        if tag != "equal"
    )


def finish_like(text: str, region: str) -> str:
    """The rewrite ends with a newline exactly when the region did."""
    if region.endswith("\n") and not text.endswith("\n"):
        return text + "\n"
    if not region.endswith("\n") and text.endswith("\n"):
        return text[:-1]
    return text


def compose(original: str, generated: list[str], final: bool = False) -> str:
    """What the region shows once `generated` lines are written: those lines, then the original lines
    after the last one they correspond to (so the buffer is always whole code, never a half-deleted
    region); when `final`, the generated lines alone."""
    new = "".join(generated)
    if final:
        return finish_like(new, original)
    old_lines = original.splitlines(keepends=True)
    if not generated:
        return original
    m = difflib.SequenceMatcher(None, old_lines, generated, autojunk=False)
    consumed = 0
    for i, _j, size in m.get_matching_blocks():
        if size:
            consumed = i + size
    # Lines that were replaced rather than kept: skip as many original lines as there are new lines
    # past the last match, so a rewritten line takes the place of the line it rewrites.
    last = max((j + size for _i, j, size in m.get_matching_blocks() if size), default=0)
    consumed = min(len(old_lines), consumed + (len(generated) - last))
    return new + "".join(old_lines[consumed:])
