"""Rewrite prompts and answers: the instruction last, completed lines up to the fence, the original tail kept,
the region's indentation, lines echoed from outside dropped, numbered placeholders for secrets."""

from sparkls.edit import rewrite
from sparkls.text.document import Document

from tests.edit_support import SECRET_FN


def test_the_rewrite_prompt_puts_the_instruction_last_and_opens_the_answer_fence():
    doc = Document.open("file:///t.py", "python", 1, "import os\n\ndef f():\n    pass\n")
    p = rewrite.render(doc, 11, len(doc.text), "make it faster")
    assert p.text.index("def f():") < p.text.index("Instruction: make it faster")
    assert p.text.endswith("<|im_start|>assistant\n```python\n")
    assert p.region == "def f():\n    pass\n"


def test_the_line_reader_yields_completed_lines_and_stops_at_the_fence():
    r = rewrite.LineReader()
    assert r.feed("def f():\n    ret") == ["def f():\n"]
    assert r.feed("urn 1\n``") == ["    return 1\n"]
    assert r.feed("`\nprint('chatter')\n") == []
    assert r.done and r.lines == ["def f():\n", "    return 1\n"]


def test_compose_keeps_the_original_tail_until_the_rewrite_is_final():
    original = "a\nb\nc\nd\n"
    assert rewrite.compose(original, ["a\n", "B\n"]) == "a\nB\nc\nd\n"
    assert rewrite.compose(original, ["a\n", "B\n"], final=True) == "a\nB\n"
    assert rewrite.compose(original, []) == original


def test_reindent_restores_the_regions_indentation():
    assert rewrite.reindent(["def f():\n", "    pass\n"], "    ") == ["    def f():\n", "        pass\n"]
    assert rewrite.reindent(["    x\n"], "    ") == ["    x\n"]


def test_lines_the_model_echoed_from_outside_the_region_are_dropped():
    before, region, after = 'package m\n\nimport "fmt"\n\n', "func f() {\n\tx := 1\n}\n", "\nfunc g() {}\n"
    answer = ["package m\n", "\n", 'import "fmt"\n', "\n", "func f() {\n", "\tx := 2\n", "}\n", "\n", "func g() {}\n"]
    assert rewrite.trim_echo(answer, region, before, after) == ["func f() {\n", "\tx := 2\n", "}\n"]
    # A line the region itself holds is never dropped, even if it also appears outside.
    assert rewrite.trim_echo(["}\n"], "}\n", "}\n", "}\n") == ["}\n"]


def test_the_rewrite_prompt_shows_a_numbered_placeholder_for_each_secret_in_the_region():
    doc = Document.open("file:///t.py", "python", 1, SECRET_FN)
    p = rewrite.render(
        doc, SECRET_FN.index("def"), len(SECRET_FN), 'use the token "ghp_16C7e42F292c6912E7710c838347Ae178B4a"'
    )
    assert 'key = "<redacted-1>"' in p.text and "AKIA" not in p.text
    assert 'Instruction: use the token "<redacted>"' in p.text  # the instruction is redacted too
    assert p.secrets == (("<redacted-1>", "AKIAIOSFODNN7EXAMPLE"),) and "AKIAIOSFODNN7EXAMPLE" in p.region
