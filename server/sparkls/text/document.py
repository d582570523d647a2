"""Immutable document snapshots: text, version, language and syntax tree.

A `Document` is never changed in place: `edit` returns a new snapshot whose tree was re-parsed
incrementally from a copy of the old one, so a request that holds an older snapshot keeps a
consistent (text, version, tree) triple while the user types on.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import cached_property

from tree_sitter import Tree

from sparkls.text import syntax

log = logging.getLogger(__name__)

DEFAULT_PARSE_LIMIT = 1_000_000  # bytes; larger files are treated as plain text


def file_name(uri: str) -> str:
    """The last path segment of a URI (what a prompt calls a file outside the workspace)."""
    return uri.rsplit("/", 1)[-1]


@dataclass(frozen=True, eq=False)
class Document:
    uri: str
    language: str
    version: int
    text: str
    tree: Tree | None = None
    parse_limit: int = DEFAULT_PARSE_LIMIT

    @classmethod
    def open(
        cls, uri: str, language_id: str | None, version: int, text: str, parse_limit: int = DEFAULT_PARSE_LIMIT
    ) -> Document:
        lang = syntax.language_id(language_id, uri)
        doc = cls(uri, lang, version, text, None, parse_limit)
        return doc._with_tree(None)

    @cached_property
    def is_binary(self) -> bool:
        return "\x00" in self.text

    @cached_property
    def is_ascii(self) -> bool:
        return self.text.isascii()

    @cached_property
    def source(self) -> bytes:
        """UTF-8 bytes of the text (tree-sitter's coordinates)."""
        return self.text.encode("utf-8", "surrogatepass")

    def _parseable(self) -> bool:
        return len(self.text) <= self.parse_limit and not self.is_binary

    def _with_tree(self, old_tree: Tree | None) -> Document:
        if not self._parseable():
            return (
                self
                if self.tree is None
                else Document(self.uri, self.language, self.version, self.text, None, self.parse_limit)
            )
        try:
            tree = syntax.parse(self.language, self.source, old_tree)
        except Exception:  # never let a parser problem lose the user's text
            log.exception("parse failed for %s; plain text from now on", self.uri)
            tree = None
        return Document(self.uri, self.language, self.version, self.text, tree, self.parse_limit)

    def edit(self, start: int, end: int, new_text: str, version: int) -> Document:
        """Replace text[start:end] (string offsets) and re-parse incrementally."""
        start = max(0, min(start, len(self.text)))
        end = max(start, min(end, len(self.text)))
        text = self.text[:start] + new_text + self.text[end:]
        old_tree = None
        if self.tree is not None and len(text) <= self.parse_limit:
            old_tree = self.tree.copy()
            syntax.apply_edit(old_tree, syntax.edit_info(self.text, start, end, new_text))
        doc = Document(self.uri, self.language, version, text, None, self.parse_limit)
        return doc._with_tree(old_tree)

    def byte_offset(self, offset: int) -> int:
        if self.is_ascii:
            return offset
        return len(self.text[:offset].encode("utf-8", "surrogatepass"))

    def char_offset(self, byte_offset: int) -> int:
        if self.is_ascii:
            return byte_offset
        return len(self.source[:byte_offset].decode("utf-8", "surrogatepass"))
