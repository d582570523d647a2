"""Code actions from tree-sitter: which are offered where (implement, docstring, annotate, fix), and their data."""

import pytest
from sparkls.edit import actions

from tests.conftest import doc_at

STUBS = [
    ("python", "def f(x):\n    <|>pass\n"),
    ("python", 'def f(x):\n    """Doc."""\n    ...<|>\n'),
    ("python", "def f(x):\n    # TODO<|>\n    raise NotImplementedError\n"),
    ("go", 'package m\n\nfunc F(x int) int {\n\tpanic("TODO")<|>\n}\n'),
    ("rust", "fn f(x: i32) -> i32 {\n    todo!()<|>\n}\n"),
    ("typescript", "function f(x: number): number {\n  throw new Error('not implemented');<|>\n}\n"),
]


@pytest.mark.parametrize(("language", "text"), STUBS)
def test_a_stub_body_offers_implement(language, text):
    doc, cur = doc_at(text, language)
    kinds = [a.kind for a in actions.available(doc, cur, cur, [])]
    assert "implement" in kinds


def test_a_real_body_does_not_offer_implement_but_offers_docstring_and_annotations():
    doc, cur = doc_at("def f(x):\n    return x<|> + 1\n")
    kinds = [a.kind for a in actions.available(doc, cur, cur, [])]
    assert "implement" not in kinds and {"docstring", "annotate", "rewrite"} <= set(kinds)


def test_an_annotated_documented_function_offers_neither():
    doc, cur = doc_at('def f(x: int) -> int:\n    """Add one."""\n    return x<|> + 1\n')
    kinds = [a.kind for a in actions.available(doc, cur, cur, [])]
    assert "docstring" not in kinds and "annotate" not in kinds


def test_a_diagnostic_under_the_cursor_offers_a_fix_of_its_function():
    doc, cur = doc_at("import os\n\n\ndef f(x):\n    return y<|>\n\n\ndef g():\n    pass\n")
    problem = actions.Problem(cur - 1, cur, "NameError: name 'y' is not defined")
    (fix,) = [a for a in actions.available(doc, cur, cur, [problem]) if a.kind == "fix"]
    assert doc.text[fix.start : fix.end] == "def f(x):\n    return y\n"
    assert "NameError" in actions.instruction_of(fix, "python")


def test_actions_round_trip_through_their_data():
    a = actions.Action("fix", "file:///t.py", 3, 0, 10, "t", diagnostic="boom")
    assert actions.Action.from_data(a.to_data()) == a
    with pytest.raises(ValueError):
        actions.Action.from_data({"kind": "format-disk"})
