"""Context at a cursor: mode, scope limits, stable anchors, preamble, token healing."""

from conftest import doc_at
from sparkls import context
from sparkls.context import Budget

PY = '''import os
from typing import Any


def helper(a: int, b: int) -> int:
    return a + b


class Box:
    def __init__(self, v: Any) -> None:
        self.v = v

    def get(self) -> Any:
        <|>


def main() -> None:
    print(helper(1, 2))
'''


def build(text, language="python", budget=None):
    doc, cursor = doc_at(text, language)
    return context.build(doc, cursor, budget)


def test_a_blank_indented_line_in_a_body_is_multi_line_and_ends_at_its_dedent():
    ctx = build(PY)
    assert ctx.mode == "multi"
    assert ctx.min_indent == 8
    assert ctx.heal == "        "
    assert ctx.prefix.endswith("def get(self) -> Any:\n")


def test_text_after_the_cursor_on_the_line_makes_it_single_line():
    ctx = build("x = foo(<|>a, b)\n")
    assert ctx.mode == "single"
    assert ctx.line_after == "a, b)"


def test_only_closing_brackets_after_the_cursor_still_allow_multi_line_after_an_opener():
    assert build("items = [<|>]\n").mode == "multi"
    assert build("y = compute(<|>)\n").mode == "multi"


def test_a_partial_statement_at_the_end_of_a_line_is_single_line():
    assert build("def f(x):\n    return x.up<|>\n").mode == "single"


def test_inside_a_comment_or_string_is_single_line():
    assert build("# a comment about <|>\nx = 1\n").mode == "single"
    assert build('s = "hello <|>"\n').mode == "single"


def test_column_zero_of_a_non_empty_line_inserts_whole_lines():
    ctx = build("def f(x):\n    y = x\n<|>    return y\n")
    assert ctx.mode == "multi" and ctx.insert_lines
    assert ctx.min_indent == 4  # the function body


def test_after_a_block_opener_the_new_block_must_be_indented_deeper():
    ctx = build("def f(x):\n    if x:<|>\n    return 0\n")
    assert ctx.mode == "multi" and ctx.min_indent == 5


def test_brace_languages_end_the_scope_with_braces():
    ctx = build("package main\n\nfunc f() int {\n\t<|>\n}\n", "go")
    assert ctx.braces and ctx.min_indent is None and ctx.mode == "multi"


def test_the_preamble_holds_imports_and_signatures_before_the_prefix_window():
    budget = Budget(prefix_tokens=40, suffix_tokens=1, preamble_tokens=200)
    ctx = build(PY, budget=budget)
    assert ctx.anchor > 0
    assert "import os" in ctx.preamble
    assert "def helper(a: int, b: int) -> int: ..." in ctx.preamble
    assert "def main() -> None: ..." not in ctx.preamble  # after the cursor: its tree shifts while typing
    assert "return a + b" not in ctx.preamble  # bodies are elided


def test_the_suffix_is_short_and_made_of_whole_lines():
    ctx = build(PY, budget=Budget(suffix_tokens=8))
    assert len(ctx.suffix) <= 24 and ctx.suffix.endswith("\n")


def test_the_anchor_stays_put_while_the_user_types_forward():
    body = "\n".join(f"def f{i}(x):\n    return x * {i}\n" for i in range(60))
    text = body + "\ndef g(y):\n    "
    doc, cursor = doc_at(text + "<|>")
    budget = Budget(prefix_tokens=100)
    first = context.build(doc, cursor, budget).anchor
    anchors = set()
    typed = "total = y + 1"
    for i in range(1, len(typed) + 1):
        d2, c2 = doc_at(text + typed[:i] + "<|>")
        anchors.add(context.build(d2, c2, budget).anchor)
    assert anchors == {first}
    assert first > 0 and doc.text[first:].startswith("def ")


def test_plain_text_files_get_a_context_without_a_tree():
    ctx = build("first line\nsecond <|>line\n", "plaintext")
    assert ctx.prefix == "first line\nsecond " and ctx.preamble == ""


def test_typing_a_call_on_the_cursor_line_does_not_change_the_preamble():
    head = "import os\n\n" + "".join(f"def util_{i}(a, b):\n    return a * b + {i}\n\n\n" for i in range(40))
    tail = "def main():\n    x = 1\n    "
    budget = Budget(prefix_tokens=30, preamble_tokens=60)  # too small for every signature
    d1, c1 = doc_at(head + tail + "<|>\n")
    d2, c2 = doc_at(head + tail + "util_39(<|>\n")
    assert context.build(d1, c1, budget).preamble == context.build(d2, c2, budget).preamble


def test_the_preamble_does_not_change_as_the_suffix_window_slides_over_a_definition():
    head = "import os\n\n" + "".join(f"def util_{i}(a, b):\n    return a * b + {i}\n\n\n" for i in range(40))
    budget = Budget(prefix_tokens=30, suffix_tokens=12, preamble_tokens=400)
    d1, c1 = doc_at(head + "def main():\n    x = <|>\n\ndef after():\n    pass\n")
    d2, c2 = doc_at(head + "def main():\n    x = os.path.join(<|>\n\ndef after():\n    pass\n")
    assert context.build(d1, c1, budget).preamble == context.build(d2, c2, budget).preamble
