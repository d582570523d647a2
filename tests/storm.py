"""A typing storm against the real server over stdio, for the soak test and `benchmarks/reliability.py`.

Keystrokes go to several open documents at a fixed rate: mostly characters typed at the cursor, some
backspaces, Enters and jumps to another place. After each keystroke the client cancels the document's
unanswered `inlineCompletion` (as VS Code does) and asks again, so most requests are superseded while their
generation runs. It records when each request was answered and, for the cancelled ones, how long after the
cancel; when the storm is over it waits until the server is idle and reads its own counts (`sparkls/health`):
open engine requests, running suggestion jobs, requests in flight, asyncio tasks, resident memory.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcException
from sparkls.tools.client import Client

SEED_TEXT = '''import math


def area(r):
    """Area of a circle of radius r."""
    return math.pi * r * r


def total(values):
    s = 0
    for v in values:
        s += v
    return s
'''
TYPED = "value = compute(items, key=lambda x: x.size) + offset\n"


@dataclass
class StormResult:
    keystrokes: int = 0
    requests: int = 0
    answered: int = 0
    cancelled: int = 0  # answered RequestCancelled
    with_items: int = 0
    other_errors: list[str] = field(default_factory=list)
    unanswered: int = 0
    cancel_answer_ms: list[float] = field(default_factory=list)  # from $/cancelRequest to the answer
    seconds: float = 0.0
    before: dict[str, Any] = field(default_factory=dict)  # the server's counts before and after
    after: dict[str, Any] = field(default_factory=dict)


class _Doc:
    def __init__(self, uri: str, text: str) -> None:
        self.uri, self.text, self.version = uri, text, 1
        self.cursor = text.index("return s")
        self.pending: tuple[int, asyncio.Future[Any]] | None = None  # (request id, answer)


def server_counts(health: Any) -> dict[str, Any]:
    s = health.server
    stats = health.stats
    return {
        "tasks": s.tasks,
        "requestsInFlight": s.requestsInFlight,
        "suggestionJobs": s.suggestionJobs,
        "rssBytes": s.rssBytes,
        "openEngineRequests": int(getattr(stats, "open_requests", 0)),
        "restarts": int(getattr(stats, "restarts", 0)),
    }


async def idle_counts(client: Client, timeout_s: float = 30.0) -> dict[str, Any]:
    """The server's counts once nothing runs (or as they are after `timeout_s`)."""
    deadline = time.monotonic() + timeout_s
    while True:
        counts = server_counts(await client.request("sparkls/health"))
        busy = counts["openEngineRequests"] or counts["suggestionJobs"] or counts["requestsInFlight"] > 1
        if not busy or time.monotonic() > deadline:
            return counts
        await asyncio.sleep(0.1)


async def storm(
    client: Client,
    keystrokes: int,
    documents: int = 4,
    rate_hz: float = 50.0,
    seed: int = 7,
    burst: tuple[int, int] = (20, 60),
) -> StormResult:
    """Type `keystrokes` keys into `documents` new documents at `rate_hz`, in bursts of 20-60 keys per document."""
    rng = random.Random(seed)
    result = StormResult()
    docs = [_Doc(f"file:///storm/doc{i}.py", SEED_TEXT) for i in range(documents)]
    for d in docs:
        client.open(d.uri, d.text, "python")
    result.before = await idle_counts(client)
    next_id = 1_000_000
    answers: list[asyncio.Future[Any]] = []
    cancelled_at: dict[int, float] = {}

    def answered(rid: int, fut: asyncio.Future[Any]) -> None:
        now = time.perf_counter()
        result.answered += 1
        error = fut.exception()
        if isinstance(error, JsonRpcException) and error.code == types.LSPErrorCodes.RequestCancelled:
            result.cancelled += 1
        elif error is not None:
            result.other_errors.append(f"{type(error).__name__}: {error}")
        elif fut.result() is not None and fut.result().items:
            result.with_items += 1
        if rid in cancelled_at:
            result.cancel_answer_ms.append((now - cancelled_at.pop(rid)) * 1000)

    t0 = time.perf_counter()
    doc, left_in_burst = docs[0], 0
    for k in range(keystrokes):
        if left_in_burst == 0:
            doc, left_in_burst = rng.choice(docs), rng.randint(*burst)
        left_in_burst -= 1
        _keystroke(client, doc, rng, TYPED[k % len(TYPED)])
        if doc.pending is not None and not doc.pending[1].done():
            cancelled_at[doc.pending[0]] = time.perf_counter()
            client.cancel(doc.pending[0])
        next_id += 1
        fut = asyncio.ensure_future(
            client.request(
                types.TEXT_DOCUMENT_INLINE_COMPLETION,
                client.inline_params(doc.uri, doc.text, doc.cursor),
                msg_id=next_id,
            )
        )
        rid = next_id
        fut.add_done_callback(lambda f, rid=rid: answered(rid, f))
        doc.pending = (rid, fut)
        answers.append(fut)
        result.keystrokes = result.requests = k + 1
        delay = t0 + (k + 1) / rate_hz - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
    _, waiting = await asyncio.wait(answers, timeout=30)
    result.unanswered = len(waiting)
    result.seconds = time.perf_counter() - t0
    result.after = await idle_counts(client)
    return result


def _keystroke(client: Client, doc: _Doc, rng: random.Random, ch: str) -> None:
    """One key: the character typed at the cursor (9 in 10), a backspace, or a jump to another line's end."""
    roll = rng.random()
    if roll < 0.05 and doc.cursor > 0 and doc.text[doc.cursor - 1] != "\n":
        _replace(client, doc, doc.cursor - 1, doc.cursor, "")
    elif roll < 0.10:
        ends = [i for i, c in enumerate(doc.text) if c == "\n"]
        doc.cursor = rng.choice(ends)
        _replace(client, doc, doc.cursor, doc.cursor, "\n    ")
    else:
        _replace(client, doc, doc.cursor, doc.cursor, ch if ch != "\n" else "\n    ")
    if len(doc.text) > 20_000:  # keep the documents of a long soak at an editor's size
        _replace(client, doc, len(SEED_TEXT), len(doc.text), "")
        doc.cursor = min(doc.cursor, len(doc.text))


def _replace(client: Client, doc: _Doc, start: int, end: int, new: str) -> None:
    from sparkls.tools.client import position

    doc.version += 1
    client.lc.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=doc.uri, version=doc.version),
            content_changes=[
                types.TextDocumentContentChangePartial(
                    range=types.Range(start=position(doc.text, start), end=position(doc.text, end)), text=new
                )
            ],
        )
    )
    doc.text = doc.text[:start] + new + doc.text[end:]
    doc.cursor = start + len(new)
