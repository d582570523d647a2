"""Shared test helpers: a cursor-marker `check` style for the pure core, paths to shared data."""

from __future__ import annotations

from pathlib import Path

import pytest
from sparkls.document import Document

CURSOR = "<|>"
SHARED = Path(__file__).resolve().parents[1].parent / "shared"


def doc_at(text_with_cursor: str, language: str = "python", uri: str | None = None) -> tuple[Document, int]:
    """A document from text holding one `<|>` cursor mark, and the cursor's offset."""
    cursor = text_with_cursor.index(CURSOR)
    text = text_with_cursor.replace(CURSOR, "", 1)
    ext = {"python": "py", "go": "go", "rust": "rs", "typescript": "ts", "javascript": "js"}.get(language, "txt")
    return Document.open(uri or f"file:///t/test.{ext}", language, 1, text), cursor


@pytest.fixture
def shared() -> Path:
    if not SHARED.is_dir():
        pytest.skip("../shared is not present")
    return SHARED
