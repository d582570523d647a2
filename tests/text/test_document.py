"""Snapshots: edits make new documents; the incrementally re-parsed tree matches a fresh parse."""

from hypothesis import given, settings
from hypothesis import strategies as st
from sparkls.text.document import Document

SRC = "def f(x):\n    return x + 1\n\n\nclass A:\n    def g(self):\n        pass\n"


def test_an_edit_returns_a_new_snapshot_and_keeps_the_old_one():
    d1 = Document.open("file:///a.py", "python", 1, SRC)
    d2 = d1.edit(SRC.index("1"), SRC.index("1") + 1, "2", 2)
    assert d1.text == SRC and d1.version == 1
    assert d2.text == SRC.replace("x + 1", "x + 2") and d2.version == 2
    assert str(d2.tree.root_node) == str(Document.open("file:///a.py", "python", 2, d2.text).tree.root_node)
    assert str(d1.tree.root_node) == str(Document.open("file:///a.py", "python", 1, SRC).tree.root_node)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 200),
            st.integers(0, 20),
            st.sampled_from(["", "x", "(", ")", ":\n    ", "\n", "漢😀", "def h():\n  pass\n"]),
        ),
        max_size=8,
    )
)
def test_incremental_parsing_equals_a_fresh_parse_after_any_edits(edits):
    doc = Document.open("file:///a.py", "python", 1, SRC)
    for i, (start, length, text) in enumerate(edits):
        start = min(start, len(doc.text))
        doc = doc.edit(start, min(len(doc.text), start + length), text, i + 2)
    fresh = Document.open("file:///a.py", "python", 0, doc.text)
    assert str(doc.tree.root_node) == str(fresh.tree.root_node)


def test_unknown_languages_and_huge_or_binary_files_are_plain_text():
    assert Document.open("file:///a.cob", "cobol", 1, "IDENTIFICATION DIVISION.").tree is None
    assert Document.open("file:///a.py", "python", 1, "x = 1\n" * 10, parse_limit=20).tree is None
    binary = Document.open("file:///a.py", "python", 1, "abc\x00def")
    assert binary.is_binary and binary.tree is None


def test_the_language_is_guessed_from_the_extension_when_the_client_sends_none():
    assert Document.open("file:///x/main.rs", "", 1, "fn main() {}").language == "rust"
    assert Document.open("file:///x/App.tsx", None, 1, "").language == "typescriptreact"
