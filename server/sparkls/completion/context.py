"""Build the completion context at a cursor from a document snapshot (pure, synchronous).

What the prompt needs, cut to budgets, laid out for the KV cache. In the default `anchored` layout
the prompt is `[head][prefix up to the typing anchor]<suffix marker>[suffix]<middle marker>[typed text]`:
- `Frame`: the part that stays put while the user types: the typing anchor (a line start at or
  before the cursor), the prefix window before it (from a top-level definition start chosen on a
  coarse grid), the preamble (the file's imports and signatures in file order, as many as fit,
  above the window: the same at every place below them) and a long suffix from the cursor on. A
  keystroke keeps the frame as long as the text before the anchor and after the cursor is unchanged
  and the typed span fits its budget; then it only appends to `middle`, the text from the anchor to
  the cursor, which the model reads as the start of its own answer.
- `mode`: single line or multi-line, decided from the syntax at the cursor, plus what the stop
  policy needs to end the suggestion at the end of the scope.
The earlier layout stays selectable for the benchmarks: `prefix` (typed text at the end of the
prefix, a short suffix that every keystroke re-computes).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Literal

from tree_sitter import Node

from sparkls.completion.preamble import build_preamble
from sparkls.engine.base import CHARS_PER_TOKEN
from sparkls.text.document import Document
from sparkls.text.nodes import DEFINITIONS, INDENT_LANGUAGES, ancestors, indent_width
from sparkls.workspace import redact

_OPENERS = ("(", "[", "{", ":", "=>")
# At the end of a line these open a block that follows on new lines: `{`, `=>`, and a `:` after a compound
# statement's keyword (not a lambda's, an annotation's, a slice's or a dict value's).
_COMPOUND = re.compile(
    r"(?:async\s+)?(?:if|elif|else|for|while|def|class|try|except|finally|with|match|case|default)\b"
)
_WORD_END = re.compile(r"[A-Za-z0-9_$]$")
_CLOSERS = set(")]}\"'`;, \t")

Mode = Literal["single", "multi"]


@dataclass(frozen=True)
class Budget:
    prefix_tokens: int = 1024
    suffix_tokens: int = 256
    preamble_tokens: int = 384
    typed_tokens: int = 256  # anchored layout: the typed span after the middle marker moves the anchor past this
    first: bool = False  # a short first window at a new place: it starts at the widest enclosing definition that
    # begins within twice `prefix_tokens` (the model reads the signature and docstring it completes), else at
    # the first line within `prefix_tokens`; no grid (see `first_window_start`)

    def chars(self, tokens: int) -> int:
        return int(tokens * CHARS_PER_TOKEN)


@dataclass(frozen=True)
class Frame:
    """The stable part of an anchored prompt, kept across keystrokes (see the module docstring)."""

    uri: str
    budget: Budget
    start: int  # where the prefix window starts
    anchor: int  # the typing anchor: a line start; the text from here to the cursor follows the middle marker
    preamble: str
    prefix: str  # text[start:anchor]
    suffix: str  # text[cursor:...] when the frame was made
    after: int  # len(text) - cursor when the frame was made: the text after the cursor must stay as it was
    before: int = 0  # hash of text[:anchor]: the frame holds only while all of it is unchanged
    snippets: tuple[tuple[str, str], ...] = ()  # (path, text) of other files, set by the pipeline

    def holds(self, doc: Document, cursor: int, budget: Budget) -> bool:
        """Whether a request at `cursor` of `doc` can keep this frame (only the typed span changed)."""
        text = doc.text
        return (
            doc.uri == self.uri
            and budget == self.budget
            and self.anchor <= cursor
            and cursor - self.anchor <= budget.chars(budget.typed_tokens)
            and len(text) - cursor == self.after
            and text.startswith(self.suffix, cursor)
            and text.startswith(self.prefix, self.start)
            and hash(text[: self.anchor]) == self.before
        )


@dataclass(frozen=True)
class Context:
    """Everything after this stage needs; plain strings and offsets."""

    uri: str
    language: str
    version: int
    cursor: int  # string offset in the document
    start: int  # where the prefix window starts (`anchor` is only ever the typing anchor)
    preamble: str
    prefix: str
    suffix: str
    mode: Mode
    line_before: str  # text of the cursor line before the cursor
    line_after: str  # text of the cursor line after the cursor
    min_indent: int | None  # for indentation languages: a line indented less ends the scope
    braces: bool  # brace language: closing the enclosing block ends the scope
    insert_lines: bool  # cursor at column 0 of a non-empty line: the suggestion is whole lines
    heal: str = ""  # indentation before the cursor left out of the prompt; the model writes it again
    middle: str = ""  # anchored layout: the text from the typing anchor to the cursor (less `heal`)
    newline: bool = False  # the cursor ends a finished line: the prompt adds a newline, the answer is the next line(s)
    line_done: bool = False  # the line ends at the cursor, finished in a word or after a comma: the model decides
    # first between this line and the next
    eol: str = "\n"  # the document's line ending at the cursor ("\r\n" in CRLF files)
    frame: Frame | None = None  # anchored layout: the stable part this context was built on
    closers_needed: int = 0  # brace languages: `{` in the document not closed by a `}` (a `}` may be due)


def _node_at(doc: Document, offset: int) -> Node | None:
    if doc.tree is None:
        return None
    b = doc.byte_offset(offset)
    # Look just before the cursor: at the end of `foo.ba|` we are inside `ba`.
    return doc.tree.root_node.descendant_for_byte_range(max(0, b - 1), max(0, b - 1))


def opens_block(code: str) -> bool:
    """A line's code (stripped) ends by opening a block."""
    return code.endswith(("{", "=>")) or (code.endswith(":") and _COMPOUND.match(code) is not None)


def _in_comment_or_string(node: Node | None, doc: Document, offset: int) -> bool:
    b = doc.byte_offset(offset)
    for n in ancestors(node)[:3]:
        t = n.type
        if ("comment" in t or "string" in t or t == "char_literal") and n.start_byte < b < n.end_byte:
            return True
        # At the end of a line comment the cursor is still in it (typing goes on in the comment).
        if "comment" in t and b == n.end_byte and not doc.source[n.start_byte : n.end_byte].endswith(b"*/"):
            return True
    return False


def enclosing_definition(doc: Document, offset: int) -> Node | None:
    kinds = DEFINITIONS.get(doc.language, frozenset())
    for n in ancestors(_node_at(doc, offset)):
        if n.type in kinds:
            return n
    return None


def window_start(doc: Document, cursor: int, budget_chars: int, before: bool = False) -> int:
    """Start of the prefix window: stable while the user types forward.

    The earliest allowed start is rounded up to a grid of half the budget, so it only moves
    every budget/2 characters of typing; the start is then the first top-level node start (or
    line start, in plain text) at or after it (and before `cursor` when `before`: the anchored
    layout's window must end with text, not start at its own end).
    """
    if cursor <= budget_chars:
        return 0
    step = max(1, budget_chars // 2)
    threshold = -(-(cursor - budget_chars) // step) * step
    if doc.tree is not None:  # compare in bytes: one conversion each way, not one per node
        lo_b, hi_b = doc.byte_offset(threshold), doc.byte_offset(cursor)
        for child in doc.tree.root_node.children:
            if lo_b <= child.start_byte <= hi_b and not (before and child.start_byte == hi_b):
                return doc.char_offset(child.start_byte)
    # No node boundary fits: the start of the first line at or after the threshold.
    nl = doc.text.find("\n", threshold - 1, cursor)
    return nl + 1 if nl != -1 else cursor


def first_window_start(doc: Document, anchor: int, budget_chars: int) -> int:
    """Start of a short first window ending at `anchor`: the line start of the widest definition around
    `anchor` that begins within `2 * budget_chars` (a window cut inside a docstring reads, after the outline's
    `def f(...): ...`, as code outside any function), else the first line start within `budget_chars`."""
    if anchor <= budget_chars:
        return 0
    kinds = DEFINITIONS.get(doc.language, frozenset())
    best = -1
    for node in ancestors(_node_at(doc, anchor)):
        if node.type not in kinds:
            continue
        start = doc.char_offset(node.start_byte)
        if node.parent is not None and node.parent.type == "decorated_definition":
            start = doc.char_offset(node.parent.start_byte)
        start = doc.text.rfind("\n", 0, start) + 1
        if start < anchor - 2 * budget_chars:
            break
        if start < anchor:
            best = start
    if best >= 0:
        return best
    nl = doc.text.find("\n", anchor - budget_chars - 1, anchor)
    return nl + 1 if nl != -1 else anchor


def line_is_finished(doc: Document, cursor: int, line_before: str) -> bool:
    """The code on the cursor's line (which ends at the cursor) is a whole statement, or opens a block: what
    follows belongs on a new line. From the syntax tree: the smallest node holding the line's code has no
    error and ends on this line; without a tree, the line does not end in an operator or a comma."""
    code = line_before.strip()
    if not code:
        return False
    if opens_block(code):
        return True
    if code.endswith(
        ("\\", ",", "(", "[", "=", "+", "-", "*", "/", "%", "&", "|", "<", ">", ".", "!", "^", "~")
    ) and not code.endswith(("++", "--")):
        return False
    if doc.tree is None:
        return True
    start = cursor - len(line_before.lstrip())
    end = start + len(code)
    node = doc.tree.root_node.descendant_for_byte_range(doc.byte_offset(start), doc.byte_offset(end))
    if node is None or node.has_error or node.is_missing:
        return False
    row = doc.text.count("\n", 0, cursor)
    return node.end_point[0] == row and node.type != "ERROR"


def _decide_mode(in_text: bool, line_before: str, line_after: str) -> tuple[Mode, bool]:
    if in_text:  # in a comment or a string
        return "single", False
    if line_before == "" and line_after.strip():
        return "multi", True  # insert whole lines above the cursor line
    if line_after.strip() and not set(line_after.strip()) <= _CLOSERS:
        return "single", False  # mid-line: finish this line only
    stripped = line_before.rstrip()
    if not stripped or stripped.endswith(_OPENERS):
        return "multi", False
    return "single", False


def _python_min_indent(doc: Document, scope: Node | None, line_before: str, cursor: int) -> int | None:
    """Lines indented less than this end the suggestion (end of the block being written)."""
    if line_before.strip() == "" and line_before:
        return indent_width(line_before)  # an indented blank line: the block at this indentation
    if line_before.rstrip().endswith(":"):
        return indent_width(line_before) + 1  # after a block opener: the new block's body
    return _body_indent(doc, scope, cursor) if scope is not None else None


def _body_indent(doc: Document, scope: Node, cursor: int) -> int | None:
    """The indentation of the definition's body: of the first non-blank line after its header's `:`. Not the
    `body` node's: where a line is missing above an indented one (the cursor's gap) the parser recovers with
    an error node after the header and takes a later block for the body. Where the gap is the body's first
    line, the line below it may belong to a block the missing line opens (`if k < 2:` above `return False`):
    any indentation deeper than the header's will do."""
    colon = next((c for c in scope.children if c.type == ":"), None)
    if colon is None:
        return None
    text = doc.text
    pos = doc.char_offset(colon.end_byte)
    nl = text.find("\n", pos)
    rest = text[pos : nl if nl != -1 else len(text)].strip()
    if rest and not rest.startswith("#"):
        return None  # `def f(): return 1`: the body is on the header's line
    while nl != -1:
        start = nl + 1
        if start >= cursor:
            return scope.start_point[1] + 1  # the header's column: its indentation (spaces and tabs are one byte)
        nl = text.find("\n", start)
        line = text[start : nl if nl != -1 else len(text)]
        if line.strip():
            return indent_width(line)
    return None


def typing_anchor(text: str, cursor: int, budget_chars: int) -> int:
    """A fresh typing anchor: the start of the line above the cursor's, so the model reads that line as
    the start of its own answer (it continues it better than a bare indentation), or the cursor's line
    start when that does not fit the typed-span budget or the line above is blank (an answer that starts
    with an empty line reads as finished: the model stops at once). Always a line start: no word or
    indentation is split between the prefix and the typed text."""
    line_start = text.rfind("\n", 0, cursor) + 1
    if line_start == 0:
        return 0
    above = text.rfind("\n", 0, line_start - 1) + 1
    blank = not text[above:line_start].strip()
    return above if cursor - above <= budget_chars and not blank else line_start


def _suffix_end(text: str, cursor: int, chars: int) -> int:
    end = min(len(text), cursor + chars)
    nl = text.rfind("\n", cursor, end)
    if nl > cursor and end < len(text):
        end = nl + 1  # whole lines only, so the suffix is stable within a line
    return end


def _scope_text(doc: Document, scope: Node | None, lo: int, hi: int) -> str:
    """Calls made in the scope, except in text[lo:hi] (what is being typed): the preamble must not change
    with each keystroke (it sits at the start of the prompt, where a change costs everything)."""
    if scope is None:
        return ""
    start, end = doc.char_offset(scope.start_byte), doc.char_offset(scope.end_byte)
    return doc.text[start:lo] + doc.text[hi:end]


def make_frame(doc: Document, cursor: int, budget: Budget) -> Frame:
    """A new stable part for a request at `cursor` (when the previous one no longer holds)."""
    text = doc.text
    anchor = typing_anchor(text, cursor, budget.chars(budget.typed_tokens))
    if budget.first:
        start = first_window_start(doc, anchor, budget.chars(budget.prefix_tokens))
    else:
        start = window_start(doc, anchor, budget.chars(budget.prefix_tokens), before=True)
    suffix = text[cursor : _suffix_end(text, cursor, budget.chars(budget.suffix_tokens))]
    # The file's outline in file order, not ranked by the place: the same for every place whose window starts
    # below it, so a move to another function keeps the head of the prompt (and its KV). Definitions before the
    # window only: the tree after the cursor changes shape while the user types (an open bracket swallows the
    # next definition into an error node).
    preamble = build_preamble(doc, start, "", budget.chars(budget.preamble_tokens))
    return Frame(
        doc.uri, budget, start, anchor, preamble, text[start:anchor], suffix, len(text) - cursor, hash(text[:anchor])
    )


def closers_needed(doc: Document) -> int:
    """`{` in the document that no `}` closes (a heuristic: strings and comments are counted too)."""
    if doc.language in INDENT_LANGUAGES or doc.language not in DEFINITIONS:
        return 0
    return max(0, doc.text.count("{") - doc.text.count("}"))


def next_line(ctx: Context) -> Context:
    """The context at the start of a new line after a finished one, as if the user had pressed Enter:
    the prompt gets the newline, the answer is the next line (a block after a block opener). A FIM
    model reading a finished line as its answer so far tends to stop there, or to run on with it."""
    opener = opens_block(ctx.line_before.strip())
    return replace(
        ctx,
        mode="multi" if opener else "single",
        line_before="",
        insert_lines=False,
        heal="",
        middle=ctx.middle + ctx.eol,
        newline=True,
        line_done=False,
    )


def redacted(ctx: Context) -> Context:
    """`ctx` as the prompt shows it: credential-looking values in the outline, prefix, suffix and typed text replaced
    by `<redacted>` (other files' snippets are redacted when gathered). The frame keeps the document's own text (it
    is compared with the next keystroke's). The typed text stays append-only: the lines above the cursor's in it do
    not change while the user types, and a cursor line that holds a secret gets no prompt at all (the pipeline)."""
    return replace(
        ctx,
        preamble=_shown(ctx.preamble),
        prefix=_shown(ctx.prefix),
        suffix=_shown(ctx.suffix),
        middle=_shown(ctx.middle),
    )


@lru_cache(maxsize=64)  # the frame's parts stay the same while the user types: each is redacted once
def _shown(text: str) -> str:
    return redact.redact(text)


def build(
    doc: Document, cursor: int, budget: Budget | None = None, layout: str = "anchored", frame: Frame | None = None
) -> Context:
    """The context for a suggestion at string offset `cursor` of `doc`.

    `anchored` (default) keeps `frame` when it still holds, else makes a new one. `prefix` is the
    earlier layout (the typed text ends the prefix; a short suffix)."""
    budget = budget or Budget()
    text = doc.text
    cursor = max(0, min(cursor, len(text)))
    line_start = text.rfind("\n", 0, cursor) + 1
    line_end = text.find("\n", cursor)
    line_end = len(text) if line_end == -1 else line_end
    line_before = text[line_start:cursor]
    line_after = text[cursor:line_end].rstrip("\r")
    in_text = _in_comment_or_string(_node_at(doc, cursor), doc, cursor)
    mode, insert_lines = _decide_mode(in_text, line_before, line_after)
    scope = enclosing_definition(doc, cursor)
    min_indent = _python_min_indent(doc, scope, line_before, cursor) if doc.language in INDENT_LANGUAGES else None
    # Token healing: a prompt ending in indentation splits the model's usual "indent + code" tokens
    # (it then indents twice). End the prompt at the line start; the model's indentation is removed.
    heal = line_before if line_before and not line_before.strip() else ""
    crlf = "\r\n" in text[max(0, line_start - 2) : line_end + 1]
    base = Context(
        uri=doc.uri,
        eol="\r\n" if crlf else "\n",
        language=doc.language,
        version=doc.version,
        cursor=cursor,
        mode=mode,
        line_before=line_before,
        line_after=line_after,
        min_indent=min_indent,
        braces=doc.language not in INDENT_LANGUAGES and doc.language in DEFINITIONS,
        insert_lines=insert_lines,
        closers_needed=closers_needed(doc),
        start=0,
        preamble="",
        prefix="",
        suffix="",
    )  # the layout fills in the rest
    if layout == "anchored":
        return _anchored(doc, base, budget, frame, heal, in_text)
    return _prefix_layout(doc, base, budget, heal, _scope_text(doc, scope, line_start, line_end))


def _anchored(doc: Document, base: Context, budget: Budget, frame: Frame | None, heal: str, in_text: bool) -> Context:
    """`build`'s anchored layout: the frame (kept when it holds) and the typed text after it."""
    cursor, line_before = base.cursor, base.line_before
    if frame is None or not frame.holds(doc, cursor, budget):
        frame = make_frame(doc, cursor, budget)
    middle = doc.text[frame.anchor : cursor - len(heal)]
    at_end = not in_text and not base.line_after.strip()
    done = at_end and line_is_finished(doc, cursor, line_before)
    # After a comma (an argument list, a dict, an enum) the next item may follow on this line or the next.
    listing = at_end and line_before.rstrip().endswith(",")
    ctx = replace(
        base,
        start=frame.start,
        preamble=frame.preamble,
        prefix=frame.prefix,
        suffix=frame.suffix,
        heal=heal,
        middle=middle,
        frame=frame,
        line_done=done or listing,
    )
    # A finished line that ends in a closing character: the next line(s). One that ends in a word may
    # still grow (`x = tot` is a finished statement too): the model's first tokens decide (pipeline).
    return next_line(ctx) if done and not _WORD_END.search(line_before.rstrip()) else ctx


def _prefix_layout(doc: Document, base: Context, budget: Budget, heal: str, scope_text: str) -> Context:
    """`build`'s earlier layout: a prefix window to the cursor (the typed text ends it) and a suffix."""
    text, cursor = doc.text, base.cursor
    line_start = text.rfind("\n", 0, cursor) + 1
    start = window_start(doc, cursor, budget.chars(budget.prefix_tokens))
    preamble = build_preamble(doc, start, scope_text, budget.chars(budget.preamble_tokens))
    heal = heal if start < line_start else ""
    return replace(
        base,
        start=start,
        preamble=preamble,
        prefix=text[start : cursor - len(heal)],
        heal=heal,
        suffix=text[cursor : _suffix_end(text, cursor, budget.chars(budget.suffix_tokens))],
    )
