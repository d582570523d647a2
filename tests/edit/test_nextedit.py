"""The next-edit history (keystrokes merged into hunks), the diff prompt that grows by appending, and its answer."""

import math

import pytest
from sparkls.edit import nextedit
from sparkls.text.document import Document


def test_keystrokes_on_one_line_merge_into_one_hunk_and_an_undo_removes_it():
    h = nextedit.History()
    text = "a = compute(1)\nb = 2\n"
    at = text.index("(")
    for i, ch in enumerate("_v2"):
        h.record(text, at + i, at + i, ch, now=1.0 + i)
        text = text[: at + i] + ch + text[at + i :]
    assert len(h.hunks) == 1
    assert (h.hunks[0].old, h.hunks[0].new) == (["a = compute(1)"], ["a = compute_v2(1)"])
    h.record(text, at, at + 3, "", now=5.0)
    assert not h.hunks


def test_edits_far_apart_are_separate_hunks():
    h = nextedit.History()
    text = "x = 1\n" * 20
    h.record(text, 0, 1, "y", now=0)
    text = "y" + text[1:]
    h.record(text, 60, 61, "z", now=1)
    assert [hk.line for hk in h.hunks] == [0, 10]


CODE = "".join(f"v{i} = compute({i})\n" for i in range(40))


def edited(text: str, history: nextedit.History, old: str, new: str, now: float) -> str:
    at = text.index(old)
    history.record(text, at, at + len(old), new, now=now)
    return text[:at] + new + text[at + len(old) :]


def test_the_prompt_is_the_file_before_the_edits_then_their_diff_then_a_hunk_at_the_cursor():
    h = nextedit.History()
    text = edited(CODE, h, "compute(3)", "compute_v2(3)", 1.0)
    text = edited(text, h, "compute(4)", "compute_v2(4)", 40.0)
    doc = Document.open("file:///w/m.py", "python", 3, text)
    p = nextedit.render(doc, text.index("v5 = "), h, "m.py", above=60, below=60)
    head, rest = p.text.split("<|file_sep|>m.py.diff\n")
    assert head == "<|file_sep|>m.py\n" + CODE  # as it was before the edits the diff shows
    assert rest == (
        "--- a/m.py\n+++ b/m.py\n@@ -4,1 +4,1 @@\n-v3 = compute(3)\n+v3 = compute_v2(3)\n"
        "@@ -5,1 +5,1 @@\n-v4 = compute(4)\n+v4 = compute_v2(4)\n"
        "@@ -6 +6 @@\n-v5 = compute(5)\n"
    )
    assert p.removed == "-v5 = compute(5)\n"


def test_the_hunk_at_the_cursor_has_as_many_context_lines_as_asked():
    h = nextedit.History()
    text = edited(CODE, h, "compute(3)", "compute_v2(3)", 1.0)
    doc = Document.open("file:///w/m.py", "python", 2, text)
    cursor = text.index("v5 = ")
    for n, hunk in ((1, "@@ -5 +5 @@\n v4 = compute(4)\n-v5 = compute(5)\n"), (0, "@@ -6 +6 @@\n-v5 = compute(5)\n")):
        p = nextedit.render(doc, cursor, h, "m.py", context_lines=n)
        assert p.text.endswith("+v3 = compute_v2(3)\n" + hunk)
        assert (p.line, p.context) == (5, 5 - n)


def test_at_the_end_of_the_file_the_hunk_shows_the_last_line_so_the_model_can_add_after_it():
    h = nextedit.History()
    text = edited(CODE, h, "compute(3)", "compute_v2(3)", 1.0)
    doc = Document.open("file:///w/m.py", "python", 2, text)
    p = nextedit.render(doc, len(text), h, "m.py", context_lines=0)  # the line after the last "\n"
    assert p.text.endswith("@@ -40 +40 @@\n v39 = compute(39)\n") and p.removed == ""
    got = nextedit.parse(p, "+v40 = compute(40)\n ")
    assert got is not None and (got.first, got.last, got.added) == (40, 40, ["v40 = compute(40)\n"])


def test_a_new_edit_near_the_last_prediction_appends_to_its_prompt():
    h = nextedit.History()
    text = edited(CODE, h, "compute(3)", "compute_v2(3)", 1.0)
    doc = Document.open("file:///w/m.py", "python", 2, text)
    p1 = nextedit.render(doc, text.index("v4 = "), h, "m.py")
    text = edited(text, h, "compute(4)", "compute_v2(4)", 40.0)
    doc = Document.open("file:///w/m.py", "python", 3, text)
    p2 = nextedit.render(doc, text.index("v5 = "), h, "m.py", frame=p1.frame)
    assert p2.frame == p1.frame
    shared = p1.text[: p1.text.rindex("@@ -")]  # all but the hunk at the cursor
    assert p2.text.startswith(shared) and p2.text[len(shared) :].startswith("@@ -5,1 +5,1 @@\n-v4 = compute(4)\n")


def test_a_prediction_far_from_the_frame_starts_a_new_one():
    h = nextedit.History()
    text = edited(CODE, h, "compute(3)", "compute_v2(3)", 1.0)
    doc = Document.open("file:///w/m.py", "python", 2, text)
    p1 = nextedit.render(doc, text.index("v4 = "), h, "m.py", above=5, below=5)
    p2 = nextedit.render(doc, text.index("v30 = "), h, "m.py", above=5, below=5, frame=p1.frame)
    assert p2.frame != p1.frame and "v30 = compute(30)" in p2.frame.head and "v4 =" not in p2.frame.head


def test_no_secret_reaches_the_prompt_and_an_answer_gets_it_back():
    text = 'a = compute(1)\nkey = "AKIAIOSFODNN7EXAMPLE"\nb = compute(2)\n'
    doc = Document.open("file:///w/m.py", "python", 1, text)
    p = nextedit.render(doc, text.index("key"), None, "m.py")
    assert "AKIAIOSFODNN7EXAMPLE" not in p.text
    got = nextedit.parse(p, p.removed + '+key = "<redacted-1>"  # rotated\n b = compute(2)\n')
    assert got is not None and got.added == ['key = "AKIAIOSFODNN7EXAMPLE"  # rotated\n']
    assert nextedit.parse(p, p.removed + '+key = "<redacted-2>"\n') is None  # a made-up placeholder


LINES = "def f(a):\n    x = 1\n    y = 2\n    return x\n"


@pytest.mark.parametrize(
    ("answer", "first", "last", "added"),
    [
        ("-    y = 2\n+    y = a\n     return x\n", 2, 3, ["    y = a\n"]),  # replaces the cursor's line
        ("-    y = 2\n-    return x\n+    return a\n", 2, 4, ["    return a\n"]),  # and the line below
        ("-    y = 2\n+    y = 2\n+    z = 3\n", 3, 3, ["    z = 3\n"]),  # inserts below it
        ("-    y = 2\n+    w = 0\n+    y = 2\n", 2, 2, ["    w = 0\n"]),  # inserts above it
        ("-    y = 2\n     return x\n", 2, 3, []),  # deletes it
        ("-    y = 2\n@@ -9 +9 @@\n", 2, 3, []),  # deletes it (another hunk follows)
    ],
)
def test_an_answer_is_the_lines_it_removes_and_adds(answer, first, last, added):
    doc = Document.open("file:///w/m.py", "python", 1, LINES)
    p = nextedit.render(doc, LINES.index("y = 2"), None, "m.py")
    assert p.removed == "-    y = 2\n"
    got = nextedit.parse(p, answer)
    assert got is not None and (got.first, got.last, got.added) == (first, last, added)


@pytest.mark.parametrize(
    "answer",
    [
        "-    y = 2\n+    y = 2\n     return x\n",  # written again unchanged
        "-    y = 2\n-    return y\n+    return a\n",  # removes a line the document does not have
    ],
)
def test_an_answer_that_changes_nothing_or_misquotes_the_file_is_no_prediction(answer):
    doc = Document.open("file:///w/m.py", "python", 1, LINES)
    p = nextedit.render(doc, LINES.index("y = 2"), None, "m.py")
    assert nextedit.parse(p, answer) is None


def test_confidence_is_the_lowest_probability_on_the_added_lines_or_of_a_deletions_end():
    doc = Document.open("file:///w/m.py", "python", 1, LINES)
    p = nextedit.render(doc, LINES.index("y = 2"), None, "m.py")
    got = nextedit.parse(
        p, "-    y = 2\n+    y = a\n+    z = a\n     return x\n", [0.0, math.log(0.9), math.log(0.4), math.log(0.2)]
    )
    assert got is not None and got.confidence == pytest.approx(0.4)  # the line after the change is not counted
    got = nextedit.parse(p, "-    y = 2\n     return x\n", [0.0, math.log(0.3)])
    assert got is not None and got.added == [] and got.confidence == pytest.approx(0.3)


def test_a_change_is_also_offered_cut_after_each_added_line_longest_first():
    doc = Document.open("file:///w/m.py", "python", 1, LINES)
    p = nextedit.render(doc, LINES.index("y = 2"), None, "m.py")
    sure, unsure = math.log(0.9), math.log(0.2)
    got = nextedit.candidates(
        p, "-    y = 2\n+    y = a\n+    z = a\n+    w = a\n     return x\n", [0.0, sure, sure, unsure, 0.0]
    )
    assert [(c.first, c.last, c.added, round(c.confidence, 2)) for c in got] == [
        (2, 3, ["    y = a\n", "    z = a\n", "    w = a\n"], 0.2),
        (2, 3, ["    y = a\n", "    z = a\n"], 0.9),
        (2, 3, ["    y = a\n"], 0.9),
    ]
    whole = nextedit.parse(p, "-    y = 2\n+    y = a\n+    z = a\n+    w = a\n")  # no probabilities: 1.0
    assert whole is not None and (whole.first, whole.last, whole.added) == (got[0].first, got[0].last, got[0].added)


@pytest.mark.parametrize(
    ("answer", "cuts"),
    [
        # replaces two lines with three: a cut replaces as many as it keeps
        ("-    y = 2\n-    return x\n+    y = a\n+    return a\n+    pass\n", [(2, 4, 3), (2, 4, 2), (2, 3, 1)]),
        # inserts above the cursor's line, written back last: a cut keeps that line
        ("-    y = 2\n+    w = 0\n+    v = 1\n+    y = 2\n", [(2, 2, 2), (2, 2, 1)]),
        # inserts between the cursor's line and the next: a cut keeps both
        ("-    y = 2\n-    return x\n+    y = 2\n+    w = 0\n+    return x\n", [(3, 3, 1)]),
    ],
)
def test_a_cut_change_replaces_lines_and_never_drops_one(answer, cuts):
    doc = Document.open("file:///w/m.py", "python", 1, LINES)
    p = nextedit.render(doc, LINES.index("y = 2"), None, "m.py")
    assert [(c.first, c.last, len(c.added)) for c in nextedit.candidates(p, answer)] == cuts
    (deletion,) = nextedit.candidates(p, "-    y = 2\n     return x\n")  # a deletion is not cut
    assert (deletion.first, deletion.last, deletion.added) == (2, 3, [])


def test_a_change_made_of_the_recent_edits_changes_repeats_them():
    h = nextedit.History()
    text = edited(CODE, h, "compute(3)", "compute_v2(3)", 1.0)
    text = edited(text, h, "compute(4)", "compute_v2(4)", 2.0)
    doc = Document.open("file:///w/m.py", "python", 3, text)
    p = nextedit.render(doc, text.index("v5 = "), h, "m.py")
    same = nextedit.parse(p, p.removed + "+v5 = compute_v2(5)\n")
    other = nextedit.parse(p, p.removed + "+v5 = compute_v3(5)\n")
    more = nextedit.parse(p, p.removed + "+v5 = compute_v2(5) + 1\n")
    assert same is not None and other is not None and more is not None
    recent = nextedit.recent_words(h)
    assert nextedit.repeats(recent, p, same)
    assert not nextedit.repeats(recent, p, other) and not nextedit.repeats(recent, p, more)
    assert not nextedit.repeats(nextedit.recent_words(None), p, same)


def test_a_change_may_repeat_the_recent_edits_until_it_adds_a_word_they_did_not():
    h = nextedit.History()
    edited(CODE, h, "compute(3)", "compute_v2(3)", 1.0)
    recent = nextedit.recent_words(h)
    assert nextedit.may_repeat(recent, "-v5 = compute(5)\n+v5 = compute_v2(5)")
    assert nextedit.may_repeat(recent, "-v5 = compute(5)\n+v5 = compute_v2(ret")  # `ret` may still grow into a word
    assert not nextedit.may_repeat(recent, "-v5 = compute(5)\n+v5 = compute_v2(retry)")
    assert not nextedit.may_repeat(recent, "-v5 = compute(5)\n+v5 = compute_v2(5) +")  # `+`: neither removed nor added
    assert not nextedit.may_repeat(nextedit.recent_words(None), "-v5 = compute(5)\n+v5 = compute_v2(5)")


def test_generation_stops_at_the_first_character_of_a_line_that_is_not_part_of_the_change():
    assert not nextedit.finished("-    y = 2\n-    return x\n+    y = a\n+")
    assert nextedit.finished("-    y = 2\n+    y = a\n ")  # context begins
    assert nextedit.finished("-    y = 2\n+    y = a\n-")  # a second change block: the first one is the answer
    assert nextedit.finished("-    y = 2\n+    y = a\n@")  # another hunk
    assert nextedit.finished("-    y = 2\n\n")  # an empty line is not a diff line
