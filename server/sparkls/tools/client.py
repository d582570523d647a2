"""A small LSP client over stdio for `sparkls demo` and the benchmarks: it starts the real server
as a subprocess, drains its stderr to a log file, and converts offsets to UTF-16 positions."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
from lsprotocol import types
from pygls.lsp.client import LanguageClient

from sparkls.text.positions import LineIndex


@attrs.define
class CodeActionsResponse:
    """lsprotocol structures a `Command | CodeAction` that has a `command` field as a Command (editors
    tell them apart by the field's type: a string in a Command, an object in a CodeAction), losing the
    action's command; read code action lists as CodeActions instead."""

    id: int | str
    result: list[types.CodeAction] | None
    jsonrpc: str = "2.0"


def read_code_actions_as_code_actions(client: Any) -> None:
    proto = client.protocol
    result_type = proto.get_result_type
    proto.get_result_type = lambda m: CodeActionsResponse if m == types.TEXT_DOCUMENT_CODE_ACTION else result_type(m)


def position(text: str, offset: int) -> types.Position:
    """UTF-16 LSP position of a string offset (the encoding every client supports)."""
    line, character = LineIndex.of(text).position(offset, "utf-16")
    return types.Position(line=line, character=character)


Workspace = tuple[str | None, list[types.WorkspaceFolder] | None]


def workspace_of(root: Path | None, folders: Sequence[Path] | None) -> Workspace:
    """`rootUri` and `workspaceFolders` of an initialize request (`folders` default to `[root]`)."""
    paths = [p.absolute() for p in (folders or ([root] if root is not None else []))]
    if not paths:
        return None, None
    root_uri = (root.absolute() if root is not None else paths[0]).as_uri()
    return root_uri, [types.WorkspaceFolder(uri=p.as_uri(), name=p.name) for p in paths]


async def _drain(stream: asyncio.StreamReader, path: Path) -> None:
    """Copy the server's stderr to a file (an undrained pipe would block the server)."""
    with path.open("wb") as f:
        while line := await stream.readline():
            f.write(line)
            f.flush()


class Client:
    def __init__(self, log_path: Path) -> None:
        self.lc = LanguageClient("sparkls-client", "0.1")
        read_code_actions_as_code_actions(self.lc)
        self.log_path = log_path
        self._drain: asyncio.Task[None] | None = None

    async def start(
        self,
        options: dict[str, Any],
        root: Path | None = None,
        folders: Sequence[Path] | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        """Start the server and initialize it; `root` (and `folders`, default `[root]`) become the
        initialize request's `rootUri` and `workspaceFolders`, the places the server reads other files from.
        `env` replaces the server's environment (a benchmark runs another checkout's server through it)."""
        await self.lc.start_io(sys.executable, "-m", "sparkls", "serve", env=env)
        server = self.lc._server
        assert server is not None and server.stderr is not None  # start_io just started it with pipes
        self._drain = asyncio.create_task(_drain(server.stderr, self.log_path))
        root_uri, workspace = workspace_of(root, folders)
        caps = types.ClientCapabilities(
            text_document=types.TextDocumentClientCapabilities(
                inline_completion=types.InlineCompletionClientCapabilities(),
                code_action=types.CodeActionClientCapabilities(
                    resolve_support=types.ClientCodeActionResolveOptions(properties=["edit"])
                ),
            ),
            workspace=types.WorkspaceClientCapabilities(
                workspace_edit=types.WorkspaceEditClientCapabilities(document_changes=True),
                workspace_folders=True if workspace else None,
            ),
            general=types.GeneralClientCapabilities(position_encodings=[types.PositionEncodingKind.Utf16]),
        )
        await self.lc.initialize_async(
            types.InitializeParams(
                capabilities=caps, initialization_options=options, root_uri=root_uri, workspace_folders=workspace
            )
        )
        self.lc.initialized(types.InitializedParams())

    def request(self, method: str, params: Any = None, msg_id: Any = None) -> asyncio.Future[Any]:
        """Send the request now (in order with the notifications sent before and after it); await its answer."""
        return self.lc.protocol.send_request_async(method, params, msg_id=msg_id)

    async def wait_ready(self) -> Any:
        health = await self.request("sparkls/health")
        while not health.ok and health.detail == "loading":
            await asyncio.sleep(0.2)
            health = await self.request("sparkls/health")
        return health

    def open(self, uri: str, text: str, language: str, version: int = 1) -> None:
        self.lc.text_document_did_open(
            types.DidOpenTextDocumentParams(
                types.TextDocumentItem(uri=uri, language_id=language, version=version, text=text)
            )
        )

    def close(self, uri: str) -> None:
        self.lc.text_document_did_close(
            types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
        )

    def insert(self, uri: str, version: int, text: str, offset: int, new: str) -> None:
        pos = position(text, offset)
        self.lc.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
                content_changes=[
                    types.TextDocumentContentChangePartial(range=types.Range(start=pos, end=pos), text=new)
                ],
            )
        )

    def inline_params(self, uri: str, text: str, offset: int, invoked: bool = False) -> types.InlineCompletionParams:
        kind = types.InlineCompletionTriggerKind.Invoked if invoked else types.InlineCompletionTriggerKind.Automatic
        return types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=position(text, offset),
            context=types.InlineCompletionContext(trigger_kind=kind),
        )

    def cancel(self, msg_id: Any) -> None:
        self.lc.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id=msg_id))

    async def stop(self) -> None:
        try:
            await asyncio.wait_for(self.lc.shutdown_async(None), 30)
            self.lc.exit(None)
        finally:
            server = self.lc._server
            if server is not None and server.returncode is None:
                await asyncio.sleep(0.5)
                if server.returncode is None:
                    server.kill()
            await self.lc.stop()
            if self._drain is not None:
                self._drain.cancel()
