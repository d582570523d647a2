"""Context at a cursor: mode, scope limits, stable anchors, preamble, token healing."""

import itertools

from sparkls.completion import context
from sparkls.completion.context import Budget

from tests.completion_support import LONG_DOC
from tests.conftest import doc_at

PY = """import os
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
"""


def build(text, language="python", budget=None, layout="anchored"):
    doc, cursor = doc_at(text, language)
    return context.build(doc, cursor, budget, layout)


def test_a_blank_indented_line_in_a_body_is_multi_line_and_ends_at_its_dedent():
    ctx = build(PY)
    assert ctx.mode == "multi"
    assert ctx.min_indent == 8
    assert ctx.heal == "        "
    assert ctx.middle == "    def get(self) -> Any:\n"  # the line above the cursor's, then the cursor's less its indent
    assert ctx.prefix.endswith("self.v = v\n\n")


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
    ctx = build(PY, budget=budget, layout="prefix")
    assert ctx.start > 0
    assert "import os" in ctx.preamble
    assert "def helper(a: int, b: int) -> int: ..." in ctx.preamble
    assert "def main() -> None: ..." not in ctx.preamble  # after the cursor: its tree shifts while typing
    assert "return a + b" not in ctx.preamble  # bodies are elided


def test_the_suffix_is_short_and_made_of_whole_lines():
    ctx = build(PY, budget=Budget(suffix_tokens=8), layout="prefix")
    assert len(ctx.suffix) <= 24 and ctx.suffix.endswith("\n")


def test_the_prefix_layout_window_start_stays_put_while_the_user_types_forward():
    body = "\n".join(f"def f{i}(x):\n    return x * {i}\n" for i in range(60))
    text = body + "\ndef g(y):\n    "
    doc, cursor = doc_at(text + "<|>")
    budget = Budget(prefix_tokens=100)
    first = context.build(doc, cursor, budget, "prefix").start
    anchors = set()
    typed = "total = y + 1"
    for i in range(1, len(typed) + 1):
        d2, c2 = doc_at(text + typed[:i] + "<|>")
        anchors.add(context.build(d2, c2, budget, "prefix").start)
    assert anchors == {first}
    assert first > 0 and doc.text[first:].startswith("def ")


def test_plain_text_files_get_a_context_without_a_tree():
    ctx = build("first line\nsecond <|>line\n", "plaintext")
    assert ctx.prefix + ctx.middle == "first line\nsecond " and ctx.preamble == "" and ctx.suffix == "line\n"


def test_typing_a_call_on_the_cursor_line_does_not_change_the_preamble():
    head = "import os\n\n" + "".join(f"def util_{i}(a, b):\n    return a * b + {i}\n\n\n" for i in range(40))
    tail = "def main():\n    x = 1\n    "
    budget = Budget(prefix_tokens=30, preamble_tokens=60)  # too small for every signature
    d1, c1 = doc_at(head + tail + "<|>\n")
    d2, c2 = doc_at(head + tail + "util_39(<|>\n")
    assert context.build(d1, c1, budget, "prefix").preamble == context.build(d2, c2, budget, "prefix").preamble
    assert context.build(d1, c1, budget).preamble == context.build(d2, c2, budget).preamble


def test_the_preamble_does_not_change_as_the_suffix_window_slides_over_a_definition():
    head = "import os\n\n" + "".join(f"def util_{i}(a, b):\n    return a * b + {i}\n\n\n" for i in range(40))
    budget = Budget(prefix_tokens=30, suffix_tokens=12, preamble_tokens=400)
    d1, c1 = doc_at(head + "def main():\n    x = <|>\n\ndef after():\n    pass\n")
    d2, c2 = doc_at(head + "def main():\n    x = os.path.join(<|>\n\ndef after():\n    pass\n")
    assert context.build(d1, c1, budget).preamble == context.build(d2, c2, budget).preamble


# -- the anchored layout: a frame kept while the user types ---------------------------------------------


def type_along(text: str, typed: str, budget: Budget | None = None, language: str = "python"):
    """Contexts for each keystroke of `typed` at the cursor of `text`, each built on the last one's frame."""
    doc, cursor = doc_at(text, language)
    ctxs = [context.build(doc, cursor, budget)]
    for ch in typed:
        if ch == "\b":
            doc = doc.edit(cursor - 1, cursor, "", doc.version + 1)
            cursor -= 1
        else:
            doc = doc.edit(cursor, cursor, ch, doc.version + 1)
            cursor += 1
        ctxs.append(context.build(doc, cursor, budget, "anchored", ctxs[-1].frame))
    return ctxs


def test_typing_keeps_the_frame_and_only_the_middle_grows():
    ctxs = type_along("def f(xs):\n    total = 0\n    <|>\n    return total\n", "for x in xs")
    assert all(c.frame is ctxs[0].frame for c in ctxs)
    assert ctxs[-1].middle == "    total = 0\n    for x in xs"
    assert ctxs[-1].suffix == ctxs[0].suffix == "\n    return total\n"


def test_the_frame_stays_across_enter_and_while_deleting_back_to_the_anchor():
    ctxs = type_along("def f(xs):\n    total = 0\n    <|>\n    return total\n", "x = 1\n    y\b\b\b\b\b\b")
    assert all(c.frame is ctxs[0].frame for c in ctxs)
    assert ctxs[6].middle == "    total = 0\n    x = 1\n"  # after Enter + indentation (healed)


def test_the_anchor_moves_when_the_cursor_leaves_the_typed_span():
    doc, cursor = doc_at("a = 1\nb = 2\nc = 3\nd = <|>4\n")
    first = context.build(doc, cursor)
    up = doc.text.index("3")  # the cursor moves up a line
    moved = context.build(doc, up, None, "anchored", first.frame)
    assert moved.frame is not first.frame and moved.suffix.startswith("3\nd = 4")
    assert moved.middle == "b = 2\nc = "


def test_the_anchor_moves_when_the_typed_span_outgrows_its_budget():
    budget = Budget(typed_tokens=10)  # 30 characters
    ctxs = type_along("def f():\n    <|>\n", "x = 1\n    y = 2\n    z = 3\n    w = 4\n", budget)
    frames = []
    for c in ctxs:
        if c.frame not in frames:
            frames.append(c.frame)
        assert len(ctxs[0].middle) <= 30 or c.frame is not ctxs[0].frame
    assert len(frames) == 2
    assert all(len(c.middle) <= 30 for c in ctxs)


def test_an_edit_before_the_anchor_makes_a_new_frame():
    doc, cursor = doc_at("import os\n\ndef f():\n    x<|>\n")
    first = context.build(doc, cursor)
    doc2 = doc.edit(0, 0, "import re\n", 2)
    again = context.build(doc2, cursor + len("import re\n"), None, "anchored", first.frame)
    assert again.frame is not first.frame and again.prefix.startswith("import re\n")


def test_the_fresh_anchor_is_the_start_of_the_line_above_the_cursor():
    ctx = build("def f(x):\n    y = x\n    return y<|>\n")
    assert ctx.middle == "    y = x\n    return y" and ctx.prefix == "def f(x):\n"


def test_a_blank_line_above_the_cursor_is_not_taken_into_the_typed_text():
    # The answer would start with an empty line, which the model reads as finished: it stopped at once on
    # HumanEval tasks whose gap follows a docstring and a blank line.
    ctx = build('def f(x):\n    """Doc."""\n\n<|>    return y\n')
    assert ctx.middle == "" and ctx.prefix.endswith('"""\n\n')
    assert build("def f(x):\n\n    y = x\n<|>").middle == "    y = x\n"


def test_the_suffix_starts_with_the_rest_of_the_cursor_line():
    ctx = build("x = foo(<|>a, b)\nprint(x)\n")
    assert ctx.suffix == "a, b)\nprint(x)\n" and ctx.middle == "x = foo("


def test_a_missing_closing_brace_is_counted_in_brace_languages():
    assert build("func f() {\n\tif x {\n\t\ty()\n\t<|>\n}\n", "go").closers_needed == 1
    assert build("func f() {\n\t<|>\n}\n", "go").closers_needed == 0
    assert build("def f():\n    <|>\n").closers_needed == 0


# -- the end of a line: finish it, or the next line(s) -------------------------------------------------


def test_a_line_finished_with_a_closing_character_asks_for_the_next_line():
    ctx = build("def f(x):\n    y = g(x)<|>\n    return y\n")
    assert ctx.newline and ctx.mode == "single" and ctx.middle.endswith("y = g(x)\n")


def test_a_block_opener_at_the_end_of_a_line_asks_for_the_block_on_new_lines():
    ctx = build("def f(x):\n    if x > 0:<|>\n    return 0\n")
    assert ctx.newline and ctx.mode == "multi" and ctx.min_indent == 5
    ctx = build("function f(x) {<|>\n}\n", "javascript")
    assert ctx.newline and ctx.mode == "multi"


def test_a_finished_line_ending_in_a_word_lets_the_model_decide():
    ctx = build("def f(x):\n    y = x * tot<|>\n    return y\n")
    assert ctx.line_done and not ctx.newline and ctx.mode == "single"


def test_an_unfinished_line_is_not_done():
    for text in ("def f(x):\n    return x +<|>\n", "if x<|>\n", "y = [1, 2<|>\n", "x = foo(a, b<|>\n"):
        ctx = build(text)
        assert not ctx.line_done and not ctx.newline, text


def test_a_line_ending_in_a_comma_lets_the_model_decide_between_this_line_and_the_next():
    for text in ("x = foo(a,<|>\n", "d = {\n    'one': 1,\n    'two': 2,<|>\n    'four': 4,\n}\n"):
        ctx = build(text)
        assert ctx.line_done and not ctx.newline and ctx.mode == "single", text
    assert not build("x = foo(a,<|> b)\n").line_done  # mid-line: the rest of the line
    assert not build("# a, b,<|>\nx = 1\n").line_done  # a comment goes on on its line


def test_a_missing_line_above_an_indented_one_keeps_the_bodys_indentation():
    # The parser recovers from `    return y` after `    y = x` with an ERROR node and takes a later block for the
    # function's body; the scope still ends below the indentation of the first line after `def ...:`.
    ctx = build("def f(x):\n    y = x\n<|>        return y\n    else:\n        return 0\n")
    assert ctx.insert_lines and ctx.min_indent == 4
    assert build("def f(x): return x\n<|>\n").min_indent is None


def test_a_missing_first_line_of_a_body_may_open_the_block_the_line_below_is_in():
    # `        if k < 2:` is missing above `            return False`: the body's indentation is not the line
    # below's, and an answer at 8 columns must not end the suggestion before it starts.
    ctx = build("def f(n):\n    def is_prime(k):\n<|>            return False\n        return True\n")
    assert ctx.insert_lines and ctx.min_indent == 5


def test_the_end_of_a_line_inside_a_string_is_not_a_new_line():
    ctx = build('s = """first line<|>\nsecond"""\n')
    assert not ctx.newline and not ctx.line_done


def test_typing_past_a_finished_line_keeps_the_frame():
    ctxs = type_along("def f(xs):\n    <|>\n    return 0\n", "y = g(xs)\n    ")
    assert all(c.frame is ctxs[0].frame for c in ctxs)
    assert ctxs[9].newline and ctxs[9].middle.endswith("y = g(xs)\n")  # after ")": the next line is asked for
    assert ctxs[10].middle == ctxs[9].middle  # Enter: the same prompt, the KV cache already has it


def test_a_colon_that_opens_no_block_asks_for_no_new_line():
    for text in ("f = lambda x:<|>\n", "class A:\n    name:<|>\n", "d = {\n    'k':<|>\n}\n"):
        assert not build(text).newline, text
    assert build("try:<|>\n    pass\nexcept E:\n    pass\n").newline


def test_the_end_of_a_line_comment_is_still_the_comment():
    ctx = build("def f():\n    # call foo()<|>\n    pass\n")
    assert not ctx.newline and not ctx.line_done and ctx.mode == "single"


def test_a_same_length_edit_far_above_the_anchor_makes_a_new_frame():
    body = "".join(f"def f{i}(x):\n    return x * {i}\n\n\n" for i in range(40))
    doc, cursor = doc_at("import os\n\n\n" + body + "def g():\n    ret<|>\n")
    first = context.build(doc, cursor, Budget(prefix_tokens=60))
    edited = doc.edit(7, 9, "re", 2)  # `import os` -> `import re`: no offset moves
    again = context.build(edited, cursor, Budget(prefix_tokens=60), "anchored", first.frame)
    assert again.frame is not first.frame


def test_the_prefix_window_never_ends_where_it_starts():
    body = "def f():\n" + "".join(f"    x{i} = {i}\n" for i in range(400))
    ctx = build("import os\n\n\n" + body + "\n\ndef g():\n    ret<|>\n", budget=Budget(prefix_tokens=100))
    assert ctx.prefix.strip() and ctx.frame.start < ctx.frame.anchor


def test_crlf_documents_get_crlf_newlines():
    doc, cursor = doc_at("def f(x):\r\n    y = g(x)<|>\r\n    return y\r\n")
    ctx = context.build(doc, cursor)
    assert ctx.newline and ctx.middle.endswith("y = g(x)\r\n") and ctx.eol == "\r\n"


# -- secrets: the prompt shows them redacted, the frame keeps the document's text ---------------------------

SECRETS = """import os

AWS_KEY = "AKIAIOSFODNN7EXAMPLE"


def connect(host: str, token: str = "ghp_16C7e42F292c6912E7710c838347Ae178B4a") -> None:
    pass


def main() -> None:
    api_key = "Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MA"
    <|>
    client = make(password="wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
"""


def test_the_prompt_shows_secrets_redacted_while_the_frame_keeps_the_documents_text():
    ctxs = type_along(SECRETS, "conn\nx", Budget(prefix_tokens=30, preamble_tokens=200))
    shown = [context.redacted(c) for c in ctxs]
    texts = [s.preamble + s.prefix + s.suffix + s.middle for s in shown]
    for secret in (
        "AKIAIOSFODNN7EXAMPLE",
        "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
        "Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MA",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    ):
        assert not any(secret in t for t in texts), secret
    assert 'token: str = "<redacted>"' in shown[0].preamble  # the outline keeps the signature's shape
    assert shown[0].middle == '    api_key = "<redacted>"\n' and 'password="<redacted>"' in shown[0].suffix
    assert all(c.frame is ctxs[0].frame for c in ctxs) and "Zm9vYmFy" in ctxs[0].frame.suffix + ctxs[0].middle
    # Typing still only appends to the typed text the prompt shows.
    assert all(b.middle.startswith(a.middle) for a, b in itertools.pairwise(shown))
    assert shown[-1].middle == '    api_key = "<redacted>"\n    conn\nx'


def test_moving_to_another_function_keeps_the_outline_so_the_prompts_head_is_reused():
    # Each function calls another, far away: an outline ranked by what the place calls would differ per place.
    defs = "".join(
        f"def helper_{i}(value_{i}: int) -> int:\n    part = helper_{i // 2}(value_{i})\n"
        f"    total = part * {i}\n    return total\n\n\n"
        for i in range(40)
    )
    text = "import os\nimport sys\n\n\n" + defs
    budget = Budget(prefix_tokens=60, suffix_tokens=8, preamble_tokens=60)  # the outline holds only the first few
    heads = set()
    for i in (12, 25, 39):  # places far apart, each in another function
        cursor = text.index("    return total\n", text.index(f"def helper_{i}("))
        doc, at = doc_at(text[:cursor] + "<|>" + text[cursor:])
        ctx = context.build(doc, at, budget)
        assert ctx.preamble.startswith("import os\nimport sys\ndef helper_0(")
        heads.add(ctx.preamble)
    assert len(heads) == 1


def test_a_short_first_window_starts_at_the_enclosing_definition_when_it_is_near():
    doc, cursor = doc_at(LONG_DOC)
    ctx = context.build(doc, cursor, Budget(96, 48, 384, first=True))
    assert ctx.prefix.startswith("    def render(self, rows):\n")  # the method: the class starts too far up
    assert ctx.preamble.endswith("class Report: ...\n    def setup(self): ...")  # the outline has the class
    grid = context.build(doc, cursor, Budget(96, 48, 384))
    assert not grid.prefix.startswith("    def render")  # the usual window starts on its grid, mid-method


def test_a_short_first_window_far_inside_a_long_definition_is_the_last_lines_within_its_budget():
    doc, cursor = doc_at(LONG_DOC)
    budget = Budget(24, 12, 384, first=True)
    ctx = context.build(doc, cursor, budget)
    assert "def render" not in ctx.prefix and ctx.prefix.startswith("        out.append(")
    assert len(ctx.prefix) <= budget.chars(24)
