"""Inline and classic completion (each item carries the `sparkls.accepted` command), the `sparkls/cursor`
notification (warm up where the cursor rests), the `sparkls/acceptance` notification (an offer shown, partly
accepted or dismissed), and the `sparkls/metrics` and `sparkls/health` requests."""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import asdict
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams

from sparkls.completion.pipeline import Suggestion
from sparkls.lsp import convert
from sparkls.lsp.acceptance import AcceptanceCounts, offer_source
from sparkls.lsp.handlers.common import field_of, offer, offset, served, snapshot, takes_snippets
from sparkls.lsp.protocol import SparkServer
from sparkls.text.document import Document

log = logging.getLogger("sparkls")


async def _suggestion(
    ls: SparkServer,
    uri: str,
    position: types.Position,
    invoked: bool = False,
) -> tuple[Document, Suggestion] | None:
    doc = snapshot(ls, uri)
    cursor = offset(ls, doc, position)
    s = await served(ls, uri, ls.completions.suggest(doc, cursor, invoked))
    return (doc, s) if s is not None else None


def _offered(ls: SparkServer, s: Suggestion) -> types.Command | None:
    """The accept command of a suggestion with text, remembered as offered."""
    return offer(ls, s.request_id, offer_source(s.source), len(s.text)) if s.text else None


async def inline_completion(ls: SparkServer, params: types.InlineCompletionParams) -> types.InlineCompletionList:
    uri = params.text_document.uri
    doc = snapshot(ls, uri)
    predicted = ls.edits.insertion_at(doc, offset(ls, doc, params.position))
    if predicted is not None:  # the predicted next edit inserts here: offer it as the completion
        e = predicted.edits[0]
        s = Suggestion(uri, doc.version, e.start, e.text, "multi", "nextedit", request_id=predicted.request_id)
        return convert.inline_items(doc, s, ls.session.encoding, _offered(ls, s))
    kind = params.context.trigger_kind if params.context is not None else None
    found = await _suggestion(ls, uri, params.position, kind == types.InlineCompletionTriggerKind.Invoked)
    if found is None:
        return types.InlineCompletionList(items=[])
    doc, s = found
    return convert.inline_items(doc, s, ls.session.encoding, _offered(ls, s))


async def completion(ls: SparkServer, params: types.CompletionParams) -> types.CompletionList:
    found = await _suggestion(ls, params.text_document.uri, params.position)
    if found is None:
        return types.CompletionList(is_incomplete=True, items=[])
    doc, s = found
    return convert.completion_items(doc, s, ls.session.encoding, takes_snippets(ls), _offered(ls, s))


def cursor(ls: SparkServer, params: Any) -> None:
    """`sparkls/cursor` `{"textDocument": {"uri"}, "position"}` (a notification): the cursor rests there, so the
    prompt a keystroke there would send is prefilled. An unknown document or position is logged and ignored."""
    doc_id, pos = getattr(params, "textDocument", None), getattr(params, "position", None)
    uri, line, character = getattr(doc_id, "uri", None), getattr(pos, "line", None), getattr(pos, "character", None)
    if not isinstance(uri, str) or not isinstance(line, int) or not isinstance(character, int):
        log.warning('sparkls/cursor takes {"textDocument": {"uri": ...}, "position": {"line", "character"}}')
        return
    doc = ls.session.documents.get(uri)
    if doc is None:
        log.warning("sparkls/cursor: %s is not open", uri)
        return
    try:
        at = offset(ls, doc, types.Position(line=line, character=character))
    except JsonRpcInvalidParams as e:
        log.warning("sparkls/cursor: %s", e)
        return
    ls.completions.cursor(doc, at)


def acceptance(ls: SparkServer, params: Any) -> None:
    """`sparkls/acceptance` `{"requestId", "event": "shown" | "partial" | "dismissed", "acceptedChars"?}` (a
    notification): what the user did with an offer. Malformed params are logged and ignored; an unknown or
    repeated one is ignored (logged at debug)."""
    rid, event, chars = (field_of(params, k) for k in ("requestId", "event", "acceptedChars"))
    if (
        not isinstance(rid, str)
        or not isinstance(event, str)
        or not (chars is None or (isinstance(chars, int) and not isinstance(chars, bool)))
    ):
        log.warning(
            'sparkls/acceptance takes {"requestId": str, "event": "shown" | "partial" | '
            '"dismissed", "acceptedChars"?: int}, not %.200r',
            params,
        )
        return
    try:
        counted = ls.acceptance.reported(rid, event, chars)
    except ValueError as e:
        log.warning("sparkls/acceptance: %s", e)
        return
    if not counted:
        log.debug(
            "sparkls/acceptance: %s %s changes nothing (unknown, forgotten, repeated or already ended)", event, rid
        )


def _acceptance_counts(c: AcceptanceCounts) -> dict[str, object]:
    return {
        "offered": c.offered,
        "shown": c.shown,
        "accepted": c.accepted,
        "partiallyAccepted": c.partially_accepted,
        "dismissed": c.dismissed,
        "acceptedChars": c.accepted_chars,
        "rateOfShown": c.rate_of_shown,
        "rateOfOffered": c.rate_of_offered,
    }


async def metrics(ls: SparkServer, params: Any) -> dict[str, object]:
    """Recent suggestions with per-stage timings, the engine's recent requests, per-class summary, and what became
    of the offers per source (`acceptance`)."""
    m = await ls.completions.metrics()
    suggestions = [
        {
            "requestId": s.request_id,
            "uri": s.uri,
            "version": s.version,
            "source": s.source,
            "mode": s.mode,
            "text": s.text,
            "timings": asdict(s.timings) | {"overhead_ms": s.timings.overhead_ms},
            "stats": asdict(s.stats),
        }
        for s in m.suggestions
    ]
    return {
        "suggestions": suggestions,
        "engine": [{"requestId": rid, **asdict(st)} for rid, st in m.engine_requests],
        "engineName": m.engine_name,
        "classes": m.classes,
        "engineStats": m.engine_stats,
        "acceptance": {source: _acceptance_counts(c) for source, c in ls.acceptance.counts().items()},
    }


async def health(ls: SparkServer, params: Any) -> dict[str, object]:
    """The engine's state and counters, and the server's own load: what a soak test reads for leaks."""
    h = await ls.session.health()
    server = {
        "tasks": len(asyncio.all_tasks()),
        "requestsInFlight": len(ls.protocol._request_futures),
        "suggestionJobs": ls.completions.running,
        "documents": len(ls.session.documents),
        "rssBytes": rss_bytes(),
    }
    return {
        "ok": h.ok,
        "engine": h.engine,
        "model": h.model,
        "detail": h.detail,
        "stats": dict(h.stats),
        "server": server,
    }


def rss_bytes() -> int:
    """The server process's resident memory now (Linux), else its peak."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


FEATURES = [
    (types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionOptions(), inline_completion),
    (types.TEXT_DOCUMENT_COMPLETION, types.CompletionOptions(resolve_provider=False), completion),
    ("sparkls/cursor", None, cursor),
    ("sparkls/acceptance", None, acceptance),
    ("sparkls/metrics", None, metrics),
    ("sparkls/health", None, health),
]
