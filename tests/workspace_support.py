"""What the workspace tests share: files written under a root, and a document opened from one."""

from __future__ import annotations

from pathlib import Path

from sparkls.text.document import Document


def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def opened(path: Path, text: str | None = None) -> Document:
    return Document.open(path.as_uri(), None, 1, path.read_text() if text is None else text)
