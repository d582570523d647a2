"""`sparkls serve --tcp` and `--ws` on 127.0.0.1: a client with the token is served; a foreign web page
(`Origin`), a rebinding host name (`Host`), a missing or wrong token, and a non-loopback bind without
`--allow-remote` are refused; over the network a client cannot choose `modelPath`, `openaiUrl`, `openaiApiKey`
or a folder outside the server's roots (the server's own flags and environment set them); stdio is unchanged."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import stat
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from lsprotocol import types
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import InvalidStatus

from tests.e2e.lsp_client import lsp, open_doc
from tests.servers import FaultyOpenAIServer, free_port

TOKEN = "test-token-5b1f0c"
WAIT_S = 20


def initialize(msg_id: int = 1, **options: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": msg_id,
        "method": "initialize",
        "params": {"capabilities": {}, "initializationOptions": {"engine": "fake", **options}},
    }


def frame(obj: dict[str, Any]) -> bytes:
    body = json.dumps(obj).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


class Tcp:
    """A raw LSP connection over TCP: framed JSON-RPC out and in."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    def send(self, obj: dict[str, Any]) -> None:
        self.writer.write(frame(obj))

    async def recv(self) -> dict[str, Any] | None:
        """The next message, None when the server closed the connection."""
        try:
            head = await asyncio.wait_for(self.reader.readuntil(b"\r\n\r\n"), WAIT_S)
        except asyncio.IncompleteReadError:
            return None
        length = int(head.split(b":", 1)[1].split(b"\r\n", 1)[0])
        return json.loads(await asyncio.wait_for(self.reader.readexactly(length), WAIT_S))

    async def answer(self, msg_id: int) -> dict[str, Any] | None:
        """The response to request `msg_id`, skipping notifications and requests from the server."""
        while (msg := await self.recv()) is not None:
            if msg.get("id") == msg_id and "method" not in msg:
                return msg
        return None

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(OSError):
            await self.writer.wait_closed()


async def tcp(port: int) -> Tcp:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_S
    while True:
        try:
            return Tcp(*await asyncio.open_connection("127.0.0.1", port))
        except OSError:
            if loop.time() > deadline:
                raise
            await asyncio.sleep(0.1)


class Served:
    """A `sparkls serve` process on a free port, its stderr read as it comes (`lines`)."""

    def __init__(self, port: int, proc: asyncio.subprocess.Process) -> None:
        self.port, self.proc = port, proc
        self.lines: list[str] = []
        self.changed = asyncio.Event()
        self.reading = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        assert self.proc.stderr is not None
        while line := await self.proc.stderr.readline():
            self.lines.append(line.decode(errors="replace"))
            self.changed.set()

    async def line_with(self, text: str) -> str:
        """The first stderr line holding `text`, once it is written."""
        while True:
            found = next((line for line in self.lines if text in line), None)
            if found is not None:
                return found
            self.changed.clear()
            try:
                await asyncio.wait_for(self.changed.wait(), WAIT_S)
            except TimeoutError:
                raise AssertionError(f"no stderr line with {text!r} in {self.lines[-4:]}") from None

    async def ended(self) -> str:
        """The process's whole stderr once it has ended."""
        await asyncio.wait_for(self.proc.wait(), WAIT_S)
        await asyncio.wait_for(self.reading, WAIT_S)
        return "".join(self.lines)


@contextlib.asynccontextmanager
async def server(
    transport: str,
    *args: str,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> AsyncIterator[Served]:
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "sparkls",
        "--log-level",
        "DEBUG",
        "serve",
        f"--{transport}",
        f"127.0.0.1:{port}",
        *args,
        env={**os.environ, "SPARKLS_TOKEN": TOKEN, **(env or {})},
        cwd=cwd,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    served = Served(port, proc)
    try:
        yield served
    finally:
        if proc.returncode is None:
            proc.kill()
        await asyncio.wait_for(proc.wait(), 10)
        served.reading.cancel()


async def wait_listening(port: int) -> None:
    """Until a WebSocket handshake gets any HTTP answer (a refusal consumes nothing on the server)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_S
    while True:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            return
        except OSError:
            if loop.time() > deadline:
                raise
            await asyncio.sleep(0.1)


async def ws_status(port: int, name: str = "127.0.0.1", **kwargs: Any) -> int:
    """The HTTP status a WebSocket handshake with these headers gets (101: accepted, then closed here); `name` is
    the host name the client believes it reaches (its `Host` header; the connection goes to 127.0.0.1)."""
    try:
        async with ws_connect(f"ws://{name}:{port}/", open_timeout=WAIT_S, host="127.0.0.1", port=port, **kwargs):
            return 101
    except InvalidStatus as e:
        return e.response.status_code


async def ws_initialize(port: int, name: str = "127.0.0.1", **kwargs: Any) -> dict[str, Any]:
    async with ws_connect(f"ws://{name}:{port}/", open_timeout=WAIT_S, host="127.0.0.1", port=port, **kwargs) as ws:
        await ws.send(json.dumps(initialize()))
        while True:
            msg = json.loads(await asyncio.wait_for(ws.recv(), WAIT_S))
            if msg.get("id") == 1 and "method" not in msg:
                return msg


async def test_tcp_refuses_a_missing_or_wrong_token_and_serves_the_right_one():
    async with server("tcp") as served:
        port = served.port
        for options, reason in (({}, "no token"), ({"token": "guess"}, "wrong token")):
            conn = await tcp(port)
            conn.send(initialize(**options))
            refused = await conn.recv()
            assert refused is not None and refused["id"] == 1 and reason in refused["error"]["message"], refused
            assert await conn.recv() is None  # closed: nothing served
            await conn.close()
        conn = await tcp(port)
        conn.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})  # not initialize: refused too
        refused = await conn.recv()
        assert refused is not None and "must be `initialize`" in refused["error"]["message"]
        await conn.close()
        conn = await tcp(port)  # the server still listens: the user's client gets in
        conn.send(initialize(token=TOKEN))
        answer = await conn.answer(1)
        assert answer is not None and answer["result"]["serverInfo"]["name"] == "sparkls"
        conn.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
        conn.send(
            {
                "jsonrpc": "2.0",
                "method": "textDocument/didOpen",
                "params": {
                    "textDocument": {
                        "uri": "file:///w/a.py",
                        "languageId": "python",
                        "version": 1,
                        "text": "def f():\n    \n",
                    }
                },
            }
        )
        conn.send(
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "textDocument/completion",
                "params": {"textDocument": {"uri": "file:///w/a.py"}, "position": {"line": 1, "character": 4}},
            }
        )
        completion = await conn.answer(2)
        assert completion is not None and completion["result"]["items"][0]["textEdit"]["newText"] == "return 42"
        second = await tcp(port)  # one client at a time: a second one, even with the token, is refused
        second.send(initialize(token=TOKEN))
        refused = await second.recv()
        assert refused is not None and "another client" in refused["error"]["message"]
        await second.close()
        await conn.close()


async def test_a_websocket_from_a_foreign_origin_a_rebinding_host_or_without_the_token_gets_no_answer():
    async with server("ws", "--allow-origin", "http://editor.example") as served:
        port = served.port
        await wait_listening(port)
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        assert await ws_status(port, origin="http://evil.example", additional_headers=bearer) == 403
        assert await ws_status(port, "evil.example", additional_headers=bearer) == 403  # DNS rebinding
        assert (
            await ws_status(
                port, additional_headers={**bearer, "Origin": "http://evil.example", "origin": "http://editor.example"}
            )
            == 403
        )  # two: refused
        assert await ws_status(port) == 401
        assert await ws_status(port, additional_headers={"Authorization": "Bearer guess"}) == 401
        assert await ws_status(port, subprotocols=["sparkls", "sparkls.token.guess"]) == 401  # type: ignore[list-item]
        # An allowed origin with the token as a subprotocol entry (what a browser can send) is served.
        answer = await ws_initialize(
            port, origin="http://editor.example", subprotocols=["sparkls", f"sparkls.token.{TOKEN}"]
        )  # type: ignore[list-item]
        assert answer["result"]["serverInfo"]["name"] == "sparkls"
        log = await served.ended()  # its client went: the server ends
        assert "evil.example is not allowed" in log and "wrong token" in log
        assert TOKEN not in log  # never logged, not even at DEBUG


async def test_a_websocket_with_the_bearer_token_is_served_under_a_loopback_name():
    async with server("ws") as served:
        await wait_listening(served.port)
        answer = await ws_initialize(served.port, "localhost", additional_headers={"Authorization": f"Bearer {TOKEN}"})
        assert answer["result"]["serverInfo"]["name"] == "sparkls"


async def test_without_a_token_one_is_generated_into_a_file_only_the_user_can_read(tmp_path):
    env = {"SPARKLS_TOKEN": "", "XDG_RUNTIME_DIR": str(tmp_path)}
    async with server("tcp", env=env) as served:
        line = await served.line_with("present the token in")
        path = tmp_path / "sparkls" / "token"
        assert str(path) in line
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        conn = await tcp(served.port)
        conn.send(initialize(token=path.read_text().strip()))
        answer = await conn.answer(1)
        assert answer is not None and "result" in answer
        await conn.close()


@pytest.mark.parametrize(
    "args, reason",
    [
        ((), "not a loopback address"),
        (("--allow-remote",), "--allow-remote needs a token"),
    ],
)
async def test_a_non_loopback_bind_is_refused_without_allow_remote_and_a_given_token(args, reason):
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "sparkls",
        "serve",
        "--tcp",
        "0.0.0.0:1",
        *args,
        env={**os.environ, "SPARKLS_TOKEN": ""},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(proc.communicate(), WAIT_S)
    assert proc.returncode == 2 and reason in err.decode(), err.decode()


async def test_over_the_network_the_client_cannot_choose_the_model_the_remote_server_its_key_or_folders(tmp_path):
    mine, theirs = FaultyOpenAIServer().start(), FaultyOpenAIServer().start()
    inside = tmp_path / "project"
    inside.mkdir()
    try:
        env = {"SPARKLS_OPENAI_API_KEY": "server-key"}
        async with server("tcp", "--openai-url", mine.url, env=env, cwd=tmp_path) as served:
            conn = await tcp(served.port)
            request = initialize(
                token=TOKEN,
                engine="openai",
                openaiUrl=theirs.url,
                openaiApiKey="their-key",
                modelPath="/etc/passwd",
                openaiModel="faulty",
            )
            request["params"]["workspaceFolders"] = [
                {"uri": Path("/etc").as_uri(), "name": "etc"},
                {"uri": inside.as_uri(), "name": "project"},
            ]
            conn.send(request)
            shown: list[str] = []
            while (msg := await conn.recv()) is not None and msg.get("id") != 1:
                if msg.get("method") == "window/showMessage":
                    shown.append(msg["params"]["message"])
            conn.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
            conn.send(
                {
                    "jsonrpc": "2.0",
                    "method": "textDocument/didOpen",
                    "params": {
                        "textDocument": {
                            "uri": (inside / "a.py").as_uri(),
                            "languageId": "python",
                            "version": 1,
                            "text": "def f():\n    \n",
                        }
                    },
                }
            )
            conn.send(
                {
                    "jsonrpc": "2.0",
                    "id": 2,
                    "method": "textDocument/completion",
                    "params": {
                        "textDocument": {"uri": (inside / "a.py").as_uri()},
                        "position": {"line": 1, "character": 4},
                    },
                }
            )
            while (msg := await conn.recv()) is not None and msg.get("id") != 2:
                if msg.get("method") == "window/showMessage":
                    shown.append(msg["params"]["message"])
            assert msg is not None and msg["result"]["items"], msg  # answered by the server's own engine URL
            await conn.close()
        for setting in ("`modelPath`", "`openaiUrl`", "`openaiApiKey`"):
            assert sum(setting in m for m in shown) == 1, shown
        assert any("/etc is outside" in m for m in shown) and not any(str(inside) in m for m in shown), shown
        assert mine.completions >= 1 and theirs.completions == 0
        assert set(mine.authorizations) == {"Bearer server-key"}
    finally:
        mine.stop()
        theirs.stop()


async def test_over_stdio_the_client_still_chooses_its_engine_url_and_folders(tmp_path):
    theirs = FaultyOpenAIServer().start()
    try:
        options = {"engine": "openai", "openaiUrl": theirs.url, "openaiModel": "faulty", "openaiApiKey": "k"}
        async with lsp(options=options, root=Path("/etc")) as (c, _):
            open_doc(c, "file:///w/a.py", "def f():\n    \n")
            result = await asyncio.wait_for(
                c.text_document_completion_async(
                    types.CompletionParams(
                        text_document=types.TextDocumentIdentifier(uri="file:///w/a.py"),
                        position=types.Position(line=1, character=4),
                    )
                ),
                WAIT_S,
            )
            assert result is not None
            assert not [m for m in c.messages if "cannot be set" in m.message or "outside" in m.message]
        assert theirs.completions >= 1 and set(theirs.authorizations) == {"Bearer k"}
    finally:
        theirs.stop()
