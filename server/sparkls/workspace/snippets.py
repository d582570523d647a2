"""Other files of the workspace as completion context: definitions and windows chosen within a budget.

`gather` picks what goes into the prompt's stable head: the header of every name the document imports from the
workspace (`workspace.imports`), the definitions of the names used near the cursor, then the windows of imported
and open files most similar to that code, one `Snippet` per file, within a character budget. Files come from
`workspace.files` (inside the roots, never excluded, binary or oversize), each read with its credential-looking
values replaced by `<redacted>` (`workspace.redact`) before it is cut into parts. Same inputs, same output (order
and text): it sits before the FIM part, where any change invalidates the KV cache behind it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from weakref import WeakKeyDictionary

from tree_sitter import Node

from sparkls.text.document import Document
from sparkls.text.nodes import INDENT_LANGUAGES, signature
from sparkls.workspace.files import WorkspaceIndex, refused, uri_path
from sparkls.workspace.imports import imports, resolve_all
from sparkls.workspace.redact import redact

SHORT_LINES = 12  # a definition this short goes in whole
WINDOW, STEP = 12, 6  # similarity windows: lines, and lines between their starts
MAX_FILES = 48  # candidate files per gather
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CLASSLIKE = frozenset(
    {
        "class_definition",
        "class_declaration",
        "abstract_class_declaration",
        "interface_declaration",
        "enum_declaration",
        "record_declaration",
        "struct_item",
        "enum_item",
        "trait_item",
        "impl_item",
        "union_item",
        "type_declaration",
    }
)


@dataclass(frozen=True)
class Snippet:
    """What one other file contributes to the prompt: its workspace-relative path and the chosen parts."""

    path: str
    text: str


# ---- outlines -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Definition:
    name: str
    first: int  # line range in the file, inclusive
    last: int
    text: str  # whole, or its signature / outline when long
    brief: str  # what to try when `text` does not fit (a class without its methods)
    stub: str  # its header alone: what every imported name gets first


@dataclass(frozen=True)
class _Outline:
    lines: tuple[str, ...]
    definitions: tuple[_Definition, ...]
    windows: tuple[tuple[int, frozenset[str]], ...]  # (first line, identifiers)


def _text(doc: Document, a: int, b: int) -> str:
    return doc.source[a:b].decode("utf-8", "replace")


def _names(doc: Document, node: Node) -> list[str]:
    t = node.type
    if t == "impl_item":
        ty = node.child_by_field_name("type")
        return [_text(doc, ty.start_byte, ty.end_byte).split("<")[0].split("::")[-1]] if ty else []
    if t == "expression_statement" and node.named_children and node.named_children[0].type == "assignment":
        left = node.named_children[0].child_by_field_name("left")
        return [_text(doc, left.start_byte, left.end_byte)] if left and left.type == "identifier" else []
    if t in ("lexical_declaration", "variable_declaration", "type_declaration", "const_declaration", "var_declaration"):
        specs = [
            c
            for c in node.named_children
            if c.type in ("variable_declarator", "type_spec", "type_alias", "const_spec", "var_spec")
        ]
        return [n for s in specs for n in _names(doc, s)]
    name = node.child_by_field_name("name")
    if name is None or t.endswith(("statement", "comment")):
        return []
    return [_text(doc, name.start_byte, name.end_byte)]


def _body(node: Node) -> Node | None:
    if node.type == "type_declaration":  # Go: type T struct { fields } / interface { methods }
        spec = next((c for c in node.named_children if c.type == "type_spec"), None)
        ty = spec.child_by_field_name("type") if spec else None
        if ty is not None and ty.type == "struct_type":
            return next((c for c in ty.named_children if c.type == "field_declaration_list"), None)
        return ty if ty is not None and ty.type == "interface_type" else None
    if node.type in ("lexical_declaration", "variable_declaration"):  # const f = (...) => { ... }
        decl = next((c for c in node.named_children if c.type == "variable_declarator"), None)
        value = decl.child_by_field_name("value") if decl else None
        return value.child_by_field_name("body") if value is not None else None
    return node.child_by_field_name("body")


def _class_outline(doc: Document, outer: Node, body: Node, methods: bool) -> str:
    """Header, one-line members (fields) and, with `methods`, the signatures of the public members."""
    src, brace = doc.source, doc.language not in INDENT_LANGUAGES
    head = _text(doc, outer.start_byte, body.start_byte).rstrip()
    out, last_line = [head + (" interface {" if body.type == "interface_type" else " {" if brace else "")], -1
    for m in body.named_children:
        inner = m.child_by_field_name("definition") if m.type == "decorated_definition" else m
        if "comment" in m.type or inner is None or m.start_point[0] == last_line:
            continue
        line_start = src.rfind(b"\n", 0, m.start_byte) + 1
        if inner.child_by_field_name("body") is not None:
            name = inner.child_by_field_name("name")
            private = name is not None and re.match(rb"_(?!_)", src[name.start_byte : name.end_byte]) is not None
            if methods and not private:
                out.append(_text(doc, line_start, inner.start_byte) + signature(doc, inner))
        elif m.start_point[0] == m.end_point[0] and m.start_point[0] != outer.start_point[0]:
            line_end = src.find(b"\n", m.end_byte)
            line = _text(doc, line_start, len(src) if line_end == -1 else line_end).rstrip()
            out.extend([] if re.match(r"\s*_(?!_)\w*\s*[:=]", line) else [line])  # not private fields
        last_line = m.end_point[0]
    if len(out) == 1:
        out.append("    ...")
    return "\n".join([*out, "}"] if brace else out)


def _stub(doc: Document, outer: Node, body: Node | None) -> str:
    """The definition's header with the body elided (`class Text(JupyterMixin): ...`), or its first line."""
    if body is None:
        return _text(doc, outer.start_byte, outer.end_byte).split("\n", 1)[0]
    head = _text(doc, outer.start_byte, body.start_byte).rstrip()
    return head + (" ..." if doc.language in INDENT_LANGUAGES else " { ... }")


def _render(doc: Document, outer: Node, inner: Node) -> tuple[str, str, str] | None:
    """(the definition whole if short, else its signature or class outline; a briefer fallback; its header)."""
    body = _body(inner)
    if outer.end_point[0] - outer.start_point[0] < SHORT_LINES:
        text = _text(doc, outer.start_byte, outer.end_byte)
        return text, text, _stub(doc, outer, body)
    if body is None:
        return None
    if inner.type in _CLASSLIKE:
        return (
            _class_outline(doc, outer, body, methods=True),
            _class_outline(doc, outer, body, methods=False),
            _stub(doc, outer, body),
        )
    owner = body.parent if body.parent is not None else inner
    text = _text(doc, outer.start_byte, owner.start_byte) + signature(doc, owner)
    return text, text, text


def _outline(source: Document) -> _Outline:
    """Top-level definitions and similarity windows of a document (cached per snapshot), cut from its text with every
    secret value already replaced by `<redacted>` (so no part starts or ends inside a private-key block)."""
    cached = _OUTLINES.get(source)
    if cached is not None:
        return cached
    shown = redact(source.text)
    doc = (
        source
        if shown == source.text
        else Document.open(source.uri, source.language, source.version, shown, source.parse_limit)
    )
    defs: list[_Definition] = []
    for outer in doc.tree.root_node.children if doc.tree is not None else []:
        field = {"decorated_definition": "definition", "export_statement": "declaration"}.get(outer.type)
        inner = (outer.child_by_field_name(field) if field else None) or outer
        names = _names(doc, inner)
        rendered = _render(doc, outer, inner) if names else None  # decorators and `export` included
        defs.extend(_Definition(n, outer.start_point[0], outer.end_point[0], *rendered) for n in names if rendered)
    lines = tuple(doc.text.splitlines())
    body = min((d.first for d in defs), default=0)  # the imports above it match every file's names: no windows
    windows = tuple(
        (s, frozenset(_IDENT.findall("\n".join(lines[s : s + WINDOW]))))
        for s in range(body, max(len(lines) - WINDOW, body) + STEP, STEP)
    )
    result = _Outline(lines, tuple(defs), tuple(w for w in windows if w[1]))
    _OUTLINES[source] = result
    return result


_OUTLINES: WeakKeyDictionary[Document, _Outline] = WeakKeyDictionary()


# ---- choosing -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Candidate:
    path: str  # as shown in the prompt
    outline: _Outline
    imported: bool
    names: frozenset[str]  # explicitly imported names


def _candidates(doc: Document, open_docs: Mapping[str, Document], index: WorkspaceIndex | None) -> list[_Candidate]:
    """Imported files in first-import order, then the other open documents by path; open text wins over disk.
    Open documents need a `file://` URI (untitled buffers are left out), must lie inside a workspace root (like
    every other file: a buffer of another project is not this one's context) and pass the exclusion globs."""
    here = uri_path(doc.uri)
    if index is None or here is None:
        return []
    here_real = os.path.realpath(here)
    opened: dict[str, Document] = {}
    for uri, d in open_docs.items():
        real = index.admits(uri, d)
        if real is not None and real != here_real:
            opened[real] = d
    order: dict[str, set[str]] = {}  # imported file -> names, in first-import order
    refs = imports(doc)
    for ref, found in zip(refs, resolve_all(refs, here, index.roots), strict=True):
        for p in found:
            order.setdefault(str(p), set()).update(ref.names)
    out: list[_Candidate] = []
    for real in [*order, *sorted(set(opened) - set(order))]:
        source = opened.get(real) or index.document(Path(real))
        if source is not None and len(out) < MAX_FILES:
            names = frozenset(order.get(real, ()))
            out.append(_Candidate(index.relative(Path(real)), _outline(source), real in order, names))
    return out


def _similar_windows(cands: list[_Candidate], used: frozenset[str]) -> list[tuple[int, int]]:
    """(candidate, first line) of every window sharing an identifier with `used`, most similar first (Jaccard)."""
    scored = sorted(
        (-common / (len(ids) + len(used) - common), ci, start)
        for ci, c in enumerate(cands)
        for start, ids in c.outline.windows
        if (common := len(ids & used))
    )
    return [(ci, start) for _, ci, start in scored]


def gather(
    doc: Document, open_docs: Mapping[str, Document], index: WorkspaceIndex | None, near: str, budget_chars: int
) -> list[Snippet]:
    """Context from other files for a completion in `doc`, `near` being the code around the cursor.

    Three passes over the files it imports and the open documents: (1) the header of every top-level definition
    that `near` uses or the current file imports by name (`class Text(JupyterMixin): ...`, names used near the
    cursor first), so the model knows what each name it may write is; (2) the definitions `near` uses, upgraded
    to their whole text when short, else their signature or class outline; (3) with what is left, the ~12-line
    windows most similar to `near` (Jaccard over identifiers). One `Snippet` per file, parts in file order; the
    paths, texts and separators fit in `budget_chars`. Deterministic for the same inputs."""
    if budget_chars <= 0 or refused(doc.uri, index):
        return []
    cands = _candidates(doc, open_docs, index)
    used = frozenset(_IDENT.findall(near))
    taken: dict[int, dict[tuple[int, int], str]] = {}  # file -> (first line, last line) -> text
    spent = 0

    def put(ci: int, first: int, last: int, text: str) -> bool:
        """Add a part, or replace the part of the same lines; False when it overlaps another or does not fit."""
        nonlocal spent
        parts = taken.get(ci, {})
        old = parts.get((first, last))
        if old is None and any(first <= b and a <= last for a, b in parts):
            return False
        cost = len(text) - (len(old) if old is not None else -2) + (0 if parts else len(cands[ci].path) + 16)
        if spent + cost > budget_chars:
            return False
        taken.setdefault(ci, {})[(first, last)] = text
        spent += cost
        return True

    wanted = sorted(
        (d.name not in used, ci, i)
        for ci, c in enumerate(cands)
        if c.imported
        for i, d in enumerate(c.outline.definitions)
        if d.name in used or d.name in c.names
    )
    for _, ci, i in wanted:
        d = cands[ci].outline.definitions[i]
        put(ci, d.first, d.last, d.stub)
    for elsewhere, ci, i in wanted:
        if elsewhere:
            break  # the rest are imported but not used near the cursor: their headers are enough
        d = cands[ci].outline.definitions[i]
        for text in (d.text, d.brief):  # the first that fits
            if text != d.stub and put(ci, d.first, d.last, text):
                break
    if used:
        for ci, start in _similar_windows(cands, used):
            if budget_chars - spent < 64:
                break  # no room left for a window
            lines = cands[ci].outline.lines
            last = min(start + WINDOW, len(lines)) - 1
            put(ci, start, last, "\n".join(lines[start : last + 1]))
    return [Snippet(cands[ci].path, "\n\n".join(t for _, t in sorted(taken[ci].items()))) for ci in sorted(taken)]
