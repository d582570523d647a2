"""Peer designs for the replays, built as harness layouts against the same engine and model as sparkls (not as
server settings users see). Each is given llama.cpp's server at its best: the common prefix and moved chunks of
>= 256 tokens reused (`--cache-reuse 256`), and the previous request aborted when a keystroke supersedes it.

`LlmLs`: what llm-ls (the language server behind llm.nvim and llm-vscode) sends at llm.nvim's defaults
(`context_window` 1024, FIM on): whole lines taken alternately above and below the cursor's line (the line itself
split at the cursor: its start ends the prefix, its rest starts the suffix) until the next one would pass
`context_window - 3` tokens, laid out `<|fim_prefix|>{above}<|fim_suffix|>{below}<|fim_middle|>`. With text or
nothing but whitespace after the cursor it asks for one line: the answer is cut at its first new line (given
here as a stop, so the backend stops decoding there: llm-ls itself lets it run to `max_new_tokens` 60), else up
to 60 tokens. It has no cache of earlier answers, and the typed text ends the prefix, so each keystroke computes
the suffix again (the `--cache-reuse` shift saves what it can).

`LlamaVim`: what llama.vim (the Vim/Neovim client of llama.cpp's server) sends, at its defaults, to a server run
with `--cache-reuse 256` and a 1,024-token batch (llama.cpp's `--fim-qwen-*-default` presets):
- `input_prefix`: the 256 lines above the cursor's line; `input_suffix`: the rest of the cursor's line and the 64
  lines below; `prompt`: the cursor's line up to the cursor (after the middle marker, as sparkls does);
- `input_extra`: a ring buffer of at most 16 chunks of 32 lines, picked when a buffer is entered or left (around
  the cursor) and when the cursor moved more than 32 lines (above the prefix window and below the suffix window),
  queued, and moved into the ring one per second of rest, each move sent as a prompt-only request that prefills
  the new extra context;
- the server's layout for Qwen2.5-Coder: `<|repo_name|>myproject\\n`, each chunk as `<|file_sep|>{file}\\n{text}`,
  `<|file_sep|>filename\\n`, then `<|fim_prefix|>` with the last 768 prefix tokens, `<|fim_suffix|>` with the
  first 254 - len(prompt) suffix tokens, `<|fim_middle|>` and the prompt;
- the answer (not streamed): up to 128 tokens; once it has a new line, it ends 1 s after its first token
  (`t_max_predict_ms`) or before a line indented less than the cursor's line (`n_indent`); a later keystroke
  that types the start of the suggestion shown is answered from it (llama.vim's cache of suggestions).
The engine's `cache_reuse` option is the server's `--cache-reuse`: cached runs of >= 256 tokens that moved are
shifted, not computed again (sparkls's engine does the same for the peer; sparkls itself leaves it off).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from sparkls.engine.base import Finished, GenerationRequest, GenerationStats, Priority

N_PREFIX_LINES = 256
N_SUFFIX_LINES = 64
RING_CHUNKS = 16
CHUNK_LINES = 64  # `ring_chunk_size`: a chunk is half of it
RING_SCOPE = 1024  # lines above the cursor that chunks are picked from
PICK_MOVE_LINES = 32  # a move of more lines picks chunks around the new place
N_BATCH = 1024
N_PREDICT = 128
T_MAX_PREDICT_S = 1.0
CACHE_REUSE = 256
N_CTX = 8192
LLM_LS_CONTEXT_WINDOW = 1024
LLM_LS_MAX_NEW_TOKENS = 60


@dataclass(frozen=True)
class Chunk:
    file: str
    text: str


@dataclass
class LlamaVim:
    """The client's state (ring buffer, queue, last pick place) and the server's prompt layout."""

    count_tokens: Callable[[str], int]
    seed: int = 0
    ring: list[Chunk] = field(default_factory=list)
    queued: list[Chunk] = field(default_factory=list)
    picked_at: int = -1_000_000  # the cursor line where chunks were last picked around the windows
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def pick(self, file: str, lines: list[str]) -> None:
        """llama.vim's `pick_chunk`: half a chunk's lines at a random place of `lines` (all of them when short),
        queued unless the ring or the queue has it; chunks much like it leave the queue and the ring."""
        if len(lines) < 3:
            return
        if len(lines) + 1 < CHUNK_LINES:
            chunk_lines = lines
        else:
            lo = self.rng.randint(0, max(0, len(lines) - CHUNK_LINES // 2))
            chunk_lines = lines[lo : min(lo + CHUNK_LINES // 2, len(lines))]
        chunk = Chunk(file, "\n".join(chunk_lines) + "\n")
        if chunk in self.ring or chunk in self.queued:
            return
        self.ring = [c for c in self.ring if _similarity(c.text, chunk.text) <= 0.9]
        self.queued = [c for c in self.queued if _similarity(c.text, chunk.text) <= 0.9]
        if len(self.queued) >= RING_CHUNKS:
            self.queued.pop(0)
        self.queued.append(chunk)

    def enter(self, file: str, text: str, row: int) -> None:
        """A buffer entered or left: a chunk around the cursor."""
        lines = text.split("\n")
        self.pick(file, lines[max(0, row - CHUNK_LINES // 2) : row + CHUNK_LINES // 2])

    def moved(self, file: str, text: str, row: int) -> None:
        """Before a request: when the cursor moved far, chunks above the prefix window and below the suffix's."""
        if abs(row - self.picked_at) <= PICK_MOVE_LINES:
            return
        lines = text.split("\n")
        self.pick(file, lines[max(0, row - RING_SCOPE) : max(0, row - N_PREFIX_LINES)])
        self.pick(file, lines[row + N_SUFFIX_LINES : row + N_SUFFIX_LINES + CHUNK_LINES])
        self.picked_at = row

    def update(self) -> bool:
        """One ring update (once a second at rest): the first queued chunk moves into the ring. True when the
        extra context changed (the client then sends it to be prefilled)."""
        if not self.queued:
            return False
        if len(self.ring) >= RING_CHUNKS:
            self.ring.pop(0)
        self.ring.append(self.queued.pop(0))
        return True

    def extra(self) -> str:
        return (
            "<|repo_name|>myproject\n"
            + "".join(f"<|file_sep|>{c.file}\n{c.text}" for c in self.ring)
            + "<|file_sep|>filename\n"
        )

    def prompt(self, text: str, cursor: int) -> str:
        """The server's prompt for a request at `cursor` of `text`."""
        line_start = text.rfind("\n", 0, cursor) + 1
        line_end = text.find("\n", cursor)
        line_end = len(text) if line_end == -1 else line_end
        above = text[:line_start].split("\n")[:-1][-N_PREFIX_LINES:]
        below = text[line_end + 1 :].split("\n")[:N_SUFFIX_LINES] if line_end < len(text) else []
        typed = text[line_start:cursor]
        prefix = _last_tokens("".join(ln + "\n" for ln in above), 3 * (N_BATCH // 4), self.count_tokens)
        suffix_room = max(0, N_BATCH // 4 - (2 + self.count_tokens(typed)))
        suffix = _first_tokens(
            text[cursor:line_end] + "\n" + "".join(ln + "\n" for ln in below), suffix_room, self.count_tokens
        )
        return f"{self.extra()}<|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>{typed}"

    def ring_prompt(self) -> str:
        """The prompt-only request a ring update sends (empty prefix, suffix and prompt)."""
        return f"{self.extra()}<|fim_prefix|><|fim_suffix|><|fim_middle|>"


@dataclass
class LlmLs:
    """llm-ls's `build_prompt` (FIM) and its single-line rule, with the model's tokenizer."""

    count_tokens: Callable[[str], int]
    context_window: int = LLM_LS_CONTEXT_WINDOW

    def prompt(self, text: str, cursor: int) -> str:
        line_start = text.rfind("\n", 0, cursor) + 1
        line_end = text.find("\n", cursor)
        line_end = len(text) if line_end == -1 else line_end + 1  # a line keeps its new line
        above = [text[line_start:cursor], *reversed(text[:line_start].splitlines(keepends=True))]
        below = [text[cursor:line_end], *text[line_end:].splitlines(keepends=True)]
        left = self.context_window - 3
        before: list[str] = []
        after: list[str] = []
        for i in range(max(len(above), len(below))):
            if i < len(above):
                n = self.count_tokens(above[i])
                if n > left:
                    break
                left -= n
                before.append(above[i])
            if i < len(below):
                n = self.count_tokens(below[i])
                if n > left:
                    break
                left -= n
                after.append(below[i])
        return f"<|fim_prefix|>{''.join(reversed(before))}<|fim_suffix|>{''.join(after)}<|fim_middle|>"

    @staticmethod
    def single_line(text: str, cursor: int) -> bool:
        """llm-ls asks for one line when the character after the cursor is whitespace (or the end of the text);
        its syntax-tree rule (an empty node: many lines) is left out: the replay types inside statements."""
        return cursor >= len(text) or text[cursor].isspace()


async def llama_vim_answer(
    engine: Any, rid: str, prompt: str, n_indent: int = 0, warm: bool = False
) -> tuple[str, GenerationStats]:
    """One llama.vim request on `engine`, the server's stops: `N_PREDICT` tokens, end of generation, and once the
    answer has a new line, `T_MAX_PREDICT_S` after the first token, or a line indented less than `n_indent` (cut
    before it). `warm`: the prompt-only request of a ring update (one token, background)."""
    req = GenerationRequest(
        prompt,
        max_tokens=1 if warm else N_PREDICT,
        id=rid,
        warm=warm,
        priority=Priority.BACKGROUND if warm else Priority.INTERACTIVE,
    )
    first: float | None = None
    text, stats, stopped = "", GenerationStats(), False
    async for event in engine.stream(req):
        if isinstance(event, Finished):
            stats = event.stats
        elif not stopped:
            text += event.text
            first = first or time.perf_counter()
            cut = indent_stop(text, n_indent)
            if cut is not None or ("\n" in text and time.perf_counter() - first > T_MAX_PREDICT_S):
                text = text if cut is None else text[:cut]
                stopped = True
                await engine.abort(rid)  # the answer so far is the answer
    return text, stats


def indent_stop(answer: str, n_indent: int) -> int | None:
    """The server's `n_indent` stop: where the answer is cut when a new line of it starts with less indentation
    than `n_indent` (the cursor line's), or None."""
    nl = answer.rfind("\n")
    if n_indent <= 0 or nl == -1:
        return None
    last = answer[nl + 1 :]
    if not last.strip():
        return None  # the line's indentation is not known yet
    return nl if len(last) - len(last.lstrip()) < n_indent else None


def _similarity(a: str, b: str) -> float:
    """llama.vim's `chunk_sim`: the share of lines the two chunks have in common."""
    la, lb = a.split("\n"), b.split("\n")
    common = sum(1 for line in la if line in lb)
    return 2.0 * common / (len(la) + len(lb))


def _last_tokens(text: str, n: int, count: Callable[[str], int]) -> str:
    """The end of `text` within `n` tokens, cut at a line start (the server cuts tokens; whole lines here)."""
    return "".join(reversed(_lines_within(reversed(text.splitlines(keepends=True)), n, count)))


def _first_tokens(text: str, n: int, count: Callable[[str], int]) -> str:
    """The start of `text` within `n` tokens, whole lines."""
    return "".join(_lines_within(text.splitlines(keepends=True), n, count))


def _lines_within(lines: Iterable[str], n: int, count: Callable[[str], int]) -> list[str]:
    """The leading `lines` whose tokens add up to at most `n`."""
    kept: list[str] = []
    used = 0
    for line in lines:
        used += count(line)
        if used > n:
            break
        kept.append(line)
    return kept
