"""`sparkls serve --tcp` and `--ws` accept a client on 127.0.0.1 and answer it."""

from __future__ import annotations

import asyncio
import socket
import sys

import pytest
from lsprotocol import types
from pygls.lsp.client import LanguageClient


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def connect(client: LanguageClient, transport: str, port: int, within_s: float = 20.0) -> None:
    """Connect as soon as the server listens (a probe connection would be taken as the client)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while True:
        try:
            if transport == "tcp":
                await client.start_tcp("127.0.0.1", port)
            else:
                await client.start_ws("127.0.0.1", port)
            return
        except OSError:
            if loop.time() > deadline:
                raise
            await asyncio.sleep(0.1)


@pytest.mark.parametrize("transport", ["tcp", "ws"])
async def test_the_server_answers_over_tcp_and_websocket(transport):
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "sparkls", "serve", f"--{transport}", f"127.0.0.1:{port}",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    try:
        client = LanguageClient("t", "1")
        await connect(client, transport, port)
        result = await asyncio.wait_for(client.initialize_async(types.InitializeParams(
            capabilities=types.ClientCapabilities(), initialization_options={"engine": "fake"})), 20)
        assert result.server_info.name == "sparkls"
        client.text_document_did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(
            uri="file:///w/a.py", language_id="python", version=1, text="def f():\n    \n")))
        comp = await asyncio.wait_for(client.text_document_completion_async(types.CompletionParams(
            text_document=types.TextDocumentIdentifier(uri="file:///w/a.py"),
            position=types.Position(line=1, character=4))), 20)
        assert comp.items[0].text_edit.new_text == "return 42"
        await asyncio.wait_for(client.shutdown_async(None), 10)
        client.exit(None)
        await client.stop()
    finally:
        proc.kill()
        await asyncio.wait_for(proc.wait(), 10)
