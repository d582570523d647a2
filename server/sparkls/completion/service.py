"""Completions per document: the session's documents turned into suggestions, as shared, supersedable jobs.

A suggestion runs as a job keyed by (version, cursor, invoked): identical requests (an editor asking for
inline and classic completion at once) share one job, and a newer job for the same document cancels the older
one, whose requests then answer `RequestCancelled` while its engine request is aborted. Per document it keeps
the last request's prompt frame (reused while only the typed span changes), the typed-ahead cache, and the
timings of recent suggestions for `sparkls/metrics`; `observers` hear of each suggestion made (the Prometheus
exporter's time to suggestion). Where the editor shows the cursor before anything is typed (`cursor`), one warm-up at
a time prefills the prompt the first keystroke there will send; any suggestion job cancels it.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkls.completion import context, pipeline, prompt, typeahead
from sparkls.engine import metrics
from sparkls.engine.base import EngineError, GenerationStats, take_outcome, wait_started
from sparkls.session import Session
from sparkls.text.document import Document
from sparkls.workspace import files, snippets

log = logging.getLogger(__name__)


SUMMARY_EVERY = 25  # model-served suggestions between two per-class summary lines in the log
WARMUP_DEBOUNCE_S = 0.15  # a cursor that rests this long gets its prompt prefilled (moves in a row cost nothing)


@dataclass(frozen=True)
class Metrics:
    suggestions: list[pipeline.Suggestion]  # the most recent last
    engine_requests: list[tuple[str, GenerationStats]]  # (request id, stats), the engine's recent requests
    engine_name: str | None
    classes: dict[str, dict[str, Any]]  # per priority class: counts and percentiles
    engine_stats: dict[str, float]


@dataclass
class Job:
    key: tuple[int, int, bool]  # (document version, cursor offset, explicitly invoked)
    task: asyncio.Future[pipeline.Suggestion]
    waiters: int = 0


class CompletionService:
    """Suggestions for the session's documents; subscribes to the session for their lifetimes."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.history: collections.deque[pipeline.Suggestion] = collections.deque(maxlen=512)
        self._template: prompt.FimTemplate | None = None
        self._jobs: dict[str, Job] = {}
        self._typeahead: dict[str, typeahead.Remembered] = {}
        self._frames: dict[str, context.Frame] = {}  # uri -> the last request's stable prompt part
        self._full: dict[str, tuple[context.Frame, bool]] = {}  # uri -> the full frame prefilled at a short one's
        # place, and whether it is ready (`firstWindowTokens`)
        self._served = 0
        self._warmup: asyncio.Task[None] | None = None
        self.warmups: collections.deque[tuple[str, GenerationStats]] = collections.deque(maxlen=64)  # (uri, stats)
        self.observers: list[Callable[[pipeline.Suggestion], None]] = []
        session.subscribe(self)

    # -- the session's documents -----------------------------------------------------------------
    def opened(self, doc: Document) -> None:
        self._frames.pop(doc.uri, None)
        self._full.pop(doc.uri, None)

    def changed(self, old: Document, start: int, end: int, text: str) -> None:
        pass

    def updated(self, doc: Document) -> None:
        pass

    def closed(self, uri: str) -> None:
        self._typeahead.pop(uri, None)
        self._frames.pop(uri, None)
        self._full.pop(uri, None)
        job = self._jobs.pop(uri, None)
        if job is not None and not job.task.done():
            job.task.cancel()

    def reconfigured(self) -> None:
        self._frames.clear()  # the workspace or its context settings may differ: gather again
        self._full.clear()
        self._template = None  # the model may differ: its FIM template is looked up again
        self._typeahead.clear()  # suggestions of the engine as it was are not offered again

    async def shutdown(self) -> None:
        self._stop_warmup()
        for job in self._jobs.values():
            job.task.cancel()
        self._jobs.clear()
        if self.session.engine is not None:
            log.info("engine %s: %s", self.session.engine.name, self.summary())

    # -- suggestions -----------------------------------------------------------------------------
    async def template(self) -> prompt.FimTemplate:
        if self._template is None:
            engine, settings = self.session.start_engine(), self.session.settings
            family = settings.fim_template
            if family == "auto":  # the model's metadata names it: wait (a while) for the engine to start
                await wait_started(engine, settings.engine_start_wait_ms / 1000)
                family = prompt.family_from_metadata(engine.model_metadata(), settings.model_path)
            self._template = prompt.TEMPLATES[family]
            log.info("FIM template: %s", family)
        return self._template

    def place(self, uri: str) -> pipeline.Place:
        """Where a document sits: its path in the prompt and how to gather other files for it."""
        session = self.session
        index, path = session.workspace, files.uri_path(uri)
        if index is None or path is None:
            return pipeline.place_of(uri)
        rel = index.relative(path)
        inside = index.roots and not Path(rel).is_absolute()
        if session.settings.context_tokens <= 0:
            return pipeline.Place(rel if inside else path.name)
        open_docs = {u: d for u, d in session.documents.items() if u != uri}  # a copy: used from a thread

        def gather(doc: Document, cursor: int, budget_chars: int) -> list[tuple[str, str]]:
            # For the whole file, not the place: the snippets stay while the cursor moves (pipeline._with_snippets).
            found = snippets.gather(doc, open_docs, index, doc.text, budget_chars)
            return [(s.path, s.text) for s in found]

        return pipeline.Place(rel if inside else path.name, index.roots[0].name if index.roots else "", gather)

    async def suggest(self, doc: Document, cursor: int, invoked: bool = False) -> pipeline.Suggestion:
        """The suggestion at `cursor` of a snapshot: one shared job per (version, cursor, invoked)."""

        async def compute() -> pipeline.Suggestion:
            session = self.session
            if session.excluded(doc.uri) or doc.is_binary:
                log.info(
                    "no suggestion: %s %s", doc.uri, "looks binary" if doc.is_binary else "matches an exclusion glob"
                )
                return pipeline.Suggestion(doc.uri, doc.version, cursor, "", "single", "none")
            template = await self.template()
            frame, budget = self._plan(doc, cursor)
            prepared = await pipeline.prepare(
                doc,
                cursor,
                session.settings,
                cache=self._typeahead.get(doc.uri),
                invoked=invoked,
                frame=frame,
                place=self.place(doc.uri),
                budget=budget,
            )
            if prepared.ctx is not None and prepared.ctx.frame is not None:
                self._frames[doc.uri] = prepared.ctx.frame  # kept even if this request is superseded mid-prefill
            s = await pipeline.generate(prepared, session.settings, session.start_engine(), template)
            log.info(pipeline.log_line(s))
            self._record(s)
            if s.source == "model":
                self._remember(doc.uri, doc.text, cursor, s.text)
            if self._full_wanted(doc.uri) and (self._warmup is None or self._warmup.done()):
                self._warmup = asyncio.ensure_future(self._prefill_full(doc, cursor))
            return s

        return await self._wait(self._job(doc.uri, (doc.version, cursor, invoked), compute))

    def _plan(self, doc: Document, cursor: int) -> tuple[context.Frame | None, context.Budget]:
        """The frame a request at `cursor` stands on (None or one that no longer holds: a new one is made) and its
        budget. With `firstWindowTokens`, a new place gets a short frame first and the full one once its warm-up
        is done (`_prefill_full`); otherwise every frame is full."""
        settings = self.session.settings
        full = pipeline.budget_of(settings)
        pending = self._full.get(doc.uri)
        if pending is not None:
            if not pending[0].holds(doc, cursor, full):
                del self._full[doc.uri]  # the cursor left that place
            elif pending[1]:
                return pending[0], full
        frame = self._frames.get(doc.uri)
        if frame is not None and frame.holds(doc, cursor, frame.budget):
            return frame, frame.budget
        first = pipeline.first_window_of(settings) if settings.prompt_layout == "anchored" else None
        return frame, first or full

    def _full_wanted(self, uri: str) -> bool:
        """The request stood on a short first frame and the full one is not ready yet."""
        frame, full = self._frames.get(uri), pipeline.budget_of(self.session.settings)
        pending = self._full.get(uri)
        return frame is not None and frame.budget != full and not (pending is not None and pending[1])

    def cursor(self, doc: Document, cursor: int) -> None:
        """The editor shows the cursor at `cursor` of `doc` (a code action request at an empty selection, or
        `sparkls/cursor`): after `WARMUP_DEBOUNCE_S` without another move, and while no suggestion runs, prefill
        the prompt a keystroke there will send (a warm-up, `pipeline.warm`), then the full one if that was a
        short first frame. A later cursor replaces it."""
        session = self.session
        if not session.settings.warmup or self.running or session.excluded(doc.uri) or doc.is_binary:
            return
        self._stop_warmup()
        self._warmup = asyncio.ensure_future(self._warm(doc, cursor))

    async def _warm(self, doc: Document, cursor: int) -> None:
        await asyncio.sleep(WARMUP_DEBOUNCE_S)

        def keep(frame: context.Frame) -> None:
            self._frames[doc.uri] = frame

        frame, budget = self._plan(doc, cursor)
        stats = await self._warm_up(doc, cursor, frame, budget, keep)
        if stats is not None and stats.finish_reason == "warm" and self._full_wanted(doc.uri):
            await self._prefill_full(doc, cursor)

    async def _prefill_full(self, doc: Document, cursor: int) -> None:
        """Prefill the full frame at the place a short first frame serves; once done, requests there use it. A
        request that arrives drops it (the KV computed so far is saved by the engine); it is started again after
        that request's answer, and goes on from there."""
        uri = doc.uri

        def keep(frame: context.Frame) -> None:
            self._full[uri] = (frame, False)

        # The short frame is passed as the previous one: its snippets are kept, the frame itself does not hold.
        stats = await self._warm_up(doc, cursor, self._frames.get(uri), pipeline.budget_of(self.session.settings), keep)
        pending = self._full.get(uri)
        if stats is not None and stats.finish_reason == "warm" and pending is not None:
            self._full[uri] = (pending[0], True)

    async def _warm_up(
        self,
        doc: Document,
        cursor: int,
        frame: context.Frame | None,
        budget: context.Budget,
        keep: Callable[[context.Frame], None],
    ) -> GenerationStats | None:
        """One warm-up request at `cursor` of `doc` on `frame` (a new one under `budget` when it does not hold)."""
        session = self.session
        engine = session.start_engine()
        try:
            await wait_started(engine, 0.05)  # a starting engine is not held up by a warm-up
            template = await self.template()
            if not session.is_current(doc.uri, doc.version) or self.running:
                return None
            prepared = await pipeline.prepare(
                doc, cursor, session.settings, frame=frame, place=self.place(doc.uri), budget=budget
            )
            if prepared.ctx is not None and prepared.ctx.frame is not None:
                keep(prepared.ctx.frame)
            stats = await pipeline.warm(prepared, engine, template)
        except EngineError as e:
            log.debug("no warm-up at %s: %s", doc.uri, e)
            return None
        except Exception:  # a warm-up is an optimisation: its failure costs nothing but the log line
            log.exception("the warm-up at %s:%d failed", doc.uri, cursor)
            return None
        if stats is not None:
            self.warmups.append((doc.uri, stats))
            log.info(
                "warm-up %s:%d %s: %d prompt tokens, %d reused, %.0f ms",
                doc.uri,
                cursor,
                stats.finish_reason,
                stats.prompt_tokens,
                stats.reused_tokens,
                stats.prefill_ms,
            )
        return stats

    def _stop_warmup(self) -> None:
        if self._warmup is not None and not self._warmup.done():
            self._warmup.cancel()
        self._warmup = None

    def _job(self, uri: str, key: tuple[int, int, bool], start: Callable[[], Awaitable[pipeline.Suggestion]]) -> Job:
        """The computation for (document version, cursor) of `uri`: shared by identical requests, and
        superseding older ones (and any warm-up)."""
        self._stop_warmup()
        current = self._jobs.get(uri)
        if current is not None and current.key == key and not current.task.done():
            return current
        if current is not None and not current.task.done() and self.session.settings.supersede:
            current.task.cancel()
        job = Job(key, asyncio.ensure_future(start()))
        # A job can fail after its last waiter left (an outage ends a cancelled request's stream with an error):
        # the outage is told once elsewhere, not as a traceback per request.
        job.task.add_done_callback(take_outcome)
        self._jobs[uri] = job
        return job

    @property
    def running(self) -> int:
        """Suggestion jobs not finished yet (at most one per document)."""
        return sum(not job.task.done() for job in self._jobs.values())

    async def _wait(self, job: Job) -> pipeline.Suggestion:
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

    def _remember(self, uri: str, text: str, cursor: int, suggestion: str) -> None:
        entry = typeahead.remember(uri, text, cursor, suggestion)
        if entry is None:
            self._typeahead.pop(uri, None)
        else:
            self._typeahead[uri] = entry

    # -- metrics ---------------------------------------------------------------------------------
    def _record(self, s: pipeline.Suggestion) -> None:
        """Keep the timings of recent suggestions for `sparkls/metrics` and tell the observers; log a per-class
        summary now and then."""
        engine = self.session.engine
        if s.source == "model" and engine is not None:
            self._served += 1
            if self._served % SUMMARY_EVERY == 0:
                log.info("engine %s: %s", engine.name, self.summary())
        self.history.append(s)
        for observe in self.observers:
            try:
                observe(s)
            except Exception:  # metrics never cost a suggestion
                log.exception("an observer of suggestion %s failed", s.request_id)

    def summary(self) -> str:
        """The per-class engine summary as one log line."""
        engine = self.session.engine
        return metrics.summary_line(metrics.summarize(engine.completed if engine else ()))

    async def metrics(self) -> Metrics:
        """Recent suggestions, recent engine requests, per-class summary, engine-wide counters."""
        engine = self.session.engine
        done = list(engine.completed) if engine is not None else []
        stats = dict((await engine.health()).stats) if engine is not None else {}
        return Metrics(
            list(self.history), done, engine.name if engine is not None else None, metrics.summarize(done), stats
        )
