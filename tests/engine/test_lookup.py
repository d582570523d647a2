"""Prompt-lookup drafting: the longest earlier match, and draft lengths that follow what is accepted."""

from __future__ import annotations


def test_longest_match_locks_onto_the_longest_earlier_occurrence():
    from sparkls.engine.lookup import longest_match

    # "2 3" occurs twice earlier; only the first is preceded by 1 like the tail "1 2 3"
    toks = [1, 2, 3, 4, 5, 9, 2, 3, 7, 1, 2, 3]
    assert longest_match(toks) == (3, 3)
    assert longest_match([7, 1, 2, 7, 1]) == (2, 2)
    assert longest_match([1, 2, 3]) == (-1, 0)  # the last token never occurred before
    assert longest_match([5]) == (-1, 0)


def test_drafter_proposes_the_continuation_and_adapts_its_length():
    from sparkls.engine.lookup import LookupDrafter

    source = list(range(100, 200))
    tokens = [*source, 100, 101]  # copying the source from its start
    d = LookupDrafter(k_max=32, k=8)
    assert d.propose(tokens, room=1000) == source[2:10]
    assert d.propose(tokens, room=3) == source[2:5]  # never past the context
    d.feedback(8, 8)
    assert d.k == 16  # all accepted: longer drafts
    d.feedback(16, 16)
    d.feedback(32, 32)
    assert d.k == 32  # capped at k_max
    d.feedback(32, 20)
    assert d.k == 32 and d.misses == 0  # most accepted: keep going
    d.feedback(32, 1)
    assert d.k == d.k_min and d.misses == 1  # mostly rejected: shortest drafts, and demand a longer match
    assert d.needed_match() == 4
    assert d.propose([*source, 7, 100, 101], room=1000) == []  # a 2-token match no longer drafts
    assert d.propose([*source, 7, 100, 101, 102, 103], room=1000) == source[4 : 4 + d.k_min]
    d.feedback(6, 2)
    assert d.k == d.k_min and d.misses == 2 and d.needed_match() == 8  # back off further
    d.feedback(6, 6)
    assert d.misses == 0 and d.needed_match() == 2
