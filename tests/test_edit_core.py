"""The pure core of edits: regions and actions from tree-sitter, rewrite prompts and answers, the
next-edit history, and the region tracker of streaming edits."""

import pytest
from sparkls.edit import actions, nextedit, regions, rewrite
from sparkls.edit.live import RegionTracker, UserEdited
from sparkls.text.document import Document

from tests.conftest import doc_at

STUBS = [
    ("python", "def f(x):\n    <|>pass\n"),
    ("python", 'def f(x):\n    """Doc."""\n    ...<|>\n'),
    ("python", "def f(x):\n    # TODO<|>\n    raise NotImplementedError\n"),
    ("go", "package m\n\nfunc F(x int) int {\n\tpanic(\"TODO\")<|>\n}\n"),
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


def test_the_region_of_a_decorated_method_is_its_whole_lines_with_the_decorator():
    doc, cur = doc_at("class A:\n    @property\n    def v(self):\n        return 1<|>\n\n    x = 2\n")
    r = regions.region_for(doc, cur, cur)
    assert r.kind == "function" and r.name == "v"
    assert r.text(doc) == "    @property\n    def v(self):\n        return 1\n"


def test_a_selection_is_its_own_lines():
    doc = Document.open("file:///t.py", "python", 1, "a = 1\nb = 2\nc = 3\n")
    r = regions.region_for(doc, 7, 9)
    assert (r.kind, r.text(doc)) == ("selection", "b = 2\n")


def test_actions_round_trip_through_their_data():
    a = actions.Action("fix", "file:///t.py", 3, 0, 10, "t", diagnostic="boom")
    assert actions.Action.from_data(a.to_data()) == a
    with pytest.raises(ValueError):
        actions.Action.from_data({"kind": "format-disk"})


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


def test_keystrokes_on_one_line_merge_into_one_hunk_and_an_undo_removes_it():
    h = nextedit.History()
    text = "a = compute(1)\nb = 2\n"
    at = text.index("(")
    for i, ch in enumerate("_v2"):
        h.record(text, at + i, at + i, ch, now=1.0 + i)
        text = text[: at + i] + ch + text[at + i :]
    assert len(h.hunks) == 1
    assert nextedit.describe(h.hunks[0]) == "replaced `compute` with `compute_v2` on line 1"
    assert "replaced `compute` with `compute_v2`" in nextedit.instruction(h)
    h.record(text, at, at + 3, "", now=5.0)
    assert not h.hunks


def test_edits_far_apart_are_separate_hunks():
    h = nextedit.History()
    text = "x = 1\n" * 20
    h.record(text, 0, 1, "y", now=0)
    text = "y" + text[1:]
    h.record(text, 60, 61, "z", now=1)
    assert [hk.line for hk in h.hunks] == [0, 10]


def test_the_next_edit_window_is_whole_lines_around_the_cursor():
    text = "".join(f"l{i}\n" for i in range(20))
    s, e = nextedit.window(text, text.index("l10"), 2, 3)
    assert text[s:e] == "l8\nl9\nl10\nl11\nl12\nl13\n"


def test_the_tracker_shifts_the_region_for_edits_above_and_stops_for_the_users_edits_inside():
    doc = Document.open("file:///t.py", "python", 1, "head\nREGION\ntail\n")
    t = RegionTracker(doc, 5, 12)
    above = Document.open("file:///t.py", "python", 2, "new head\nREGION\ntail\n")
    assert t.locate(above, [(2, 0, 0, "new ")]) and (t.start, t.end) == (9, 16)
    t.expected = "REGION2\n"
    ours = Document.open("file:///t.py", "python", 3, "new head\nREGION2\ntail\n")
    assert t.locate(ours, [(3, 15, 15, "2")]) and t.expected is None
    theirs = Document.open("file:///t.py", "python", 4, "new head\nREGXION2\ntail\n")
    with pytest.raises(UserEdited):
        t.locate(theirs, [(4, 12, 12, "X")])


@pytest.mark.parametrize(("old", "new", "said"), [
    ("    count = len(values)", "    n = len(values)", "replaced `count` with `n` on line 1"),
    ("f(a)", "f(a, b)", "inserted `, b` on line 1"),
    ("f(a, b)", "f(a)", "deleted `, b` from line 1"),
    ("total = 1", "total_sum = 1", "replaced `total` with `total_sum` on line 1"),
])
def test_a_hunk_is_described_in_words(old, new, said):
    assert nextedit.describe(nextedit.Hunk(0, [old], [new], 0.0)) == said


def test_lines_the_model_echoed_from_outside_the_region_are_dropped():
    before, region, after = "package m\n\nimport \"fmt\"\n\n", "func f() {\n\tx := 1\n}\n", "\nfunc g() {}\n"
    answer = ["package m\n", "\n", "import \"fmt\"\n", "\n", "func f() {\n", "\tx := 2\n", "}\n", "\n", "func g() {}\n"]
    assert rewrite.trim_echo(answer, region, before, after) == ["func f() {\n", "\tx := 2\n", "}\n"]
    # A line the region itself holds is never dropped, even if it also appears outside.
    assert rewrite.trim_echo(["}\n"], "}\n", "}\n", "}\n") == ["}\n"]


def test_the_session_follows_changes_and_a_reopened_document_starts_afresh():
    from sparkls.edit.service import EditService
    from sparkls.session import Session

    s = Session()
    edits = EditService(s)  # hears of every change: the next-edit history
    doc = s.open("file:///t.py", "python", 1, "a = 1\n")
    s.update(s.change(doc, 4, 5, "2", 2))
    assert s.changes("file:///t.py", 1) == [(2, 4, 5, "2")]
    assert s.snapshot("file:///t.py").text == "a = 2\n"
    assert len(edits.histories["file:///t.py"].hunks) == 1
    s.open("file:///t.py", "python", 1, "b = 1\n")  # closed and opened again: versions restart
    assert s.changes("file:///t.py", 0) is None  # the log of the old lifetime is gone
    assert "file:///t.py" not in edits.histories


# ---- secrets: the model sees numbered placeholders, the rewrite gets the secrets back -----------------------

SECRET_FN = 'import os\n\n\ndef client():\n    key = "AKIAIOSFODNN7EXAMPLE"\n    return Client(key)\n'


def rewritten(answer: str, instruction: str = "add retries", text: str = SECRET_FN):
    """A rewrite of the function in `text` by a fake engine answering `answer` (a leaked secret answers LEAKED)."""
    import asyncio

    from sparkls.edit import generate
    from sparkls.engine.fake import FakeEngine
    from sparkls.settings import Settings

    doc = Document.open("file:///t.py", "python", 1, text)
    prompts: list[str] = []

    def script(prompt: str) -> str:
        prompts.append(prompt)
        return "LEAKED\n```\n" if "AKIAIOSFODNN7EXAMPLE" in prompt else answer + "```\n"

    start = text.index("def client")
    result = asyncio.run(generate.rewrite_region(doc, start, len(text), instruction, FakeEngine(script), Settings()))
    return result, prompts


def test_the_rewrite_prompt_shows_a_numbered_placeholder_for_each_secret_in_the_region():
    doc = Document.open("file:///t.py", "python", 1, SECRET_FN)
    p = rewrite.render(doc, SECRET_FN.index("def"), len(SECRET_FN),
                       'use the token "ghp_16C7e42F292c6912E7710c838347Ae178B4a"')
    assert 'key = "<redacted-1>"' in p.text and "AKIA" not in p.text
    assert 'Instruction: use the token "<redacted>"' in p.text  # the instruction is redacted too
    assert p.secrets == (("<redacted-1>", "AKIAIOSFODNN7EXAMPLE"),) and "AKIAIOSFODNN7EXAMPLE" in p.region


def test_a_rewrite_gets_the_secret_back_where_the_model_kept_its_placeholder():
    answer = 'def client():\n    key = "<redacted-1>"\n    return Client(key, retries=3)\n'
    result, prompts = rewritten(answer)
    assert result.text == 'def client():\n    key = "AKIAIOSFODNN7EXAMPLE"\n    return Client(key, retries=3)\n'
    assert all(e.text == ", retries=3" for e in result.edits)  # the secret's line is not touched
    assert len(prompts) == 1 and "AKIAIOSFODNN7EXAMPLE" not in prompts[0]


def test_a_rewrite_that_garbles_a_placeholder_is_not_applied():
    result, _ = rewritten('def client():\n    key = "<redacted>"\n    return Client(key, retries=3)\n')
    assert result.edits == [] and result.text == result.original


def test_a_rewrite_of_a_private_key_block_keeps_its_lines():
    key = ('KEY = """-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA3Tz2mr7SZiAMfQyuvBjM9Oi\n'
           'Z1BjP5CE/Wm/Rr500PRK+Lh9x5eJPo5CAZ3/ANBE0\n-----END RSA PRIVATE KEY-----"""\n')
    text = f"def client():\n    {key}    return Client(KEY)\n"
    answer = ('def client():\n    KEY = """-----BEGIN RSA PRIVATE KEY-----\n<redacted-1>\n'
              '-----END RSA PRIVATE KEY-----"""\n    return Client(KEY, retries=3)\n')
    result, prompts = rewritten(answer, text=text)
    assert "MIIE" not in prompts[0] and result.text == text.replace("Client(KEY)", "Client(KEY, retries=3)")


@pytest.mark.parametrize(("answer", "offered"), [
    ('a = compute_v2(1)\nkey = "<redacted-1>"\nb = compute_v2(2)\n', True),
    ("a = compute_v2(1)\nb = compute_v2(2)\n", False),  # the secret's line dropped
    ('a = compute_v2(1)\nkey = "AKIA0000000000000000"\nb = compute_v2(2)\n', False),  # changed
])
def test_a_predicted_next_edit_never_drops_or_changes_a_secret(answer, offered):
    import asyncio

    from sparkls.edit import generate
    from sparkls.engine.fake import FakeEngine
    from sparkls.settings import Settings

    text = 'a = compute(1)\nkey = "AKIAIOSFODNN7EXAMPLE"\nb = compute(2)\n'
    doc = Document.open("file:///t.py", "python", 1, text)
    engine = FakeEngine(lambda p: "LEAKED```\n" if "AKIAIOSFODNN7EXAMPLE" in p else answer + "```\n")
    result = asyncio.run(generate.predict(doc, 0, None, engine, Settings()))
    if offered:
        assert [e.text for e in result.edits] == ["_v2", "_v2"]
    else:
        assert result.edits == []
