"""One suggestion, from a document snapshot and a cursor to cleaned text, with per-stage timings.

document + tree -> context -> prompt -> engine stream (early stop) -> finalize. No LSP types here:
offsets and strings in, a `Suggestion` out. Cancelling the calling task aborts the engine request
(the engine's stream does it on CancelledError/GeneratorExit); an early stop aborts it too.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from sparkls import context, prompt, typeahead
from sparkls.document import Document
from sparkls.engine.base import (
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
from sparkls.stream import StopPolicy, finalize, unheal

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


def budget_of(settings: Settings, invoked: bool = False) -> context.Budget:
    """Prompt budgets; an explicit invocation gets the longer suffix (quality over a keystroke's latency)."""
    suffix = settings.invoked_suffix_tokens if invoked else settings.suffix_tokens
    return context.Budget(settings.prefix_tokens, suffix, settings.preamble_tokens)


def _path_of(uri: str) -> str:
    return uri.rsplit("/", 1)[-1] if "/" in uri else uri


async def suggest(doc: Document, cursor: int, settings: Settings, engine: Engine,
                  template: prompt.FimTemplate, cache: typeahead.Remembered | None = None,
                  request_id: str | None = None, invoked: bool = False) -> Suggestion:
    """Compute the suggestion at `cursor` (a string offset into `doc.text`)."""
    t0 = time.perf_counter()
    rid = request_id or new_request_id("sugg")
    if settings.typeahead and not invoked:  # an explicit request asks the model again
        rest = typeahead.lookup(cache, doc.uri, doc.text, cursor)
        if rest is not None:
            total = (time.perf_counter() - t0) * 1000
            return Suggestion(doc.uri, doc.version, cursor, rest, "typeahead", "typeahead",
                              Timings(total_ms=total, post_ms=total), request_id=rid)
    ctx = context.build(doc, cursor, budget_of(settings, invoked), settings.prompt_layout)
    t1 = time.perf_counter()
    p = prompt.render(ctx, template, path=_path_of(doc.uri))
    t2 = time.perf_counter()
    max_tokens = settings.max_tokens_single if ctx.mode == "single" else settings.max_tokens_multi
    req = GenerationRequest(p.text, max_tokens=max_tokens, stop=template.stops, priority=Priority.INTERACTIVE, id=rid)
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
    t3 = time.perf_counter()
    if cut_at is None:
        text = unheal(raw, ctx.heal) or ""
    final = finalize(text, ctx)
    t4 = time.perf_counter()
    timings = Timings(
        context_ms=(t1 - t0) * 1000, prompt_ms=(t2 - t1) * 1000, queue_ms=stats.queue_ms,
        ttft_ms=stats.ttft_ms, decode_ms=stats.decode_ms, post_ms=(t4 - t3) * 1000, total_ms=(t4 - t0) * 1000,
    )
    return Suggestion(doc.uri, doc.version, cursor, final, ctx.mode, "model", timings, stats, rid)


def log_line(s: Suggestion) -> str:
    t = s.timings
    st = s.stats
    return (f"{s.request_id} {s.source} {s.mode} v{s.version} ctx={t.context_ms:.1f} prompt={t.prompt_ms:.1f} "
            f"queue={t.queue_ms:.1f} ttft={t.ttft_ms:.1f} decode={t.decode_ms:.1f} post={t.post_ms:.1f} "
            f"total={t.total_ms:.1f}ms overhead={t.overhead_ms:.1f}ms tokens={st.decode_tokens} "
            f"prompt_tokens={st.prompt_tokens} reused={st.reused_tokens} finish={st.finish_reason} "
            f"class={priority_label(st.priority)} preempted={st.preemptions} chars={len(s.text)}")
