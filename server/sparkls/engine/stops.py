"""Stop strings in the text of one generation, for the engines that find them themselves (pure).

`stop_start` is the one matcher: where the text is cut is where the first stop string begins. The
llama.cpp engine applies it to its text after every token. The vLLM engine may run one request as
several vLLM requests (a pause, then a resume from the tokens so far); vLLM finds a stop string only
within one of them, so `StopSeam` finds one across the seam. A remote server finds them itself.
"""

from __future__ import annotations

from dataclasses import dataclass


def stop_start(text: str, stops: tuple[str, ...]) -> int | None:
    """Where the first of `stops` begins in `text`, or None (pure)."""
    found = [i for i in (text.find(s) for s in stops if s) if i >= 0]
    return min(found) if found else None


def stop_prefix_len(text: str, stops: tuple[str, ...]) -> int:
    """Length of the longest end of `text` that is the beginning of one of `stops` (pure): the text a
    paused stream keeps back, because the resumed part may complete a stop string."""
    best = 0
    for s in stops:
        for k in range(min(len(s) - 1, len(text)), best, -1):
            if text.endswith(s[:k]):
                best = k
                break
    return best


@dataclass
class StopSeam:
    """Stop strings across the vLLM requests of one paused request (pure). vLLM finds a stop string only
    within one vLLM request, so where text of two may meet (at a pause, and after a resume) the end that
    may begin a stop string is kept back until the next text shows whether it does."""

    stops: tuple[str, ...]
    held: str = ""

    def feed(self, text: str, seam: bool) -> tuple[str, bool]:
        """(text to pass on, whether a stop string began in it) for new `text`; `seam`: it may meet text
        of another vLLM request."""
        text, self.held = self.held + text, ""
        if not seam or not self.stops:
            return text, False
        cut = stop_start(text, self.stops)
        if cut is not None:
            return text[:cut], True
        keep = stop_prefix_len(text, self.stops)
        self.held = text[len(text) - keep :]
        return text[: len(text) - keep], False

    def flush(self) -> str:
        held, self.held = self.held, ""
        return held
