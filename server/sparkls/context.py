"""Build the completion context at a cursor from a document snapshot (pure, synchronous).

What the prompt needs, cut to budgets, laid out for the KV cache:
- `preamble`: imports and signatures of definitions before the prefix window, the ones the
  enclosing scope calls first; it depends on the file above the window, not on the cursor.
- `prefix`: from a stable anchor (file start, or a top-level definition start chosen on a coarse
  grid) up to the cursor, so that typing only ever appends to it.
- `suffix`: a short window after the cursor, because every keystroke re-computes its tokens.
- `mode`: single line or multi-line, decided from the syntax at the cursor, plus what the stop
  policy needs to end the suggestion at the end of the scope.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from tree_sitter import Node

from sparkls.document import Document

CHARS_PER_TOKEN = 3.0

DEFINITIONS: dict[str, frozenset[str]] = {
    "python": frozenset({"function_definition", "class_definition"}),
    "javascript": frozenset({"function_declaration", "generator_function_declaration", "class_declaration",
                             "method_definition"}),
    "typescript": frozenset({"function_declaration", "generator_function_declaration", "class_declaration",
                             "method_definition", "interface_declaration", "abstract_class_declaration"}),
    "go": frozenset({"function_declaration", "method_declaration"}),
    "rust": frozenset({"function_item", "impl_item", "trait_item", "mod_item"}),
    "java": frozenset({"class_declaration", "interface_declaration", "method_declaration",
                       "constructor_declaration", "enum_declaration"}),
    "c": frozenset({"function_definition"}),
    "cpp": frozenset({"function_definition", "class_specifier", "namespace_definition"}),
}
DEFINITIONS["javascriptreact"] = DEFINITIONS["javascript"]
DEFINITIONS["typescriptreact"] = DEFINITIONS["typescript"]

IMPORTS = frozenset({
    "import_statement", "import_from_statement", "future_import_statement",  # python, js/ts
    "import_declaration", "package_clause", "package_declaration",  # go, java
    "use_declaration", "extern_crate_declaration",  # rust
    "preproc_include", "using_declaration",  # c, c++
})

INDENT_LANGUAGES = frozenset({"python"})
_OPENERS = ("(", "[", "{", ":")
_CLOSERS = set(")]}\"'`;, \t")

Mode = Literal["single", "multi"]


@dataclass(frozen=True)
class Budget:
    prefix_tokens: int = 1024
    suffix_tokens: int = 24
    preamble_tokens: int = 384

    def chars(self, tokens: int) -> int:
        return int(tokens * CHARS_PER_TOKEN)


@dataclass(frozen=True)
class Context:
    """Everything after this stage needs; plain strings and offsets."""

    uri: str
    language: str
    version: int
    cursor: int  # string offset in the document
    anchor: int  # where the prefix starts
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

    @property
    def indent(self) -> str:
        line = self.line_before
        return line[: len(line) - len(line.lstrip())]


def _indent_width(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def _node_at(doc: Document, offset: int) -> Node | None:
    if doc.tree is None:
        return None
    b = doc.byte_offset(offset)
    # Look just before the cursor: at the end of `foo.ba|` we are inside `ba`.
    return doc.tree.root_node.descendant_for_byte_range(max(0, b - 1), max(0, b - 1))


def _ancestors(node: Node | None) -> list[Node]:
    out: list[Node] = []
    while node is not None:
        out.append(node)
        node = node.parent
    return out


def _in_comment_or_string(node: Node | None, doc: Document, offset: int) -> bool:
    b = doc.byte_offset(offset)
    for n in _ancestors(node)[:3]:
        t = n.type
        if ("comment" in t or "string" in t or t == "char_literal") and n.start_byte < b < n.end_byte:
            return True
    return False


def enclosing_definition(doc: Document, offset: int) -> Node | None:
    kinds = DEFINITIONS.get(doc.language, frozenset())
    for n in _ancestors(_node_at(doc, offset)):
        if n.type in kinds:
            return n
    return None


def choose_anchor(doc: Document, cursor: int, budget_chars: int) -> int:
    """Start of the prefix window: stable while the user types forward.

    The earliest allowed start is rounded up to a grid of half the budget, so it only moves
    every budget/2 characters of typing; the anchor is then the first top-level node start (or
    line start, in plain text) at or after it.
    """
    if cursor <= budget_chars:
        return 0
    step = max(1, budget_chars // 2)
    threshold = -(-(cursor - budget_chars) // step) * step
    if doc.tree is not None:  # compare in bytes: one conversion each way, not one per node
        lo_b, hi_b = doc.byte_offset(threshold), doc.byte_offset(cursor)
        for child in doc.tree.root_node.children:
            if lo_b <= child.start_byte <= hi_b:
                return doc.char_offset(child.start_byte)
    # No node boundary fits: the start of the first line at or after the threshold.
    nl = doc.text.find("\n", threshold - 1, cursor)
    return nl + 1 if nl != -1 else cursor


def signature(doc: Document, node: Node) -> str:
    """The header of a definition: its text up to the body, with the body elided."""
    body = node.child_by_field_name("body")
    if body is None:
        return doc.source[node.start_byte : node.end_byte].decode("utf-8", "replace").split("\n", 1)[0]
    head = doc.source[node.start_byte : body.start_byte].decode("utf-8", "replace").rstrip()
    if doc.language in INDENT_LANGUAGES:
        return head + " ..."
    return head + " { ... }"


def _outline(doc: Document, node: Node, limit: int, depth: int = 0) -> list[tuple[int, str, str]]:
    """(start byte, name, signature) of definitions in `node` starting before byte `limit`,
    one level into classes."""
    kinds = DEFINITIONS.get(doc.language, frozenset())
    out: list[tuple[int, str, str]] = []
    for child in node.children:
        if child.start_byte >= limit:
            break
        target = child
        if child.type in ("decorated_definition", "export_statement"):
            target = next((c for c in child.children if c.type in kinds), child)
        if target.type in kinds:
            name_node = target.child_by_field_name("name")
            name = doc.source[name_node.start_byte : name_node.end_byte].decode() if name_node else ""
            sig = signature(doc, target)
            pad = "    " * depth
            out.append((target.start_byte, name, pad + sig.replace("\n", "\n" + pad)))
            body = target.child_by_field_name("body")
            if depth == 0 and body is not None and target.type not in ("function_definition", "function_item",
                                                                     "function_declaration", "method_declaration"):
                out.extend(_outline(doc, body, limit, depth + 1))
        elif depth == 0 and child.type in ("declaration_list", "class_body"):
            out.extend(_outline(doc, child, limit, depth))
    return out


_CALL = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(")


def build_preamble(doc: Document, anchor: int, scope_text: str, budget_chars: int) -> str:
    """Imports and signatures of definitions before `anchor`, called ones first, in file order."""
    if doc.tree is None or budget_chars <= 0 or anchor <= 0:
        return ""
    lo = doc.byte_offset(anchor)  # positions below are bytes
    parts: list[tuple[int, str]] = []
    used = 0
    for child in doc.tree.root_node.children:
        if child.start_byte >= lo:
            break
        if child.type in IMPORTS:
            text = doc.source[child.start_byte : child.end_byte].decode("utf-8", "replace")
            if used + len(text) + 1 > budget_chars // 2:
                break
            parts.append((child.start_byte, text))
            used += len(text) + 1
    called = set(_CALL.findall(scope_text))
    outline = _outline(doc, doc.tree.root_node, lo)
    ranked = sorted(outline, key=lambda d: (d[1] not in called, d[0]))
    chosen: list[tuple[int, str]] = []
    for start, _name, sig in ranked:
        if used + len(sig) + 1 > budget_chars:
            continue
        chosen.append((start, sig))
        used += len(sig) + 1
    parts.extend(chosen)
    parts.sort()
    return "\n".join(text for _, text in parts)


def _decide_mode(doc: Document, cursor: int, line_before: str, line_after: str) -> tuple[Mode, bool]:
    if _in_comment_or_string(_node_at(doc, cursor), doc, cursor):
        return "single", False
    if line_before == "" and line_after.strip():
        return "multi", True  # insert whole lines above the cursor line
    if line_after.strip() and not set(line_after.strip()) <= _CLOSERS:
        return "single", False  # mid-line: finish this line only
    stripped = line_before.rstrip()
    if not stripped or stripped.endswith(_OPENERS):
        return "multi", False
    return "single", False


def _python_min_indent(doc: Document, scope: Node | None, line_before: str) -> int | None:
    """Lines indented less than this end the suggestion (end of the block being written)."""
    if line_before.strip() == "" and line_before:
        return _indent_width(line_before)  # an indented blank line: the block at this indentation
    if line_before.rstrip().endswith(":"):
        return _indent_width(line_before) + 1  # after a block opener: the new block's body
    if scope is not None:
        body = scope.child_by_field_name("body")
        if body is not None and body.start_point[0] > scope.start_point[0]:
            start = doc.char_offset(body.start_byte)
            return start - (doc.text.rfind("\n", 0, start) + 1)
    return None


def build(doc: Document, cursor: int, budget: Budget | None = None, layout: str = "stable") -> Context:
    """The context for a suggestion at string offset `cursor` of `doc`.

    `layout="centered"` is the naive baseline: a window of the same total size centred on the
    cursor, sliding with every keystroke, without preamble (what llm-ls-style servers do)."""
    budget = budget or Budget()
    text = doc.text
    cursor = max(0, min(cursor, len(text)))
    line_start = text.rfind("\n", 0, cursor) + 1
    line_end = text.find("\n", cursor)
    line_end = len(text) if line_end == -1 else line_end
    line_before = text[line_start:cursor]
    line_after = text[cursor:line_end].rstrip("\r")
    mode, insert_lines = _decide_mode(doc, cursor, line_before, line_after)

    if layout == "centered":
        half = budget.chars(budget.prefix_tokens + budget.suffix_tokens) // 2
        anchor = max(0, cursor - half)
        suffix_end = min(len(text), cursor + half)
    else:
        anchor = choose_anchor(doc, cursor, budget.chars(budget.prefix_tokens))
        suffix_end = min(len(text), cursor + budget.chars(budget.suffix_tokens))
        nl = text.rfind("\n", cursor, suffix_end)
        if nl > cursor and suffix_end < len(text):
            suffix_end = nl + 1  # whole lines only, so the suffix is stable within a line
    suffix = text[cursor:suffix_end]

    scope = enclosing_definition(doc, cursor)
    scope_text = ""
    min_indent: int | None = None
    if scope is not None:
        # Calls made in the scope, except on the line being typed: the preamble must not change
        # with each keystroke (it sits at the start of the prompt, where a change costs everything).
        lo, hi = doc.char_offset(scope.start_byte), doc.char_offset(scope.end_byte)
        scope_text = text[lo:line_start] + text[line_end:hi]
    if doc.language in INDENT_LANGUAGES:
        min_indent = _python_min_indent(doc, scope, line_before)
    # Only definitions before the anchor: the tree after the cursor changes shape while the user types
    # (an open bracket swallows the next definition into an error node), and a signature flipping in or
    # out of the preamble would invalidate the whole KV cache behind it.
    preamble = "" if layout == "centered" else build_preamble(
        doc, anchor, scope_text, budget.chars(budget.preamble_tokens))
    # Token healing: a prompt ending in indentation splits the model's usual "indent + code" tokens
    # (it then indents twice). End the prompt at the line start; the model's indentation is removed.
    heal = line_before if line_before and not line_before.strip() and anchor < line_start \
        and layout == "stable" else ""
    return Context(
        uri=doc.uri, language=doc.language, version=doc.version, cursor=cursor, anchor=anchor,
        preamble=preamble, prefix=text[anchor : cursor - len(heal)], suffix=suffix, mode=mode, heal=heal,
        line_before=line_before, line_after=line_after, min_indent=min_indent,
        braces=doc.language not in INDENT_LANGUAGES and doc.language in DEFINITIONS,
        insert_lines=insert_lines,
    )
