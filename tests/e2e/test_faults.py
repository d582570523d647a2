"""Engine faults through the real server: a remote engine that answers HTTP 500, garbage, drops the connection,
hangs or dies (a real HTTP server on 127.0.0.1), and the embedded llama.cpp engine whose worker dies or hangs
mid-stream (real model; the faults come from `engine/failpoints.py`). In each case the editor gets empty
answers quickly, one `window/showMessage` per outage, the engine is restarted and serving resumes; a
streaming edit cut short by a crash, or by shutdown, leaves the buffer as it was."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from tests.conftest import require
from tests.e2e.editor import Editor
from tests.e2e.lsp_client import answers, health, inline_params, lsp, metrics, open_doc, position
from tests.servers import FaultyOpenAIServer

TEXT = "def double(x):\n    retu\n"


async def until_healthy(c, restarts: int, timeout_s: float = 120):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        h = await health(c)
        if h.ok and getattr(h.stats, "restarts", 0) >= restarts:
            return h
        await asyncio.sleep(0.2)
    pytest.fail(f"the engine did not come back: {h}")


class Typist:
    """Types into one document, asking for an inline completion after each keystroke."""

    def __init__(self, c, uri: str, text: str) -> None:
        self.c, self.uri, self.text, self.version = c, uri, text, 1
        open_doc(c, uri, text)

    async def key(self, ch: str, at: int) -> tuple[list[str], float]:
        """Insert `ch` at `at`; the suggestion texts for the cursor after it, and how long they took."""
        pos = position(self.text, at, "utf-16")
        self.version += 1
        self.c.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=self.uri, version=self.version),
                content_changes=[
                    types.TextDocumentContentChangePartial(range=types.Range(start=pos, end=pos), text=ch)
                ],
            )
        )
        self.text = self.text[:at] + ch + self.text[at:]
        t0 = time.monotonic()
        out = await asyncio.wait_for(
            self.c.text_document_inline_completion_async(
                inline_params(self.uri, position(self.text, at + len(ch), "utf-16"))
            ),
            60,
        )
        return [i.insert_text for i in out.items], time.monotonic() - t0

    async def until_suggested(self, tries: int = 40) -> None:
        """Ask at the end of the text until a suggestion comes (a rebuilt engine is on probation until then)."""
        for _ in range(tries):
            if await self.ask(len(self.text) - 1):
                return
            await asyncio.sleep(0.5)
        pytest.fail("no suggestion after the engine came back")

    async def ask(self, at: int) -> list[str]:
        out = await asyncio.wait_for(
            self.c.text_document_inline_completion_async(inline_params(self.uri, position(self.text, at, "utf-16"))),
            120,
        )
        return [i.insert_text for i in out.items]


def errors(c) -> list[str]:
    return [m.message for m in c.messages if m.type == types.MessageType.Error]


# -- a remote engine that misbehaves ---------------------------------------------------------------------

REMOTE = {"engine": "openai", "openaiTimeoutS": 2, "openaiRetries": 0, "engineStallSeconds": 5}


async def test_a_remote_nobody_listens_on_is_one_message_however_many_requests_and_no_error_lines():
    from tests.servers import free_port

    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    async with lsp(options={**REMOTE, "openaiUrl": url, "openaiRetries": 1}) as (c, _):
        t = Typist(c, "file:///w/remote.py", TEXT)
        for _ in range(4):
            assert await t.ask(TEXT.index("retu") + 4) == []
        await health(c)  # a round trip after the requests: whatever they caused has arrived
        assert len(errors(c)) == 1 and "openai engine did not start" in errors(c)[0]
        assert not [m for m in c.log_messages if m.type == types.MessageType.Error]


# What the outage message names as the cause, per fault: for a hang, the request's own timeout (`openaiTimeoutS`,
# 2 s), not the stall watchdog (`engineStallSeconds`, 5 s).
CAUSE = {"500": "HTTP 500", "garbage": "JSONDecodeError", "drop": "mid-stream", "hang": "timed out"}


@pytest.mark.parametrize("mode", ["500", "garbage", "drop", "hang"])
async def test_a_misbehaving_remote_gets_empty_answers_one_message_and_is_not_hammered(mode):
    server = FaultyOpenAIServer().start()
    try:
        async with lsp(options={**REMOTE, "openaiUrl": server.url}) as (c, _):
            t = Typist(c, "file:///w/remote.py", TEXT)
            cursor = TEXT.index("retu") + 4
            assert await t.ask(cursor)  # served while the server behaves
            server.mode = mode
            served_before = server.completions
            slowest = 0.0
            for i, ch in enumerate("xs = [x]"):  # a user typing on through the outage (not what was suggested)
                items, took = await t.key(ch, cursor + i)
                assert items == []
                slowest = max(slowest, took)
            assert slowest < 30  # a liveness bound (never a hang); what ended each request is named below
            # Three failed requests take the engine down; while it is down nothing is sent (plus at most one
            # probe per restart: the first request after each restart).
            assert server.completions - served_before <= 5
            assert len(errors(c)) == 1 and "openai engine failed" in errors(c)[0]
            assert CAUSE[mode] in errors(c)[0], errors(c)
            server.mode = "ok"
            await until_healthy(c, restarts=1)
            await t.until_suggested()
            assert len(errors(c)) == 1
    finally:
        server.stop()


async def test_a_dead_remote_is_probed_with_backoff_and_picked_up_when_it_returns():
    server = FaultyOpenAIServer().start()
    try:
        async with lsp(options={**REMOTE, "openaiUrl": server.url}) as (c, _):
            t = Typist(c, "file:///w/remote.py", TEXT)
            cursor = TEXT.index("retu") + 4
            assert await t.ask(cursor)
            server.stop()  # the remote server dies
            for i, ch in enumerate("xs = [x]"):
                items, _ = await t.key(ch, cursor + i)
                assert items == []
                if i == 2:  # three failed requests open the circuit: the keystrokes after it are answered at once,
                    h = await health(c)  # nothing sent (the remote being dead, its restarts fail: it stays open)
                    assert not h.ok and "down" in h.detail, h
            h = await health(c)
            assert not h.ok and "down" in h.detail
            server.start()  # it comes back on the same port
            await until_healthy(c, restarts=1, timeout_s=30)
            await t.until_suggested()
            assert len(errors(c)) == 1
    finally:
        server.stop()


# -- the embedded engine's worker dies or hangs ------------------------------------------------------------

MODEL = {"engine": "llamacpp", "threads": 1, "engineStallSeconds": 3}
BODY = 'def area(r):\n    """Area of a circle of radius r."""\n    \n'


@pytest.mark.model
@pytest.mark.parametrize("fault", ["die", "hang"])
async def test_a_llama_cpp_worker_that_dies_or_hangs_mid_stream_is_restarted(fault):
    require("llama_cpp", "the embedded engine")
    # The 12th model call of the process: within the first suggestion's decoding (3 prefill chunks at most).
    env = {"SPARKLS_FAILPOINTS": f"llamacpp.decode={fault}@12"}
    async with lsp(options=MODEL, env=env) as (c, _):
        uri = "file:///w/area.py"
        open_doc(c, uri, BODY)
        cursor = BODY.index("\n    \n") + 5
        cursor_pos = position(BODY, cursor, "utf-16")
        t0 = time.monotonic()
        out = await asyncio.wait_for(c.text_document_inline_completion_async(inline_params(uri, cursor_pos)), 120)
        assert not out.items
        took = time.monotonic() - t0
        assert took < 60  # the model load plus the stall time, not a hang
        assert len(errors(c)) == 1 and "llamacpp engine failed" in errors(c)[0]
        h = await until_healthy(c, restarts=1)
        assert h.stats.restarts == 1
        out = await asyncio.wait_for(c.text_document_inline_completion_async(inline_params(uri, cursor_pos)), 120)
        assert out.items and "return" in out.items[0].insert_text
        # served by the restarted engine (it may end as soon as it is complete)
        assert answers(await metrics(c))[-1].decode_tokens > 0
        assert len(errors(c)) == 1


LONG = (
    "def stats(values):\n    n = len(values)\n    mean = sum(values) / n\n"
    "    var = sum((v - mean) ** 2 for v in values) / n\n    lo = min(values)\n    hi = max(values)\n"
    "    return n, mean, var, lo, hi\n"
)


async def rewrite_command(c, ed: Editor, uri: str, text: str, word: str) -> types.Command:
    pos = ed.pos(uri, text.index("lo = min"))
    found = await c.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=types.Range(start=pos, end=pos),
            context=types.CodeActionContext(diagnostics=[]),
        )
    )
    return next(a for a in found if word in a.title).command


@pytest.mark.model
async def test_a_streaming_edit_cut_short_by_a_dead_worker_leaves_the_buffer_as_it_was():
    require("llama_cpp", "the embedded engine")
    # Late enough that some lines of the rewrite were applied before the worker dies.
    env = {"SPARKLS_FAILPOINTS": "llamacpp.decode=die@60"}
    async with lsp(options=MODEL, env=env) as (c, _):
        ed = Editor(c)
        uri = "file:///w/stats.py"
        ed.open(uri, LONG)
        cmd = await rewrite_command(c, ed, uri, LONG, "docstring")
        out = await asyncio.wait_for(
            c.workspace_execute_command_async(types.ExecuteCommandParams(command=cmd.command, arguments=cmd.arguments)),
            180,
        )
        assert out["reason"] == "error"
        assert len(ed.states) >= 2  # lines were applied, then taken back
        assert ed.texts[uri] == LONG
        assert len(errors(c)) == 1


async def test_shutdown_cancels_a_streaming_edit_and_reverts_it():
    slow = {
        "engine": "fake",
        "fakeTokenDelayMs": 40,
        "fakeResponse": '    """Summary of values."""\n' + LONG.split("\n", 1)[1],
    }
    answered: list[str] = []
    with contextlib.suppress(JsonRpcException):  # the context's own `shutdown` comes second: refused or not
        async with lsp(options=slow) as (c, _):
            ed = Editor(c)
            uri = "file:///w/stats.py"
            ed.open(uri, LONG)
            cmd = await rewrite_command(c, ed, uri, LONG, "docstring")
            fut = asyncio.ensure_future(
                c.workspace_execute_command_async(
                    types.ExecuteCommandParams(command=cmd.command, arguments=cmd.arguments)
                )
            )
            await ed.wait_states(1)
            assert ed.texts[uri] != LONG and not fut.done()
            await asyncio.wait_for(c.shutdown_async(None), 20)
            answered.append(ed.texts[uri])
            with pytest.raises(JsonRpcException) as err:
                await asyncio.wait_for(fut, 10)
            assert err.value.code == types.LSPErrorCodes.RequestCancelled
    assert answered == [LONG]  # reverted before shutdown was answered
