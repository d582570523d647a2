"""Other files of the workspace as completion context: files read safely, definitions and windows chosen.

`WorkspaceIndex` reads files inside the workspace roots only (never an excluded, binary or oversize one) and
caches their text and outline by (path, mtime, size); `gather` picks what goes into the prompt's stable head:
the definitions of the names used near the cursor in the files the document imports (`sparkls.imports`), then
the windows of imported and open files most similar to that code, one `Snippet` per file, within a character
budget. Same inputs, same output (order and text): it sits before the FIM part, where any change invalidates
the KV cache behind it. `excluded` / `refused` are the exclusion globs, also for open documents.
"""

from __future__ import annotations

import os
import re
import stat
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fnmatch import translate
from functools import lru_cache
from pathlib import Path
from urllib.parse import unquote, urlparse
from urllib.request import url2pathname
from weakref import WeakKeyDictionary

from tree_sitter import Node

from sparkls.document import Document
from sparkls.imports import ImportRef, imports, resolve, resolve_all, root_of
from sparkls.outline import INDENT_LANGUAGES, signature

__all__ = ["DEFAULT_EXCLUDES", "ImportRef", "Snippet", "WorkspaceIndex", "excluded", "gather", "imports", "refused",
           "resolve", "uri_path"]

DEFAULT_EXCLUDES: tuple[str, ...] = (
    ".env*", "*.pem", "*.key", "id_rsa*", "id_dsa*", "id_ecdsa*", "id_ed25519*", "*.p12", "*.pfx", "secrets.*",
    "*.keystore", "*.jks", "*.kdbx", "credentials*", ".netrc", ".npmrc", ".pypirc", ".htpasswd", "*.tfstate*",
    ".git/", ".hg/", ".svn/", ".ssh/", ".gnupg/", ".aws/", "node_modules/", ".venv/", "__pycache__/",
)
DEFAULT_MAX_FILE_BYTES = 512 * 1024
SHORT_LINES = 12  # a definition this short goes in whole
WINDOW, STEP = 12, 6  # similarity windows: lines, and lines between their starts
MAX_FILES = 48  # candidate files per gather
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CLASSLIKE = frozenset({
    "class_definition", "class_declaration", "abstract_class_declaration", "interface_declaration", "enum_declaration",
    "record_declaration", "struct_item", "enum_item", "trait_item", "impl_item", "union_item", "type_declaration",
})


@dataclass(frozen=True)
class Snippet:
    """What one other file contributes to the prompt: its workspace-relative path and the chosen parts."""

    path: str
    text: str


# ---- exclusion ----------------------------------------------------------------------------------------------

def excluded(rel_path: str, globs: Sequence[str]) -> bool:
    """Gitignore-like, case-insensitive: a glob without `/` matches the basename at any depth, one ending in `/`
    any directory component, any other glob with `/` the whole relative path (fnmatch)."""
    parts = [p.lower() for p in rel_path.replace("\\", "/").split("/") if p not in ("", ".")]
    if not parts:
        return False
    base, directory, whole = _compiled(tuple(globs))
    return bool(base.match(parts[-1]) or whole.match("/".join(parts)) or any(map(directory.match, parts[:-1])))


@lru_cache(maxsize=16)
def _compiled(globs: tuple[str, ...]) -> tuple[re.Pattern[str], re.Pattern[str], re.Pattern[str]]:
    """The globs as three regexes: basename, directory component, whole path."""
    def one(patterns: list[str]) -> re.Pattern[str]:
        return re.compile("|".join(translate(p.lower()) for p in patterns) or "(?!)")

    return (one([g for g in globs if "/" not in g]), one([g.strip("/") for g in globs if g.endswith("/")]),
            one([g.lstrip("/") for g in globs if "/" in g and not g.endswith("/")]))


def _excluded_anywhere(path: str, globs: Sequence[str]) -> bool:
    """For a file outside the roots: the globs against every tail of its path."""
    parts = [p for p in path.replace("\\", "/").split("/") if p]
    return any(excluded("/".join(parts[i:]), globs) for i in range(len(parts)))


def uri_path(uri: str) -> Path | None:
    """The file path of a `file://` URI, or None for any other scheme."""
    u = urlparse(uri)
    return Path(url2pathname(unquote(u.path))) if u.scheme == "file" else None


def _refused(real: str, roots: Sequence[str], globs: Sequence[str]) -> bool:
    root = root_of(real, roots)
    return _excluded_anywhere(real, globs) if root is None else excluded(os.path.relpath(real, root), globs)


def refused(uri: str, index: WorkspaceIndex | None) -> bool:
    """Whether the document at `uri` matches the exclusion globs (the pipeline completes nothing there)."""
    path = uri_path(uri)
    target = os.path.realpath(path) if path is not None else unquote(urlparse(uri).path)
    globs = index.excludes if index is not None else DEFAULT_EXCLUDES
    roots = index.roots_str if index is not None else ()
    return _refused(target, roots, globs) or (path is not None and _refused(str(path), roots, globs))


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
    if t in ("lexical_declaration", "variable_declaration", "type_declaration", "const_declaration",
             "var_declaration"):
        specs = [c for c in node.named_children if c.type in ("variable_declarator", "type_spec", "type_alias",
                                                               "const_spec", "var_spec")]
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
        return (_class_outline(doc, outer, body, methods=True), _class_outline(doc, outer, body, methods=False),
                _stub(doc, outer, body))
    owner = body.parent if body.parent is not None else inner
    text = _text(doc, outer.start_byte, owner.start_byte) + signature(doc, owner)
    return text, text, text


def _outline(doc: Document) -> _Outline:
    """Top-level definitions and similarity windows of a document (cached per snapshot)."""
    cached = _OUTLINES.get(doc)
    if cached is not None:
        return cached
    defs: list[_Definition] = []
    for outer in doc.tree.root_node.children if doc.tree is not None else []:
        field = {"decorated_definition": "definition", "export_statement": "declaration"}.get(outer.type)
        inner = (outer.child_by_field_name(field) if field else None) or outer
        names = _names(doc, inner)
        rendered = _render(doc, outer, inner) if names else None  # decorators and `export` included
        defs.extend(_Definition(n, outer.start_point[0], outer.end_point[0], *rendered) for n in names if rendered)
    lines = tuple(doc.text.splitlines())
    body = min((d.first for d in defs), default=0)  # the imports above it match every file's names: no windows
    windows = tuple((s, frozenset(_IDENT.findall("\n".join(lines[s : s + WINDOW]))))
                    for s in range(body, max(len(lines) - WINDOW, body) + STEP, STEP))
    result = _Outline(lines, tuple(defs), tuple(w for w in windows if w[1]))
    _OUTLINES[doc] = result
    return result


_OUTLINES: WeakKeyDictionary[Document, _Outline] = WeakKeyDictionary()


# ---- reading ------------------------------------------------------------------------------------------------

@dataclass
class _Entry:
    key: tuple[int, int]  # (mtime_ns, size)
    text: str | None  # None: refused (binary)
    doc: Document | None = None  # parsed on first use


class WorkspaceIndex:
    """Reads files inside the workspace roots only, refusing excluded, binary (a NUL byte in the first 8 KiB),
    oversize and unreadable ones, and caches text and outline by (path, mtime_ns, size)."""

    def __init__(self, roots: Sequence[Path], excludes: Sequence[str] = DEFAULT_EXCLUDES,
                 max_file_bytes: int = DEFAULT_MAX_FILE_BYTES, max_cached_files: int = 256) -> None:
        self.roots = tuple(Path(os.path.realpath(r)) for r in roots)
        self.roots_str = sorted((str(r) for r in self.roots), key=len, reverse=True)  # the deepest root first
        self.excludes = tuple(excludes)
        self.max_file_bytes = max_file_bytes
        self.max_cached_files = max_cached_files
        self._cache: OrderedDict[str, _Entry] = OrderedDict()
        self._lock = threading.Lock()  # gather may run in worker threads

    def excluded(self, path: Path) -> bool:
        """Whether `path` (as given, or where its links lead) matches the exclusion globs."""
        return self._excluded(os.path.realpath(path), path)

    def _excluded(self, real: str, given: Path) -> bool:
        return _refused(real, self.roots_str, self.excludes) or \
            (str(given) != real and _refused(os.path.abspath(given), self.roots_str, self.excludes))

    def relative(self, path: Path) -> str:
        """`path` relative to the root holding it, with forward slashes (absolute when outside the roots)."""
        return self._relative(os.path.realpath(path))

    def _relative(self, real: str) -> str:
        root = root_of(real, self.roots_str)
        return Path(os.path.relpath(real, root) if root is not None else real).as_posix()

    def read(self, path: Path) -> str | None:
        """The text of a file, or None for anything refused."""
        entry = self._load(os.path.realpath(path), path)
        return entry.text if entry is not None else None

    def document(self, path: Path) -> Document | None:
        """The file as a parsed `Document` (cached like its text), or None when refused."""
        real = os.path.realpath(path)
        entry = self._load(real, path)
        if entry is None or entry.text is None:
            return None
        if entry.doc is None:
            entry.doc = Document.open(Path(real).as_uri(), None, 0, entry.text)
        return entry.doc

    def _load(self, real: str, given: Path) -> _Entry | None:
        if root_of(real, self.roots_str) is None or self._excluded(real, given):
            return None
        try:
            st = os.stat(real)
        except OSError:
            return None
        if not stat.S_ISREG(st.st_mode) or st.st_size > self.max_file_bytes:
            return None
        key = (st.st_mtime_ns, st.st_size)
        with self._lock:
            entry = self._cache.get(real)
            if entry is not None and entry.key == key:
                self._cache.move_to_end(real)
                return entry if entry.text is not None else None
        try:
            with open(real, "rb") as f:
                data = f.read(self.max_file_bytes + 1)
        except OSError:
            return None
        binary = b"\x00" in data[:8192] or len(data) > self.max_file_bytes
        entry = _Entry(key, None if binary else data.decode("utf-8", "replace"))
        with self._lock:
            self._cache[real] = entry
            while len(self._cache) > self.max_cached_files:
                self._cache.popitem(last=False)
        return entry if entry.text is not None else None


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
    roots = index.roots_str if index is not None else []
    globs = index.excludes if index is not None else DEFAULT_EXCLUDES
    limit = index.max_file_bytes if index is not None else DEFAULT_MAX_FILE_BYTES
    here = uri_path(doc.uri)
    here_real = os.path.realpath(here) if here is not None else None
    opened: dict[str, Document] = {}
    for uri, d in open_docs.items():
        p = uri_path(uri)
        real = os.path.realpath(p) if p is not None else None
        if real is None or real == here_real or root_of(real, roots) is None or d.is_binary or len(d.text) > limit \
                or _refused(real, roots, globs) or _refused(os.path.abspath(p), roots, globs):
            continue
        opened[real] = d
    order: dict[str, set[str]] = {}  # imported file -> names, in first-import order
    if here is not None and index is not None:
        refs = imports(doc)
        for ref, found in zip(refs, resolve_all(refs, here, index.roots), strict=True):
            for p in found:
                order.setdefault(str(p), set()).update(ref.names)
    out: list[_Candidate] = []
    for real in [*order, *sorted(set(opened) - set(order))]:
        source = opened.get(real) or (index.document(Path(real)) if index is not None else None)
        if source is not None and len(out) < MAX_FILES:
            path = index._relative(real) if index is not None else Path(real).as_posix()
            out.append(_Candidate(path, _outline(source), real in order, frozenset(order.get(real, ()))))
    return out


def gather(doc: Document, open_docs: Mapping[str, Document], index: WorkspaceIndex | None, near: str,
           budget_chars: int) -> list[Snippet]:
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

    wanted = sorted((d.name not in used, ci, i) for ci, c in enumerate(cands) if c.imported
                    for i, d in enumerate(c.outline.definitions) if d.name in used or d.name in c.names)
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
        scored = sorted((-common / (len(ids) + len(used) - common), ci, start) for ci, c in enumerate(cands)
                        for start, ids in c.outline.windows if (common := len(ids & used)))  # Jaccard
        for _, ci, start in scored:
            if budget_chars - spent < 64:
                break  # no room left for a window
            lines = cands[ci].outline.lines
            last = min(start + WINDOW, len(lines)) - 1
            put(ci, start, last, "\n".join(lines[start : last + 1]))
    return [Snippet(cands[ci].path, "\n\n".join(t for _, t in sorted(taken[ci].items()))) for ci in sorted(taken)]
