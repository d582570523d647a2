"""The one mutable session: open documents, settings, the engine, in-flight requests.

Handlers read frozen `Document` snapshots from here and hand them to the pipeline. The session
also enforces "a newer request for the same document supersedes the older one": `claim` cancels
the task still working on an older suggestion for that document, which then answers
`RequestCancelled` and aborts its engine request.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from dataclasses import asdict, dataclass, field

from sparkls import pipeline, prompt, typeahead
from sparkls.document import Document
from sparkls.engine import create_engine
from sparkls.engine.base import Engine
from sparkls.settings import Settings

log = logging.getLogger(__name__)


class UnknownDocument(KeyError):
    pass


@dataclass
class Session:
    settings: Settings = field(default_factory=Settings)
    encoding: str = "utf-16"
    documents: dict[str, Document] = field(default_factory=dict)
    engine: Engine | None = None
    _template: prompt.FimTemplate | None = None
    _inflight: dict[str, asyncio.Task[object]] = field(default_factory=dict)
    _typeahead: dict[str, typeahead.Remembered] = field(default_factory=dict)
    history: collections.deque[dict[str, object]] = field(default_factory=lambda: collections.deque(maxlen=512))

    # -- documents -------------------------------------------------------------------------------
    def open(self, uri: str, language_id: str | None, version: int, text: str) -> Document:
        doc = Document.open(uri, language_id, version, text, self.settings.parse_limit_bytes)
        self.documents[uri] = doc
        return doc

    def snapshot(self, uri: str) -> Document:
        try:
            return self.documents[uri]
        except KeyError:
            raise UnknownDocument(uri) from None

    def update(self, doc: Document) -> None:
        self.documents[doc.uri] = doc

    def close(self, uri: str) -> None:
        self.documents.pop(uri, None)
        self._typeahead.pop(uri, None)
        task = self._inflight.pop(uri, None)
        if task is not None and not task.done():
            task.cancel()

    # -- engine ----------------------------------------------------------------------------------
    def start_engine(self) -> Engine:
        if self.engine is None:
            self.engine = create_engine(self.settings)
        return self.engine

    async def template(self) -> prompt.FimTemplate:
        if self._template is None:
            engine = self.start_engine()
            family = self.settings.fim_template
            if family == "auto":
                await engine.ready()
                family = prompt.family_from_metadata(engine.model_metadata(), self.settings.model_path)
            self._template = prompt.TEMPLATES[family]
            log.info("FIM template: %s", family)
        return self._template

    async def shutdown(self) -> None:
        for task in list(self._inflight.values()):
            task.cancel()
        self._inflight.clear()
        if self.engine is not None:
            await self.engine.close()

    # -- requests --------------------------------------------------------------------------------
    def claim(self, uri: str) -> None:
        """Make the current task the only one computing a suggestion for `uri`."""
        current = asyncio.current_task()
        previous = self._inflight.get(uri)
        if previous is not None and self.settings.supersede and previous is not current and not previous.done():
            previous.cancel()
        if current is not None:
            self._inflight[uri] = current

    def release(self, uri: str) -> None:
        if self._inflight.get(uri) is asyncio.current_task():
            del self._inflight[uri]

    def cached(self, uri: str) -> typeahead.Remembered | None:
        return self._typeahead.get(uri)

    def remember(self, uri: str, text: str, cursor: int, suggestion: str) -> None:
        entry = typeahead.remember(uri, text, cursor, suggestion)
        if entry is None:
            self._typeahead.pop(uri, None)
        else:
            self._typeahead[uri] = entry

    def record(self, s: pipeline.Suggestion) -> None:
        """Keep the timings of recent suggestions for `sparkls/metrics`."""
        self.history.append({
            "requestId": s.request_id, "uri": s.uri, "version": s.version, "source": s.source, "mode": s.mode,
            "text": s.text, "timings": asdict(s.timings) | {"overhead_ms": s.timings.overhead_ms},
            "stats": asdict(s.stats),
        })

    def metrics(self) -> dict[str, object]:
        engine = self.engine
        completed = [] if engine is None else [
            {"requestId": rid, **asdict(st)} for rid, st in list(engine.completed)]
        return {"suggestions": list(self.history), "engine": completed,
                "engineName": None if engine is None else engine.name}
