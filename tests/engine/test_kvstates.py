"""Saved KV states within a byte budget, and cached runs of a prompt moved instead of recomputed."""

from __future__ import annotations

from sparkls.engine.kvstates import KvStates, chunk_moves


def test_a_saved_kv_state_comes_back_for_a_prompt_that_shares_more_with_it_than_the_sequence_does():
    states = KvStates(budget_bytes=1000, min_gain=4)
    a = list(range(100))
    assert states.worth_saving(a, kept=10)  # 90 tokens would be lost
    states.save(a, b"A" * 100)
    assert not states.worth_saving(a, kept=10)  # already saved
    assert states.best([*a[:50], 7, 7], current=10).data == b"A" * 100  # shares 50 > 10 + 4
    assert states.best([*a[:12], 7], current=10) is None  # shares 12: not worth a load
    assert not states.worth_saving(a, kept=98)  # two tokens lost: nothing to save


def test_saved_kv_states_stay_within_their_budget_least_recently_used_first():
    states = KvStates(budget_bytes=250, min_gain=4)
    first, second, third = [1] * 20, [2] * 20, [3] * 20
    states.save(first, b"x" * 100)
    states.save(second, b"y" * 100)
    assert states.best(first, current=0) is not None  # used: now the most recent
    states.save(third, b"z" * 100)  # over the budget: the least recently used (second) goes
    assert states.best(second, current=0) is None
    assert states.best(first, current=0) is not None and states.best(third, current=0) is not None
    assert states.bytes <= 250
    states.save([*first, 5, 5], b"w" * 100)  # extends `first`: replaces it
    assert len(states) == 2
    states.save([9] * 20, b"v" * 300)  # larger than the whole budget: not kept
    assert states.best([9] * 20, current=0) is None


def test_cached_runs_that_reappear_later_in_a_prompt_are_moved_not_recomputed():
    head, window, rest = list(range(10)), list(range(100, 180)), list(range(200, 240))
    # The window's start slid: its first 30 tokens are gone, the rest moves 30 positions down.
    held = head + window + rest
    prompt = head + window[30:] + rest + [999]
    assert chunk_moves(held, prompt, 10, 16) == [(40, 10, 50 + 40)]
    # A block removed from the middle; a new token at the end is never taken (its logits are needed).
    assert chunk_moves(held, head + window + [7] + rest, 90, 16) == []  # a new token first: no run follows it
    assert chunk_moves(held, head + rest + [1], 10, 16) == [(90, 10, 40)]
    # Runs shorter than the minimum are recomputed; runs out of order after the first are not taken.
    assert chunk_moves(held, head + window[:8] + [5] + rest + [1], 10, 16) == []
    assert chunk_moves(held, head + rest + window + [1], 10, 16) == [(90, 10, 40)]
