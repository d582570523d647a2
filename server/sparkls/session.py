"""The one mutable session: open documents, settings, the engine, in-flight requests.

Handlers read frozen `Document` snapshots from here and hand them to the pipeline. The session
also runs suggestions as jobs keyed by (version, cursor): identical requests share one job, and a
newer job for the same document cancels the older one, whose requests then answer
`RequestCancelled` while its engine request is aborted.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field

from sparkls import pipeline, prompt, typeahead
from sparkls.document import Document
from sparkls.engine import create_engine, metrics
from sparkls.engine.base import Engine
from sparkls.settings import Settings

log = logging.getLogger(__name__)


SUMMARY_EVERY = 25  # model-served suggestions between two per-class summary lines in the log


class UnknownDocument(KeyError):
    pass


@dataclass
class Job:
    key: tuple[int, int, bool]  # (document version, cursor offset, explicitly invoked)
    task: asyncio.Future[pipeline.Suggestion]
    waiters: int = 0


@dataclass
class Session:
    settings: Settings = field(default_factory=Settings)
    encoding: str = "utf-16"
    documents: dict[str, Document] = field(default_factory=dict)
    engine: Engine | None = None
    _template: prompt.FimTemplate | None = None
    _jobs: dict[str, Job] = field(default_factory=dict)
    _typeahead: dict[str, typeahead.Remembered] = field(default_factory=dict)
    history: collections.deque[dict[str, object]] = field(default_factory=lambda: collections.deque(maxlen=512))
    _served: int = 0
    _shut_down: bool = False

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
        job = self._jobs.pop(uri, None)
        if job is not None and not job.task.done():
            job.task.cancel()

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
        """Cancel jobs and close the engine; safe to call again (`shutdown`, then the transport closing)."""
        if self._shut_down:
            return
        self._shut_down = True
        for job in list(self._jobs.values()):
            job.task.cancel()
        self._jobs.clear()
        if self.engine is not None:
            log.info("engine %s: %s", self.engine.name, self.summary())
            await self.engine.close()

    # -- requests --------------------------------------------------------------------------------
    async def suggest(self, doc: Document, cursor: int, invoked: bool = False) -> pipeline.Suggestion:
        """The suggestion at `cursor` of a snapshot: one shared job per (version, cursor, invoked)."""

        async def compute() -> pipeline.Suggestion:
            template = await self.template()
            s = await pipeline.suggest(doc, cursor, self.settings, self.start_engine(), template,
                                       self._typeahead.get(doc.uri), invoked=invoked)
            log.info(pipeline.log_line(s))
            self.record(s)
            if s.source == "model":
                self.remember(doc.uri, doc.text, cursor, s.text)
            return s

        return await self.wait(self.job(doc.uri, (doc.version, cursor, invoked), compute))

    def job(self, uri: str, key: tuple[int, int, bool], start: Callable[[], Awaitable[pipeline.Suggestion]]) -> Job:
        """The computation for (document version, cursor) of `uri`: shared by identical requests
        (an editor asking inline and classic completion at once), and superseding older ones."""
        current = self._jobs.get(uri)
        if current is not None and current.key == key and not current.task.done():
            return current
        if current is not None and not current.task.done() and self.settings.supersede:
            current.task.cancel()
        job = Job(key, asyncio.ensure_future(start()))
        self._jobs[uri] = job
        return job

    async def wait(self, job: Job) -> pipeline.Suggestion:
        """Await a job; when the last request waiting for it is cancelled, the job is cancelled too."""
        job.waiters += 1
        try:
            return await asyncio.shield(job.task)
        except asyncio.CancelledError:
            if job.waiters == 1 and not job.task.done():
                job.task.cancel()
            raise
        finally:
            job.waiters -= 1

    def remember(self, uri: str, text: str, cursor: int, suggestion: str) -> None:
        entry = typeahead.remember(uri, text, cursor, suggestion)
        if entry is None:
            self._typeahead.pop(uri, None)
        else:
            self._typeahead[uri] = entry

    def record(self, s: pipeline.Suggestion) -> None:
        """Keep the timings of recent suggestions for `sparkls/metrics`; log a per-class summary now and then."""
        if s.source == "model" and self.engine is not None:
            self._served += 1
            if self._served % SUMMARY_EVERY == 0:
                log.info("engine %s: %s", self.engine.name, self.summary())
        self.history.append({
            "requestId": s.request_id, "uri": s.uri, "version": s.version, "source": s.source, "mode": s.mode,
            "text": s.text, "timings": asdict(s.timings) | {"overhead_ms": s.timings.overhead_ms},
            "stats": asdict(s.stats),
        })

    def summary(self) -> str:
        """The per-class engine summary as one log line."""
        return metrics.summary_line(metrics.summarize(self.engine.completed if self.engine else ()))

    async def metrics(self) -> dict[str, object]:
        """Recent suggestions, recent engine requests, per-class summary, engine-wide counters."""
        engine = self.engine
        done = list(engine.completed) if engine is not None else []
        stats = dict((await engine.health()).stats) if engine is not None else {}
        return {"suggestions": list(self.history), "engine": [{"requestId": rid, **asdict(st)} for rid, st in done],
                "engineName": engine.name if engine is not None else None, "classes": metrics.summarize(done),
                "engineStats": stats}
