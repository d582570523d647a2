"""Shared test helpers: a cursor-marker `check` style for the pure core, paths to shared data."""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from types import ModuleType

import pytest
from sparkls.text.document import Document

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


def require(module: str, why: str) -> ModuleType:
    """Import `module`, or skip the test locally; in CI (`CI=true`) a missing module fails instead,
    so the vLLM and real-model tests can never pass there by being skipped."""
    try:
        return importlib.import_module(module)
    except ImportError:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            raise
        pytest.skip(f"{module} is not installed ({why})")


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Qwen2-architecture checkpoint with a locally trained tokenizer (tests/tiny_model.py)."""
    require("transformers", "needed to build the tiny model")
    from tests.tiny_model import build

    return build(tmp_path_factory.mktemp("tiny-qwen2"))


@pytest.fixture(scope="session")
def tiny_cycle_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model whose text varies: each character's token is followed by the next ASCII character's
    (tests/tiny_model.py, `output="cycle"`), so tests can compare texts, not lengths."""
    require("transformers", "needed to build the tiny model")
    from tests.tiny_model import build

    return build(tmp_path_factory.mktemp("tiny-qwen2-cycle"), output="cycle")
