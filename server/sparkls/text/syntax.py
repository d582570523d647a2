"""Tree-sitter grammars and incremental parsing.

Grammars come from the per-language wheels (`tree-sitter-python`, ...), loaded lazily on first
use. Languages without a grammar, and files larger than the parse limit, fall back to plain text
(`tree is None`); every later stage works without a tree.
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass
from functools import cache

from tree_sitter import Language, Parser, Point, Tree

log = logging.getLogger(__name__)

# languageId (as editors send it) -> (module, function returning the grammar)
GRAMMARS: dict[str, tuple[str, str]] = {
    "python": ("tree_sitter_python", "language"),
    "javascript": ("tree_sitter_javascript", "language"),
    "javascriptreact": ("tree_sitter_javascript", "language"),
    "typescript": ("tree_sitter_typescript", "language_typescript"),
    "typescriptreact": ("tree_sitter_typescript", "language_tsx"),
    "go": ("tree_sitter_go", "language"),
    "rust": ("tree_sitter_rust", "language"),
    "java": ("tree_sitter_java", "language"),
    "c": ("tree_sitter_c", "language"),
    "cpp": ("tree_sitter_cpp", "language"),
}

EXTENSIONS: dict[str, str] = {
    ".py": "python",
    ".pyi": "python",
    ".js": "javascript",
    ".mjs": "javascript",
    ".cjs": "javascript",
    ".jsx": "javascriptreact",
    ".ts": "typescript",
    ".mts": "typescript",
    ".cts": "typescript",
    ".tsx": "typescriptreact",
    ".go": "go",
    ".rs": "rust",
    ".java": "java",
    ".c": "c",
    ".h": "c",
    ".cc": "cpp",
    ".cpp": "cpp",
    ".cxx": "cpp",
    ".hpp": "cpp",
    ".hh": "cpp",
}

# Names other editors use for the same languages.
ALIASES = {
    "py": "python",
    "js": "javascript",
    "ts": "typescript",
    "tsx": "typescriptreact",
    "jsx": "javascriptreact",
    "golang": "go",
    "rs": "rust",
    "c++": "cpp",
    "objective-c": "c",
}


def language_id(language_id: str | None, uri: str) -> str:
    """Normalise an editor's languageId, guessing from the file extension when it is missing."""
    lid = (language_id or "").strip().lower()
    lid = ALIASES.get(lid, lid)
    if lid in GRAMMARS:
        return lid
    dot = uri.rfind(".")
    if dot != -1 and "/" not in uri[dot:]:
        return EXTENSIONS.get(uri[dot:].lower(), lid or "plaintext")
    return lid or "plaintext"


@cache
def grammar(lang: str) -> Language | None:
    """The tree-sitter grammar of a normalised language id, or None (plain text)."""
    spec = GRAMMARS.get(lang)
    if spec is None:
        return None
    try:
        module = importlib.import_module(spec[0])
        capsule: object = getattr(module, spec[1])()  # the grammar's PyCapsule
        return Language(capsule)
    except Exception:  # a missing or broken grammar wheel must not stop the server
        log.exception("grammar for %s could not be loaded; using plain text", lang)
        return None


def available_grammars() -> dict[str, bool]:
    """Which grammars load, for `sparkls doctor`."""
    return {lang: grammar(lang) is not None for lang in GRAMMARS}


@dataclass(frozen=True)
class TextEditInfo:
    """One text replacement in tree-sitter's terms (bytes and byte points)."""

    start_byte: int
    old_end_byte: int
    new_end_byte: int
    start_point: tuple[int, int]
    old_end_point: tuple[int, int]
    new_end_point: tuple[int, int]


def _point(text: str, offset: int) -> tuple[int, int]:
    row = text.count("\n", 0, offset)
    line_start = text.rfind("\n", 0, offset) + 1
    return row, len(text[line_start:offset].encode("utf-8", "surrogatepass"))


def edit_info(old: str, start: int, end: int, new_text: str) -> TextEditInfo:
    """Describe replacing old[start:end] with new_text for `Tree.edit`."""
    start_byte = len(old[:start].encode("utf-8", "surrogatepass"))
    old_end_byte = start_byte + len(old[start:end].encode("utf-8", "surrogatepass"))
    new_end_byte = start_byte + len(new_text.encode("utf-8", "surrogatepass"))
    start_point = _point(old, start)
    old_end_point = _point(old, end)
    nl = new_text.count("\n")
    if nl:
        last = new_text[new_text.rfind("\n") + 1 :]
        new_end_point = (start_point[0] + nl, len(last.encode("utf-8", "surrogatepass")))
    else:
        new_end_point = (start_point[0], start_point[1] + len(new_text.encode("utf-8", "surrogatepass")))
    return TextEditInfo(start_byte, old_end_byte, new_end_byte, start_point, old_end_point, new_end_point)


def parse(lang: str, source: bytes, old_tree: Tree | None = None) -> Tree | None:
    """Parse (incrementally when `old_tree` was edited to match `source`)."""
    g = grammar(lang)
    if g is None:
        return None
    parser = Parser(g)
    return parser.parse(source, old_tree) if old_tree is not None else parser.parse(source)


def apply_edit(tree: Tree, info: TextEditInfo) -> None:
    """Tell an old tree about an edit so the next parse reuses what did not change."""
    tree.edit(
        start_byte=info.start_byte,
        old_end_byte=info.old_end_byte,
        new_end_byte=info.new_end_byte,
        start_point=Point(*info.start_point),
        old_end_point=Point(*info.old_end_point),
        new_end_point=Point(*info.new_end_point),
    )
