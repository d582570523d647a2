"""What the edit tests share: texts that stress positions (emoji, CJK, every line ending), a reference that applies
LSP TextEdits (tests/e2e/ applies the server's edits with it too), and a function holding a secret."""

import re

from hypothesis import strategies as st

PIECES = ["a", "b", "x = 1", "😀", "漢字", "\n", "\r\n", "\r", "", " ", "    ", "é", "def f():", "𝔘"]
texts = st.lists(st.sampled_from(PIECES), max_size=30).map("".join)


def lsp_offset(text: str, line: int, character: int, encoding: str) -> int:
    """Reference conversion, written independently of sparkls.text.positions."""
    starts = [0] + [m.end() for m in re.finditer(r"\r\n|\r|\n", text)]
    pos = starts[line]
    width = {
        "utf-8": lambda c: len(c.encode("utf-8")),
        "utf-16": lambda c: len(c.encode("utf-16-le")) // 2,
        "utf-32": lambda c: 1,
    }[encoding]
    units = 0
    while units < character:
        units += width(text[pos])
        pos += 1
    assert units == character, "a position must not split a character"
    assert text[pos - 1 : pos + 1] != "\r\n", "a position must not split a CRLF"
    return pos


def apply_lsp(text: str, text_edits, encoding: str) -> str:
    spans = [
        (
            lsp_offset(text, e.range.start.line, e.range.start.character, encoding),
            lsp_offset(text, e.range.end.line, e.range.end.character, encoding),
            e.new_text,
        )
        for e in text_edits
    ]
    for (_, end, _), (start, _, _) in zip(sorted(spans), sorted(spans)[1:], strict=False):
        assert end <= start, "edits must not overlap"
    for start, end, new in sorted(spans, reverse=True):
        text = text[:start] + new + text[end:]
    return text


SECRET_FN = 'import os\n\n\ndef client():\n    key = "AKIAIOSFODNN7EXAMPLE"\n    return Client(key)\n'
