"""Typed-ahead cache: serve the rest of a suggestion while the user types it."""

from sparkls.completion import typeahead

TEXT = "def f(x):\n    \n"
CURSOR = TEXT.index("    \n") + 4


def test_typing_the_suggestion_serves_its_rest():
    entry = typeahead.remember("u", TEXT, CURSOR, "return x + 1")
    typed = TEXT[:CURSOR] + "ret" + TEXT[CURSOR:]
    assert typeahead.lookup(entry, "u", typed, CURSOR + 3) == "urn x + 1"


def test_typing_something_else_or_editing_elsewhere_misses():
    entry = typeahead.remember("u", TEXT, CURSOR, "return x + 1")
    assert typeahead.lookup(entry, "u", TEXT[:CURSOR] + "pri" + TEXT[CURSOR:], CURSOR + 3) is None
    assert typeahead.lookup(entry, "u", TEXT[:CURSOR] + "ret" + TEXT[CURSOR:] + "#", CURSOR + 3) is None
    assert typeahead.lookup(entry, "other", TEXT[:CURSOR] + "ret" + TEXT[CURSOR:], CURSOR + 3) is None


def test_a_fully_typed_suggestion_is_used_up():
    entry = typeahead.remember("u", TEXT, CURSOR, "pass")
    assert typeahead.lookup(entry, "u", TEXT[:CURSOR] + "pass" + TEXT[CURSOR:], CURSOR + 4) is None
