"""The Prometheus endpoint (`metricsPort`): off by default, loopback only, and its numbers match what was served.

The e2e tests scrape the real server (over stdio, fake engine) with urllib; the unit tests cover the hooks it
counts from (`Recorder.observers`) and the engine collector, without a server."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import urllib.request
from typing import Any

import psutil
import pytest
from lsprotocol import types
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from pygls.exceptions import JsonRpcException
from sparkls.completion.service import CompletionService
from sparkls.engine.base import GenerationStats, Health, Priority
from sparkls.engine.fake import FakeEngine
from sparkls.engine.metrics import Recorder
from sparkls.lsp.telemetry import Telemetry
from sparkls.session import Session

from tests.e2e.lsp_client import inline_params, lsp, metrics, open_doc, until_in_engine
from tests.servers import free_port

SECRET = "sk-prom-never-in-a-scrape-7f3a"
SLOW = "    x = 1\n" * 40  # 134 fake tokens at 50 ms: long enough to cancel
SCRIPT = json.dumps({"": "rn msg\n", "def slow": SLOW})


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return r.read().decode()


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """(sample name, labels) -> value of a Prometheus text exposition."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def total(found: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    """The sum of `name`'s samples whose labels include `labels`."""
    want = set(labels.items())
    return sum(v for (n, ls), v in found.items() if n == name and want <= ls)


def listening(pid: int) -> list[tuple[str, int]]:
    return sorted(
        (c.laddr.ip, c.laddr.port)
        for c in psutil.Process(pid).net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN
    )


def other_address() -> str | None:
    """An IPv4 address of this machine that is not loopback, if it has one."""
    for addrs in psutil.net_if_addrs().values():
        for a in addrs:
            if a.family == socket.AF_INET and not a.address.startswith("127."):
                return a.address
    return None


async def test_the_scrape_counts_the_suggestions_engine_requests_and_cancellations_made():
    port = free_port()
    opts = {
        "engine": "fake",
        "fakeResponse": SCRIPT,
        "fakeTokenDelayMs": 50,
        "maxLines": 100,
        "maxTokensMultiLine": 1000,
        "metricsPort": port,
        "openaiApiKey": SECRET,
        "firstWindowTokens": 0,
    }  # one engine request per answer: no background prefill of a full prompt
    async with lsp(options=opts) as (c, _):
        for i in range(2):  # two documents: the second is no typed-ahead rest of the first
            uri = f"file:///w/greet{i}.py"
            open_doc(c, uri, "def greet(name):\n    retu\n")
            got = await c.text_document_inline_completion_async(inline_params(uri, types.Position(line=1, character=8)))
            assert [it.insert_text for it in got.items] == ["rn msg"]
        open_doc(c, "file:///w/slow.py", "def slow():\n    \n")
        fut = asyncio.ensure_future(
            c.protocol.send_request_async(
                types.TEXT_DOCUMENT_INLINE_COMPLETION,
                inline_params("file:///w/slow.py", types.Position(line=1, character=4)),
                msg_id=777,
            )
        )
        await until_in_engine(c)  # cancelled while the engine generates it
        c.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id=777))
        with pytest.raises(JsonRpcException):
            await asyncio.wait_for(fut, 30)
        m = await metrics(c)
        text = await asyncio.to_thread(scrape, port)

    found = samples(text)
    assert total(found, "sparkls_requests_total", kind="inline") == 3
    assert total(found, "sparkls_requests_cancelled_total", kind="inline") == 1
    # the cancelled request made no suggestion; the two that were answered did
    assert len(m.suggestions) == 2
    assert total(found, "sparkls_suggestion_seconds_count", source="model") == 2
    # every engine request the recorder kept is in the histograms, by class and finish reason
    engine = m.engine
    assert len(engine) >= 3 and {r.priority for r in engine} == {Priority.INTERACTIVE}
    assert total(found, "sparkls_engine_queue_seconds_count", request_class="interactive") == len(engine)
    assert total(found, "sparkls_engine_ttft_seconds_count") == sum(r.decode_tokens > 0 for r in engine)
    assert total(found, "sparkls_engine_requests_total") == len(engine)
    for reason in {r.finish_reason for r in engine}:
        assert total(found, "sparkls_engine_requests_total", finish_reason=reason) == sum(
            r.finish_reason == reason for r in engine
        )
    assert total(found, "sparkls_engine_decode_tokens_total") == sum(r.decode_tokens for r in engine)
    assert total(found, "sparkls_engine_prompt_tokens_total") == sum(r.prompt_tokens for r in engine)
    assert total(found, "sparkls_engine_restarts_total") == 0
    assert SECRET not in text and "greet" not in text and "file:" not in text


async def test_the_endpoint_listens_on_loopback_only_and_stops_with_the_server():
    port = free_port()
    async with lsp(options={"engine": "fake", "metricsPort": port}) as (c, _):
        pid = c._server.pid  # type: ignore[union-attr]
        assert listening(pid) == [("127.0.0.1", port)]
        assert "sparkls_requests_total" in await asyncio.to_thread(scrape, port)
        other = other_address()
        if other is not None:
            with pytest.raises(OSError), socket.create_connection((other, port), timeout=2):
                pass
    with pytest.raises(OSError):
        await asyncio.to_thread(scrape, port)


async def test_by_default_the_server_listens_on_no_port():
    async with lsp(options={"engine": "fake"}) as (c, _):
        await metrics(c)  # initialized and serving
        assert listening(c._server.pid) == []  # type: ignore[union-attr]


async def test_a_port_in_use_is_shown_once_and_the_server_serves_on():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        async with lsp(options={"engine": "fake", "metricsPort": port}) as (c, _):
            open_doc(c, "file:///w/a.py", "def f():\n    retu\n")
            got = await c.text_document_inline_completion_async(
                inline_params("file:///w/a.py", types.Position(line=1, character=8))
            )
            assert got.items
            shown = [m.message for m in c.messages if m.type == types.MessageType.Warning]
            assert len(shown) == 1 and f"127.0.0.1:{port}" in shown[0]


# -- the hooks, without a server ---------------------------------------------------------------------


def test_a_recorder_tells_each_observer_of_every_record_and_survives_a_failing_one():
    rec = Recorder(size=2)
    heard: list[tuple[str, int]] = []

    def broken(rid: str, st: GenerationStats) -> None:
        raise RuntimeError("observer bug")

    rec.observers += [broken, lambda rid, st: heard.append((rid, st.decode_tokens))]
    stats = [GenerationStats(decode_tokens=n) for n in range(3)]
    assert [rec.record(f"r{n}", st) for n, st in enumerate(stats)] == stats
    assert heard == [("r0", 0), ("r1", 1), ("r2", 2)]
    assert [rid for rid, _ in rec.completed] == ["r1", "r2"]  # the record keeps its size; observers heard all


class RestartingEngine(FakeEngine):
    restarts = 3


@contextlib.asynccontextmanager
async def started(engine: FakeEngine):
    session = Session(engine=engine)
    t = Telemetry(session, CompletionService(session))
    assert t.start(free_port()) is None
    try:
        yield t
    finally:
        await t.stop()


async def test_an_engine_that_counts_its_restarts_is_exported_as_is():
    async with started(RestartingEngine()) as t:
        t.engine_restarted()  # the engine's own count wins
        assert total(samples(generate_latest(t.registry).decode()), "sparkls_engine_restarts_total") == 3


async def test_restarts_told_to_the_exporter_are_counted_and_engine_requests_heard_by_class():
    engine = FakeEngine("ok")
    async with started(engine) as t:
        t.engine_restarted()
        t.engine_restarted()
        engine.recorder.record(
            "b1",
            GenerationStats(
                prompt_tokens=10,
                reused_tokens=7,
                decode_tokens=2,
                decode_ms=10,
                priority=Priority.BACKGROUND,
                preemptions=1,
            ),
        )
        found: dict[Any, float] = samples(generate_latest(t.registry).decode())
    assert total(found, "sparkls_engine_restarts_total") == 2
    bg = {"request_class": "background"}
    assert total(found, "sparkls_engine_prefix_cache_hit_tokens_total", **bg) == 7
    assert total(found, "sparkls_engine_preemptions_total", **bg) == 1
    assert total(found, "sparkls_engine_decode_tokens_per_second_count", **bg) == 1
    assert engine.recorder.observers == []  # stopped: no longer heard


class CountingEngine(FakeEngine):
    async def health(self) -> Health:
        return Health(True, self.name, stats={"prefix_cache_hits": 5.0, "restarts": 1.0})


async def test_a_scrape_reads_the_engine_counters_from_its_health_on_the_servers_loop():
    async with started(CountingEngine()) as t:
        found = samples(await asyncio.to_thread(scrape, t.port or 0))  # the HTTP thread asks the loop
    assert total(found, "sparkls_engine_stat", stat="prefix_cache_hits") == 5
    assert total(found, "sparkls_engine_restarts_total") == 1
