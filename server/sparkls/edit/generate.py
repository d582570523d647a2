"""One rewrite or next-edit prediction, from a snapshot to minimal edits, with timings (no LSP types).

snapshot + region -> rewrite prompt (secrets masked) -> engine stream -> completed lines, secrets put back
(`LineGeneration`) -> rewritten region -> minimal edits. An answer that garbles a placeholder is not applied; a
prediction that drops a secret is not offered. Cancelling the calling task aborts the engine request (the
engine's stream does it on CancelledError/GeneratorExit); the closing fence aborts it too.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from sparkls.edit import diff, nextedit, rewrite
from sparkls.engine.base import (
    CHARS_PER_TOKEN,
    Delta,
    Engine,
    Finished,
    GenerationRequest,
    GenerationStats,
    Priority,
    new_request_id,
)
from sparkls.settings import Settings
from sparkls.text.document import Document, file_name
from sparkls.workspace import redact

log = logging.getLogger(__name__)

_LINES = re.compile(r"[^\n]*\n|[^\n]+")


@dataclass(frozen=True)
class EditResult:
    uri: str
    version: int  # the snapshot the edits apply to
    start: int  # the rewritten region (or next-edit window) in that snapshot
    end: int
    original: str
    text: str  # the region as the model rewrote it
    edits: list[diff.Edit]
    request_id: str
    stats: GenerationStats = field(default_factory=GenerationStats)
    total_ms: float = 0.0


def request_for(prompt_text: str, region: str, settings: Settings, priority: int, rid: str) -> GenerationRequest:
    """A rewrite request: enough tokens for the region and some growth."""
    need = int(len(region) / CHARS_PER_TOKEN * 1.5) + 96
    return GenerationRequest(prompt_text, max_tokens=min(settings.max_tokens_rewrite, need), stop=rewrite.STOPS,
                             priority=priority, id=rid)


class LineGeneration:
    """Stream an engine request as completed lines of the answer's code block, the prompt's placeholders replaced by
    the secrets they stand for; `stats` once done."""

    def __init__(self, engine: Engine, request: GenerationRequest, indent: str = "",
                 secrets: redact.Secrets = ()) -> None:
        self.engine = engine
        self.request = request
        self.indent = indent
        self.secrets = secrets
        self.reader = rewrite.LineReader()
        self.stats = GenerationStats()

    @property
    def lines(self) -> list[str]:
        lines = rewrite.reindent(self.reader.lines, self.indent)
        if not self.secrets:
            return lines
        text = redact.unmask("".join(lines), self.secrets)  # a private key's body is several lines
        return _LINES.findall(text)

    async def __aiter__(self) -> AsyncIterator[list[str]]:
        """Yields all lines so far (reindented) after each new completed line, and once more at the end."""
        stream = self.engine.stream(self.request)
        try:
            async for event in stream:
                if isinstance(event, Finished):
                    self.stats = event.stats
                    break
                if isinstance(event, Delta) and not self.reader.done:
                    if self.reader.feed(event.text):
                        yield self.lines
                    if self.reader.done:  # closing fence: the answer is complete
                        await self.engine.abort(self.request.id)
        finally:
            await stream.aclose()
        if self.reader.finish():
            yield self.lines


def garbled(text: str, original: str) -> bool:
    """Whether a rewrite holds a redaction placeholder that the original did not (one the model made up or changed:
    the secret it stood for would be lost, and the placeholder written into the code)."""
    mark = redact.PLACEHOLDER[:-1]  # "<redacted", numbered or not
    return text.count(mark) > original.count(mark)


async def rewrite_region(doc: Document, start: int, end: int, instruction: str, engine: Engine, settings: Settings,
                         priority: int = Priority.CODE_ACTION) -> EditResult:
    """Rewrite doc.text[start:end] by `instruction`; the whole answer, as minimal edits."""
    t0 = time.perf_counter()
    rid = new_request_id("edit")
    p = rewrite.render(doc, start, end, instruction, file_name(doc.uri))
    gen = LineGeneration(engine, request_for(p.text, p.region, settings, priority, rid), p.indent, p.secrets)
    async for _ in gen:
        pass
    lines = rewrite.trim_echo(gen.lines, p.region, doc.text[:start], doc.text[end:])
    text = rewrite.compose(p.region, lines, final=True)
    if garbled(text, p.region):
        log.warning("%s: the answer garbles a placeholder of a redacted secret: not applied", rid)
        text = p.region
    es = diff.region_edits(doc.text, start, end, text)
    return EditResult(doc.uri, doc.version, start, end, p.region, text, es, rid, gen.stats,
                      (time.perf_counter() - t0) * 1000)


async def predict(doc: Document, cursor: int, history: nextedit.History | None, engine: Engine, settings: Settings,
                  priority: int = Priority.INTERACTIVE) -> EditResult:
    """The next edit around `cursor`, predicted from the document's recent edits."""
    t0 = time.perf_counter()
    rid = new_request_id("next")
    p = nextedit.render(doc, cursor, history, file_name(doc.uri), settings.next_edit_lines_before,
                        settings.next_edit_lines_after)
    original = doc.text[p.start : p.end]
    gen = LineGeneration(engine, request_for(p.text, original, settings, priority, rid), secrets=p.secrets)
    async for _ in gen:
        pass
    lines = rewrite.trim_echo(gen.lines, original, doc.text[: p.start], doc.text[p.end :])
    # An answer that stops early keeps the rest of the window: a next edit never deletes code by omission.
    text = rewrite.finish_like(rewrite.compose(original, lines), original) if lines else original
    if rewrite.changed_lines(original, text) > settings.next_edit_max_lines:
        log.info("%s: predicted edit changes %d lines (> nextEditMaxLines %d): not offered", rid,
                 rewrite.changed_lines(original, text), settings.next_edit_max_lines)
        text = original  # a next edit is small; a big rewrite of the window is the model rambling
    if garbled(text, original) or any(text.count(v) < original.count(v) for _, v in p.secrets):
        log.info("%s: predicted edit drops or garbles a redacted secret: not offered", rid)
        text = original  # a next edit never touches a secret
    es = diff.region_edits(doc.text, p.start, p.end, text)
    return EditResult(doc.uri, doc.version, p.start, p.end, original, text, es, rid, gen.stats,
                      (time.perf_counter() - t0) * 1000)
