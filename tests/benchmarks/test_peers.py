"""The peer designs' prompts (benchmarks/peers.py), checked on small texts with a one-token-per-character count."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from peers import LlmLs


def test_llm_ls_takes_whole_lines_alternately_above_and_below_until_the_budget():
    text = "a1\nb22\nc333\nde|rest\nf4444\ng55\nh6\n"
    cursor = text.index("|")
    text = text.replace("|", "")
    peer = LlmLs(len, context_window=3 + 2 + 5 + 5 + 6 + 4)  # "de", "rest\n", "c333\n", "f4444\n", "b22\n"
    assert peer.prompt(text, cursor) == "<|fim_prefix|>b22\nc333\nde<|fim_suffix|>rest\nf4444\n<|fim_middle|>"
    # The next line below ("g55\n", 4) does not fit: the window stops there, above and below alike.
    assert "g55" not in peer.prompt(text, cursor) and "a1" not in peer.prompt(text, cursor)


def test_llm_ls_asks_for_one_line_only_before_whitespace():
    assert LlmLs.single_line("x = 1\n", 5) and LlmLs.single_line("x = ", 4)
    assert not LlmLs.single_line("x = foo()\n", 4)
