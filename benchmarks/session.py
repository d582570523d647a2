"""Replay a real editing session through the real server and measure the first suggestion at each new place.

Typing on a line is cheap (a keystroke appends a token to the prompt); moving is not. This replays what people
do in `rich/console.py` of ../shared/workspaces/rich (the workspace folder sent in `initialize`), one server at a
time, the same events against each configuration:
- `start`: the server starts, the file opens, the user lands on a place and types at once (the model may still be
  loading: does that keystroke get its suggestion?);
- `jump`: land on another function's statement line (near: the next or previous place; far: across the file,
  up and down), whose code is removed (its indentation kept);
- `enter`: at the end of a finished line in the same function, press Enter (a new line at the same indentation);
- `switch`: open another module of the package and land in it;
- `back`: return to `console.py`, to a place edited a minute before (its line removed again), and type.
At each landing the client asks for code actions at the cursor (as VS Code does on every cursor move for its
lightbulb) and pauses `--pause` seconds (1.5) before the first keystroke; then it types the place's first
`--chars` characters (4), each a didChange plus an inlineCompletion request that it waits for, so nothing is
cancelled by the client and every figure counts every request (requests cut short by the server would be
counted at their time-to-abort and marked censored; none is expected). Before the next landing the place's
line is put back.

Per event kind: time from the first keystroke to its suggestion (p50/p90, n), whether it showed text, the prompt
tokens of that request and how many were new (not reused from the KV cache, nor loaded from a saved state), the
warm keystrokes' (2nd to 4th) time and new tokens, and the engine time spent on work nobody saw (warm-ups that
a request overtook, requests aborted before their first token). A suggestion that is the removed code's start
counts as `exact` (the same model on the same places; a check that speed did not cost answers).

Configurations: `sparkls` (this checkout, default settings), `sparkls-short` (the same with `firstWindowTokens`
`--first-window`: first answers at a new place from a short window), `sparkls-full` (`firstWindowTokens` 0: every
answer from the full prompt), `sparkls-ngram` (`speculation` ngram: prompt-lookup drafts for completions),
`baseline` (the server of `--baseline-ref`, run from a git worktree of that commit: today's behaviour before a
change) and `llama.vim-like` (the peer of benchmarks/peers.py: llama.vim's prompts at
its defaults on the same engine and model with `--cache-reuse 256`, in this process; its answers are not
streamed, so a keystroke waits for the whole answer, as in llama.vim). Both models with `--models 0.5b,1.5b`.
Each sparkls configuration's first-suggestion p50 is printed as a ratio to the peer's, the same metric on both sides.
Writes JSON with the commit, CPU, cores, date and command, and a table beside it.
Usage: python benchmarks/session.py [--models 0.5b,1.5b] [--configs sparkls,sparkls-full,baseline,llama.vim-like]
       [--baseline-ref REF] [--first-window 192] [--pause 1.5] [--chars 4] [--threads 0] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lsprotocol import types
from sparkls.engine.base import GenerationStats
from sparkls.text.document import Document
from sparkls.tools.client import Client, position

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peers
from common import baseline_env, dist, git, machine, plain
from latency import REQUEST_CANCELLED, body_rows, has_item

ROOT = Path(__file__).resolve().parents[1]
WORKSPACE = ROOT.parent / "shared" / "workspaces" / "rich"
MAIN_FILE = WORKSPACE / "rich" / "console.py"
OTHER_FILE = WORKSPACE / "rich" / "text.py"
MODELS = {"0.5b": "qwen2.5-coder-0.5b", "1.5b": "qwen2.5-coder-1.5b"}
# Where the replay goes, as indices into the file's places sorted by line: near and far, down and up.
ROUTE = (
    ("start", 2),
    ("jump", 3),
    ("jump", 9),
    ("jump", 8),
    ("enter", 8),
    ("jump", 0),
    ("jump", 5),
    ("jump", 11),
    ("enter", 11),
    ("switch", 2),
    ("back", 11),
    ("jump", 6),
)
N_PLACES = 12
CONFIGS: dict[str, dict[str, Any]] = {
    "sparkls": {},
    "sparkls-short": {},
    "sparkls-full": {},
    "sparkls-ngram": {"speculation": "ngram"},
    "baseline": {},
}
PEER = "llama.vim-like"


@dataclass(frozen=True)
class Place:
    row: int  # the statement line whose code is removed (or, for `enter`, after which Enter is pressed)
    indent: str
    code: str


def places(text: str, language: str, n: int) -> list[Place]:
    """`n` statement lines inside function bodies, spread evenly through the file (deterministic)."""
    doc = Document.open("file:///places", language, 1, text)
    lines = text.split("\n")
    rows: set[int] = set()
    for row in body_rows(doc):
        code = lines[row].strip()
        if (
            len(code) >= 16
            and not code.startswith(("#", '"', "'", "@"))
            and not code.endswith((":", "(", "[", "{", ",", "\\"))
        ):
            rows.add(row)
    ordered = sorted(rows)
    chosen = [ordered[int((i + 0.5) * len(ordered) / n)] for i in range(n)]
    return [Place(r, lines[r][: len(lines[r]) - len(lines[r].lstrip())], lines[r].strip()) for r in chosen]


def offset_of(text: str, row: int, column: int = 0) -> int:
    lines = text.split("\n")
    return sum(len(ln) + 1 for ln in lines[:row]) + column


@dataclass
class Event:
    kind: str
    file: str
    row: int
    first_ms: float | None = None  # first keystroke -> its answer
    censored: bool = False  # the first keystroke's request was cancelled: first_ms is its time-to-abort
    shown: bool = False
    exact: bool = False
    text: str = ""
    prompt_tokens: int = 0
    new_tokens: int = 0
    ttft_ms: float = 0.0  # the engine's time to first token of the first keystroke's request(s)
    warm_ms: list[float] = field(default_factory=list)  # the next keystrokes, keystroke -> answer
    warm_model_ms: list[float] = field(default_factory=list)  # ... those the model answered (not typed ahead)
    warm_new_tokens: list[int] = field(default_factory=list)
    warmup_prefilled: int = 0  # tokens warm-ups prefilled at this place before the first keystroke


@dataclass
class Doc:
    uri: str
    text: str
    version: int = 1


class Replay:
    def __init__(self, client: Client, chars: int, pause_s: float) -> None:
        self.client = client
        self.chars = chars
        self.pause_s = pause_s
        self.events: list[Event] = []
        self.engine: dict[str, dict[str, Any]] = {}
        self.suggestions: dict[tuple[str, int], dict[str, Any]] = {}
        self.msg = 0
        self.opened: set[str] = set()

    def open(self, d: Doc, row: int) -> None:
        if d.uri not in self.opened:
            self.opened.add(d.uri)
            self.client.open(d.uri, d.text, "python")

    async def check_ready(self) -> str:
        health = await self.client.wait_ready()
        return "" if health.ok else health.detail

    def change(self, d: Doc, start: int, end: int, new: str) -> None:
        d.version += 1
        lc = self.client.lc
        lc.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=d.uri, version=d.version),
                content_changes=[
                    types.TextDocumentContentChangePartial(
                        range=types.Range(start=position(d.text, start), end=position(d.text, end)), text=new
                    )
                ],
            )
        )
        d.text = d.text[:start] + new + d.text[end:]

    async def collect(self) -> None:
        m = plain(await self.client.request("sparkls/metrics"))
        self.engine.update((e["requestId"], e) for e in m["engine"])
        self.suggestions.update(((s["uri"], s["version"]), s) for s in m["suggestions"])

    async def ask(self, d: Doc, cursor: int) -> tuple[float, bool, bool, str]:
        """One inlineCompletion request at `cursor`, awaited: (ms, cancelled, shown, text)."""
        self.msg += 1
        t0 = time.perf_counter()
        params = self.client.inline_params(d.uri, d.text, cursor)
        try:
            result = await self.client.request("textDocument/inlineCompletion", params, msg_id=self.msg)
        except Exception as e:  # a cancelled request counts at its time-to-abort
            if getattr(e, "code", None) != REQUEST_CANCELLED:
                raise
            return (time.perf_counter() - t0) * 1000, True, False, ""
        items = getattr(result, "items", None) or []
        text = str(getattr(items[0], "insert_text", "")) if items else ""
        return (time.perf_counter() - t0) * 1000, False, has_item(result), text

    async def land(self, kind: str, d: Doc, row: int, cursor: int, typed: str, wanted: str) -> None:
        """At `cursor`: code actions, a pause, then `typed` one character at a time, each awaited."""
        ev = Event(kind, Path(d.uri).name, row)
        before = set(self.engine)
        self.client.lc.protocol.send_request_async(
            types.TEXT_DOCUMENT_CODE_ACTION,
            types.CodeActionParams(
                text_document=types.TextDocumentIdentifier(uri=d.uri),
                range=types.Range(start=position(d.text, cursor), end=position(d.text, cursor)),
                context=types.CodeActionContext(diagnostics=[]),
            ),
        )
        if kind != "start":
            await asyncio.sleep(self.pause_s)
        await self.collect()
        ev.warmup_prefilled = sum(
            e["prompt_tokens"] - e["reused_tokens"]
            for rid, e in self.engine.items()
            if rid.startswith("warm-") and rid not in before and e["finish_reason"] == "warm"
        )
        for i, ch in enumerate(typed):
            self.change(d, cursor, cursor, ch)
            cursor += 1
            ms, cancelled, shown, text = await self.ask(d, cursor)
            await self.collect()
            s = self.suggestions.get((d.uri, d.version))
            st = s["stats"] if s is not None else {}
            new = int(st.get("prompt_tokens", 0)) - int(st.get("reused_tokens", 0))
            if i == 0:
                ev.first_ms, ev.censored, ev.shown, ev.text = ms, cancelled, shown, text
                ev.prompt_tokens, ev.new_tokens = int(st.get("prompt_tokens", 0)), new
                ev.ttft_ms = float(s["timings"]["ttft_ms"]) if s is not None else 0.0
                ev.exact = shown and (typed[:1] + text).split("\n")[0].strip() == wanted
            else:
                ev.warm_ms.append(ms)
                if s is not None and s["source"] == "model":
                    ev.warm_model_ms.append(ms)
                    ev.warm_new_tokens.append(new)
        self.events.append(ev)


class PeerReplay:
    """The same landings and keystrokes against the llama.vim-like peer (benchmarks/peers.py): prompts built
    here, sent to a LlamaCppEngine in this process. A keystroke waits for the whole answer (llama.vim asks
    without streaming): its time to the first token, then at most 128 tokens or 1 s of decoding."""

    def __init__(self, engine: Any, model_path: str, chars: int, pause_s: float) -> None:
        from llama_cpp import Llama

        vocab = Llama(model_path=model_path, vocab_only=True, verbose=False)
        self.engine_ = engine
        self.peer = peers.LlamaVim(lambda t: len(vocab.tokenize(t.encode("utf-8"), add_bos=False, special=False)))
        self.chars = chars
        self.pause_s = pause_s
        self.events: list[Event] = []
        self.engine: dict[str, dict[str, Any]] = {}
        self.here: tuple[Doc, int] | None = None  # the document and line the cursor is on
        self.shown = ""  # the suggestion on screen (typing its start is answered from it)
        self.n = 0

    def _file(self, d: Doc) -> str:
        return str(Path(d.uri.removeprefix("file://")).relative_to(WORKSPACE))

    def open(self, d: Doc, row: int) -> None:
        if self.here is not None and self.here[0] is not d:  # BufLeave: a chunk around the cursor left
            left, left_row = self.here
            self.peer.enter(self._file(left), left.text, left_row)
        self.peer.enter(self._file(d), d.text, row)  # BufEnter
        self.here = (d, row)

    async def check_ready(self) -> str:
        health = await self.engine_.health()
        return "" if health.ok else health.detail

    def change(self, d: Doc, start: int, end: int, new: str) -> None:
        d.version += 1
        d.text = d.text[:start] + new + d.text[end:]

    async def _run(self, rid: str, prompt: str, warm: bool, n_indent: int = 0) -> tuple[str, GenerationStats, float]:
        t0 = time.perf_counter()
        text, stats = await peers.llama_vim_answer(self.engine_, rid, prompt, n_indent, warm)
        self.engine[rid] = asdict(stats)
        return text, stats, (time.perf_counter() - t0) * 1000

    async def land(self, kind: str, d: Doc, row: int, cursor: int, typed: str, wanted: str) -> None:
        ev = Event(kind, Path(d.uri).name, row)
        self.here, self.shown = (d, row), ""
        ring: asyncio.Task[tuple[str, GenerationStats, float]] | None = None
        if kind != "start":  # at rest: one ring update a second, its extra context sent to be prefilled
            await asyncio.sleep(min(1.0, self.pause_s))
            if self.peer.update():
                self.n += 1
                ring = asyncio.ensure_future(self._run(f"warm-ring-{self.n}", self.peer.ring_prompt(), True))
            await asyncio.sleep(max(0.0, self.pause_s - 1.0))
        for i, ch in enumerate(typed):
            self.change(d, cursor, cursor, ch)
            cursor += 1
            t0 = time.perf_counter()
            st: GenerationStats | None = None
            if self.shown[:1] == ch and len(self.shown) > 1:  # typed as shown: the rest, from the client's cache
                text, self.shown = self.shown[1:], self.shown[1:]
                ms = (time.perf_counter() - t0) * 1000
            else:
                self.peer.moved(self._file(d), d.text, row)
                self.n += 1
                line = d.text[d.text.rfind("\n", 0, cursor) + 1 : cursor]
                text, st, ms = await self._run(
                    f"peer-{self.n}", self.peer.prompt(d.text, cursor), False, len(line) - len(line.lstrip())
                )
                self.shown = text
            shown = bool(text.strip())
            if ring is not None and ring.done():
                ev.warmup_prefilled = max(
                    ev.warmup_prefilled, ring.result()[1].prompt_tokens - ring.result()[1].reused_tokens
                )
            new = 0 if st is None else st.prompt_tokens - st.reused_tokens
            if i == 0:
                ev.first_ms, ev.shown, ev.text = ms, shown, text
                ev.prompt_tokens, ev.new_tokens = (0, 0) if st is None else (st.prompt_tokens, new)
                ev.ttft_ms = 0.0 if st is None else st.ttft_ms
                ev.exact = shown and (typed[:1] + text).split("\n")[0].strip() == wanted
            else:
                ev.warm_ms.append(ms)
                if st is not None:
                    ev.warm_model_ms.append(ms)
                    ev.warm_new_tokens.append(new)
        if ring is not None:
            await ring
        self.events.append(ev)


async def drive(replay: Replay | PeerReplay, name: str, model: str) -> float:
    """The route through `console.py` and `text.py`: the same events against any replay. Wall seconds."""
    main_text = MAIN_FILE.read_text(encoding="utf-8")
    main = Doc(MAIN_FILE.as_uri(), main_text)
    spots = places(main_text, "python", N_PLACES)
    other_text = OTHER_FILE.read_text(encoding="utf-8")
    other = Doc(OTHER_FILE.as_uri(), other_text)
    other_spots = places(other_text, "python", N_PLACES)
    t_start = time.perf_counter()
    replay.open(main, spots[ROUTE[0][1]].row)
    started = False
    restore: tuple[Doc, int, int, str] | None = None  # (doc, start, end, original) of the line being edited
    for kind, index in ROUTE:
        if restore is not None:  # the previous place's line as it was
            d, start, end, original = restore
            replay.change(d, start, end, original)
            restore = None
        d, spot = (other, other_spots[index]) if kind == "switch" else (main, spots[index])
        if kind in ("switch", "back"):
            replay.open(d, spot.row)
        line_start = offset_of(d.text, spot.row)
        line_end = line_start + len(spot.indent) + len(spot.code)
        if kind == "enter":  # at the end of the finished line, Enter: a new line at the same indentation
            replay.change(d, line_end, line_end, "\n" + spot.indent)
            cursor = line_end + 1 + len(spot.indent)
            wanted = d.text.split("\n")[spot.row + 2].strip()
            await replay.land(kind, d, spot.row, cursor, wanted[: replay.chars], wanted)
            restore = (d, line_end, cursor + min(replay.chars, len(wanted)), "")
        else:  # the line's code removed, its indentation kept; `back` returns to a place of console.py
            cursor = line_start + len(spot.indent)
            replay.change(d, cursor, line_end, "")
            await replay.land(kind, d, spot.row, cursor, spot.code[: replay.chars], spot.code)
            restore = (d, cursor, cursor + min(replay.chars, len(spot.code)), spot.code)
        if not started:  # a replay on an engine that failed to load would measure nothing
            started = True
            problem = await replay.check_ready()
            if problem:
                raise SystemExit(f"{name} {model}: the engine is not available: {problem}")
    return time.perf_counter() - t_start


async def run_config(name: str, model: str, args: argparse.Namespace, env: dict[str, str] | None) -> dict[str, Any]:
    log_path = Path(tempfile.gettempdir()) / f"sparkls-session-{name}-{model}.log"
    client = Client(log_path)
    options: dict[str, Any] = {"model": MODELS[model], "threads": args.threads, **CONFIGS.get(name, {})}
    if name == "sparkls-short":
        options["firstWindowTokens"] = args.first_window
    if name == "sparkls-full":
        options["firstWindowTokens"] = 0
    await client.start(options, root=WORKSPACE, env=env)
    replay = Replay(client, args.chars, args.pause)
    try:
        wall = await drive(replay, name, model)
        await asyncio.sleep(0.5)
        await replay.collect()
        health = plain(await client.request("sparkls/health"))
    finally:
        await client.stop()
    return {
        "config": name,
        "model": model,
        "options": options,
        "wall_s": wall,
        "health": health,
        "events": [asdict(e) for e in replay.events],
        "engine": list(replay.engine.values()),
        "engine_ids": list(replay.engine),
    }


async def run_peer(model: str, args: argparse.Namespace) -> dict[str, Any]:
    """The llama.vim-like peer (benchmarks/peers.py) on the same engine class and model, in this process."""
    from sparkls.engine.llamacpp import LlamaCppEngine
    from sparkls.engine.model_files import resolve_model_path
    from sparkls.engine.options import LlamaCppOptions

    path = str(resolve_model_path("", MODELS[model]))
    options = LlamaCppOptions(
        model_path=path,
        threads=args.threads,
        n_ctx=peers.N_CTX,
        n_batch=peers.N_BATCH,
        cache_reuse=peers.CACHE_REUSE,
        kv_states_mb=0,
    )
    engine = LlamaCppEngine(options)
    replay = PeerReplay(engine, path, args.chars, args.pause)
    try:
        wall = await drive(replay, "llama.vim-like", model)
        health = asdict(await engine.health())
    finally:
        await engine.close()
    return {
        "config": "llama.vim-like",
        "model": model,
        "options": asdict(options),
        "wall_s": wall,
        "health": health,
        "events": [asdict(e) for e in replay.events],
        "engine": list(replay.engine.values()),
        "engine_ids": list(replay.engine),
    }


def summarize(run: dict[str, Any]) -> dict[str, Any]:
    events = run["events"]
    out: dict[str, Any] = {}
    groups = {"new place in an open file (jump, enter)": [e for e in events if e["kind"] in ("jump", "enter")]}
    for kind in ("start", "jump", "enter", "switch", "back"):
        groups[kind] = [e for e in events if e["kind"] == kind]
    for label, evs in groups.items():
        out[label] = {
            "first_ms": dist([e["first_ms"] for e in evs if e["first_ms"] is not None]),
            "ttft_ms": dist([e["ttft_ms"] for e in evs]),
            "censored": sum(e["censored"] for e in evs),
            "shown": sum(e["shown"] for e in evs),
            "exact": sum(e["exact"] for e in evs),
            "n": len(evs),
            "new_tokens": dist([e["new_tokens"] for e in evs]),
            "prompt_tokens": dist([e["prompt_tokens"] for e in evs]),
            "warmup_prefilled": dist([e["warmup_prefilled"] for e in evs]),
        }
    warm = [ms for e in events for ms in e["warm_ms"]]
    warm_new = [n for e in events for n in e["warm_new_tokens"]]
    engine = dict(zip(run["engine_ids"], run["engine"], strict=True))
    unseen_warm = sum(e["prefill_ms"] for rid, e in engine.items() if rid.startswith("warm-"))
    aborted = sum(
        e["prefill_ms"]
        for rid, e in engine.items()
        if not rid.startswith("warm-") and e["finish_reason"] == "abort" and e["decode_tokens"] == 0
    )
    out["warm keystrokes"] = {
        "ms": dist(warm),
        "model_ms": dist([ms for e in events for ms in e["warm_model_ms"]]),
        "new_tokens": dist(warm_new),
    }
    answered = [e for rid, e in engine.items() if not rid.startswith("warm-") and e["decode_tokens"] > 1]
    out["decoding"] = {
        "ms_per_token": sum(e["decode_ms"] for e in answered) / max(1, sum(e["decode_tokens"] for e in answered)),
        "tokens": sum(e["decode_tokens"] for e in answered),
        "drafted": sum(e["draft_tokens"] for e in answered),
        "accepted": sum(e["accepted_tokens"] for e in answered),
    }
    out["unseen engine work"] = {
        "warmup_prefill_s": unseen_warm / 1000,
        "aborted_prefill_s": aborted / 1000,
        "warmups": sum(rid.startswith("warm-") for rid in engine),
    }
    return out


def fmt(d: dict[str, Any], key: str = "p50") -> str:
    v = d.get(key)
    return "-" if v is None else f"{v:,.0f}"


def table(results: list[dict[str, Any]]) -> str:
    rows = []
    head = ["event", *[f"{r['config']} {r['model']}" for r in results]]
    rows.append(head)
    sums = [r["summary"] for r in results]
    for label in ("new place in an open file (jump, enter)", "start", "jump", "enter", "switch", "back"):
        rows.append(
            [
                f"{label}: first suggestion ms p50 / p90 (n)",
                *[f"{fmt(s[label]['first_ms'])} / {fmt(s[label]['first_ms'], 'p90')} ({s[label]['n']})" for s in sums],
            ]
        )
        rows.append(
            [
                f"{label}: engine TTFT ms p50 / p90",
                *[f"{fmt(s[label]['ttft_ms'])} / {fmt(s[label]['ttft_ms'], 'p90')}" for s in sums],
            ]
        )
        rows.append(
            [
                f"{label}: new / prompt tokens p50",
                *[f"{fmt(s[label]['new_tokens'])} / {fmt(s[label]['prompt_tokens'])}" for s in sums],
            ]
        )
        rows.append(
            [
                f"{label}: shown, exact, censored",
                *[f"{s[label]['shown']}, {s[label]['exact']}, {s[label]['censored']}" for s in sums],
            ]
        )
    rows.append(
        [
            "warm keystroke ms p50 (n)",
            *[f"{fmt(s['warm keystrokes']['ms'])} ({s['warm keystrokes']['ms']['n']})" for s in sums],
        ]
    )
    rows.append(
        [
            "warm keystroke, model-served ms p50 (n)",
            *[f"{fmt(s['warm keystrokes']['model_ms'])} ({s['warm keystrokes']['model_ms']['n']})" for s in sums],
        ]
    )
    rows.append(["warm keystroke new tokens p50", *[fmt(s["warm keystrokes"]["new_tokens"]) for s in sums]])
    rows.append(
        [
            "decoding ms per token (tokens), drafts accepted / drafted",
            *[
                f"{s['decoding']['ms_per_token']:.0f} ({s['decoding']['tokens']}), "
                f"{s['decoding']['accepted']} / {s['decoding']['drafted']}"
                for s in sums
            ],
        ]
    )
    rows.append(
        [
            "warm-ups (prefill s)",
            *[
                f"{s['unseen engine work']['warmups']} ({s['unseen engine work']['warmup_prefill_s']:.1f})"
                for s in sums
            ],
        ]
    )
    rows.append(
        ["aborted before a token (prefill s)", *[f"{s['unseen engine work']['aborted_prefill_s']:.1f}" for s in sums]]
    )
    for label in ("new place in an open file (jump, enter)", "switch", "back"):
        ratio = []
        for r, s in zip(results, sums, strict=True):
            peer = next(
                (
                    p["summary"][label]["first_ms"]["p50"]
                    for p in results
                    if p["config"] == PEER and p["model"] == r["model"]
                ),
                None,
            )
            mine = s[label]["first_ms"]["p50"]
            ratio.append("-" if peer is None or mine is None or r["config"] == PEER else f"{peer / mine:.1f}x")
        rows.append([f"{label}: peer p50 / this p50", *ratio])
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="0.5b")
    ap.add_argument("--configs", default="sparkls,baseline")
    ap.add_argument("--baseline-ref", default="f5df6f7")
    ap.add_argument("--pause", type=float, default=1.5, help="seconds between landing and the first keystroke")
    ap.add_argument("--chars", type=int, default=4)
    ap.add_argument("--first-window", type=int, default=192, help="`firstWindowTokens` of the sparkls-short config")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "session.json"))
    args = ap.parse_args()
    if not MAIN_FILE.exists():
        raise SystemExit(f"{MAIN_FILE} is missing: the replay reads ../shared/workspaces/rich")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        envs: dict[str, dict[str, str] | None] = {name: None for name in CONFIGS if name != "baseline"}
        if "baseline" in args.configs.split(","):
            envs["baseline"] = baseline_env(args.baseline_ref, Path(tmp) / "baseline")
        try:
            for model in args.models.split(","):
                for name in args.configs.split(","):
                    print(f"-- {name} {model}", flush=True)
                    if name == PEER:
                        run = asyncio.run(run_peer(model, args))
                    else:
                        run = asyncio.run(run_config(name, model, args, envs[name]))
                    run["summary"] = summarize(run)
                    results.append(run)
                    print(table([run]), flush=True)
        finally:
            if "baseline" in envs:
                git("worktree", "remove", "--force", str(Path(tmp) / "baseline"))
    text = table(results)
    print(text)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "machine": machine(),
        "baseline_ref": git("rev-parse", args.baseline_ref),
        "route": ROUTE,
        "results": results,
    }
    out.write_text(json.dumps(payload, indent=2))
    out.with_suffix(".txt").write_text(text + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
