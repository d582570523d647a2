"""The remote engine against a real OpenAI-compatible vLLM server on 127.0.0.1 (tiny local model).

Proves: streaming; one TCP connection reused across requests (counted by a proxy in front of the
server); a cancel closes the stream and the server aborts the request; prefix-cache hits reported
by the server; connection failures retried with backoff, then a clear error; the API key is sent
and never logged; and `engine = "openai"` end to end through the LSP. Those tests are marked `vllm`; the
parsing of the server's event stream and metrics below runs without a server.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time

import pytest
import pytest_asyncio
from sparkls.engine.base import Delta, EngineError, GenerationRequest, Priority
from sparkls.engine.openai import parse_prometheus, parse_sse

from tests.conftest import require
from tests.e2e import engine_cases
from tests.e2e.lsp_client import lsp
from tests.engine_support import cancel_after, collect, vllm_test
from tests.servers import CountingProxy, free_port, server_metric, vllm_server

KEY = "sk-sparkls-test-5c1e7"
BODY = "".join(f"def helper_{i}(x):\n    return x * {i}\n\n" for i in range(20))


def prompt(tag: str) -> str:
    return f"<|fim_prefix|>{BODY}# {tag}\ndef main():\n    <|fim_suffix|>\n<|fim_middle|>"


@pytest.fixture(scope="module")
def server(tiny_model, tmp_path_factory):
    require("vllm", "the vLLM server")
    log = tmp_path_factory.mktemp("vllm-server") / "server.log"
    with vllm_server(tiny_model, "--scheduling-policy", "priority", api_key=KEY, log=log) as url:
        yield url


def make(url: str, **kw):
    from sparkls.engine.openai import OpenAIEngine, OpenAIOptions

    return OpenAIEngine(OpenAIOptions(url=url, api_key=kw.pop("api_key", KEY), **kw))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def proxy(server):
    host_port = server.removeprefix("http://").removesuffix("/v1")
    host, port = host_port.split(":")
    async with CountingProxy(host, int(port)) as p:
        yield p


@vllm_test
async def test_log_probabilities_come_with_the_text_when_asked(server):
    # The tiny model's logits are all equal: each token has probability 1 / 2,048 (its vocabulary).
    engine = make(server)
    try:
        asked = [ev async for ev in engine.stream(GenerationRequest(prompt("lp"), max_tokens=6, logprobs=True))]
        plain = [ev async for ev in engine.stream(GenerationRequest(prompt("lp"), max_tokens=6))]
    finally:
        await engine.close()
    lps = [ev.logprob for ev in asked if isinstance(ev, Delta)]
    assert None not in lps and sum(lps) == pytest.approx(6 * -math.log(2048), rel=1e-3), lps
    # How many chunks carry the six tokens depends on the server's timing; the text and the absent values do not.
    plain_deltas = [ev for ev in plain if isinstance(ev, Delta)]
    assert plain_deltas and {ev.logprob for ev in plain_deltas} == {None}
    assert "".join(ev.text for ev in plain_deltas) == "".join(ev.text for ev in asked if isinstance(ev, Delta))


@vllm_test
async def test_requests_stream_over_one_persistent_connection_and_hit_the_prefix_cache(proxy):
    engine = make(f"http://127.0.0.1:{proxy.port}/v1")
    try:
        before = proxy.connections
        results = [
            (
                await collect(
                    engine,
                    GenerationRequest(prompt(f"t{i % 2}"), max_tokens=8, priority=Priority.BACKGROUND if i % 2 else 0),
                )
            )[:2]
            for i in range(6)
        ]
        assert proxy.connections - before == 1  # model discovery and six completions: one TCP connection
        for text, stats in results:
            assert text == "!" * 8 and stats.decode_tokens == 8 and stats.finish_reason == "length"
        assert results[2][1].reused_tokens >= results[2][1].prompt_tokens - 64  # the server's prefix cache
        health = await engine.health()
        assert health.ok and health.stats["prefix_cache_hits"] > 0
    finally:
        await engine.close()


@vllm_test
async def test_special_token_stops_go_to_vllm_serve_as_token_ids_so_no_text_is_held_back(server):
    from sparkls.completion.prompt import TEMPLATES

    stops = TEMPLATES["qwen"].stops  # special tokens of up to 14 characters
    engine = make(server)
    try:
        deltas = []
        async for ev in engine.stream(GenerationRequest(prompt("stops"), max_tokens=20, stop=(*stops, "\n\n"))):
            if isinstance(ev, Delta):
                deltas.append(ev.text)
        body = engine._body(GenerationRequest("p", stop=(*stops, "\n\n")))
        assert body["stop"] == ["\n\n"] and len(body["stop_token_ids"]) == len(stops)  # a plain string stays one
        # As strings, vLLM would hold back the last 13 characters until the request finishes: with this model's
        # one character per token, nothing for 13 tokens, then one per token, and the held-back 13 plus the final
        # token in the last delta (14 when tried). As token ids, each token streams when decoded. The server
        # merges deltas when it stalls (seen mid-stream on a busy 2-core machine: 13 tokens in one), so their
        # count is not a contract.
        assert "".join(deltas) == "!" * 20 and len(deltas) >= 2 and len(deltas[-1]) < 13, deltas
    finally:
        await engine.close()


@vllm_test
async def test_cancelling_closes_the_stream_and_the_server_aborts_the_request(server):
    engine = make(server)
    generated_before = server_metric(server, "vllm:generation_tokens_total")
    try:
        assert await cancel_after(engine, GenerationRequest(prompt("long"), max_tokens=1800, id="remote-long"), 5) >= 5
        for _ in range(100):  # the server notices the disconnect at its next output
            if server_metric(server, "vllm:num_requests_running") == 0:
                break
            await asyncio.sleep(0.05)
        assert server_metric(server, "vllm:num_requests_running") == 0
        # It stopped generating (vLLM 0.32 does not count aborts in request_success_total): a second
        # later no token was added, and far fewer than the 1,800 allowed were ever generated.
        generated = server_metric(server, "vllm:generation_tokens_total")
        await asyncio.sleep(1.0)
        assert server_metric(server, "vllm:generation_tokens_total") == generated
        assert generated - generated_before < 300
        (stats,) = [st for rid, st in engine.completed if rid == "remote-long"]
        assert stats.finish_reason == "abort"
    finally:
        await engine.close()


@vllm_test
async def test_an_unreachable_server_is_retried_with_backoff_then_reported(caplog):
    engine = make(f"http://127.0.0.1:{free_port()}/v1", model="m", retries=2, backoff_s=0.05)
    caplog.set_level(logging.WARNING, "sparkls")
    t0 = time.perf_counter()
    try:
        with pytest.raises(EngineError, match="ConnectError: All connection attempts failed"):
            await collect(engine, GenerationRequest("x", max_tokens=2))
    finally:
        await engine.close()
    assert [r.message.split("; ")[1] for r in caplog.records if "retry" in r.message] == [
        "retry 1/2 in 0.05s",
        "retry 2/2 in 0.10s",
    ]
    assert time.perf_counter() - t0 >= 0.15


@vllm_test
async def test_the_api_key_is_sent_never_logged_and_a_wrong_one_is_a_clear_error(server, caplog):
    caplog.set_level(logging.DEBUG)  # everything: sparkls, httpx, httpcore
    engine = make(server)
    wrong = make(server, api_key="sk-wrong", model="tiny")
    try:
        text, _, _ = await collect(engine, GenerationRequest(prompt("key"), max_tokens=3))
        assert text == "!!!"
        with pytest.raises(EngineError, match="HTTP 401"):
            await collect(wrong, GenerationRequest(prompt("key"), max_tokens=3))
    finally:
        await engine.close()
        await wrong.close()
    assert KEY not in caplog.text and "sk-wrong" not in caplog.text
    assert KEY not in repr(engine.options)


@vllm_test
async def test_openai_engine_serves_completion_through_the_lsp_and_aborts_on_cancel(server):
    opts = {"engine": "openai", "openaiUrl": server, "openaiApiKey": KEY, "maxTokensMultiLine": 1800, "maxLines": 500}
    async with lsp(options=opts) as (c, _):
        await engine_cases.inline_and_classic_completion_are_served(c, "openai")
        await engine_cases.cancel_request_aborts_the_engine(c, "openai", 1800)


@vllm_test
async def test_a_server_that_rejects_priority_gets_none_after_one_warning(caplog):
    """A strict OpenAI-compatible stand-in (a real HTTP server on 127.0.0.1, not vLLM: vLLM 0.32 accepts
    and ignores `priority` when started without --scheduling-policy priority) answers 400 to it."""
    bodies: list[dict] = []

    async def handle(reader, writer):
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(
                next(ln.split(b":")[1] for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length"))
            )
            body = json.loads(await reader.readexactly(length))
            bodies.append(body)
            if "priority" in body:
                msg = b'{"error": {"message": "Unrecognized request argument supplied: priority"}}'
                writer.write(
                    b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (len(msg), msg)
                )
            else:
                sse = b'data: {"choices": [{"text": "ok", "finish_reason": "stop"}]}\n\ndata: [DONE]\n\n'
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n%s"
                    % (len(sse), sse)
                )
            await writer.drain()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    caplog.set_level(logging.WARNING, "sparkls")
    engine = make(f"http://127.0.0.1:{port}/v1", api_key="", model="strict", backoff_s=0.01)
    try:
        first, _, _ = await collect(engine, GenerationRequest("x", max_tokens=3, priority=Priority.BACKGROUND))
        second, _, _ = await collect(engine, GenerationRequest("y", max_tokens=3, priority=Priority.BACKGROUND))
    finally:
        await engine.close()
        server.close()
    assert first == second == "ok"
    assert ["priority" in b for b in bodies] == [True, False, False]
    assert [r.message for r in caplog.records if r.message.startswith("the server")] == [
        "the server rejects request priorities (start it with --scheduling-policy priority); sending none from now on"
    ]


@vllm_test
async def test_a_server_without_vllms_tokenize_is_asked_once_and_keeps_string_stops():
    """An OpenAI-compatible stand-in (a real HTTP server on 127.0.0.1) that answers 404 to `/tokenize`."""
    seen: list[tuple[str, dict]] = []

    async def handle(reader, writer):
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            path = head.split(b" ", 2)[1].decode()
            length = int(
                next(ln.split(b":")[1] for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length"))
            )
            seen.append((path, json.loads(await reader.readexactly(length))))
            if path.endswith("/completions"):
                out = b'data: {"choices": [{"text": "ok", "finish_reason": "stop"}]}\n\ndata: [DONE]\n\n'
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n%s"
                    % (len(out), out)
                )
            else:
                out = b'{"detail": "Not Found"}'
                writer.write(
                    b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (len(out), out)
                )
            await writer.drain()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    engine = make(f"http://127.0.0.1:{port}/v1", api_key="", model="plain", send_priority=False)
    stops = ("<|endoftext|>", "<|fim_prefix|>", "\n\n")
    try:
        for _ in range(2):
            text, _, _ = await collect(engine, GenerationRequest("x", max_tokens=3, stop=stops))
            assert text == "ok"
    finally:
        await engine.close()
        server.close()
    assert [path for path, _ in seen] == ["/tokenize", "/v1/completions", "/v1/completions"]
    assert all(body["stop"] == list(stops) and "stop_token_ids" not in body for _, body in seen[1:])


@vllm_test
async def test_an_answer_stopped_with_abort_mid_stream_finishes_cleanly_not_as_a_fault():
    """The completion pipeline aborts a generation as soon as its answer is complete and keeps reading the
    stream for the statistics: the closed stream is the end of that answer, not a remote failure (which would
    count against the engine and, three times in a row, take it down)."""
    from tests.servers import FaultyOpenAIServer

    server = FaultyOpenAIServer(answer="return value + 1\n", delay_s=0.2).start()
    server.mode = "slow"
    engine = make(server.url, api_key="", send_priority=False)
    try:
        req = GenerationRequest("x", max_tokens=8, stop=())
        events = []
        async for event in engine.stream(req):
            events.append(event)
            if isinstance(event, Delta) and len(events) == 1:
                await engine.abort(req.id)
        assert isinstance(events[0], Delta) and events[0].text == "ret"
        assert events[-1].stats.finish_reason == "abort"  # a clean finish (no EngineError was raised)
        text, _, _ = await collect(engine, GenerationRequest("x", max_tokens=8, stop=()))
        assert text == "return value + 1\n"  # the next request is served as usual
    finally:
        await engine.close()
        server.stop()


# ---- without a server: the stream's and the metrics' parsing ------------------------------------------------


def test_sse_payloads_stop_at_done():
    lines = [
        ": keep-alive",
        'data: {"choices": [{"text": "a"}]}',
        "",
        'data: {"choices": [{"text": "b"}]}',
        "data: [DONE]",
        'data: {"never": 1}',
    ]
    assert [p["choices"][0]["text"] for p in parse_sse(lines)] == ["a", "b"]


def test_prometheus_counters_are_summed_over_label_sets():
    text = (
        '# HELP x\nvllm:prefix_cache_hits_total{engine="0",model_name="m"} 96.0\n'
        'vllm:prefix_cache_hits_total{engine="1",model_name="m"} 4.0\nvllm:num_requests_running{e="0"} 2.0\n'
        "other 7\n"
    )
    assert parse_prometheus(text) == {"prefix_cache_hits": 100.0, "running": 2.0}
