"""The one mutable session: open documents, settings, the engine, the workspace index, in-flight requests.

Handlers read frozen `Document` snapshots from here and hand them to the pipeline, with the document's
prompt frame from the last request (kept while only the typed span changes) and its place in the
workspace (other files' snippets, gathered for a new frame). The session
also runs suggestions as jobs keyed by (version, cursor): identical requests share one job, and a
newer job for the same document cancels the older one, whose requests then answer
`RequestCancelled` while its engine request is aborted.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sparkls import context, editing, edits, nextedit, pipeline, prompt, streaming, typeahead, workspace
from sparkls.document import Document
from sparkls.engine import create_engine, metrics
from sparkls.engine.base import Engine, Priority, new_request_id
from sparkls.settings import Settings

log = logging.getLogger(__name__)


CHANGE_LOG = 2048  # content changes kept per document for streaming edits to follow their region
SUMMARY_EVERY = 25  # model-served suggestions between two per-class summary lines in the log
NEAR_LINES = (30, 10)  # lines before and after the cursor whose names pick other files' snippets


def near_text(text: str, cursor: int) -> str:
    """The code around the cursor that picks other files' snippets."""
    before, after = NEAR_LINES
    lo = cursor
    for _ in range(before + 1):
        lo = text.rfind("\n", 0, lo)
        if lo <= 0:
            lo = 0
            break
    hi = cursor
    for _ in range(after + 1):
        hi = text.find("\n", hi + 1)
        if hi == -1:
            hi = len(text)
            break
    return text[lo:hi]


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
    _frames: dict[str, context.Frame] = field(default_factory=dict)  # uri -> the last request's stable prompt part
    workspace: workspace.WorkspaceIndex | None = None  # set on initialize (also with no folders: the globs)
    history: collections.deque[dict[str, object]] = field(default_factory=lambda: collections.deque(maxlen=512))
    _served: int = 0
    _shut_down: bool = False
    histories: dict[str, nextedit.History] = field(default_factory=dict)
    predictions: dict[str, editing.EditResult] = field(default_factory=dict)  # latest next-edit per document
    streams: dict[str, streaming.StreamingEdit] = field(default_factory=dict)  # progress token -> running edit
    _prefetch: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    _watchers: dict[str, list[asyncio.Future[Document]]] = field(default_factory=dict)
    _changes: dict[str, collections.deque[tuple[int, int, int, str]]] = field(default_factory=dict)
    _accepted: dict[str, tuple[int, str]] = field(default_factory=dict)  # uri -> (cursor, text after accepting)

    # -- workspace -------------------------------------------------------------------------------
    def configure(self, settings: Settings) -> None:
        """New settings; the workspace index follows a change of the exclusion globs."""
        old, self.settings = self.settings, settings
        if settings.exclude_files != old.exclude_files and self.workspace is not None:
            self.set_workspace(self.workspace.roots)

    def set_workspace(self, roots: Sequence[Path]) -> None:
        """The workspace folders (the only places other files are read from) and the exclusion globs."""
        excludes = (*workspace.DEFAULT_EXCLUDES, *self.settings.exclude_files)
        self.workspace = workspace.WorkspaceIndex(list(roots), excludes)
        self._frames.clear()

    def excluded(self, uri: str) -> bool:
        """A document whose path matches an exclusion glob: never part of a prompt."""
        return workspace.refused(uri, self.workspace)

    def place(self, uri: str) -> pipeline.Place:
        """Where a document sits: its path in the prompt and how to gather other files for it."""
        index, path = self.workspace, workspace.uri_path(uri)
        if index is None or path is None:
            return pipeline.place_of(uri)
        rel = index.relative(path)
        inside = index.roots and not Path(rel).is_absolute()
        if self.settings.context_tokens <= 0:
            return pipeline.Place(rel if inside else path.name)
        open_docs = {u: d for u, d in self.documents.items() if u != uri}  # a copy: used from a thread

        def snippets(doc: Document, cursor: int, budget_chars: int) -> list[tuple[str, str]]:
            found = workspace.gather(doc, open_docs, index, near_text(doc.text, cursor), budget_chars)
            return [(s.path, s.text) for s in found]

        return pipeline.Place(rel if inside else path.name, index.roots[0].name if index.roots else "", snippets)

    # -- documents -------------------------------------------------------------------------------
    def open(self, uri: str, language_id: str | None, version: int, text: str) -> Document:
        doc = Document.open(uri, language_id, version, text, self.settings.parse_limit_bytes)
        self.documents[uri] = doc
        for per_doc in (self.histories, self._changes, self.predictions, self._accepted, self._frames):
            per_doc.pop(uri, None)  # a (re)opened document starts a new history and version sequence
        return doc

    def snapshot(self, uri: str) -> Document:
        try:
            return self.documents[uri]
        except KeyError:
            raise UnknownDocument(uri) from None

    def update(self, doc: Document) -> None:
        self.documents[doc.uri] = doc
        for fut in self._watchers.pop(doc.uri, []):
            if not fut.done():
                fut.set_result(doc)
        self._maybe_prefetch(doc)

    def record_change(self, old: Document, start: int, end: int, text: str, version: int) -> None:
        """Keep one `didChange` content change: in the document's edit history (for next-edit) and in
        the log of raw changes (streaming edits follow their region through it)."""
        history = self.histories.setdefault(old.uri, nextedit.History())
        history.record(old.text, start, end, text)
        log_ = self._changes.setdefault(old.uri, collections.deque(maxlen=CHANGE_LOG))
        log_.append((version, start, end, text))

    def changes(self, uri: str, after_version: int) -> list[tuple[int, int, int, str]] | None:
        """The content changes since `after_version`, in order; None when the log no longer reaches back."""
        log_ = self._changes.get(uri)
        doc = self.documents.get(uri)
        if doc is None or doc.version <= after_version:
            return []
        if not log_ or log_[0][0] > after_version + 1:
            return None
        return [c for c in log_ if c[0] > after_version]

    async def changed(self, uri: str, after_version: int, timeout_s: float) -> Document:
        """The snapshot of `uri` once its version is past `after_version`."""
        doc = self.snapshot(uri)
        while doc.version <= after_version:
            fut: asyncio.Future[Document] = asyncio.get_running_loop().create_future()
            self._watchers.setdefault(uri, []).append(fut)
            doc = await asyncio.wait_for(fut, timeout_s)
        return doc

    def close(self, uri: str) -> None:
        self.documents.pop(uri, None)
        self._typeahead.pop(uri, None)
        self._frames.pop(uri, None)
        self.histories.pop(uri, None)
        self._changes.pop(uri, None)
        self.predictions.pop(uri, None)
        self._accepted.pop(uri, None)
        if (task := self._prefetch.pop(uri, None)) is not None:
            task.cancel()
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
        for task in self._prefetch.values():
            task.cancel()
        if self.engine is not None:
            log.info("engine %s: %s", self.engine.name, self.summary())
            await self.engine.close()

    # -- requests --------------------------------------------------------------------------------
    async def suggest(self, doc: Document, cursor: int, invoked: bool = False) -> pipeline.Suggestion:
        """The suggestion at `cursor` of a snapshot: one shared job per (version, cursor, invoked)."""

        async def compute() -> pipeline.Suggestion:
            if self.excluded(doc.uri):
                log.info("no suggestion: %s matches an exclusion glob", doc.uri)
                return pipeline.Suggestion(doc.uri, doc.version, cursor, "", "single", "none")
            template = await self.template()
            s = await pipeline.suggest(doc, cursor, self.settings, self.start_engine(), template,
                                       self._typeahead.get(doc.uri), invoked=invoked,
                                       frame=self._frames.get(doc.uri), place=self.place(doc.uri),
                                       keep=functools.partial(self._keep_frame, doc.uri))
            log.info(pipeline.log_line(s))
            self.record(s)
            if s.source == "model":
                self.remember(doc.uri, doc.text, cursor, s.text)
            return s

        return await self.wait(self.job(doc.uri, (doc.version, cursor, invoked), compute))

    def _keep_frame(self, uri: str, frame: context.Frame) -> None:
        self._frames[uri] = frame

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

    # -- next-edit -------------------------------------------------------------------------------
    async def predict(self, doc: Document, cursor: int, priority: int = Priority.INTERACTIVE) -> editing.EditResult:
        """The next edit around `cursor`, kept as the document's latest prediction."""
        if self.excluded(doc.uri):  # its text never goes to the model
            return editing.EditResult(doc.uri, doc.version, cursor, cursor, "", "", [], new_request_id("edit"))
        cached = self.predictions.get(doc.uri)
        if cached is not None and cached.version == doc.version and cached.start <= cursor <= cached.end:
            return cached
        result = await editing.predict(doc, cursor, self.histories.get(doc.uri), self.start_engine(),
                                       self.settings, priority)
        log.info("%s next-edit v%d: %d edits, %.0f ms, %d tokens", result.request_id, doc.version,
                 len(result.edits), result.total_ms, result.stats.decode_tokens)
        self.predictions[doc.uri] = result
        if result.edits:  # what the buffer shows once it is accepted, and where the cursor is then
            last = result.edits[-1]
            cursor = last.start + len(last.text) + sum(len(e.text) - (e.end - e.start) for e in result.edits[:-1])
            self._accepted[doc.uri] = (cursor, edits.apply(doc.text, result.edits))
        return result

    def _maybe_prefetch(self, doc: Document) -> None:
        """The user accepted the latest prediction (the buffer now shows it): predict the next one at
        background priority, so it is ready (or under way) before they ask."""
        accepted = self._accepted.get(doc.uri)
        if accepted is None or len(accepted[1]) != len(doc.text) or accepted[1] != doc.text:
            return
        del self._accepted[doc.uri]
        if not self.settings.next_edit_prefetch:
            return
        if (task := self._prefetch.pop(doc.uri, None)) is not None:
            task.cancel()

        async def prefetch() -> None:
            try:
                await self.predict(doc, accepted[0], Priority.BACKGROUND)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("next-edit prefetch failed")

        log.info("predicted edit accepted on %s v%d: prefetching the next one", doc.uri, doc.version)
        self._prefetch[doc.uri] = asyncio.ensure_future(prefetch())
