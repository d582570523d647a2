# pyright: strict
"""Prometheus metrics on a loopback port: what the server and its engine did, for a scraper to collect.

Off by default (`metricsPort` 0: nothing is registered, hooked or served). On, a private registry (never
prometheus_client's global one) is served at `http://127.0.0.1:<metricsPort>/metrics` (loopback only) by
prometheus_client's HTTP server on a daemon thread, from `initialize` until shutdown. Numbers come from hooks, never
from the documents: each request the handlers `counted` wraps (and its cancellation), each suggestion
(`CompletionService.observers`), each finished engine request (`Recorder.observers`, on the engine's thread), and at
each scrape the engine's restarts and its own counters (`Health.stats`). Labels are request kinds, request classes,
suggestion sources, finish reasons and engine stat names: never document text, paths or settings values.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from sparkls.completion.pipeline import Suggestion
from sparkls.completion.service import CompletionService
from sparkls.engine.base import Engine, GenerationStats, priority_label
from sparkls.engine.metrics import Recorder
from sparkls.lsp.acceptance import AcceptanceCounts, AcceptanceLedger
from sparkls.session import Session
from sparkls.text.document import Document

log = logging.getLogger("sparkls")

ADDRESS = "127.0.0.1"  # loopback only: the metrics name no secrets, but say what the user is doing and when
SECONDS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.5, 5.0, 10.0)
TOKENS_PER_SECOND = (1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 50.0, 75.0, 100.0, 150.0, 200.0, 300.0, 500.0, 1000.0)
HEALTH_TIMEOUT_S = 2.0  # a scrape waits this long for the engine's counters, then goes without them

Handler = Callable[..., Any]


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class Instruments:
    """The counters and histograms, registered in one private registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter("sparkls_requests", "LSP requests received, by kind.", ["kind"], registry=registry)
        self.cancelled = Counter(
            "sparkls_requests_cancelled",
            ("LSP requests answered RequestCancelled (cancelled by the client or superseded), by kind."),
            ["kind"],
            registry=registry,
        )
        self.suggestion_seconds = Histogram(
            "sparkls_suggestion_seconds",
            (
                "Time to suggestion: from the completion pipeline's start to the finished suggestion, by source "
                "(model, typeahead, none)."
            ),
            ["source"],
            buckets=SECONDS,
            registry=registry,
        )
        self._engine_instruments(registry)

    def _engine_instruments(self, registry: CollectorRegistry) -> None:
        """The engine's side: requests by class and finish reason, their times, tokens and preemptions."""
        cls = ["request_class"]
        self.engine_requests = Counter(
            "sparkls_engine_requests",
            (
                "Engine requests that ended, by request class and finish reason (stop, length, abort: cancelled, "
                "superseded or stopped once complete, error)."
            ),
            [*cls, "finish_reason"],
            registry=registry,
        )
        self.queue_seconds = Histogram(
            "sparkls_engine_queue_seconds",
            ("Time an engine request waited before the engine started it."),
            cls,
            buckets=SECONDS,
            registry=registry,
        )
        self.ttft_seconds = Histogram(
            "sparkls_engine_ttft_seconds",
            ("Engine time to first token (prefill included), of requests that produced a token."),
            cls,
            buckets=SECONDS,
            registry=registry,
        )
        self.decode_tps = Histogram(
            "sparkls_engine_decode_tokens_per_second",
            ("Decode speed of each engine request that produced tokens."),
            cls,
            buckets=TOKENS_PER_SECOND,
            registry=registry,
        )
        self.prompt_tokens = Counter(
            "sparkls_engine_prompt_tokens", "Prompt tokens of engine requests.", cls, registry=registry
        )
        self.cache_hit_tokens = Counter(
            "sparkls_engine_prefix_cache_hit_tokens",
            ("Prompt tokens whose KV came from the KV/prefix cache (not computed again)."),
            cls,
            registry=registry,
        )
        self.decode_tokens = Counter(
            "sparkls_engine_decode_tokens", "Tokens generated by engine requests.", cls, registry=registry
        )
        self.preemptions = Counter(
            "sparkls_engine_preemptions",
            ("Times a more urgent request paused or preempted an engine request."),
            cls,
            registry=registry,
        )

    def suggested(self, s: Suggestion) -> None:
        self.suggestion_seconds.labels(s.source).observe(s.timings.total_ms / 1000)

    def finished(self, st: GenerationStats) -> None:
        label = priority_label(st.priority)
        self.engine_requests.labels(label, st.finish_reason).inc()
        self.queue_seconds.labels(label).observe(st.queue_ms / 1000)
        if st.decode_tokens > 0:
            self.ttft_seconds.labels(label).observe(st.ttft_ms / 1000)
            if st.decode_ms > 0:
                self.decode_tps.labels(label).observe(st.decode_tps)
        self.prompt_tokens.labels(label).inc(st.prompt_tokens)
        self.cache_hit_tokens.labels(label).inc(st.reused_tokens)
        self.decode_tokens.labels(label).inc(st.decode_tokens)
        self.preemptions.labels(label).inc(st.preemptions)


class EngineCollector(Collector):
    """At each scrape: the engine's restarts and its own counters (`Health.stats`), read from the engine in use."""

    def __init__(self, telemetry: Telemetry) -> None:
        self.telemetry = telemetry

    def collect(self) -> Iterable[Metric]:
        engine = self.telemetry.session.engine
        stats = self.telemetry.engine_stats(engine)
        restarts = CounterMetricFamily(
            "sparkls_engine_restarts", ("Times the engine was restarted (its supervisor's count where it keeps one).")
        )
        restarts.add_metric([], float(self.telemetry.restarts(engine, stats)))
        yield restarts
        gauge = GaugeMetricFamily(
            "sparkls_engine_stat",
            (
                "The engine's own counters from its health (vLLM prefix cache queries and hits, llama.cpp preemptions "
                "and waiting requests, ...), by name."
            ),
            labels=["stat"],
        )
        for name, value in sorted(stats.items()):
            gauge.add_metric([name], value)
        yield gauge


# The acceptance counters: (name, help, the count of one source).
_ACCEPTANCE: list[tuple[str, str, Callable[[AcceptanceCounts], int]]] = [
    (
        "sparkls_offers",
        "Answers sent with text or edits (offers), by source (model, typeahead, nextEdit).",
        lambda c: c.offered,
    ),
    ("sparkls_offers_shown", "Offers the client reported shown.", lambda c: c.shown),
    ("sparkls_offers_accepted", "Offers accepted whole (their sparkls.accepted command ran).", lambda c: c.accepted),
    ("sparkls_offers_partially_accepted", "Offers partly accepted (a word or a line).", lambda c: c.partially_accepted),
    ("sparkls_offers_dismissed", "Offers the client reported dismissed.", lambda c: c.dismissed),
    (
        "sparkls_accepted_chars",
        "Characters inserted by accepting offers, whole or in part.",
        lambda c: c.accepted_chars,
    ),
]


class AcceptanceCollector(Collector):
    """At each scrape: the acceptance ledger's counters per offer source, and the acceptance rate of the offers shown
    and of those offered (a source with nothing to divide by has no rate sample)."""

    def __init__(self, ledger: AcceptanceLedger) -> None:
        self.ledger = ledger

    def collect(self) -> Iterable[Metric]:
        counts = self.ledger.counts()
        for name, documentation, count_of in _ACCEPTANCE:
            family = CounterMetricFamily(name, documentation, labels=["source"])
            for source, c in counts.items():
                family.add_metric([source], float(count_of(c)))
            yield family
        rate = GaugeMetricFamily(
            "sparkls_acceptance_rate",
            ("Offers accepted whole per offer shown (denominator shown) or per offer sent (denominator offered)."),
            labels=["source", "denominator"],
        )
        for source, c in counts.items():
            for denominator, fraction in (("shown", c.rate_of_shown), ("offered", c.rate_of_offered)):
                if fraction is not None:
                    rate.add_metric([source, denominator], fraction)
        yield rate


class Telemetry:
    """The exporter of one server: off until `start` gets a port; follows the session to its shutdown."""

    def __init__(
        self, session: Session, completions: CompletionService, acceptance: AcceptanceLedger | None = None
    ) -> None:
        self.session = session
        self.completions = completions
        self.acceptance = acceptance
        self.port: int | None = None  # the port `start` was given (0: off)
        self._moving: asyncio.Future[None] | None = None  # a move to another port (`reconfigured`)
        self.registry: CollectorRegistry | None = None  # the private registry, once served (kept after `stop`)
        self.instruments: Instruments | None = None  # None while off: the hooks do nothing
        self._http: WSGIServer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._recorder: Recorder | None = None
        self._restarts = 0
        session.subscribe(self)

    # -- serving ---------------------------------------------------------------------------------
    def start(self, port: int) -> str | None:
        """Serve the metrics on 127.0.0.1:`port` (0: stay off): on initialize, and on a `metricsPort` change. A
        problem (the port is taken) is returned as a message and leaves the metrics off."""
        if self.port is not None:
            return None
        self.port = port
        if port == 0:
            log.info("metrics: off (metricsPort 0)")
            return None
        registry = CollectorRegistry(auto_describe=True)
        instruments = Instruments(registry)
        registry.register(EngineCollector(self))
        if self.acceptance is not None:
            registry.register(AcceptanceCollector(self.acceptance))
        try:
            self._http, _thread = start_http_server(port, addr=ADDRESS, registry=registry)
        except OSError as e:
            log.warning("metrics: cannot serve on %s:%d: %s", ADDRESS, port, e)
            return f"metrics are off: cannot listen on {ADDRESS}:{port} ({e.strerror or e})"
        with contextlib.suppress(RuntimeError):  # the engine's counters are read on the loop that owns it
            self._loop = asyncio.get_running_loop()
        self.registry, self.instruments = registry, instruments
        self.completions.observers.append(self._suggested)
        self._follow()
        log.info("metrics: http://%s:%d/metrics", ADDRESS, port)
        return None

    async def stop(self) -> None:
        """Stop serving and hearing; safe to call again."""
        http, self._http, self.instruments = self._http, None, None
        with contextlib.suppress(ValueError):
            self.completions.observers.remove(self._suggested)
        if self._recorder is not None:
            with contextlib.suppress(ValueError):
                self._recorder.observers.remove(self._finished)
            self._recorder = None
        if http is not None:
            await asyncio.to_thread(http.shutdown)  # waits for the serving thread's poll (0.5 s)
            http.server_close()
            log.info("metrics: stopped")

    # -- hooks -----------------------------------------------------------------------------------
    def counted(self, kind: str, handler: Handler) -> Handler:
        """`handler` (sync or async, `ls` first) counting its requests as `kind`, and its cancellations."""
        if inspect.iscoroutinefunction(handler):

            @functools.wraps(handler)
            async def run_async(ls: Any, *args: Any) -> Any:
                m = self._counting(kind)
                try:
                    return await handler(ls, *args)
                except asyncio.CancelledError:
                    if m is not None:
                        m.cancelled.labels(kind).inc()
                    raise

            return run_async

        @functools.wraps(handler)
        def run(ls: Any, *args: Any) -> Any:
            self._counting(kind)
            return handler(ls, *args)

        return run

    def engine_restarted(self) -> None:
        """Count one restart of the engine (exported when the engine keeps no `restarts` count of its own)."""
        self._restarts += 1
        self._follow()

    def _counting(self, kind: str) -> Instruments | None:
        m = self.instruments
        if m is not None:
            m.requests.labels(kind).inc()
            self._follow()
        return m

    def _follow(self) -> None:
        """Hear the recorder of the engine in use (a new engine brings its own, unless its supervisor keeps one)."""
        recorder: object = getattr(self.session.engine, "recorder", None)
        if self.instruments is None or recorder is self._recorder or not isinstance(recorder, Recorder):
            return
        if self._recorder is not None:
            with contextlib.suppress(ValueError):
                self._recorder.observers.remove(self._finished)
        recorder.observers.append(self._finished)
        self._recorder = recorder

    def _suggested(self, s: Suggestion) -> None:
        if (m := self.instruments) is not None:
            m.suggested(s)

    def _finished(self, request_id: str, stats: GenerationStats) -> None:
        if (m := self.instruments) is not None:
            m.finished(stats)

    # -- read at each scrape (on the HTTP server's thread) ---------------------------------------
    def engine_stats(self, engine: Engine | None) -> Mapping[str, float]:
        """The engine's `Health.stats`, asked on its event loop; empty when there is none or it does not answer
        in time."""
        loop = self._loop
        if engine is None or loop is None or loop.is_closed() or _running_loop() is loop:  # never wait on itself
            return {}
        try:
            fut = asyncio.run_coroutine_threadsafe(engine.health(), loop)
        except RuntimeError:  # the loop is gone
            return {}
        try:
            return dict(fut.result(HEALTH_TIMEOUT_S).stats)
        except Exception:
            fut.cancel()
            log.debug("metrics: no engine health this scrape", exc_info=True)
            return {}

    def restarts(self, engine: Engine | None, stats: Mapping[str, float]) -> int:
        """The engine's restarts: its own `restarts` count, else its `Health.stats["restarts"]`, else the
        `engine_restarted` calls."""
        own: object = getattr(engine, "restarts", None)
        if isinstance(own, int) and not isinstance(own, bool):
            return own
        if "restarts" in stats:
            return int(stats["restarts"])
        return self._restarts

    # -- the session's lifecycle (a `session.Listener`) ------------------------------------------
    def opened(self, doc: Document) -> None:
        pass

    def changed(self, old: Document, start: int, end: int, text: str) -> None:
        pass

    def updated(self, doc: Document) -> None:
        pass

    def closed(self, uri: str) -> None:
        pass

    def reconfigured(self) -> None:
        port = self.session.settings.metrics_port
        if self.port is not None and port != self.port:
            self.port = port  # what is asked for now; a later change while this one runs moves again
            self._moving = asyncio.ensure_future(self._move(port))

    async def _move(self, port: int) -> None:
        """Serve on `port` instead (a settings change; 0: stop); a port taken leaves the metrics off, logged."""
        await self.stop()
        if self.port != port:
            return
        self.port = None
        if (problem := self.start(port)) is not None:
            log.warning("%s", problem)

    async def shutdown(self) -> None:
        await self.stop()
