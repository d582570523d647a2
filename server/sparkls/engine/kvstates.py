"""Saved KV states of a sequence, keyed by the tokens they hold, kept within a byte budget (pure).

The embedded engine has one KV sequence per request class, so a prompt for another document (or a far
place in the same one) overwrites what the last one computed. Before it does, the engine saves the
sequence's state here when enough would be lost; a later prompt that shares a longer token prefix with
a saved state than with the sequence gets that state back (a memory copy, milliseconds) instead of a
prefill (seconds per thousand tokens on a CPU). Least recently used states go first when the budget
is full. No engine imports: states are opaque bytes.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass


def chunk_moves(held: list[int], tokens: list[int], reused: int, min_chunk: int) -> list[tuple[int, int, int]]:
    """Runs of `held` (a sequence's tokens) past its common prefix `reused` with `tokens` that reappear, in
    order, right after it in `tokens`: (position in held, position in tokens, length), each at least
    `min_chunk` long. llama.cpp's server does the same with `--cache-reuse`: the KV of a run is shifted to its
    new position instead of computed again (what lay between is dropped), so a window whose start slid, or a
    block removed from the middle of a prompt, costs only what is new. The prompt's last token is never
    taken (it is evaluated for the first logits). A greedy scan: held positions advance one at a time until
    a run matches at the prompt's next position."""
    moves: list[tuple[int, int, int]] = []
    head_c = head_p = reused
    end_p = len(tokens) - 1
    while head_c < len(held) and head_p < end_p:
        n = 0
        while head_c + n < len(held) and head_p + n < end_p and held[head_c + n] == tokens[head_p + n]:
            n += 1
        if n >= min_chunk:
            moves.append((head_c, head_p, n))
            head_c += n
            head_p += n
        else:
            head_c += 1
    return moves


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


@dataclass(frozen=True)
class SavedState:
    tokens: tuple[int, ...]  # what the sequence held, from position 0
    data: bytes  # the engine's serialized state of the sequence


class KvStates:
    """Saved states of one KV sequence, most recently used last, at most `budget_bytes` of data in all."""

    def __init__(self, budget_bytes: int, min_gain: int = 64) -> None:
        self.budget_bytes = budget_bytes
        self.min_gain = min_gain  # a state is restored (or saved) only when it keeps at least this many tokens more
        self._states: OrderedDict[tuple[int, ...], SavedState] = OrderedDict()
        self.saved = 0
        self.restored = 0

    @property
    def bytes(self) -> int:
        return sum(len(s.data) for s in self._states.values())

    def __len__(self) -> int:
        return len(self._states)

    def worth_saving(self, held: list[int], kept: int) -> bool:
        """Whether a sequence holding `held` that is about to keep only its first `kept` tokens should be
        saved first: it would lose at least `min_gain` tokens and no saved state already covers them."""
        if self.budget_bytes <= 0 or len(held) - kept < self.min_gain:
            return False
        return not any(
            common_prefix(list(s.tokens), held) >= len(held) - self.min_gain // 2 for s in self._states.values()
        )

    def save(self, tokens: list[int], data: bytes) -> None:
        """Keep a state; saved states it extends (their tokens are a prefix of its) are dropped, then the least
        recently used ones until the budget holds. A state larger than the whole budget is not kept."""
        if len(data) > self.budget_bytes:
            return
        key = tuple(tokens)
        for old in [k for k in self._states if k == key[: len(k)]]:
            del self._states[old]
        self._states[key] = SavedState(key, data)
        self.saved += 1
        while self.bytes > self.budget_bytes:
            self._states.popitem(last=False)

    def best(self, tokens: list[int], current: int) -> SavedState | None:
        """The saved state sharing the longest prefix with `tokens`, when it keeps at least `min_gain` tokens
        more than `current` (what the sequence itself shares with them); it becomes the most recently used."""
        found, shared = None, current + self.min_gain - 1
        for state in self._states.values():
            n = common_prefix(list(state.tokens), tokens)
            if n > shared:
                found, shared = state, n
        if found is not None:
            self._states.move_to_end(found.tokens)
            self.restored += 1
        return found
