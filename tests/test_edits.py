"""Minimal edits: applying them yields exactly the rewrite, they never touch unchanged text, and as LSP
TextEdits in every position encoding they still apply to the original (emoji, CJK, CRLF, empty lines)."""

import re

from hypothesis import given, settings
from hypothesis import strategies as st
from sparkls.edit import diff
from sparkls.lsp import convert
from sparkls.text.document import Document
from sparkls.text.positions import ENCODINGS

PIECES = ["a", "b", "x = 1", "😀", "漢字", "\n", "\r\n", "\r", "", " ", "    ", "é", "def f():", "𝔘"]
texts = st.lists(st.sampled_from(PIECES), max_size=30).map("".join)


def lsp_offset(text: str, line: int, character: int, encoding: str) -> int:
    """Reference conversion, written independently of sparkls.text.positions."""
    starts = [0] + [m.end() for m in re.finditer(r"\r\n|\r|\n", text)]
    pos = starts[line]
    width = {"utf-8": lambda c: len(c.encode("utf-8")), "utf-16": lambda c: len(c.encode("utf-16-le")) // 2,
             "utf-32": lambda c: 1}[encoding]
    units = 0
    while units < character:
        units += width(text[pos])
        pos += 1
    assert units == character, "a position must not split a character"
    assert text[pos - 1 : pos + 1] != "\r\n", "a position must not split a CRLF"
    return pos


def apply_lsp(text: str, text_edits, encoding: str) -> str:
    spans = [(lsp_offset(text, e.range.start.line, e.range.start.character, encoding),
              lsp_offset(text, e.range.end.line, e.range.end.character, encoding), e.new_text) for e in text_edits]
    for (_, end, _), (start, _, _) in zip(sorted(spans), sorted(spans)[1:], strict=False):
        assert end <= start, "edits must not overlap"
    for start, end, new in sorted(spans, reverse=True):
        text = text[:start] + new + text[end:]
    return text


@given(texts, texts)
@settings(max_examples=300)
def test_applying_the_diff_yields_exactly_the_rewrite(old, new):
    assert diff.apply(old, diff.diff(old, new)) == new


@given(texts, texts, texts, texts)
@settings(max_examples=200)
def test_a_rewritten_region_never_touches_text_outside_it(before, region, after, rewrite):
    original = before + region + after
    es = diff.region_edits(original, len(before), len(before) + len(region), rewrite)
    assert diff.apply(original, es) == before + rewrite + after
    assert all(len(before) <= e.start <= e.end <= len(before) + len(region) for e in es)


@given(texts, texts, st.sampled_from(ENCODINGS))
@settings(max_examples=300)
def test_lsp_text_edits_apply_to_the_original_in_every_encoding(old, new, encoding):
    doc = Document.open("file:///t.txt", "plaintext", 3, old)
    tes = convert.text_edits(doc, diff.diff(old, new), encoding)
    assert apply_lsp(old, tes, encoding) == new


@given(texts, texts)
def test_no_edit_starts_or_ends_inside_a_crlf(old, new):
    for e in diff.diff(old, new):
        for at in (e.start, e.end):
            assert old[at - 1 : at + 1] != "\r\n" or at == 0


def test_a_one_word_change_is_one_small_edit():
    old = "def area(r):\n    return 3.14 * r * r\n\nprint(area(2))\n"
    new = "def area(r):\n    return math.pi * r * r\n\nprint(area(2))\n"
    es = diff.diff(old, new)
    assert diff.apply(old, es) == new
    assert diff.changed_chars(es) <= len("3.14") + len("math.pi")
    assert all("print" not in old[e.start : e.end] for e in es)


def test_identical_text_needs_no_edit():
    assert diff.diff("same\r\ntext", "same\r\ntext") == []


def test_inserted_and_deleted_lines_are_whole_line_edits():
    old = "a\nb\nc\n"
    assert diff.diff(old, "a\nb\nnew\nc\n") == [diff.Edit(4, 4, "new\n")]
    assert diff.diff(old, "a\nc\n") == [diff.Edit(2, 4, "")]


def test_the_workspace_edit_carries_the_document_version():
    doc = Document.open("file:///t.py", "python", 7, "x = 1\n")
    we = convert.workspace_edit(doc, diff.diff(doc.text, "x = 2\n"), "utf-16")
    (tde,) = we.document_changes
    assert tde.text_document.version == 7 and tde.text_document.uri == doc.uri
    assert [(e.range.start.character, e.range.end.character, e.new_text) for e in tde.edits] == [(4, 5, "2")]
    plain = convert.workspace_edit(doc, diff.diff(doc.text, "x = 2\n"), "utf-16", document_changes=False)
    assert list(plain.changes) == [doc.uri]
