"""Token healing: backing off the prompt's last tokens, and the likeliest token that spells out what was cut."""

from __future__ import annotations


def test_healing_backs_off_the_last_token_and_spells_it_out_with_the_likeliest_consistent_tokens():
    import numpy as np
    from sparkls.engine.healing import Vocabulary, back_off, choose

    pieces = [b"", b" Style", b".", b".pa", b".parse", b"(", b"x", b"rse", b" "]
    vocab = Vocabulary(pieces)
    prompt, cut = back_off([1, 2], vocab)  # ` Style` `.`: the prompt ends before the dot
    assert (prompt, cut) == ([1], b".")
    logits = np.zeros(len(pieces), dtype=np.float32)
    logits[[5, 6, 4]] = [9.0, 8.0, 1.0]  # `(` and `x` are likelier, but do not start with the cut `.`
    assert choose(logits, vocab, cut) == (4, b"")  # `.parse` covers the cut text
    logits[3] = 2.0  # `.pa` is a token that starts with it too, and likelier
    assert choose(logits, vocab, cut) == (3, b"")
    # A cut longer than the chosen token: the rest must still be spelled out by the next one.
    assert choose(logits, vocab, b".parse") == (3, b"rse")
    assert choose(logits, vocab, b"rse") == (7, b"")


def test_healing_backs_off_the_rest_of_a_word_while_one_token_could_still_start_with_it():
    from sparkls.engine.healing import Vocabulary, back_off

    # `    retur` as `   ` ` ret` `ur`: ` return` starts with ` retur`, so both word pieces go (backing off `ur`
    # alone would leave the model after ` ret`); no token starts with `    retur`, so the indentation stays.
    pieces = [b"", b"   ", b" ret", b"ur", b" return", b"urn", b" Style", b"."]
    vocab = Vocabulary(pieces)
    assert back_off([1, 2, 3], vocab) == ([1], b" retur")
    assert back_off([6, 7], vocab) == ([6], b".")  # no token starts with ` Style.`: the dot alone
    assert back_off([1, 2, 3], vocab, most=1) == ([1, 2], b"ur")


def test_a_prompt_ending_in_a_control_token_or_one_token_is_not_healed():
    from sparkls.engine.healing import Vocabulary, back_off

    vocab = Vocabulary([b"", b"x", b"y"])  # id 0: a control token (a FIM marker), no text
    assert back_off([1, 0], vocab) == ([1, 0], b"")
    assert back_off([1], vocab) == ([1], b"")
