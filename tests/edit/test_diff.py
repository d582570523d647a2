"""Minimal edits: applying them yields exactly the rewrite, they never touch unchanged text or split a CRLF."""

from hypothesis import assume, given, settings
from sparkls.edit import diff

from tests.edit_support import texts


@given(texts, texts)
@settings(max_examples=300)
def test_applying_the_diff_yields_exactly_the_rewrite(old, new):
    assert diff.apply(old, diff.diff(old, new)) == new


@given(texts, texts, texts, texts)
@settings(max_examples=200)
def test_a_rewritten_region_never_touches_text_outside_it(before, region, after, rewrite):
    original = before + region + after
    es = diff.region_edits(original, len(before), len(before) + len(region), rewrite)
    assert diff.apply(original, es) == before + rewrite + after
    assert all(len(before) <= e.start <= e.end <= len(before) + len(region) for e in es)


@given(texts, texts)
def test_no_edit_starts_or_ends_inside_a_crlf(old, new):
    for e in diff.diff(old, new):
        for at in (e.start, e.end):
            assert old[at - 1 : at + 1] != "\r\n" or at == 0


def test_a_one_word_change_is_one_small_edit():
    old = "def area(r):\n    return 3.14 * r * r\n\nprint(area(2))\n"
    new = "def area(r):\n    return math.pi * r * r\n\nprint(area(2))\n"
    es = diff.diff(old, new)
    assert diff.apply(old, es) == new
    assert diff.changed_chars(es) <= len("3.14") + len("math.pi")
    assert all("print" not in old[e.start : e.end] for e in es)


def test_identical_text_needs_no_edit():
    assert diff.diff("same\r\ntext", "same\r\ntext") == []


def test_inserted_and_deleted_lines_are_whole_line_edits():
    old = "a\nb\nc\n"
    assert diff.diff(old, "a\nb\nnew\nc\n") == [diff.Edit(4, 4, "new\n")]
    assert diff.diff(old, "a\nc\n") == [diff.Edit(2, 4, "")]


@given(texts, texts)
def test_the_minimal_edits_joined_into_one_still_yield_exactly_the_rewrite(old, new):
    es = diff.diff(old, new)
    assume(es)  # something to join
    one = diff.joined(old, es)
    assert diff.apply(old, [one]) == new
    assert (one.start, one.end) == (es[0].start, es[-1].end)


def test_joined_edits_keep_the_text_between_them():
    text = "a = f(1)\nb = f(2)\n"
    assert diff.joined(text, [diff.Edit(5, 5, "_v2"), diff.Edit(14, 14, "_v2")]) == diff.Edit(5, 14, "_v2(1)\nb = f_v2")
