"""Minimal edits as LSP TextEdits: in every position encoding they still apply to the original (emoji, CJK, CRLF,
empty lines), and a workspace edit carries the document version."""

from hypothesis import given, settings
from hypothesis import strategies as st
from sparkls.edit import diff
from sparkls.lsp import convert
from sparkls.text.document import Document
from sparkls.text.positions import ENCODINGS

from tests.edit_support import apply_lsp, texts


@given(texts, texts, st.sampled_from(ENCODINGS))
@settings(max_examples=300)
def test_lsp_text_edits_apply_to_the_original_in_every_encoding(old, new, encoding):
    doc = Document.open("file:///t.txt", "plaintext", 3, old)
    tes = convert.text_edits(doc, diff.diff(old, new), encoding)
    assert apply_lsp(old, tes, encoding) == new


def test_the_workspace_edit_carries_the_document_version():
    doc = Document.open("file:///t.py", "python", 7, "x = 1\n")
    we = convert.workspace_edit(doc, diff.diff(doc.text, "x = 2\n"), "utf-16")
    (tde,) = we.document_changes
    assert tde.text_document.version == 7 and tde.text_document.uri == doc.uri
    assert [(e.range.start.character, e.range.end.character, e.new_text) for e in tde.edits] == [(4, 5, "2")]
    plain = convert.workspace_edit(doc, diff.diff(doc.text, "x = 2\n"), "utf-16", document_changes=False)
    assert list(plain.changes) == [doc.uri]
