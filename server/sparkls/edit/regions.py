"""The region an edit rewrites, found with tree-sitter: the enclosing function, class or statement.

Regions are whole lines (from the start of the first line to the end of the last, terminator
included), so a rewrite never splits a line and its indentation is known. Also here: what a
function looks like to the code-action list (a stub body, a docstring, missing annotations).
Without a tree (plain text, unknown language) a region is the touched lines. Pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tree_sitter import Node

from sparkls.text.document import Document
from sparkls.text.nodes import ancestors

FUNCTIONS: dict[str, frozenset[str]] = {
    "python": frozenset({"function_definition"}),
    "javascript": frozenset(
        {
            "function_declaration",
            "generator_function_declaration",
            "method_definition",
            "function_expression",
            "arrow_function",
        }
    ),
    "go": frozenset({"function_declaration", "method_declaration"}),
    "rust": frozenset({"function_item"}),
    "java": frozenset({"method_declaration", "constructor_declaration"}),
    "c": frozenset({"function_definition"}),
    "cpp": frozenset({"function_definition"}),
}
FUNCTIONS["typescript"] = FUNCTIONS["javascript"]
FUNCTIONS["javascriptreact"] = FUNCTIONS["javascript"]
FUNCTIONS["typescriptreact"] = FUNCTIONS["javascript"]

CLASSES: dict[str, frozenset[str]] = {
    "python": frozenset({"class_definition"}),
    "javascript": frozenset({"class_declaration"}),
    "typescript": frozenset({"class_declaration", "interface_declaration", "abstract_class_declaration"}),
    "go": frozenset({"type_declaration"}),
    "rust": frozenset({"impl_item", "struct_item", "enum_item", "trait_item"}),
    "java": frozenset({"class_declaration", "interface_declaration", "enum_declaration"}),
    "c": frozenset({"struct_specifier"}),
    "cpp": frozenset({"class_specifier", "struct_specifier"}),
}
CLASSES["javascriptreact"] = CLASSES["javascript"]
CLASSES["typescriptreact"] = CLASSES["typescript"]

# Node types whose children are statements: a statement is a child of one of these.
BLOCKS = frozenset(
    {
        "module",
        "block",
        "program",
        "statement_block",
        "source_file",
        "compound_statement",
        "translation_unit",
        "class_body",
        "declaration_list",
        "field_declaration_list",
    }
)
# Wrappers that belong to the definition they wrap (decorators, `export`).
WRAPPERS = frozenset({"decorated_definition", "export_statement"})

# A body that only says "not written yet".
_STUB = re.compile(
    r"^(pass|\.\.\.|raise NotImplementedError(\(.*\))?|todo!\(.*\)|unimplemented!\(.*\)|"
    r"throw new Error\(.*\);?|panic\(.*\)|return;?|(#|//)\s*todo.*|/\*\s*todo.*\*/)?$",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Region:
    start: int  # string offsets: whole lines of the document
    end: int
    kind: str  # function | class | statement | selection | lines
    name: str = ""

    def text(self, doc: Document) -> str:
        return doc.text[self.start : self.end]


def line_span(text: str, start: int, end: int) -> tuple[int, int]:
    """Widen [start, end) to whole lines, the last line's terminator included."""
    s = text.rfind("\n", 0, start) + 1
    if end > start and text[end - 1 : end] == "\n":
        return s, end
    nl = text.find("\n", end)
    return s, len(text) if nl == -1 else nl + 1


def _node_range(doc: Document, node: Node) -> tuple[int, int]:
    return doc.char_offset(node.start_byte), doc.char_offset(node.end_byte)


def _covering(doc: Document, start: int, end: int) -> Node | None:
    if doc.tree is None:
        return None
    if start == end:  # a cursor: the code on its line (after leading whitespace, before trailing)
        ls = doc.text.rfind("\n", 0, start) + 1
        le = doc.text.find("\n", start)
        line = doc.text[ls : len(doc.text) if le == -1 else le]
        if line.strip():
            lo = ls + len(line) - len(line.lstrip())
            hi = ls + len(line.rstrip()) - 1
            start = end = min(max(start, lo), hi)
    b0, b1 = doc.byte_offset(start), doc.byte_offset(end)
    return doc.tree.root_node.named_descendant_for_byte_range(b0, max(b0, b1))


def _name(doc: Document, node: Node) -> str:
    n = node.child_by_field_name("name")
    return doc.source[n.start_byte : n.end_byte].decode("utf-8", "replace") if n is not None else ""


def _wrapped(node: Node) -> Node:
    return node.parent if node.parent is not None and node.parent.type in WRAPPERS else node


def enclosing(doc: Document, start: int, end: int, kinds: tuple[str, ...] = ("function", "class")) -> Node | None:
    """The innermost function (or class, in the order of `kinds`) around [start, end)."""
    chain = ancestors(_covering(doc, start, end))
    for kind in kinds:
        types = (FUNCTIONS if kind == "function" else CLASSES).get(doc.language, frozenset())
        for n in chain:
            if n.type in types:
                return n
    return None


def statement_at(doc: Document, start: int, end: int) -> Node | None:
    for n in ancestors(_covering(doc, start, end)):
        if n.parent is not None and n.parent.type in BLOCKS and n.type not in ("comment", "ERROR"):
            return n
    return None


def region_for(
    doc: Document,
    start: int,
    end: int,
    prefer: tuple[str, ...] = ("function", "class", "statement"),
    max_lines: int = 200,
) -> Region:
    """The region to rewrite for [start, end): a non-empty selection is its own lines; otherwise the
    first of `prefer` that encloses it and is at most `max_lines` long; else the touched lines."""
    if end > start and doc.text[start:end].strip():
        s, e = line_span(doc.text, start, end)
        return Region(s, e, "selection")
    for kind in prefer:
        node = statement_at(doc, start, end) if kind == "statement" else enclosing(doc, start, end, (kind,))
        if node is None:
            continue
        node = _wrapped(node)
        s, e = line_span(doc.text, *_node_range(doc, node))
        if doc.text.count("\n", s, e) <= max_lines:
            inner = (
                node
                if node.type not in WRAPPERS
                else next((c for c in node.named_children if c.type not in ("decorator", "comment")), node)
            )
            return Region(s, e, kind, _name(doc, inner))
    s, e = line_span(doc.text, start, end)
    return Region(s, e, "lines")


def body_of(node: Node) -> Node | None:
    return node.child_by_field_name("body")


def _body_statements(func: Node) -> list[Node]:
    body = body_of(func)
    return [c for c in body.named_children if c.type != "comment"] if body is not None else []


def docstring_node(doc: Document, func: Node) -> Node | None:
    """Python: the string that opens the body; other languages: a comment right above the definition."""
    if doc.language == "python":
        first = next(iter(_body_statements(func)), None)
        if (
            first is not None
            and first.type == "expression_statement"
            and first.named_children
            and first.named_children[0].type == "string"
        ):
            return first
        return None
    outer = _wrapped(func)
    prev = outer.prev_named_sibling
    if prev is not None and "comment" in prev.type and prev.end_point[0] >= outer.start_point[0] - 1:
        return prev
    return None


def is_stub(doc: Document, func: Node) -> bool:
    """The body holds nothing but `pass`, `...`, a TODO, `raise NotImplementedError`, `todo!()`, ..."""
    body = body_of(func)
    if body is None:
        return False
    doc_node = docstring_node(doc, func)
    parts: list[str] = []
    for c in body.children:
        if c.type in ("{", "}", ":") or (doc_node is not None and c.id == doc_node.id):
            continue
        parts.append(doc.source[c.start_byte : c.end_byte].decode("utf-8", "replace").strip())
    text = " ".join(p for p in parts if p)
    if body.type in ("block",) and doc.language == "python":
        return all(_STUB.match(p) for p in parts) if parts else True
    return bool(_STUB.match(text.strip()))


def missing_annotations(doc: Document, func: Node) -> bool:
    """Python/TypeScript: a parameter without a type, or no return type (other languages are typed)."""
    if doc.language == "python":
        params = func.child_by_field_name("parameters")
        names = [
            c
            for c in (params.named_children if params else [])
            if c.type in ("identifier", "default_parameter", "list_splat_pattern", "dictionary_splat_pattern")
        ]
        untyped = [c for c in names if doc.source[c.start_byte : c.end_byte].decode() not in ("self", "cls")]
        return bool(untyped) or func.child_by_field_name("return_type") is None
    if doc.language in ("typescript", "typescriptreact"):
        params = func.child_by_field_name("parameters")
        for c in params.named_children if params else []:
            if c.type in ("required_parameter", "optional_parameter") and c.child_by_field_name("type") is None:
                return True
        return func.child_by_field_name("return_type") is None and func.type != "arrow_function"
    return False
