"""Prompt-lookup drafting for speculative decoding (pure; used by the llama.cpp engine).

A rewrite mostly copies its input, which is in the prompt, and a completion often repeats a nearby line. The
drafter finds where the text generated so far continues a stretch of earlier tokens (the longest suffix match,
so it locks onto the region being copied rather than onto any earlier "    return") and proposes the tokens
that followed there.

The draft length adapts, because on a CPU verification is not free: a batch of b tokens costs at best about
b/2.3 single-token steps here (measured in benchmarks/edit_eval.py, part `cost`), so every rejected draft token
is time lost. Fully accepted drafts double the length (up to `k_max`); a rejection shrinks it to what was accepted;
drafts that were mostly rejected make the drafter demand a longer match before it drafts again (2, 4, 8, ...
tokens), so output that does not copy soon runs as plain decoding.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_MATCH = 32  # the longest suffix compared; longer matches are as good as this for locating the copy


def longest_match(tokens: list[int], max_n: int = MAX_MATCH) -> tuple[int, int]:
    """(index just after the earlier occurrence of the longest suffix of `tokens`, that suffix's length);
    (-1, 0) when the last token never occurred before. Ties go to the latest occurrence."""
    if len(tokens) < 2:
        return -1, 0
    last, end = tokens[-1], len(tokens) - 1
    best_i, best_n = -1, 0
    for i in range(end - 1, -1, -1):
        if tokens[i] != last:
            continue
        n = 1
        while n < max_n and i - n >= 0 and tokens[i - n] == tokens[end - n]:
            n += 1
        if n > best_n:
            best_i, best_n = i + 1, n
            if n >= max_n:
                break
    return best_i, best_n


@dataclass
class LookupDrafter:
    """Drafts for one generation. Call `propose` before each verification step and `feedback` after it."""

    k_max: int = 32
    k_min: int = 6  # shorter drafts cost nearly as much to verify as they save
    k: int = 8  # current draft length
    min_match: int = 2
    misses: int = 0  # consecutive mostly-rejected drafts

    def __post_init__(self) -> None:
        self.k_min = max(1, min(self.k_min, self.k_max))
        self.k = max(self.k_min, min(self.k, self.k_max))

    def needed_match(self) -> int:
        return min(MAX_MATCH, self.min_match << self.misses)

    def propose(self, tokens: list[int], room: int) -> list[int]:
        """Up to min(k, room) tokens that followed the best earlier match; [] when the match is too short."""
        i, n = longest_match(tokens)
        if n < self.needed_match() or room <= 0:
            return []
        return tokens[i : i + min(self.k, room)]

    def feedback(self, drafted: int, accepted: int) -> None:
        if drafted == 0:
            return
        if accepted == drafted:
            self.k = min(self.k_max, 2 * self.k)
            self.misses = 0
            return
        self.k = max(self.k_min, min(self.k, 2 * accepted + 2))
        self.misses = self.misses + 1 if 2 * accepted < drafted else 0
