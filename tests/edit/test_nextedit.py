"""The next-edit history: keystrokes merged into hunks, hunks described in words, the window around the cursor."""

import pytest
from sparkls.edit import nextedit


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


@pytest.mark.parametrize(("old", "new", "said"), [
    ("    count = len(values)", "    n = len(values)", "replaced `count` with `n` on line 1"),
    ("f(a)", "f(a, b)", "inserted `, b` on line 1"),
    ("f(a, b)", "f(a)", "deleted `, b` from line 1"),
    ("total = 1", "total_sum = 1", "replaced `total` with `total_sum` on line 1"),
])
def test_a_hunk_is_described_in_words(old, new, said):
    assert nextedit.describe(nextedit.Hunk(0, [old], [new], 0.0)) == said
