"""Stopping and trimming: end of line, end of scope, suffix repeats, brackets."""

from sparkls.completion import context
from sparkls.completion.stopping import StopPolicy, finalize, trim_line_overlap, unheal

from tests.conftest import doc_at


def run(text_with_cursor, generated, language="python"):
    doc, cursor = doc_at(text_with_cursor, language)
    ctx = context.build(doc, cursor)
    policy = StopPolicy(ctx)
    out = ""
    for ch in generated:  # feed one character at a time, like a token stream
        out += ch
        cut = policy.feed(out)
        if cut is not None:
            return finalize(out[:cut], ctx)
    return finalize(out, ctx)


def test_single_line_mode_stops_at_the_end_of_the_line():
    assert run("def f(x):\n    return x.up<|>\n", "per()\n    print('drift')\n") == "per()"


def test_multi_line_stops_when_the_code_leaves_the_block():
    got = run(
        "def f(xs):\n    <|>\n",
        "    total = 0\n    for x in xs:\n        total += x\n    return total\n\ndef g():\n    pass\n",
    )
    assert got == "    total = 0\n    for x in xs:\n        total += x\n    return total"


def test_multi_line_stops_before_a_markdown_fence_in_a_code_file():
    # The 1.5B Instruct at `Theme(|` (a cross-file task): the arguments, then a fence and a chat-style explanation.
    generated = "styles=DEFAULT_STYLES)\n```\n\nThis code defines a theme.\n"
    assert run("from x import Theme\n\nDEFAULT = Theme(<|>\n", generated) == "styles=DEFAULT_STYLES)"
    # A fence inside a docstring the suggestion opened is the docstring's Markdown: kept.
    doc = '    """Parse.\n\n    ```\n    parse("a")\n    ```\n    """\n    return 1\n\n\n'
    assert run("def parse(s):\n<|>\n", doc) == doc.rstrip("\n")


def test_multi_line_stops_before_repeating_the_suffix():
    got = run("def f(x):\n<|>    return y\n", "    y = x * 2\n    return y\n")
    assert got == "    y = x * 2\n"


def test_brace_languages_stop_before_a_closing_brace_the_suffix_already_has():
    got = run("func f() int {\n\t<|>\n}\n", "x := 1\n\treturn x\n}\n\nfunc g() {}\n", "go")
    assert got == "x := 1\n\treturn x"


def test_a_closing_brace_the_document_lacks_is_offered_and_ends_the_suggestion():
    got = run("func f(x int) int {\n\tif x > 0 {\n\t\treturn 1\n<|>\n\treturn 0\n}\n", "\t}\n\treturn 0\n}\n", "go")
    assert got == "\t}"


def test_at_the_end_of_a_finished_statement_the_next_line_is_offered():
    got = run("def f(x):\n    y = x * 2<|>\n    return y\n", "\n    z = y + 1\n    return z\n")
    assert got == "\n    z = y + 1"


def test_a_newline_answer_in_the_middle_of_a_line_stops_generation_at_once():
    doc, cursor = doc_at("x = foo(a<|>, b)\n")
    policy = StopPolicy(context.build(doc, cursor))
    assert policy.feed("\n") == 0


def test_an_unfinished_line_is_finished_on_the_same_line():
    assert run("def f(x):\n    return x +<|>\n", " 1\n    print(x)\n") == " 1"


def test_after_a_block_opener_the_block_follows_on_new_lines():
    got = run("def f(x):\n    if x > 0:<|>\n    return 0\n", "\n        return x\n    return 0\n")
    assert got == "\n        return x"


def test_after_an_opening_brace_the_block_follows_on_new_lines():
    got = run("function f(x) {<|>\n}\n", "\n  return x + 1;\n}\n", "javascript")
    assert got == "\n  return x + 1;"


def test_two_blank_lines_end_a_suggestion():
    assert run("x = 1\n<|>", "y = 2\n\n\nprint('unrelated')\n") == "y = 2"


def test_closing_brackets_already_on_the_line_are_not_duplicated():
    assert trim_line_overlap("print(", "x)", ")") == "x"


def test_a_balanced_call_is_kept_whole_before_an_existing_closer():
    assert trim_line_overlap("print(", "f(x)", ")") == "f(x)"


def test_the_rest_of_the_line_written_again_by_the_model_is_cut():
    assert trim_line_overlap("return [i for i in xs if ", "i > 0]:", "]") == "i > 0"


def test_healed_indentation_is_removed_from_the_model_output():
    assert unheal("        return 1", "        ") == "return 1"
    assert unheal("    ", "        ") is None
    assert unheal("    return 1", "        ") == "return 1"


def test_a_block_that_closes_its_own_brace_keeps_it_even_when_the_suffix_starts_with_one():
    got = run(
        "function f(xs) {\n  let t = 0;\n<|>\n  return t;\n}\n",
        "  for (const x of xs) {\n    t += x;\n  }\n  return t;\n}\n",
        "javascript",
    )
    assert got == "  for (const x of xs) {\n    t += x;\n  }"
    got = run(
        "function f(xs) {\n  let t = 0;\n  <|>\n}\n", "for (const x of xs) {\n    t += x;\n  }\n}\n", "javascript"
    )
    assert got == "for (const x of xs) {\n    t += x;\n  }"


def test_a_newline_answer_after_an_unfinished_line_stops_at_once():
    doc, cursor = doc_at("def f(a, b):\n    return a +<|>\n")
    assert StopPolicy(context.build(doc, cursor)).feed("\n") == 0
    assert run("def f(a, b):\n    return a +<|>\n", "\n        b\n") == ""


def test_a_next_line_the_code_after_the_cursor_already_has_is_not_offered():
    assert run("def f(x):\n    y = x * tot<|>\n    return y\n", "\n    return y\n") == ""
    assert run("function f(x) {\n  return x;<|>\n}\n", "}\n", "javascript") == ""
    assert run("def f():<|>\n    return 1\n", "    return 1\n\ndef g():\n") == ""


def test_a_closing_brace_one_level_deeper_than_the_next_lines_is_offered_not_taken_for_it():
    # The missing `}` closes the `if`; the `}` after the cursor closes the `for`, two columns further left.
    text = "for (const x of xs) {\n  if (x) {\n    t += x;<|>\n}\n"
    assert run(text, "  }\n", "javascript") == "  }"  # the pipeline puts the newline the prompt assumed before it
    assert run(text.replace("t += x;<|>", "t += x;\n<|>"), "  }\n", "javascript") == "  }"
    assert run(text.replace("t += x;<|>\n}", "t += x;<|>\n  }"), "  }\n", "javascript") == ""


def test_a_newline_answer_in_a_crlf_file_is_recognised_and_keeps_crlf():
    got = run("def f(x):\r\n    y = x * tot<|>\r\n    return y\r\n", "\r\n    z = y + 1\r\n    w")
    assert got == "\r\n    z = y + 1"


def test_a_newline_answer_after_a_comma_gives_the_next_item_and_a_same_line_answer_finishes_the_line():
    dict_text = "d = {\n    'one': 1,\n    'two': 2,<|>\n    'four': 4,\n}\n"
    assert run(dict_text, "\n    'three': 3,\n    'four': 4,\n") == "\n    'three': 3,"
    assert run(dict_text, "\n    'four': 4,\n") == ""  # the code below already starts with that item
    assert run("x = foo(a,<|>\n", " b)\nprint(x)\n") == " b)"
