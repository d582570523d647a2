"""Start the real server over stdio with pytest-lsp's client, as a given editor would."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

CLIENTS = ["visual-studio-code", "neovim", "emacs"]
HELIX = Path(__file__).resolve().parents[2].parent / "shared" / "clients" / "helix.json"


def capabilities(client: str, encoding: str | None = None) -> types.ClientCapabilities:
    """The client's recorded capabilities, with `inlineCompletion` added and one position encoding."""
    if client == "helix":
        from pygls.protocol import default_converter

        raw = json.loads(HELIX.read_text())["capabilities"]
        caps = default_converter().structure(raw, types.ClientCapabilities)
    else:
        caps = client_capabilities(client)
        td = caps.text_document or types.TextDocumentClientCapabilities()
        td.inline_completion = types.InlineCompletionClientCapabilities()
        caps.text_document = td
    if encoding is not None:
        general = caps.general or types.GeneralClientCapabilities()
        general.position_encodings = [types.PositionEncodingKind(encoding)]
        caps.general = general
    return caps


@contextlib.asynccontextmanager
async def lsp(
    client: str = "visual-studio-code",
    encoding: str | None = "utf-16",
    options: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
    root: Path | None = None,
    shutdown: bool = True,  # False: the test ends the server itself
) -> AsyncIterator[tuple[LanguageClient, types.InitializeResult]]:
    level = os.environ.get("SPARKLS_TEST_LOG_LEVEL", "INFO")
    config = ClientServerConfig(
        server_command=[sys.executable, "-m", "sparkls", "--log-level", level, "serve"],
        server_env={**os.environ, **env} if env else None,
    )
    c: LanguageClient = await config.start()  # type: ignore[assignment]
    try:
        result = await c.initialize_session(
            types.InitializeParams(
                capabilities=capabilities(client, encoding),
                initialization_options=options or {"engine": "fake"},
                root_uri=root.as_uri() if root is not None else None,
                workspace_folders=[types.WorkspaceFolder(uri=root.as_uri(), name=root.name)]
                if root is not None
                else None,
            )
        )
        yield c, result
        if shutdown:
            await asyncio.wait_for(c.shutdown_session(), 20)
    finally:
        server = c._server
        if server is not None and server.returncode is None:
            # A failed test must not leave the server, or an engine process it started (vLLM's engine
            # core holds the server's stderr open, so the client's stop would wait forever), behind.
            kill_tree(server.pid)
        await c.stop()


def kill_tree(pid: int) -> None:
    import signal

    try:
        import psutil

        children = psutil.Process(pid).children(recursive=True)
    except Exception:
        children = []
    for p in children:
        with contextlib.suppress(Exception):
            p.kill()
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def open_doc(c: LanguageClient, uri: str, text: str, language: str = "python", version: int = 1) -> None:
    c.text_document_did_open(
        types.DidOpenTextDocumentParams(
            types.TextDocumentItem(uri=uri, language_id=language, version=version, text=text)
        )
    )


def position(text: str, offset: int, encoding: str) -> types.Position:
    line = text.count("\n", 0, offset)
    before = text[text.rfind("\n", 0, offset) + 1 : offset]
    if encoding == "utf-8":
        ch = len(before.encode("utf-8"))
    elif encoding == "utf-16":
        ch = len(before.encode("utf-16-le")) // 2
    else:
        ch = len(before)
    return types.Position(line=line, character=ch)


def inline_params(uri: str, pos: types.Position) -> types.InlineCompletionParams:
    return types.InlineCompletionParams(
        text_document=types.TextDocumentIdentifier(uri=uri),
        position=pos,
        context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Automatic),
    )


async def metrics(c: LanguageClient) -> Any:
    return await asyncio.wait_for(c.protocol.send_request_async("sparkls/metrics", None), 30)


def answers(m: Any) -> list[Any]:
    """`sparkls/metrics`' engine requests that answered suggestions, in order, without warm-ups (with
    `firstWindowTokens`, the default, the full prompt is prefilled in the background after a first answer)."""
    return [e for e in m.engine if not e.requestId.startswith("warm-")]


async def health(c: LanguageClient) -> Any:
    """`sparkls/health`. The server handles messages in order, so once it answers, whatever the messages sent
    before it caused (a `window/showMessage`, say) has arrived."""
    return await asyncio.wait_for(c.protocol.send_request_async("sparkls/health", None), 30)


async def until_in_engine(c: LanguageClient, timeout_s: float = 60) -> None:
    """Wait until the suggestion asked for last is in the engine (`sparkls/health`: a suggestion job runs and the
    engine holds a request; a running suggestion stops any warm-up): a cancel or a keystroke sent now meets it there."""
    deadline = time.monotonic() + timeout_s
    while True:
        h = await health(c)
        if h.server.suggestionJobs >= 1 and getattr(h.stats, "open_requests", 0) >= 1:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"no suggestion reached the engine within {timeout_s:.0f} s: {h}")
        await asyncio.sleep(0.01)


async def raw_request(c: LanguageClient, method: str, params: Any, msg_id: int = 90001) -> Any:
    """Send a request as raw JSON (bypassing the client's type checks) and await its response."""
    import concurrent.futures

    fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
    c.protocol._request_futures[msg_id] = fut
    message = {"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params}
    if params is ...:  # left out, as JSON-RPC allows
        del message["params"]
    body = json.dumps(message).encode()
    c._server.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)  # type: ignore[union-attr]
    import asyncio

    return await asyncio.wait_for(asyncio.wrap_future(fut), 10)
