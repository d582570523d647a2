"""Replay typing on real files through the real server and measure what a user waits for.

For each chosen file of ../shared/corpus, a line inside a function body is removed (its
indentation kept), the file is opened, the cursor is placed (one cold request, reported apart),
and the line is typed back one character at a time: a didChange and an inlineCompletion request
per keystroke, with $/cancelRequest for the previous request still pending, as editors do.

The same typing is replayed against each configuration in turn, one server at a time (same engine,
model and threads), never concurrently:
- anchored: the new defaults; the suffix goes before the typed text, so a keystroke appends a token or two;
- prefix: the previous layout (`promptLayout: prefix`, `suffixTokens: 24`): the typed text ends the
  prefix, so each keystroke re-computes the suffix after it;
- baseline (with --baseline-ref REF): the anchored configuration on the server of commit REF (a git worktree);
- llm-ls-like and llama.vim-like: the peer designs of benchmarks/peers.py at their best (KV prefix reuse and
  `--cache-reuse 256` chunk shifts, a keystroke aborting the request it supersedes), their prompts built here and
  sent to a LlamaCppEngine in this process with sparkls's default engine options and the same model and threads.
  Neither streams: a suggestion is shown when its answer is complete. llama.vim's cache answers a keystroke that
  types the start of the suggestion shown (counted as typed-ahead). Their time to suggestion has no LSP hop.
TTFT and time to suggestion are taken over every request: one cancelled or aborted before its answer counts at
its time to that end, a lower bound; a percentile that such a value can move is printed as ">= x", with the
number censored.

The server keeps only its latest requests, so `sparkls/metrics` is read after each file's cold request
and after its typing, and merged by request id. Engine figures (new prompt tokens, TTFT, KV reuse,
decode speed) come from the engine's request log, so requests later cancelled count too; what the user
was shown comes from the responses, matched to the server's suggestions by document and version.

Prints a table (one column per configuration, sample sizes beside the figures) and the ratios between
configurations, and writes JSON with the CPU, date and command (and a PNG plot when matplotlib is installed).
Usage: python benchmarks/latency.py [--files 8] [--configs anchored,prefix,llm-ls-like,llama.vim-like] [--threads 0]
       [--model M]
       [--baseline-ref REF]
       [--vllm-model DIR [--vllm-block-sizes 32,64,128]]  (adds `vllm-bN`: the model on vLLM, KV block size N)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from sparkls.completion import context
from sparkls.completion.prompt import TEMPLATES
from sparkls.engine.base import Delta, GenerationRequest
from sparkls.engine.options import LlamaCppOptions
from sparkls.text.document import Document
from sparkls.tools.client import Client

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peers
from common import ROOT, STARTED, baseline_env, dist, git, machine, plain

CORPUS = ROOT.parent / "shared" / "corpus"
EXT_LANG = {".py": "python", ".ts": "typescript", ".go": "go", ".rs": "rust"}
REQUEST_CANCELLED = -32800  # the JSON-RPC error code of a cancelled or superseded request


@dataclass(frozen=True)
class Config:
    name: str
    options: dict[str, Any]  # initializationOptions on top of the engine's
    cancel: bool  # the client sends $/cancelRequest for the previous pending request on each keystroke


PEERS = ("llm-ls-like", "llama.vim-like")  # harness layouts (benchmarks/peers.py), not server configurations


def configs(vllm_model: str = "", block_sizes: tuple[int, ...] = ()) -> dict[str, Config]:
    vllm = {"engine": "vllm", "modelPath": vllm_model}  # the same model converted (`sparkls convert-model`)
    return {
        c.name: c
        for c in (
            Config("anchored", {"promptLayout": "anchored"}, cancel=True),
            *(
                Config(f"vllm-b{b}", {"promptLayout": "anchored", "vllmBlockSize": b, **vllm}, cancel=True)
                for b in (block_sizes if vllm_model else ())
            ),
            Config("prefix", {"promptLayout": "prefix", "suffixTokens": 24}, cancel=True),
            *(Config(name, {"cacheReuse": peers.CACHE_REUSE}, cancel=True) for name in PEERS),
        )
    }


@dataclass
class Target:
    path: Path
    language: str
    text: str  # the file with the target line's code removed
    cursor: int  # where typing starts
    typed: str  # what the user types


def pick_targets(n_files: int, seed: int = 0, max_chars: int = 40) -> list[Target]:
    rng = random.Random(seed)
    files = sorted(p for p in CORPUS.rglob("*") if p.suffix in EXT_LANG)
    by_lang: dict[str, list[Path]] = {}
    for p in files:
        by_lang.setdefault(EXT_LANG[p.suffix], []).append(p)
    chosen: list[Path] = []
    while len(chosen) < n_files and any(by_lang.values()):
        for lang in sorted(by_lang):
            if by_lang[lang] and len(chosen) < n_files:
                chosen.append(by_lang[lang].pop(rng.randrange(len(by_lang[lang]))))
    targets = []
    for path in chosen:
        lang = EXT_LANG[path.suffix]
        text = path.read_text(encoding="utf-8")
        doc = Document.open(path.as_uri(), lang, 1, text)
        candidates = []
        for row in body_rows(doc):
            line = text.split("\n")[row] if row < text.count("\n") else ""
            code = line.strip()
            if len(code) >= 12 and not code.startswith(("//", "#", "/*", "*")):
                candidates.append(row)
        if not candidates:
            continue
        row = rng.choice(sorted(set(candidates)))
        lines = text.split("\n")
        line = lines[row]
        indent = line[: len(line) - len(line.lstrip())]
        typed = line.strip()[:max_chars]
        start = sum(len(ln) + 1 for ln in lines[:row]) + len(indent)
        new_text = text[:start] + text[start + len(line.strip()) :]
        targets.append(Target(path, lang, new_text, start, typed))
    return targets


def body_rows(doc: Document) -> list[int]:
    """Rows strictly inside the body of a definition of at least 4 lines (where a statement can be removed)."""
    kinds = context.DEFINITIONS[doc.language]
    rows = []
    stack = [doc.tree.root_node] if doc.tree else []
    while stack:
        node = stack.pop()
        stack.extend(node.children)
        body = node.child_by_field_name("body") if node.type in kinds else None
        if body is not None and body.end_point[0] - body.start_point[0] >= 4:
            rows.extend(range(body.start_point[0] + 1, body.end_point[0]))
    return rows


def schedule(typed: str, char_ms: float, word_pause_ms: float) -> list[float]:
    """Delay before each keystroke: steady typing with a pause after each word."""
    out = []
    for i, _ch in enumerate(typed):
        pause = word_pause_ms if i > 0 and typed[i - 1] in " .,(){}[]:;=" else 0.0
        out.append(char_ms + pause)
    return out


@dataclass
class Keystroke:
    uri: str
    version: int  # the document version the request was sent for
    outcome: str = "pending"  # completed | cancelled | error
    latency_ms: float | None = None  # keystroke -> response, completed requests only
    censored_ms: float | None = None  # keystroke -> its cancellation: a lower bound of its time to suggestion
    shown: bool = False  # the response held a non-empty item


@dataclass
class Run:
    config: Config
    options: dict[str, Any]
    keystrokes: list[Keystroke] = field(default_factory=list)
    cold_ms: list[float] = field(default_factory=list)
    cold_ids: set[str] = field(default_factory=set)  # request ids of each file's first request
    suggestions: dict[str, dict[str, Any]] = field(default_factory=dict)  # by request id
    engine: dict[str, dict[str, Any]] = field(default_factory=dict)  # engine request log, by request id
    model: str = ""
    setting_problems: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    counters: tuple[dict[str, Any], dict[str, Any]] = ({}, {})  # the engine's own counters before and after


def has_item(result: Any) -> bool:
    """Whether an inlineCompletion response shows something: a non-empty item."""
    items = getattr(result, "items", result) if result is not None else []
    return any(getattr(item, "insert_text", None) for item in items or [])


async def collect(client: Client, run: Run) -> dict[str, Any]:
    """Merge the server's recent suggestions and engine requests into the run; the engine's counters."""
    m = plain(await client.request("sparkls/metrics"))
    run.suggestions.update((s["requestId"], s) for s in m["suggestions"])
    run.engine.update((e["requestId"], e) for e in m["engine"])
    return m.get("engineStats") or {}


async def settle(client: Client, run: Run, quiet_s: float, limit_s: float = 60.0) -> None:
    """Read metrics until the engine has nothing queued and its request log stopped growing for `quiet_s`
    (a cancelled request ends at the engine's next check, after its response was sent)."""
    deadline = time.perf_counter() + limit_s
    last, quiet_since = -1, time.perf_counter()
    while time.perf_counter() < deadline:
        stats = await collect(client, run)
        if len(run.engine) != last or stats.get("waiting", 0):
            last, quiet_since = len(run.engine), time.perf_counter()
        elif time.perf_counter() - quiet_since >= quiet_s:
            return
        await asyncio.sleep(0.2)


def track(fut: asyncio.Future[Any], ks: Keystroke, sent_at: float) -> None:
    """Fill in the keystroke's outcome when its response arrives."""

    def done(f: asyncio.Future[Any]) -> None:
        exc = None if f.cancelled() else f.exception()
        if f.cancelled() or getattr(exc, "code", None) == REQUEST_CANCELLED:
            ks.outcome = "cancelled"
            ks.censored_ms = (time.perf_counter() - sent_at) * 1000
        elif exc is not None:
            ks.outcome = "error"
        else:
            ks.outcome, ks.shown = "completed", has_item(f.result())
            ks.latency_ms = (time.perf_counter() - sent_at) * 1000

    fut.add_done_callback(done)


async def type_file(client: Client, run: Run, k: int, t: Target, char_ms: float, word_pause_ms: float) -> None:
    """Open one file, ask once at the cursor (cold), then type the line back, a request per keystroke."""
    uri = f"file:///bench/{k}/{t.path.name}"
    text, version, cursor = t.text, 1, t.cursor
    client.open(uri, text, t.language)
    t0 = time.perf_counter()
    await client.request("textDocument/inlineCompletion", client.inline_params(uri, text, cursor))
    run.cold_ms.append((time.perf_counter() - t0) * 1000)
    await collect(client, run)
    run.cold_ids.update(rid for rid, s in run.suggestions.items() if s["uri"] == uri and s["version"] == 1)
    typed = t.typed
    pending: dict[int, asyncio.Future[Any]] = {}  # by message id (pygls' own ids are strings)
    for ch, delay in zip(typed, schedule(typed, char_ms, word_pause_ms), strict=True):
        await asyncio.sleep(delay / 1000)
        version += 1
        client.insert(uri, version, text, cursor, ch)
        text, cursor = text[:cursor] + ch + text[cursor:], cursor + 1
        if run.config.cancel and pending:
            previous = max(pending)
            if not pending[previous].done():
                client.cancel(previous)
        ks = Keystroke(uri, version)
        run.keystrokes.append(ks)
        msg_id = len(run.keystrokes)
        sent_at = time.perf_counter()
        fut = asyncio.ensure_future(
            client.request("textDocument/inlineCompletion", client.inline_params(uri, text, cursor), msg_id=msg_id)
        )
        track(fut, ks, sent_at)
        pending[msg_id] = fut
    if pending:
        await asyncio.wait(pending.values(), timeout=600)
    await settle(client, run, quiet_s=1.0)


async def replay(
    config: Config,
    base: dict[str, Any],
    targets: list[Target],
    char_ms: float,
    word_pause_ms: float,
    env: dict[str, str] | None = None,
) -> Run:
    run = Run(config, base | config.options)
    log_path = Path(tempfile.gettempdir()) / f"sparkls-bench-{config.name}.log"
    client = Client(log_path)
    await client.start(run.options, env=env)
    health = await client.wait_ready()
    if not health.ok:
        raise SystemExit(f"engine not available: {health.detail}")
    run.model = health.model
    before = await collect(client, run)
    t_start = time.perf_counter()
    for k, t in enumerate(targets):
        await type_file(client, run, k, t, char_ms, word_pause_ms)
    run.wall_s = time.perf_counter() - t_start
    await settle(client, run, quiet_s=2.0)
    run.counters = (before, await collect(client, run))
    await client.stop()
    run.setting_problems = [
        ln.split("settings: ", 1)[1].strip() for ln in log_path.read_text().splitlines() if "settings: `" in ln
    ]
    return run


class PeerTyping:
    """The typing replay against a peer design: the same files, cursors, keystrokes and schedule as `type_file`,
    its prompts built by benchmarks/peers.py and sent to `engine` (in this process). A keystroke aborts the
    request in flight (the peer's client cancels it, the server stops its slot) and sends its own."""

    def __init__(self, name: str, engine: Any, count_tokens: Callable[[str], int], run: Run) -> None:
        self.name, self.engine, self.run = name, engine, run
        self.llm_ls = peers.LlmLs(count_tokens)
        self.vim = peers.LlamaVim(count_tokens)
        self.shown = ""  # llama.vim: the suggestion on screen
        self.n = 0

    async def _answer(self, text: str, cursor: int) -> tuple[str, str]:
        """The peer's answer at `cursor` and its engine request id."""
        self.n += 1
        rid = f"{self.name}-{self.n}"
        if self.name == "llama.vim-like":
            line = text[text.rfind("\n", 0, cursor) + 1 : cursor]
            answer, _ = await peers.llama_vim_answer(
                self.engine, rid, self.vim.prompt(text, cursor), len(line) - len(line.lstrip())
            )
            return answer, rid
        if not self.llm_ls.single_line(text, cursor):
            return "", rid  # llm-ls offers nothing with code after the cursor
        req = GenerationRequest(
            self.llm_ls.prompt(text, cursor),
            max_tokens=peers.LLM_LS_MAX_NEW_TOKENS,
            stop=("\n", *TEMPLATES["qwen"].stops),
            id=rid,
        )
        out = ""
        async for ev in self.engine.stream(req):
            if isinstance(ev, Delta):
                out += ev.text
        return out, rid

    def _collect(self) -> None:
        self.run.engine.update((rid, asdict(st) | {"requestId": rid}) for rid, st in self.engine.completed)

    async def type_file(self, k: int, t: Target, char_ms: float, word_pause_ms: float) -> None:
        uri = f"file:///bench/{k}/{t.path.name}"
        text, version, cursor = t.text, 1, t.cursor
        file = t.path.name
        self.vim.enter(file, text, text.count("\n", 0, cursor))
        while self.vim.update():  # the ring's queued chunks, moved in while the user was elsewhere
            pass
        self.vim.moved(file, text, text.count("\n", 0, cursor))
        self.shown = ""
        t0 = time.perf_counter()
        _, rid = await self._answer(text, cursor)
        self.run.cold_ms.append((time.perf_counter() - t0) * 1000)
        self.run.cold_ids.add(rid)
        typed = t.typed
        inflight: tuple[asyncio.Task[None], Keystroke, float] | None = None
        tasks: list[asyncio.Task[None]] = []
        for ch, delay in zip(typed, schedule(typed, char_ms, word_pause_ms), strict=True):
            await asyncio.sleep(delay / 1000)
            version += 1
            text, cursor = text[:cursor] + ch + text[cursor:], cursor + 1
            if inflight is not None and not inflight[0].done():  # superseded: its request is aborted
                task, old, sent_at = inflight
                task.cancel()
                old.outcome, old.censored_ms = "cancelled", (time.perf_counter() - sent_at) * 1000
            ks = Keystroke(uri, version)
            self.run.keystrokes.append(ks)
            sent_at = time.perf_counter()
            if self.name == "llama.vim-like" and self.shown[:1] == ch and len(self.shown) > 1:
                self.shown = self.shown[1:]  # typed as shown: the rest, from the client's cache
                ks.outcome, ks.shown, ks.latency_ms = "completed", True, (time.perf_counter() - sent_at) * 1000
                self.run.suggestions[f"cache-{uri}-{version}"] = {"uri": uri, "version": version, "source": "typeahead"}
                continue
            self.shown = ""
            self.vim.moved(file, text, text.count("\n", 0, cursor))
            inflight = (asyncio.ensure_future(self._keystroke(ks, uri, version, text, cursor, sent_at)), ks, sent_at)
            tasks.append(inflight[0])
        await asyncio.gather(*tasks, return_exceptions=True)
        self._collect()

    async def _keystroke(self, ks: Keystroke, uri: str, version: int, text: str, cursor: int, sent_at: float) -> None:
        answer, rid = await self._answer(text, cursor)
        ks.outcome, ks.shown = "completed", bool(answer.strip())
        ks.latency_ms = (time.perf_counter() - sent_at) * 1000
        self.shown = answer
        self.run.suggestions[rid] = {"uri": uri, "version": version, "source": "model"}


async def replay_peer(
    config: Config, model: str, threads: int, targets: list[Target], char_ms: float, word_pause_ms: float
) -> Run:
    """`replay` for a peer design (`PEERS`): sparkls's default llama.cpp options with the peer's `--cache-reuse`."""
    from llama_cpp import Llama
    from sparkls.engine.llamacpp import LlamaCppEngine
    from sparkls.engine.model_files import resolve_model_path
    from sparkls.settings import Settings

    path = str(resolve_model_path("", model))
    options = Settings.model_validate({"model": model, "threads": threads}).engine_options()
    assert isinstance(options, LlamaCppOptions)
    options = replace(options, model_path=path, cache_reuse=config.options["cacheReuse"])
    vocab = Llama(model_path=path, vocab_only=True, verbose=False)
    run = Run(config, asdict(options), model=Path(path).name)
    engine = LlamaCppEngine(options)
    try:
        await engine.ready()
        driver = PeerTyping(
            config.name, engine, lambda t: len(vocab.tokenize(t.encode("utf-8"), add_bos=False, special=False)), run
        )
        before = dict((await engine.health()).stats)
        t_start = time.perf_counter()
        for k, t in enumerate(targets):
            await driver.type_file(k, t, char_ms, word_pause_ms)
        run.wall_s = time.perf_counter() - t_start
        run.counters = (before, dict((await engine.health()).stats))
    finally:
        await engine.close()
    return run


def censored_dist(observed: list[float], censored: list[float]) -> dict[str, Any]:
    """Percentiles over every request: the observed values and, for requests cancelled or aborted before an
    answer, their time to that end, a lower bound of what they would have taken. A percentile is then itself a
    lower bound (`p50_at_least`) when some censored value is at or below it: that request may lie above it."""
    values = observed + censored
    out = dist(values) | {"censored": len(censored)}
    for key in ("p50", "p90"):
        v = out[key]
        out[f"{key}_at_least"] = v is not None and any(c <= v for c in censored)
    return out


def summarize(run: Run) -> dict[str, Any]:
    # the requests keystrokes sent; background warm-ups (the full prompt prefilled after a first answer) apart
    typing = [e for rid, e in run.engine.items() if rid not in run.cold_ids and not rid.startswith("warm-")]
    warmups = [e for rid, e in run.engine.items() if rid.startswith("warm-")]
    started = [e for e in typing if e["prompt_tokens"] > 0]  # the rest were cancelled while queued
    # vLLM reports a request's cached tokens with its first output: one aborted before it is unknown, not 0
    known = [e for e in started if e.get("reuse_known", True)]
    prompt = sum(e["prompt_tokens"] for e in known)
    reused = sum(e["reused_tokens"] for e in known)
    before, after = run.counters
    queries = after.get("prefix_cache_queries", 0) - before.get("prefix_cache_queries", 0)
    hits = after.get("prefix_cache_hits", 0) - before.get("prefix_cache_hits", 0)
    tps = [
        e["decode_tokens"] / (e["decode_ms"] / 1000)
        for e in run.engine.values()
        if e["decode_tokens"] > 2 and e["decode_ms"] > 0
    ]
    model = [s for s in run.suggestions.values() if s["source"] == "model"]
    source = {(s["uri"], s["version"]): s["source"] for s in run.suggestions.values()}
    done = [k for k in run.keystrokes if k.outcome == "completed"]
    shown = [source.get((k.uri, k.version), "unmatched") for k in done if k.shown]
    shown_model = [k.latency_ms or 0.0 for k in done if k.shown and source.get((k.uri, k.version)) == "model"]
    return {
        "name": run.config.name,
        "options": run.options,
        "client_cancels": run.config.cancel,
        "setting_problems": run.setting_problems,
        "model": run.model,
        "keystrokes": len(run.keystrokes),
        "completed": len(done),
        "cancelled": sum(k.outcome == "cancelled" for k in run.keystrokes),
        "errors": sum(k.outcome == "error" for k in run.keystrokes),
        "new_prompt_tokens_warm": dist([e["prompt_tokens"] - e["reused_tokens"] for e in known]),
        # every typing request: those aborted before a token at their time to abort (llama.cpp: the prefill they
        # got through; vLLM: from sending to the abort)
        "warm_ttft_ms": censored_dist(
            [e["ttft_ms"] for e in typing if e["decode_tokens"] > 0],
            [
                max(e["ttft_ms"], e["prefill_ms"])
                for e in typing
                if e["decode_tokens"] == 0 and e["finish_reason"] == "abort"
            ],
        ),
        "server_overhead_ms_model": dist([s["timings"]["overhead_ms"] for s in model if "timings" in s]),
        "shown_model": len(shown_model),
        "shown_typeahead": shown.count("typeahead"),
        "shown_other": len(shown) - len(shown_model) - shown.count("typeahead"),
        "time_to_suggestion_ms": censored_dist(
            [k.latency_ms for k in done if k.latency_ms is not None],
            [k.censored_ms for k in run.keystrokes if k.censored_ms is not None],
        ),
        "time_to_model_suggestion_shown_ms": dist(shown_model),
        "cold_first_request_ms": dist(run.cold_ms) | {"max": max(run.cold_ms, default=None)},
        "decode_tok_s": dist(tps),
        "kv_reuse_fraction_typing": reused / prompt if prompt else 0.0,
        "engine_requests_typing": len(typing),
        "engine_requests_typing_started": len(started),
        "engine_requests_typing_reuse_known": len(known),
        # the engine's own count over the whole replay (vLLM: every scheduled request, aborted ones too)
        "prefix_cache_hit_rate": hits / queries if queries else None,
        "prefix_cache_queried_tokens": int(queries),
        "prompt_tokens_typing": prompt,
        "reused_tokens_typing": reused,
        "typeahead_served": sum(s["source"] == "typeahead" for s in run.suggestions.values()),
        # a supervisor's rebuilds during the replay (a hang or a crash): a run with any is not a clean measurement
        "engine_restarts": int(after.get("restarts", 0) - before.get("restarts", 0)),
        "warmups": len(warmups),
        "warmup_new_tokens": sum(e["prompt_tokens"] - e["reused_tokens"] for e in warmups),
        "wall_s": run.wall_s,
    }


def num(v: float | None, digits: int = 0) -> str:
    return "-" if v is None else f"{v:,.{digits}f}"


def spread(d: dict[str, Any], digits: int = 0) -> str:
    """p50 / p90 (n), a bound marked ">=", and the share censored where there is one."""

    def v(key: str) -> str:
        return (">= " if d.get(f"{key}_at_least") else "") + num(d[key], digits)

    cut = f", {d['censored']} censored" if d.get("censored") else ""
    return f"{v('p50')} / {v('p90')} (n={d['n']}{cut})"


def share(part: int, whole: int) -> str:
    return f"{part} / {whole} ({part / whole:.0%})" if whole else f"{part} / 0"


ROWS = [
    ("new prompt tokens/warm request p50/p90", lambda r: spread(r["new_prompt_tokens_warm"])),
    ("warm TTFT p50 / p90 (ms)", lambda r: spread(r["warm_ttft_ms"])),
    ("server overhead p50/p90 (ms), model", lambda r: spread(r["server_overhead_ms_model"], 2)),
    ("keystrokes showing a model suggestion", lambda r: share(r["shown_model"], r["keystrokes"])),
    ("keystrokes showing a typed-ahead one", lambda r: share(r["shown_typeahead"], r["keystrokes"])),
    ("time to suggestion p50 / p90 (ms)", lambda r: spread(r["time_to_suggestion_ms"])),
    ("  where a model suggestion was shown", lambda r: spread(r["time_to_model_suggestion_shown_ms"])),
    (
        "cold first request p50 (ms)",
        lambda r: f"{num(r['cold_first_request_ms']['p50'])} (n={r['cold_first_request_ms']['n']})",
    ),
    ("decode tok/s p50", lambda r: f"{num(r['decode_tok_s']['p50'], 1)} (n={r['decode_tok_s']['n']})"),
    (
        "KV reuse while typing",
        lambda r: f"{r['kv_reuse_fraction_typing']:.1%} (n={r['engine_requests_typing_reuse_known']})",
    ),
    (
        "engine's prefix-cache hit rate",
        lambda r: (
            "-"
            if r.get("prefix_cache_hit_rate") is None
            else f"{r['prefix_cache_hit_rate']:.1%} of {r['prefix_cache_queried_tokens']:,} tokens"
        ),
    ),
    (
        "requests / completed / cancelled",
        lambda r: (
            f"{r['keystrokes']}/{r['completed']}/{r['cancelled']}" + (f" +{r['errors']} err" if r["errors"] else "")
        ),
    ),
    ("engine restarts (a hang or crash)", lambda r: str(r.get("engine_restarts", "-"))),
    ("typed-ahead served", lambda r: str(r["typeahead_served"])),
    ("background warm-ups / their new tokens", lambda r: f"{r['warmups']} / {r['warmup_new_tokens']:,}"),
    ("wall time (s)", lambda r: num(r["wall_s"])),
]


def p50_ratio(by_name: dict[str, dict[str, Any]], a: str, b: str, key: str) -> float | None:
    if a not in by_name or b not in by_name:
        return None
    x, y = by_name[a][key]["p50"], by_name[b][key]["p50"]
    return x / y if x is not None and y else None


def ratio_bound(by_name: dict[str, dict[str, Any]], a: str, b: str, key: str) -> str:
    """How a/b of two p50s holds where either is a lower bound: ">=" (only a is), "<=" (only b), "?" (both)."""
    lo_a, lo_b = (by_name[n][key].get("p50_at_least", False) if n in by_name else False for n in (a, b))
    return "?" if lo_a and lo_b else ">=" if lo_a else "<=" if lo_b else ""


RATIO_METRICS = (
    ("time_to_suggestion_ms", "time to suggestion p50"),
    ("warm_ttft_ms", "warm TTFT p50"),
    ("new_prompt_tokens_warm", "new prompt tokens per warm request p50"),
    ("cold_first_request_ms", "cold first request p50"),
)


def pairs(results: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The (a, b) pairs compared: anchored against each peer, the prefix layout and the baseline."""
    names = {r["name"] for r in results}
    return [
        (a, b)
        for a, b in (("anchored", "prefix"), *(("anchored", p) for p in PEERS), ("anchored", "baseline"))
        if a in names and b in names
    ]


def ratios(results: list[dict[str, Any]]) -> dict[str, float | None]:
    """a / b of the same metric's p50 on both sides, for each pair."""
    by = {r["name"]: r for r in results}
    out = {f"{key}_p50_{a}_over_{b}": p50_ratio(by, a, b, key) for a, b in pairs(results) for key, _ in RATIO_METRICS}
    return {k: v for k, v in out.items() if v is not None}


def print_report(results: list[dict[str, Any]], rat: dict[str, float | None]) -> None:
    by = {r["name"]: r for r in results}
    width = max(24, *(len(get(r)) + 2 for _, get in ROWS for r in results))
    print(f"\n{'metric':<40}" + "".join(f"{r['name']:>{width}}" for r in results))
    for label, get in ROWS:
        print(f"{label:<40}" + "".join(f"{get(r):>{width}}" for r in results))
    for r in results:
        for problem in r["setting_problems"]:
            print(f"note: {r['name']}: the server rejected a setting: {problem}")
        if r["shown_other"]:
            print(
                f"note: {r['name']}: {r['shown_other']} shown answers not matched to a model or typed-ahead suggestion"
            )
    print()
    if any(r["setting_problems"] for r in results):
        print("the server fell back to defaults for some settings (see the notes): ratios may not mean what they say")
    for a, b in pairs(results):
        for key, label in RATIO_METRICS:
            if (v := rat.get(f"{key}_p50_{a}_over_{b}")) is not None:
                bound = ratio_bound(by, a, b, key)
                print(f"{a} / {b} {label}: {bound + ' ' if bound else ''}{v:.2f}")


def plot(runs: list[Run], path: Path) -> None:
    try:
        import matplotlib
    except ImportError:
        print("matplotlib is not installed: no plot")
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(1.6 + 1.4 * len(runs), 3.2))
    data = [[k.latency_ms for k in r.keystrokes if k.latency_ms is not None] or [math.nan] for r in runs]
    ax.boxplot(data)
    ax.set_xticks(range(1, len(runs) + 1), [r.config.name for r in runs])
    ax.set_yscale("log")
    ax.set_ylabel("keystroke -> suggestion (ms)")
    fig.tight_layout()
    fig.savefig(path)
    print(f"wrote {path}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument(
        "--baseline-ref",
        default="",
        help="also run `baseline`: the anchored layout on the server of this commit (a git worktree), in the same run",
    )
    ap.add_argument("--threads", type=int, default=0, help="decoding threads (0: the `threads` setting's default)")
    ap.add_argument("--model", default="qwen2.5-coder-0.5b", help="bundled model (`model` setting)")
    ap.add_argument("--char-ms", type=float, default=120.0, help="delay between keystrokes")
    ap.add_argument("--word-pause-ms", type=float, default=400.0, help="extra pause after a word")
    ap.add_argument(
        "--configs", default="anchored,llm-ls-like,llama.vim-like", help="configurations to run, in this order"
    )
    ap.add_argument(
        "--vllm-model",
        default="",
        help="an HF checkpoint of the same model (`sparkls convert-model "
        "DIR`): adds configurations `vllm-bN`, the anchored layout on the vLLM engine, KV block size N",
    )
    ap.add_argument("--vllm-block-sizes", default="32,64,128", help="vLLM KV block sizes, one configuration each")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "latency.json"))
    args = ap.parse_args()
    block_sizes = tuple(int(b) for b in args.vllm_block_sizes.split(",") if b) if args.vllm_model else ()
    known = configs(args.vllm_model, block_sizes)
    names = [n for n in args.configs.split(",") if n] + [f"vllm-b{b}" for b in block_sizes]
    names = list(dict.fromkeys(names))
    if unknown := [n for n in names if n not in known]:
        ap.error(f"unknown configuration(s) {', '.join(unknown)}; known: {', '.join(known)}")
    if not CORPUS.is_dir():
        print(f"no corpus at {CORPUS}", file=sys.stderr)
        return 2
    targets = pick_targets(args.files)
    meta = machine() | {
        "commit": STARTED["commit"],
        "files": [t.path.name for t in targets],
        "keystrokes": sum(len(t.typed) for t in targets),
        "args": vars(args),
    }
    print(
        f"{len(targets)} files, {meta['keystrokes']} keystrokes; {meta['cpu']}, {meta['cores']} cores; "
        f"threads={args.threads or 'default'}; configurations: {', '.join(names)} (one after another)"
    )
    base = {"engine": "llamacpp", "threads": args.threads, "model": args.model}
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        if args.baseline_ref:
            names.append("baseline")
            known["baseline"] = Config("baseline", known["anchored"].options, cancel=True)
            meta["baseline_commit"] = git("rev-parse", args.baseline_ref)
        envs = {"baseline": baseline_env(args.baseline_ref, Path(tmp) / "baseline")} if args.baseline_ref else {}
        try:
            for name in names:
                print(f"running {name} ...", flush=True)
                if name in PEERS:
                    runs.append(
                        asyncio.run(
                            replay_peer(
                                known[name], args.model, args.threads, targets, args.char_ms, args.word_pause_ms
                            )
                        )
                    )
                else:
                    runs.append(
                        asyncio.run(
                            replay(known[name], base, targets, args.char_ms, args.word_pause_ms, envs.get(name))
                        )
                    )
        finally:
            if envs:
                git("worktree", "remove", "--force", str(Path(tmp) / "baseline"))
    results = [summarize(r) for r in runs]
    rat = ratios(results)
    print_report(results, rat)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    raw = {
        r.config.name: {
            "engine_requests": list(r.engine.values()),
            "suggestions": list(r.suggestions.values()),
            "keystrokes": [asdict(k) for k in r.keystrokes],
            "cold_ids": sorted(r.cold_ids),
        }
        for r in runs
    }
    out.write_text(json.dumps({"meta": meta, "results": results, "ratios": rat, "raw": raw}, indent=2, default=str))
    print(f"wrote {out}")
    plot(runs, out.with_suffix(".png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
