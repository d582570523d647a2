"""Settings changed while the server runs (`workspace/didChangeConfiguration`) reach the engine: the real server
rebuilds a real engine from them and shows its start again as progress. The fake engine (named as such: it runs
no model) and a real OpenAI-style HTTP server on 127.0.0.1 here; the embedded llama.cpp engine with the real
model; every engine setting of every engine through the session in tests/test_session.py."""

from __future__ import annotations

import asyncio
import urllib.request

import pytest
from lsprotocol import types

from tests.conftest import require
from tests.e2e.lsp_client import inline_params, lsp, open_doc
from tests.e2e.test_faults import errors, health
from tests.servers import FaultyOpenAIServer, free_port

TEXT = "def double(x):\n    \n"
AT = types.Position(line=1, character=4)


def change(c, **settings) -> None:
    c.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"sparkls": settings}))


async def starts_ended(c, count: int, timeout_s: float = 120) -> list[str]:
    """The end messages of the engine's start progress, once there are `count` of them."""
    tokens = ["sparkls-engine-start", *(f"sparkls-engine-start-{n}" for n in range(2, count + 1))]
    for _ in range(int(timeout_s / 0.05)):
        ends = [r.message for t in tokens for r in c.progress_reports.get(t, []) if getattr(r, "kind", "") == "end"]
        if len(ends) >= count:
            return ends
        await asyncio.sleep(0.05)
    pytest.fail(f"the engine's start was not shown {count} times: {c.progress_reports}")


async def suggestion(c, uri: str) -> str:
    out = await asyncio.wait_for(c.text_document_inline_completion_async(inline_params(uri, AT)), 120)
    return out.items[0].insert_text if out.items else ""


async def test_a_changed_fake_answer_rebuilds_the_engine_and_the_next_suggestion_is_it():
    async with lsp(options={"engine": "fake", "fakeResponse": "return 1\n"}) as (c, _):
        await starts_ended(c, 1)
        open_doc(c, "file:///w/a.py", TEXT)
        assert await suggestion(c, "file:///w/a.py") == "return 1"
        change(c, engine="fake", fakeResponse="return x * 2\n")
        ends = await starts_ended(c, 2)
        assert ends[1].startswith("ready in ")
        assert await suggestion(c, "file:///w/a.py") == "return x * 2"
        assert errors(c) == []


async def test_a_changed_openai_url_sends_the_next_request_to_the_new_server():
    first, second = FaultyOpenAIServer(answer="return 1\n").start(), FaultyOpenAIServer(answer="return 2\n").start()
    try:
        async with lsp(options={"engine": "openai", "openaiUrl": first.url}) as (c, _):
            await starts_ended(c, 1)
            open_doc(c, "file:///w/a.py", TEXT)
            assert await suggestion(c, "file:///w/a.py") == "return 1"
            change(c, engine="openai", openaiUrl=second.url)
            await starts_ended(c, 2)
            served_by_first = first.completions
            assert await suggestion(c, "file:///w/a.py") == "return 2"
            # One suggestion request reached the new server (a background warm-up of the full prompt may follow
            # it there, asking for one token); the old one got nothing more.
            assert second.suggestions == 1 and first.completions == served_by_first
            assert errors(c) == []
    finally:
        first.stop()
        second.stop()


async def test_a_changed_metrics_port_moves_the_endpoint_at_once():
    port = free_port()
    async with lsp(options={"engine": "fake"}) as (c, _):
        change(c, engine="fake", metricsPort=port)
        body = ""
        for _ in range(200):  # the move runs on the server's loop: wait for the endpoint
            try:
                body = await asyncio.to_thread(
                    lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
                )
                break
            except OSError:
                await asyncio.sleep(0.05)
        assert "sparkls_" in body


@pytest.mark.model
async def test_changed_llamacpp_threads_rebuild_the_embedded_engine_with_them():
    require("llama_cpp", "the embedded engine")
    async with lsp(options={"engine": "llamacpp", "threads": 1}) as (c, _):
        await starts_ended(c, 1, timeout_s=300)
        assert "threads=1 " in (await health(c)).detail
        change(c, engine="llamacpp", threads=2)
        ends = await starts_ended(c, 2, timeout_s=300)
        assert ends[1].startswith("ready in ")
        assert "threads=2 " in (await health(c)).detail
        open_doc(c, "file:///w/a.py", TEXT)
        assert await suggestion(c, "file:///w/a.py")
        assert errors(c) == []
