"""Token healing: end the prompt on a token boundary the model knows, then make it write the cut text again.

A prompt that stops inside what the model would write as one token (`style = Style.` where `.parse` is one
token, `f(` where `(x` is) asks it to continue from a split it hardly ever saw in training: small models answer
with nonsense (`Style.emoji if emoji else ...`) or repeat what came before. Healing removes the prompt's last
token (or last few: `back_off`) and constrains the first generated tokens to spell out their text (each chosen
token starts with what is left of it, or is a prefix of it), then decodes freely. The engine does not emit the
healed text: the output continues the prompt as given. Pure over the vocabulary's bytes; `engine/llamacpp.py` and
`engine/vllm.py` apply it (numpy comes with both, so it is imported where a vocabulary is built, not with this
module).
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt


class Vocabulary:
    """Every token's bytes (empty for control tokens, which never heal and are never chosen while healing)."""

    def __init__(self, pieces: list[bytes]) -> None:
        import numpy as np

        self._np = np
        self.pieces = pieces
        by_first: dict[int, list[int]] = {}
        for i, piece in enumerate(pieces):
            if piece:
                by_first.setdefault(piece[0], []).append(i)
        self._by_first = {k: np.array(v, dtype=np.int64) for k, v in by_first.items()}
        self.consistent = lru_cache(maxsize=256)(self._consistent)

    def covering(self, text: bytes) -> bool:
        """Whether some token starts with `text`."""
        return any(self.pieces[i].startswith(text) for i in self.consistent(text).tolist())

    def _consistent(self, left: bytes) -> npt.NDArray[np.int64]:
        """Tokens that start with `left`, or are a non-empty prefix of it."""
        ids = self._by_first.get(left[0])
        keep = (
            []
            if ids is None
            else [i for i in ids.tolist() if self.pieces[i].startswith(left) or left.startswith(self.pieces[i])]
        )
        return self._np.array(keep, dtype=self._np.int64)


def back_off(tokens: list[int], vocab: Vocabulary, most: int = 4) -> tuple[list[int], bytes]:
    """The prompt without its last token(s), and their bytes: what the output must start with. The last token
    always goes; each one before it goes too while a single token could still start with all of the cut text
    (llama.cpp's "dynamic" healing): `    retur` split as ` ret`+`ur` backs off both, so ` return` can be chosen,
    where backing off `ur` alone leaves the model after ` ret`, which it continues as if it were a whole word
    (`retur math.pi * r`). Unchanged (and b"") when the last token is a control token (a FIM marker) or the only
    one."""
    cut, n = b"", 0
    while n < most and len(tokens) - n > 1:
        piece = vocab.pieces[tokens[-1 - n]]
        if not piece or (n and not vocab.covering(piece + cut)):
            break
        cut, n = piece + cut, n + 1
    return tokens[: len(tokens) - n], cut


def advance(vocab: Vocabulary, left: bytes, tok: int) -> bytes:
    """The cut text still to write after token `tok` (empty once a token covered it)."""
    piece = vocab.pieces[tok]
    return left[len(piece) :] if left.startswith(piece) else b""


def choose(logits: npt.NDArray[np.float32], vocab: Vocabulary, left: bytes) -> tuple[int, bytes]:
    """The most likely token consistent with the healed text still to write, and what is left after it."""
    ids = vocab.consistent(left)
    if ids.size == 0:  # cannot happen with a byte-level vocabulary (every byte is a token); heal no further
        return int(logits.argmax()), b""
    tok = int(ids[int(logits[ids].argmax())])
    return tok, advance(vocab, left, tok)
