"""One suggestion, from a document snapshot and a cursor to cleaned text, with per-stage timings.

document + tree -> context (keeping the previous request's stable frame while it holds; a new frame
gathers workspace context) -> prompt (credential-looking values redacted; a cursor line that holds one gets no
suggestion and sends nothing) -> engine stream (early stop) -> finalize. No LSP types here:
offsets and strings in, a `Suggestion` out, in two steps: `prepare` (the context, whose frame the caller
keeps) and `generate`. Cancelling
the calling task aborts the engine request (the engine's stream does it on CancelledError/
GeneratorExit); an early stop aborts it too.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from sparkls.completion import context, prompt, typeahead
from sparkls.completion.stopping import StopPolicy, finalize, unheal
from sparkls.engine.base import (
    CHARS_PER_TOKEN,
    Delta,
    Engine,
    Finished,
    GenerationRequest,
    GenerationStats,
    Priority,
    new_request_id,
    priority_label,
)
from sparkls.settings import Settings
from sparkls.text.document import Document, file_name
from sparkls.workspace import redact

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Timings:
    context_ms: float = 0.0
    prompt_ms: float = 0.0
    queue_ms: float = 0.0
    ttft_ms: float = 0.0  # engine time to first token (prefill included)
    decode_ms: float = 0.0
    post_ms: float = 0.0
    total_ms: float = 0.0

    @property
    def engine_ms(self) -> float:
        return self.queue_ms + self.ttft_ms + self.decode_ms

    @property
    def overhead_ms(self) -> float:
        """End-to-end time in the server that is not the engine's."""
        return max(0.0, self.total_ms - self.engine_ms)


@dataclass(frozen=True)
class Suggestion:
    uri: str
    version: int
    cursor: int  # string offset where `text` is inserted
    text: str
    mode: str
    source: str  # "model" | "typeahead" | "none"
    timings: Timings = field(default_factory=Timings)
    stats: GenerationStats = field(default_factory=GenerationStats)
    request_id: str = ""


@dataclass(frozen=True)
class Place:
    """Where the document sits in the workspace: its path in the prompt, the repository's name, and
    a function that returns other files' snippets for a new frame (run in a thread: it reads files)."""

    path: str
    repo: str = ""
    snippets: Callable[[Document, int, int], list[tuple[str, str]]] | None = None  # (doc, cursor, budget chars)


def budget_of(settings: Settings) -> context.Budget:
    return context.Budget(settings.prefix_tokens, settings.suffix_tokens, settings.preamble_tokens)


def first_window_of(settings: Settings) -> context.Budget | None:
    """The budget of the first frame at a new place (`firstWindowTokens` before the anchor, from the enclosing
    definition when it starts within twice as many; as many after the cursor, up to `suffixTokens`; the same
    outline), or None when first answers come from the full frame."""
    if settings.first_window_tokens <= 0:
        return None
    full = budget_of(settings)
    return context.Budget(
        min(settings.first_window_tokens, full.prefix_tokens),
        min(settings.first_window_tokens, full.suffix_tokens),
        full.preamble_tokens,
        first=True,
    )


def place_of(uri: str) -> Place:
    """A document outside any workspace folder: its file name, no other files."""
    return Place(file_name(uri))


async def _with_snippets(
    ctx: context.Context, previous: context.Frame | None, place: Place, doc: Document, budget_chars: int
) -> context.Context:
    """A new frame gets other files' snippets; a frame kept from the last request already has them. They are
    chosen for the whole file and kept for every new frame in the same document, so moving to another place
    does not change the head (the start of the prompt, where a change costs the whole KV cache). A short first
    frame in a document not seen before has none: its first answer does not wait for another ~600 tokens (the
    full frame prefilled after it has them, and later first frames in the document too)."""
    frame = ctx.frame
    if frame is None or frame is previous or place.snippets is None or budget_chars <= 0:
        return ctx
    if frame.budget.first and (previous is None or previous.uri != frame.uri):
        return ctx
    if previous is not None and previous.uri == frame.uri and previous.snippets:
        snippets = previous.snippets
    else:
        try:
            snippets = tuple(await asyncio.to_thread(place.snippets, doc, ctx.cursor, budget_chars))
        except Exception:  # an unreadable folder or a parser problem must not cost the suggestion
            log.exception("workspace context for %s failed; none this time", doc.uri)
            snippets = ()
    return replace(ctx, frame=replace(frame, snippets=snippets))


@dataclass(frozen=True)
class Prepared:
    """What `prepare` found at a cursor: the context the model completes (its frame is what the next request
    stands on), or an answer that needs no model (`answer`: a credential on the line, the typed-ahead rest)."""

    doc: Document
    cursor: int
    request_id: str
    place: Place
    started: float  # `time.perf_counter()` when the request began
    ctx: context.Context | None = None
    answer: Suggestion | None = None


async def prepare(
    doc: Document,
    cursor: int,
    settings: Settings,
    *,
    cache: typeahead.Remembered | None = None,
    request_id: str | None = None,
    invoked: bool = False,
    frame: context.Frame | None = None,
    place: Place | None = None,
    budget: context.Budget | None = None,
) -> Prepared:
    """The first step of a suggestion at `cursor` (a string offset into `doc.text`): the context, on `frame`
    (the last request's stable prompt part for this document) while it holds under `budget` (default the
    settings'), or an answer without the model. The caller keeps `ctx.frame` before `generate` runs: a request
    superseded mid-prefill leaves its frame, and the KV it computed, to the next keystroke."""
    t0 = time.perf_counter()
    rid = request_id or new_request_id("sugg")
    place = place or place_of(doc.uri)
    if redact.on_line(doc.text, cursor):
        log.info("%s no suggestion: the cursor's line looks like a credential (it is not sent to the model)", rid)
        return Prepared(doc, cursor, rid, place, t0, answer=_answer(doc, cursor, "", "none", t0, rid))
    if settings.typeahead and not invoked:  # an explicit request asks the model again
        rest = typeahead.lookup(cache, doc.uri, doc.text, cursor)
        if rest is not None:
            return Prepared(doc, cursor, rid, place, t0, answer=_answer(doc, cursor, rest, "typeahead", t0, rid))
    ctx = context.build(doc, cursor, budget or budget_of(settings), settings.prompt_layout, frame)
    ctx = await _with_snippets(ctx, frame, place, doc, int(settings.context_tokens * CHARS_PER_TOKEN))
    return Prepared(doc, cursor, rid, place, t0, ctx=ctx)


def _answer(doc: Document, cursor: int, text: str, source: str, t0: float, rid: str) -> Suggestion:
    total = (time.perf_counter() - t0) * 1000
    mode = "typeahead" if source == "typeahead" else "single"
    return Suggestion(
        doc.uri, doc.version, cursor, text, mode, source, Timings(total_ms=total, post_ms=total), request_id=rid
    )


async def generate(p: Prepared, settings: Settings, engine: Engine, template: prompt.FimTemplate) -> Suggestion:
    """The second step: the engine's answer to the prepared context, stopped where it is complete and cleaned."""
    if p.answer is not None or p.ctx is None:
        return p.answer or _answer(p.doc, p.cursor, "", "none", p.started, p.request_id)
    ctx, t1 = p.ctx, time.perf_counter()
    text, stats, prompt_ms = await _generate(ctx, settings, engine, template, p.place, p.request_id)
    engine_ms = [stats]
    if not text.strip() and ctx.line_done and stats.finish_reason == "stop":
        # The model ended the answer at once: the line is finished, so ask for the next one.
        ctx = context.next_line(ctx)
        text, stats, more_ms = await _generate(ctx, settings, engine, template, p.place, new_request_id("sugg"))
        prompt_ms += more_ms
        engine_ms.append(stats)
    t3 = time.perf_counter()
    final = _without_placeholder(finalize(text, ctx), p.request_id)
    if ctx.newline and final.strip():
        final = ctx.eol + final  # the newline the prompt assumed
    t4 = time.perf_counter()
    timings = Timings(
        context_ms=(t1 - p.started) * 1000,
        prompt_ms=prompt_ms,
        queue_ms=sum(st.queue_ms for st in engine_ms),
        ttft_ms=sum(st.ttft_ms for st in engine_ms),
        decode_ms=sum(st.decode_ms for st in engine_ms),
        post_ms=(t4 - t3) * 1000,
        total_ms=(t4 - p.started) * 1000,
    )
    return Suggestion(p.doc.uri, p.doc.version, p.cursor, final, ctx.mode, "model", timings, stats, p.request_id)


async def suggest(
    doc: Document, cursor: int, settings: Settings, engine: Engine, template: prompt.FimTemplate, **where: Any
) -> Suggestion:
    """`prepare` then `generate` (for callers that keep no frame between them: tests, scripts); `where` are
    `prepare`'s keyword arguments."""
    return await generate(await prepare(doc, cursor, settings, **where), settings, engine, template)


async def warm(p: Prepared, engine: Engine, template: prompt.FimTemplate) -> GenerationStats | None:
    """Prefill the prompt a keystroke at the prepared place will send, before it comes (the caller keeps
    `p.ctx.frame`, so the keystroke stands on it), as a warm-up request (`GenerationRequest.warm`: the engine
    computes its KV after all other work and drops it when a request arrives; the KV computed so far stays).
    None where a suggestion would send nothing (a credential on the cursor's line)."""
    if p.ctx is None:
        return None
    rendered = prompt.render(context.redacted(p.ctx), template, path=p.place.path, repo=p.place.repo)
    req = GenerationRequest(
        rendered.text,
        max_tokens=1,
        stop=template.stops,
        priority=Priority.BACKGROUND,
        id=new_request_id("warm"),
        warm=True,
    )
    stats = GenerationStats()
    stream = engine.stream(req)
    try:
        async for event in stream:
            if isinstance(event, Finished):
                stats = event.stats
    finally:
        await stream.aclose()
    return stats


def _without_placeholder(text: str, rid: str) -> str:
    """A suggestion cut before the line where the model wrote the redaction placeholder (copied from the prompt):
    `<redacted>` is never offered as code."""
    at = text.find(redact.PLACEHOLDER)
    if at == -1:
        return text
    log.info("%s: the suggestion repeats %s; cut before its line", rid, redact.PLACEHOLDER)
    return text[: text.rfind("\n", 0, at) + 1].rstrip()


async def _generate(
    ctx: context.Context, settings: Settings, engine: Engine, template: prompt.FimTemplate, place: Place, rid: str
) -> tuple[str, GenerationStats, float]:
    """Run the engine on the prompt for `ctx` until the stop policy has a complete answer: the answer
    relative to the cursor (not yet finalized), the engine's statistics, and the prompt rendering ms."""
    t0 = time.perf_counter()
    shown = context.redacted(ctx)
    p = prompt.render(shown, template, path=place.path, repo=place.repo)
    prompt_ms = (time.perf_counter() - t0) * 1000
    max_tokens = settings.max_tokens_single if ctx.mode == "single" else settings.max_tokens_multi
    # A prompt that ends after `Style.` or `f(` splits a token the model would write (`.parse`, `(x`): the engine
    # heals it (engine/healing.py). One that ends at a line start or at its FIM marker needs no healing.
    heal = bool(shown.middle) and not shown.middle.endswith("\n")
    req = GenerationRequest(
        p.text, max_tokens=max_tokens, stop=template.stops, priority=Priority.INTERACTIVE, id=rid, heal=heal
    )
    policy = StopPolicy(ctx, settings.max_lines)
    raw = ""
    text = ""
    stats = GenerationStats()
    cut_at: int | None = None
    stream = engine.stream(req)
    try:
        async for event in stream:
            if isinstance(event, Finished):
                stats = event.stats
                break
            if isinstance(event, Delta) and cut_at is None:
                raw += event.text
                healed = unheal(raw, ctx.heal)
                if healed is None:
                    continue
                text = healed
                cut_at = policy.feed(text)
                if cut_at is not None:
                    text = text[:cut_at]
                    await engine.abort(rid)  # complete: stop the engine, then collect its stats
    finally:
        await stream.aclose()
    if cut_at is None:
        text = unheal(raw, ctx.heal) or ""
    return text, stats, prompt_ms


def log_line(s: Suggestion) -> str:
    t = s.timings
    st = s.stats
    return (
        f"{s.request_id} {s.source} {s.mode} v{s.version} ctx={t.context_ms:.1f} prompt={t.prompt_ms:.1f} "
        f"queue={t.queue_ms:.1f} ttft={t.ttft_ms:.1f} decode={t.decode_ms:.1f} post={t.post_ms:.1f} "
        f"total={t.total_ms:.1f}ms overhead={t.overhead_ms:.1f}ms tokens={st.decode_tokens} "
        f"prompt_tokens={st.prompt_tokens} reused={st.reused_tokens} finish={st.finish_reason} "
        f"class={priority_label(st.priority)} preempted={st.preemptions} chars={len(s.text)}"
    )
